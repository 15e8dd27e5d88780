//! One project of a batch inside the batch's transaction (contract section 9): each project's
//! steps run after a savepoint of its own, so that what one project does not keep (a drift,
//! a claim held elsewhere, an outcome that writes nothing) is undone without touching the
//! others, and the batch commits once. The savepoint's name is the same for every project:
//! they follow one another, never nest.

use sqlx::Row;

use super::open::{cap, heads_from_arrays, misaligned, opening_from_row};
use super::*;
use crate::sql::FinishBatch;
use crate::{ObservedHead, StoreError, rows, sql};
use package_executor_core::planner::Snapshot;
use package_executor_core::rejection::Rejection;
use package_executor_core::source_key::source_key;

/// The savepoint statements, the same in both dialects.
const SAVEPOINT: &str = "SAVEPOINT pe_project";
const RELEASE: &str = "RELEASE SAVEPOINT pe_project";
const ROLLBACK_TO: &str = "ROLLBACK TO SAVEPOINT pe_project";

impl Attempt<'_> {
    async fn run_plain(&mut self, text: &'static str) -> Result<(), StoreError> {
        on_conn!(self, |c, _d| {
            sqlx::query(text).execute(c).await?;
            Ok(())
        })
    }

    /// Marks where the next project of a batch begins.
    pub async fn begin_project(&mut self) -> Result<(), StoreError> {
        self.run_plain(SAVEPOINT).await
    }

    /// Keeps what the project since [`Attempt::begin_project`] wrote (its claim included),
    /// for the batch's commit.
    pub async fn keep_project(&mut self) -> Result<(), StoreError> {
        self.run_plain(RELEASE).await
    }

    /// Undoes what the project since [`Attempt::begin_project`] did: its writes, and on
    /// PostgreSQL the claim it took (a row lock taken after a savepoint is released when the
    /// transaction rolls back to it).
    pub async fn undo_project(&mut self) -> Result<(), StoreError> {
        self.run_plain(ROLLBACK_TO).await?;
        self.run_plain(RELEASE).await
    }
}

/// What a batch's project asks of the batch's last statement ([`Attempt::finish_batch`]).
#[derive(Clone, Copy, Debug)]
pub struct Finishing<'s> {
    /// The project.
    pub project_id: &'s str,
    /// The version of its mark read when the batch opened, if it was marked.
    pub mark: Option<i64>,
    /// What it writes besides clearing its mark.
    pub write: Write<'s>,
}

/// What a batch's project writes when it finishes.
#[derive(Clone, Copy, Debug)]
pub enum Write<'s> {
    /// Nothing but its mark: an outcome read, not built (already current, a rejection that
    /// stands).
    Nothing,
    /// Its snapshot, if the second observation equals `first`.
    Snapshot {
        /// The planned snapshot.
        snapshot: &'s Snapshot,
        /// The first observation.
        first: &'s [ObservedHead],
    },
    /// Its rejection (recorded only when `record`), if the second observation equals `first`.
    Rejection {
        /// The rejected vector's digest.
        vector: &'s str,
        /// The rejection.
        rejection: &'s Rejection,
        /// The first observation.
        first: &'s [ObservedHead],
    },
}

/// How a batch's project finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The heads the second observation saw when they differ from the first (nothing of the
    /// project was written); `None` when they are equal or were not observed.
    pub drifted: Option<Vec<ObservedHead>>,
    /// Whether its snapshot row was inserted.
    pub inserted: bool,
    /// Whether its project row was gone at the second observation (nothing of it was written).
    pub vanished: bool,
}

impl Attempt<'_> {
    /// Opens a batch (PostgreSQL, [`sql::OPEN_BATCH_PG`]): one [`Opening`] per project, in the
    /// order given; a project another executor holds has `claimed` false and nothing else. The
    /// observations' text together is held to `observed` bytes, counted in order (the first
    /// project always comes whole): a project past it is `deferred`, claimed with nothing else
    /// read. The current proof runs, under the claim, for each project that has a snapshot at
    /// all.
    pub async fn open_batch(
        &mut self,
        projects: &[String],
        inline: Option<u64>,
        observed: u64,
    ) -> Result<Vec<Opening>, StoreError> {
        let Attempt::Pg(tx) = self else {
            return Err(batch_on_sqlite());
        };
        let rows = sqlx::query(sql::OPEN_BATCH_PG)
            .bind(projects)
            .bind(cap(inline))
            .bind(i64::try_from(observed).unwrap_or(i64::MAX))
            .fetch_all(&mut **tx)
            .await?;
        if rows.len() != projects.len() {
            return Err(misaligned());
        }
        let mut openings = Vec::with_capacity(rows.len());
        let mut with_snapshots = Vec::new();
        // Each row is dropped once read: the observations are not held twice.
        for (row, project_id) in rows.into_iter().zip(projects) {
            let claimed: bool = row.try_get("claimed")?;
            if claimed && !row.try_get::<bool, _>("kept")? {
                openings.push(Opening {
                    claimed,
                    deferred: true,
                    ..Opening::default()
                });
                continue;
            }
            let (opening, has_snapshot) = opening_from_row(&row)?;
            if has_snapshot && !opening.vanished {
                with_snapshots.push(project_id.as_str());
            }
            openings.push(opening);
        }
        // The current proof, one statement for all the projects that have a snapshot at all.
        if !with_snapshots.is_empty() {
            let current: Vec<(String, String)> = sqlx::query_as(sql::CURRENT_DIGESTS_PG)
                .bind(&with_snapshots)
                .fetch_all(&mut **tx)
                .await?;
            for (project_id, digest) in current {
                if let Some(i) = projects.iter().position(|p| *p == project_id) {
                    openings[i].current = Some(rows::digest(digest)?);
                }
            }
        }
        Ok(openings)
    }

    /// Finishes a batch (PostgreSQL, [`sql::FINISH_BATCH_PG`]): every entry's writes in one
    /// statement, each gated on its own second observation. One [`Finished`] per entry, in
    /// order.
    pub async fn finish_batch(
        &mut self,
        entries: &[Finishing<'_>],
    ) -> Result<Vec<Finished>, StoreError> {
        let Attempt::Pg(tx) = self else {
            return Err(batch_on_sqlite());
        };
        let columns = FinishBatch::new(entries);
        let rows = columns
            .bind(sqlx::query(sql::FINISH_BATCH_PG))
            .fetch_all(&mut **tx)
            .await?;
        if rows.len() != entries.len() {
            return Err(misaligned());
        }
        rows.iter()
            .map(|row| {
                let steady: bool = row.try_get("steady")?;
                let vanished: bool = row.try_get("vanished")?;
                Ok(Finished {
                    vanished,
                    drifted: if steady || vanished {
                        None
                    } else {
                        Some(heads_from_arrays(row)?)
                    },
                    inserted: row.try_get::<Option<i64>, _>("snapshot_id")?.is_some(),
                })
            })
            .collect()
    }
}

fn batch_on_sqlite() -> StoreError {
    StoreError::Other(
        "a batch's set statements are PostgreSQL's; SQLite builds a batch project by project \
         (this is a bug, please report it)"
            .into(),
    )
}

impl<'s> FinishBatch<'s> {
    fn new(entries: &[Finishing<'s>]) -> Self {
        let mut c = Self::default();
        for (i, entry) in entries.iter().enumerate() {
            c.project_ids.push(entry.project_id);
            c.marks.push(entry.mark);
            let (snapshot, rejection, first) = match entry.write {
                Write::Nothing => (None, None, None),
                Write::Snapshot { snapshot, first } => (Some(snapshot), None, Some(first)),
                Write::Rejection {
                    vector,
                    rejection,
                    first,
                } => (None, Some((vector, rejection)), Some(first)),
            };
            c.vectors.push(
                snapshot
                    .map(|s| s.active_vector_digest.as_str())
                    .or(rejection.map(|(v, _)| v)),
            );
            c.definition_digests
                .push(snapshot.map(|s| s.definition_digest.as_str()));
            c.snapshot_digests
                .push(snapshot.map(|s| s.snapshot_digest.as_str()));
            // The limits keep both counts far below i32::MAX (128 each).
            c.package_counts
                .push(snapshot.map(|s| i32::try_from(s.sources.len()).unwrap_or(i32::MAX)));
            c.definition_counts
                .push(snapshot.map(|s| i32::try_from(s.definition_count).unwrap_or(i32::MAX)));
            c.documents
                .push(snapshot.map(|s| s.canonical_json.as_slice()));
            c.source_keys.push(snapshot.map(|s| source_key(&s.sources)));
            let recorded = rejection.filter(|(_, r)| r.recorded);
            c.reasons.push(recorded.map(|(_, r)| r.code.as_str()));
            c.details.push(recorded.map(|(_, r)| r.detail.as_str()));
            c.observe.push(first.is_some());
            for o in first.unwrap_or_default() {
                let h = &o.head;
                c.head_entries.push(i as i64 + 1);
                c.package_names.push(&h.package_name);
                c.installation_ids.push(&h.installation_id);
                c.generations.push(h.generation);
                c.generation_digests.push(&h.generation_digest);
                c.lock_digests.push(&h.lock_digest);
                c.revision_digests.push(&h.revision_digest);
                c.permissions.push(&h.approved_permissions);
            }
        }
        c
    }
}
