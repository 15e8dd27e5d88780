//! PostgreSQL high availability: multi-host URLs (`postgres://a,b/db`) and following the
//! primary. The pool always points at one host; when it cannot hand out a connection, the hosts
//! are probed in order for one that accepts writes (`target_session_attrs=read-write`, the
//! default here, since the executor writes) and the pool is rebuilt there.

use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions as _, Connection as _, PgConnection, PgPool, Postgres, Row};

use crate::StoreError;
use crate::conninfo::{Hosts, SessionAttrs, split_hosts};

/// The hosts of a PostgreSQL URL and the pool currently in use.
#[derive(Clone, Debug)]
pub(crate) struct PgTarget {
    current: Arc<RwLock<PgPool>>,
    hosts: Arc<Vec<PgConnectOptions>>,
    attrs: Option<SessionAttrs>,
    max_connections: u32,
    acquire_timeout: Duration,
    failover_timeout: Duration,
}

/// Whether a host accepts the connections the executor needs; `Err` says why not, so that a
/// run that finds no host can say what it last heard (a TLS failure, say) instead of only
/// "none answered".
async fn is_usable(opts: &PgConnectOptions, attrs: Option<SessionAttrs>) -> Result<(), String> {
    let probe = async {
        let mut conn = opts.connect().await.map_err(|e| e.to_string())?;
        let verdict = serves(&mut conn, attrs).await;
        conn.close().await.ok();
        verdict
    };
    tokio::time::timeout(Duration::from_secs(3), probe)
        .await
        .unwrap_or_else(|_| Err("no answer within 3 s".to_owned()))
}

/// Whether the server behind a connection is what `attrs` asks for, as libpq checks
/// `target_session_attrs` on every connection it opens.
async fn serves(conn: &mut PgConnection, attrs: Option<SessionAttrs>) -> Result<(), String> {
    let row = sqlx::query(
        "SELECT pg_is_in_recovery() AS standby, \
         current_setting('default_transaction_read_only') = 'on' AS read_only",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| e.to_string())?;
    let standby: bool = row.try_get("standby").map_err(|e| e.to_string())?;
    let read_only: bool = row.try_get("read_only").map_err(|e| e.to_string())?;
    match attrs {
        Some(SessionAttrs::ReadWrite | SessionAttrs::Primary) if standby => {
            Err("a standby (read-only)".to_owned())
        }
        Some(SessionAttrs::ReadWrite) if read_only => {
            Err("read-only (default_transaction_read_only is on)".to_owned())
        }
        _ => Ok(()),
    }
}

impl PgTarget {
    /// Parses the URL and connects to the first usable host.
    pub(crate) async fn connect(
        url: &str,
        configure: impl Fn(PgConnectOptions) -> PgConnectOptions,
        max_connections: u32,
        acquire_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let Hosts { urls, attrs } = split_hosts(url, |k| std::env::var(k).ok())?;
        let hosts = urls
            .iter()
            .map(|u| {
                let opts = PgConnectOptions::from_str(u)
                    .map_err(|e| StoreError::Config(format!("bad PostgreSQL URL: {e}")))?;
                let opts = super::tls::apply_libpq_rules(opts, u, |k| std::env::var(k).ok())?;
                Ok(configure(opts))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let multi = hosts.len() > 1;
        // With several hosts, a dead one must be noticed quickly so the others get their turn.
        let per_try = if multi {
            acquire_timeout.min(Duration::from_secs(5))
        } else {
            acquire_timeout
        };
        let first = hosts
            .first()
            .cloned()
            .ok_or_else(|| StoreError::Config("no host in the URL".into()))?;
        let pool = lazy_pool(first, attrs, max_connections, per_try);
        let target = Self {
            current: Arc::new(RwLock::new(pool)),
            hosts: Arc::new(hosts),
            attrs,
            max_connections,
            acquire_timeout: per_try,
            failover_timeout: acquire_timeout,
        };
        if multi || attrs.is_some() {
            target.follow_primary().await?;
        } else {
            // Fail fast (exit 8) when the only host is unreachable.
            let pool = target.pool();
            match pool.acquire().await {
                Ok(_) => {}
                Err(sqlx::Error::PoolTimedOut) => {
                    return Err(why_no_connection(&target.hosts[0]).await);
                }
                Err(e) => return Err(StoreError::from_connect(e)),
            }
        }
        Ok(target)
    }

    /// The pool in use now.
    pub(crate) fn pool(&self) -> PgPool {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A connection of its own for a worker; with several hosts, a failed connect first looks
    /// for the (new) primary.
    pub(crate) async fn acquire(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        match self.pool().acquire().await {
            Ok(c) => Ok(c),
            Err(e) if self.is_multi_host() => {
                tracing::warn!(error = %e, "PostgreSQL host lost: looking for the primary");
                self.follow_primary().await?;
                Ok(self.pool().acquire().await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A target of its own over the same hosts, with a pool of `max_connections` pointed at
    /// the host in use now; for a lane of workers on another thread (see
    /// `coordinator::lanes`). Must be called on the runtime that will use it: a pool's
    /// maintenance tasks and its connections' sockets belong to the runtime that made them.
    pub(crate) fn lane(&self, max_connections: u32) -> Self {
        let opts = (*self.pool().connect_options()).clone();
        Self {
            current: Arc::new(RwLock::new(lazy_pool(
                opts,
                self.attrs,
                max_connections,
                self.acquire_timeout,
            ))),
            hosts: Arc::clone(&self.hosts),
            attrs: self.attrs,
            max_connections,
            acquire_timeout: self.acquire_timeout,
            failover_timeout: self.failover_timeout,
        }
    }

    /// The pool's size.
    pub(crate) fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// Whether the URL named several hosts.
    pub(crate) fn is_multi_host(&self) -> bool {
        self.hosts.len() > 1
    }

    /// Finds a usable host (a primary unless `target_session_attrs=any`), polling until the
    /// failover timeout, and points the pool at it. The hosts are probed at once and the first
    /// usable one to answer is taken. With `read-write` there is one primary, except while a
    /// Patroni leader cut off from its store has not yet demoted itself; in synchronous mode
    /// that one acknowledges no commit, so work sent there is retried, never lost.
    pub(crate) async fn follow_primary(&self) -> Result<(), StoreError> {
        let started = Instant::now();
        let mut last = Vec::with_capacity(self.hosts.len());
        loop {
            last.clear();
            // Every host at once, the first usable answer wins: a host that has fallen silent
            // (a cut link) costs no probe timeout before the others are asked, as it would in
            // URL order.
            let mut probes: FuturesUnordered<_> = self
                .hosts
                .iter()
                .map(|opts| async move { (opts, is_usable(opts, self.attrs).await) })
                .collect();
            let mut usable = None;
            while let Some((opts, verdict)) = probes.next().await {
                match verdict {
                    Ok(()) => {
                        usable = Some(opts);
                        break;
                    }
                    Err(why) => {
                        last.push(format!("{}:{}: {why}", opts.get_host(), opts.get_port()))
                    }
                }
            }
            drop(probes);
            if let Some(opts) = usable {
                let pool = lazy_pool(
                    opts.clone(),
                    self.attrs,
                    self.max_connections,
                    self.acquire_timeout,
                );
                let old = {
                    let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
                    std::mem::replace(&mut *current, pool)
                };
                tracing::info!(host = %opts.get_host(), port = opts.get_port(), "using this PostgreSQL host");
                tokio::spawn(async move { old.close().await });
                return Ok(());
            }
            // A TLS failure on every host will not heal by waiting: say so now, and when each
            // is the configuration's (an untrusted or misnamed certificate, say), as such
            // (exit 1, not retried).
            let all_tls = last.iter().all(|why| super::tls::hint(why).is_some());
            let all_configuration = last.iter().all(|why| super::tls::is_configuration(why));
            if started.elapsed() >= self.failover_timeout || all_tls {
                let heard = last.join("; ");
                let hint = super::tls::hint(&heard).map_or_else(
                    || "; check DATABASE_URL and that the servers are up".to_owned(),
                    |h| format!(" ({h})"),
                );
                let error = if all_configuration {
                    StoreError::Config
                } else {
                    StoreError::Unavailable
                };
                return Err(error(format!(
                    "none of the {} hosts accepts {} connections: {heard}{hint}",
                    self.hosts.len(),
                    match self.attrs {
                        Some(SessionAttrs::ReadWrite) => "read-write",
                        Some(SessionAttrs::Primary) => "primary",
                        Some(SessionAttrs::Any) | None => "any",
                    }
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A pool that connects on first use. When `attrs` asks for a primary, every new connection
/// is checked as libpq checks it: the host the pool points at can be demoted while the pool
/// lives (Patroni restarts a demoted leader as a standby, which accepts connections), and a
/// connection there must fail to connect, so that the caller looks for the new primary,
/// rather than fail every write with `25006`.
fn lazy_pool(
    opts: PgConnectOptions,
    attrs: Option<SessionAttrs>,
    max_connections: u32,
    acquire_timeout: Duration,
) -> PgPool {
    let options = PgPoolOptions::new()
        .max_connections(max_connections)
        // No ping before each attempt (a round trip per project): a connection that died while
        // idle fails its BEGIN, and the session then closes it and takes one that answers
        // (see Session::transaction).
        .test_before_acquire(false)
        .acquire_timeout(acquire_timeout);
    let options = match attrs {
        Some(SessionAttrs::ReadWrite | SessionAttrs::Primary) => {
            options.after_connect(move |conn, _| {
                Box::pin(async move {
                    serves(conn, attrs).await.map_err(|why| {
                        sqlx::Error::Protocol(format!(
                            "the host is now {why}: looking for the primary"
                        ))
                    })
                })
            })
        }
        Some(SessionAttrs::Any) | None => options,
    };
    options.connect_lazy_with(opts)
}

/// Why no connection came within the connect timeout. The pool retries what may pass (a server
/// starting up, `53300`: no connection slot left) and then says only that it timed out; one
/// more try, on its own, says what the server answered, so the message names the cause.
async fn why_no_connection(opts: &PgConnectOptions) -> StoreError {
    let timed_out = || StoreError::from_connect(sqlx::Error::PoolTimedOut);
    match tokio::time::timeout(Duration::from_secs(5), PgConnection::connect_with(opts)).await {
        Ok(Err(e)) => match StoreError::from_connect(e) {
            StoreError::Unavailable(m) => StoreError::Unavailable(format!(
                "no connection within the connect timeout; the server's answer: {m}"
            )),
            other => other,
        },
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            timed_out()
        }
        Err(_) => timed_out(),
    }
}
