//! The third outside review on PostgreSQL: the bodies `commands::hostile_user` also runs on
//! SQLite, and what only PostgreSQL has (grants, the consumers' door, `max_connections`).

use package_executor_testkit::pg::{self, PgCluster};
use package_executor_testkit::within;

use super::super::hostile_user::{on, outcome, with_demo};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_bytes_never_reach_the_source_tables() {
    let url = pg::fresh_db().await;
    within(
        120,
        super::super::hostile_user::nul_bytes_never_reach_the_source_tables(&url),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_is_pending_only_if_something_is() {
    let url = pg::fresh_db().await;
    with_demo(&url).await;
    within(
        120,
        super::super::hostile_user::a_stopped_run_is_pending_only_if_something_is(&url),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_and_verify_name_the_real_next_step() {
    let url = pg::fresh_db().await;
    with_demo(&url).await;
    within(
        120,
        super::super::hostile_user::explain_and_verify_name_the_real_next_step(&url),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_id_is_quoted_by_every_command() {
    let url = pg::fresh_db().await;
    with_demo(&url).await;
    within(
        120,
        super::super::hostile_user::a_hostile_id_is_quoted_by_every_command(&url),
    )
    .await;
}

/// Review item 8 on PostgreSQL: a login without the executor's grants got 8 from `run` (which
/// a Job retries until its backoff limit) and 1 from the rest. Missing grants are the
/// configuration's: every command exits 1, the run at once rather than after every project's
/// attempts, and says which grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_without_the_executors_grants_exits_1_from_every_command() {
    let url = pg::fresh_db().await;
    with_demo(&url).await;
    within(180, async {
        for login in ["login_worker", "login_api"] {
            let as_login = pg::as_login(&url, login);
            for args in [
                &["run"][..],
                &["run", "--full-scan"],
                &["publish", "demo-1"],
                &["explain", "demo-1"],
                &["verify"],
            ] {
                let mut c = on(&as_login);
                c.args(args);
                let (code, out, err) = outcome(c).await;
                assert_eq!(code, Some(1), "{login} {args:?}: {out} {err}");
                assert!(err.contains("permission denied"), "{login} {args:?}: {err}");
            }
        }
    })
    .await;
}

/// Review item 9: `current P --known-digest D` is the consumers' door from a shell, but a login
/// that is only in `ql3_tool_consumer` was refused the executor's function. `current` now goes
/// through the consumers' own function for such a login, and gives the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_opens_the_consumers_door_for_a_consumer() {
    let url = pg::fresh_db().await;
    with_demo(&url).await;
    within(120, async {
        let mut c = on(&url);
        c.args(["current", "demo-1", "--json"]);
        let (code, executors, err) = outcome(c).await;
        assert_eq!(code, Some(0), "{err}");
        let consumer = pg::as_login(&url, "login_consumer");
        let mut c = on(&consumer);
        c.args(["current", "demo-1", "--json"]);
        let (code, consumers, err) = outcome(c).await;
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(consumers, executors, "one door, one answer");
        let doc: serde_json::Value = serde_json::from_str(&consumers).unwrap();
        let digest = doc["snapshotDigest"].as_str().unwrap().to_owned();
        let mut c = on(&consumer);
        c.args(["current", "demo-1", "--json", "--known-digest", &digest]);
        let (code, out, err) = outcome(c).await;
        assert_eq!(code, Some(0), "{err}");
        assert!(out.contains("\"unchanged\":true"), "{out}");
        let mut c = on(&consumer);
        c.args(["current", "demo-rejected"]);
        assert_eq!(outcome(c).await.0, Some(4));
        // The consumer still cannot build: its door reads, nothing more.
        let mut c = on(&consumer);
        c.args(["publish", "demo-1"]);
        let (code, _, err) = outcome(c).await;
        assert_eq!(code, Some(1), "{err}");
    })
    .await;
}

/// Review item 10: `run --concurrency 256` against `max_connections` 200 made the server log
/// hundreds of "too many clients" refusals, which lock every other login out. On a server of
/// its own with `max_connections = 20`, a run asked for 64 workers reads the free slots, runs
/// fewer, says so, finishes, and the server refuses no connection.
#[test]
fn concurrency_is_capped_to_the_servers_free_slots() {
    let dir = tempfile::tempdir().unwrap();
    let server = PgCluster::start_in(dir.path().join("pg"), "max_connections = 20\n");
    let url = server.url("postgres");
    pg::block_on(async move {
        within(180, async {
            let mut c = on(&url);
            c.args(["migrate", "--create-roles"]);
            let (code, _, err) = outcome(c).await;
            assert_eq!(code, Some(0), "{err}");
            let mut c = on(&url);
            c.args(["sources", "import", package_executor_testkit::db::DEMO_PATH]);
            assert_eq!(outcome(c).await.0, Some(0));
            let mut c = on(&url);
            c.args(["run", "--full-scan", "--concurrency", "64"]);
            let (code, out, err) = outcome(c).await;
            assert_eq!(code, Some(0), "{out} {err}");
            assert!(
                err.contains("--concurrency 64 asks for more connections than the server has free"),
                "{err}"
            );
        })
        .await;
    });
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap();
    assert!(!log.contains("too many clients"), "{log}");
    assert!(!log.contains("remaining connection slots"), "{log}");
}
