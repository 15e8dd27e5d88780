//! Durable truth: the source and snapshot tables of contract section 7 in PostgreSQL or SQLite,
//! behind one interface. [`Store`] holds the pool; [`Attempt`] is one connection and one READ
//! COMMITTED transaction, the unit of work of the coordinator.

mod attempt;
mod conninfo;
pub mod control;
mod database_url;
pub mod dialect;
mod error;
mod import;
pub mod migrate;
mod primary;
mod queries;
mod redact;
mod rows;
mod secrets;
pub mod sql;
mod sqlite_file;
mod tls;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions as _, PgPool, SqlitePool};

pub(crate) use attempt::on_conn;
pub use attempt::{
    Appending, Attempt, ClaimState, Finished, Finishing, Opening, Replay, RevisionBytes, Scope,
    Write,
};
pub use database_url::DatabaseUrl;
pub use dialect::{Dialect, Statement};
pub use error::StoreError;
use primary::PgTarget;
pub use redact::{redact, redact_text};
use secrets::describe;
pub use sqlite_file::{COMPANION_SUFFIXES, SqliteUse, file_of as sqlite_file_of};
/// The PostgreSQL pending-project query text (for benchmarks and EXPLAIN).
pub const PENDING_PAGE_SQL: &str = sql::PENDING_PAGE_PG.text(Dialect::Postgres);
/// The PostgreSQL open step's text (`$1` project, `$2`/`$3` claim), for tests and EXPLAIN.
pub const OPEN_SQL: &str = sql::OPEN_PG;
pub use queries::{
    ConnectionSlots, Current, CurrentSnapshot, ProjectFacts, RecordedRejection, SnapshotHead,
    StoredSnapshot,
};

use package_executor_core::defaults;
use package_executor_core::model::GenerationStatus;
use package_executor_core::planner::ActiveHead;

/// The product's name, for people: `PostgreSQL`, `SQLite`.
impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Postgres => "PostgreSQL",
            Self::Sqlite => "SQLite",
        })
    }
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// `postgres://…` or `sqlite://…`, read once.
    pub url: DatabaseUrl,
    /// Pool size.
    pub max_connections: u32,
    /// PostgreSQL `statement_timeout` for this executor's sessions.
    pub statement_timeout: Duration,
    /// PostgreSQL `lock_timeout`.
    pub lock_timeout: Duration,
    /// PostgreSQL `idle_in_transaction_session_timeout`.
    pub idle_in_transaction_timeout: Duration,
    /// How long to wait for a connection from the pool or the server.
    pub acquire_timeout: Duration,
    /// How long past `statement_timeout` an attempt waits for the server's answer before it
    /// gives the connection up (see [`Store::answer_timeout`]). 10 s by default: the network's
    /// share of an answer the server sends by `statement_timeout`; every second of it is a
    /// second a silently lost primary holds a worker.
    pub answer_margin: Duration,
    /// SQLite: whether the file may be created or set up, or must already be ours.
    pub sqlite_use: SqliteUse,
}

impl ConnectOptions {
    /// Defaults for a URL.
    pub fn new(url: DatabaseUrl) -> Self {
        Self {
            url,
            max_connections: 5,
            statement_timeout: defaults::STATEMENT_TIMEOUT.value,
            lock_timeout: defaults::LOCK_TIMEOUT.value,
            idle_in_transaction_timeout: defaults::IDLE_IN_TRANSACTION_TIMEOUT.value,
            acquire_timeout: defaults::CONNECT_TIMEOUT.value,
            answer_margin: defaults::ANSWER_MARGIN.value,
            sqlite_use: SqliteUse::Create,
        }
    }
}

#[derive(Clone, Debug)]
enum Pool {
    Pg(PgTarget),
    Lite(SqlitePool),
}

/// A connection pool to one database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: Pool,
    answer_timeout: Option<Duration>,
    commit_timeout: Option<Duration>,
}

/// One live head as an observation sees it: the head with its generation's columns, and the
/// generation's status (`None` when the generation row is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedHead {
    /// The head and generation columns (generation columns empty when the row is missing).
    pub head: ActiveHead,
    /// `package_generations.status`, if the row exists.
    pub status: Option<GenerationStatus>,
}

/// A duration as PostgreSQL's settings take it, in whole milliseconds rounded up: a value
/// under a millisecond is sent as 1 ms, never as 0, which would switch the timeout off.
fn millis(d: Duration) -> String {
    format!("{}ms", d.as_micros().div_ceil(1000).max(1))
}

/// Awaits one database step, or gives up with [`StoreError::NoAnswer`] after `limit` (see
/// [`Store::answer_timeout`]).
pub async fn answered<T>(
    limit: Option<Duration>,
    step: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, step)
            .await
            .unwrap_or(Err(StoreError::NoAnswer(limit))),
        None => step.await,
    }
}

/// Ends a transaction as its body asked: `COMMIT` (bounded by `commit_limit`) when the body
/// returned `Ok((_, true))`, `ROLLBACK` (bounded by `limit`) otherwise. A connection that stopped
/// answering is given up, not rolled back: the server rolls back when it notices, and the
/// caller does not return it to the pool. A failed commit leaves nothing behind (the
/// transaction is atomic).
async fn finish<T>(
    a: Attempt<'_>,
    result: Result<(T, bool), StoreError>,
    limit: Option<Duration>,
    commit_limit: Option<Duration>,
) -> Result<T, StoreError> {
    let finished = match &result {
        Ok((_, true)) => match answered(commit_limit, a.commit()).await {
            Err(StoreError::NoAnswer(waited)) => Err(StoreError::CommitUnacknowledged(waited)),
            other => other,
        },
        Err(StoreError::NoAnswer(_)) => {
            drop(a);
            Ok(())
        }
        _ => answered(limit, a.rollback()).await,
    };
    result.and_then(|(value, _)| finished.map(|()| value))
}

/// How long [`Store::close`] waits for the pool's connections.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `Session::recover` waits for a pooled connection to answer a ping: a live server
/// answers one at once, and a connection that does not is simply replaced.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

// READ COMMITTED explicitly, whatever the server's default, in the BEGIN itself.
const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// One worker's connection, kept from one attempt to the next.
///
/// Checking a connection out of the pool and back in costs sqlx a round trip (a ping on
/// release), which is a tenth of an attempt's round trips; a worker therefore keeps its
/// PostgreSQL connection, and still runs each attempt in a transaction of its own
/// ([`Session::transaction`]). After a database error the session closes it, so the next
/// attempt starts on a fresh connection (or, with several hosts, on the new primary). SQLite has one connection
/// per process, shared by all workers, so there every attempt checks it out.
#[derive(Debug)]
pub struct Session {
    store: Store,
    conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    /// Whether the last `begin` ran on a connection kept from an earlier attempt.
    kept: bool,
}

impl Session {
    /// Starts an attempt: one READ COMMITTED transaction on this session's connection.
    async fn begin(&mut self) -> Result<Attempt<'_>, StoreError> {
        match &self.store.pool {
            Pool::Pg(target) => {
                self.kept = self.conn.is_some();
                let conn = match self.conn.take() {
                    Some(c) => c,
                    None => target.acquire().await?,
                };
                let conn = self.conn.insert(conn);
                Ok(Attempt::Pg(
                    sqlx::Connection::begin_with(&mut **conn, BEGIN).await?,
                ))
            }
            Pool::Lite(p) => Ok(Attempt::Lite(p.begin().await?)),
        }
    }

    /// Gives the session's connection back to the pool (a worker with nothing to do), so that
    /// the page readers can use it; the next attempt takes one again.
    pub fn release(&mut self) {
        self.conn = None;
    }

    /// Closes the connection (after a database error); the next attempt takes a fresh one.
    /// It is detached from the pool rather than returned: sqlx pings a returned connection,
    /// which on a half-open one would hold a pool slot for good.
    fn discard(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }

    /// See [`Store::answer_timeout`].
    pub fn answer_timeout(&self) -> Option<Duration> {
        self.store.answer_timeout
    }

    /// Runs `body` in one transaction on this session's connection: it commits when `body`
    /// returns `Ok((_, true))` and rolls back otherwise. `BEGIN` and `ROLLBACK` are bounded by
    /// the answer timeout, `COMMIT` by the statement timeout (`body` bounds its own steps). A failed `BEGIN` is tried
    /// once more at once when the cause was not this transaction's: a kept connection that
    /// died while idle, or (with several hosts) a primary that moved. After any error the
    /// connection is closed, so the next transaction starts on a fresh one.
    pub async fn transaction<T>(
        &mut self,
        body: impl AsyncFnOnce(&mut Attempt<'_>) -> Result<(T, bool), StoreError>,
    ) -> Result<T, StoreError> {
        let (limit, commit_limit) = (self.answer_timeout(), self.store.commit_timeout);
        let mut recovered = false;
        let mut a = loop {
            let error = match answered(limit, self.begin()).await {
                Ok(a) => break a,
                Err(e) => e,
            };
            // Each wait inside `recover` is bounded (the pool's acquire timeout, a ping timeout).
            if recovered || !self.recover().await {
                self.discard();
                return Err(error);
            }
            recovered = true;
        };
        let result = body(&mut a).await;
        let outcome = finish(a, result, limit, commit_limit).await;
        if outcome.is_err() {
            self.discard();
        }
        outcome
    }

    /// After a failed [`begin`](Session::begin): drops the connection and says whether one
    /// more `begin` is worth trying at once, so that an event no attempt caused does not cost
    /// one. With several hosts the primary can have moved: the pool follows it first (as
    /// [`Store::begin`] does). A kept connection can have died while idle (a server restart, a
    /// proxy's idle timeout), and the pool's idle connections with it: the session takes the
    /// first pooled connection that answers a ping, closing the dead ones it meets.
    async fn recover(&mut self) -> bool {
        self.discard();
        let kept = std::mem::take(&mut self.kept);
        match &self.store.pool {
            Pool::Pg(target) if target.is_multi_host() => {
                tracing::warn!("PostgreSQL connection lost: looking for the primary");
                target.follow_primary().await.is_ok()
            }
            Pool::Pg(target) if kept => {
                // Each dead connection met is closed, so this ends within the pool's size.
                for _ in 0..=target.max_connections() {
                    let Ok(mut conn) = target.acquire().await else {
                        return false;
                    };
                    let ping = sqlx::Connection::ping(&mut *conn);
                    if let Ok(Ok(())) = tokio::time::timeout(PING_TIMEOUT, ping).await {
                        self.conn = Some(conn);
                        return true;
                    }
                    // Detached, not returned: the pool's own ping on return would hang on a
                    // half-open connection.
                    drop(conn.detach());
                }
                false
            }
            Pool::Pg(_) | Pool::Lite(_) => false,
        }
    }
}

/// sqlx reports a statement slower than this with its whole text...
const SLOW_STATEMENT: Duration = Duration::from_secs(1);
/// ...at DEBUG, not sqlx's default WARN. The executor's statements carry their own bounds
/// (`statement_timeout`, the answer timeout) and say what failed; a slow but successful one is
/// expected now and then (a `--full-scan` page over many projects, an import chunk of large
/// revisions, whose text is thousands of placeholders long) and only cluttered an operator's
/// terminal. `PACKAGE_EXECUTOR_LOG=info,sqlx::query=debug` shows them.
const SLOW_STATEMENT_LEVEL: log::LevelFilter = log::LevelFilter::Debug;

impl Store {
    /// Connects (SQLite: creating the file if missing).
    pub async fn connect(opts: &ConnectOptions) -> Result<Self, StoreError> {
        let url = opts.url.as_str();
        let pool = match opts.url.dialect() {
            Dialect::Postgres => {
                let settings = [
                    ("statement_timeout", millis(opts.statement_timeout)),
                    ("lock_timeout", millis(opts.lock_timeout)),
                    (
                        "idle_in_transaction_session_timeout",
                        millis(opts.idle_in_transaction_timeout),
                    ),
                    // Every statement is short; compiling one (tens of milliseconds when the
                    // pending scan's estimate crosses jit_above_cost) costs more than it saves.
                    ("jit", "off".to_owned()),
                    // Every query looks rows up by key, so the generic plan is the right one;
                    // custom planning re-inlined the current proof on every attempt.
                    ("plan_cache_mode", "force_generic_plan".to_owned()),
                    // Plans that do not depend on the statistics: a generic plan is made once
                    // per session, and made while the snapshot tables are empty (or analyzed
                    // while they were) it scanned them for every project until autovacuum
                    // happened to analyze them again. Every statement here looks rows up by
                    // key, so an index is never the wrong choice; `off` only prices a
                    // sequential scan out where an index exists.
                    ("enable_seqscan", "off".to_owned()),
                    // For the same reason a plain index scan: a project's few rows come in key
                    // order from it, where a bitmap scan (chosen from the estimates of empty
                    // tables) builds a bitmap, visits the heap and sorts the rows again. The
                    // database's snapshot check runs under this setting too; together about a
                    // tenth of the server's CPU per snapshot (docs/benchmarks.md).
                    ("enable_bitmapscan", "off".to_owned()),
                    // Every name the executor uses is qualified (`ql3.` or a catalog function);
                    // pinned so that no schema a database grants CREATE on (`public`, on one
                    // upgraded from PostgreSQL 14 or older) can put an object in their way.
                    ("search_path", "pg_catalog,pg_temp".to_owned()),
                ];
                let configure = |o: PgConnectOptions| {
                    o.application_name("package-executor")
                        .options(settings.clone())
                        .log_slow_statements(SLOW_STATEMENT_LEVEL, SLOW_STATEMENT)
                };
                let target =
                    PgTarget::connect(url, configure, opts.max_connections, opts.acquire_timeout)
                        .await?;
                Pool::Pg(target)
            }
            Dialect::Sqlite => {
                let connect = SqliteConnectOptions::from_str(url)
                    .map_err(|e| StoreError::Config(format!("bad SQLite URL: {e}")))?;
                sqlite_file::check(url, connect.get_filename(), opts.sqlite_use).await?;
                let connect = connect
                    .create_if_missing(opts.sqlite_use == SqliteUse::Create)
                    .foreign_keys(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(30))
                    .log_slow_statements(SLOW_STATEMENT_LEVEL, SLOW_STATEMENT);
                let pool = SqlitePoolOptions::new()
                    // One writer at a time: SQLite serialises writes anyway, and one connection
                    // avoids upgrade deadlocks between this process's own transactions.
                    .max_connections(1)
                    // A local file does not drop connections; no ping per checkout.
                    .test_before_acquire(false)
                    .acquire_timeout(Duration::from_secs(600))
                    .connect_with(connect)
                    .await
                    .map_err(StoreError::from_sqlite_open)?;
                Pool::Lite(pool)
            }
        };
        let answer_timeout = match pool {
            Pool::Pg(_) => Some(opts.statement_timeout + opts.answer_margin),
            // In-process: no network to fall silent, and waiting for the one connection while
            // another worker builds a large project is normal.
            Pool::Lite(_) => None,
        };
        // PostgreSQL's statement_timeout does not end a COMMIT that waits for a synchronous
        // standby (one that has gone, or a primary cut off from it): that wait is bounded here,
        // by the statement timeout itself, so that a commit never waits longer than a statement.
        let commit_timeout = match pool {
            Pool::Pg(_) => Some(opts.statement_timeout),
            Pool::Lite(_) => None,
        };
        Ok(Self {
            pool,
            answer_timeout,
            commit_timeout,
        })
    }

    /// How long an attempt waits for any one answer from PostgreSQL (`None` for SQLite). A
    /// live server answers or cancels every statement by `statement_timeout`, so silence past
    /// this (plus the margin, for the network) means the server or the path to it is gone: a
    /// node lost without a TCP reset leaves a half-open connection that would otherwise hold a
    /// worker, and a run told to stop, forever.
    pub fn answer_timeout(&self) -> Option<Duration> {
        self.answer_timeout
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self.pool {
            Pool::Pg(_) => Dialect::Postgres,
            Pool::Lite(_) => Dialect::Sqlite,
        }
    }

    /// The PostgreSQL pool in use now, for tools and tests that need raw access.
    pub fn pg_pool(&self) -> Option<PgPool> {
        match &self.pool {
            Pool::Pg(p) => Some(p.pool()),
            Pool::Lite(_) => None,
        }
    }

    /// The SQLite pool, for tools and tests that need raw access.
    pub fn sqlite_pool(&self) -> Option<&SqlitePool> {
        match &self.pool {
            Pool::Lite(p) => Some(p),
            Pool::Pg(_) => None,
        }
    }

    /// Runs `body` in one READ COMMITTED transaction of its own, the way every command that is
    /// not a run reads or writes (`current`, `explain`, `sources`): it commits when `body`
    /// returns `Ok((_, true))` and rolls back otherwise. `BEGIN` and `ROLLBACK` are bounded by
    /// the answer timeout, `COMMIT` by the statement timeout; `body` bounds its own steps with
    /// [`answered`] (a live server ends each statement by its `statement_timeout`).
    pub async fn transaction<T>(
        &self,
        body: impl AsyncFnOnce(&mut Attempt<'_>) -> Result<(T, bool), StoreError>,
    ) -> Result<T, StoreError> {
        let (limit, commit_limit) = (self.answer_timeout, self.commit_timeout);
        let mut a = answered(limit, self.begin_unbounded()).await?;
        let result = body(&mut a).await;
        finish(a, result, limit, commit_limit).await
    }

    /// Starts one attempt: a connection and a READ COMMITTED transaction, with no bound on
    /// any wait. For the tests and benchmarks that drive an attempt step by step (the
    /// `testing` feature); the product's paths use [`Store::transaction`] or a [`Session`].
    #[cfg(feature = "testing")]
    pub async fn begin(&self) -> Result<Attempt<'static>, StoreError> {
        self.begin_unbounded().await
    }

    /// [`Store::begin`], which [`Store::transaction`] bounds.
    async fn begin_unbounded(&self) -> Result<Attempt<'static>, StoreError> {
        match &self.pool {
            Pool::Pg(target) => {
                let tx = match target.pool().begin_with(BEGIN).await {
                    Ok(tx) => tx,
                    Err(e) if target.is_multi_host() => {
                        tracing::warn!(error = %e, "PostgreSQL host lost: looking for the primary");
                        target.follow_primary().await?;
                        target.pool().begin_with(BEGIN).await?
                    }
                    Err(e) => return Err(e.into()),
                };
                Ok(Attempt::Pg(tx))
            }
            Pool::Lite(p) => Ok(Attempt::Lite(p.begin().await?)),
        }
    }

    /// A store of its own with a pool of `max_connections`, for a lane of workers on another
    /// thread; `None` for SQLite, whose one connection every worker shares. Call it on the
    /// lane's runtime, and [`Store::close`] it there.
    pub fn lane(&self, max_connections: u32) -> Option<Self> {
        match &self.pool {
            Pool::Pg(target) => Some(Self {
                pool: Pool::Pg(target.lane(max_connections)),
                answer_timeout: self.answer_timeout,
                commit_timeout: self.commit_timeout,
            }),
            Pool::Lite(_) => None,
        }
    }

    /// A worker's session: its own connection, kept across attempts.
    pub fn session(&self) -> Session {
        Session {
            store: self.clone(),
            conn: None,
            kept: false,
        }
    }

    /// Closes the pool, waiting for connections to be returned, but not for long: sqlx pings a
    /// connection as it returns, and on a half-open one that ping never ends. A command must
    /// still write its summary and exit; the process's exit closes whatever is left.
    pub async fn close(&self) {
        let close = async {
            match &self.pool {
                Pool::Pg(p) => p.pool().close().await,
                Pool::Lite(p) => p.close().await,
            }
        };
        if tokio::time::timeout(CLOSE_TIMEOUT, close).await.is_err() {
            tracing::warn!(
                "a database connection did not close within {CLOSE_TIMEOUT:?}; leaving it to the exit"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_timeout_is_sent_as_zero_milliseconds() {
        assert_eq!(millis(Duration::from_nanos(1)), "1ms");
        assert_eq!(millis(Duration::from_micros(999)), "1ms");
        assert_eq!(millis(Duration::from_micros(1001)), "2ms");
        assert_eq!(millis(Duration::from_secs(60)), "60000ms");
    }
}
