//! A count shown while a long command runs (`sources import`, `verify`): a bar or a spinner on
//! a terminal, and elsewhere (a pod, `--log-format json`) a log line every 10 s, so that a
//! command over a large file or database is seen to move. `run` has its own, richer display
//! (`progress.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A running count and how it is shown; dropping it stops the display.
pub(super) struct Meter {
    count: Arc<AtomicU64>,
    bar: Option<ProgressBar>,
    ticking: tokio::task::JoinHandle<()>,
}

impl Meter {
    /// Starts showing a count towards `total` (when known): on a terminal with the indicatif
    /// `template`, otherwise by calling `log` with the count every 10 s.
    pub(super) fn start(
        terminal: bool,
        total: Option<u64>,
        template: &str,
        log: impl Fn(u64) + Send + 'static,
    ) -> Self {
        let count = Arc::new(AtomicU64::new(0));
        if terminal {
            let bar = total.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            let ticking = {
                let (bar, count) = (bar.clone(), count.clone());
                tokio::spawn(async move {
                    loop {
                        bar.set_position(count.load(Ordering::Relaxed));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                })
            };
            return Self {
                count,
                bar: Some(bar),
                ticking,
            };
        }
        let ticking = {
            let count = count.clone();
            super::progress::every(super::progress::LOG_PERIOD, move || {
                log(count.load(Ordering::Relaxed));
            })
        };
        Self {
            count,
            bar: None,
            ticking,
        }
    }

    /// The count, for a reader on another thread to add to.
    pub(super) fn count(&self) -> Arc<AtomicU64> {
        self.count.clone()
    }

    /// Adds `n` to the count.
    pub(super) fn add(&self, n: u64) {
        self.count.fetch_add(n, Ordering::Relaxed);
    }

    /// Runs `f` (which prints) with the bar hidden, so that its lines are not drawn over.
    pub(super) fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.ticking.abort();
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `done` of `total` as a whole percentage, at most 100 (100 when the total is 0).
pub(super) fn percent(done: u64, total: u64) -> u64 {
    if total == 0 {
        return 100;
    }
    let p = u128::from(done) * 100 / u128::from(total);
    u64::try_from(p.min(100)).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_are_whole_and_bounded() {
        assert_eq!(percent(0, 400), 0);
        assert_eq!(percent(399, 400), 99);
        assert_eq!(percent(400, 400), 100);
        assert_eq!(percent(0, 0), 100);
        assert_eq!(percent(u64::MAX, u64::MAX), 100);
        // A file that grew while it was read.
        assert_eq!(percent(500, 400), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn off_a_terminal_the_count_is_logged_every_ten_seconds() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let meter = Meter::start(false, Some(10), "", move |n| {
            let _ = tx.send(n);
        });
        meter.add(5);
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(rx.try_recv().is_err(), "logged before 10 s");
        // The clock is paused: a receive waits by moving it to the next tick.
        assert_eq!(rx.recv().await, Some(5));
        meter.count().fetch_add(2, Ordering::Relaxed);
        assert_eq!(rx.recv().await, Some(7));
        drop(meter);
        // Dropped: the ticker stops, and with it the only sender.
        assert_eq!(rx.recv().await, None);
    }
}
