//! Cooperative shutdown: SIGTERM, SIGINT or `--deadline` stop new work; in-flight transactions
//! finish or roll back on their own.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// A one-way stop flag that tasks can poll or wait on (tokio-util's `CancellationToken`, with
/// the names the coordinator reads well with).
#[derive(Debug, Clone, Default)]
pub struct Stop {
    token: CancellationToken,
}

impl Stop {
    /// Sets the flag and wakes every waiter.
    pub fn trigger(&self) {
        self.token.cancel();
    }

    /// Whether stop was requested.
    pub fn is_set(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Waits until stop is requested.
    pub async fn wait(&self) {
        self.token.cancelled().await;
    }

    /// Sleeps for `d`, returning early (false) when stop is requested.
    pub async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => !self.is_set(),
            () = self.wait() => false,
        }
    }

    /// Triggers on SIGTERM, SIGINT or after `deadline`.
    pub fn arm(&self, deadline: Option<Duration>) {
        let stop = self.clone();
        tokio::spawn(async move {
            let deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(unix)]
            let term = async {
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let term = std::future::pending::<()>();
            tokio::select! {
                () = deadline => tracing::warn!("deadline reached: stopping new work"),
                () = term => tracing::warn!("SIGTERM: stopping new work"),
                _ = tokio::signal::ctrl_c() => tracing::warn!("interrupted: stopping new work"),
            }
            stop.trigger();
        });
    }
}
