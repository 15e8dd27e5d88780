//! How a run shows that it is moving: a spinner with running counts on a terminal, and in a pod
//! (or wherever stderr is not a terminal) one structured log line per outcome plus a progress
//! line every 10 s, so `kubectl logs -f` shows a long run moving.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::coordinator::{LogObserver, Observer};
use crate::report::{Outcome, RunSummary};

/// Whether to draw progress on stderr: a terminal, and text logs (JSON logs are for machines,
/// whatever reads them).
pub(super) fn progress_wanted(cli: &crate::cli::Cli) -> bool {
    std::io::stderr().is_terminal() && cli.log_format != crate::cli::LogFormat::Json
}

/// A spinner with running counts on a terminal; structured logs for everything else.
pub(super) struct Progress {
    pub(super) bar: ProgressBar,
    pub(super) counts: Mutex<RunSummary>,
}

impl Observer for Progress {
    fn outcome(&self, project_id: &str, o: &Outcome) {
        if let Ok(mut c) = self.counts.lock() {
            c.count(o);
            c.projects_scanned += 1;
            self.bar.set_message(format!(
                "{} done: {} published, {} replayed, {} current, {} rejected, {} pending",
                c.projects_scanned,
                c.published,
                c.replayed,
                c.already_current,
                c.rejected.total(),
                c.unresolved.total() + c.claimed_elsewhere
            ));
        }
        if matches!(
            o,
            Outcome::Rejected { .. } | Outcome::Unresolved { .. } | Outcome::Integrity { .. }
        ) {
            // A log line: the log writer clears the bar for it (terminal.rs).
            LogObserver.outcome(project_id, o);
        }
    }
}

/// What one progress line says.
#[derive(Debug, PartialEq)]
struct Figures {
    done: u64,
    left: u64,
    rate: f64,
    eta_seconds: Option<u64>,
    eta_is_lower_bound: bool,
}

/// Structured logs: every outcome (as [`LogObserver`]), and a progress line on a timer.
#[derive(Debug)]
pub(super) struct LogProgress {
    started: Instant,
    done: AtomicU64,
    listed: AtomicU64,
    listing_done: AtomicBool,
}

impl Default for LogProgress {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            done: AtomicU64::new(0),
            listed: AtomicU64::new(0),
            listing_done: AtomicBool::new(false),
        }
    }
}

impl Observer for LogProgress {
    fn outcome(&self, project_id: &str, o: &Outcome) {
        self.done.fetch_add(1, Ordering::Relaxed);
        LogObserver.outcome(project_id, o);
    }

    fn listed(&self, n: usize) {
        self.listing_done.store(false, Ordering::Relaxed);
        self.listed.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn listing_done(&self) {
        self.listing_done.store(true, Ordering::Relaxed);
    }
}

impl LogProgress {
    /// The figures of a progress line, `elapsed` after the start.
    fn figures(&self, elapsed: Duration) -> Figures {
        let done = self.done.load(Ordering::Relaxed);
        let left = self.listed.load(Ordering::Relaxed).saturating_sub(done);
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        Figures {
            done,
            left,
            rate: (rate * 10.0).round() / 10.0,
            eta_seconds: (rate > 0.0).then(|| (left as f64 / rate).round() as u64),
            // Until the last page is read the work left is only what has been listed so far.
            eta_is_lower_bound: !self.listing_done.load(Ordering::Relaxed),
        }
    }

    /// Logs one progress line now.
    pub(super) fn log(&self) {
        let f = self.figures(self.started.elapsed());
        tracing::info!(
            projects_done = f.done,
            projects_listed_not_done = f.left,
            rate_per_second = f.rate,
            eta_seconds = f.eta_seconds,
            eta_is_lower_bound = f.eta_is_lower_bound,
            "progress"
        );
    }

    /// Spawns a task that logs a progress line every [`LOG_PERIOD`]; abort it when the run ends.
    pub(super) fn tick(this: Arc<Self>) -> tokio::task::JoinHandle<()> {
        every(LOG_PERIOD, move || this.log())
    }
}

/// How often a long command logs its progress where no terminal shows it.
pub(super) const LOG_PERIOD: Duration = Duration::from_secs(10);

/// Spawns a task that calls `f` every `period`, the first time one period from now; abort it
/// to stop.
pub(super) fn every(
    period: Duration,
    f: impl Fn() + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            timer.tick().await;
            f();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_figures_estimate_the_time_left() {
        let p = LogProgress::default();
        assert_eq!(
            p.figures(Duration::from_secs(10)).eta_seconds,
            None,
            "no rate yet"
        );
        p.listed(256);
        p.listed(44);
        p.done.fetch_add(100, Ordering::Relaxed);
        let f = p.figures(Duration::from_secs(10));
        assert_eq!((f.done, f.left, f.rate), (100, 200, 10.0));
        assert_eq!(f.eta_seconds, Some(20));
        assert!(f.eta_is_lower_bound, "pages are still being read");
        p.listing_done();
        assert!(!p.figures(Duration::from_secs(10)).eta_is_lower_bound);
    }
}
