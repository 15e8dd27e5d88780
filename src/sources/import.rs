//! `sources import`: a fixture streamed into the source tables, in batches, in one transaction.
//!
//! A blocking task reads the file one project at a time ([`read_fixture`]), turns each project
//! into rows (digests computed, the one-active-generation rule checked) and hands batches of a
//! few thousand rows or a few MiB over a bounded channel; the writer appends each batch with
//! multi-row statements while the next is read. Memory follows the batch, never the file.
//!
//! Everything is written in one transaction, so an import is all or nothing: a bad project at
//! the end of the file, or a conflict with what is stored, leaves nothing written. Existing rows
//! are compared on their immutable columns (contract section 11), so importing a file twice
//! changes nothing. [`check_reader`] runs the same transaction and rolls it back (`--dry-run`).
//!
//! A multi-row statement that the database refuses (a format `CHECK`, a second installation of
//! a package) does not say which row was at fault. On a refusal the batch is therefore written
//! again one row at a time (on PostgreSQL after rolling back to the batch's savepoint), so the
//! error names the project, package and generation, as a person fixing the fixture needs.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::{BufReader, Read};

use sqlx::{QueryBuilder, Row};

use super::fixture::{FixtureProject, read_fixture};
use super::{generation_digest, input};
use crate::canonical;
use crate::model::Digest;
use crate::store::{Attempt, Dialect, Store, StoreError};

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Projects in the file.
    pub projects: usize,
    /// Rows inserted (0 on a repeated import).
    pub inserted: usize,
}

/// A batch is handed to the writer once it holds this many rows...
const BATCH_ROWS: usize = 2_000;
/// ...or this many revision bytes.
const BATCH_BYTES: usize = 8 << 20;
/// Rows per multi-row statement: 7 columns × 1,000 rows stays within both dialects' limits on
/// bind parameters (65,535 on PostgreSQL, 32,766 on SQLite).
const ROWS_PER_STATEMENT: usize = 1_000;
/// Batches read ahead of the writer.
const BATCHES_AHEAD: usize = 2;

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
    let (batches, mut received) = tokio::sync::mpsc::channel::<Vec<ProjectRows>>(BATCHES_AHEAD);
    let reading = tokio::task::spawn_blocking(move || {
        let mut batch = Vec::new();
        let (mut rows, mut bytes) = (0, 0);
        let stopped = || StoreError::Other("the import's writer stopped".into());
        let projects = read_fixture(BufReader::with_capacity(1 << 16, reader), |project| {
            let p = rows_of(project)?;
            rows += p.rows();
            bytes += p.revision_bytes();
            batch.push(p);
            if rows >= BATCH_ROWS || bytes >= BATCH_BYTES {
                (rows, bytes) = (0, 0);
                batches
                    .blocking_send(std::mem::take(&mut batch))
                    .map_err(|_| stopped())?;
            }
            Ok(())
        })?;
        if !batch.is_empty() {
            batches.blocking_send(batch).map_err(|_| stopped())?;
        }
        Ok::<_, StoreError>(projects)
    });

    let mut a = store.begin().await?;
    let written = async {
        if a.dialect() == Dialect::Sqlite {
            a.execute_text(IMPORT_CACHE_SQLITE).await?;
        }
        if a.dialect() == Dialect::Postgres {
            // Heads are inserted pointing at generations written just after them.
            a.execute_text(
                "SET CONSTRAINTS ql3.package_installations_active_generation_fkey DEFERRED",
            )
            .await?;
        }
        let mut inserted = 0;
        while let Some(batch) = received.recv().await {
            inserted += write_batch(&mut a, &batch).await?;
        }
        Ok::<_, StoreError>(inserted)
    }
    .await;
    // A failed writer closes the channel, so the reader stops at its next batch.
    drop(received);
    let read = reading
        .await
        .map_err(|e| StoreError::Other(format!("the fixture reader failed: {e}")));
    let result = match (written, read.and_then(|r| r)) {
        (Ok(inserted), Ok(projects)) => match finish {
            Finish::Commit => a.commit().await,
            Finish::RollBack => a.rollback().await,
        }
        .map(|()| ImportReport { projects, inserted }),
        // The writer's error first: the reader's is then only "the writer stopped".
        (Err(e), _) | (Ok(_), Err(e)) => {
            a.rollback().await.ok();
            Err(e)
        }
    };
    if store.dialect() == Dialect::Sqlite {
        // The connection goes back to the pool: give the cache back for whatever runs next
        // (`demo` builds snapshots on it). Best effort; a larger cache is only memory.
        if let Ok(mut a) = store.begin().await {
            if a.execute_text(DEFAULT_CACHE_SQLITE).await.is_ok() {
                a.commit().await.ok();
            } else {
                a.rollback().await.ok();
            }
        }
    }
    result
}

/// SQLite's page cache during an import: 64 MiB instead of SQLite's default 2 MiB. One
/// transaction writes the whole file, and indexes keyed by digests take inserts all over
/// them; with the default cache their pages were spilled to the WAL and read back again and
/// again (a 400 MB fixture wrote 8.7 GB and read 8.0 GB for a 613 MB database). Measured on
/// that fixture: 22.0–22.4 s and 30 MB RSS with 2 MiB, 20.8–21.1 s with 16 MiB, 18.8–18.9 s
/// and 98 MB with 64 MiB, 17.2–18.7 s and 310 MB with 256 MiB. The memory stays bounded
/// whatever the file's size.
const IMPORT_CACHE_SQLITE: &str = "PRAGMA cache_size = -65536";

/// SQLite's own default page cache (2,000 KiB), which the store's connections otherwise use.
const DEFAULT_CACHE_SQLITE: &str = "PRAGMA cache_size = -2000";

/// One project's rows, with digests computed and the fixture's own rules checked.
#[derive(Debug)]
struct ProjectRows {
    project_id: String,
    installations: Vec<InstallationRow>,
    revisions: Vec<RevisionRow>,
    generations: Vec<GenerationRow>,
}

#[derive(Debug, PartialEq, Eq)]
struct InstallationRow {
    /// Where it came from, for messages: `project P package N`.
    at: String,
    installation_id: String,
    project_id: String,
    package_name: String,
    /// The head of an installation this import creates.
    active: Option<i64>,
}

#[derive(Debug)]
struct RevisionRow {
    at: String,
    key: String,
    /// The digest of `bytes` (the key, unless the fixture overrides it).
    content_digest: String,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct GenerationRow {
    at: String,
    installation_id: String,
    generation: i64,
    status: String,
    generation_digest: String,
    lock_digest: String,
    revision_digest: String,
    approved_permissions: String,
}

impl GenerationRow {
    /// The columns that never change (status moves with activation and is not compared).
    fn immutable(&self) -> (&str, &str, &str, &str) {
        (
            &self.generation_digest,
            &self.lock_digest,
            &self.revision_digest,
            &self.approved_permissions,
        )
    }
}

impl ProjectRows {
    fn rows(&self) -> usize {
        1 + self.installations.len() + self.revisions.len() + self.generations.len()
    }

    fn revision_bytes(&self) -> usize {
        self.revisions.iter().map(|r| r.bytes.len()).sum()
    }
}

/// A project's rows (pure).
fn rows_of(p: FixtureProject) -> Result<ProjectRows, StoreError> {
    let mut out = ProjectRows {
        project_id: p.project_id,
        installations: Vec::new(),
        revisions: Vec::new(),
        generations: Vec::new(),
    };
    let empty = Digest::of(b"");
    for pkg in p.packages {
        let at = format!("project {} package {}", out.project_id, pkg.package_name);
        let mut active = None;
        for g in pkg.generations {
            let at = format!("{at} generation {}", g.generation);
            let bytes = match (g.revision, g.revision_text) {
                (Some(_), Some(_)) => {
                    return Err(input(format!(
                        "{at}: give revision or revisionText, not both"
                    )));
                }
                (Some(v), None) => Some(canonical::to_vec(&v)),
                (None, Some(t)) => Some(t.into_bytes()),
                (None, None) => None,
            };
            let content_digest = bytes.as_deref().map(Digest::of);
            let revision_digest = match (g.revision_digest, &content_digest) {
                (Some(d), _) => d,
                (None, Some(d)) => d.as_str().to_owned(),
                (None, None) => {
                    return Err(input(format!(
                        "{at}: without revision or revisionText, revisionDigest is required"
                    )));
                }
            };
            if let (Some(bytes), Some(content_digest)) = (bytes, content_digest) {
                out.revisions.push(RevisionRow {
                    at: at.clone(),
                    key: revision_digest.clone(),
                    content_digest: content_digest.as_str().to_owned(),
                    bytes,
                });
            }
            let lock_digest = g.lock_digest.unwrap_or_else(|| empty.as_str().to_owned());
            let generation_digest = g.generation_digest.unwrap_or_else(|| {
                generation_digest(
                    &pkg.installation_id,
                    g.generation,
                    &lock_digest,
                    &revision_digest,
                    &g.approved_permissions,
                )
                .as_str()
                .to_owned()
            });
            if g.status == "active" {
                if active.is_some() {
                    return Err(input(format!(
                        "{at}: more than one generation is active; at most one may be"
                    )));
                }
                active = Some(g.generation);
            }
            out.generations.push(GenerationRow {
                at,
                installation_id: pkg.installation_id.clone(),
                generation: g.generation,
                status: g.status,
                generation_digest,
                lock_digest,
                revision_digest,
                // Serializing strings cannot fail.
                approved_permissions: serde_json::to_string(&g.approved_permissions)
                    .unwrap_or_else(|_| "[]".into()),
            });
        }
        out.installations.push(InstallationRow {
            at,
            installation_id: pkg.installation_id,
            project_id: out.project_id.clone(),
            package_name: pkg.package_name,
            active,
        });
    }
    Ok(out)
}

/// Writes one batch; on a refusal, writes it again a row at a time to name the row. Returns
/// the rows inserted. A duplicate key counts as a refusal here: every stored row was compared
/// first, so the key is one the fixture breaks (a package installed twice under two ids), or
/// a concurrent import's row, which the row-by-row pass then finds and compares. Any other
/// error (a full disk, a lost connection) is passed on as it is, never blamed on a row.
///
/// On PostgreSQL the batch runs under a savepoint, because a refused statement aborts the whole
/// transaction. SQLite undoes only the refused statement and the transaction goes on, and
/// writing the batch's rows again is harmless (rows already stored are compared, not inserted
/// twice), so there it needs none: a savepoint makes SQLite journal every page the batch
/// touches, about a tenth of an import's time.
async fn write_batch(a: &mut Attempt<'_>, batch: &[ProjectRows]) -> Result<usize, StoreError> {
    let savepoint = a.dialect() == Dialect::Postgres;
    if savepoint {
        a.execute_text("SAVEPOINT import_batch").await?;
    }
    match write_rows(a, batch, ROWS_PER_STATEMENT).await {
        Ok(n) => {
            if savepoint {
                a.execute_text("RELEASE SAVEPOINT import_batch").await?;
            }
            Ok(n)
        }
        Err(StoreError::Refused(refused) | StoreError::Duplicate(refused)) => {
            if savepoint {
                a.execute_text("ROLLBACK TO SAVEPOINT import_batch").await?;
            }
            let mut inserted = 0;
            for p in batch {
                inserted += write_rows(a, std::slice::from_ref(p), 1).await?;
            }
            if savepoint {
                // The batch was undone and written again whole, a row at a time: a concurrent
                // import's rows, committed meanwhile, were found and compared.
                return Ok(inserted);
            }
            // Not expected on SQLite (one writer at a time): the rows went in one at a time
            // but not together, and the rows the batch wrote before its refusal are uncounted.
            Err(StoreError::Other(format!(
                "the database refused a batch of the fixture: {refused}; this is a bug, please report it"
            )))
        }
        Err(e) => Err(e),
    }
}

/// The rows of `projects`, in statements of at most `per_statement` rows; with one row per
/// statement, a refusal is named by its row.
async fn write_rows(
    a: &mut Attempt<'_>,
    projects: &[ProjectRows],
    per_statement: usize,
) -> Result<usize, StoreError> {
    let named = |at: &str, e: StoreError| match e {
        StoreError::Refused(m) | StoreError::Duplicate(m) if per_statement == 1 => input(format!(
            "{at}: the database refused the row: {m}; fix the fixture"
        )),
        other => other,
    };
    let mut inserted = 0;
    for chunk in statement_chunks(projects, per_statement) {
        let ids: Vec<&str> = chunk.iter().map(|p| p.project_id.as_str()).collect();
        inserted += insert_projects(a, &ids)
            .await
            .map_err(|e| named(&format!("project {}", ids[0]), e))?;
    }
    let installations = unique_installations(projects)?;
    let revisions = unique_revisions(projects)?;
    let generations = unique_generations(projects)?;
    for chunk in statement_chunks(&installations, per_statement) {
        inserted += write_installations(a, chunk)
            .await
            .map_err(|e| named(&chunk[0].at, e))?;
    }
    for chunk in statement_chunks(&revisions, per_statement) {
        inserted += write_revisions(a, chunk)
            .await
            .map_err(|e| named(&chunk[0].at, e))?;
    }
    for chunk in statement_chunks(&generations, per_statement) {
        inserted += write_generations(a, chunk)
            .await
            .map_err(|e| named(&chunk[0].at, e))?;
    }
    Ok(inserted)
}

/// `rows` in runs whose lengths come from a small fixed set (`max`, then powers of two), so
/// the statements built for them repeat and the connection prepares each shape once. Built
/// for whatever length came, a 1,000-row insert was parsed anew every time, and SQLite compiled
/// the table's triggers into it again: 7% of the SQLite import's writer (callgrind).
fn statement_chunks<T>(rows: &[T], max: usize) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = if rest.len() >= max {
            max
        } else {
            1 << rest.len().ilog2()
        };
        let (run, tail) = rest.split_at(n);
        rest = tail;
        Some(run)
    })
}

/// Each row once, by `key`, in order of first appearance; a second row with the same key must
/// pass `same` against the first (the conflict check used against stored rows, too).
fn unique_by<'a, R: 'a, K: std::hash::Hash + Eq>(
    rows: impl Iterator<Item = &'a R>,
    key: impl Fn(&'a R) -> K,
    same: impl Fn(&R, &R) -> Result<(), StoreError>,
) -> Result<Vec<&'a R>, StoreError> {
    let mut seen: HashMap<K, &R> = HashMap::new();
    let mut out = Vec::new();
    for row in rows {
        match seen.entry(key(row)) {
            Entry::Vacant(v) => {
                v.insert(row);
                out.push(row);
            }
            Entry::Occupied(o) => same(row, o.get())?,
        }
    }
    Ok(out)
}

/// The batch's installations, each once; the same id twice must describe the same row.
fn unique_installations(projects: &[ProjectRows]) -> Result<Vec<&InstallationRow>, StoreError> {
    unique_by(
        projects.iter().flat_map(|p| &p.installations),
        |r| r.installation_id.as_str(),
        |r, first| installation_conflict(r, &first.project_id, &first.package_name),
    )
}

fn installation_conflict(
    row: &InstallationRow,
    project: &str,
    package: &str,
) -> Result<(), StoreError> {
    if row.project_id == project && row.package_name == package {
        return Ok(());
    }
    Err(input(format!(
        "{}: installation {} already exists for project {project} package {package}; \
         installation ids are immutable, pick another id",
        row.at, row.installation_id
    )))
}

fn unique_revisions(projects: &[ProjectRows]) -> Result<Vec<&RevisionRow>, StoreError> {
    unique_by(
        projects.iter().flat_map(|p| &p.revisions),
        |r| r.key.as_str(),
        |r, first| revision_conflict(r, &first.content_digest),
    )
}

fn revision_conflict(row: &RevisionRow, stored_content: &str) -> Result<(), StoreError> {
    if row.content_digest == stored_content {
        return Ok(());
    }
    Err(input(format!(
        "{}: revision {} is already stored with other bytes; revisions are immutable",
        row.at, row.key
    )))
}

fn unique_generations(projects: &[ProjectRows]) -> Result<Vec<&GenerationRow>, StoreError> {
    unique_by(
        projects.iter().flat_map(|p| &p.generations),
        |r| (r.installation_id.as_str(), r.generation),
        |r, first| generation_conflict(r, first.immutable()),
    )
}

fn generation_conflict(
    row: &GenerationRow,
    stored: (&str, &str, &str, &str),
) -> Result<(), StoreError> {
    if row.immutable() == stored {
        return Ok(());
    }
    Err(input(format!(
        "{}: already stored with other digests or permissions; generations are immutable, \
         add a new generation instead",
        row.at
    )))
}

/// Runs `$body` with `$c` the connection, `$d` the dialect and `$db` the sqlx database type,
/// so that one query builder serves both dialects.
macro_rules! on_builder {
    ($a:ident, $c:ident, $d:ident, $db:ident => $body:expr) => {
        match $a {
            Attempt::Pg(tx) => {
                type $db = sqlx::Postgres;
                let $c = &mut **tx;
                let $d = Dialect::Postgres;
                $body
            }
            Attempt::Lite(tx) => {
                type $db = sqlx::Sqlite;
                let $c = &mut **tx;
                let $d = Dialect::Sqlite;
                $body
            }
        }
    };
}

fn table(d: Dialect, name: &str) -> String {
    match d {
        Dialect::Postgres => format!("ql3.{name}"),
        Dialect::Sqlite => name.to_owned(),
    }
}

async fn insert_projects(a: &mut Attempt<'_>, ids: &[&str]) -> Result<usize, StoreError> {
    on_builder!(a, c, d, Db => {
        let mut b = QueryBuilder::<Db>::new(format!("INSERT INTO {} (project_id) ", table(d, "projects")));
        b.push_values(ids, |mut row, id| {
            row.push_bind(*id);
        });
        b.push(" ON CONFLICT DO NOTHING");
        let done = b.build().execute(&mut *c).await?;
        Ok(done.rows_affected() as usize)
    })
}

/// Compares the stored installations among `rows`, then inserts the others.
async fn write_installations(
    a: &mut Attempt<'_>,
    rows: &[&InstallationRow],
) -> Result<usize, StoreError> {
    on_builder!(a, c, d, Db => {
        let mut b = QueryBuilder::<Db>::new(format!(
            "SELECT installation_id, project_id, package_name FROM {} WHERE installation_id IN (",
            table(d, "package_installations")
        ));
        let mut list = b.separated(", ");
        for r in rows {
            list.push_bind(r.installation_id.as_str());
        }
        b.push(")");
        let mut stored = HashMap::new();
        for r in b.build().fetch_all(&mut *c).await? {
            let id: String = r.try_get("installation_id")?;
            stored.insert(id, (r.try_get::<String, _>("project_id")?, r.try_get::<String, _>("package_name")?));
        }
        let mut missing = Vec::new();
        for r in rows {
            match stored.get(&r.installation_id) {
                Some((project, package)) => installation_conflict(r, project, package)?,
                None => missing.push(*r),
            }
        }
        if missing.is_empty() {
            return Ok(0);
        }
        if let [only] = missing.as_slice() {
            // One row, as when a refused batch is written again row by row: a stored
            // installation of the same package under another id is named before the insert,
            // because on PostgreSQL nothing more can be read once an insert is refused.
            let other: Option<String> = sqlx::query_scalar(super::q(
                d,
                "SELECT i.installation_id FROM ql3.package_installations AS i
                 WHERE i.project_id = $1 AND i.package_name = $2",
            ))
            .bind(only.project_id.as_str())
            .bind(only.package_name.as_str())
            .fetch_optional(&mut *c)
            .await?;
            if let Some(other) = other {
                return Err(input(format!(
                    "{}: the project already has this package, as installation {other}; a project \
                     installs a package once, so use installation id {other} in the fixture",
                    only.at
                )));
            }
        }
        let insert = format!(
            "INSERT INTO {} (installation_id, project_id, package_name, active_generation) ",
            table(d, "package_installations")
        );
        for part in statement_chunks(&missing, ROWS_PER_STATEMENT) {
            let mut b = QueryBuilder::<Db>::new(insert.as_str());
            b.push_values(part, |mut row, r| {
                row.push_bind(r.installation_id.as_str())
                    .push_bind(r.project_id.as_str())
                    .push_bind(r.package_name.as_str())
                    .push_bind(r.active);
            });
            b.build().execute(&mut *c).await?;
        }
        Ok(missing.len())
    })
}

/// Compares the stored revisions among `rows` by the digest of their bytes (computed by the
/// server on PostgreSQL, so stored bytes never travel back), then inserts the others.
async fn write_revisions(a: &mut Attempt<'_>, rows: &[&RevisionRow]) -> Result<usize, StoreError> {
    on_builder!(a, c, d, Db => {
        let content = match d {
            Dialect::Postgres => "'sha256:' || encode(sha256(content), 'hex') AS content_digest",
            Dialect::Sqlite => "content",
        };
        let mut b = QueryBuilder::<Db>::new(format!(
            "SELECT revision_digest, {content} FROM {} WHERE revision_digest IN (",
            table(d, "materialized_revisions")
        ));
        let mut list = b.separated(", ");
        for r in rows {
            list.push_bind(r.key.as_str());
        }
        b.push(")");
        let mut stored = HashMap::new();
        for r in b.build().fetch_all(&mut *c).await? {
            let key: String = r.try_get("revision_digest")?;
            let digest = match d {
                Dialect::Postgres => r.try_get::<String, _>("content_digest")?,
                Dialect::Sqlite => Digest::of(r.try_get::<&[u8], _>("content")?).as_str().to_owned(),
            };
            stored.insert(key, digest);
        }
        let mut missing = Vec::new();
        for r in rows {
            match stored.get(&r.key) {
                Some(digest) => revision_conflict(r, digest)?,
                None => missing.push(*r),
            }
        }
        if missing.is_empty() {
            return Ok(0);
        }
        let insert = format!(
            "INSERT INTO {} (revision_digest, content, byte_length) ",
            table(d, "materialized_revisions")
        );
        for part in statement_chunks(&missing, ROWS_PER_STATEMENT) {
            let mut b = QueryBuilder::<Db>::new(insert.as_str());
            b.push_values(part, |mut row, r| {
                row.push_bind(r.key.as_str())
                    .push_bind(r.bytes.as_slice())
                    .push_bind(r.bytes.len() as i64);
            });
            b.build().execute(&mut *c).await?;
        }
        Ok(missing.len())
    })
}

/// Compares the stored generations among `rows` on their immutable columns, then inserts the
/// others.
async fn write_generations(
    a: &mut Attempt<'_>,
    rows: &[&GenerationRow],
) -> Result<usize, StoreError> {
    on_builder!(a, c, d, Db => {
        let mut b = QueryBuilder::<Db>::new(format!(
            "SELECT installation_id, generation, generation_digest, lock_digest, revision_digest, \
             approved_permissions FROM {} WHERE installation_id IN (",
            table(d, "package_generations")
        ));
        let mut list = b.separated(", ");
        // One id a row, repeats included, so that the statement's shape follows the chunk's.
        for r in rows {
            list.push_bind(r.installation_id.as_str());
        }
        b.push(")");
        let mut stored = HashMap::new();
        for r in b.build().fetch_all(&mut *c).await? {
            let key: (String, i64) = (r.try_get("installation_id")?, r.try_get("generation")?);
            let columns: (String, String, String, String) = (
                r.try_get("generation_digest")?,
                r.try_get("lock_digest")?,
                r.try_get("revision_digest")?,
                r.try_get("approved_permissions")?,
            );
            stored.insert(key, columns);
        }
        let mut missing = Vec::new();
        for r in rows {
            match stored.get(&(r.installation_id.clone(), r.generation)) {
                Some((g, l, rd, p)) => generation_conflict(r, (g, l, rd, p))?,
                None => missing.push(*r),
            }
        }
        if missing.is_empty() {
            return Ok(0);
        }
        let insert = format!(
            "INSERT INTO {} (installation_id, generation, status, generation_digest, lock_digest, \
             revision_digest, approved_permissions) ",
            table(d, "package_generations")
        );
        for part in statement_chunks(&missing, ROWS_PER_STATEMENT) {
            let mut b = QueryBuilder::<Db>::new(insert.as_str());
            b.push_values(part, |mut row, r| {
                row.push_bind(r.installation_id.as_str())
                    .push_bind(r.generation)
                    .push_bind(r.status.as_str())
                    .push_bind(r.generation_digest.as_str())
                    .push_bind(r.lock_digest.as_str())
                    .push_bind(r.revision_digest.as_str())
                    .push_bind(r.approved_permissions.as_str());
            });
            b.build().execute(&mut *c).await?;
        }
        Ok(missing.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::parse_fixture;

    #[test]
    fn statement_chunks_cover_the_rows_in_few_shapes() {
        let mut shapes = std::collections::BTreeSet::new();
        for n in 0..2_600 {
            let rows: Vec<usize> = (0..n).collect();
            let runs: Vec<&[usize]> = statement_chunks(&rows, ROWS_PER_STATEMENT).collect();
            assert_eq!(runs.concat(), rows, "{n} rows, in order, each once");
            for run in &runs {
                assert!(!run.is_empty() && run.len() <= ROWS_PER_STATEMENT);
                shapes.insert(run.len());
            }
            assert!(statement_chunks(&rows, 1).all(|run| run.len() == 1));
        }
        // 1,000 and the powers of two below it: eleven statement shapes a kind of row.
        let expected: std::collections::BTreeSet<usize> = std::iter::once(ROWS_PER_STATEMENT)
            .chain((0..10).map(|k| 1 << k))
            .collect();
        assert_eq!(shapes, expected);
    }

    fn rows(text: &str) -> Result<Vec<ProjectRows>, StoreError> {
        parse_fixture(text.as_bytes())?
            .projects
            .into_iter()
            .map(rows_of)
            .collect()
    }

    #[test]
    fn the_fixtures_own_rules_are_checked_before_anything_is_written() {
        let two_active = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[
            {"generation":1,"status":"active","revisionText":"x"},{"generation":2,"status":"active","revisionText":"y"}]}]}]}"#;
        let err = rows(two_active).unwrap_err().to_string();
        assert!(
            err.contains("project p package a generation 2: more than one generation is active"),
            "{err}"
        );
        let no_digest = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[
            {"generation":1,"status":"active"}]}]}]}"#;
        assert!(
            rows(no_digest)
                .unwrap_err()
                .to_string()
                .contains("revisionDigest is required")
        );
        let both = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[
            {"generation":1,"status":"active","revision":{},"revisionText":"{}"}]}]}]}"#;
        assert!(rows(both).unwrap_err().to_string().contains("not both"));
    }

    #[test]
    fn the_same_row_twice_in_a_batch_is_one_row_and_a_different_one_is_a_conflict() {
        let text = r#"{"schema":"package-executor/fixture@v1","projects":[
            {"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[{"generation":1,"status":"active","revisionText":"x"}]}]},
            {"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[{"generation":1,"status":"active","revisionText":"x"}]}]},
            {"projectId":"q","packages":[{"packageName":"a","installationId":"j","generations":[{"generation":1,"status":"active","revisionText":"x"}]}]}]}"#;
        let batch = rows(text).unwrap();
        assert_eq!(unique_installations(&batch).unwrap().len(), 2);
        assert_eq!(unique_revisions(&batch).unwrap().len(), 1);
        assert_eq!(unique_generations(&batch).unwrap().len(), 2);
        let moved = text.replacen(
            r#""projectId":"q","packages":[{"packageName":"a","installationId":"j""#,
            r#""projectId":"q","packages":[{"packageName":"a","installationId":"i""#,
            1,
        );
        let err = unique_installations(&rows(&moved).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "project q package a: installation i already exists for project p package a"
            ),
            "{err}"
        );
        let other_bytes = text.replacen(r#""revisionText":"x"}]}]},"#, r#""revisionText":"x","revisionDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}]},"#, 1)
            .replacen(r#""revisionText":"x"}]}]},"#, r#""revisionText":"y","revisionDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}]},"#, 1);
        let err = unique_revisions(&rows(&other_bytes).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("already stored with other bytes"), "{err}");
    }
}
