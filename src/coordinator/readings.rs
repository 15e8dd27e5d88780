//! Revisions a batch has read, kept for its later projects: a revision that several projects of
//! one batch share is parsed once, and fetched once when it is read in a statement of its own
//! (docs/contract.md, section 9, "A run").
//!
//! A reading ([`Streamed`]: the digest of the bytes and the reader's verdict) depends on the
//! revision's bytes, named by its digest, on the installation's package name and on the
//! generation's approved permissions, and on nothing else: [`SnapshotBuilder::add_streamed`]
//! checks the digest against the head and takes the verdict. So a head with the same three
//! gets from a kept reading exactly what reading its revision again would give, rejections
//! included, in the same order of checks.
//!
//! Only readings that a later head of the batch may ask for are kept ([`Readings::shared`]:
//! a batch knows all its heads from its opening), so a batch of unshared revisions
//! copies nothing. Only a reading whose digest matched is kept: its bytes are the ones the
//! digest names, whoever reads them. Each kept reading holds its size against the memory
//! budget, taken without waiting; one that does not fit is not kept, and its next head reads
//! the revision again. A batch never waits for the budget while it holds readings (its reads
//! take `Now`), so it cannot wait on itself. A project alone keeps none: its reads wait
//! for the budget.
//!
//! What still comes more than once: revisions small enough to come with the opening come with
//! each project that has them (the opening inlines each project's own); they are parsed once.
//! Larger ones, read in statements of their own, are fetched once.
//!
//! [`SnapshotBuilder::add_streamed`]: crate::planner::SnapshotBuilder::add_streamed

use std::collections::{HashMap, HashSet};

use crate::revision::Streamed;

use super::budget::{MemoryBudget, Reservation};

/// What a reading depends on: revision digest, package name, approved permissions.
type Key = (String, String, Vec<String>);

fn key(digest: &str, package: &str, approved: &[String]) -> Key {
    (digest.to_owned(), package.to_owned(), approved.to_vec())
}

/// The readings an attempt keeps (none for a lone attempt).
pub(super) struct Readings {
    /// `None`: keep nothing.
    budget: Option<MemoryBudget>,
    /// The (revision, package) pairs more than one head of the batch has.
    wanted: HashSet<(String, String)>,
    kept: HashMap<Key, (Streamed, Reservation)>,
    /// Heads that took a kept reading instead of fetching and parsing their revision.
    reused: u64,
}

impl Readings {
    /// Keeps nothing: a lone attempt's heads never share a revision under one package name.
    pub(super) fn none() -> Self {
        Self {
            budget: None,
            wanted: HashSet::new(),
            kept: HashMap::new(),
            reused: 0,
        }
    }

    /// Keeps the readings of every (revision, package) that more than one of `heads` has,
    /// each against `budget`.
    pub(super) fn shared<'h>(
        budget: &MemoryBudget,
        heads: impl IntoIterator<Item = (&'h str, &'h str)>,
    ) -> Self {
        let mut seen = HashSet::new();
        let mut wanted = HashSet::new();
        for (digest, package) in heads {
            if !seen.insert((digest, package)) {
                wanted.insert((digest.to_owned(), package.to_owned()));
            }
        }
        Self {
            budget: Some(budget.clone()),
            wanted,
            kept: HashMap::new(),
            reused: 0,
        }
    }

    /// Whether a reading for these is kept (the head needs no fetch).
    pub(super) fn has(&self, digest: &str, package: &str, approved: &[String]) -> bool {
        !self.kept.is_empty() && self.kept.contains_key(&key(digest, package, approved))
    }

    /// A copy of the kept reading for these, if there is one.
    pub(super) fn take(
        &mut self,
        digest: &str,
        package: &str,
        approved: &[String],
    ) -> Option<Streamed> {
        if self.kept.is_empty() {
            return None;
        }
        let (streamed, _) = self.kept.get(&key(digest, package, approved))?;
        self.reused += 1;
        Some(streamed.clone())
    }

    /// Keeps a copy of `streamed` if a later head wants it and its size fits the budget now.
    pub(super) fn keep(
        &mut self,
        digest: &str,
        package: &str,
        approved: &[String],
        streamed: &Streamed,
    ) {
        let Some(budget) = self.budget.as_ref().filter(|_| !self.wanted.is_empty()) else {
            return;
        };
        let wanted = self
            .wanted
            .contains(&(digest.to_owned(), package.to_owned()));
        if !wanted || streamed.digest.as_str() != digest {
            return;
        }
        let k = key(digest, package, approved);
        if self.kept.contains_key(&k) {
            return;
        }
        if let Some(reservation) = budget.try_reserve(streamed.held_bytes()) {
            self.kept.insert(k, (streamed.clone(), reservation));
        }
    }

    /// Heads that took a kept reading.
    pub(super) fn reused(&self) -> u64 {
        self.reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revision::RevisionStream;

    fn read(bytes: &[u8], package: &str, approved: &[String]) -> Streamed {
        let mut stream = RevisionStream::new(package, approved);
        stream.feed(bytes);
        stream.finish()
    }

    const REVISION: &[u8] = br#"{"schema":"qinglong/materialized-revision@v1","package":{"name":"x","version":"1.0.0"},"tools":[{"name":"t","description":"d","inputSchema":{"type":"object"}}]}"#;

    /// Kept only when a later head may want it and its digest matched; a copy is what reading
    /// again gives; a key that differs in package or permissions is another reading.
    #[test]
    fn a_reading_is_kept_for_the_heads_that_share_it() {
        let budget = MemoryBudget::new(1 << 20);
        let none: Vec<String> = Vec::new();
        let some = vec!["network".to_owned()];
        let first = read(REVISION, "x", &none);
        let a = first.digest.as_str().to_owned();
        let b = format!("sha256:{}", "b".repeat(64));
        let heads = [(a.as_str(), "x"), (a.as_str(), "x"), (b.as_str(), "x")];
        let mut readings = Readings::shared(&budget, heads);
        readings.keep(&b, "x", &none, &first);
        assert!(
            !readings.has(&b, "x", &none),
            "no later head wants b, nor does it hash to b"
        );
        readings.keep(&a, "x", &none, &first);
        assert!(readings.has(&a, "x", &none));
        assert!(
            !readings.has(&a, "x", &some),
            "other permissions, another reading"
        );
        assert!(
            !readings.has(&a, "y", &none),
            "another package, another reading"
        );
        assert!(budget.available_kib() < 1024, "the kept copy holds budget");
        let again = readings
            .take(&a, "x", &none)
            .map(|s| (s.digest.clone(), s.extract()));
        let fresh = read(REVISION, "x", &none);
        assert_eq!(again, Some((fresh.digest.clone(), fresh.extract())));
        assert_eq!(readings.reused(), 1);
        drop(readings);
        assert_eq!(budget.available_kib(), 1024, "dropped with the attempt");
    }

    /// A reading that does not fit the budget now is not kept, nor one whose bytes do not hash
    /// to their digest, and a lone attempt keeps none.
    #[test]
    fn a_reading_that_is_not_kept_is_read_again() {
        let budget = MemoryBudget::new(1024);
        let none: Vec<String> = Vec::new();
        let first = read(REVISION, "x", &none);
        let a = first.digest.as_str().to_owned();
        let held = budget.try_reserve(1024);
        assert!(held.is_some());
        let altered = format!("sha256:{}", "c".repeat(64));
        let heads = [&a, &a, &altered, &altered].map(|d| (d.as_str(), "x"));
        let mut readings = Readings::shared(&budget, heads);
        readings.keep(&a, "x", &none, &first);
        assert!(!readings.has(&a, "x", &none), "no budget free");
        drop(held);
        readings.keep(&altered, "x", &none, &first);
        assert!(
            !readings.has(&altered, "x", &none),
            "a digest mismatch is read again"
        );
        readings.keep(&a, "x", &none, &first);
        assert!(readings.has(&a, "x", &none));
        let mut lone = Readings::none();
        lone.keep(&a, "x", &none, &first);
        assert!(lone.take(&a, "x", &none).is_none());
    }
}
