//! Log lines on a terminal while a progress bar is drawn: every tracing line goes through the
//! bar (`ProgressBar::suspend`), so a line about a lost host or a retried page is printed above
//! the bar instead of over it. Without a bar (a pod, a pipe) lines go straight to stderr.

use std::io::Write;
use std::sync::RwLock;

use indicatif::ProgressBar;

/// The bar on the terminal now, if any.
static SHOWN: RwLock<Option<ProgressBar>> = RwLock::new(None);

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
        let write = || {
            let mut err = std::io::stderr().lock();
            // Nowhere to report a failed write to stderr.
            let _ = err.write_all(line.as_bytes());
            let _ = err.flush();
        };
        let bar = SHOWN.read().unwrap_or_else(|p| p.into_inner()).clone();
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }
}
