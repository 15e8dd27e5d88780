//! What every worker shares, owned rather than borrowed so that a lane of workers can take a
//! copy to another thread: the store, the settings, the memory budget, the stop signal and the
//! "database down" flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::{Mutex, mpsc};

use super::attempt::{NoRoom, Step, attempt};
use super::batch::attempt_batch;
use super::{MemoryBudget, RunSettings, Stop};
use crate::report::{Outcome, Unresolved};
use crate::store::{Session, Store};

/// The projects of a pass, shared by every worker of every lane.
pub(super) type Queue = Arc<Mutex<mpsc::Receiver<String>>>;

/// Where workers report each project's final outcome for the pass.
pub(super) type Outcomes = mpsc::UnboundedSender<(String, Outcome)>;

/// A worker's context. Clones share the budget, the stop signal and the flag; the store is
/// replaced by a lane's own (see [`Crew::with_store`]).
#[derive(Clone, Debug)]
pub(super) struct Crew {
    pub(super) store: Store,
    pub(super) settings: RunSettings,
    budget: MemoryBudget,
    pub(super) stop: Stop,
    database_down: Arc<AtomicBool>,
    /// Why the run stopped on a cause no retry heals, if it did (the first one).
    halted: Arc<std::sync::OnceLock<String>>,
    /// How the run's batches went.
    batches: Arc<BatchCounts>,
}

impl Crew {
    /// A crew over a store; the memory budget comes from the settings.
    pub(super) fn new(store: Store, settings: RunSettings, stop: Stop) -> Self {
        let budget = MemoryBudget::new(settings.memory_budget);
        Self {
            store,
            settings,
            budget,
            stop,
            database_down: Arc::new(AtomicBool::new(false)),
            halted: Arc::default(),
            batches: Arc::default(),
        }
    }

    /// The same crew working through another store (a lane's own pool).
    pub(super) fn with_store(&self, store: Store) -> Self {
        Self {
            store,
            ..self.clone()
        }
    }

    pub(super) fn backoff(&self) -> impl Iterator<Item = Duration> {
        ExponentialBuilder::default()
            .with_min_delay(self.settings.backoff_min)
            .with_max_delay(self.settings.backoff_max)
            .with_jitter()
            .with_max_times(self.settings.max_attempts.saturating_sub(1) as usize)
            .build()
    }

    /// Builds one project with bounded attempts on a worker's session; `None` when stopped
    /// before starting, and pending when the run is abandoned before it is decided.
    pub(super) async fn process(&self, session: &mut Session, project_id: &str) -> Option<Outcome> {
        if self.stop.is_set() {
            return None;
        }
        tokio::select! {
            biased;
            o = self.attempts(session, project_id) => Some(o),
            // Dropping the attempt drops its transaction, which rolls back: nothing of it is
            // written.
            () = self.stop.abandoned() => Some(abandoned()),
        }
    }

    /// Builds a batch of projects in one transaction ([`attempt_batch`]), each to the outcome
    /// it would have had alone: a project the batch decided is done; those whose try there is
    /// worth another (a claim held elsewhere, a drift, a head not active yet) are tried again
    /// together, in a batch of their own after one backoff, up to `--max-attempts` tries
    /// (contract section 9.2: never one by one, each after its own backoff); and when the
    /// batch failed as a whole (a statement failed for a cause that is no one project's, or
    /// the commit), each is built alone from its first attempt, so a poisoned project ends
    /// only itself. A batch that closed early for memory leaves the rest to the next batch,
    /// its first project alone when it found no room even first. `None` for a project not
    /// started because the run was stopped first.
    pub(super) async fn process_batch(
        &self,
        session: &mut Session,
        projects: &[String],
    ) -> Vec<Option<Outcome>> {
        let mut out: Vec<Option<Outcome>> = vec![None; projects.len()];
        let mut round: Vec<usize> = (0..projects.len()).collect();
        let mut tried: Vec<Again> = Vec::new();
        let mut delays = self.backoff();
        loop {
            let again = self.batch_round(session, projects, &round, &mut out).await;
            // A project tried before that this round did not start (the run was stopped) ends
            // with what its last try said.
            let mut retried = vec![false; projects.len()];
            for a in &again {
                retried[a.index] = true;
            }
            for a in tried.drain(..) {
                let i = a.index;
                if out[i].is_none() && !retried[i] {
                    out[i] = Some(a.unresolved());
                }
            }
            if again.is_empty() {
                return out;
            }
            let database = again.iter().any(|a| a.reason == Unresolved::Database);
            let schema_moved = database && self.schema_moved_past_this_build().await;
            let slept = match delays.next() {
                Some(d) if !schema_moved => self.stop.sleep(d).await && !self.stop.is_set(),
                _ => false,
            };
            if !slept {
                if database && !schema_moved {
                    self.check_database().await;
                }
                for a in again {
                    let i = a.index;
                    out[i] = Some(a.unresolved());
                }
                return out;
            }
            round = again.iter().map(|a| a.index).collect();
            tried = again;
        }
    }

    /// One try of the projects `round` (indices into `projects`) in batches: each decided
    /// project's outcome goes to `out`; those worth another try are returned, with why.
    async fn batch_round(
        &self,
        session: &mut Session,
        projects: &[String],
        round: &[usize],
        out: &mut [Option<Outcome>],
    ) -> Vec<Again> {
        let mut again = Vec::new();
        let mut rest = round;
        while !rest.is_empty() {
            if self.stop.is_set() {
                // Not started now: those tried before keep what their last try said.
                break;
            }
            let names: Vec<String> = rest.iter().map(|&i| projects[i].clone()).collect();
            self.batches.attempts.fetch_add(1, Ordering::Relaxed);
            let tried = tokio::select! {
                biased;
                tried = attempt_batch(session, &self.budget, &names, self.snapshot_share()) => tried,
                // The transaction is dropped and rolls back: nothing of the batch is written.
                () = self.stop.abandoned() => {
                    for &i in rest {
                        out[i] = Some(abandoned());
                    }
                    break;
                }
            };
            let steps = match tried {
                Ok(Err(NoRoom)) => {
                    // Not even the first project's revisions fit what is free now: it waits
                    // for the budget alone, holding nothing else.
                    out[rest[0]] = self.process(session, &names[0]).await;
                    rest = &rest[1..];
                    continue;
                }
                Ok(Ok(b)) => {
                    self.batches
                        .reused_revisions
                        .fetch_add(b.reused_revisions, Ordering::Relaxed);
                    std::iter::once(b.first).chain(b.rest).collect::<Vec<_>>()
                }
                Err(e) => {
                    self.batches.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, projects = rest.len(), "the batch failed as a whole; each project is built alone");
                    for (&i, p) in rest.iter().zip(&names) {
                        out[i] = self.process(session, p).await;
                    }
                    break;
                }
            };
            let decided = steps.len().min(rest.len());
            for (&index, step) in rest.iter().zip(steps) {
                match step {
                    Step::Done(o) => out[index] = Some(o),
                    Step::Halt(detail) => {
                        self.halt(&detail);
                        out[index] = Some(Outcome::Unresolved {
                            reason: Unresolved::Database,
                            detail: crate::quote::bound_detail(detail),
                        });
                    }
                    Step::Retry(reason, detail) => again.push(Again {
                        index,
                        reason,
                        detail,
                    }),
                }
            }
            rest = &rest[decided..];
        }
        again
    }

    /// How the run's batches went.
    pub(super) fn batch_tally(&self) -> super::BatchTally {
        super::BatchTally {
            attempts: self.batches.attempts.load(Ordering::Relaxed),
            failed: self.batches.failed.load(Ordering::Relaxed),
            reused_revisions: self.batches.reused_revisions.load(Ordering::Relaxed),
        }
    }

    /// The most a worker's batch may hold of the memory budget in planned snapshots: its
    /// share of the budget.
    fn snapshot_share(&self) -> u64 {
        self.settings.memory_budget / self.settings.concurrency.max(1) as u64
    }

    /// [`Crew::process`]'s attempts, with their backoff.
    async fn attempts(&self, session: &mut Session, project_id: &str) -> Outcome {
        let first = attempt(session, &self.budget, project_id).await;
        self.attempts_after(session, project_id, first).await
    }

    /// The attempts of a project whose first attempt ended in `first`: the rest, with their
    /// backoff.
    async fn attempts_after(
        &self,
        session: &mut Session,
        project_id: &str,
        first: Step,
    ) -> Outcome {
        let mut delays = self.backoff();
        let mut next = Some(first);
        loop {
            let step = match next.take() {
                Some(step) => step,
                None => attempt(session, &self.budget, project_id).await,
            };
            match step {
                Step::Done(o) => return o,
                Step::Halt(detail) => {
                    self.halt(&detail);
                    return Outcome::Unresolved {
                        reason: Unresolved::Database,
                        detail: crate::quote::bound_detail(detail),
                    };
                }
                Step::Retry(reason, detail) => {
                    if reason == Unresolved::Database && self.schema_moved_past_this_build().await {
                        return Outcome::Unresolved {
                            reason,
                            detail: crate::quote::bound_detail(detail),
                        };
                    }
                    let slept = match delays.next() {
                        Some(d) => self.stop.sleep(d).await,
                        None => false,
                    };
                    if !slept {
                        if reason == Unresolved::Database {
                            self.check_database().await;
                        }
                        // A database's message may quote row values: bounded like any detail.
                        let detail = crate::quote::bound_detail(detail);
                        return Outcome::Unresolved { reason, detail };
                    }
                }
            }
        }
    }

    /// A project whose claim another session held through every attempt counts as claimed
    /// elsewhere only while that stands up at the end: an executor holds the claim now (only
    /// the executor's role can), or the project is current. Otherwise nothing shows that an
    /// executor is building it, and it is `claim-unverified`: unresolved, never success. Other
    /// outcomes pass through.
    pub(super) async fn settle(
        &self,
        session: &mut Session,
        project_id: &str,
        o: Outcome,
    ) -> Outcome {
        let Outcome::Unresolved {
            reason: Unresolved::ClaimedElsewhere,
            ..
        } = &o
        else {
            return o;
        };
        let state = session
            .transaction(async |a| Ok((a.claim_state(project_id).await?, false)))
            .await;
        let detail = match state {
            Ok(s) if s.claimable && (s.held || s.current) => return o,
            Ok(s) if !s.claimable => "no executor can claim this project: its row in \
                 ql3.project_claims is missing (the owner can restore it: INSERT INTO \
                 ql3.project_claims VALUES ('<project>')); it stays pending"
                .to_owned(),
            Ok(_) => "another session held this project's claim through every attempt, but at \
                 the end of the run no executor holds it and the project is not current; it \
                 stays pending: run again, and check for sessions that hold claims without \
                 finishing"
                .to_owned(),
            Err(e) => format!(
                "another session held this project's claim through every attempt, and its \
                 standing could not be checked ({e}); it stays pending: run again"
            ),
        };
        tracing::warn!(project_id, reason = "claim-unverified", %detail, "claim not verified");
        Outcome::Unresolved {
            reason: Unresolved::ClaimUnverified,
            detail,
        }
    }

    /// After a project ran out of attempts on database errors: if the database no longer answers
    /// at all, stop taking work (the run then exits 8 with a truthful summary) instead of
    /// burning every remaining project's attempts against a dead server.
    async fn check_database(&self) {
        if let Err(e) = self.store.ping(Duration::from_secs(5)).await {
            tracing::error!(error = %e, "the database stopped answering: stopping the run");
            self.database_down.store(true, Ordering::SeqCst);
            self.stop.trigger();
        }
    }

    /// Whether a newer release migrated the schema while this run was going (its writes may
    /// then fail, or be misread, for ever): read after an attempt failed on the database, and
    /// every [`super::SCHEMA_WATCH`]. If so the run stops taking work and ends with exit 8, as
    /// it would have at its start, instead of going on against a schema it does not know.
    pub(super) async fn schema_moved_past_this_build(&self) -> bool {
        match self.store.check_migrated().await {
            Err(e @ crate::store::StoreError::NewerSchema { .. }) => {
                if !self.database_down.swap(true, Ordering::SeqCst) {
                    tracing::error!(error = %e, "stopping the run");
                }
                self.stop.trigger();
                true
            }
            _ => false,
        }
    }

    /// Stops the run on a cause no retry heals (see [`Step::Halt`]); the first cause is kept.
    pub(super) fn halt(&self, why: &str) {
        if self.halted.set(why.to_owned()).is_ok() {
            tracing::error!(error = %why, "stopping the run: no retry heals this");
        }
        self.stop.trigger();
    }

    /// Why the run was halted, if it was.
    pub(super) fn halted(&self) -> Option<&str> {
        self.halted.get().map(String::as_str)
    }

    /// Whether any worker found the database down.
    pub(super) fn database_down(&self) -> bool {
        self.database_down.load(Ordering::SeqCst)
    }

    /// One worker: takes projects from the queue until it closes, on a session of its own, and
    /// reports each outcome. While the queue is empty the worker holds no connection, so that
    /// the page readers, which share the first lane's pool, can read in parallel. With
    /// `--batch-size` above 1 it takes up to that many projects at once, but never waits for
    /// more than the first: a batch is what the queue holds now.
    pub(super) async fn work(&self, queue: &Queue, outcomes: &Outcomes) {
        let mut session = self.store.session();
        let size = self.settings.batch_size.max(1);
        loop {
            let batch = {
                let mut queue = queue.lock().await;
                let first = match queue.try_recv() {
                    Ok(p) => Some(p),
                    Err(_) => {
                        session.release();
                        queue.recv().await
                    }
                };
                let mut batch: Vec<String> = first.into_iter().collect();
                while !batch.is_empty() && batch.len() < size {
                    match queue.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                batch
            };
            if batch.is_empty() {
                return;
            }
            let decided = if batch.len() == 1 {
                vec![self.process(&mut session, &batch[0]).await]
            } else {
                self.process_batch(&mut session, &batch).await
            };
            for (project_id, o) in batch.into_iter().zip(decided) {
                if let Some(o) = o
                    && outcomes.send((project_id, o)).is_err()
                {
                    // The pass stopped listening: nothing more to report to.
                    return;
                }
            }
        }
    }
}

/// A project of a batch whose try is worth another: its index in the batch, and why.
struct Again {
    index: usize,
    reason: Unresolved,
    detail: String,
}

impl Again {
    /// What the project ends with when it is not tried again.
    fn unresolved(self) -> Outcome {
        Outcome::Unresolved {
            reason: self.reason,
            // A database's message may quote row values: bounded like any detail.
            detail: crate::quote::bound_detail(self.detail),
        }
    }
}

/// The run's batches, counted by every worker of every lane.
#[derive(Debug, Default)]
struct BatchCounts {
    /// Batch attempts made.
    attempts: AtomicU64,
    /// Of those, the ones that failed as a whole.
    failed: AtomicU64,
    /// Heads that took a revision their batch had already read.
    reused_revisions: AtomicU64,
}

/// The outcome of a project whose attempt was given up at the end of the grace period.
fn abandoned() -> Outcome {
    Outcome::Unresolved {
        reason: Unresolved::Database,
        detail: "the run was stopped and this project's attempt did not finish within the \
                 grace period (--shutdown-grace): it was abandoned, its transaction rolled \
                 back, and it stays pending for the next run"
            .to_owned(),
    }
}
