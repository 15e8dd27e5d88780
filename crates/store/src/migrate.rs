//! Embedded migrations, one folder per dialect, applied in order in one transaction.
//!
//! The bookkeeping table lives in `ql3` (PostgreSQL) beside what it describes, and every
//! PostgreSQL object is created under `SET LOCAL ROLE ql3_owner` so that role owns it all.

use sqlx::{AssertSqlSafe, Row};

use super::{Dialect, Store, StoreError};
use package_executor_core::model::Digest;

/// One migration, compiled in from `crates/store/migrations/{postgres,sqlite}/`: applied in
/// `version` order, recorded by `name` with a checksum of `sql`, never edited once released.
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)] // said above
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

macro_rules! migration {
    ($dir:literal, $version:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../migrations/", $dir, "/", $name)),
        }
    };
}

/// PostgreSQL migrations: this release's, and one more with the `next-schema` feature.
pub const POSTGRES: &[Migration] = if cfg!(feature = "next-schema") {
    POSTGRES_AND_NEXT
} else {
    POSTGRES_AND_NEXT.split_at(POSTGRES_AND_NEXT.len() - 1).0
};

/// Every PostgreSQL migration, the last one a build with the `next-schema` feature's only: a
/// migration that changes nothing but the version, so that the end-to-end tier can upgrade a
/// release to a build one migration ahead and watch the older build's Jobs meet the newer
/// schema (they stop with exit 8; a rollback onto it is refused).
const POSTGRES_AND_NEXT: &[Migration] = &[
    migration!("postgres", 1, "0001_source_tables.sql"),
    migration!("postgres", 2, "0002_snapshot_tables.sql"),
    migration!("postgres", 3, "0003_current_proof.sql"),
    migration!("postgres", 4, "0004_grants.sql"),
    migration!("postgres", 5, "0005_inline_current_proof.sql"),
    migration!("postgres", 6, "0006_cheaper_format_checks.sql"),
    migration!("postgres", 7, "0007_snapshot_compression.sql"),
    migration!("postgres", 8, "0008_pending_index.sql"),
    migration!("postgres", 9, "0009_revision_slices.sql"),
    migration!("postgres", 10, "0010_proof_lookups.sql"),
    migration!("postgres", 11, "0011_trust_boundaries.sql"),
    migration!("postgres", 12, "0012_source_key.sql"),
    migration!("postgres", 13, "0013_cheaper_checks.sql"),
    migration!("postgres", 14, "0014_checks_per_statement.sql"),
    migration!("postgres", 15, "0015_clear_marks_per_batch.sql"),
    migration!("postgres", 16, "0016_marks_cleared_without_waiting.sql"),
    migration!("postgres", 17, "0017_permission_limits.sql"),
    migration!("postgres", 18, "0018_next_schema.sql"),
];

/// SQLite migrations.
pub const SQLITE: &[Migration] = &[
    migration!("sqlite", 1, "0001_source_tables.sql"),
    migration!("sqlite", 2, "0002_snapshot_tables.sql"),
    migration!("sqlite", 3, "0003_pending_index.sql"),
    migration!("sqlite", 4, "0004_permissions_trigger.sql"),
    migration!("sqlite", 5, "0005_generation_ledger.sql"),
    migration!("sqlite", 6, "0006_source_key.sql"),
    migration!("sqlite", 7, "0007_no_nul_bytes.sql"),
    migration!("sqlite", 8, "0008_permission_limits.sql"),
];

/// The six group roles of contract section 8.
pub const ROLES: [&str; 6] = [
    "ql3_owner",
    "ql3_control_plane",
    "ql3_package_executor",
    "ql3_tool_consumer",
    "ql3_worker",
    "ql3_api",
];

/// Class of the advisory lock that serialises concurrent `migrate` runs on a database that has
/// no bookkeeping table yet (any login can take an advisory lock, so once the table exists the
/// lock is the table's own: see [`MIGRATE_TABLE_LOCK`]).
const MIGRATE_LOCK: (i32, i32) = (0x716C33, -1);

/// The lock that serialises `migrate` runs once the schema exists: the bookkeeping table in a
/// self-conflicting mode that only its owner (`ql3_owner`'s members) and superusers can take,
/// since taking it needs UPDATE, DELETE or TRUNCATE on the table, and every other role has no
/// privilege on it at all. No runtime login can hold it, nor any lock that conflicts with it.
const MIGRATE_TABLE_LOCK: &str = "LOCK TABLE ql3.schema_migrations IN SHARE ROW EXCLUSIVE MODE";

/// What `migrate` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Roles created (with `--create-roles`).
    pub created_roles: Vec<String>,
    /// Migrations applied now, by name.
    pub applied: Vec<String>,
}

fn checksum(m: &Migration) -> String {
    Digest::of(m.sql.as_bytes()).as_str().to_owned()
}

impl Store {
    /// The migrations of this store's dialect.
    pub fn migrations(&self) -> &'static [Migration] {
        match self.dialect() {
            Dialect::Postgres => POSTGRES,
            Dialect::Sqlite => SQLITE,
        }
    }

    /// Applies pending migrations up to `upto` (all when `None`), in one transaction.
    pub async fn migrate(
        &self,
        create_roles: bool,
        upto: Option<i64>,
    ) -> Result<MigrateReport, StoreError> {
        let mut report = MigrateReport::default();
        let wanted: Vec<&Migration> = self
            .migrations()
            .iter()
            .filter(|m| upto.is_none_or(|u| m.version <= u))
            .collect();
        if let Some(pool) = self.pg_pool() {
            let mut tx = pool.begin().await?;
            let pid: i32 = sqlx::query_scalar("SELECT pg_catalog.pg_backend_pid()")
                .fetch_one(&mut *tx)
                .await?;
            let watcher = HolderWatch::start(&pool, pid);
            let result: Result<(), StoreError> = async {
            let has_table: bool = sqlx::query_scalar(
                "SELECT pg_catalog.to_regclass('ql3.schema_migrations') IS NOT NULL",
            )
            .fetch_one(&mut *tx)
            .await?;
            if has_table {
                sqlx::query(MIGRATE_TABLE_LOCK).execute(&mut *tx).await?;
            } else {
                sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
                    .bind(MIGRATE_LOCK.0)
                    .bind(MIGRATE_LOCK.1)
                    .execute(&mut *tx)
                    .await?;
            }
            let rows =
                sqlx::query("SELECT rolname FROM pg_catalog.pg_roles WHERE rolname = ANY($1)")
                    .bind(ROLES.map(str::to_owned).to_vec())
                    .fetch_all(&mut *tx)
                    .await?;
            let present: Vec<String> = rows
                .iter()
                .map(|r| r.try_get::<String, _>("rolname"))
                .collect::<Result<_, _>>()?;
            let missing: Vec<&str> = ROLES
                .into_iter()
                .filter(|r| !present.iter().any(|p| p == r))
                .collect();
            if !missing.is_empty() && !create_roles {
                return Err(StoreError::Config(format!(
                    "missing PostgreSQL roles: {}; create them with `package-executor migrate \
                     --create-roles` (needs CREATEROLE) or ask your DBA (docs/setup.sql; docs/operations.md, \"Database logins\")",
                    missing.join(", ")
                )));
            }
            for role in missing {
                sqlx::query(AssertSqlSafe(format!("CREATE ROLE {role} NOLOGIN")))
                    .execute(&mut *tx)
                    .await?;
                report.created_roles.push(role.to_owned());
            }
            sqlx::query("CREATE SCHEMA IF NOT EXISTS ql3 AUTHORIZATION ql3_owner")
                .execute(&mut *tx)
                .await?;
            sqlx::query("SET LOCAL ROLE ql3_owner")
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS ql3.schema_migrations (version bigint PRIMARY KEY, \
                 name text NOT NULL, checksum text NOT NULL, \
                 applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query("REVOKE ALL ON ql3.schema_migrations FROM PUBLIC")
                .execute(&mut *tx)
                .await?;
            let applied = sqlx::query("SELECT version, checksum FROM ql3.schema_migrations")
                .fetch_all(&mut *tx)
                .await?;
            let applied = versions(&applied)?;
            refuse_newer(&applied, self.migrations())?;
            let mut top = applied.iter().map(|(v, _)| *v).max().unwrap_or(0);
            for m in wanted {
                if check_applied(m, &applied)? {
                    continue;
                }
                top = top.max(m.version);
                sqlx::raw_sql(m.sql)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| migration_error(m, e))?;
                sqlx::query("INSERT INTO ql3.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)")
                    .bind(m.version)
                    .bind(m.name)
                    .bind(checksum(m))
                    .execute(&mut *tx)
                    .await?;
                report.applied.push(m.name.to_owned());
            }
            // The version is also kept where every login can read it (runtime logins have no
            // access to the bookkeeping table).
            sqlx::query(AssertSqlSafe(format!(
                "COMMENT ON SCHEMA ql3 IS 'package-executor schema version {top}'"
            )))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
            }
            .await;
            let holders = watcher.stop();
            result.map_err(|e| naming_holders(e, holders))?;
        } else if let Some(pool) = self.sqlite_pool() {
            let mut conn = pool.acquire().await?;
            sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
            let result: Result<(), StoreError> = async {
                sqlx::query(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, \
                     name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL \
                     DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))) STRICT",
                )
                .execute(&mut *conn)
                .await?;
                let applied = sqlx::query("SELECT version, checksum FROM schema_migrations")
                    .fetch_all(&mut *conn)
                    .await?;
                let applied = versions(&applied)?;
                refuse_newer(&applied, self.migrations())?;
                for m in wanted {
                    if check_applied(m, &applied)? {
                        continue;
                    }
                    sqlx::raw_sql(m.sql).execute(&mut *conn).await.map_err(|e| migration_error(m, e))?;
                    sqlx::query("INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)")
                        .bind(m.version)
                        .bind(m.name)
                        .bind(checksum(m))
                        .execute(&mut *conn)
                        .await?;
                    report.applied.push(m.name.to_owned());
                }
                Ok(())
            }
            .await;
            match result {
                Ok(()) => {
                    sqlx::query("COMMIT").execute(&mut *conn).await?;
                    // Move the schema from the write-ahead log into the database file, so that
                    // the file alone (copied, mounted elsewhere, backed up) is the migrated
                    // database. A reader holding an old snapshot can keep part of the log
                    // back; then the log keeps it, as SQLite always does.
                    if !report.applied.is_empty() {
                        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                            .execute(&mut *conn)
                            .await?;
                    }
                }
                Err(e) => {
                    sqlx::query("ROLLBACK").execute(&mut *conn).await?;
                    return Err(e);
                }
            }
        }
        Ok(report)
    }

    /// Fails with [`StoreError::NotMigrated`] unless every migration of this build is applied.
    pub async fn check_migrated(&self) -> Result<(), StoreError> {
        let v: i64 = match (self.pg_pool(), self.sqlite_pool()) {
            // Runtime logins cannot read the bookkeeping table; the schema comment says the
            // version to everyone with USAGE.
            (Some(p), _) => {
                let comment: Option<String> =
                    sqlx::query("SELECT obj_description('ql3'::regnamespace, 'pg_namespace') AS c")
                        .fetch_one(&p)
                        .await?
                        .try_get("c")?;
                comment
                    .as_deref()
                    .and_then(|c| c.strip_prefix("package-executor schema version "))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            }
            (_, Some(p)) => {
                sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
                    .fetch_one(p)
                    .await?
                    .try_get("v")?
            }
            _ => 0,
        };
        let latest = self.migrations().last().map_or(0, |m| m.version);
        if v > latest {
            return Err(StoreError::NewerSchema {
                found: v,
                known: latest,
            });
        }
        if v < latest {
            return Err(StoreError::NotMigrated(format!(
                "schema version {v}, this build needs {latest}"
            )));
        }
        Ok(())
    }
}

/// A database migrated past this build's newest migration is a newer release's: refused.
fn refuse_newer(applied: &[(i64, String)], known: &[Migration]) -> Result<(), StoreError> {
    let found = applied.iter().map(|(v, _)| *v).max().unwrap_or(0);
    let known = known.last().map_or(0, |m| m.version);
    if found > known {
        return Err(StoreError::NewerSchema { found, known });
    }
    Ok(())
}

fn versions<R: Row>(rows: &[R]) -> Result<Vec<(i64, String)>, StoreError>
where
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    rows.iter()
        .map(|r| Ok((r.try_get("version")?, r.try_get("checksum")?)))
        .collect()
}

fn check_applied(m: &Migration, applied: &[(i64, String)]) -> Result<bool, StoreError> {
    match applied.iter().find(|(v, _)| *v == m.version) {
        None => Ok(false),
        Some((_, sum)) if *sum == checksum(m) => Ok(true),
        Some(_) => Err(StoreError::Config(format!(
            "migration {} was applied with different contents; migrations are immutable once \
             released, restore the original file",
            m.name
        ))),
    }
}

fn migration_error(m: &Migration, e: sqlx::Error) -> StoreError {
    match StoreError::from(e) {
        // A duplicate key here is the data's (migrations run one at a time), not a twin's.
        StoreError::Other(msg)
        | StoreError::Refused(msg)
        | StoreError::Duplicate(msg)
        | StoreError::Config(msg)
        | StoreError::NotMigrated(msg) => {
            StoreError::Other(format!("migration {} failed: {msg}", m.name))
        }
        other => other,
    }
}

/// Watches, from a connection of its own, which sessions block the migration's transaction
/// (`pg_blocking_pids`): a migration waits on locks (another `migrate`'s, or a table a long
/// transaction holds), and when the wait ends in a timeout the error names who held it.
struct HolderWatch {
    task: tokio::task::JoinHandle<()>,
    seen: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl HolderWatch {
    fn start(pool: &sqlx::PgPool, pid: i32) -> Self {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let options = (*pool.connect_options()).clone();
        let shared = std::sync::Arc::clone(&seen);
        let task = tokio::spawn(async move {
            use sqlx::Connection as _;
            // Watching is best effort: without a second connection nothing is named.
            let Ok(mut conn) = sqlx::PgConnection::connect_with(&options).await else {
                return;
            };
            loop {
                let holders: Result<Option<String>, _> = sqlx::query_scalar(
                    "SELECT string_agg(pg_catalog.format('pid %s (role %s, application %L)', \
                     a.pid, a.usename, a.application_name), ', ' ORDER BY a.pid) \
                     FROM pg_catalog.pg_stat_activity AS a \
                     WHERE a.pid = ANY (pg_catalog.pg_blocking_pids($1))",
                )
                .bind(pid)
                .fetch_one(&mut conn)
                .await;
                match holders {
                    Ok(Some(h)) => *shared.lock().unwrap_or_else(|p| p.into_inner()) = Some(h),
                    Ok(None) => {}
                    Err(_) => return,
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        });
        Self { task, seen }
    }

    /// Stops watching; the sessions that blocked the migration last, if any did.
    fn stop(self) -> Option<String> {
        self.task.abort();
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A failed migration's error, with the sessions that blocked it named and what to do.
fn naming_holders(e: StoreError, holders: Option<String>) -> StoreError {
    let Some(holders) = holders else { return e };
    let add = |m: String| {
        format!(
            "{m}; the migration waited on a lock held by {holders}: end that session (its owner, \
             or SELECT pg_terminate_backend(<pid>) as a superuser) and run migrate again"
        )
    };
    match e {
        StoreError::Transient(m) => StoreError::Transient(add(m)),
        StoreError::Other(m) => StoreError::Other(add(m)),
        StoreError::Unavailable(m) => StoreError::Unavailable(add(m)),
        StoreError::Refused(m) => StoreError::Refused(add(m)),
        other => other,
    }
}
