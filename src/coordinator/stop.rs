//! Shutdown in two steps. *Stop* (SIGTERM, SIGINT or `--deadline`): take no new projects and
//! let the ones in flight finish, each in its own transaction. *Abandon* (the grace period
//! after a stop is over): give up the attempts still in flight, whose transactions then roll
//! back with their connections, and report them pending, so the run prints its summary and exits
//! even when the database stopped answering. A second signal ends the process at once.
//!
//! Signals are watched on a thread of their own, not by the async runtime, so that they act
//! even when the runtime's thread is stuck: when the run has not ended [`FORCED_EXIT_MARGIN`]
//! after it was abandoned, that thread ends the process itself.

use std::io::Write as _;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::exit::Exit;

/// A one-way stop flag, and behind it a one-way abandon flag, that tasks on any thread can
/// poll or wait on (tokio-util's `CancellationToken`s).
#[derive(Debug, Clone, Default)]
pub struct Stop {
    token: CancellationToken,
    /// Set with `token` when the stop came from SIGTERM or SIGINT (not the deadline).
    signal: CancellationToken,
    abandon: CancellationToken,
    /// The exit code, once the work is over and the code decided: a signal after that ends
    /// the delivery of the results (the summary file, the metrics), not work, and the process
    /// then exits with the run's own code.
    finished: std::sync::Arc<std::sync::OnceLock<Exit>>,
}

/// How long after a run was abandoned the signal thread waits for the process to end by
/// itself (the summary printed, the metrics pushed) before it ends it.
pub(super) const FORCED_EXIT_MARGIN: Duration = Duration::from_secs(5);

impl Stop {
    /// Sets the flag and wakes every waiter: no new work.
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

    /// Waits until a signal (not the deadline) stopped the run.
    pub async fn signalled(&self) {
        self.signal.cancelled().await;
    }

    /// Stops, and gives up the work in flight.
    pub fn abandon(&self) {
        self.trigger();
        self.abandon.cancel();
    }

    /// Records that the work is over and `code` is the run's exit code (the first call wins).
    pub fn finish(&self, code: Exit) {
        let _ = self.finished.set(code);
    }

    /// The exit code [`Stop::finish`] recorded, if the work is over.
    pub fn finished(&self) -> Option<Exit> {
        self.finished.get().copied()
    }

    /// Whether the work in flight was given up.
    pub fn is_abandoned(&self) -> bool {
        self.abandon.is_cancelled()
    }

    /// Waits until the work in flight is given up.
    pub async fn abandoned(&self) {
        self.abandon.cancelled().await;
    }

    /// Sleeps for `d`, returning early (false) when stop is requested.
    pub async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => !self.is_set(),
            () = self.wait() => false,
        }
    }

    /// Stops on SIGTERM, SIGINT or after `deadline`, and abandons the work in flight `grace`
    /// after the stop. Must be called inside a tokio runtime (the deadline's timer is a task).
    pub fn arm(&self, deadline: Option<Duration>, grace: Duration) {
        let (told, mut signalled) = tokio::sync::mpsc::unbounded_channel();
        if let Err(e) = watch_signals(self.clone(), grace, told) {
            tracing::warn!(error = %e, "cannot watch for SIGTERM and SIGINT; they end the process at once");
        }
        let stop = self.clone();
        tokio::spawn(async move {
            let deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            let grace_seconds = grace.as_secs_f64();
            tokio::select! {
                () = deadline => {
                    tracing::warn!(grace_seconds, "deadline reached: no new projects; those in flight have the grace period to finish, then stay pending");
                    stop.trigger();
                }
                Some(signal) = signalled.recv() => {
                    // The signal thread keeps the time from here, whatever this thread does.
                    tracing::warn!(signal, grace_seconds, "stopping: no new projects; those in flight have the grace period to finish, then stay pending (a second signal ends the run at once)");
                    return;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(grace) => stop.abandon(),
                () = stop.abandoned() => {}
            }
        });
    }
}

/// Starts the signal thread: the first SIGTERM or SIGINT stops the run (and is told to `told`,
/// for the log), the grace period after it abandons the work in flight, and a second signal
/// (or a run still going [`FORCED_EXIT_MARGIN`] after it was abandoned) ends the process with
/// exit 3: whatever was in flight stays pending, and the next run builds it.
#[cfg(unix)]
fn watch_signals(
    stop: Stop,
    grace: Duration,
    told: tokio::sync::mpsc::UnboundedSender<&'static str>,
) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::os::fd::AsFd as _;
    use std::sync::mpsc::{RecvTimeoutError, channel};

    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    // The last words of a stuck run must not wait for the standard error lock, which a stuck
    // thread may hold, nor for the log: they go to a descriptor of their own, as plain text.
    let mut err = std::fs::File::from(std::io::stderr().as_fd().try_clone_to_owned()?);
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for s in signals.forever() {
                if tx.send(s).is_err() {
                    return;
                }
            }
        })?;
    std::thread::Builder::new()
        .name("shutdown".into())
        .spawn(move || {
            let name = |s: i32| if s == SIGINT { "SIGINT" } else { "SIGTERM" };
            let Ok(first) = rx.recv() else { return };
            stop.signal.cancel();
            stop.trigger();
            let _ = told.send(name(first));
            let pending = Exit::Unresolved.code();
            // After the work: the run's own code, and no word of projects in flight.
            let end = |err: &mut std::fs::File, why: String| -> ! {
                match stop.finished() {
                    Some(code) => {
                        let _ = writeln!(
                            err,
                            "{why}; the run's work was done, its results were still being \
                             delivered (the summary file, the metrics) (exit {})",
                            code.code()
                        );
                        std::process::exit(code.code());
                    }
                    None => {
                        let _ = writeln!(
                            err,
                            "{why}; the projects in flight stay pending (exit {pending})"
                        );
                        std::process::exit(pending);
                    }
                }
            };
            match rx.recv_timeout(grace) {
                Ok(second) => end(&mut err, format!("{}: ending the run now", name(second))),
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => stop.abandon(),
            }
            let last = match rx.recv_timeout(FORCED_EXIT_MARGIN) {
                Ok(second) => format!("{}: ending the run now", name(second)),
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => format!(
                    "the run did not end within its grace period ({}) and {} more: ending it now",
                    humantime::format_duration(grace),
                    humantime::format_duration(FORCED_EXIT_MARGIN),
                ),
            };
            end(&mut err, last);
        })?;
    Ok(())
}

#[cfg(not(unix))]
fn watch_signals(
    _stop: Stop,
    _grace: Duration,
    _told: tokio::sync::mpsc::UnboundedSender<&'static str>,
) -> std::io::Result<()> {
    Ok(())
}
