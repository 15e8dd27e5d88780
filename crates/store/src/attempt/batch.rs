//! A batch of projects in one transaction, on both dialects (contract section 9): open all,
//! and, once the caller has built each, finish all, every project keeping the outcome it would
//! have had alone. A project alone is a batch of one.
//!
//! - PostgreSQL: one statement opens the batch ([`sql::OPEN_BATCH_PG`]) and one finishes it
//!   ([`sql::FINISH_BATCH_PG`]), whatever its size: a round trip costs more than the work of
//!   most statements.
//! - SQLite (in process: a statement costs no round trip): the batch's projects are opened one
//!   after another, and each is finished by its second observation and then its writes, in
//!   that order, so a project that drifted has written nothing and needs nothing undone.

use sqlx::Row;

use super::open::{cap, heads_from_arrays, misaligned, opening_from_row};
use super::*;
use crate::sql::FinishBatch;
use crate::{ObservedHead, StoreError, rows, sql};
use package_executor_core::planner::Snapshot;
use package_executor_core::rejection::Rejection;
use package_executor_core::source_key::source_key;

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
    /// What a snapshot not inserted met, when the store already asked (to decide its mark):
    /// the caller need not ask again.
    pub replay: Option<Replay>,
    /// Whether its project row was gone at the second observation (nothing of it was kept).
    pub vanished: bool,
    /// Whether what was written for it must not be committed: the caller rolls the batch's
    /// transaction back. Only a batch of one on PostgreSQL writes before it compares (see
    /// [`Attempt::finish_batch`]); every other entry writes nothing it would not keep.
    pub undo: bool,
}

impl Attempt<'_> {
    /// Opens a batch (on PostgreSQL in one statement, [`sql::OPEN_BATCH_PG`]): one [`Opening`] per project, in the
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
        match (self, projects) {
            // A batch of one: the one-project statement, cheaper for the server at one (see
            // `finish_batch`).
            (a @ Attempt::Pg(_), [project_id]) => Ok(vec![a.open_with(project_id, inline).await?]),
            (Attempt::Pg(tx), _) => open_batch_pg(tx, projects, inline, observed).await,
            (a @ Attempt::Lite(_), _) => a.open_batch_lite(projects, inline, observed).await,
        }
    }

    /// SQLite's [`Attempt::open_batch`]: each project's opening in turn, with the same cap on
    /// the observations' text as PostgreSQL's statement, counted the same way.
    async fn open_batch_lite(
        &mut self,
        projects: &[String],
        inline: Option<u64>,
        observed: u64,
    ) -> Result<Vec<Opening>, StoreError> {
        let mut openings = Vec::with_capacity(projects.len());
        let mut total = 0u64;
        for project_id in projects {
            // Past the cap (the first project always comes whole), the batch closes: the rest
            // are not read.
            if !openings.is_empty() && total > observed {
                openings.push(deferred());
                continue;
            }
            let mut opening = self.open_with(project_id, inline).await?;
            opening.observed_bytes = observed_bytes(&opening.heads);
            total = total.saturating_add(opening.observed_bytes);
            let kept = openings.is_empty() || total <= observed;
            openings.push(if kept { opening } else { deferred() });
        }
        Ok(openings)
    }

    /// Finishes a batch: every entry's writes, each gated on its own second observation (on
    /// PostgreSQL in one statement, [`sql::FINISH_BATCH_PG`]). One [`Finished`] per entry, in
    /// order.
    ///
    /// A batch of one on PostgreSQL takes the one-project statements instead ([`sql::OPEN_PG`],
    /// [`sql::APPEND_PG`]): at one, the set statements cost the server about a fifth more a
    /// snapshot (docs/benchmarks.md, "A project alone is a batch of one"). `APPEND_PG` inserts
    /// before the comparison, so an entry that drifted, vanished or met another snapshot says
    /// [`Finished::undo`] and the caller rolls back.
    pub async fn finish_batch(
        &mut self,
        entries: &[Finishing<'_>],
    ) -> Result<Vec<Finished>, StoreError> {
        if let (Attempt::Pg(_), [entry]) = (&*self, entries) {
            return Ok(vec![self.finish_one_pg(entry).await?]);
        }
        let Attempt::Pg(tx) = self else {
            let mut finished = Vec::with_capacity(entries.len());
            for entry in entries {
                finished.push(self.finish_lite(entry).await?);
            }
            return Ok(finished);
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
                    undo: false,
                    drifted: if steady || vanished {
                        None
                    } else {
                        Some(heads_from_arrays(row)?)
                    },
                    inserted: row.try_get::<Option<i64>, _>("snapshot_id")?.is_some(),
                    replay: None,
                })
            })
            .collect()
    }
}

impl Attempt<'_> {
    /// A batch of one on PostgreSQL ([`Attempt::finish_batch`]): its snapshot with the second
    /// observation in one statement, or the second observation and then its rejection and mark.
    async fn finish_one_pg(&mut self, entry: &Finishing<'_>) -> Result<Finished, StoreError> {
        let steady = |inserted: bool, undo: bool| Finished {
            drifted: None,
            inserted,
            replay: None,
            vanished: false,
            undo,
        };
        match entry.write {
            Write::Snapshot { snapshot, first } => {
                let appending = self.append(snapshot, entry.mark).await?;
                if appending.vanished {
                    return Ok(Finished {
                        vanished: true,
                        ..steady(false, true)
                    });
                }
                if appending.second.as_slice() != first {
                    return Ok(Finished {
                        drifted: Some(appending.second),
                        ..steady(false, true)
                    });
                }
                // Not inserted: the mark the append cleared is kept only for the same snapshot
                // stored (an exact replay), as the set statement keeps it.
                if appending.inserted || entry.mark.is_none() {
                    return Ok(steady(appending.inserted, false));
                }
                Ok(match self.replay_outcome(snapshot).await {
                    Ok(replay) => Finished {
                        replay: Some(replay.clone()),
                        ..steady(false, replay != Replay::Exact)
                    },
                    Err(StoreError::Transient(_)) => steady(false, true),
                    Err(e) => return Err(e),
                })
            }
            Write::Rejection {
                vector,
                rejection,
                first,
            } => {
                let second = self.observe(entry.project_id).await?;
                if second.as_slice() != first {
                    return Ok(Finished {
                        drifted: Some(second),
                        ..steady(false, false)
                    });
                }
                if rejection.recorded {
                    self.record_rejection(entry.project_id, vector, rejection)
                        .await?;
                }
                if let Some(version) = entry.mark {
                    self.clear_mark(entry.project_id, version).await?;
                }
                Ok(steady(false, false))
            }
            Write::Nothing => {
                if let Some(version) = entry.mark {
                    self.clear_mark(entry.project_id, version).await?;
                }
                Ok(steady(false, false))
            }
        }
    }

    /// One project of SQLite's [`Attempt::finish_batch`], as [`sql::FINISH_BATCH_PG`] finishes
    /// it: its second observation first, and only when that equals the first its snapshot and
    /// source rows, its rejection, and its mark (a snapshot not inserted clears the mark only
    /// when the same snapshot is stored: an exact replay). SQLite reads one snapshot of the file
    /// throughout a transaction, so the project row the opening found is still there.
    async fn finish_lite(&mut self, entry: &Finishing<'_>) -> Result<Finished, StoreError> {
        let first = match entry.write {
            Write::Nothing => None,
            Write::Snapshot { first, .. } | Write::Rejection { first, .. } => Some(first),
        };
        if let Some(first) = first {
            let second = self.observe(entry.project_id).await?;
            if second.as_slice() != first {
                return Ok(Finished {
                    drifted: Some(second),
                    inserted: false,
                    replay: None,
                    vanished: false,
                    undo: false,
                });
            }
        }
        let mut clear = entry.mark.is_some();
        let mut inserted = false;
        let mut replayed = None;
        match entry.write {
            Write::Nothing => {}
            Write::Snapshot { snapshot, .. } => {
                inserted = self.insert_rows(snapshot).await?;
                if !inserted && clear {
                    (clear, replayed) = match self.replay_outcome(snapshot).await {
                        Ok(replay) => (replay == Replay::Exact, Some(replay)),
                        Err(StoreError::Transient(_)) => (false, None),
                        Err(e) => return Err(e),
                    };
                }
            }
            Write::Rejection {
                vector, rejection, ..
            } => {
                if rejection.recorded {
                    self.record_rejection(entry.project_id, vector, rejection)
                        .await?;
                }
            }
        }
        if let (true, Some(version)) = (clear, entry.mark) {
            self.clear_mark(entry.project_id, version).await?;
        }
        Ok(Finished {
            drifted: None,
            inserted,
            replay: replayed,
            vanished: false,
            undo: false,
        })
    }
}

/// A project left out of a batch's opening by the observations' cap: claimed, nothing else read.
fn deferred() -> Opening {
    Opening {
        claimed: true,
        deferred: true,
        ..Opening::default()
    }
}

/// The bytes of an observation's text as [`sql::OPEN_BATCH_PG`] counts them: names, ids,
/// digests and approved permissions, 64 a head besides.
fn observed_bytes(heads: &[ObservedHead]) -> u64 {
    heads
        .iter()
        .map(|o| {
            let h = &o.head;
            (h.package_name.len()
                + h.installation_id.len()
                + h.generation_digest.len()
                + h.lock_digest.len()
                + h.revision_digest.len()
                + h.approved_permissions.len()
                + 64) as u64
        })
        .sum()
}

/// PostgreSQL's [`Attempt::open_batch`]: one statement, then the current proof, in one more,
/// for the projects that have a snapshot at all.
async fn open_batch_pg(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    projects: &[String],
    inline: Option<u64>,
    observed: u64,
) -> Result<Vec<Opening>, StoreError> {
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
            openings.push(deferred());
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
