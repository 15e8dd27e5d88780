//! PostgreSQL least privilege (docs/contract.md, section 8), on a real server, through real LOGIN members of
//! each group role.

use package_executor_testkit::db;
use package_executor_testkit::pg;

use std::time::Duration;

use db::*;
use sqlx::{Connection, PgConnection, Row};

const D: &str = "'sha256:0000000000000000000000000000000000000000000000000000000000000000'";

fn tables() -> Vec<(&'static str, String, &'static str)> {
    // (table, an INSERT of valid new values, WHERE clause for UPDATE/DELETE: source tables use
    // `false` so only privileges are checked; snapshot tables `true` so their triggers fire)
    vec![
        ("projects", "INSERT INTO ql3.projects VALUES ('matrix-p')".into(), "false"),
        ("package_installations", "INSERT INTO ql3.package_installations VALUES ('matrix-i', 'demo-1', 'matrix.pkg', NULL)".into(), "false"),
        ("package_generations", format!("INSERT INTO ql3.package_generations VALUES ('demo-1-docs', 99, 'staged', {D}, {D}, {D}, '[]')"), "false"),
        ("materialized_revisions", format!("INSERT INTO ql3.materialized_revisions VALUES ({}, decode('7b7d', 'hex'), 2)", D.replace("0000'", "0001'")), "true"),
        ("tool_definition_snapshots", format!("INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest, definition_digest, snapshot_digest, package_count, definition_count, canonical_json, source_key) VALUES ('matrix-p2', {D}, {D}, {}, 0, 0, decode('7b7d', 'hex'), '')", D.replace("0000'", "0002'")), "true"),
        ("tool_definition_snapshot_sources", format!("INSERT INTO ql3.tool_definition_snapshot_sources SELECT min(snapshot_id), 'zzz.pkg', 'zzz', 1, {D}, {D}, {D} FROM ql3.tool_definition_snapshots"), "true"),
        ("tool_definition_snapshot_rejections", format!("INSERT INTO ql3.tool_definition_snapshot_rejections (project_id, active_vector_digest, reason, detail) VALUES ('matrix-p3', {D}, 'source-invalid', 'x')"), "true"),
        ("pending_projects", "INSERT INTO ql3.pending_projects VALUES ('matrix-p4', 1)".into(), "true"),
        ("project_claims", "INSERT INTO ql3.project_claims VALUES ('matrix-p5')".into(), "false"),
        ("generation_ledger", format!("INSERT INTO ql3.generation_ledger VALUES ('matrix-i', 1, {D}, {D}, {D}, '[]')"), "false"),
    ]
}

fn first_column(table: &str) -> &'static str {
    match table {
        "projects" | "tool_definition_snapshots" | "tool_definition_snapshot_rejections" => {
            "project_id"
        }
        "package_installations" | "package_generations" => "installation_id",
        "pending_projects" => "version",
        "project_claims" => "project_id",
        "generation_ledger" => "installation_id",
        "materialized_revisions" => "byte_length",
        _ => "lock_digest",
    }
}

/// Runs one statement in a transaction that is always rolled back; "ok" or the SQLSTATE.
async fn attempt(conn: &mut PgConnection, sql: &str) -> String {
    let mut tx = conn.begin().await.unwrap();
    let r = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut *tx)
        .await;
    let out = match r {
        Ok(_) => "ok".to_owned(),
        Err(sqlx::Error::Database(e)) => e
            .code()
            .map(|c| c.into_owned())
            .unwrap_or_else(|| "??".into()),
        Err(e) => panic!("{sql}: {e}"),
    };
    tx.rollback().await.ok();
    out
}

fn expected(role: &str, op: &str, table: &str) -> &'static str {
    let snapshot = table.starts_with("tool_definition");
    let index = table == "pending_projects";
    // The owner's own bookkeeping: claims (rows only the executor may lock) and generation keys.
    let claims = table == "project_claims";
    let ledger = table == "generation_ledger";
    let source = !snapshot
        && !index
        && !claims
        && !ledger
        && !table.starts_with("fn:")
        && !table.starts_with("schema:");
    match (role, op) {
        // The pending index: the owner's triggers write it; the executor reads it and clears a
        // mark through the function (a DELETE grant would let it lock the whole table).
        ("ql3_owner", _) if index || claims || ledger => "ok",
        // A source row for a snapshot committed earlier: the privilege holds, the database's
        // check refuses the row (source rows come with their snapshot, never later).
        ("ql3_owner" | "ql3_package_executor", "INSERT")
            if table == "tool_definition_snapshot_sources" =>
        {
            "23514"
        }
        // A snapshot row without its source rows and document: the privilege holds, the
        // database's check refuses the row at the end of its statement.
        ("ql3_owner" | "ql3_package_executor", "INSERT")
            if table == "tool_definition_snapshots" =>
        {
            "23514"
        }
        ("ql3_package_executor", "SELECT") if index => "ok",
        ("ql3_package_executor", "EXECUTE")
            if matches!(table, "fn:clear_pending_mark" | "fn:clear_pending_marks") =>
        {
            "ok"
        }
        // Claims: a row lock needs UPDATE on a column, which only the executor has.
        ("ql3_package_executor", "SELECT" | "UPDATE" | "SELECT FOR UPDATE") if claims => "ok",
        // A table lock that blocks writers needs table-level UPDATE, DELETE or TRUNCATE.
        ("ql3_owner", "LOCK" | "SELECT FOR UPDATE") => "ok",
        ("ql3_control_plane", "LOCK" | "SELECT FOR UPDATE") if source => "ok",
        (_, "LOCK" | "SELECT FOR UPDATE") => "42501",
        ("ql3_owner", "SELECT" | "INSERT") => "ok",
        ("ql3_owner", "UPDATE" | "DELETE" | "TRUNCATE") if snapshot => "P0001",
        ("ql3_owner", "UPDATE") if table == "materialized_revisions" => "P0001",
        ("ql3_owner", "UPDATE" | "DELETE" | "TRUNCATE" | "DISABLE TRIGGER") => "ok",
        ("ql3_owner", "EXECUTE") => "ok",
        ("ql3_owner", "CREATE") if table == "schema:ql3" => "ok",
        ("ql3_control_plane", "SELECT" | "INSERT" | "DELETE") if source => "ok",
        ("ql3_control_plane", "UPDATE") if table == "materialized_revisions" => "P0001",
        ("ql3_control_plane", "UPDATE") if source => "ok",
        ("ql3_package_executor", "SELECT") if source || snapshot => "ok",
        ("ql3_package_executor", "INSERT") if snapshot => "ok",
        ("ql3_package_executor", "EXECUTE") if table == "fn:find_current_tool_snapshot" => "ok",
        ("ql3_tool_consumer", "EXECUTE") if table == "fn:current_tool_snapshot" => "ok",
        _ => "42501",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privilege_matrix() {
    tokio::time::timeout(Duration::from_secs(300), async {
        let url = pg::fresh_db().await;
        let admin = connect(&url).await;
        import(&admin, DEMO).await;
        publish(&admin, "demo-1").await;
        publish(&admin, "demo-rejected").await;
        let mut failures = Vec::new();
        let mut matrix = String::from("role                  operation        object                               result\n");
        for (login, role) in pg::LOGINS {
            let mut conn = PgConnection::connect(&pg::as_login(&url, login)).await.unwrap();
            let mut ops: Vec<(&str, String, String)> = Vec::new();
            for (table, insert, filter) in tables() {
                let col = first_column(table);
                ops.push(("SELECT", table.into(), format!("SELECT * FROM ql3.{table} LIMIT 1")));
                ops.push(("INSERT", table.into(), insert.clone()));
                ops.push(("UPDATE", table.into(), format!("UPDATE ql3.{table} SET {col} = {col} WHERE {filter}")));
                ops.push(("DELETE", table.into(), format!("DELETE FROM ql3.{table} WHERE {}", if filter == "true" && table != "materialized_revisions" { "true" } else { "false" })));
                ops.push(("TRUNCATE", table.into(), format!("TRUNCATE ql3.{table} CASCADE")));
            }
            for table in ["projects", "package_installations", "package_generations", "pending_projects", "project_claims", "tool_definition_snapshots"] {
                ops.push(("LOCK", table.into(), format!("LOCK TABLE ql3.{table} IN SHARE ROW EXCLUSIVE MODE")));
            }
            for table in ["projects", "project_claims"] {
                ops.push(("SELECT FOR UPDATE", table.into(), format!("SELECT 1 FROM ql3.{table} FOR UPDATE")));
            }
            ops.push(("EXECUTE", "fn:clear_pending_mark".into(), "SELECT ql3.clear_pending_mark('demo-1', 0)".into()));
            ops.push(("EXECUTE", "fn:clear_pending_marks".into(), "SELECT ql3.clear_pending_marks(ARRAY['demo-1'], ARRAY[0::bigint])".into()));
            ops.push(("EXECUTE", "fn:find_current_tool_snapshot".into(), "SELECT * FROM ql3.find_current_tool_snapshot('demo-1')".into()));
            ops.push(("EXECUTE", "fn:current_tool_snapshot".into(), "SELECT * FROM ql3.current_tool_snapshot('demo-1')".into()));
            ops.push(("EXECUTE", "fn:current_tool_snapshot".into(), "SELECT * FROM ql3.current_tool_snapshot('demo-1', NULL)".into()));
            ops.push(("CREATE", "schema:ql3".into(), "CREATE TABLE ql3.matrix_probe (x int)".into()));
            ops.push(("CREATE", "schema:public".into(), "CREATE TABLE public.matrix_probe (x int)".into()));
            ops.push(("DISABLE TRIGGER", "tool_definition_snapshots".into(), "ALTER TABLE ql3.tool_definition_snapshots DISABLE TRIGGER tool_definition_snapshots_append_only".into()));
            for (op, object, sql) in ops {
                let got = attempt(&mut conn, &sql).await;
                let want = if op == "DISABLE TRIGGER" { if role == "ql3_owner" { "ok" } else { "42501" } } else { expected(role, op, &object) };
                let mark = if got == want { "" } else { "   <-- expected " };
                matrix.push_str(&format!("{role:<21} {op:<16} {object:<36} {got}{mark}{}\n", if got == want { "" } else { want }));
                if got != want {
                    failures.push(format!("{role} {op} {object}: got {got}, want {want}"));
                }
            }
        }
        println!("{matrix}");
        assert!(failures.is_empty(), "privilege matrix mismatches:\n{}", failures.join("\n"));
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_step_takes_the_claim_once() {
    // The claim is a row lock: were it copied into several places of the plan, a replica
    // committing between two of them could make one gate see the claim and another not.
    tokio::time::timeout(Duration::from_secs(60), async {
        let url = pg::fresh_db().await;
        let admin = connect(&url).await;
        let mut conn = admin.pg_pool().unwrap().acquire().await.unwrap();
        let prepare = format!(
            "SET plan_cache_mode = force_generic_plan;
             PREPARE open_step(text, bigint) AS {}",
            package_executor::store::OPEN_SQL
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
            .execute(&mut *conn)
            .await
            .unwrap();
        let plan: Vec<String> =
            sqlx::query_scalar("EXPLAIN VERBOSE EXECUTE open_step('demo-1', 262144)")
                .fetch_all(&mut *conn)
                .await
                .unwrap();
        let calls = plan
            .iter()
            .map(|l| l.matches("LockRows").count())
            .sum::<usize>();
        assert_eq!(calls, 1, "open step plan:\n{}", plan.join("\n"));
    })
    .await
    .expect("timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_is_locked_down() {
    let url = pg::fresh_db().await;
    let admin = connect(&url).await;
    let pool = &admin.pg_pool().unwrap();
    let definer_without_path: i64 = sqlx::query(
        "SELECT COUNT(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'ql3' AND p.prosecdef
           AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(p.proconfig, '{}')) c WHERE c LIKE 'search_path=%')")
        .fetch_one(pool).await.unwrap().get(0);
    assert_eq!(
        definer_without_path, 0,
        "every SECURITY DEFINER function pins search_path"
    );
    // The proof is inlined into its callers (no per-call planning): no Function Scan remains,
    // neither for the executor's call nor inside the consumer's door.
    for call in [
        "ql3.find_current_tool_snapshot('demo-1')",
        "ql3.current_tool_snapshot('demo-1')",
        "ql3.current_tool_snapshot('demo-1', NULL)",
    ] {
        let plan: Vec<String> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN SELECT * FROM {call}")))
                .fetch_all(pool)
                .await
                .unwrap();
        let scans = plan.iter().filter(|l| l.contains("Function Scan")).count();
        let expected = usize::from(call.starts_with("ql3.current"));
        assert_eq!(scans, expected, "{call} plan:\n{}", plan.join("\n"));
    }
    let definers: Vec<String> = sqlx::query_scalar("SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'ql3' AND p.prosecdef ORDER BY 1")
        .fetch_all(pool).await.unwrap();
    assert_eq!(
        definers,
        [
            "add_project_claims",
            "clear_pending_mark",
            "clear_pending_marks",
            "current_tool_snapshot",
            "current_tool_snapshot",
            "hold_generation_keys",
            "mark_generations",
            "mark_installations",
            "mark_pending",
            "mark_projects",
            "mark_revisions"
        ],
        "only the consumer's two doors, the pending index's markers and mark clearing, and the \
         triggers that keep claims and generation keys are SECURITY DEFINER"
    );
    // The markers and keepers are trigger functions (and their helper): nobody may call them
    // directly.
    let callable: Vec<String> = sqlx::query_scalar(
        "SELECT r.rolname || ' ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         CROSS JOIN pg_roles r
         WHERE n.nspname = 'ql3' AND (p.proname LIKE 'mark\\_%' OR p.proname IN ('add_project_claims', 'hold_generation_keys')) AND r.rolname LIKE 'ql3\\_%'
           AND r.rolname <> 'ql3_owner' AND has_function_privilege(r.oid, p.oid, 'EXECUTE')")
        .fetch_all(pool).await.unwrap();
    assert!(callable.is_empty(), "{callable:?}");
    let public_grants: Vec<String> = sqlx::query(
        "SELECT 'schema ql3' FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.nspname = 'ql3' AND a.grantee = 0
         UNION ALL
         SELECT 'relation ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a
           WHERE n.nspname = 'ql3' AND a.grantee = 0
         UNION ALL
         SELECT 'function ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
           aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
           WHERE n.nspname = 'ql3' AND a.grantee = 0")
        .fetch_all(pool).await.unwrap().iter().map(|r| r.get::<String, _>(0)).collect();
    assert!(public_grants.is_empty(), "PUBLIC holds: {public_grants:?}");
    let not_always: Vec<String> = sqlx::query(
        "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'ql3' AND NOT t.tgisinternal AND t.tgenabled <> 'A'")
        .fetch_all(pool).await.unwrap().iter().map(|r| r.get::<String, _>(0)).collect();
    assert!(
        not_always.is_empty(),
        "triggers not ENABLE ALWAYS: {not_always:?}"
    );
    let triggers: i64 = sqlx::query("SELECT COUNT(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'ql3' AND NOT t.tgisinternal")
        .fetch_one(pool).await.unwrap().get(0);
    // Eight keep history append-only; ten mark the pending index; two add claim rows, one
    // keeps generation keys, two check snapshots and their source rows, one holds approved
    // permissions to their limits.
    assert_eq!(triggers, 24);
    let foreign_owned: Vec<String> = sqlx::query(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'ql3' AND pg_get_userbyid(c.relowner) <> 'ql3_owner'
         UNION ALL SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'ql3' AND pg_get_userbyid(p.proowner) <> 'ql3_owner'
         UNION ALL SELECT nspname FROM pg_namespace WHERE nspname = 'ql3' AND pg_get_userbyid(nspowner) <> 'ql3_owner'")
        .fetch_all(pool).await.unwrap().iter().map(|r| r.get::<String, _>(0)).collect();
    assert!(
        foreign_owned.is_empty(),
        "not owned by ql3_owner: {foreign_owned:?}"
    );
    let row = sqlx::query(
        "SELECT (SELECT COUNT(*) FROM pg_class WHERE relowner = r.oid) + (SELECT COUNT(*) FROM pg_proc WHERE proowner = r.oid)
              + (SELECT COUNT(*) FROM pg_namespace WHERE nspowner = r.oid) + (SELECT COUNT(*) FROM pg_type WHERE typowner = r.oid),
                pg_has_role(r.oid, 'ql3_owner', 'MEMBER'),
                (SELECT COUNT(*) FROM pg_auth_members m WHERE m.member = r.oid)
         FROM pg_roles r WHERE r.rolname = 'login_executor'")
        .fetch_one(pool).await.unwrap();
    assert_eq!(row.get::<i64, _>(0), 0, "the executor login owns nothing");
    assert!(
        !row.get::<bool, _>(1),
        "the executor login is not a member of ql3_owner"
    );
    assert_eq!(row.get::<i64, _>(2), 1, "member of exactly one role");
    // Default privileges revoke EXECUTE from PUBLIC for future functions of ql3_owner.
    let defaults: i64 = sqlx::query("SELECT COUNT(*) FROM pg_default_acl d WHERE pg_get_userbyid(d.defaclrole) = 'ql3_owner' AND d.defaclobjtype = 'f'")
        .fetch_one(pool).await.unwrap().get(0);
    assert_eq!(defaults, 1);
    let no_role_creates: Vec<String> = sqlx::query(
        "SELECT r.rolname || ' on ' || s.nspname FROM pg_roles r CROSS JOIN pg_namespace s
         WHERE r.rolname LIKE 'ql3\\_%' AND r.rolname <> 'ql3_owner' AND s.nspname IN ('ql3', 'public')
           AND has_schema_privilege(r.oid, s.oid, 'CREATE')")
        .fetch_all(pool).await.unwrap().iter().map(|r| r.get::<String, _>(0)).collect();
    assert!(no_role_creates.is_empty(), "{no_role_creates:?}");
}

async fn consumer_reads(conn: &mut PgConnection, project: &str) -> Vec<(String, String)> {
    sqlx::query("SELECT snapshot_digest, convert_from(canonical_json, 'UTF8') FROM ql3.current_tool_snapshot($1)")
        .bind(project)
        .fetch_all(conn)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_sees_only_the_current_snapshot_of_the_asked_project() {
    let url = pg::fresh_db().await;
    let admin = connect(&url).await;
    import(&admin, DEMO).await;
    let d1 = digest_of(&publish(&admin, "demo-1").await);
    let d2 = digest_of(&publish(&admin, "demo-2").await);
    let mut consumer = PgConnection::connect(&pg::as_login(&url, "login_consumer"))
        .await
        .unwrap();
    let one = consumer_reads(&mut consumer, "demo-1").await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].0, d1);
    assert!(one[0].1.contains("\"projectId\":\"demo-1\"") && !one[0].1.contains("demo-2"));
    assert_eq!(consumer_reads(&mut consumer, "demo-2").await[0].0, d2);
    assert!(
        consumer_reads(&mut consumer, "no-such-project")
            .await
            .is_empty()
    );
    assert!(
        consumer_reads(&mut consumer, "demo-rejected")
            .await
            .is_empty()
    );
    // No table access for the consumer.
    let e = sqlx::query("SELECT * FROM ql3.tool_definition_snapshots")
        .fetch_all(&mut consumer)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("permission denied"), "{e}");

    // pg_temp shadowing: objects named like the function's tables, in the caller's temporary
    // schema, change nothing.
    sqlx::query("CREATE TEMP TABLE tool_definition_snapshots (snapshot_id bigint, project_id text, snapshot_digest text)").execute(&mut consumer).await.unwrap();
    sqlx::query("CREATE TEMP TABLE package_installations (installation_id text, project_id text, package_name text, active_generation bigint)").execute(&mut consumer).await.unwrap();
    sqlx::query("CREATE TEMP TABLE projects (project_id text)")
        .execute(&mut consumer)
        .await
        .unwrap();
    sqlx::query("SET search_path = pg_temp, public")
        .execute(&mut consumer)
        .await
        .unwrap();
    assert_eq!(consumer_reads(&mut consumer, "demo-1").await, one);

    // Current only while current: the next activation hides it at once.
    package_executor::sources::activate(&admin, "demo-1-github", 3)
        .await
        .unwrap();
    assert!(
        consumer_reads(&mut consumer, "demo-1").await.is_empty(),
        "never a stale snapshot"
    );
    let d3 = digest_of(&publish(&admin, "demo-1").await);
    assert_eq!(consumer_reads(&mut consumer, "demo-1").await[0].0, d3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_run_as_the_executor_login() {
    let url = pg::fresh_db().await;
    let admin = connect(&url).await;
    import(&admin, DEMO).await;
    let exec_url = pg::as_login(&url, "login_executor");
    let out = succeeds(exe(&exec_url, "5s").args(["run", "--json"])).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["published"], 3);
    assert_eq!(v["rejected"]["forbidden-field"], 1);
    // The executor cannot migrate (it owns nothing and may not create).
    let out = exe(&exec_url, "5s")
        .args(["migrate"])
        .output()
        .await
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    for verb in [
        ["verify"].as_slice(),
        &["current", "demo-1"],
        &["explain", "demo-1"],
    ] {
        let out = exe(&exec_url, "5s").args(verb).output().await.unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{verb:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_migrate_names_missing_roles() {
    // A cluster of its own, where the roles do not exist yet.
    let dir = std::env::temp_dir().join(format!("pe-roles-{}", std::process::id()));
    let cluster = pg::PgCluster::start_in(dir, "");
    let url = cluster.url("postgres");
    let out = exe(&url, "5s").args(["migrate"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ql3_owner") && err.contains("ql3_api") && err.contains("--create-roles"),
        "{err}"
    );
    succeeds(exe(&url, "5s").args(["migrate", "--create-roles"])).await;
    cluster.stop("fast");
}

/// The server's major version, from `server_version_num`.
async fn major(conn: &mut PgConnection) -> i32 {
    let num: String = sqlx::query_scalar("SHOW server_version_num")
        .fetch_one(conn)
        .await
        .unwrap();
    num.parse::<i32>().unwrap() / 10000
}

/// The production setup script (`docs/setup.sql`, the one the operations guide gives), run by a non-superuser admin with CREATEROLE that owns
/// the database (what a managed service hands out), works on this major; then migrate, import,
/// run and read through the logins it made. Where PostgreSQL 15 and 16+ differ (CREATEROLE
/// administers only the roles it created, without SET or INHERIT), and where 17 added the
/// MAINTAIN privilege, the expectations for each are stated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setup_sql_works_for_a_createrole_admin() {
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/setup.sql")).unwrap();
    let script = script.as_str();

    let dir = std::env::temp_dir().join(format!("pe-roles-admin-{}", std::process::id()));
    let cluster = pg::PgCluster::start_in(dir, "");
    let mut su = PgConnection::connect(&cluster.url("postgres"))
        .await
        .unwrap();
    let major = major(&mut su).await;
    eprintln!("roles: PostgreSQL major {major}");
    for sql in [
        "CREATE ROLE dba LOGIN CREATEROLE",
        "CREATE DATABASE app OWNER dba",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut su)
            .await
            .unwrap();
    }
    // migrate --create-roles needs more than CREATEROLE: the admin is no member of ql3_owner.
    let app_as = |login: &str| cluster.url_as(login, "app");
    let out = exe(&app_as("dba"), "5s")
        .args(["migrate", "--create-roles"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut dba = PgConnection::connect(&app_as("dba")).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(script.to_owned()))
        .execute(&mut dba)
        .await
        .unwrap_or_else(|e| panic!("docs/setup.sql on PostgreSQL {major}: {e}"));

    // CREATEROLE rules. 15: the admin is no member of the roles it made. 16+: it holds ADMIN
    // OPTION on each, but neither SET nor INHERIT (createrole_self_grant is empty by default).
    if major >= 16 {
        let row = sqlx::query(
            "SELECT m.admin_option, m.inherit_option, m.set_option FROM pg_auth_members m
             WHERE m.roleid = 'ql3_owner'::regrole AND m.member = 'dba'::regrole",
        )
        .fetch_one(&mut su)
        .await
        .unwrap();
        assert_eq!(
            (
                row.get::<bool, _>(0),
                row.get::<bool, _>(1),
                row.get::<bool, _>(2)
            ),
            (true, false, false),
            "16+: ADMIN OPTION only"
        );
    } else {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_auth_members WHERE roleid = 'ql3_owner'::regrole AND member = 'dba'::regrole",
        )
        .fetch_one(&mut su)
        .await
        .unwrap();
        assert_eq!(n, 0, "15: the creator is no member");
    }
    // Either way the admin cannot act as the owner without granting itself the role.
    assert_eq!(attempt(&mut dba, "SET ROLE ql3_owner").await, "42501");

    for login in [
        "pe_migrator",
        "pe_executor",
        "control_plane",
        "tool_consumer",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER ROLE {login} PASSWORD NULL"
        )))
        .execute(&mut su)
        .await
        .unwrap();
    }
    succeeds(exe(&app_as("pe_migrator"), "5s").arg("migrate")).await;
    let fixture = package_executor_testkit::db::DEMO_PATH;
    succeeds(exe(&app_as("control_plane"), "5s").args(["sources", "import", fixture])).await;
    let out = succeeds(exe(&app_as("pe_executor"), "5s").args(["run", "--json"])).await;
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["published"], 3, "{summary}");
    let mut consumer = PgConnection::connect(&app_as("tool_consumer"))
        .await
        .unwrap();
    assert_eq!(consumer_reads(&mut consumer, "demo-1").await.len(), 1);
    let setting: Option<String> = sqlx::query_scalar("SELECT current_setting('statement_timeout')")
        .fetch_optional(&mut consumer)
        .await
        .unwrap();
    assert_eq!(setting.as_deref(), Some("5s"), "login settings apply");

    // MAINTAIN (17+): nobody but the owner may VACUUM, ANALYZE, REINDEX or LOCK the tables.
    let mut app = PgConnection::connect(&cluster.url("app")).await.unwrap();
    let check = "SELECT COUNT(*) FROM pg_roles r CROSS JOIN pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'ql3' AND c.relkind = 'r' AND r.rolname IN
                   ('pe_executor', 'control_plane', 'tool_consumer', 'ql3_package_executor', 'ql3_control_plane', 'ql3_tool_consumer', 'ql3_worker', 'ql3_api')
                   AND has_table_privilege(r.oid, c.oid, 'MAINTAIN')";
    let maintain = sqlx::query_scalar::<_, i64>(check)
        .fetch_one(&mut app)
        .await;
    if major >= 17 {
        assert_eq!(maintain.unwrap(), 0, "17+: MAINTAIN stays with the owner");
        let owner_may: bool = sqlx::query_scalar(
            "SELECT has_table_privilege('ql3_owner', 'ql3.tool_definition_snapshots', 'MAINTAIN')",
        )
        .fetch_one(&mut app)
        .await
        .unwrap();
        assert!(owner_may);
    } else {
        let err = maintain.expect_err("15 and 16 have no MAINTAIN privilege");
        assert!(
            err.to_string().contains("unrecognized privilege type"),
            "{err}"
        );
    }
    cluster.stop("fast");
}

/// `verify --json` finds nothing on a clean database, and names the project, the snapshot and
/// the problem after the owner tampered with a stored document behind disabled triggers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_json_reports_a_snapshot_tampered_by_the_owner() {
    let url = pg::fresh_db().await;
    let admin = connect(&url).await;
    import(&admin, DEMO).await;
    let exec_url = pg::as_login(&url, "login_executor");
    succeeds(exe(&exec_url, "5s").args(["run"])).await;
    let out = succeeds(exe(&exec_url, "5s").args(["verify", "--json"])).await;
    let clean: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(clean["schema"], "package-executor/verify@v1");
    assert_eq!(clean["checked"], 3);
    assert_eq!(clean["problems"], serde_json::json!([]));

    let mut owner = PgConnection::connect(&pg::as_login(&url, "login_owner"))
        .await
        .unwrap();
    for sql in [
        "SET ROLE ql3_owner",
        "ALTER TABLE ql3.tool_definition_snapshots DISABLE TRIGGER USER",
        "UPDATE ql3.tool_definition_snapshots SET canonical_json = convert_to(replace(convert_from(canonical_json, 'UTF8'), 'demo-1', 'demo-X'), 'UTF8') WHERE project_id = 'demo-1'",
        "ALTER TABLE ql3.tool_definition_snapshots ENABLE ALWAYS TRIGGER tool_definition_snapshots_append_only",
        "ALTER TABLE ql3.tool_definition_snapshots ENABLE ALWAYS TRIGGER tool_definition_snapshots_no_truncate",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut owner)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let out = exe(&exec_url, "5s")
        .args(["verify", "--json"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["checked"], 3);
    let problems = report["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    for p in problems {
        assert_eq!(p["projectId"], "demo-1");
        assert!(p["snapshotDigest"].as_str().unwrap().starts_with("sha256:"));
        assert!(!p["problem"].as_str().unwrap().is_empty());
    }
}
