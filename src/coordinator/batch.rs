//! One attempt over a batch of projects (contract section 9): one transaction, every project
//! keeping the outcome it would have had alone. A project alone is a batch of one: its first
//! attempt, its retries and the fallback of a batch that failed as a whole all come here.
//!
//! Open all (the store's `open_batch`: the claims, the first observations, the revisions small
//! enough to come along, the recorded rejections), build each ([`prepare`]), finish all (the
//! store's `finish_batch`: each project's second observation gates its own writes, its snapshot,
//! its rejection, its mark, so a project that drifted writes nothing while the rest commit),
//! commit. How each dialect does the opening and the finish is the store's: on PostgreSQL one
//! statement each, whatever the batch's size (what a snapshot costs the server is the fleet's
//! ceiling); on SQLite, in process, the plain statements in turn.
//!
//! A batch holds the memory of what it has built (the revisions that came with the opening,
//! the planned snapshots) until it ends, so its reads never wait for the budget: a project
//! whose revisions or snapshot do not fit what is free now closes the batch before it, and
//! starts the next one (alone, if it was the first: see [`Crew::process_batch`]). A project
//! alone holds nothing else, so its reads wait for the budget ([`Wait`]).
//!
//! [`Crew::process_batch`]: super::crew::Crew::process_batch

use std::time::Duration;

use crate::report::{Outcome, Unresolved};
use crate::store::{
    Attempt, Finished, Finishing, ObservedHead, Session, StoreError, Write, answered,
};

use super::attempt::{
    INLINE_BYTES, NoRoom, Now, Prepared, Readings, Reads, Room, Step, Wait, drift,
    inline_reservation, prepare, published, rejected, replayed,
};
use super::budget::{MemoryBudget, Reservation};

/// Runs one attempt over `projects` on a worker's session, in one transaction. `Ok(Ok(_))`
/// with the steps of the batch's first projects, in order: fewer than `projects` when the batch
/// closed early for memory; the rest were not decided and nothing of them was written.
/// `Ok(Err(NoRoom))` when not even the first project's revisions fit what is free now: nothing
/// was decided or written. `Err` when a statement failed for a cause that is no one project's
/// outcome (or the commit failed): nothing of the batch was written, and the caller tries each
/// project alone. `share` is the most the batch's planned snapshots may hold of the budget.
pub(super) async fn attempt_batch(
    session: &mut Session,
    budget: &MemoryBudget,
    projects: &[String],
    share: u64,
) -> Result<Result<Batched, NoRoom>, StoreError> {
    let limit = session.answer_timeout();
    tracing::debug!(projects = projects.len(), "batch attempt started");
    session
        .transaction(async |a| attempt_set(a, budget, projects, share, Now, limit).await)
        .await
}

/// One attempt of a project alone (a batch of one whose reads wait for the budget), on a
/// worker's session, in one transaction.
pub(super) async fn attempt_alone(
    session: &mut Session,
    budget: &MemoryBudget,
    project_id: &str,
) -> Result<Step, StoreError> {
    let limit = session.answer_timeout();
    tracing::debug!(project_id, "attempt started");
    let projects = [project_id.to_owned()];
    // Its first snapshot is held whatever the budget, as any batch's first is.
    let Ok(batched) = session
        .transaction(async |a| attempt_set(a, budget, &projects, u64::MAX, Wait, limit).await)
        .await?;
    Ok(batched.first)
}

/// What a batch decided: its first project always, and as many after it as fit.
pub(super) struct Batched {
    /// The first project's step.
    pub(super) first: Step,
    /// The steps of the projects after it that the batch decided, in order.
    pub(super) rest: Vec<Step>,
    /// Heads that took a revision the batch had already read for an earlier project (see
    /// `readings.rs`).
    pub(super) reused_revisions: u64,
}

/// The smallest per-project cap for revisions that come with a batch's opening.
const INLINE_FLOOR: u64 = 16 << 10;

/// How many times a batch holds its observations' text at most: the first observation kept
/// for the last statement's comparison, the heads its planned snapshot was built from (its
/// source rows), a head's approved permissions parsed for the revision reader, and the last
/// statement's arguments as the driver sends them (the row they arrived in is dropped once
/// read).
pub(crate) const OBSERVED_COPIES: u64 = 4;

/// A project of a batch, prepared, with the memory its planned snapshot holds.
struct Entry {
    prepared: Prepared,
    _snapshot_memory: Option<Reservation>,
}

/// Open all, build each, finish all (see the module's documentation); `room` says whether the
/// reads may wait for the budget, which only a project alone may ([`Wait`]). The room's
/// [`Room::Short`] when not even the first project's reads found room: nothing was decided.
async fn attempt_set<R: Room>(
    a: &mut Attempt<'_>,
    budget: &MemoryBudget,
    projects: &[String],
    share: u64,
    room: R,
    limit: Option<Duration>,
) -> Result<(Result<Batched, R::Short>, bool), StoreError> {
    // Revisions come with the opening only if the memory for all of them is free now. A
    // project's cap shrinks with the batch so that the whole batch's fit half the worker's
    // share (most projects' revisions are a few KiB: a large batch of them still comes
    // along); a project over the cap reads its revisions as a lone attempt does.
    let cap = (share / 4 / projects.len().max(1) as u64).clamp(INLINE_FLOOR, INLINE_BYTES);
    let mut inline_memory = budget.try_reserve(inline_reservation(projects.len(), cap));
    let cap = inline_memory.as_ref().map(|_| cap);
    // The observations: their text together within an eighth of the share, held OBSERVED_COPIES
    // times, reserved before they are read; when that is not free now, only the first
    // project's (which the memory bound counts per worker) and the batch closes after it. A
    // project alone is that first project, and reserves nothing for it.
    let alone = R::WAITS;
    let observed_cap = if alone { 0 } else { share / 8 };
    let mut observed_memory = (!alone)
        .then(|| budget.try_reserve(OBSERVED_COPIES * observed_cap))
        .flatten();
    let observed_cap = observed_memory.as_ref().map_or(0, |_| observed_cap);
    let openings = answered(limit, a.open_batch(projects, cap, observed_cap)).await?;
    if openings.len() != projects.len() {
        return Err(StoreError::Other(format!(
            "the store opened {} of the {} projects asked",
            openings.len(),
            projects.len()
        )));
    }
    if let Some(reserved) = observed_memory.as_mut() {
        let observed: u64 = openings.iter().map(|o| o.observed_bytes).sum();
        reserved.shrink_to(OBSERVED_COPIES * observed);
    }
    // Nothing came along: nothing to hold while the revisions are read (a project alone then
    // waits for the budget holding nothing else).
    if openings.iter().all(|o| o.inline.is_empty()) {
        inline_memory = None;
    }
    // Readings are kept across a batch's projects; a project alone keeps none (its reads wait
    // for the budget, and readings it held could leave it waiting on itself).
    let mut readings = if alone {
        Readings::none()
    } else {
        Readings::shared(
            budget,
            openings.iter().flat_map(|o| {
                o.heads.iter().map(|h| {
                    (
                        h.head.revision_digest.as_str(),
                        h.head.package_name.as_str(),
                    )
                })
            }),
        )
    };
    let mut entries: Vec<Entry> = Vec::with_capacity(projects.len());
    let _observed_memory = observed_memory;
    let mut held = 0;
    for (project_id, opening) in projects.iter().zip(openings) {
        let reads = Reads {
            room,
            readings: &mut readings,
        };
        let prepared = match prepare(a, budget, project_id, opening, reads, limit).await? {
            Ok(prepared) => prepared,
            // Nothing decided, nothing to write: the caller takes the first project alone.
            Err(short) if entries.is_empty() => return Ok((Err(short), false)),
            Err(_) => break,
        };
        let snapshot_memory = match &prepared {
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
    // Nothing to keep, or something written that must not be (a batch of one on PostgreSQL
    // writes before it compares): roll back.
    let commit = !finishing.is_empty() && by_entry.iter().flatten().all(|f| !f.undo);
    let mut steps = Vec::with_capacity(entries.len());
    for (entry, f) in entries.into_iter().zip(by_entry) {
        steps.push(step_of(a, entry.prepared, f, limit).await?);
    }
    let mut steps = steps.into_iter();
    let first = steps.next().ok_or_else(|| {
        StoreError::Other("a batch decided none of its projects, not even the first".into())
    })?;
    let batched = Batched {
        first,
        rest: steps.collect(),
        reused_revisions: reused,
    };
    Ok((Ok(batched), commit))
}

/// What a prepared project asks of the batch's last statement, if anything.
fn finishing<'s>(project_id: &'s str, prepared: &'s Prepared) -> Option<Finishing<'s>> {
    let (mark, write) = match prepared {
        Prepared::Retry(_) => return None,
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
            if let Some(replay) = finished.and_then(|f| f.replay) {
                return Ok(replayed(&snapshot, replay));
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
