//! The coordinator (`run`, `publish`): pages of pending projects, bounded concurrency, bounded
//! attempts with jittered exponential backoff, final probes and cooperative shutdown.

mod attempt;
mod batch;
mod budget;
mod crew;
mod lanes;
mod memory;
mod readings;
pub mod slots;
mod stop;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

pub use attempt::{Step, attempt, drift};
pub use budget::{MemoryBudget, Reservation};
use crew::{Crew, Queue};
pub use lanes::pool_size;
pub use memory::{BASE_BYTES, LARGEST_READ_BYTES, WORKER_BYTES, memory_bound};
pub use stop::Stop;

use crate::defaults;
use crate::model::Digest;
use crate::report::{Outcome, RunSummary, Shard, Unresolved};
use crate::store::{Scope, Session, Store, StoreError};

/// What `run` and `publish` are told.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Pending projects per keyset page.
    pub page_size: u32,
    /// Projects in flight at once. On PostgreSQL each worker keeps a connection and the pages
    /// use one more: `concurrency + 1` in all, of which the store's own pool needs
    /// [`pool_size`] (the other lanes open theirs).
    pub concurrency: usize,
    /// Projects a worker builds in one transaction (contract section 9), each keeping its own
    /// outcome: each project's writes are gated on its own second observation; 1 is one
    /// project a transaction (a batch of one).
    pub batch_size: usize,
    /// Attempts per project per pass.
    pub max_attempts: u32,
    /// Fresh passes over what is still pending after the last page.
    pub final_probes: u32,
    /// Revision bytes in flight across all workers.
    pub memory_budget: u64,
    /// This replica's shard.
    pub shard: Shard,
    /// Stop taking work after this long.
    pub deadline: Option<Duration>,
    /// First backoff delay.
    pub backoff_min: Duration,
    /// Largest backoff delay.
    pub backoff_max: Duration,
    /// Exit 6 when any project was rejected.
    pub fail_on_rejected: bool,
    /// Prove every project instead of reading the pending index (`--full-scan`).
    pub full_scan: bool,
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            page_size: defaults::PAGE_SIZE,
            concurrency: defaults::CONCURRENCY as usize,
            batch_size: defaults::BATCH_SIZE as usize,
            max_attempts: defaults::MAX_ATTEMPTS,
            final_probes: defaults::FINAL_PROBES,
            memory_budget: defaults::MEMORY_BUDGET.value,
            shard: Shard { index: 0, count: 1 },
            deadline: None,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            fail_on_rejected: false,
            full_scan: false,
        }
    }
}

impl RunSettings {
    /// Which projects a pass looks at.
    pub fn scope(&self) -> Scope {
        if self.full_scan {
            Scope::Full
        } else {
            Scope::Marked
        }
    }
}

/// Observes each project's final outcome as it is decided (progress bars, logs, tests).
pub trait Observer: Send + Sync {
    /// A project's outcome for this pass.
    fn outcome(&self, project_id: &str, outcome: &Outcome);

    /// `n` more projects were handed to the workers.
    fn listed(&self, _n: usize) {}

    /// A pass has handed out every project it will: what is listed is all the work left.
    fn listing_done(&self) {}
}

/// An observer that logs one structured event per outcome.
#[derive(Debug, Default)]
pub struct LogObserver;

impl Observer for LogObserver {
    fn outcome(&self, project_id: &str, o: &Outcome) {
        let (reason, detail) = (o.reason().unwrap_or(""), o.detail().unwrap_or(""));
        let digest = o.snapshot_digest().map_or("", Digest::as_str);
        match o {
            Outcome::Integrity { .. } => {
                tracing::error!(
                    project_id,
                    outcome = o.name(),
                    reason,
                    detail,
                    "integrity violation"
                )
            }
            Outcome::Rejected { .. } | Outcome::Unresolved { .. } => {
                tracing::warn!(
                    project_id,
                    outcome = o.name(),
                    reason,
                    detail,
                    "project not published"
                )
            }
            Outcome::Vanished => tracing::info!(
                project_id,
                outcome = o.name(),
                "project deleted while it was built: nothing stored for it, its mark cleared"
            ),
            _ => tracing::info!(
                project_id,
                outcome = o.name(),
                snapshot_digest = digest,
                "project done"
            ),
        }
    }
}

/// Drives builds through a store.
pub struct Coordinator<'a> {
    crew: Crew,
    observer: &'a dyn Observer,
}

impl std::fmt::Debug for Coordinator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("settings", &self.crew.settings)
            .finish_non_exhaustive()
    }
}

/// Outcomes a run keeps whole (for `demo`'s table); past them it keeps each project's outcome
/// word and code only, so a long run's memory does not grow with the details it logged.
pub const KEPT_OUTCOMES: usize = 1000;

/// How often a run reads the schema's version while it works: a newer release's migration
/// committed beside a running Job (an upgrade under way) stops the run within this, exit 8,
/// instead of letting a build older than the schema go on writing to it (one small read).
pub const SCHEMA_WATCH: Duration = Duration::from_secs(5);

/// The result of `run`: the summary plus each project's final outcome.
#[derive(Debug)]
pub struct RunReport {
    /// The summary (exit code decided).
    pub summary: RunSummary,
    /// Final outcome per project attempted (past [`KEPT_OUTCOMES`], without detail or digest).
    pub outcomes: BTreeMap<String, Outcome>,
    /// How the run's batches went (`--batch-size` above 1).
    pub batches: BatchTally,
}

/// How a run's batches went: for benchmarks, tests and the debug log; the summary counts
/// projects, never batches (contract section 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchTally {
    /// Batch attempts made (a batch closed early for memory and its rest count as two).
    pub attempts: u64,
    /// Of those, the ones that failed as a whole and were built again project by project.
    pub failed: u64,
    /// Heads that took a revision their batch had already fetched and parsed for an earlier
    /// project, instead of reading it again.
    pub reused_revisions: u64,
}

impl<'a> Coordinator<'a> {
    /// A coordinator over a store.
    pub fn new(
        store: Store,
        settings: RunSettings,
        stop: Stop,
        observer: &'a dyn Observer,
    ) -> Self {
        Self {
            crew: Crew::new(store, settings, stop),
            observer,
        }
    }

    /// Builds one project with bounded attempts on a worker's session; `None` when stopped
    /// before starting.
    pub async fn process(&self, session: &mut Session, project_id: &str) -> Option<Outcome> {
        self.crew.process(session, project_id).await
    }

    /// Whether the database was found down during this coordinator's work.
    pub fn database_down(&self) -> bool {
        self.crew.database_down()
    }

    /// Why the work stopped on a cause no retry heals (a login without its grants, a damaged
    /// database file), if it did: the command then exits 1.
    pub fn halted(&self) -> Option<&str> {
        self.crew.halted()
    }

    /// `publish PROJECT`: one project now. An unknown project is an input error.
    pub async fn publish(&self, project_id: &str) -> Result<Outcome, StoreError> {
        if !self.crew.store.project_exists(project_id).await? {
            return Err(StoreError::Input(format!(
                "project {} does not exist; check the id or import it first",
                crate::quote::shown(project_id)
            )));
        }
        let mut session = self.crew.store.session();
        let outcome = match self.process(&mut session, project_id).await {
            Some(o) => self.crew.settle(&mut session, project_id, o).await,
            None => Outcome::Unresolved {
                reason: Unresolved::Database,
                detail: "stopped before the first attempt".into(),
            },
        };
        self.observer.outcome(project_id, &outcome);
        Ok(outcome)
    }

    /// One page of pending projects in a range of the keyset, retried on transient errors.
    async fn page(&self, after: &str, through: Option<&str>) -> Result<Vec<String>, StoreError> {
        let mut delays = self.crew.backoff();
        loop {
            match self
                .crew
                .store
                .page_through(
                    after,
                    through,
                    self.crew.settings.page_size,
                    self.crew.settings.scope(),
                )
                .await
            {
                Ok(p) => return Ok(p),
                Err(e) if e.is_transient() => match delays.next() {
                    Some(d) if self.crew.stop.sleep(d).await => {
                        tracing::warn!(error = %e, "pending-project page failed; retrying")
                    }
                    _ => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// The keyset ranges a pass reads at once, one per lane: `(after, through)`, the last one
    /// open-ended. A scan where little is pending is the proofs of every project, on one server
    /// process per range, so it takes about `1/lanes` of the time. If the split points cannot be
    /// read, one range: the pages then report the error themselves.
    async fn ranges(&self, lanes: usize) -> Vec<(String, Option<String>)> {
        let points = match self
            .crew
            .store
            .split_points(lanes, self.crew.settings.scope())
            .await
        {
            Ok(points) => points,
            Err(e) => {
                tracing::debug!(error = %e, "cannot split the keyset; reading it as one range");
                Vec::new()
            }
        };
        let mut ranges = Vec::with_capacity(points.len() + 1);
        let mut after = String::new();
        for point in points {
            ranges.push((std::mem::replace(&mut after, point.clone()), Some(point)));
        }
        ranges.push((after, None));
        ranges
    }

    /// Pages through one range of the keyset into the queue, `skip`ping some; returns whether
    /// it finished (false when stopped), how many projects it handed out and how many pages it
    /// read.
    async fn produce(
        &self,
        (mut cursor, through): (String, Option<String>),
        skip: &BTreeSet<String>,
        sender: tokio::sync::mpsc::Sender<String>,
    ) -> Result<(bool, usize, u64), StoreError> {
        let (mut attempted, mut pages) = (0, 0);
        loop {
            if self.crew.stop.is_set() {
                return Ok((false, attempted, pages));
            }
            let page = self.page(&cursor, through.as_deref()).await?;
            pages += 1;
            let full = page.len() as u32 >= self.crew.settings.page_size;
            if let Some(last) = page.last() {
                cursor.clone_from(last);
            }
            for p in page {
                if self.crew.settings.shard.owns(&p) && !skip.contains(&p) {
                    attempted += 1;
                    self.observer.listed(1);
                    // Closed only when every worker is gone, which cannot happen first.
                    if sender.send(p).await.is_err() {
                        return Ok((false, attempted, pages));
                    }
                }
            }
            if !full {
                return Ok((!self.crew.stop.is_set(), attempted, pages));
            }
        }
    }

    /// Pages through this shard's pending projects `skip`ping some; returns whether it finished
    /// (false when stopped or the database failed) and how many projects it handed out.
    ///
    /// The pages feed a queue that `--concurrency` workers drain, so the next page is read
    /// while the last projects of this one are still being built. With several lanes the
    /// keyset is read as that many ranges at once.
    async fn pass(
        &self,
        skip: &BTreeSet<String>,
        summary: &mut RunSummary,
        outcomes: &mut BTreeMap<String, Outcome>,
        count_pages: bool,
    ) -> Result<(bool, usize), StoreError> {
        let (sender, receiver) =
            tokio::sync::mpsc::channel(self.crew.settings.page_size.max(1) as usize);
        let queue: Queue = std::sync::Arc::new(tokio::sync::Mutex::new(receiver));
        let (report, mut decided) = tokio::sync::mpsc::unbounded_channel();
        let shares = lanes::plan(self.crew.store.dialect(), self.crew.settings.concurrency);
        let ranges = self.ranges(shares.len()).await;
        let pages = async move {
            // Each producer holds a sender; the queue closes when the last one is done.
            let producers: Vec<_> = ranges
                .into_iter()
                .map(|range| self.produce(range, skip, sender.clone()))
                .collect();
            drop(sender);
            let (mut finished, mut attempted, mut pages) = (true, 0, 0);
            for result in futures::future::join_all(producers).await {
                let (done, n, read) = result?;
                finished &= done;
                attempted += n;
                pages += read;
            }
            self.observer.listing_done();
            Ok::<_, StoreError>((finished, attempted, pages))
        };
        let work_done = tokio_util::sync::CancellationToken::new();
        let work = {
            let work_done = work_done.clone();
            // Moves `report` in, so that the outcomes' channel closes when the work is done.
            async move {
                lanes::run(&self.crew, &shares, &queue, &report).await;
                work_done.cancel();
            }
        };
        let watch = async {
            let mut tick = tokio::time::interval(SCHEMA_WATCH);
            tick.tick().await;
            loop {
                tokio::select! {
                    () = work_done.cancelled() => break,
                    () = self.crew.stop.wait() => break,
                    _ = tick.tick() => {
                        let stop_watching = tokio::select! {
                            moved = self.crew.schema_moved_past_this_build() => moved,
                            () = work_done.cancelled() => true,
                            () = self.crew.stop.abandoned() => true,
                        };
                        if stop_watching {
                            break;
                        }
                    }
                }
            }
        };
        let collect = async {
            while let Some((p, o)) = decided.recv().await {
                self.observer.outcome(&p, &o);
                // Each outcome was logged in full as it came; past a bound a run keeps only
                // what it needs to count each project once.
                let o = if outcomes.len() >= KEPT_OUTCOMES {
                    o.compact()
                } else {
                    o
                };
                outcomes.insert(p, o);
            }
        };
        // The pages give up with the work in flight: a page read that hangs must not keep a
        // stopped run from ending.
        let pages = async {
            tokio::select! {
                paged = pages => paged,
                () = self.crew.stop.abandoned() => Ok((false, 0, 0)),
            }
        };
        let (paged, (), (), ()) = futures::future::join4(pages, work, collect, watch).await;
        let (finished, attempted, pages) = paged?;
        if count_pages {
            summary.pages += pages;
        }
        Ok((finished && !self.crew.stop.is_set(), attempted))
    }

    /// Settles every project left claimed elsewhere (see [`Crew::settle`]), one at a time:
    /// there are few, and each is one short statement.
    async fn settle_claims(&self, outcomes: &mut BTreeMap<String, Outcome>) {
        let mut session = self.crew.store.session();
        for (p, o) in outcomes.iter_mut() {
            if matches!(
                o,
                Outcome::Unresolved {
                    reason: Unresolved::ClaimedElsewhere,
                    ..
                }
            ) {
                *o = self.crew.settle(&mut session, p, o.clone()).await;
            }
        }
    }

    /// A pass that could not read its pages: the run halts on a cause no retry heals (exit 1);
    /// otherwise the database is down (exit 8), which this returns.
    fn pass_failed(&self, e: &StoreError) -> bool {
        if e.is_fatal() {
            self.crew.halt(&e.to_string());
            false
        } else {
            tracing::error!(error = %e, "cannot read pending projects");
            true
        }
    }

    /// Whether the shard still holds a project this run's kind of pass would take (one row of
    /// the first page); `true` when that cannot be read, since pending is the safe answer.
    async fn anything_pending(&self) -> bool {
        let scope = self.crew.settings.scope();
        match self.crew.store.page_through("", None, 1, scope).await {
            Ok(page) => !page.is_empty(),
            Err(_) => true,
        }
    }

    /// The projects a final probe skips: those decided for good in this run (an integrity
    /// violation; a rejection), but for a rejected project marked again since (contract section
    /// 9.3): its rejection cleared the mark it read, so a mark now is new input (a revision
    /// that arrived mid-build, say), tried again in this run. A probe over the marks lists only
    /// marked projects, so it skips no rejection at all; a full scan lists every pending
    /// project, so it reads the marks to tell. If they cannot be read, every rejection is
    /// skipped: the next run's pass over the marks takes the new input.
    async fn decided_for_good(&self, outcomes: &BTreeMap<String, Outcome>) -> BTreeSet<String> {
        let integrity = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Integrity { .. }))
            .map(|(p, _)| p.clone());
        if self.crew.settings.scope() == Scope::Marked {
            return integrity.collect();
        }
        let marked = self.marked_now().await.unwrap_or_default();
        let rejected = outcomes
            .iter()
            .filter(|(p, o)| matches!(o, Outcome::Rejected { .. }) && !marked.contains(*p))
            .map(|(p, _)| p.clone());
        integrity.chain(rejected).collect()
    }

    /// Every project of the shard marked now, page by page.
    async fn marked_now(&self) -> Result<BTreeSet<String>, StoreError> {
        let mut marked = BTreeSet::new();
        let mut cursor = String::new();
        loop {
            let page = self
                .crew
                .store
                .page_through(&cursor, None, self.crew.settings.page_size, Scope::Marked)
                .await?;
            let full = page.len() as u32 >= self.crew.settings.page_size;
            if let Some(last) = page.last() {
                cursor.clone_from(last);
            }
            marked.extend(
                page.into_iter()
                    .filter(|p| self.crew.settings.shard.owns(p)),
            );
            if !full {
                return Ok(marked);
            }
        }
    }

    /// `run`: every pending project of the shard, then the final probes.
    pub async fn run(&self) -> RunReport {
        let started = Instant::now();
        let mut summary = RunSummary::new(self.crew.settings.shard);
        let mut outcomes = BTreeMap::new();
        let mut database_down = false;
        let mut finished = match self
            .pass(&BTreeSet::new(), &mut summary, &mut outcomes, true)
            .await
        {
            Ok((done, _)) => done,
            Err(e) => {
                database_down |= self.pass_failed(&e);
                false
            }
        };
        let mut probes = 0;
        while finished && probes < self.crew.settings.final_probes {
            let skip = self.decided_for_good(&outcomes).await;
            probes += 1;
            match self.pass(&skip, &mut summary, &mut outcomes, false).await {
                Ok((done, attempted)) => {
                    summary.final_probes += 1;
                    finished = done;
                    if attempted == 0 {
                        break;
                    }
                }
                Err(e) => {
                    database_down |= self.pass_failed(&e);
                    finished = false;
                }
            }
        }
        database_down |= self.database_down();
        let halted = self.halted().is_some();
        // An abandoned run asks the database nothing more: it may be what stopped answering.
        if !database_down && !halted && !self.crew.stop.is_abandoned() {
            self.settle_claims(&mut outcomes).await;
        }
        summary.projects_scanned = outcomes.len() as u64;
        for o in outcomes.values() {
            summary.count(o);
        }
        let mut left_pending = !finished && !database_down;
        // Stopped early (a signal, the deadline): pending only if something of the shard is.
        if left_pending && !halted && !self.crew.stop.is_abandoned() {
            left_pending = self.anything_pending().await;
        }
        summary.elapsed_ms = started.elapsed().as_millis() as u64;
        summary.decide_exit(
            halted,
            database_down,
            left_pending,
            self.crew.settings.fail_on_rejected,
        );
        RunReport {
            summary,
            outcomes,
            batches: self.crew.batch_tally(),
        }
    }
}
