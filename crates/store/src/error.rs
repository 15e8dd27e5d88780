//! Storage errors, classified by what the caller can do about them.

use sqlx::postgres::PgDatabaseError;

/// What to check when a server gives no answer or cannot be reached.
pub(crate) const CHECK_SERVER: &str = "check DATABASE_URL and that the server is up";

/// What went wrong with the database, sorted by what can be done about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The server cannot be reached, or the SQLite file cannot be opened (exit 8). The text
    /// says what to check.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The schema is missing or old (exit 8).
    #[error("the database is not migrated: {0}; run `package-executor migrate` first")]
    NotMigrated(String),
    /// The schema was migrated by a newer release than this build (exit 8): a build older
    /// than the schema writes nothing, since the newer schema may refuse or misread what it
    /// writes.
    #[error(
        "the database's schema is version {found}, newer than this build's {known}: it was \
         migrated by a newer release of package-executor; run the image of the release that \
         migrated it (when upgrading, let the Jobs of the older release finish before `migrate`)"
    )]
    NewerSchema {
        /// The schema's version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// Worth retrying: serialization failure, deadlock, a lost connection, a busy SQLite file.
    #[error("transient database error: {0}")]
    Transient(String),
    /// Wrong configuration: a bad URL, missing roles, missing privileges (exit 1).
    #[error("{0}")]
    Config(String),
    /// Bad input from a person: a fixture, an unknown project, a refused transition (exit 1).
    #[error("{0}")]
    Input(String),
    /// The database said nothing for this long (see `Store::answer_timeout`); the connection
    /// was given up (exit 8 when it ends a command).
    #[error(
        "no answer from the database within {0:?}: the server or the network path to it is gone; \
         the connection was given up (check the server, and the network between it and this pod)"
    )]
    NoAnswer(std::time::Duration),
    /// A `COMMIT` was not acknowledged within the statement timeout. PostgreSQL's
    /// `statement_timeout` does not end a commit that waits for a synchronous standby, so the
    /// wait is bounded here: whether the transaction commits later is unknown, and nothing is
    /// reported published (the next run replays it, or finds it done). Exit 8 when it ends a
    /// command.
    #[error(
        "the COMMIT was not acknowledged within {0:?} (the statement timeout): a synchronous \
         standby the primary waits for may be gone, or the primary lost its connection to it; \
         nothing was reported published and the next run replays it (check the standbys and \
         synchronous_standby_names, or Patroni's cluster state)"
    )]
    CommitUnacknowledged(std::time::Duration),
    /// The database refused the data itself: a format `CHECK`, a foreign key, a `NOT NULL`, a
    /// trigger's refusal, a value of the wrong type (exit 1). Writing it again will not help;
    /// the data must change. A unique key is not here on PostgreSQL: there a duplicate key is
    /// usually a concurrent twin, and [`StoreError::Duplicate`] says so.
    #[error("the database refused the data: {0}")]
    Refused(String),
    /// A unique key refused a row (PostgreSQL's `23505`): retried like a transient error,
    /// because a concurrent replica or import writing the same row is the usual cause (exit 8
    /// when it ends a command). A writer that knows the row is its own, like `sources import`
    /// after it compared what is stored, may treat it as a refusal.
    #[error("transient database error: {0}")]
    Duplicate(String),
    /// The database itself is damaged (a SQLite file whose pages do not hold together): no
    /// retry heals it, and every command says so with exit 1.
    #[error("the database is damaged: {0}")]
    Damaged(String),
    /// Anything else the database refused (exit 1).
    #[error("database error: {0}")]
    Other(String),
}

impl StoreError {
    /// Classifies a connection failure: anything there means the database is unavailable.
    /// A TLS failure also says which check failed and what to change.
    pub(crate) fn from_connect(e: sqlx::Error) -> Self {
        let (code, message) = match &e {
            sqlx::Error::Database(db) => {
                (db.code().map(|c| c.into_owned()), db.message().to_owned())
            }
            _ => (None, String::new()),
        };
        // A mistake in the login, the database name or the TLS settings is the
        // configuration's: no retry with the same Secret heals it, so it exits 1 at once rather
        // than 8 (which Kubernetes retries until the backoff limit).
        let login = matches!(code.as_deref(), Some("28P01" | "28000" | "3D000"));
        if code.as_deref() == Some("53300") {
            return StoreError::Unavailable(format!(
                "53300: {message}; the server has no connection slot left for this login (its \
                 max_connections, or the role's CONNECTION LIMIT): lower --concurrency or the \
                 number of replicas, raise the limit, or put a pooler in front"
            ));
        }
        match StoreError::from(e) {
            StoreError::Transient(m) | StoreError::Other(m) => match super::tls::hint(&m) {
                Some(hint) if login || super::tls::is_configuration(&m) => {
                    StoreError::Config(format!("{m} ({hint})"))
                }
                Some(hint) => StoreError::Unavailable(format!("{m} ({hint})")),
                None if login => StoreError::Config(format!(
                    "{m}; {}",
                    login_step(code.as_deref().unwrap_or_default())
                )),
                None => StoreError::Unavailable(format!("{m}; {CHECK_SERVER}")),
            },
            other => other,
        }
    }

    /// Classifies a failure to open a SQLite file: the file cannot be used (exit 8).
    pub(crate) fn from_sqlite_open(e: sqlx::Error) -> Self {
        match StoreError::from(e) {
            StoreError::Transient(m) | StoreError::Other(m) | StoreError::Refused(m) => {
                StoreError::Unavailable(format!(
                    "{m}; check DATABASE_URL: the SQLite file's directory must exist, and this \
                     process must be able to write to it"
                ))
            }
            other => other,
        }
    }

    /// Whether another attempt may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Transient(_)
                | StoreError::Duplicate(_)
                | StoreError::Unavailable(_)
                | StoreError::NoAnswer(_)
                | StoreError::CommitUnacknowledged(_)
        )
    }

    /// Whether no retry heals it and no further project can succeed: the configuration (a
    /// login without its grants, a file that cannot be written) or the database file itself
    /// (damaged). A run stops at the first such error and exits 1, as every other command does,
    /// rather than spend every project's attempts on it and exit 8, which a Job retries.
    pub fn is_fatal(&self) -> bool {
        matches!(self, StoreError::Config(_) | StoreError::Damaged(_))
    }

    /// Whether the database cannot be used at all (unreachable or not migrated): exit 8.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::NotMigrated(_)
                | StoreError::NewerSchema { .. }
                | StoreError::NoAnswer(_)
                | StoreError::CommitUnacknowledged(_)
        )
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                let message = db.message().to_owned();
                let postgres = db.try_downcast_ref::<PgDatabaseError>().is_some();
                match code.as_str() {
                    // serialization_failure, deadlock_detected, lock_not_available,
                    // query_canceled (timeouts), admin shutdown, cannot_connect_now, and every
                    // connection exception (class 08). read_only_sql_transaction (25006): the
                    // session landed on a server that is (or has just become) a standby, as a
                    // proxy routing to a demoted primary can do during a failover; the next
                    // connection finds the new primary.
                    "40001" | "40P01" | "55P03" | "57014" | "57P01" | "57P02" | "57P03"
                    | "25P03" | "25006" => StoreError::Transient(format!("{code}: {message}")),
                    "23505" => StoreError::Duplicate(format!("{code}: {message}")),
                    c if c.starts_with("08") => StoreError::Transient(format!("{code}: {message}")),
                    // undefined_table, invalid_schema_name, undefined_function.
                    "42P01" | "3F000" | "42883" => StoreError::NotMigrated(message),
                    "42501" => StoreError::Config(format!(
                        "permission denied: {message}; the login lacks a grant it needs (docs/contract.md, section 8: \
                         is it a member of the right ql3_* role?)"
                    )),
                    // SQLite: BUSY, LOCKED and their extended codes.
                    "5" | "6" | "261" | "262" | "517" | "773" => {
                        StoreError::Transient(format!("SQLite {code}: {message}"))
                    }
                    _ if message.starts_with("no such table") => StoreError::NotMigrated(message),
                    // SQLite: READONLY, CANTOPEN and NOTADB with their extended codes. No retry
                    // heals them: the file, its directory or the URL must change (exit 1).
                    "8" | "264" | "520" | "776" | "1032" | "1288" | "1544" if !postgres => {
                        StoreError::Config(format!(
                            "SQLite {code}: {message}; the SQLite file or its directory is \
                             read-only for this process: make both writable (SQLite writes \
                             -wal and -shm files beside the database)"
                        ))
                    }
                    "14" | "270" | "526" | "782" | "1038" | "1294" | "1550" if !postgres => {
                        StoreError::Config(format!(
                            "SQLite {code}: {message}; check DATABASE_URL: the file's directory \
                             must exist and be writable by this process"
                        ))
                    }
                    // SQLite: CORRUPT and its extended codes (CORRUPT_VTAB, _SEQUENCE, _INDEX).
                    "11" | "267" | "523" | "779" if !postgres => StoreError::Damaged(format!(
                        "SQLite {code}: {message}; the SQLite file is damaged: restore it from a \
                         backup, or move it aside and rebuild it (`package-executor migrate`, \
                         then import the sources again)"
                    )),
                    "26" if !postgres => StoreError::Config(format!(
                        "SQLite {code}: {message}; DATABASE_URL names a file that is not a SQLite \
                         database: point it at package-executor's own file"
                    )),
                    c if refuses_the_data(c, postgres) => {
                        StoreError::Refused(format!("{code}: {message}"))
                    }
                    c => StoreError::Other(match (c, next_step(c, postgres)) {
                        ("", _) => message,
                        (_, Some(step)) => format!("{code}: {message}; {step}"),
                        (_, None) => format!("{code}: {message}"),
                    }),
                }
            }
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => StoreError::Transient(e.to_string()),
            _ => StoreError::Other(e.to_string()),
        }
    }
}

/// What to do about a refused login (`28P01`, `28000`) or a database that does not exist
/// (`3D000`).
fn login_step(code: &str) -> &'static str {
    match code {
        "28P01" => {
            "the server refused the login's password: check the user and password in DATABASE_URL \
             (the Secret), and the login's password on the server"
        }
        "28000" => {
            "the server refused this login: check that the role exists and may log in, and that \
             pg_hba.conf has an entry for it from this host with this method (cert logins: the \
             certificate's common name is the user name)"
        }
        _ => "the database in DATABASE_URL does not exist: correct the URL, or create the database",
    }
}

/// Whether an error code says the data itself was refused: PostgreSQL's data exceptions
/// (class 22), integrity violations (class 23; `23505` is classified before this) and trigger
/// refusals (`P0001`); SQLite's `SQLITE_CONSTRAINT` (19) with any extended code (a `CHECK`, a
/// key, a foreign key, `NOT NULL`, a trigger's `RAISE`, a `STRICT` column's type).
fn refuses_the_data(code: &str, postgres: bool) -> bool {
    if postgres {
        code.starts_with("22") || code.starts_with("23") || code == "P0001"
    } else {
        sqlite_primary(code) == Some(19)
    }
}

/// SQLite's primary result code: the low byte of an extended one (`None` for anything else).
fn sqlite_primary(code: &str) -> Option<u32> {
    code.parse::<u32>().ok().map(|c| c & 0xff)
}

/// What a person should do about a failure that is neither the data's fault nor worth an
/// immediate retry: the database's storage or memory, seen from either dialect.
fn next_step(code: &str, postgres: bool) -> Option<&'static str> {
    const DISK_FULL: &str =
        "the database's disk is full: free space on it or grow its volume, then run again";
    const NO_MEMORY: &str =
        "the database ran out of memory: give it more (or this pod, for SQLite), then run again";
    if postgres {
        return match code {
            "53100" => Some(DISK_FULL),
            "53200" => Some(NO_MEMORY),
            "58030" => Some("an I/O error on the database server: check its disks and its log"),
            _ => None,
        };
    }
    match sqlite_primary(code)? {
        13 => Some(DISK_FULL),
        7 => Some(NO_MEMORY),
        8 => Some(
            "the SQLite file (or its directory) is read-only to this process: check the volume's \
             mount options and the file's owner and mode",
        ),
        10 => Some("an I/O error on the SQLite file: check the volume it lives on"),
        11 | 26 => {
            Some("the SQLite file is damaged or is not a database: restore it from a backup")
        }
        _ => None,
    }
}

/// Bad input: a message that names what to fix.
pub(crate) fn input(msg: impl Into<String>) -> StoreError {
    StoreError::Input(msg.into())
}

impl From<package_executor_core::fixture::FixtureError> for StoreError {
    /// A fixture that is not what contract section 11 describes is bad input.
    fn from(e: package_executor_core::fixture::FixtureError) -> Self {
        Self::Input(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::{next_step, refuses_the_data};

    #[test]
    fn storage_failures_say_what_to_do() {
        assert!(next_step("53100", true).is_some_and(|s| s.contains("disk is full")));
        assert!(next_step("13", false).is_some_and(|s| s.contains("disk is full")));
        // SQLITE_READONLY_DBMOVED (1032) is a read-only file too.
        assert!(next_step("1032", false).is_some_and(|s| s.contains("read-only")));
        assert!(next_step("2314", false).is_some_and(|s| s.contains("I/O error")));
        // A PostgreSQL code is not read as a SQLite number, nor the other way round.
        assert_eq!(next_step("13", true), None);
        assert_eq!(next_step("53100", false), None);
        assert_eq!(next_step("XX000", true), None);
    }

    #[test]
    fn refusals_are_told_from_failures_by_code_and_dialect() {
        // PostgreSQL: check, foreign key, not null, bad input, a trigger's RAISE.
        for code in ["23514", "23503", "23502", "22P02", "22001", "P0001"] {
            assert!(refuses_the_data(code, true), "{code}");
        }
        // PostgreSQL: a full disk, an I/O error, out of memory, a deadlock are not the data's fault.
        for code in ["53100", "58030", "53200", "40P01", "XX000"] {
            assert!(!refuses_the_data(code, true), "{code}");
        }
        // SQLite: CHECK, UNIQUE, FOREIGN KEY, NOT NULL, a trigger's RAISE, a STRICT type.
        for code in ["19", "275", "2067", "787", "1299", "1811", "3091"] {
            assert!(refuses_the_data(code, false), "{code}");
        }
        // SQLite: FULL, IOERR_TRUNCATE (2314, which looks like a PostgreSQL class-23 code),
        // IOERR_WRITE, a plain error, CORRUPT.
        for code in ["13", "2314", "778", "1", "11"] {
            assert!(!refuses_the_data(code, false), "{code}");
        }
    }
}
