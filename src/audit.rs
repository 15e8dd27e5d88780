//! `verify`'s pipeline: pages of stored snapshots read in id order while the pages before them
//! are re-proved on every core (the pure re-proof is `verify` in the core); the command prints.

use crate::store::{Store, StoreError, StoredSnapshot};
use crate::verify;

/// One snapshot as `verify` reports it: which, and what is wrong with it (nothing when it
/// verifies).
#[derive(Debug)]
// The undocumented fields are the snapshot row's columns of the same names.
#[allow(missing_docs)]
pub struct Checked {
    pub project_id: String,
    pub snapshot_id: i64,
    pub snapshot_digest: String,
    /// What is wrong with it, each a sentence that says what to do.
    pub problems: Vec<String>,
}

/// Checks a page on the blocking pool. Re-proving a snapshot is CPU work (parse, canonical
/// form, four digests), several times the cost of reading it, so pages are checked on every
/// core while the next one is read.
fn check_page(page: Vec<StoredSnapshot>) -> tokio::task::JoinHandle<Vec<Checked>> {
    tokio::task::spawn_blocking(move || {
        page.into_iter()
            .map(|s| Checked {
                problems: verify::problems(&s),
                project_id: s.project_id,
                snapshot_id: s.snapshot_id,
                snapshot_digest: s.snapshot_digest,
            })
            .collect()
    })
}

/// The document bytes after which a page of `verify` stops. A row comes while the documents
/// before it hold less than this, so a page holds at most this plus one document (8 MiB at
/// most): with a page checked on each core and the next one being read, `verify` holds a few
/// pages of 12 MiB at most, however large the documents are.
const PAGE_BYTES: i64 = 4 << 20;

/// Re-proves every stored snapshot (of `project`, or all), handing each checked page to
/// `report` in id order. Pages being checked at once: one per core; each holds up to 16
/// snapshots and at most `PAGE_BYTES` plus one document, so memory stays a few pages whatever
/// the table's size.
pub async fn verify_all<E>(
    store: &Store,
    project: Option<&str>,
    mut report: impl FnMut(Vec<Checked>) -> Result<(), E>,
) -> Result<(), E>
where
    E: From<StoreError> + From<tokio::task::JoinError>,
{
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut after = 0i64;
    let mut in_flight = std::collections::VecDeque::with_capacity(workers);
    loop {
        let page = store.snapshot_page(after, project, PAGE_BYTES).await?;
        let Some(last) = page.last() else { break };
        after = last.snapshot_id;
        in_flight.push_back(check_page(page));
        // Reported in id order: the oldest page first.
        if in_flight.len() >= workers
            && let Some(oldest) = in_flight.pop_front()
        {
            report(oldest.await?)?;
        }
    }
    while let Some(oldest) = in_flight.pop_front() {
        report(oldest.await?)?;
    }
    Ok(())
}
