//! The executor's plans do not depend on luck: after a database-wide `VACUUM ANALYZE` taken
//! while the snapshot tables were empty, the generic plans its sessions make still look rows
//! up by key and never scan the snapshot tables or the pending index.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/db.rs"]
mod db;
#[path = "support/pg.rs"]
mod pg;

use std::time::Duration;

use db::*;
use package_executor::store::sql;
use sqlx::{Acquire, PgConnection};

/// Tables a per-project statement must never scan.
const KEYED: [&str; 5] = [
    "project_claims",
    "tool_definition_snapshots",
    "tool_definition_snapshot_sources",
    "tool_definition_snapshot_rejections",
    "pending_projects",
];

/// The executor's per-project statements, by name.
fn statements() -> [(&'static str, &'static str); 8] {
    [
        ("open", sql::OPEN_PG),
        ("current digest", sql::CURRENT_DIGEST_PG),
        ("find current", sql::FIND_CURRENT_PG),
        ("append", sql::APPEND_PG),
        ("replay", sql::SNAPSHOT_BY_VECTOR),
        ("clear mark", sql::CLEAR_MARK_PG),
        ("claim standing", sql::CLAIM_STANDING_PG),
        ("marked page", sql::MARKED_PAGE),
    ]
}

/// The generic plan of `text` on `conn`, as EXPLAIN prints it: prepared, then explained with
/// NULL for every parameter (the values do not matter to a generic plan).
async fn generic_plan(conn: &mut PgConnection, text: &str) -> String {
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
        "EXPLAIN EXECUTE probe".to_owned()
    } else {
        format!("EXPLAIN EXECUTE probe({})", args.join(", "))
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
        let setting: String = sqlx::query_scalar("SHOW enable_seqscan")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(setting, "off", "the executor's sessions set it");
        assert!(
            !control.is_empty(),
            "with sequential scans priced in, some plan should scan an empty-analyzed table"
        );
    })
    .await
    .expect("within 120 s");
}
