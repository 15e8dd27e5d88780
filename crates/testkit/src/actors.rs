//! The actors of a fault scenario (the storm, the Patroni scenarios): executor replicas, a
//! control plane activating generations and consumers checking what they are served, each a
//! task that acts over and over while the scenario injects its faults, then stops when told.
//! The scenarios differ in their faults and in how their replicas' passes are judged; the
//! control plane and the consumer are the same actor in both, written here once.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use package_executor::sources;
use package_executor::store::{ConnectOptions, Store};
use sqlx::PgConnection;
use tokio::task::JoinHandle;

use crate::chaos::{Rng, consumer_check_on, kill};
use crate::db::{exe, partial_snapshots};

/// Whether the scenario still runs: an actor's loop condition.
#[derive(Clone, Debug)]
pub struct Running(Arc<AtomicBool>);

impl Running {
    /// True until [`Actors::stop`].
    pub fn get(&self) -> bool {
        !self.0.load(Ordering::SeqCst)
    }
}

/// The executor processes running now, so that a fault can SIGKILL one and the end of the
/// scenario all of them.
#[derive(Clone, Debug, Default)]
pub struct Pids(Arc<Mutex<Vec<u32>>>);

impl Pids {
    /// A process started.
    pub fn add(&self, pid: u32) {
        self.0.lock().unwrap().push(pid);
    }

    /// A process ended.
    pub fn remove(&self, pid: u32) {
        self.0.lock().unwrap().retain(|p| *p != pid);
    }

    /// One of the running processes, chosen by `rng` (none when none runs).
    pub fn pick(&self, rng: &Mutex<Rng>) -> Option<u32> {
        let pids = self.0.lock().unwrap();
        let n = pids.len() as u64;
        (n > 0).then(|| pids[rng.lock().unwrap().below(n) as usize])
    }
}

/// What a consumer saw: checks made, and how many returned a (proven current) snapshot.
#[derive(Debug, Default)]
pub struct Tally {
    pub checks: AtomicU64,
    pub hits: AtomicU64,
}

impl Tally {
    /// Checks so far.
    pub fn checks(&self) -> u64 {
        self.checks.load(Ordering::Relaxed)
    }

    /// Checks that returned a snapshot so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

/// A scenario's actors, its seeded generator and its executor processes.
pub struct Actors {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    /// The scenario's choices (pauses, faults, the actors' picks), replayable from its seed.
    pub rng: Arc<Mutex<Rng>>,
    /// The executor processes the replicas started.
    pub pids: Pids,
}

impl Actors {
    /// No actors yet; `seed` seeds every choice.
    pub fn new(seed: u64) -> Self {
        Self {
            stop: Arc::new(AtomicBool::new(false)),
            tasks: Vec::new(),
            rng: Arc::new(Mutex::new(Rng(seed))),
            pids: Pids::default(),
        }
    }

    /// The loop condition to hand an actor.
    pub fn running(&self) -> Running {
        Running(self.stop.clone())
    }

    /// Starts an actor.
    pub fn spawn(&mut self, actor: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(actor));
    }

    /// Stops every actor: none starts another iteration, the executor processes still running
    /// are SIGKILLed (a pass can take its whole deadline), and every actor is awaited (a
    /// panicking actor fails the scenario here).
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for pid in self.pids.0.lock().unwrap().iter() {
            kill(*pid);
        }
        for task in self.tasks {
            task.await.unwrap();
        }
    }

    /// The control plane: every 50 ms, activates generation 1 to `generations` of a random
    /// package (`p{project:05}-k{0|1}`) of `projects`, counting what it activated. A connection
    /// that fails (or an activation that takes over 5 s: a silent link) is dropped, closed in
    /// the background, and made again at the next tick; "already active" is nothing to do.
    pub fn control_plane(
        &mut self,
        options: ConnectOptions,
        projects: u64,
        generations: u64,
        activations: Arc<AtomicU64>,
    ) {
        let (running, rng) = (self.running(), self.rng.clone());
        self.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let mut store: Option<Store> = None;
            while running.get() {
                tick.tick().await;
                if store.is_none() {
                    store = tokio::time::timeout(Duration::from_secs(10), Store::connect(&options))
                        .await
                        .ok()
                        .and_then(Result::ok);
                }
                let Some(s) = &store else { continue };
                let (p, k, g) = {
                    let mut r = rng.lock().unwrap();
                    (
                        r.below(projects),
                        r.below(2),
                        1 + r.below(generations) as i64,
                    )
                };
                let activation = tokio::time::timeout(
                    Duration::from_secs(5),
                    sources::activate(s, &format!("p{p:05}-k{k}"), g),
                )
                .await;
                match activation {
                    Ok(Ok(())) => {
                        activations.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(e)) if !e.is_transient() => {} // already active: nothing to do
                    _ => {
                        if let Some(s) = store.take() {
                            tokio::spawn(async move { s.close().await });
                        }
                    }
                }
            }
        });
    }

    /// A consumer: every `period`, connects with `connect`, asks for the current snapshot of a
    /// random project of `projects` and checks it against the live heads
    /// ([`consumer_check_on`]: a stale snapshot fails the scenario, naming `seed`). A check
    /// the database does not answer within 5 s is not counted.
    pub fn consumer<C, F>(
        &mut self,
        period: Duration,
        projects: u64,
        seed: u64,
        tally: Arc<Tally>,
        connect: C,
    ) where
        C: Fn() -> F + Send + Sync + 'static,
        F: Future<Output = Option<PgConnection>> + Send,
    {
        let (running, rng) = (self.running(), self.rng.clone());
        self.spawn(async move {
            // Paced, so that a refused connection (the server is down) is no busy loop.
            let mut tick = tokio::time::interval(period);
            while running.get() {
                tick.tick().await;
                let p = rng.lock().unwrap().below(projects);
                let check = async {
                    let mut conn = connect().await?;
                    let hit = consumer_check_on(&mut conn, &format!("p{p:05}"), seed).await;
                    let _ = sqlx::Connection::close(conn).await;
                    hit
                };
                if let Ok(Some(hit)) = tokio::time::timeout(Duration::from_secs(5), check).await {
                    tally.checks.fetch_add(1, Ordering::Relaxed);
                    if hit {
                        tally.hits.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
}

/// After the faults, with the actors stopped: one `run` through each of `exec_urls` exits 0,
/// nothing is left pending, no snapshot lacks a source row (read through `admin`), and
/// `verify` recomputes every digest. `report` (the scenario's, naming its seed) heads every
/// failure.
pub async fn assert_converges(exec_urls: &[String], admin: &Store, report: &str) {
    for url in exec_urls {
        exits_zero(
            url,
            &["run", "--json"],
            &format!("{report}: the final run did not converge"),
        )
        .await;
    }
    let pending = admin.pending_page("", 1000).await.unwrap();
    assert!(pending.is_empty(), "{report}: still pending: {pending:?}");
    assert_eq!(
        partial_snapshots(admin).await,
        0,
        "{report}: a snapshot lacks source rows"
    );
    exits_zero(&exec_urls[0], &["verify"], &format!("{report}: verify")).await;
}

/// Runs the executor with `args` against `url`; it must exit 0 (else `failure`, and what it
/// printed).
async fn exits_zero(url: &str, args: &[&str], failure: &str) {
    let out = exe(url, "30s").args(args).output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{failure}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
