//! `sources import` on the command line: the library's streamed import (or, with `--dry-run`,
//! its check that rolls back) of a file or of standard input (`-`), with progress by bytes
//! read, because a large fixture takes minutes and otherwise shows nothing until it ends.
//!
//! On a terminal a bar shows the bytes read of the file, the rate and the time left; elsewhere
//! (a pod) an `import progress` log line every 10 s says the same. The import commits only at
//! the end, so "read" is not "written": the bar reaches the end a moment before the commit.

use super::meter::{Counter, Meter, percent};
use crate::cli::Cli;
use crate::sources::{self, ImportReport};
use std::io::Read;
use std::path::Path;

/// A reader that counts the bytes read through it.
struct Counted<R> {
    inner: R,
    read: Counter,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.add(n as u64);
        Ok(n)
    }
}

/// Imports `path` (`-`: standard input) into the store, or only checks it with `dry_run`,
/// showing progress on stderr.
pub(super) async fn import(
    cli: &Cli,
    store: &crate::store::Store,
    path: &Path,
    dry_run: bool,
) -> anyhow::Result<ImportReport> {
    // `-` is standard input (a fixture piped from another command), whose size is unknown.
    let (input, size): (Box<dyn Read + Send>, Option<u64>) = if path == Path::new("-") {
        (Box::new(std::io::stdin()), None)
    } else {
        let (file, size) = sources::open_fixture(path)?;
        (Box::new(file), Some(size))
    };
    let template = match size {
        Some(_) => {
            "{spinner} {elapsed} [{bar:30}] {bytes}/{total_bytes} read ({bytes_per_sec}, {eta} left)"
        }
        None => "{spinner} {elapsed} {bytes} read ({bytes_per_sec})",
    };
    let meter = Meter::start(
        super::progress::progress_wanted(cli),
        size,
        template,
        move |read| {
            tracing::info!(
                bytes_read = read,
                bytes_total = size,
                percent = size.map(|total| percent(read, total)),
                "import progress"
            );
        },
    );
    let reader = Counted {
        inner: input,
        read: meter.count(),
    };
    let report = if dry_run {
        sources::check_reader(store, reader).await?
    } else {
        sources::import_reader(store, reader).await?
    };
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_counts_what_passes_through_it() {
        let read = Counter::default();
        let mut r = Counted {
            inner: std::io::Cursor::new(vec![7u8; 10_000]),
            read: read.clone(),
        };
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out.len(), 10_000);
        assert_eq!(read.get(), 10_000);
    }
}
