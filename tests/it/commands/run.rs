//! The executor's run end to end: replicas, drift, SIGKILL, every rejection code, an outage.

use package_executor_testkit::db;
use package_executor_testkit::fixtures;
use package_executor_testkit::pg;
use package_executor_testkit::within;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use db::*;
use package_executor::coordinator::{Coordinator, LogObserver, RunSettings, Stop};
use package_executor::report::Outcome;
use package_executor::store::{Attempt, Store};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn exe(url: &str) -> Command {
    db::exe(url, "5s")
}

async fn run_in_process(store: &Store, settings: RunSettings) -> BTreeMap<String, Outcome> {
    let observer = LogObserver;
    Coordinator::new(store.clone(), settings, Stop::default(), &observer)
        .run()
        .await
        .outcomes
}

async fn pending_count(store: &Store) -> usize {
    let mut n = 0;
    let mut cursor = String::new();
    loop {
        let page = store.pending_page(&cursor, 1000).await.unwrap();
        n += page.len();
        match page.last() {
            Some(last) if page.len() == 1000 => cursor.clone_from(last),
            _ => return n,
        }
    }
}

async fn every_rejection_code(store: Store) {
    import(&store, &fixtures::every_rejection()).await;
    // source-invalid needs a row that bypasses the constraints, as only a broken database has.
    import(&store, br#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"r-source-invalid","packages":[
        {"packageName":"a.pkg","installationId":"si-a","generations":[{"generation":1,"status":"active","revisionText":"{}"}]}]}]}"#).await;
    let digest = package_executor::model::Digest::of(b"{}");
    match store.dialect() {
        package_executor::store::Dialect::Postgres => {
            exec(&store, "ALTER TABLE ql3.materialized_revisions DROP CONSTRAINT materialized_revisions_byte_length_check").await.unwrap();
            exec(&store, "ALTER TABLE ql3.materialized_revisions DISABLE TRIGGER materialized_revisions_no_update").await.unwrap();
        }
        package_executor::store::Dialect::Sqlite => {
            exec(&store, "DROP TRIGGER materialized_revisions_no_update")
                .await
                .unwrap();
            exec(&store, "PRAGMA ignore_check_constraints = ON")
                .await
                .unwrap();
        }
    }
    exec(&store, &format!("UPDATE ql3.materialized_revisions SET byte_length = 99 WHERE revision_digest = '{digest}'")).await.unwrap();

    let outcomes = run_in_process(&store, settings()).await;
    let mut seen = std::collections::BTreeSet::new();
    for (project, o) in &outcomes {
        if let Some(code) = project.strip_prefix("r-") {
            assert_eq!(o.name(), "rejected", "{project}: {o:?}");
            assert_eq!(o.reason(), Some(code), "{project}: {:?}", o.detail());
            seen.insert(code.to_owned());
        } else {
            assert_eq!(o.name(), "published", "{project}: {o:?}");
        }
    }
    let all: std::collections::BTreeSet<String> = package_executor::rejection::RejectionCode::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    assert_eq!(seen, all, "every rejection code is exercised");
    for code in &all {
        assert_eq!(current_digest(&store, &format!("r-{code}")).await, None);
    }
    // Rejections of content are recorded once per vector; the next run reads them without
    // re-reading revisions. The three verdicts on a revision row (missing, bytes that are not
    // the digest's, a byte_length that is not the stored length) are reported, never recorded.
    let before = scalar(
        &store,
        "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_rejections",
    )
    .await;
    assert_eq!(before, 13);
    assert_eq!(
        scalar(
            &store,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_rejections WHERE project_id IN \
             ('r-revision-missing', 'r-revision-digest-mismatch', 'r-source-invalid')"
        )
        .await,
        0
    );
    let again = run_in_process(&store, settings()).await;
    assert!(
        again.values().all(|o| o.name() == "rejected"),
        "only rejected projects stay pending"
    );
    assert_eq!(
        scalar(
            &store,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_rejections"
        )
        .await,
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rejection_code_sqlite() {
    let (url, _dir) = pg::fresh_sqlite().await;
    within(300, async {
        every_rejection_code(connect(&url).await).await
    })
    .await;
}

/// A REPEATABLE READ view in which the live heads and `find_current` are read together.
async fn consistent_view(store: &Store, project: &str) -> (String, Option<String>) {
    let pool = &store.pg_pool().unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .unwrap();
    let mut a = Attempt::Pg(tx);
    let heads: Vec<_> = a
        .observe(project)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.head)
        .collect();
    let live = package_executor::planner::active_vector_digest(project, &heads);
    let current = a
        .find_current(project)
        .await
        .unwrap()
        .map(|c| c.active_vector_digest.as_str().to_owned());
    a.rollback().await.unwrap();
    (live.as_str().to_owned(), current)
}

/// Spawns `run`, and returns once `n` projects are done (read from its JSON log lines).
async fn run_until(url: &str, n: usize, args: &[&str]) -> tokio::process::Child {
    let mut child = exe(url)
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut done = 0;
    while done < n {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("run ended before enough projects were done");
        if line.contains("\"project done\"") {
            done += 1;
        }
    }
    // Keep draining so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

/// One attempt of `project` on a worker's session, which must publish (`why` names the step).
async fn publishes(
    session: &mut package_executor::store::Session,
    budget: &package_executor::coordinator::MemoryBudget,
    project: &str,
    why: &str,
) {
    use package_executor::coordinator::{Step, attempt};
    let step = attempt(session, budget, project).await;
    assert!(
        matches!(step, Step::Done(Outcome::Published { .. })),
        "{why}: {step:?}"
    );
}

/// A TCP proxy to PostgreSQL that can fall silent: once `silent` is set it delivers nothing
/// more in either direction but keeps every socket open, as a node lost without a TCP reset
/// leaves its connections half-open.
async fn silent_proxy(server_port: u16, silent: Arc<AtomicBool>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        silent: Arc<AtomicBool>,
    ) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if silent.load(Ordering::SeqCst) {
                // Hold the bytes and the sockets for good.
                std::future::pending::<()>().await;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let silent = silent.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", server_port)).await
                else {
                    return;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, silent.clone()));
                pump(server_read, client_write, silent).await;
            });
        }
    });
    port
}

/// The `pg` tier's part of this module: the tests that start PostgreSQL.
mod on_postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_rejection_code_postgres() {
        within(300, async {
            every_rejection_code(connect(&pg::fresh_db().await).await).await
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn four_replicas_converge_on_postgres() {
        within(600, async {
            let url = pg::fresh_db().await;
            let store = connect(&url).await;
            import(&store, &fixtures::many_projects(2000, 2, 2, 600)).await;
            let mut children = Vec::new();
            for _ in 0..4 {
                children.push(exe(&url).args(["run", "--json", "--concurrency", "4"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
            }
            let (mut published, mut replayed, mut current) = (0, 0, 0);
            for child in children {
                let out = child.wait_with_output().await.unwrap();
                assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                published += v["published"].as_u64().unwrap();
                replayed += v["replayed"].as_u64().unwrap();
                current += v["alreadyCurrent"].as_u64().unwrap();
            }
            println!("four replicas: {published} published, {replayed} duplicated builds (replayed), {current} already current");
            assert_eq!(published, 2000, "each project published exactly once across replicas");
            assert_eq!(scalar(&store, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await, 2000);
            assert_eq!(scalar(&store, "SELECT COUNT(DISTINCT project_id) FROM ql3.tool_definition_snapshots").await, 2000);
            assert_eq!(pending_count(&store).await, 0, "every project is current");
            assert_eq!(partial_snapshots(&store).await, 0);
            let verify = exe(&url).args(["verify"]).output().await.unwrap();
            assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drift_never_yields_a_stale_snapshot() {
        drift_at_batch_size(1).await;
    }

    /// The same with projects built eight a transaction: a project that drifts inside a batch
    /// is left out of it and tried again alone; the others of its batch commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drift_never_yields_a_stale_snapshot_in_batches() {
        drift_at_batch_size(8).await;
    }

    async fn drift_at_batch_size(batch_size: usize) {
        within(600, async {
            let url = pg::fresh_db().await;
            let store = connect(&url).await;
            import(&store, &fixtures::many_projects(300, 2, 2, 300)).await;
            let drifting: Vec<String> = (0..300).step_by(10).map(|p| format!("p{p:05}")).collect();
            let stop = Arc::new(AtomicBool::new(false));
            let flips = Arc::new(AtomicUsize::new(0));
            let violations = Arc::new(AtomicUsize::new(0));
            let (first_flip_tx, first_flip_rx) = tokio::sync::oneshot::channel::<()>();
            // The mutator keeps activating generation 2 and 1 of the drifting projects' first package.
            let mutator = {
                let (store, stop, flips, drifting) =
                    (store.clone(), stop.clone(), flips.clone(), drifting.clone());
                tokio::spawn(async move {
                    let mut first = Some(first_flip_tx);
                    let mut round = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let generation = if round.is_multiple_of(2) { 2 } else { 1 };
                        for p in &drifting {
                            package_executor::sources::activate(
                                &store,
                                &format!("{p}-k0"),
                                generation,
                            )
                            .await
                            .unwrap();
                            flips.fetch_add(1, Ordering::SeqCst);
                        }
                        if let Some(tx) = first.take() {
                            tx.send(()).ok();
                        }
                        round += 1;
                    }
                })
            };
            // The checker: every snapshot find_current returns belongs to the live vector.
            let checker = {
                let (store, stop, violations, drifting) = (
                    store.clone(),
                    stop.clone(),
                    violations.clone(),
                    drifting.clone(),
                );
                tokio::spawn(async move {
                    let mut checks = 0usize;
                    while !stop.load(Ordering::SeqCst) {
                        for p in &drifting {
                            let (live, current) = consistent_view(&store, p).await;
                            if current.is_some_and(|c| c != live) {
                                violations.fetch_add(1, Ordering::SeqCst);
                            }
                            checks += 1;
                        }
                    }
                    checks
                })
            };
            first_flip_rx.await.unwrap();
            let outcomes = run_in_process(
                &store,
                RunSettings {
                    max_attempts: 2,
                    final_probes: 1,
                    batch_size,
                    ..settings()
                },
            )
            .await;
            stop.store(true, Ordering::SeqCst);
            mutator.await.unwrap();
            let checks = checker.await.unwrap();
            println!(
                "drift: {} activations, {checks} consistent checks during the run",
                flips.load(Ordering::SeqCst)
            );
            assert_eq!(
                violations.load(Ordering::SeqCst),
                0,
                "find_current returned a snapshot of another vector"
            );
            let mut unresolved = 0;
            for p in &drifting {
                let o = &outcomes[p];
                assert!(
                    matches!(
                        o,
                        Outcome::Published { .. }
                            | Outcome::Replayed { .. }
                            | Outcome::AlreadyCurrent { .. }
                            | Outcome::Unresolved { .. }
                    ),
                    "{p}: {o:?}"
                );
                if o.name() == "unresolved" {
                    unresolved += 1;
                    assert!(
                        matches!(o.reason(), Some("vector-drift" | "generation-drift")),
                        "{o:?}"
                    );
                }
            }
            println!(
                "drift: {unresolved} of {} drifting projects ended unresolved",
                drifting.len()
            );
            // After the mutator stops, a second run makes every project current.
            run_in_process(&store, settings()).await;
            assert_eq!(pending_count(&store).await, 0);
            assert_eq!(partial_snapshots(&store).await, 0);
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigkill_leaves_no_partial_snapshot() {
        within(600, async {
            let url = pg::fresh_db().await;
            let store = connect(&url).await;
            import(&store, &fixtures::many_projects(1500, 3, 2, 400)).await;
            let mut child = run_until(&url, 100, &["--concurrency", "4"]).await;
            child.start_kill().unwrap();
            let status = child.wait().await.unwrap();
            assert!(status.code().is_none(), "killed by a signal");
            let published =
                scalar(&store, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await;
            assert!(
                (100..1500).contains(&published),
                "killed mid-run: {published}"
            );
            assert_eq!(
                partial_snapshots(&store).await,
                0,
                "no snapshot row without its full source rows"
            );
            let out = exe(&url).args(["run", "--json"]).output().await.unwrap();
            assert_eq!(out.status.code(), Some(0));
            assert_eq!(pending_count(&store).await, 0);
            assert_eq!(partial_snapshots(&store).await, 0);
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn outage_mid_run_is_truthful_and_recoverable() {
        within(600, async {
            // A cluster of its own: this test stops and starts the server.
            let dir = std::env::temp_dir().join(format!("pe-outage-{}", std::process::id()));
            let cluster = pg::PgCluster::start_in(dir, "");
            let admin = cluster.url("postgres");
            let admin_store = connect(&admin).await;
            sqlx::query("CREATE DATABASE outage")
                .execute(&admin_store.pg_pool().unwrap())
                .await
                .unwrap();
            admin_store.close().await;
            let url = cluster.url("outage");
            let store = connect(&url).await;
            store.migrate(true, None).await.unwrap();
            import(&store, &fixtures::many_projects(1500, 3, 2, 400)).await;
            store.close().await;
            let child = run_until(
                &url,
                50,
                &[
                    "--json",
                    "--concurrency",
                    "4",
                    "--max-attempts",
                    "2",
                    "--final-probes",
                    "1",
                ],
            )
            .await;
            cluster.stop("immediate");
            let out = child.wait_with_output().await.unwrap();
            let code = out.status.code().unwrap();
            assert!(code == 3 || code == 8, "exit {code}");
            let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(
                summary["exitCode"].as_i64(),
                Some(i64::from(code)),
                "the summary tells the exit code"
            );
            cluster.start();
            let store = connect(&url).await;
            let published =
                scalar(&store, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await as u64;
            assert!(
                summary["published"].as_u64().unwrap() <= published,
                "the summary never claims more than was committed"
            );
            assert_eq!(partial_snapshots(&store).await, 0);
            let out = exe(&url).args(["run", "--json"]).output().await.unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert_eq!(pending_count(&store).await, 0);
            store.close().await;
            cluster.stop("fast");
        })
        .await;
    }

    /// A server that goes away while `publish` waits on it: the attempts cannot reconnect, the
    /// database no longer answers, and the command exits 8 (the database is unavailable), not 3.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publish_exits_8_when_the_server_goes_away_midway() {
        within(300, async {
            // A cluster of its own: this test stops the server.
            let dir =
                std::env::temp_dir().join(format!("pe-publish-outage-{}", std::process::id()));
            let cluster = pg::PgCluster::start_in(dir, "");
            let url = cluster.url("postgres");
            let store = connect(&url).await;
            store.migrate(true, None).await.unwrap();
            import(&store, DEMO).await;
            // The attempt's first statement reads the installations: while this lock is held,
            // the publish waits inside its attempt.
            let mut holder = store.pg_pool().unwrap().begin().await.unwrap();
            sqlx::query("LOCK TABLE ql3.package_installations IN ACCESS EXCLUSIVE MODE")
                .execute(&mut *holder)
                .await
                .unwrap();
            let child = exe(&url)
                .args([
                    "publish",
                    "demo-1",
                    "--max-attempts",
                    "2",
                    "--lock-timeout",
                    "60s",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut watcher = store.pg_pool().unwrap().acquire().await.unwrap();
            pg::until_a_session_waits_for_a_lock(&mut watcher, Duration::from_secs(60)).await;
            drop(watcher);
            cluster.stop("immediate");
            let out = child.wait_with_output().await.unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(8), "{stdout}");
            assert!(stdout.contains("demo-1: unresolved database"), "{stdout}");
            drop(holder);
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigterm_and_deadline_stop_cleanly_with_a_summary() {
        within(600, async {
            let url = pg::fresh_db().await;
            let store = connect(&url).await;
            import(&store, &fixtures::many_projects(1500, 3, 2, 400)).await;
            let dir = tempfile::tempdir().unwrap();
            let summary_file = dir.path().join("summary.json");

            // SIGTERM after 50 projects: stop taking work, let in-flight transactions finish.
            let child = run_until(
                &url,
                50,
                &["--json", "--summary-file", summary_file.to_str().unwrap()],
            )
            .await;
            let pid = child.id().unwrap().to_string();
            let kill = Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .await
                .unwrap();
            assert!(kill.success());
            let out = child.wait_with_output().await.unwrap();
            assert_eq!(out.status.code(), Some(3), "work left pending: exit 3");
            let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(summary["exitCode"], 3);
            let written: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&summary_file).unwrap()).unwrap();
            assert_eq!(written, summary, "the summary file says the same");
            let published =
                scalar(&store, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await;
            assert_eq!(
                summary["published"].as_i64().unwrap(),
                published,
                "every in-flight publish committed and was counted"
            );
            assert_eq!(partial_snapshots(&store).await, 0);

            // --deadline does the same on its own.
            let out = exe(&url)
                .args(["run", "--json", "--deadline", "300ms", "--concurrency", "1"])
                .output()
                .await
                .unwrap();
            assert_eq!(out.status.code(), Some(3));
            let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(summary["exitCode"], 3);
            assert_eq!(partial_snapshots(&store).await, 0);

            // The next run converges.
            let out = exe(&url).args(["run", "--json"]).output().await.unwrap();
            assert_eq!(out.status.code(), Some(0));
            assert_eq!(pending_count(&store).await, 0);
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_connection_that_died_while_idle_costs_no_attempt() {
        use package_executor::coordinator::MemoryBudget;
        within(60, async {
            let url = pg::fresh_db().await;
            let store = connect(&url).await;
            import(&store, DEMO).await;
            let budget = MemoryBudget::new(RunSettings::default().memory_budget);
            let mut session = store.session();
            publishes(&mut session, &budget, "demo-1", "the first attempt").await;
            // Three idle connections wait in the pool, ahead of the one that ends the others.
            let pool = store.pg_pool().unwrap();
            let mut held = Vec::new();
            for _ in 0..3 {
                held.push(pool.acquire().await.unwrap());
            }
            drop(held);
            // The server ends every other backend: the worker's idle kept connection and the
            // pool's idle ones (as a restart or a proxy's idle timeout would).
            let ended = scalar(
                &store,
                "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity AS a
                 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()) AS t",
            )
            .await;
            assert!(
                ended >= 3,
                "the worker's and the pool's idle connections were open"
            );
            publishes(
                &mut session,
                &budget,
                "demo-2",
                "the dead connection cost the attempt",
            )
            .await;
            drop(session);
            store.close().await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_server_costs_an_attempt_not_a_hung_worker() {
        use package_executor::coordinator::{MemoryBudget, Step, attempt};
        use package_executor::report::Unresolved;
        use package_executor::store::ConnectOptions;
        within(180, async {
            let url = pg::fresh_db().await;
            let direct = connect(&url).await;
            import(&direct, DEMO).await;
            let (head, db) = url.rsplit_once('/').unwrap();
            let server_port: u16 = head.rsplit_once(':').unwrap().1.parse().unwrap();
            let silent = Arc::new(AtomicBool::new(false));
            let port = silent_proxy(server_port, silent.clone()).await;
            // Bounds loose enough that a loaded machine answers every healthy step within them.
            let opts = ConnectOptions {
                statement_timeout: Duration::from_secs(5),
                answer_margin: Duration::from_secs(5),
                acquire_timeout: Duration::from_secs(5),
                ..ConnectOptions::new(
                    format!("postgres://postgres@127.0.0.1:{port}/{db}")
                        .parse()
                        .unwrap(),
                )
            };
            let store = Store::connect(&opts).await.unwrap();
            let budget = MemoryBudget::new(RunSettings::default().memory_budget);
            let mut session = store.session();
            publishes(&mut session, &budget, "demo-1", "the first attempt").await;
            // An idle connection waits in the pool too (returned connections become idle once
            // sqlx has pinged them).
            let pool = store.pg_pool().unwrap();
            drop(pool.acquire().await.unwrap());
            while pool.num_idle() == 0 {
                tokio::task::yield_now().await;
            }
            silent.store(true, Ordering::SeqCst);
            // The kept connection and the idle one are now half-open: the attempt gives them up
            // instead of waiting.
            let second = attempt(&mut session, &budget, "demo-2").await;
            match &second {
                Step::Retry(Unresolved::Database, detail) => {
                    assert!(detail.contains("no answer from the database"), "{detail}")
                }
                other => panic!("expected a database retry, got {other:?}"),
            }
            assert_eq!(current_digest(&direct, "demo-2").await, None);
            // Once the path is back, a fresh connection carries on.
            silent.store(false, Ordering::SeqCst);
            publishes(&mut session, &budget, "demo-2", "once the path is back").await;
            drop(session);
            store.close().await;
            direct.close().await;
        })
        .await;
    }

    /// The lanes' pools and the page reader together keep to `--concurrency + 1` connections. The
    /// run logs in as a role whose CONNECTION LIMIT is exactly that, with one attempt per project
    /// and no final probe, so a single refused connection would leave a project unresolved (exit 3).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_keeps_to_concurrency_plus_one_connections() {
        within(300, async {
            let url = pg::fresh_db().await;
            let store = connect(&url).await;
            import(&store, &fixtures::many_projects(600, 2, 2, 600)).await;
            exec(
                &store,
                "DO $$ BEGIN
                   IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'login_limited') THEN
                     CREATE ROLE login_limited LOGIN CONNECTION LIMIT 5 IN ROLE ql3_package_executor;
                   END IF;
                 END $$",
            )
            .await
            .unwrap();
            let out = succeeds(
                exe(&pg::as_login(&url, "login_limited"))
                    .args(["run", "--json", "--concurrency", "4", "--max-attempts", "1"])
                    .args(["--final-probes", "0"]),
            )
            .await;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["published"], 600, "{v}");
            assert_eq!(pending_count(&store).await, 0);
        })
        .await;
    }

    /// A server with no connection slot left for the login: after the connect timeout the message
    /// says what the server answered (`53300`) and what to do, not only "check that the server is
    /// up" (the pool retries `53300` and then says only that it timed out).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_with_no_slot_left_is_named_as_the_cause() {
        within(60, async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            // Roles are cluster-wide: a name of this test's own.
            let role = format!("no_slots_{}", std::process::id());
            exec(
                &admin,
                &format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 0"),
            )
            .await
            .unwrap();
            admin.close().await;
            let out = db::exe(&pg::as_login(&url, &role), "1s")
                .args(["current", "demo-1"])
                .output()
                .await
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(8), "{stderr}");
            assert!(stderr.contains("53300: too many connections"), "{stderr}");
            assert!(stderr.contains("no connection slot left"), "{stderr}");
        })
        .await;
    }
}
