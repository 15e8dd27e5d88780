//! A build older than the schema stops at once: every database command, run against a schema
//! that a newer release migrated, exits 8 before writing anything, with one sentence that names
//! both versions and says what to do. On both dialects (PostgreSQL in the `pg` tier).

use std::process::{Command, Stdio};

use sqlx::Connection as _;
use std::time::{Duration, Instant};

use package_executor_testkit::db::{self, DEMO};
use package_executor_testkit::executable;
use package_executor_testkit::pg;

/// Longer than a refusal takes on a busy machine; a build that retries instead fails here.
const REFUSES_WITHIN: Duration = Duration::from_secs(30);

/// Every table a command could write, counted.
async fn counts(url: &str) -> Vec<i64> {
    let store = db::connect(url).await;
    let counts = db::row_counts(&store).await;
    store.close().await;
    counts
}

/// Migrates past this build, as a newer release's `migrate` would; returns the new version
/// and this build's.
async fn migrate_past_this_build(url: &str) -> (i64, i64) {
    let store = db::connect(url).await;
    let known = store.migrations().last().unwrap().version;
    let future = known + 1;
    db::exec(
        &store,
        &format!(
            "INSERT INTO ql3.schema_migrations (version, name, checksum) \
             VALUES ({future}, '{future:04}_from_a_newer_release', 'x')"
        ),
    )
    .await
    .unwrap();
    if store.pg_pool().is_some() {
        db::exec(
            &store,
            &format!("COMMENT ON SCHEMA ql3 IS 'package-executor schema version {future}'"),
        )
        .await
        .unwrap();
    }
    store.close().await;
    (future, known)
}

async fn every_command_refuses_a_newer_schema(url: String) {
    {
        let store = db::connect(&url).await;
        db::import(&store, DEMO).await;
        store.close().await;
    }
    let (future, known) = migrate_past_this_build(&url).await;
    let before = counts(&url).await;
    let fixture = package_executor_testkit::db::DEMO_PATH;
    let commands: &[&[&str]] = &[
        &["run"],
        &["run", "--full-scan", "--json"],
        &["publish", "demo-1"],
        &["current", "demo-1"],
        &["explain", "demo-1"],
        &["verify"],
        &["sources", "import", fixture],
        &[
            "sources",
            "activate",
            "--installation",
            "demo-1-github",
            "--generation",
            "3",
        ],
        &[
            "sources",
            "remove",
            "--project",
            "demo-1",
            "--package",
            "acme.docs",
        ],
        &["migrate"],
        &["migrate", "--check"],
    ];
    let mut slowest = Duration::ZERO;
    for args in commands {
        let started = Instant::now();
        let mut child = Command::new(executable())
            .args(*args)
            .env("DATABASE_URL", &url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > REFUSES_WITHIN {
                let _ = child.kill();
                panic!("{args:?} did not end within {REFUSES_WITHIN:?} on a newer schema");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        slowest = slowest.max(started.elapsed());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(status.code(), Some(8), "{args:?}: {stderr}");
        let sentence =
            format!("the database's schema is version {future}, newer than this build's {known}");
        assert!(stderr.contains(&sentence), "{args:?}: {stderr}");
        assert!(
            stderr.contains("run the image of the release that migrated it"),
            "{args:?}: {stderr}"
        );
    }
    println!("the slowest refusal took {slowest:?}");
    assert_eq!(
        counts(&url).await,
        before,
        "a command wrote to a newer schema"
    );
}

/// A run that started before a newer release's `migrate` (whose schema then refuses this
/// build's writes, as migration 12's refused builds that did not write the source key): at its
/// first failed write it finds the newer schema, stops taking work and ends with exit 8,
/// instead of retrying every project.
async fn stops_when_migrated_midway(url: String) {
    let store = db::connect(&url).await;
    db::import(&store, DEMO).await;
    let (future, _) = migrate_past_this_build(&url).await;
    let refuse = if store.pg_pool().is_some() {
        "CREATE FUNCTION ql3.from_a_newer_release() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'this release writes another shape'; END $$; \
         CREATE TRIGGER from_a_newer_release BEFORE INSERT ON ql3.tool_definition_snapshots \
         FOR EACH ROW EXECUTE FUNCTION ql3.from_a_newer_release()"
    } else {
        "CREATE TRIGGER from_a_newer_release BEFORE INSERT ON tool_definition_snapshots \
         BEGIN SELECT RAISE(ABORT, 'this release writes another shape'); END"
    };
    db::script(&store, refuse).await;
    let report = package_executor::coordinator::Coordinator::new(
        store.clone(),
        package_executor::coordinator::RunSettings {
            // Slow retries: a run that does not notice would take seconds per project.
            backoff_min: Duration::from_secs(2),
            backoff_max: Duration::from_secs(2),
            ..db::settings()
        },
        package_executor::coordinator::Stop::default(),
        &package_executor::coordinator::LogObserver,
    )
    .run()
    .await;
    let summary = &report.summary;
    assert_eq!(
        summary.exit_code,
        package_executor::exit::Exit::Database,
        "{summary:?}"
    );
    assert_eq!(summary.published, 0, "{summary:?}");
    assert_eq!(summary.final_probes, 0, "{summary:?}");
    assert_eq!(
        db::scalar(&store, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await,
        0
    );
    // What could be built stays pending. demo-rejected's rejection is recorded (the newer
    // schema takes that write) when its attempt started before the run stopped, and it is still
    // marked when not: the four workers' order decides, so either is right.
    let marked = db::marked(&store).await;
    let rejected = summary.rejected.total();
    let expected: &[&str] = if rejected == 1 {
        &["demo-1", "demo-2", "demo-empty"]
    } else {
        &["demo-1", "demo-2", "demo-empty", "demo-rejected"]
    };
    assert_eq!(marked, expected, "a project lost its mark: {summary:?}");
    println!("schema {future}: {summary:?}");
    store.close().await;
}

#[test]
fn a_sqlite_run_that_a_newer_release_migrates_midway_stops() {
    pg::block_on(async {
        let (url, _dir) = pg::fresh_sqlite().await;
        stops_when_migrated_midway(url).await;
    });
}

#[test]
fn every_command_refuses_a_sqlite_schema_newer_than_the_build() {
    pg::block_on(async {
        let (url, _dir) = pg::fresh_sqlite().await;
        every_command_refuses_a_newer_schema(url).await;
    });
}

/// The `pg` tier's half.
mod on_postgres {
    use super::*;

    /// A run under way when a newer release's migration commits beside it (an upgrade while
    /// an older recovery Job runs), one whose writes would all still succeed: the run reads the
    /// schema's version every `SCHEMA_WATCH` and stops taking work (exit 8), instead of going
    /// on as a build older than the schema. Every attempt hangs on a lock another session
    /// holds, so the run is still going when the version moves; once the run has stopped, the
    /// lock is let go and the one attempt in flight (concurrency 1) ends.
    #[test]
    fn a_run_stops_when_a_newer_release_migrates_beside_it() {
        pg::block_on(async {
            let url = pg::fresh_db().await;
            let admin = db::connect(&url).await;
            db::import(&admin, DEMO).await;
            let executor =
                package_executor::store::Store::connect(&package_executor::store::ConnectOptions {
                    lock_timeout: Duration::from_secs(600),
                    ..package_executor::store::ConnectOptions::new(url.parse().unwrap())
                })
                .await
                .unwrap();
            let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::raw_sql("BEGIN; LOCK TABLE ql3.project_claims IN ACCESS EXCLUSIVE MODE")
                .execute(&mut holder)
                .await
                .unwrap();
            let stop = package_executor::coordinator::Stop::default();
            let run = {
                let (executor, stop) = (executor.clone(), stop.clone());
                tokio::spawn(async move {
                    package_executor::coordinator::Coordinator::new(
                        executor,
                        // One project a transaction, so that what the attempt in flight may
                        // publish is one project, and the rest show that none began after.
                        package_executor::coordinator::RunSettings {
                            concurrency: 1,
                            batch_size: 1,
                            ..db::settings()
                        },
                        stop,
                        &package_executor::coordinator::LogObserver,
                    )
                    .run()
                    .await
                })
            };
            let (future, _) = migrate_past_this_build(&url).await;
            tokio::time::timeout(REFUSES_WITHIN, stop.wait())
                .await
                .expect("the run did not stop after the schema moved past it");
            sqlx::raw_sql("ROLLBACK")
                .execute(&mut holder)
                .await
                .unwrap();
            let report = tokio::time::timeout(REFUSES_WITHIN, run)
                .await
                .expect("the stopped run did not end")
                .unwrap();
            let summary = &report.summary;
            assert_eq!(
                summary.exit_code,
                package_executor::exit::Exit::Database,
                "{summary:?}"
            );
            // The one attempt in flight began before the migration and may end either way
            // (its transaction is ordered before the migration's); none began after the stop.
            assert!(summary.published <= 1, "{summary:?}");
            assert!(db::marked(&admin).await.len() >= 3, "{summary:?}");
            println!("schema {future}: {summary:?}");
            admin.close().await;
            executor.close().await;
        });
    }

    #[test]
    fn a_run_that_a_newer_release_migrates_midway_stops() {
        pg::block_on(async {
            let url = pg::fresh_db().await;
            stops_when_migrated_midway(url).await;
        });
    }

    #[test]
    fn every_command_refuses_a_schema_newer_than_the_build() {
        pg::block_on(async {
            let url = pg::fresh_db().await;
            every_command_refuses_a_newer_schema(url).await;
        });
    }
}
