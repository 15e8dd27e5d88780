//! The executor's plans do not depend on luck: after a database-wide `VACUUM ANALYZE` taken
//! while the snapshot tables were empty, the generic plans its sessions make still look rows
//! up by key (plain index scans, no bitmap scans) and never scan the snapshot tables or the
//! pending index, nor read a keyed table into a hashed subplan.

use package_executor_testkit::db;
use package_executor_testkit::pg;

use std::time::Duration;

use db::*;
use package_executor::store::{Dialect, sql};
use sqlx::{Acquire, PgConnection};

/// Tables a per-project statement must never scan.
const KEYED: [&str; 5] = [
    "project_claims",
    "tool_definition_snapshots",
    "tool_definition_snapshot_sources",
    "tool_definition_snapshot_rejections",
    "pending_projects",
];

/// The executor's per-project and per-batch statements, by name.
fn statements() -> [(&'static str, &'static str); 11] {
    [
        ("open", sql::OPEN_PG),
        ("open batch", sql::OPEN_BATCH_PG),
        ("finish batch", sql::FINISH_BATCH_PG),
        ("pending page", sql::PENDING_PAGE_PG.text(Dialect::Postgres)),
        ("current digest", sql::CURRENT_DIGEST_PG),
        ("find current", sql::FIND_CURRENT_PG.text(Dialect::Postgres)),
        ("append", sql::APPEND_PG),
        ("replay", sql::SNAPSHOT_BY_VECTOR.text(Dialect::Postgres)),
        ("clear mark", sql::CLEAR_MARK_PG),
        ("claim state", sql::CLAIM_STATE_PG),
        ("marked page", sql::MARKED_PAGE.text(Dialect::Postgres)),
    ]
}

/// The generic plan of `text` on `conn`, as EXPLAIN prints it: prepared, then explained with
/// NULL for every parameter (the values do not matter to a generic plan).
async fn generic_plan(conn: &mut PgConnection, text: &str) -> String {
    explained(conn, text, "EXPLAIN").await
}

/// [`generic_plan`] with `EXPLAIN (VERBOSE)`, which also prints the select list, where a
/// hashed subplan can hide (a plain EXPLAIN shows only filters).
async fn verbose_plan(conn: &mut PgConnection, text: &str) -> String {
    explained(conn, text, "EXPLAIN (VERBOSE)").await
}

async fn explained(conn: &mut PgConnection, text: &str, how: &str) -> String {
    sqlx::query(sqlx::AssertSqlSafe(format!("PREPARE probe AS {text}")))
        .execute(&mut *conn)
        .await
        .unwrap();
    let types: Vec<String> = sqlx::query_scalar(
        "SELECT t::text FROM pg_prepared_statements, unnest(parameter_types) AS t WHERE name = 'probe'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let args: Vec<String> = types.iter().map(|t| format!("NULL::{t}")).collect();
    let explain = if args.is_empty() {
        format!("{how} EXECUTE probe")
    } else {
        format!("{how} EXECUTE probe({})", args.join(", "))
    };
    let lines: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    sqlx::query("DEALLOCATE probe")
        .execute(&mut *conn)
        .await
        .unwrap();
    lines.join("\n")
}

fn scans(plan: &str) -> Vec<&'static str> {
    KEYED
        .into_iter()
        .filter(|t| plan.contains(&format!("Seq Scan on {t}")))
        .collect()
}

/// Keyed tables that a hashed subplan of `plan` (`EXPLAIN (VERBOSE)` text) reads. A hashed
/// subplan is run once per execution and reads its whole input into a hash table: over a CTE
/// of the batch's own rows that is cheap, over a keyed table it reads every row of the table,
/// so a statement run once per batch would cost the server more with every snapshot stored.
fn hashed_reads(plan: &str) -> Vec<&'static str> {
    let lines: Vec<&str> = plan.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(number) = line.trim().strip_prefix("SubPlan ") else {
            continue;
        };
        if !plan.contains(&format!("hashed SubPlan {number})"))
            && !plan.contains(&format!("hashed SubPlan {number}."))
        {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let body = lines[at + 1..]
            .iter()
            .take_while(|l| l.len() - l.trim_start().len() > indent);
        for l in body {
            for table in KEYED {
                if l.contains(&format!(" on {table} ")) || l.contains(&format!(" on ql3.{table} "))
                {
                    found.push(table);
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// What the consumer's doors run (their PL/pgSQL body), planned as a consumer's session plans
/// it: with the server's default settings, not the executor's.
const DOOR: &str = "SELECT f.snapshot_digest, f.active_vector_digest, f.definition_digest, \
     CASE WHEN f.snapshot_digest = $2 THEN NULL ELSE f.canonical_json END, f.committed_at \
     FROM ql3.find_current_tool_snapshot($1) AS f";

/// The door's statement planned as the door plans it: with the settings its definition sets
/// (`proconfig`), on top of a consumer session's defaults.
async fn as_the_door(conn: &mut PgConnection) -> String {
    let config: Vec<String> = sqlx::query_scalar(
        "SELECT c FROM pg_proc AS p, unnest(p.proconfig) AS c \
         WHERE p.oid = 'ql3.current_tool_snapshot(text, text)'::regprocedure",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    for c in &config {
        let (name, value) = c.split_once('=').unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("SET {name} = '{value}'")))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    let plan = generic_plan(conn, DOOR).await;
    sqlx::query("RESET ALL").execute(&mut *conn).await.unwrap();
    plan
}

/// The proof's plan keeps to keys: the candidate comes from the key's index (never every
/// snapshot of the project), no keyed table is scanned, and no subquery is hashed (a hashed
/// subplan reads its whole table once per execution: the PostgreSQL 18 trap of migration 10).
fn keyed(plan: &str, when: &str) -> Option<String> {
    let why = if !scans(plan).is_empty() {
        "scans"
    } else if !plan.contains("tool_definition_snapshots_source_key") {
        "the candidate is not looked up by its key"
    } else if plan.to_lowercase().contains("hashed subplan") {
        "a hashed subplan"
    } else {
        return None;
    };
    Some(format!("{when}: {why}\n{plan}"))
}

/// A well-formed digest, for history rows whose digests are never read.
const D: &str = "'sha256:0000000000000000000000000000000000000000000000000000000000000000'";

/// SQLite's proof (its `find_current`, its open step and its pending scan) looks its candidates
/// up by the key's index, on a fresh file and after `ANALYZE` of a project with 3,000 snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_finds_candidates_by_key() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let (url, _dir) = pg::fresh_sqlite().await;
        let store = connect(&url).await;
        import(&store, DEMO).await;
        let pool = store.sqlite_pool().unwrap().clone();
        let plans = async || -> Vec<(String, String)> {
            let mut out = Vec::new();
            for (name, text) in [
                ("find current", sql::FIND_CURRENT_SQLITE),
                ("open", sql::OPEN_SQLITE),
                ("pending page", sql::PENDING_PAGE_SQLITE),
            ] {
                let text = text.text(package_executor::store::Dialect::Sqlite);
                let rows: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {text}")))
                        .fetch_all(&pool)
                        .await
                        .unwrap();
                let plan: Vec<String> = rows.into_iter().map(|r| r.3).collect();
                out.push((name.to_owned(), plan.join("\n")));
            }
            out
        };
        let check = |plans: Vec<(String, String)>, when: &str| {
            for (name, plan) in plans {
                assert!(
                    plan.contains(
                        "tool_definition_snapshots_source_key (project_id=? AND source_key=?)"
                    ),
                    "{name}, {when}: the candidate is not looked up by its key\n{plan}"
                );
            }
        };
        check(plans().await, "fresh");
        exec(
            &store,
            "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 3000)
             INSERT INTO tool_definition_snapshots (project_id, active_vector_digest,
               definition_digest, snapshot_digest, package_count, definition_count,
               canonical_json, source_key)
             SELECT 'demo-1', printf('sha256:%064x', k), printf('sha256:%064x', k),
                    printf('sha256:%063x1', k), 2, 0, X'7B7D', printf('%032x', k) FROM n",
        )
        .await
        .unwrap();
        exec(&store, "ANALYZE").await.unwrap();
        check(plans().await, "3,000 snapshots, analyzed");
    })
    .await
    .expect("within 120 s");
}

/// The `pg` tier's part of this module: the tests that start PostgreSQL.
mod on_postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plans_keep_to_keys_after_analyze_of_empty_tables() {
        tokio::time::timeout(Duration::from_secs(120), async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            import(&admin, DEMO).await;
            let pool = admin.pg_pool().unwrap();
            sqlx::query("VACUUM ANALYZE").execute(&pool).await.unwrap();
            admin.close().await;

            let exec = connect(&pg::as_login(&url, "login_executor")).await;
            let exec_pool = exec.pg_pool().unwrap();
            let mut conn = exec_pool.acquire().await.unwrap();
            let conn = conn.acquire().await.unwrap();
            let mut control = Vec::new();
            for (name, text) in statements() {
                let plan = generic_plan(conn, text).await;
                assert_eq!(scans(&plan), Vec::<&str>::new(), "{name} scans:\n{plan}");
                // A project's rows come in key order from a plain index scan; a bitmap scan
                // would visit the heap and sort them again (the session turns it off).
                assert!(
                    !plan.contains("Bitmap Heap Scan"),
                    "{name} takes a bitmap scan:\n{plan}"
                );
                let plan = verbose_plan(conn, text).await;
                assert_eq!(
                    hashed_reads(&plan),
                    Vec::<&str>::new(),
                    "{name} hashes a keyed table:\n{plan}"
                );
                // The same statement planned without the session's setting: the control that
                // shows the assertion can fail on this server.
                sqlx::query("SET enable_seqscan = on")
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                control.extend(scans(&generic_plan(conn, text).await));
                sqlx::query("RESET enable_seqscan")
                    .execute(&mut *conn)
                    .await
                    .unwrap();
            }
            for name in ["enable_seqscan", "enable_bitmapscan"] {
                let setting: String = sqlx::query_scalar("SELECT current_setting($1)")
                    .bind(name)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                assert_eq!(setting, "off", "the executor's sessions set {name}");
            }
            assert!(
                !control.is_empty(),
                "with sequential scans priced in, some plan should scan an empty-analyzed table"
            );
            // The control for hashed subplans: a batch's "has a snapshot" as the open step
            // asked it until 2026-12-07, without the OFFSET 0 that keeps it a lookup per
            // project. This server hashes it, reading every stored snapshot once per batch.
            let unguarded = "SELECT EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s0 \
                             WHERE s0.project_id = b.project_id) \
                             FROM unnest($1::text[]) AS b(project_id)";
            let plan = verbose_plan(conn, unguarded).await;
            assert_eq!(
                hashed_reads(&plan),
                vec!["tool_definition_snapshots"],
                "the unguarded form should be hashed here:\n{plan}"
            );
        })
        .await
        .expect("within 120 s");
    }

    /// The proof's plans, the executor's and the consumer's door's, on a database whose snapshot
    /// tables are empty and never analyzed, empty and analyzed, and holding a project with 3,000
    /// snapshots (analyzed): each finds its candidate by key and compares row by row.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_proof_keeps_to_keys_on_empty_and_long_histories() {
        tokio::time::timeout(Duration::from_secs(180), async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            import(&admin, DEMO).await;
            let pool = admin.pg_pool().unwrap();
            let exec = connect(&pg::as_login(&url, "login_executor")).await;
            let exec_pool = exec.pg_pool().unwrap();
            // The door runs as the owner (SECURITY DEFINER) under the calling session's settings.
            let mut consumer = pool.acquire().await.unwrap();
            sqlx::query("SET ROLE ql3_owner")
                .execute(&mut *consumer)
                .await
                .unwrap();
            let history = format!(
                "WITH s AS (
                   INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest,
                     definition_digest, snapshot_digest, package_count, definition_count,
                     canonical_json, source_key)
                   SELECT 'demo-1', 'sha256:' || encode(sha256(convert_to('v' || n, 'UTF8')), 'hex'),
                          {D}, 'sha256:' || encode(sha256(convert_to('s' || n, 'UTF8')), 'hex'), 2, 0,
                          decode('7b7d', 'hex'), md5('k' || n)
                   FROM generate_series(1, 3000) AS n
                   RETURNING snapshot_id)
                 INSERT INTO ql3.tool_definition_snapshot_sources
                 SELECT s.snapshot_id, p.name, 'history-' || p.name, s.snapshot_id, {D}, {D}, {D}
                 FROM s CROSS JOIN (VALUES ('acme.docs'), ('acme.github')) AS p(name)"
            );
            let mut failures = Vec::new();
            for state in [
                "empty, never analyzed",
                "empty, analyzed",
                "3,000 snapshots, analyzed",
            ] {
                match state {
                    "empty, analyzed" => {
                        sqlx::query("ANALYZE").execute(&pool).await.unwrap();
                    }
                    "3,000 snapshots, analyzed" => {
                        exec_unchecked(&admin, &history).await.unwrap();
                        publish(&admin, "demo-1").await;
                        sqlx::query("ANALYZE").execute(&pool).await.unwrap();
                    }
                    _ => {}
                }
                let door = as_the_door(&mut consumer).await;
                failures.extend(keyed(&door, &format!("the consumer's door, {state}")));
                let mut conn = exec_pool.acquire().await.unwrap();
                for (name, text) in [
                    ("find current", sql::FIND_CURRENT_PG.text(Dialect::Postgres)),
                    ("current digest", sql::CURRENT_DIGEST_PG),
                ] {
                    let plan = generic_plan(&mut conn, text).await;
                    failures.extend(keyed(&plan, &format!("the executor's {name}, {state}")));
                }
            }
            assert!(failures.is_empty(), "{}", failures.join("\n\n"));
            // The proof still answers: demo-1's snapshot among 3,001, through the door.
            sqlx::query("SET ROLE ql3_tool_consumer")
                .execute(&mut *consumer)
                .await
                .unwrap();
            let found: Option<String> =
                sqlx::query_scalar("SELECT snapshot_digest FROM ql3.current_tool_snapshot('demo-1')")
                    .fetch_optional(&mut *consumer)
                    .await
                    .unwrap();
            assert_eq!(
                found.as_deref(),
                current_digest(&exec, "demo-1").await.as_ref().map(|d| d.as_str())
            );
            assert!(found.is_some());
        })
        .await
        .expect("within 180 s");
    }
}
