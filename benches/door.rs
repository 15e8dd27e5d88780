//! The consumer's door at scale: what `ql3.current_tool_snapshot` and the executor's attempt
//! cost as a project's history grows, beside a floor query that reads the same rows by key.
//!
//! `cargo bench --bench door` prints the figures for the PostgreSQL server that
//! `PE_PG_BINDIR` names (the test harness's default otherwise); nothing here is an assertion.
//! For each of 32 and 128 packages and a history of 1, 2,000 and 10,000 snapshots (one package
//! updated that often, the others never), it measures, as a `ql3_tool_consumer` login with
//! prepared statements (as pgbench does):
//!
//! - the door, one client (mean latency) and eight (calls per second);
//! - the floor: one statement that reads the live heads, their generations, the current
//!   snapshot's row and its source rows by key, and returns the same document;
//! - the executor's attempt on a current project (`publish`: claim, observation, proof), mean;
//!
//! and, for one project whose current snapshot is 4 MiB, the full door against the conditional
//! door given the current digest. `PE_DOOR_SECONDS` sets each timed window (default 1),
//! `PE_DOOR_ROUNDS` the rounds of interleaved latency windows whose medians are reported
//! (default 5), `PE_DOOR_HISTORIES` the histories (default `1,2000,10000`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use package_executor_testkit::pg;

use std::time::{Duration, Instant};

use package_executor::coordinator::{Coordinator, LogObserver, RunSettings, Stop};
use package_executor::store::{ConnectOptions, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The door, as a consumer calls it.
const DOOR: &str = "SELECT snapshot_digest, active_vector_digest, definition_digest, \
                    canonical_json, committed_at FROM ql3.current_tool_snapshot($1)";

/// The conditional door.
const DOOR_KNOWN: &str = "SELECT snapshot_digest, active_vector_digest, definition_digest, \
                          canonical_json, committed_at FROM ql3.current_tool_snapshot($1, $2)";

/// The floor: the rows the proof must read, by key, in one statement: the project row, the live
/// heads and their generations, the current snapshot (`$2`, its id) and its source rows.
const FLOOR: &str = "
SELECT s.snapshot_digest, s.active_vector_digest, s.definition_digest, s.canonical_json,
       s.committed_at,
       (SELECT count(*) FROM ql3.projects AS p WHERE p.project_id = $1) AS projects,
       (SELECT count(g.status) FROM ql3.package_installations AS i
        JOIN ql3.package_generations AS g
          ON g.installation_id = i.installation_id AND g.generation = i.active_generation
        WHERE i.project_id = $1 AND i.active_generation IS NOT NULL) AS heads,
       (SELECT count(src.revision_digest) FROM ql3.tool_definition_snapshot_sources AS src
        WHERE src.snapshot_id = s.snapshot_id) AS sources
FROM ql3.tool_definition_snapshots AS s
WHERE s.snapshot_id = $2";

fn seconds() -> Duration {
    Duration::from_secs_f64(
        std::env::var("PE_DOOR_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1.0),
    )
}

async fn raw(conn: &mut PgConnection, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// A digest made of a tag and two numbers.
fn d(tag: &str, a: &str, b: &str) -> String {
    format!("'sha256:' || encode(sha256(convert_to('{tag}' || {a} || '-' || {b}, 'UTF8')), 'hex')")
}

/// Project `project` with `packages` packages and `history` snapshots: package 1 went through
/// generations 1..=history, one snapshot each, the others stayed at generation 1; the last
/// snapshot is current. Its document is `doc_bytes` long. Written as the owner with the
/// snapshot checks off (the door reads, it does not check); the key is filled when the schema
/// has one (a database from before the key has none), as migration 12 fills it.
async fn project(
    conn: &mut PgConnection,
    project: &str,
    packages: u32,
    history: u32,
    doc_bytes: usize,
) -> i64 {
    let (n, h) = (packages, history);
    let g_of = format!("CASE WHEN i = 1 THEN {h} ELSE 1 END");
    raw(conn, &format!(
        "INSERT INTO ql3.projects VALUES ('{project}');
         INSERT INTO ql3.package_installations (installation_id, project_id, package_name, active_generation)
         SELECT '{project}-i' || i, '{project}', 'pkg' || lpad(i::text, 3, '0'), NULL
         FROM generate_series(1, {n}) AS i;
         INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest,
           lock_digest, revision_digest, approved_permissions)
         SELECT '{project}-i' || i, g, CASE WHEN g = {g_of} THEN 'active' ELSE 'superseded' END,
                {}, {}, {}, '[]'
         FROM generate_series(1, {n}) AS i, generate_series(1, {h}) AS g WHERE i = 1 OR g = 1;
         UPDATE ql3.package_installations SET active_generation = CASE WHEN installation_id = '{project}-i1' THEN {h} ELSE 1 END
         WHERE project_id = '{project}';",
        d("g", "i", "g"), d("l", "i", "g"), d("r", "i", "g"),
    )).await;
    let has_key: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns
                        WHERE table_schema = 'ql3' AND table_name = 'tool_definition_snapshots'
                          AND column_name = 'source_key')",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let (key_column, key_value) = if has_key {
        (", source_key", format!(", repeat('0', {})", 16 * n))
    } else {
        ("", String::new())
    };
    // A document of about `doc_bytes` that compresses as JSON text does (hex, half as well).
    let doc = format!(
        "(SELECT convert_to('{{\"x\":\"' || string_agg(md5(j::text), '') || '\"}}', 'UTF8')
          FROM generate_series(1, {}) AS j)",
        doc_bytes.div_ceil(32)
    );
    raw(conn, &format!(
        "ALTER TABLE ql3.tool_definition_snapshots DISABLE TRIGGER USER;
         ALTER TABLE ql3.tool_definition_snapshot_sources DISABLE TRIGGER USER;
         INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest,
           definition_digest, snapshot_digest, package_count, definition_count, canonical_json{key_column})
         SELECT '{project}', {}, {}, {}, {n}, 0, CASE WHEN k = {h} THEN {doc} ELSE convert_to('{{}}', 'UTF8') END{key_value}
         FROM generate_series(1, {h}) AS k;
         INSERT INTO ql3.tool_definition_snapshot_sources
         SELECT s.snapshot_id, 'pkg' || lpad(i::text, 3, '0'), '{project}-i' || i, x.g, {}, {}, {}
         FROM (SELECT s0.snapshot_id, row_number() OVER (ORDER BY s0.snapshot_id) AS k
               FROM ql3.tool_definition_snapshots AS s0 WHERE s0.project_id = '{project}') AS s
         CROSS JOIN generate_series(1, {n}) AS i
         CROSS JOIN LATERAL (SELECT CASE WHEN i = 1 THEN s.k ELSE 1 END AS g) AS x;",
        d("v", &format!("'{project}'"), "k"),
        d("dd", &format!("'{project}'"), "k"),
        d("s", &format!("'{project}'"), "k"),
        d("g", "i", "x.g"), d("l", "i", "x.g"), d("r", "i", "x.g"),
    )).await;
    if has_key {
        raw(conn, &format!(
            "UPDATE ql3.tool_definition_snapshots AS s SET source_key = (
               SELECT string_agg(substr(src.generation_digest, 8, 8) || substr(src.revision_digest, 8, 8),
                                 '' ORDER BY src.package_name)
               FROM ql3.tool_definition_snapshot_sources AS src WHERE src.snapshot_id = s.snapshot_id)
             WHERE s.project_id = '{project}'"
        )).await;
    }
    sqlx::query_scalar(
        "SELECT max(s.snapshot_id) FROM ql3.tool_definition_snapshots AS s WHERE s.project_id = $1",
    )
    .bind(project)
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

/// One statement's cost: mean latency of one client calling it back to back, and calls per
/// second of `clients` clients, each on its own connection, over the same window.
struct Cost {
    mean: Duration,
    rate_1: f64,
    rate_n: f64,
}

async fn call(conn: &mut PgConnection, text: &'static str, project: &str, arg: &Arg) -> usize {
    let q = sqlx::query(AssertSqlSafe(text)).bind(project.to_owned());
    let q = match arg {
        Arg::None => q,
        Arg::Id(id) => q.bind(*id),
        Arg::Text(t) => q.bind(t.clone()),
    };
    let rows = q.fetch_all(&mut *conn).await.unwrap();
    assert_eq!(rows.len(), 1, "{text} for {project}: one row");
    rows.len()
}

#[derive(Clone)]
enum Arg {
    None,
    Id(i64),
    Text(String),
}

/// A client's connection: the floor's with the settings the proof plans under (the executor's
/// sessions and the doors price out everything but keyed lookups, and keep generic plans), so
/// that the floor is the keyed reads it stands for; the door's as a consumer connects.
async fn client(url: &str, text: &str) -> PgConnection {
    let mut conn = PgConnection::connect(url).await.unwrap();
    if text == FLOOR {
        raw(
            &mut conn,
            "SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
             SET plan_cache_mode = force_generic_plan",
        )
        .await;
    }
    conn
}

async fn window(
    url: &str,
    text: &'static str,
    project: &str,
    arg: &Arg,
    clients: usize,
) -> (u64, Duration) {
    let window = seconds();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (url, project, arg) = (url.to_owned(), project.to_owned(), arg.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = client(&url, text).await;
            for _ in 0..50 {
                call(&mut conn, text, &project, &arg).await;
            }
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < window {
                call(&mut conn, text, &project, &arg).await;
                calls += 1;
            }
            let took = start.elapsed();
            conn.close().await.unwrap();
            (calls, took)
        }));
    }
    let mut calls = 0;
    let mut longest = Duration::ZERO;
    for t in tasks {
        let (c, took) = t.await.unwrap();
        calls += c;
        longest = longest.max(took);
    }
    (calls, longest)
}

async fn cost(url: &str, text: &'static str, project: &str, arg: Arg) -> Cost {
    let (calls, took) = window(url, text, project, &arg, 1).await;
    let (calls_n, took_n) = window(url, text, project, &arg, 8).await;
    Cost {
        mean: took / u32::try_from(calls).unwrap().max(1),
        rate_1: calls as f64 / took.as_secs_f64(),
        rate_n: calls_n as f64 / took_n.as_secs_f64(),
    }
}

/// One client's mean latency (seconds) over one window.
async fn mean(url: &str, text: &'static str, project: &str, arg: &Arg) -> f64 {
    let (calls, took) = window(url, text, project, arg, 1).await;
    took.as_secs_f64() / calls.max(1) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The histories measured (`PE_DOOR_HISTORIES`, default `1,2000,10000`; the first is the base
/// of the ratios).
fn histories() -> Vec<u32> {
    std::env::var("PE_DOOR_HISTORIES")
        .unwrap_or_else(|_| "1,2000,10000".into())
        .split(',')
        .map(|h| h.trim().parse().unwrap())
        .collect()
}

/// Rounds of the interleaved latency windows (`PE_DOOR_ROUNDS`, default 5).
fn rounds() -> usize {
    std::env::var("PE_DOOR_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5usize)
        .max(1)
}

/// The executor's attempt on a current project, mean of back-to-back `publish` calls.
async fn attempt(url: &str, project: &str) -> Duration {
    let store = Store::connect(&ConnectOptions::new(url.parse().unwrap()))
        .await
        .unwrap();
    let observer = LogObserver;
    let coordinator = Coordinator::new(
        store.clone(),
        RunSettings::default(),
        Stop::default(),
        &observer,
    );
    for _ in 0..20 {
        let o = coordinator.publish(project).await.unwrap();
        assert_eq!(o.name(), "already-current", "{project}: {o:?}");
    }
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed() < seconds() {
        coordinator.publish(project).await.unwrap();
        calls += 1;
    }
    let mean = start.elapsed() / calls.max(1);
    store.close().await;
    mean
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("benchmarks run only under `cargo bench --bench door`");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = pg::fresh_db().await;
        let consumer = pg::as_login(&url, "login_consumer");
        let mut owner = PgConnection::connect(&url).await.unwrap();
        let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(&mut owner).await.unwrap();
        println!("[door] PostgreSQL {version}, {} s windows, 8 clients for the rate column", seconds().as_secs_f64());
        let mut projects = Vec::new();
        for packages in [32u32, 128] {
            for &history in &histories() {
                let name = format!("door-{packages}-{history}");
                let id = project(&mut owner, &name, packages, history, packages as usize * 400).await;
                projects.push((packages, history, name, id));
            }
        }
        let big = project(&mut owner, "door-big", 32, 1, 4 << 20).await;
        raw(&mut owner, "VACUUM ANALYZE").await;
        // One client's mean latency in short windows, round after round, every project of a
        // size and both statements interleaved within a round: the ratios are taken within a
        // round (the machine's drift between rounds cancels), and the medians are reported.
        println!(
            "{:>8} {:>8} | {:>10} {:>10} | {:>9} {:>9} | {:>10} | door/floor  door/history-1  attempt/history-1",
            "packages", "history", "door", "floor", "door/s", "door/s x8", "attempt"
        );
        for packages in [32u32, 128] {
            let mine: Vec<&(u32, u32, String, i64)> =
                projects.iter().filter(|p| p.0 == packages).collect();
            let mut door = vec![Vec::new(); mine.len()];
            let mut floor = vec![Vec::new(); mine.len()];
            for _ in 0..rounds() {
                for (k, (_, _, name, id)) in mine.iter().enumerate() {
                    door[k].push(mean(&consumer, DOOR, name, &Arg::None).await);
                    floor[k].push(mean(&url, FLOOR, name, &Arg::Id(*id)).await);
                }
            }
            // Every round's figures, so that the spread behind each median is on the page.
            for (k, (_, history, _, _)) in mine.iter().enumerate() {
                let list = |v: &[f64]| {
                    v.iter()
                        .map(|x| format!("{:.3}", x * 1e3))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!(
                    "[door] {packages} packages, history {history}: door ms by round {}; floor ms {}",
                    list(&door[k]),
                    list(&floor[k])
                );
            }
            let attempt_1 = attempt(&url, &mine[0].2).await;
            for (k, (_, history, name, _)) in mine.iter().enumerate() {
                let rates = cost(&consumer, DOOR, name, Arg::None).await;
                let attempt = if k == 0 { attempt_1 } else { attempt(&url, name).await };
                let by_round = |f: &dyn Fn(usize) -> f64| median((0..door[k].len()).map(f).collect());
                println!(
                    "{packages:>8} {history:>8} | {:>10} {:>10} | {:>9.0} {:>9.0} | {:>10} | {:>10.2}  {:>14.2}  {:>17.2}",
                    ms(Duration::from_secs_f64(median(door[k].clone()))),
                    ms(Duration::from_secs_f64(median(floor[k].clone()))),
                    rates.rate_1,
                    rates.rate_n,
                    ms(attempt),
                    by_round(&|r| door[k][r] / floor[k][r]),
                    by_round(&|r| door[k][r] / door[0][r]),
                    attempt.as_secs_f64() / attempt_1.as_secs_f64(),
                );
            }
        }
        let digest: String = sqlx::query_scalar(
            "SELECT snapshot_digest FROM ql3.tool_definition_snapshots WHERE snapshot_id = $1",
        )
        .bind(big)
        .fetch_one(&mut owner)
        .await
        .unwrap();
        let conditional: bool = sqlx::query_scalar(
            "SELECT to_regprocedure('ql3.current_tool_snapshot(text, text)') IS NOT NULL",
        )
        .fetch_one(&mut owner)
        .await
        .unwrap();
        let full = cost(&consumer, DOOR, "door-big", Arg::None).await;
        if !conditional {
            println!("[door] 4 MiB current snapshot: full door {} (no conditional door here)", ms(full.mean));
            return;
        }
        let known = cost(&consumer, DOOR_KNOWN, "door-big", Arg::Text(digest)).await;
        println!(
            "[door] 4 MiB current snapshot: full door {} ({:.0}/s, {:.0}/s x8), conditional door \
             with the current digest {} ({:.0}/s, {:.0}/s x8): {:.3} of the full door",
            ms(full.mean),
            full.rate_1,
            full.rate_n,
            ms(known.mean),
            known.rate_1,
            known.rate_n,
            known.mean.as_secs_f64() / full.mean.as_secs_f64()
        );
    });
}
