//! Dialect-neutral helpers for tests that touch storage.

use package_executor::coordinator::{Coordinator, LogObserver, RunSettings, Stop};
use package_executor::model::Digest;
use package_executor::report::Outcome;
use package_executor::sources;
use package_executor::store::{ConnectOptions, Dialect, Store};

pub const DEMO: &[u8] = include_bytes!("../../../examples/demo-fixture.json");

pub async fn connect(url: &str) -> Store {
    Store::connect(&ConnectOptions::new(url.parse().unwrap()))
        .await
        .expect("connect")
}

/// SQL written with `ql3.` names, for the store's dialect (the store's own renderer).
fn in_dialect(store: &Store, text: &str) -> String {
    store.dialect().render(text).into_owned()
}

/// Runs one statement written with `ql3.` names (stripped for SQLite); returns the error text.
pub async fn exec(store: &Store, text: &str) -> Result<u64, String> {
    let text = in_dialect(store, text);
    let r = match (store.pg_pool(), store.sqlite_pool()) {
        (Some(p), _) => sqlx::query(sqlx::AssertSqlSafe(text))
            .execute(&p)
            .await
            .map(|r| r.rows_affected()),
        (_, Some(p)) => sqlx::query(sqlx::AssertSqlSafe(text))
            .execute(p)
            .await
            .map(|r| r.rows_affected()),
        _ => unreachable!(),
    };
    r.map_err(|e| e.to_string())
}

/// Runs a script (several statements, no parameters) written with `ql3.` names (stripped for
/// SQLite).
pub async fn script(store: &Store, text: &str) {
    let sql = sqlx::raw_sql(sqlx::AssertSqlSafe(in_dialect(store, text)));
    match (store.pg_pool(), store.sqlite_pool()) {
        (Some(p), _) => sql.execute(&p).await.map(drop),
        (_, Some(p)) => sql.execute(p).await.map(drop),
        _ => unreachable!(),
    }
    .expect("the script runs");
}

/// [`script`] on a connection of its own to `url`.
pub async fn script_at(url: &str, text: &str) {
    let store = connect(url).await;
    script(&store, text).await;
    store.close().await;
}

/// [`exec`] with the database's snapshot checks (migration 11) switched off around it, in one
/// transaction, as only the schema's owner can: for rows no executor could write, to show that
/// the executor still fails closed on a database whose checks were bypassed. SQLite has none.
pub async fn exec_unchecked(store: &Store, text: &str) -> Result<u64, String> {
    if store.dialect() == Dialect::Sqlite {
        return exec(store, text).await;
    }
    let pool = store.pg_pool().expect("postgres");
    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
    let toggle = |on: bool| {
        format!(
            "ALTER TABLE ql3.tool_definition_snapshots {} TRIGGER tool_definition_snapshots_hold",
            if on { "ENABLE ALWAYS" } else { "DISABLE" }
        )
    };
    sqlx::query(sqlx::AssertSqlSafe(toggle(false)))
        .execute(&mut *tx)
        .await
        .map_err(|e| e.to_string())?;
    let n = sqlx::query(sqlx::AssertSqlSafe(text.to_owned()))
        .execute(&mut *tx)
        .await
        .map_err(|e| e.to_string())?
        .rows_affected();
    sqlx::query(sqlx::AssertSqlSafe(toggle(true)))
        .execute(&mut *tx)
        .await
        .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    Ok(n)
}

/// One scalar (as i64) from a statement written with `ql3.` names.
pub async fn scalar(store: &Store, text: &str) -> i64 {
    use sqlx::Row;
    let text = in_dialect(store, text);
    match (store.pg_pool(), store.sqlite_pool()) {
        (Some(p), _) => sqlx::query(sqlx::AssertSqlSafe(text))
            .fetch_one(&p)
            .await
            .expect("query")
            .try_get::<i64, _>(0)
            .expect("i64"),
        (_, Some(p)) => sqlx::query(sqlx::AssertSqlSafe(text))
            .fetch_one(p)
            .await
            .expect("query")
            .try_get::<i64, _>(0)
            .expect("i64"),
        _ => unreachable!(),
    }
}

/// Rows in the source tables, the snapshot tables and the pending index, in that order: what a
/// command that must write nothing leaves as it was.
pub async fn row_counts(store: &Store) -> Vec<i64> {
    let mut out = Vec::new();
    for table in [
        "projects",
        "package_installations",
        "package_generations",
        "materialized_revisions",
        "tool_definition_snapshots",
        "tool_definition_snapshot_sources",
        "tool_definition_snapshot_rejections",
        "pending_projects",
    ] {
        out.push(scalar(store, &format!("SELECT COUNT(*) FROM ql3.{table}")).await);
    }
    out
}

pub async fn import(store: &Store, bytes: &[u8]) -> sources::ImportReport {
    sources::import_bytes(store, bytes).await.expect("import")
}

pub fn settings() -> RunSettings {
    RunSettings {
        backoff_min: std::time::Duration::from_millis(5),
        backoff_max: std::time::Duration::from_millis(50),
        ..RunSettings::default()
    }
}

pub async fn publish(store: &Store, project: &str) -> Outcome {
    let observer = LogObserver;
    Coordinator::new(store.clone(), settings(), Stop::default(), &observer)
        .publish(project)
        .await
        .expect("publish")
}

/// A run over the marked projects (or every project with `full_scan`); its summary's counts.
pub async fn run_all(store: &Store, full_scan: bool) -> package_executor::report::RunSummary {
    run_all_at(store, full_scan, settings().batch_size).await
}

/// [`run_all`] at `--batch-size` `batch_size`.
pub async fn run_all_at(
    store: &Store,
    full_scan: bool,
    batch_size: usize,
) -> package_executor::report::RunSummary {
    let observer = LogObserver;
    Coordinator::new(
        store.clone(),
        RunSettings {
            full_scan,
            batch_size,
            ..settings()
        },
        Stop::default(),
        &observer,
    )
    .run()
    .await
    .summary
}

/// The projects marked in the pending index, in byte order.
pub async fn marked(store: &Store) -> Vec<String> {
    store
        .page_through("", None, 10_000, package_executor::store::Scope::Marked)
        .await
        .expect("marked page")
}

pub async fn current_digest(store: &Store, project: &str) -> Option<Digest> {
    store
        .find_current(project)
        .await
        .expect("find_current")
        .map(|c| c.snapshot_digest)
}

pub fn digest_of(o: &Outcome) -> Digest {
    o.snapshot_digest()
        .unwrap_or_else(|| panic!("expected a snapshot, got {o:?}"))
        .clone()
}

/// How many snapshot rows lack some of their source rows.
pub async fn partial_snapshots(store: &Store) -> i64 {
    scalar(
        store,
        "SELECT COUNT(*) FROM ql3.tool_definition_snapshots AS s WHERE s.package_count <> \
         (SELECT COUNT(*) FROM ql3.tool_definition_snapshot_sources AS src WHERE src.snapshot_id = s.snapshot_id)",
    )
    .await
}

/// `examples/demo-fixture.json`'s path, for the binary's command lines ([`DEMO`] is its bytes).
pub const DEMO_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/demo-fixture.json"
);

/// Runs the command to its end (at most two minutes, or the test fails): its output, however it
/// exited.
pub async fn ends(cmd: &mut tokio::process::Command) -> std::process::Output {
    tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("the command ends within two minutes")
        .expect("the command starts")
}

/// The binary, pointed at a database, logging JSON, outside any pod; killed when dropped.
pub fn exe(url: &str, connect_timeout: &str) -> tokio::process::Command {
    let mut c = tokio::process::Command::from(exe_blocking(url, connect_timeout));
    c.kill_on_drop(true);
    c
}

/// [`exe`] for a test that has no async runtime.
pub fn exe_blocking(url: &str, connect_timeout: &str) -> std::process::Command {
    let mut c = std::process::Command::new(crate::executable());
    c.env("DATABASE_URL", url)
        .env("PACKAGE_EXECUTOR_LOG_FORMAT", "json")
        .env("PACKAGE_EXECUTOR_CONNECT_TIMEOUT", connect_timeout)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("JOB_COMPLETION_INDEX");
    c
}

/// Runs the command and asserts it exited 0 (with its stderr as the message); its output.
pub async fn succeeds(cmd: &mut tokio::process::Command) -> std::process::Output {
    let out = cmd.output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
