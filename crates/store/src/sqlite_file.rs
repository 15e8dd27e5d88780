//! What a SQLite URL names, checked before the file is opened for writing: a command must never
//! change a file it has not recognised as package-executor's. Opening a file read-write with
//! the executor's settings switches it to WAL mode and creates `-wal` and `-shm` beside it, so
//! another application's database, a zero-byte file or `/dev/null` would be changed by a mere
//! `current`. Each thing that is not our file is refused with what to fix: a configuration
//! error (exit 1: no retry heals it), or "not migrated" (exit 8) where `migrate` is the fix.

use std::io::Read as _;
use std::path::Path;

use sqlx::ConnectOptions as _;
use sqlx::sqlite::SqliteConnectOptions;

use crate::StoreError;

/// How a command may use the SQLite file its URL names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SqliteUse {
    /// Create the file if it is missing, and set up an empty one (`migrate`, `demo`).
    #[default]
    Create,
    /// Only a file package-executor migrated: anything else is refused before it is opened
    /// for writing.
    Existing,
}

/// SQLite's file header: the first 16 bytes of every database file.
const HEADER: &[u8; 16] = b"SQLite format 3\0";

/// The path and the query of a SQLite URL, as written (`sqlite://PATH?QUERY`).
pub(crate) fn path_in(url: &str) -> (&str, &str) {
    let rest = url.trim_start_matches("sqlite:");
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    rest.split_once('?').unwrap_or((rest, ""))
}

/// The file a SQLite URL names, as SQLite will open it (`None` for another dialect's URL, one
/// that does not parse, or an in-memory database). The shell keeps its output files off it.
pub fn file_of(url: &str) -> Option<std::path::PathBuf> {
    use std::str::FromStr as _;
    if crate::Dialect::of_url(url) != Some(crate::Dialect::Sqlite) || is_in_memory(url) {
        return None;
    }
    let opts = SqliteConnectOptions::from_str(url).ok()?;
    Some(opts.get_filename().to_path_buf())
}

/// The files SQLite keeps beside a database file: its write-ahead log, the log's shared-memory
/// index and the rollback journal. Each holds part of the database.
pub const COMPANION_SUFFIXES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Whether a SQLite URL names an in-memory database (`sqlite::memory:`, `sqlite://`,
/// `?mode=memory`), which has no file and lasts only as long as its connections.
fn is_in_memory(url: &str) -> bool {
    let (path, query) = path_in(url);
    path.is_empty()
        || path == ":memory:"
        || path.starts_with("file::memory:")
        || query.split('&').any(|p| p == "mode=memory")
}

/// Refuses what is not ours to write (see the module's comment), and a database with no file;
/// `Ok` when the connection to `path`, the file `url` names, may go ahead.
pub(crate) async fn check(url: &str, path: &Path, usage: SqliteUse) -> Result<(), StoreError> {
    if is_in_memory(url) {
        return Err(StoreError::Config(
            "an in-memory SQLite database (sqlite::memory:, or a URL with no path) lasts only \
             as long as the command that opens it: point DATABASE_URL at a file \
             (sqlite://package-executor.db)"
                .to_owned(),
        ));
    }
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match usage {
                SqliteUse::Create => Ok(()),
                SqliteUse::Existing => Err(StoreError::NotMigrated(format!(
                    "there is no SQLite file at {shown} (check DATABASE_URL)"
                ))),
            };
        }
        Err(e) => {
            return Err(StoreError::Config(format!(
                "cannot read the SQLite file {shown}: {e}; check DATABASE_URL"
            )));
        }
    };
    if meta.is_dir() {
        return Err(StoreError::Config(format!(
            "{shown} is a directory, not a SQLite file; point DATABASE_URL at a file in it \
             (sqlite://{shown}/package-executor.db)"
        )));
    }
    if !meta.is_file() {
        return Err(StoreError::Config(format!(
            "{shown} is not a regular file (a device, a pipe or a socket); point DATABASE_URL \
             at package-executor's own SQLite file"
        )));
    }
    if meta.len() == 0 {
        return match usage {
            SqliteUse::Create => Ok(()),
            SqliteUse::Existing => Err(StoreError::NotMigrated(format!(
                "the SQLite file {shown} is empty"
            ))),
        };
    }
    let mut header = [0u8; 16];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut header)) {
        Ok(()) if &header == HEADER => {}
        Err(e) if e.kind() != std::io::ErrorKind::UnexpectedEof => {
            return Err(StoreError::Config(format!(
                "cannot read the SQLite file {shown}: {e}; check DATABASE_URL and the file's \
                 permissions"
            )));
        }
        _ => {
            return Err(StoreError::Config(format!(
                "{shown} is not a SQLite database (it does not start with SQLite's header); \
                 point DATABASE_URL at package-executor's own file"
            )));
        }
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        return Err(StoreError::Config(format!(
            "the SQLite file {shown} cannot be written by this process ({e}); make it and its \
             directory writable, or point DATABASE_URL at a writable copy"
        )));
    }
    if !is_ours(path).await? {
        return Err(StoreError::Config(format!(
            "{shown} is another application's SQLite database (it has tables and no \
             package-executor schema); point DATABASE_URL at a file of package-executor's own"
        )));
    }
    Ok(())
}

/// Whether a SQLite database is ours, or has no tables at all: read on a read-only
/// connection that sets no pragma, so nothing of the file changes.
async fn is_ours(path: &Path) -> Result<bool, StoreError> {
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await
        .map_err(StoreError::from_sqlite_open)?;
    let (tables, ours): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COALESCE(SUM(name = 'schema_migrations'), 0) FROM sqlite_master \
         WHERE type = 'table'",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(StoreError::from_sqlite_open)?;
    let _ = sqlx::Connection::close(conn).await;
    Ok(tables == 0 || ours > 0)
}
