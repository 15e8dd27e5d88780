//! `sources import` on the command line: the library's streamed import, with progress by bytes
//! read, because a large fixture takes minutes and otherwise shows nothing until it ends.
//!
//! On a terminal a bar shows the bytes read of the file, the rate and the time left; elsewhere
//! (a pod) a log line every 10 s says the same. The import commits only at the end, so "read"
//! is not "written": the bar reaches the end a moment before the commit.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::Cli;
use crate::sources::{self, ImportReport};

/// A reader that counts the bytes read through it.
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Imports `path` into the store, showing progress on stderr.
pub(super) async fn import(
    cli: &Cli,
    store: &crate::store::Store,
    path: &Path,
) -> anyhow::Result<ImportReport> {
    let (file, size) = sources::open_fixture(path)?;
    let read = Arc::new(AtomicU64::new(0));
    let reader = Counted {
        inner: file,
        read: read.clone(),
    };
    let shown = if super::run::progress_wanted(cli) {
        let bar = ProgressBar::new(size);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {elapsed} [{bar:30}] {bytes}/{total_bytes} read ({bytes_per_sec}, {eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        let ticking = {
            let (bar, read) = (bar.clone(), read.clone());
            tokio::spawn(async move {
                loop {
                    bar.set_position(read.load(Ordering::Relaxed));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        Shown::Bar(bar, ticking)
    } else {
        let read = read.clone();
        Shown::Log(tokio::spawn(async move {
            let period = Duration::from_secs(10);
            let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                timer.tick().await;
                let bytes = read.load(Ordering::Relaxed);
                tracing::info!(
                    bytes_read = bytes,
                    bytes_total = size,
                    percent = percent(bytes, size),
                    "import progress"
                );
            }
        }))
    };
    let report = sources::import_reader(store, reader).await;
    match shown {
        Shown::Bar(bar, ticking) => {
            ticking.abort();
            bar.finish_and_clear();
        }
        Shown::Log(ticking) => ticking.abort(),
    }
    Ok(report?)
}

/// How progress is shown while the import runs.
enum Shown {
    Bar(ProgressBar, tokio::task::JoinHandle<()>),
    Log(tokio::task::JoinHandle<()>),
}

/// `done` of `total` as a whole percentage, at most 100 (100 for an empty file).
fn percent(done: u64, total: u64) -> u64 {
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
    fn the_reader_counts_what_passes_through_it() {
        let read = Arc::new(AtomicU64::new(0));
        let mut r = Counted {
            inner: std::io::Cursor::new(vec![7u8; 10_000]),
            read: read.clone(),
        };
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out.len(), 10_000);
        assert_eq!(read.load(Ordering::Relaxed), 10_000);
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
}
