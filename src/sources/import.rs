//! `sources import`: a fixture streamed into the source tables, in chunks, in one transaction.
//!
//! A blocking task reads the file one project at a time ([`read_fixture`]), turns each project
//! into rows (digests computed, the one-active-generation rule checked) and hands chunks of a
//! few thousand rows or a few MiB over a bounded channel; the writer appends each chunk with
//! multi-row statements while the next is read. Memory follows the chunk, never the file.
//!
//! Everything is written in one transaction, so an import is all or nothing: a bad project at
//! the end of the file, or a conflict with what is stored, leaves nothing written. Existing rows
//! are compared on their immutable columns (contract section 11), so importing a file twice
//! changes nothing. [`check_reader`] runs the same transaction and rolls it back (`--dry-run`).
//!
//! A multi-row statement that the database refuses (a format `CHECK`, a second installation of
//! a package) does not say which row was at fault. On a refusal the chunk is therefore written
//! again one row at a time (on PostgreSQL after rolling back to the chunk's savepoint), so the
//! error names the project, package and generation, as a person fixing the fixture needs.

use std::io::{BufReader, Read};

use package_executor_core::fixture::read_fixture;
use package_executor_core::import_rows::{ProjectRows, rows_of};

use crate::store::{Store, StoreError, answered};

fn input(msg: impl Into<String>) -> StoreError {
    StoreError::Input(msg.into())
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Projects in the file.
    pub projects: usize,
    /// Rows inserted (0 on a repeated import).
    pub inserted: usize,
}

/// A chunk is handed to the writer once it holds this many rows...
const CHUNK_ROWS: usize = 2_000;
/// ...or this many revision bytes.
const CHUNK_BYTES: usize = 8 << 20;
/// Chunks read ahead of the writer.
const CHUNKS_AHEAD: usize = 2;

/// Imports a fixture file.
pub async fn import_file(
    store: &Store,
    path: &std::path::Path,
) -> Result<ImportReport, StoreError> {
    let (file, _) = open_fixture(path)?;
    import_reader(store, file).await
}

/// Opens a fixture file for [`import_reader`]; returns it with its size in bytes, so that a
/// caller can show how far the import has read.
pub fn open_fixture(path: &std::path::Path) -> Result<(std::fs::File, u64), StoreError> {
    let cannot = |e: std::io::Error| {
        input(format!(
            "cannot read {}: {e}; check the path, and that this process may read the file",
            path.display()
        ))
    };
    let file = std::fs::File::open(path).map_err(cannot)?;
    let size = file.metadata().map_err(cannot)?.len();
    Ok((file, size))
}

/// Imports a fixture held in memory.
pub async fn import_bytes(store: &Store, bytes: &[u8]) -> Result<ImportReport, StoreError> {
    import_reader(store, std::io::Cursor::new(bytes.to_vec())).await
}

/// Imports a fixture read from `reader`: all or nothing, and idempotent.
pub async fn import_reader<R: Read + Send + 'static>(
    store: &Store,
    reader: R,
) -> Result<ImportReport, StoreError> {
    import_or_check(store, reader, Finish::Commit).await
}

/// Checks a fixture read from `reader` as [`import_reader`] would import it, against every
/// constraint and every stored row, then rolls back: nothing is written. The report counts the
/// rows an import would insert now.
pub async fn check_reader<R: Read + Send + 'static>(
    store: &Store,
    reader: R,
) -> Result<ImportReport, StoreError> {
    import_or_check(store, reader, Finish::RollBack).await
}

/// How an import's transaction ends once every row went in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Finish {
    Commit,
    RollBack,
}

async fn import_or_check<R: Read + Send + 'static>(
    store: &Store,
    reader: R,
    finish: Finish,
) -> Result<ImportReport, StoreError> {
    let (chunks, mut received) = tokio::sync::mpsc::channel::<Vec<ProjectRows>>(CHUNKS_AHEAD);
    let reading = tokio::task::spawn_blocking(move || {
        let mut chunk = Vec::new();
        let (mut rows, mut bytes) = (0, 0);
        let stopped = || StoreError::Other("the import's writer stopped".into());
        let projects = read_fixture(BufReader::with_capacity(1 << 16, reader), |project| {
            let p = rows_of(project)?;
            rows += p.rows();
            bytes += p.revision_bytes();
            chunk.push(p);
            if rows >= CHUNK_ROWS || bytes >= CHUNK_BYTES {
                (rows, bytes) = (0, 0);
                chunks
                    .blocking_send(std::mem::take(&mut chunk))
                    .map_err(|_| stopped())?;
            }
            Ok::<_, StoreError>(())
        })?;
        if !chunk.is_empty() {
            chunks.blocking_send(chunk).map_err(|_| stopped())?;
        }
        Ok::<_, StoreError>(projects)
    });

    let limit = store.answer_timeout();
    let result = store
        .transaction(async move |a| {
            let written = async {
                answered(limit, a.begin_import()).await?;
                let mut inserted = 0;
                while let Some(chunk) = received.recv().await {
                    inserted += a.write_import_chunk(&chunk).await?;
                }
                Ok::<_, StoreError>(inserted)
            }
            .await;
            // A failed writer closes the channel, so the reader stops at its next chunk.
            drop(received);
            let read = reading
                .await
                .map_err(|e| StoreError::Other(format!("the fixture reader failed: {e}")));
            match (written, read.and_then(|r| r)) {
                (Ok(inserted), Ok(projects)) => Ok((
                    ImportReport { projects, inserted },
                    finish == Finish::Commit,
                )),
                // The writer's error first: the reader's is then only "the writer stopped".
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            }
        })
        .await;
    // The connection goes back to the pool with the store's own settings.
    store.end_import().await;
    result
}
