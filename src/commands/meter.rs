//! A count shown while a long command runs (`sources import`, `verify`): a bar or a spinner on
//! a terminal, and elsewhere (a pod, `--log-format json`) a log line every 10 s, so that a
//! command over a large file or database is seen to move. `run` has its own, richer display
//! (`progress.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A count that readers on any thread add to; it moves the bar, when there is one, as it goes.
#[derive(Clone, Debug, Default)]
pub(super) struct Counter {
    count: Arc<AtomicU64>,
    bar: Option<ProgressBar>,
}

impl Counter {
    /// Adds `n`.
    pub(super) fn add(&self, n: u64) {
        self.count.fetch_add(n, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }

    /// The count so far.
    pub(super) fn get(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// A running count and how it is shown; dropping it stops the display.
pub(super) struct Meter {
    counter: Counter,
    /// Off a terminal: the 10-second log line.
    ticking: Option<tokio::task::JoinHandle<()>>,
    /// On a terminal: log lines go through the bar while it is shown.
    _shown: Option<super::terminal::Shown>,
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
        if terminal {
            let bar = total.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            let shown = super::terminal::show(&bar);
            return Self {
                counter: Counter {
                    count: Arc::default(),
                    bar: Some(bar),
                },
                ticking: None,
                _shown: Some(shown),
            };
        }
        let counter = Counter::default();
        let ticking = {
            let counter = counter.clone();
            super::progress::every(super::progress::LOG_PERIOD, move || log(counter.get()))
        };
        Self {
            counter,
            ticking: Some(ticking),
            _shown: None,
        }
    }

    /// The count, for a reader on another thread to add to.
    pub(super) fn count(&self) -> Counter {
        self.counter.clone()
    }

    /// Adds `n` to the count.
    pub(super) fn add(&self, n: u64) {
        self.counter.add(n);
    }

    /// Runs `f` (which prints) with the bar hidden, so that its lines are not drawn over.
    pub(super) fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        super::terminal::above_bar(f)
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let Some(ticking) = &self.ticking {
            ticking.abort();
        }
        if let Some(bar) = &self.counter.bar {
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
    fn a_counter_moves_its_bar_as_it_is_added_to() {
        let bar = ProgressBar::hidden();
        let counter = Counter {
            count: Arc::default(),
            bar: Some(bar.clone()),
        };
        let reader = counter.clone();
        std::thread::spawn(move || reader.add(40)).join().unwrap();
        counter.add(2);
        assert_eq!((counter.get(), bar.position()), (42, 42));
    }

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
        meter.count().add(2);
        assert_eq!(rx.recv().await, Some(7));
        drop(meter);
        // Dropped: the ticker stops, and with it the only sender.
        assert_eq!(rx.recv().await, None);
    }
}
