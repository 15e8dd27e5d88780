//! The terminal while a progress bar is drawn. Every line written to it (tracing's log lines,
//! the outcomes a run reports, `verify`'s failures) goes through [`above_bar`], which clears the
//! bar, writes, and redraws it, so that a line about a lost host or a retried page is printed
//! above the bar instead of over it. Without a bar (a pod, a pipe) lines go straight out.
//!
//! indicatif's `ProgressBar::suspend` holds the bar's state lock while its closure runs, and
//! that lock is not re-entrant: a log event raised inside a suspended closure (an outcome
//! logged while the bar was cleared for it) would wait for it for ever, and the bar's ticker
//! thread behind it. So [`above_bar`] clears the bar once per thread: a line written while this
//! thread already has the bar out of the way is written straight away.

use std::cell::Cell;
use std::io::Write;
use std::sync::RwLock;

use indicatif::ProgressBar;

/// The bar on the terminal now, if any.
static SHOWN: RwLock<Option<ProgressBar>> = RwLock::new(None);

thread_local! {
    /// Whether this thread is inside [`above_bar`]: the bar is already cleared (and its lock
    /// held) for it.
    static CLEARED: Cell<bool> = const { Cell::new(false) };
}

/// Routes log lines through `bar` until the guard drops.
pub(super) fn show(bar: &ProgressBar) -> Shown {
    *SHOWN.write().unwrap_or_else(|p| p.into_inner()) = Some(bar.clone());
    Shown
}

/// While it lives, log lines go through the bar given to [`show`].
#[derive(Debug)]
pub(super) struct Shown;

impl Drop for Shown {
    fn drop(&mut self) {
        *SHOWN.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Runs `f`, which writes lines to the terminal, with the bar shown now (if any) cleared off
/// the screen, and redraws the bar after. Safe to nest, and to call from any thread.
pub(crate) fn above_bar<T>(f: impl FnOnce() -> T) -> T {
    if CLEARED.get() {
        return f();
    }
    let bar = SHOWN.read().unwrap_or_else(|p| p.into_inner()).clone();
    let Some(bar) = bar else { return f() };
    /// Marks this thread's bar as back on the screen, also when `f` unwinds.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            CLEARED.set(false);
        }
    }
    bar.suspend(|| {
        CLEARED.set(true);
        let _restore = Restore;
        f()
    })
}

/// The tracing writer: one line per event, written whole when the event is done.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line(Vec::with_capacity(256))
    }
}

/// One event's text, written to stderr when dropped.
#[derive(Debug)]
pub struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        // Below every filter: whatever a filter lets through is redacted here.
        let line = crate::store::redact_text(&String::from_utf8_lossy(&self.0));
        above_bar(|| {
            let mut err = std::io::stderr().lock();
            // Nowhere to report a failed write to stderr.
            let _ = err.write_all(line.as_bytes());
            let _ = err.flush();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deadlock `demo` met on a terminal: an outcome logged while the bar was cleared to
    /// print it. Run on a thread of its own so that a regression fails on the timeout instead of
    /// hanging the test binary.
    #[test]
    fn a_line_written_while_the_bar_is_cleared_does_not_wait_for_the_bar() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let bar = ProgressBar::hidden();
            let shown = show(&bar);
            let nested = above_bar(|| above_bar(|| above_bar(|| 42)));
            drop(shown);
            let _ = done.send(nested);
        });
        let got = finished.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(got, Ok(42), "nested writes above the bar hung");
        // And the thread is no longer marked as having the bar cleared.
        assert!(!CLEARED.get());
    }
}
