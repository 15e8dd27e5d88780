//! Outcomes, the run summary, exit codes and the termination message (contract sections 6 and 10).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::exit::Exit;
use crate::model::Digest;
use crate::rejection::ReportedCode;

/// Why a project is still pending after its attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unresolved {
    /// The vector changed between observations.
    VectorDrift,
    /// A generation changed between observations or is not active.
    GenerationDrift,
    /// A transient database error.
    Database,
    /// Another replica held the claim every time.
    ClaimedElsewhere,
    /// The claim was not this run's, yet at the run's end no executor held it and the project
    /// was not current: nothing shows that an executor is building it (or it has no claim row,
    /// so no executor can). Never counted as success.
    ClaimUnverified,
}

impl Unresolved {
    /// Every code, in the contract's order.
    pub const ALL: [Unresolved; 5] = [
        Self::VectorDrift,
        Self::GenerationDrift,
        Self::Database,
        Self::ClaimedElsewhere,
        Self::ClaimUnverified,
    ];

    /// The code string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VectorDrift => "vector-drift",
            Self::GenerationDrift => "generation-drift",
            Self::Database => "database",
            Self::ClaimedElsewhere => "claimed-elsewhere",
            Self::ClaimUnverified => "claim-unverified",
        }
    }
}

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An integrity violation's code (contract section 6). There is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Violation {
    /// A different snapshot exists for this vector.
    ReplayMismatch,
}

impl Violation {
    /// The code string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReplayMismatch => "replay-mismatch",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Projects counted by code, in the contract's order of the codes (a rejection's precedence;
/// words of a newer build last). JSON: an object of code to count, holding only the codes
/// counted; text: `code count, code count`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally<K>(BTreeMap<K, u64>);

impl<K: Ord> Tally<K> {
    /// Counts one more under `code`.
    pub fn add(&mut self, code: K) {
        *self.0.entry(code).or_default() += 1;
    }

    /// The count under `code` (0 when none).
    pub fn get(&self, code: &K) -> u64 {
        self.0.get(code).copied().unwrap_or(0)
    }

    /// Every count together.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The codes counted and their counts, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, u64)> {
        self.0.iter().map(|(k, n)| (k, *n))
    }
}

impl<K> Default for Tally<K> {
    fn default() -> Self {
        Self(BTreeMap::new())
    }
}

impl<K: fmt::Display> Tally<K> {
    /// The codes counted, as their contract text, and their counts, in order: the JSON's keys
    /// and the metrics' `reason` labels.
    pub fn by_text(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.0.iter().map(|(k, n)| (k.to_string(), *n))
    }
}

impl<K: fmt::Display> Serialize for Tally<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.by_text())
    }
}

impl<K: fmt::Display> fmt::Display for Tally<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, n)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k} {n}")?;
        }
        Ok(())
    }
}

/// How one build attempt (or a project's last attempt) ended. A `snapshot_digest` is the
/// snapshot row's (`None` only once a run has dropped it, see [`Outcome::compact`]); a `detail` says what is wrong and what to do next, quoting at most 256 bytes
/// of any input (contract section 10).
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // the fields, said once above
pub enum Outcome {
    /// A new snapshot row was committed.
    Published { snapshot_digest: Option<Digest> },
    /// An identical snapshot for this vector already existed.
    Replayed { snapshot_digest: Option<Digest> },
    /// The project was current when the attempt began.
    AlreadyCurrent { snapshot_digest: Option<Digest> },
    /// Fail closed for this vector.
    Rejected { code: ReportedCode, detail: String },
    /// Still pending (transient): the next run retries it.
    Unresolved { reason: Unresolved, detail: String },
    /// `replay-mismatch`: a different snapshot exists for this vector.
    Integrity { detail: String },
    /// The project's row was gone at an observation (deleted outright): no snapshot, its mark
    /// cleared; not a failure (contract section 9).
    Vanished,
}

impl Outcome {
    /// The same outcome with its detail and digest dropped: what a run keeps of each project
    /// past the first `KEPT_OUTCOMES` (the coordinator's), to count it once across passes.
    pub fn compact(self) -> Self {
        match self {
            Self::Published { .. } => Self::Published {
                snapshot_digest: None,
            },
            Self::Replayed { .. } => Self::Replayed {
                snapshot_digest: None,
            },
            Self::AlreadyCurrent { .. } => Self::AlreadyCurrent {
                snapshot_digest: None,
            },
            Self::Rejected { code, .. } => Self::Rejected {
                code,
                detail: String::new(),
            },
            Self::Unresolved { reason, .. } => Self::Unresolved {
                reason,
                detail: String::new(),
            },
            Self::Integrity { .. } => Self::Integrity {
                detail: String::new(),
            },
            Self::Vanished => Self::Vanished,
        }
    }

    /// The outcome word of contract section 6.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Published { .. } => "published",
            Self::Replayed { .. } => "replayed",
            Self::AlreadyCurrent { .. } => "already-current",
            Self::Rejected { .. } => "rejected",
            Self::Unresolved { .. } => "unresolved",
            Self::Integrity { .. } => "integrity-violation",
            Self::Vanished => "vanished",
        }
    }

    /// The reason code, where one applies.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Rejected { code, .. } => Some(code.as_str()),
            Self::Unresolved { reason, .. } => Some(reason.as_str()),
            Self::Integrity { .. } => Some(Violation::ReplayMismatch.as_str()),
            _ => None,
        }
    }

    /// The human detail, where one applies.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Self::Rejected { detail, .. }
            | Self::Unresolved { detail, .. }
            | Self::Integrity { detail } => Some(detail),
            _ => None,
        }
    }

    /// The snapshot digest, where one applies and the run kept it.
    pub fn snapshot_digest(&self) -> Option<&Digest> {
        match self {
            Self::Published { snapshot_digest }
            | Self::Replayed { snapshot_digest }
            | Self::AlreadyCurrent { snapshot_digest } => snapshot_digest.as_ref(),
            _ => None,
        }
    }

    /// Exit code of `publish` for this outcome: a project deleted while it was built is an
    /// unknown project by the end, which `publish` reports as an error (1), as it does one
    /// unknown from the start.
    pub fn publish_exit(&self) -> Exit {
        match self {
            Self::Published { .. } | Self::Replayed { .. } | Self::AlreadyCurrent { .. } => {
                Exit::Ok
            }
            Self::Vanished => Exit::Error,
            Self::Rejected { .. } => Exit::Rejected,
            Self::Unresolved { .. } => Exit::Unresolved,
            Self::Integrity { .. } => Exit::Integrity,
        }
    }
}

/// `publish --json`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
// The fields are the members of the same names in contract section 10 (JSON output), taken
// from the outcome's accessors of the same names.
#[allow(missing_docs)]
pub struct PublishResult<'a> {
    pub project_id: &'a str,
    pub outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_digest: Option<&'a str>,
}

impl<'a> PublishResult<'a> {
    /// The JSON line for an outcome.
    pub fn new(project_id: &'a str, o: &'a Outcome) -> Self {
        Self {
            project_id,
            outcome: o.name(),
            reason: o.reason(),
            detail: o.detail(),
            snapshot_digest: o.snapshot_digest().map(Digest::as_str),
        }
    }
}

/// The shard a replica serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Shard {
    /// This replica's index.
    pub index: u64,
    /// Number of shards.
    pub count: u64,
}

impl Shard {
    /// Whether a project belongs to this shard: `u64::from_be_bytes(sha256(id)[0..8]) % count`.
    pub fn owns(&self, project_id: &str) -> bool {
        use sha2::{Digest as _, Sha256};
        let h = Sha256::digest(project_id.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&h[..8]);
        u64::from_be_bytes(first) % self.count == self.index
    }
}

/// The run summary (`run --json`, `--summary-file`, the termination message).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// Always `package-executor/run-summary@v1`.
    pub schema: &'static str,
    /// The process's exit code.
    pub exit_code: Exit,
    /// Distinct projects attempted.
    pub projects_scanned: u64,
    /// Projects whose last outcome was `published`, `replayed`, `already-current`.
    pub published: u64,
    #[allow(missing_docs)]
    pub replayed: u64,
    #[allow(missing_docs)]
    pub already_current: u64,
    /// Held by another replica to the end (not a failure).
    pub claimed_elsewhere: u64,
    /// Deleted (its project row gone) between the listing and the build: no snapshot, not a
    /// failure.
    pub vanished: u64,
    /// Rejections by code (non-zero only).
    pub rejected: Tally<ReportedCode>,
    /// Unresolved by code (non-zero only; `claimed-elsewhere` is counted on its own).
    pub unresolved: Tally<Unresolved>,
    /// Integrity violations by code (non-zero only).
    pub integrity: Tally<Violation>,
    /// Keyset pages of the pending index read, over every pass.
    pub pages: u64,
    /// Final probe passes run.
    pub final_probes: u64,
    /// From the coordinator's start to the summary, in milliseconds.
    pub elapsed_ms: u64,
    #[allow(missing_docs)]
    pub shard: Shard,
}

impl RunSummary {
    /// An empty summary for a shard.
    pub fn new(shard: Shard) -> Self {
        Self {
            schema: "package-executor/run-summary@v1",
            exit_code: Exit::Ok,
            projects_scanned: 0,
            published: 0,
            replayed: 0,
            already_current: 0,
            claimed_elsewhere: 0,
            vanished: 0,
            rejected: Tally::default(),
            unresolved: Tally::default(),
            integrity: Tally::default(),
            pages: 0,
            final_probes: 0,
            elapsed_ms: 0,
            shard,
        }
    }

    /// Counts a project's final outcome.
    pub fn count(&mut self, o: &Outcome) {
        match o {
            Outcome::Published { .. } => self.published += 1,
            Outcome::Replayed { .. } => self.replayed += 1,
            Outcome::AlreadyCurrent { .. } => self.already_current += 1,
            Outcome::Rejected { code, .. } => self.rejected.add(code.clone()),
            Outcome::Unresolved {
                reason: Unresolved::ClaimedElsewhere,
                ..
            } => self.claimed_elsewhere += 1,
            Outcome::Unresolved { reason, .. } => self.unresolved.add(*reason),
            Outcome::Integrity { .. } => self.integrity.add(Violation::ReplayMismatch),
            Outcome::Vanished => self.vanished += 1,
        }
    }

    /// The exit code by the contract's precedence (5, 1, 8, 3, 6), given whether the run halted on
    /// a cause no retry heals (a login without its grants, a damaged database file), whether the
    /// database became unavailable and whether work was left undone (deadline, SIGTERM).
    pub fn decide_exit(
        &mut self,
        halted: bool,
        database_down: bool,
        left_pending: bool,
        fail_on_rejected: bool,
    ) {
        let total_rejected = self.rejected.total();
        let total_unresolved = self.unresolved.total();
        self.exit_code = if !self.integrity.is_empty() {
            Exit::Integrity
        } else if halted {
            Exit::Error
        } else if database_down {
            Exit::Database
        } else if total_unresolved > 0 || left_pending {
            Exit::Unresolved
        } else if fail_on_rejected && total_rejected > 0 {
            Exit::Rejected
        } else {
            Exit::Ok
        };
    }

    /// The one-line JSON form (always under 4,096 bytes: maps hold at most 16 + 5 + 1 keys).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejection::RejectionCode;

    fn rejected(code: ReportedCode) -> Outcome {
        Outcome::Rejected {
            code,
            detail: String::new(),
        }
    }

    #[test]
    fn the_summary_counts_by_code_in_the_contracts_order() {
        let mut s = RunSummary::new(Shard { index: 0, count: 1 });
        for o in [
            rejected(ReportedCode::parse("zz-newer-word")),
            rejected(RejectionCode::RevisionMissing.into()),
            rejected(RejectionCode::ForbiddenField.into()),
            rejected(RejectionCode::RevisionMissing.into()),
            Outcome::Unresolved {
                reason: Unresolved::Database,
                detail: String::new(),
            },
            Outcome::Unresolved {
                reason: Unresolved::VectorDrift,
                detail: String::new(),
            },
            Outcome::Unresolved {
                reason: Unresolved::ClaimedElsewhere,
                detail: String::new(),
            },
            Outcome::Integrity {
                detail: String::new(),
            },
        ] {
            s.count(&o);
        }
        let precedence = |code: RejectionCode| RejectionCode::ALL.iter().position(|c| *c == code);
        assert!(
            precedence(RejectionCode::RevisionMissing) < precedence(RejectionCode::ForbiddenField)
        );
        // The text, not a parsed value: the order of the keys is what is asserted.
        let json = s.to_json();
        assert!(
            json.contains(concat!(
                r#""rejected":{"revision-missing":2,"forbidden-field":1,"zz-newer-word":1},"#,
                r#""unresolved":{"vector-drift":1,"database":1},"#,
                r#""integrity":{"replay-mismatch":1},"#,
            )),
            "{json}"
        );
        assert_eq!(s.claimed_elsewhere, 1);
        assert_eq!(s.rejected.total(), 4);
        assert_eq!(s.unresolved.get(&Unresolved::GenerationDrift), 0);
        assert_eq!(
            s.rejected.to_string(),
            "revision-missing 2, forbidden-field 1, zz-newer-word 1"
        );
        assert_eq!(Tally::<Unresolved>::default().to_string(), "");
    }
}
