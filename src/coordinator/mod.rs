//! The coordinator (`run`, `publish`): pages of pending projects, bounded concurrency, bounded
//! attempts with jittered exponential backoff, final probes and cooperative shutdown.

mod attempt;
mod budget;
mod stop;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};

pub use attempt::{Step, attempt, drift};
pub use budget::{MemoryBudget, Reservation};
pub use stop::Stop;

use crate::report::{Outcome, RunSummary, Shard, Unresolved};
use crate::store::{Session, Store, StoreError};

/// What `run` and `publish` are told.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Pending projects per keyset page.
    pub page_size: u32,
    /// Projects in flight at once. On PostgreSQL each worker keeps a connection and the pages
    /// use one more, so the store's pool needs `concurrency + 1` connections.
    pub concurrency: usize,
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
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            page_size: 256,
            concurrency: 4,
            max_attempts: 4,
            final_probes: 2,
            memory_budget: 96 * 1024 * 1024,
            shard: Shard { index: 0, count: 1 },
            deadline: None,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            fail_on_rejected: false,
        }
    }
}

/// Observes each project's final outcome as it is decided (progress bars, logs, tests).
pub trait Observer: Send + Sync {
    /// A project's outcome for this pass.
    fn outcome(&self, project_id: &str, outcome: &Outcome);
}

/// An observer that logs one structured event per outcome.
#[derive(Debug, Default)]
pub struct LogObserver;

impl Observer for LogObserver {
    fn outcome(&self, project_id: &str, o: &Outcome) {
        let (reason, detail) = (o.reason().unwrap_or(""), o.detail().unwrap_or(""));
        let digest = o.snapshot_digest().unwrap_or("");
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
    store: Store,
    settings: RunSettings,
    budget: MemoryBudget,
    stop: Stop,
    observer: &'a dyn Observer,
    database_down: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Coordinator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The result of `run`: the summary plus each project's final outcome.
#[derive(Debug)]
pub struct RunReport {
    /// The summary (exit code decided).
    pub summary: RunSummary,
    /// Final outcome per project attempted.
    pub outcomes: BTreeMap<String, Outcome>,
}

impl<'a> Coordinator<'a> {
    /// A coordinator over a store.
    pub fn new(
        store: Store,
        settings: RunSettings,
        stop: Stop,
        observer: &'a dyn Observer,
    ) -> Self {
        let budget = MemoryBudget::new(settings.memory_budget);
        Self {
            store,
            settings,
            budget,
            stop,
            observer,
            database_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn backoff(&self) -> impl Iterator<Item = Duration> {
        ExponentialBuilder::default()
            .with_min_delay(self.settings.backoff_min)
            .with_max_delay(self.settings.backoff_max)
            .with_jitter()
            .with_max_times(self.settings.max_attempts.saturating_sub(1) as usize)
            .build()
    }

    /// Builds one project with bounded attempts on a worker's session; `None` when stopped
    /// before starting.
    pub async fn process(&self, session: &mut Session, project_id: &str) -> Option<Outcome> {
        if self.stop.is_set() {
            return None;
        }
        let mut delays = self.backoff();
        loop {
            match attempt(session, &self.budget, project_id).await {
                Step::Done(o) => return Some(o),
                Step::Retry(reason, detail) => {
                    let slept = match delays.next() {
                        Some(d) => self.stop.sleep(d).await,
                        None => false,
                    };
                    if !slept {
                        if reason == Unresolved::Database {
                            self.check_database().await;
                        }
                        return Some(Outcome::Unresolved { reason, detail });
                    }
                }
            }
        }
    }

    /// After a project ran out of attempts on database errors: if the database no longer answers
    /// at all, stop taking work (the run then exits 8 with a truthful summary) instead of
    /// burning every remaining project's attempts against a dead server.
    async fn check_database(&self) {
        if let Err(e) = self.store.ping(Duration::from_secs(5)).await {
            tracing::error!(error = %e, "the database stopped answering: stopping the run");
            self.database_down
                .store(true, std::sync::atomic::Ordering::SeqCst);
            self.stop.trigger();
        }
    }

    /// Whether the database was found down during this coordinator's work.
    pub fn database_down(&self) -> bool {
        self.database_down.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `publish PROJECT`: one project now. An unknown project is an input error.
    pub async fn publish(&self, project_id: &str) -> Result<Outcome, StoreError> {
        if !self.store.project_exists(project_id).await? {
            return Err(StoreError::Input(format!(
                "project {project_id} does not exist; check the id or import it first"
            )));
        }
        let outcome = self
            .process(&mut self.store.session(), project_id)
            .await
            .unwrap_or(Outcome::Unresolved {
                reason: Unresolved::Database,
                detail: "stopped before the first attempt".into(),
            });
        self.observer.outcome(project_id, &outcome);
        Ok(outcome)
    }

    async fn page(&self, after: &str) -> Result<Vec<String>, StoreError> {
        let mut delays = self.backoff();
        loop {
            match self
                .store
                .pending_page(after, self.settings.page_size)
                .await
            {
                Ok(p) => return Ok(p),
                Err(e) if e.is_transient() => match delays.next() {
                    Some(d) if self.stop.sleep(d).await => {
                        tracing::warn!(error = %e, "pending-project page failed; retrying")
                    }
                    _ => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// One worker: takes projects from the queue until it closes, on a session of its own.
    async fn worker(
        &self,
        queue: &tokio::sync::Mutex<tokio::sync::mpsc::Receiver<String>>,
        decided: &std::sync::Mutex<Vec<(String, Outcome)>>,
    ) {
        let mut session = self.store.session();
        loop {
            let next = queue.lock().await.recv().await;
            let Some(project_id) = next else { return };
            if let Some(o) = self.process(&mut session, &project_id).await {
                self.observer.outcome(&project_id, &o);
                decided
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((project_id, o));
            }
        }
    }

    /// Pages through this shard's pending projects `skip`ping some; returns whether it finished
    /// (false when stopped or the database failed) and how many projects it handed out.
    ///
    /// The pages feed a queue that `--concurrency` workers drain, so the next page is read
    /// while the last projects of this one are still being built.
    async fn pass(
        &self,
        skip: &BTreeSet<String>,
        summary: &mut RunSummary,
        outcomes: &mut BTreeMap<String, Outcome>,
        count_pages: bool,
    ) -> Result<(bool, usize), StoreError> {
        let (sender, receiver) =
            tokio::sync::mpsc::channel(self.settings.page_size.max(1) as usize);
        let queue = tokio::sync::Mutex::new(receiver);
        let decided = std::sync::Mutex::new(Vec::new());
        let pages = async move {
            let mut cursor = String::new();
            let (mut attempted, mut pages) = (0, 0);
            loop {
                if self.stop.is_set() {
                    return Ok::<_, StoreError>((false, attempted, pages));
                }
                let page = self.page(&cursor).await?;
                pages += 1;
                let full = page.len() as u32 >= self.settings.page_size;
                if let Some(last) = page.last() {
                    cursor.clone_from(last);
                }
                for p in page {
                    if self.settings.shard.owns(&p) && !skip.contains(&p) {
                        attempted += 1;
                        // Closed only when every worker is gone, which cannot happen first.
                        if sender.send(p).await.is_err() {
                            return Ok((false, attempted, pages));
                        }
                    }
                }
                if !full {
                    return Ok((!self.stop.is_set(), attempted, pages));
                }
            }
        };
        let workers = futures::future::join_all(
            (0..self.settings.concurrency.max(1)).map(|_| self.worker(&queue, &decided)),
        );
        let (paged, ()) = futures::future::join(pages, async {
            workers.await;
        })
        .await;
        for (p, o) in decided.into_inner().unwrap_or_else(|p| p.into_inner()) {
            outcomes.insert(p, o);
        }
        let (finished, attempted, pages) = paged?;
        if count_pages {
            summary.pages += pages;
        }
        Ok((finished && !self.stop.is_set(), attempted))
    }

    /// `run`: every pending project of the shard, then the final probes.
    pub async fn run(&self) -> RunReport {
        let started = Instant::now();
        let mut summary = RunSummary::new(self.settings.shard);
        let mut outcomes = BTreeMap::new();
        let mut database_down = false;
        let mut finished = match self
            .pass(&BTreeSet::new(), &mut summary, &mut outcomes, true)
            .await
        {
            Ok((done, _)) => done,
            Err(e) => {
                tracing::error!(error = %e, "cannot read pending projects");
                database_down = true;
                false
            }
        };
        let mut probes = 0;
        while finished && probes < self.settings.final_probes {
            // Projects decided for good in this run are not probed again.
            let skip: BTreeSet<String> = outcomes
                .iter()
                .filter(|(_, o)| matches!(o, Outcome::Rejected { .. } | Outcome::Integrity { .. }))
                .map(|(p, _)| p.clone())
                .collect();
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
                    tracing::error!(error = %e, "cannot read pending projects");
                    database_down = true;
                    finished = false;
                }
            }
        }
        database_down |= self.database_down();
        summary.projects_scanned = outcomes.len() as u64;
        for o in outcomes.values() {
            summary.count(o);
        }
        let left_pending = !finished && !database_down;
        summary.elapsed_ms = started.elapsed().as_millis() as u64;
        summary.decide_exit(database_down, left_pending, self.settings.fail_on_rejected);
        RunReport { summary, outcomes }
    }
}
