//! One attempt over a batch of projects (contract section 9): one transaction, every project
//! keeping the outcome it would have had alone.
//!
//! - PostgreSQL ([`attempt_set`]): the batch is opened in one statement (the claims, the first
//!   observations, the revisions small enough to come along, the recorded rejections), each
//!   project is built in turn, and one statement finishes them all: each project's second
//!   observation gates its own writes (its snapshot, its rejection, its mark), so a project
//!   that drifted writes nothing while the rest commit. Four statements a batch, not four a
//!   project: what a snapshot costs the server is the fleet's ceiling.
//! - SQLite ([`attempt_savepoints`]): in-process, so a statement costs no round trip; each
//!   project runs the lone attempt's steps after a savepoint of its own, undone when its
//!   outcome writes nothing, and the batch commits once.
//!
//! A batch holds the memory of what it has built (the revisions that came with the opening,
//! the planned snapshots) until it ends, so its reads never wait for the budget: a project
//! whose revisions or snapshot do not fit what is free now closes the batch before it, and
//! starts the next one (alone, if it was the first: see [`Crew::process_batch`]).
//!
//! [`Crew::process_batch`]: super::crew::Crew::process_batch

use std::time::Duration;

use crate::report::{Outcome, Unresolved};
use crate::store::{
    Attempt, Dialect, Finished, Finishing, ObservedHead, Session, StoreError, Write, answered,
};

use super::attempt::{
    INLINE_BYTES, Prepared, Readings, Reads, Room, Step, attempt_in, drift, inline_reservation,
    prepare, published, rejected, replayed,
};
use super::budget::{MemoryBudget, Reservation};

/// Runs one attempt over `projects` on a worker's session, in one transaction. `Ok` with the
/// steps of the batch's first projects, in order: fewer than `projects` when the batch closed
/// early for memory (none when the first project's revisions did not fit what is free now);
/// the rest were not decided and nothing of them was written. `Err` when a statement failed
/// for a cause that is no one project's outcome (or the commit failed): nothing of the batch
/// was written, and the caller tries each project alone. `share` is the most the batch's
/// planned snapshots may hold of the budget.
pub(super) async fn attempt_batch(
    session: &mut Session,
    budget: &MemoryBudget,
    projects: &[String],
    share: u64,
) -> Result<Batched, StoreError> {
    let limit = session.answer_timeout();
    tracing::debug!(projects = projects.len(), "batch attempt started");
    session
        .transaction(async |a| match a.dialect() {
            Dialect::Postgres => attempt_set(a, budget, projects, share, limit).await,
            Dialect::Sqlite => attempt_savepoints(a, budget, projects, limit).await,
        })
        .await
}

/// What a batch decided.
pub(super) struct Batched {
    /// The steps of the batch's first projects, in order.
    pub(super) steps: Vec<Step>,
    /// Heads that took a revision the batch had already read for an earlier project (see
    /// `readings.rs`).
    pub(super) reused_revisions: u64,
}

/// SQLite's batch: the lone attempt's steps for each project after a savepoint of its own,
/// kept when its outcome writes (a publish, a replay, a recorded rejection, a cleared mark)
/// and undone otherwise (a drift), then one commit.
async fn attempt_savepoints(
    a: &mut Attempt<'_>,
    budget: &MemoryBudget,
    projects: &[String],
    limit: Option<Duration>,
) -> Result<(Batched, bool), StoreError> {
    let mut steps = Vec::with_capacity(projects.len());
    let mut any_kept = false;
    for project_id in projects {
        answered(limit, a.begin_project()).await?;
        // No reading is kept across projects here: a project's reads wait for the budget
        // (`Room::Wait`), and readings held by the batch could leave it waiting on itself. A
        // read here is in-process, no round trip.
        let (step, keep) = attempt_in(a, budget, project_id, &mut Readings::none(), limit).await?;
        if keep {
            answered(limit, a.keep_project()).await?;
            any_kept = true;
        } else {
            answered(limit, a.undo_project()).await?;
        }
        steps.push(step);
    }
    let batched = Batched {
        steps,
        reused_revisions: 0,
    };
    Ok((batched, any_kept))
}

/// The smallest per-project cap for revisions that come with a batch's opening.
const INLINE_FLOOR: u64 = 16 << 10;

/// How many times a batch holds its observations' text at most: the first observation kept
/// for the last statement's comparison, the heads its planned snapshot was built from (its
/// source rows), a head's approved permissions parsed for the revision reader, and the last
/// statement's arguments as the driver sends them (the row they arrived in is dropped once
/// read).
pub(crate) const OBSERVED_COPIES: u64 = 4;

/// A project of a PostgreSQL batch, prepared, with the memory its planned snapshot holds.
struct Entry {
    prepared: Prepared,
    _snapshot_memory: Option<Reservation>,
}

/// PostgreSQL's batch: open all, build each, finish all (see the module's documentation).
async fn attempt_set(
    a: &mut Attempt<'_>,
    budget: &MemoryBudget,
    projects: &[String],
    share: u64,
    limit: Option<Duration>,
) -> Result<(Batched, bool), StoreError> {
    // Revisions come with the opening only if the memory for all of them is free now. A
    // project's cap shrinks with the batch so that the whole batch's fit half the worker's
    // share (most projects' revisions are a few KiB: a large batch of them still comes
    // along); a project over the cap reads its revisions as a lone attempt does.
    let cap = (share / 4 / projects.len().max(1) as u64).clamp(INLINE_FLOOR, INLINE_BYTES);
    let inline_memory = budget.try_reserve(inline_reservation(projects.len(), cap));
    let cap = inline_memory.as_ref().map(|_| cap);
    // The observations: their text together within an eighth of the share, held OBSERVED_COPIES
    // times, reserved before they are read; when that is not free now, only the first
    // project's (which the memory bound counts per worker) and the batch closes after it.
    let observed_cap = share / 8;
    let mut observed_memory = budget.try_reserve(OBSERVED_COPIES * observed_cap);
    let observed_cap = observed_memory.as_ref().map_or(0, |_| observed_cap);
    let openings = answered(limit, a.open_batch(projects, cap, observed_cap)).await?;
    if let Some(reserved) = observed_memory.as_mut() {
        let observed: u64 = openings.iter().map(|o| o.observed_bytes).sum();
        reserved.shrink_to(OBSERVED_COPIES * observed);
    }
    let mut readings = Readings::shared(
        budget,
        openings.iter().flat_map(|o| {
            o.heads.iter().map(|h| {
                (
                    h.head.revision_digest.as_str(),
                    h.head.package_name.as_str(),
                )
            })
        }),
    );
    let mut entries: Vec<Entry> = Vec::with_capacity(projects.len());
    let _observed_memory = observed_memory;
    let mut held = 0;
    for (project_id, opening) in projects.iter().zip(openings) {
        let prepared = prepare(
            a,
            budget,
            project_id,
            opening,
            Reads {
                room: Room::Now,
                readings: &mut readings,
            },
            limit,
        )
        .await?;
        let snapshot_memory = match &prepared {
            Prepared::NoRoom => break,
            Prepared::Planned { snapshot, .. } => {
                // The document, the driver's copy of it in the last statement's arguments and
                // that statement's write buffer, until the batch ends. A batch's first
                // snapshot is held whatever the budget (as a lone attempt's is: the memory
                // bound counts one per worker); a later one that does not fit closes the batch
                // before its project.
                let bytes = 3 * snapshot.canonical_json.len() as u64;
                let reserved = (held + bytes <= share)
                    .then(|| budget.try_reserve(bytes))
                    .flatten();
                if reserved.is_none() && held > 0 {
                    break;
                }
                held += bytes;
                reserved
            }
            _ => None,
        };
        entries.push(Entry {
            prepared,
            _snapshot_memory: snapshot_memory,
        });
    }
    drop(inline_memory);
    let reused = readings.reused();
    drop(readings);
    let finishing: Vec<(usize, Finishing<'_>)> = entries
        .iter()
        .zip(projects)
        .enumerate()
        .filter_map(|(i, (e, project_id))| Some((i, finishing(project_id, &e.prepared)?)))
        .collect();
    let finished = if finishing.is_empty() {
        Vec::new()
    } else {
        let asked: Vec<Finishing<'_>> = finishing.iter().map(|(_, f)| *f).collect();
        answered(limit, a.finish_batch(&asked)).await?
    };
    let mut by_entry: Vec<Option<Finished>> = vec![None; entries.len()];
    for ((i, _), f) in finishing.iter().zip(finished) {
        by_entry[*i] = Some(f);
    }
    let commit = !finishing.is_empty();
    let mut steps = Vec::with_capacity(entries.len());
    for (entry, f) in entries.into_iter().zip(by_entry) {
        steps.push(step_of(a, entry.prepared, f, limit).await?);
    }
    let batched = Batched {
        steps,
        reused_revisions: reused,
    };
    Ok((batched, commit))
}

/// What a prepared project asks of the batch's last statement, if anything.
fn finishing<'s>(project_id: &'s str, prepared: &'s Prepared) -> Option<Finishing<'s>> {
    let (mark, write) = match prepared {
        Prepared::Retry(_) | Prepared::NoRoom => return None,
        Prepared::Read(_, None) => return None,
        Prepared::Read(_, mark) => (*mark, Write::Nothing),
        Prepared::Planned {
            snapshot,
            first,
            mark,
        } => (*mark, Write::Snapshot { snapshot, first }),
        Prepared::Rejected {
            rejection,
            vector,
            first,
            mark,
        } => (
            *mark,
            Write::Rejection {
                vector: vector.as_str(),
                rejection,
                first,
            },
        ),
    };
    Some(Finishing {
        project_id,
        mark,
        write,
    })
}

/// A prepared project's step, from what the batch's last statement did for it.
async fn step_of(
    a: &mut Attempt<'_>,
    prepared: Prepared,
    finished: Option<Finished>,
    limit: Option<Duration>,
) -> Result<Step, StoreError> {
    let drifted = |first: &[ObservedHead], f: &Option<Finished>| -> Option<Step> {
        let second = f.as_ref()?.drifted.as_ref()?;
        Some(match drift(first, second) {
            Some((reason, detail)) => Step::Retry(reason, detail),
            // The statement compares every column the lone attempt compares; a difference it
            // saw and this comparison does not is retried all the same, never written.
            None => Step::Retry(
                Unresolved::GenerationDrift,
                "the active package set changed while the snapshot was built; will retry".into(),
            ),
        })
    };
    // Its project row was gone at the second observation: nothing of it was written.
    if finished.as_ref().is_some_and(|f| f.vanished) {
        return Ok(Step::Done(Outcome::Vanished));
    }
    Ok(match prepared {
        Prepared::Retry(step) | Prepared::Read(step, _) => step,
        Prepared::NoRoom => unreachable_no_room(),
        Prepared::Rejected {
            rejection, first, ..
        } => match drifted(&first, &finished) {
            Some(step) => step,
            None => rejected(rejection),
        },
        Prepared::Planned {
            snapshot, first, ..
        } => {
            if let Some(step) = drifted(&first, &finished) {
                return Ok(step);
            }
            if finished.as_ref().is_some_and(|f| f.inserted) {
                return Ok(published(&snapshot));
            }
            match answered(limit, a.replay_outcome(&snapshot)).await {
                Ok(replay) => replayed(&snapshot, replay),
                // A conflicting row this statement could not see yet: this project alone is
                // tried again (the statement kept its mark, and wrote nothing of it).
                Err(StoreError::Transient(detail)) => Step::Retry(Unresolved::Database, detail),
                Err(e) => return Err(e),
            }
        }
    })
}

/// A batch ends before a project that found no room, so no step is asked of one.
fn unreachable_no_room() -> Step {
    Step::Retry(
        Unresolved::Database,
        "a batch asked the outcome of a project it did not build; this is a bug, please \
         report it"
            .into(),
    )
}
