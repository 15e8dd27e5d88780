//! Physical high availability: a primary with a synchronous standby (`remote_apply`), started
//! from the system's binaries; snapshots survive a failover byte for byte, and the executor
//! follows the new primary through a multi-host URL.

use package_executor_testkit::db;
use package_executor_testkit::fixtures;
use package_executor_testkit::pg;

use std::process::Stdio;
use std::time::{Duration, Instant};

use db::*;
use package_executor::exit::Exit;
use package_executor::store::Store;
use pg::PgCluster;
use sqlx::Row;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

struct Pair {
    primary: PgCluster,
    standby: PgCluster,
}

impl Pair {
    fn start(name: &str) -> Self {
        let base = std::env::temp_dir().join(format!("pe-ha-{name}-{}", std::process::id()));
        let primary = PgCluster::start_in(
            base.join("primary"),
            "wal_level = replica\nmax_wal_senders = 5\nsynchronous_commit = remote_apply\nsynchronous_standby_names = '*'\n",
        );
        let standby_dir = base.join("standby");
        std::fs::create_dir_all(standby_dir.join("sock")).unwrap();
        if primary.as_root {
            assert!(
                std::process::Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&standby_dir)
                    .status()
                    .unwrap()
                    .success()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let standby = PgCluster {
            port,
            dir: standby_dir,
            bindir: primary.bindir.clone(),
            as_root: primary.as_root,
        };
        pg::remove_after_exit(&base, &[&primary.dir, &standby.dir]);
        let data = standby.data_dir();
        standby.run(
            "pg_basebackup",
            &[
                "-D",
                data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        // The copied settings name the primary's port and socket and make it wait for standbys;
        // the standby gets its own, and no synchronous standby of its own, so it can serve
        // writes once promoted.
        let conf = data.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&format!(
            "port = {port}\nunix_socket_directories = '{}'\nsynchronous_standby_names = ''\n",
            standby.dir.join("sock").display()
        ));
        std::fs::write(&conf, text).unwrap();
        standby.start();
        standby.watch();
        Self { primary, standby }
    }

    fn multi_host_url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    async fn wait_sync(&self) {
        let admin = connect(&self.primary.url("postgres")).await;
        let started = Instant::now();
        loop {
            let row = sqlx::query("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND replay_lsn IS NOT NULL")
                .fetch_one(&admin.pg_pool().unwrap())
                .await
                .unwrap();
            if row.get::<i64, _>(0) == 1 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the standby never became synchronous"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        admin.close().await;
    }

    async fn prepare(&self, fixture: &[u8]) {
        self.wait_sync().await;
        let admin = connect(&self.primary.url("postgres")).await;
        sqlx::query("CREATE DATABASE ha")
            .execute(&admin.pg_pool().unwrap())
            .await
            .unwrap();
        admin.close().await;
        let store = connect(&self.primary.url("ha")).await;
        store.migrate(true, None).await.unwrap();
        import(&store, DEMO).await;
        import(&store, fixture).await;
        store.close().await;
    }

    fn fail_over(&self) {
        self.primary.stop("immediate");
        self.standby.run(
            "pg_ctl",
            &[
                "-D",
                self.standby.data_dir().to_str().unwrap(),
                "-w",
                "promote",
            ],
        );
    }
}

fn exe(url: &str) -> Command {
    db::exe(url, "60s")
}

async fn rows(
    store: &Store,
) -> (
    Vec<(String, String, String, String, Vec<u8>)>,
    Vec<(String, String, String)>,
) {
    let pool = &store.pg_pool().unwrap();
    let snapshots = sqlx::query("SELECT project_id, snapshot_digest, active_vector_digest, definition_digest, canonical_json FROM ql3.tool_definition_snapshots ORDER BY project_id, snapshot_id")
        .fetch_all(pool).await.unwrap().iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))).collect();
    let rejections = sqlx::query("SELECT project_id, active_vector_digest, reason FROM ql3.tool_definition_snapshot_rejections ORDER BY 1, 2")
        .fetch_all(pool).await.unwrap().iter()
        .map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    (snapshots, rejections)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_survive_failover_with_identical_digests() {
    tokio::time::timeout(Duration::from_secs(300), async {
        let pair = Pair::start("survive");
        pair.prepare(&fixtures::every_rejection()).await;
        let url = pair.multi_host_url("ha");
        succeeds(exe(&url).args(["run", "--json"])).await;
        let primary = connect(&pair.primary.url("ha")).await;
        let before = rows(&primary).await;
        // Every rejection code but the two verdicts on a revision row (missing, digest
        // mismatch), which are reported and never recorded.
        assert!(
            before.0.len() >= 6 && before.1.len() >= 14,
            "snapshots {} rejections {}",
            before.0.len(),
            before.1.len()
        );
        assert!(
            before.0.iter().any(|s| s.0 == "demo-empty"),
            "the empty project is there"
        );
        primary.close().await;

        pair.fail_over();
        let promoted = connect(&pair.standby.url("ha")).await;
        sqlx::query("CHECKPOINT")
            .execute(&promoted.pg_pool().unwrap())
            .await
            .unwrap();
        let timeline: i32 = sqlx::query("SELECT timeline_id FROM pg_control_checkpoint()")
            .fetch_one(&promoted.pg_pool().unwrap())
            .await
            .unwrap()
            .get(0);
        assert_eq!(timeline, 2, "the standby was promoted onto timeline 2");
        let after = rows(&promoted).await;
        assert_eq!(
            after, before,
            "same three digests and byte-identical canonical_json on the new primary"
        );
        let verify = exe(&url).args(["verify"]).output().await.unwrap();
        assert_eq!(
            verify.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&verify.stdout)
        );

        // An activation on the new primary makes the old snapshot not current at once.
        let old = current_digest(&promoted, "demo-1").await.unwrap();
        package_executor::sources::activate(&promoted, "demo-1-github", 3)
            .await
            .unwrap();
        assert_eq!(current_digest(&promoted, "demo-1").await, None);
        let out = exe(&url).args(["run", "--json"]).output().await.unwrap();
        assert_eq!(out.status.code(), Some(0));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["published"], 1);
        let new = current_digest(&promoted, "demo-1").await.unwrap();
        assert_ne!(old, new);
        promoted.close().await;
        pair.standby.stop("fast");
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_follows_the_new_primary_mid_run() {
    tokio::time::timeout(Duration::from_secs(400), async {
        let pair = Pair::start("midrun");
        pair.prepare(&fixtures::many_projects(1200, 3, 2, 300))
            .await;
        let url = pair.multi_host_url("ha");
        let mut child = exe(&url)
            .args(["run", "--json", "--max-attempts", "6"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut done = 0;
        while done < 100 {
            let line = lines.next_line().await.unwrap().expect("run ended early");
            if line.contains("\"project done\"") {
                done += 1;
            }
        }
        let drain = tokio::spawn(async move {
            let mut followed = false;
            while let Ok(Some(line)) = lines.next_line().await {
                followed |= line.contains("using this PostgreSQL host");
            }
            followed
        });
        pair.fail_over();
        let out = child.wait_with_output().await.unwrap();
        let followed = drain.await.unwrap();
        let code = out.status.code().unwrap();
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            summary["exitCode"].as_i64(),
            Some(i64::from(code)),
            "a truthful summary"
        );
        println!(
            "failover mid-run: exit {code}, followed the new primary: {followed}, summary {summary}"
        );
        assert!(matches!(code, 0 | 3 | 8), "exit {code}");
        if code != 0 {
            let again = exe(&url).args(["run", "--json"]).output().await.unwrap();
            assert_eq!(again.status.code(), Some(0), "the next run converges");
        }
        let promoted = connect(&pair.standby.url("ha")).await;
        assert_eq!(
            partial_snapshots(&promoted).await,
            0,
            "no snapshot without its source rows"
        );
        let mut cursor = String::new();
        let mut pending = 0;
        loop {
            let page = promoted.pending_page(&cursor, 1000).await.unwrap();
            pending += page
                .iter()
                .filter(|p| !p.starts_with("demo-rejected"))
                .count();
            match page.last() {
                Some(l) if page.len() == 1000 => cursor.clone_from(l),
                _ => break,
            }
        }
        assert_eq!(pending, 0, "every project is current on the new primary");
        promoted.close().await;
        pair.standby.stop("fast");
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_reported_published_before_the_standby_has_it() {
    use package_executor::coordinator::{MemoryBudget, RunSettings, Step, attempt};
    use package_executor::report::Unresolved;
    use package_executor::store::ConnectOptions;
    tokio::time::timeout(Duration::from_secs(300), async {
        let pair = Pair::start("unreplicated");
        pair.prepare(br#"{"schema":"package-executor/fixture@v1","projects":[]}"#)
            .await;
        pair.standby.stop("fast");
        // While the standby is away a COMMIT waits for it, and statement_timeout does not
        // apply to that wait: the executor bounds it by the statement timeout itself (not the
        // longer answer timeout), reports nothing as published, and says what to check.
        let opts = ConnectOptions {
            statement_timeout: Duration::from_secs(5),
            answer_margin: Duration::from_secs(120),
            ..ConnectOptions::new(pair.primary.url("ha").parse().unwrap())
        };
        let store = package_executor::store::Store::connect(&opts)
            .await
            .unwrap();
        let budget = MemoryBudget::new(RunSettings::default().memory_budget);
        let mut session = store.session();
        let started = Instant::now();
        let step = attempt(&mut session, &budget, "demo-1").await;
        let waited = started.elapsed();
        match &step {
            Step::Retry(Unresolved::Database, detail) => assert!(
                detail.contains("the COMMIT was not acknowledged within 5s")
                    && detail.contains("synchronous"),
                "{detail}"
            ),
            other => panic!("expected the commit to go unacknowledged, got {other:?}"),
        }
        assert!(
            waited < opts.statement_timeout + opts.answer_margin,
            "the commit waited {waited:?}, past the statement timeout"
        );
        let direct = connect(&pair.primary.url("ha")).await;
        assert_eq!(current_digest(&direct, "demo-1").await, None);
        // Once the standby is back, the held commit completes and the project converges.
        pair.standby.start();
        pair.wait_sync().await;
        succeeds(exe(&pair.primary.url("ha")).args(["run", "--json"])).await;
        assert!(current_digest(&direct, "demo-1").await.is_some());
        drop(session);
        store.close().await;
        direct.close().await;
        pair.standby.stop("fast");
    })
    .await
    .expect("timed out");
}

/// A demoted primary can go on accepting connections (Patroni restarts a demoted leader as a
/// standby; here the old primary turns read-only while the standby is promoted). A store made
/// before the demotion must leave it for the new primary: every new connection is checked as
/// libpq checks `target_session_attrs`, and a write refused as read-only (`25006`) is a
/// transient error, never a project's failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_that_still_accepts_connections_is_left_for_the_new_one() {
    tokio::time::timeout(Duration::from_secs(300), async {
        let pair = Pair::start("demoted");
        pair.prepare(&fixtures::many_projects(20, 2, 2, 200)).await;
        let store = connect(&pair.multi_host_url("ha")).await;
        // The pool points at the primary and holds a connection there.
        assert_eq!(scalar(&store, "SELECT CAST(1 AS bigint)").await, 1);
        let old = connect(&pair.primary.url("postgres")).await;
        exec(&old, "ALTER SYSTEM SET default_transaction_read_only = on")
            .await
            .unwrap();
        exec(&old, "ALTER SYSTEM SET synchronous_standby_names = ''")
            .await
            .unwrap();
        assert_eq!(
            scalar(&old, "SELECT CAST(pg_reload_conf()::int AS int8)").await,
            1
        );
        old.close().await;
        pair.standby.run(
            "pg_ctl",
            &[
                "-D",
                pair.standby.data_dir().to_str().unwrap(),
                "-w",
                "promote",
            ],
        );
        let summary = run_all(&store, false).await;
        assert_eq!(summary.exit_code, Exit::Ok, "{summary:?}");
        assert!(summary.unresolved.is_empty(), "{summary:?}");
        // The fixture's 20 and the demo's three publishable projects.
        assert_eq!(summary.published, 23, "{summary:?}");
        let promoted = connect(&pair.standby.url("ha")).await;
        assert_eq!(
            scalar(
                &promoted,
                "SELECT COUNT(DISTINCT project_id) FROM ql3.tool_definition_snapshots"
            )
            .await,
            23,
            "every snapshot is on the new primary"
        );
        promoted.close().await;
        store.close().await;
        pair.standby.stop("fast");
        pair.primary.stop("fast");
    })
    .await
    .expect("timed out");
}
