//! The importer's writes (`sources import`): a chunk of a fixture's rows compared with what is
//! stored and the rest inserted with multi-row statements, on either dialect. The rows come
//! from the pure mapping (`package_executor_core::import_rows`); the pipeline that reads the file
//! and hands chunks over is the binary's (`sources::import`).

use package_executor_core::quote::shown;
use std::collections::HashMap;

use package_executor_core::fixture::FixtureError;
use package_executor_core::import_rows::{
    GenerationRow, InstallationRow, ProjectRows, RevisionRow, generation_conflict,
    installation_conflict, revision_conflict, unique_generations, unique_installations,
    unique_revisions,
};
use package_executor_core::model::Digest;
use sqlx::{QueryBuilder, Row};

use crate::error::input;
use crate::{Attempt, Dialect, Store, StoreError, on_conn};

/// Rows per multi-row statement: 7 columns × 1,000 rows stays within both dialects' limits on
/// bind parameters (65,535 on PostgreSQL, 32,766 on SQLite).
const ROWS_PER_STATEMENT: usize = 1_000;

/// SQLite's page cache during an import: 64 MiB instead of SQLite's default 2 MiB. One
/// transaction writes the whole file, and indexes keyed by digests take inserts all over
/// them; with the default cache their pages are spilled to the WAL and read back again and
/// again. 64 MiB is where the time stopped falling faster than the memory grew
/// (docs/benchmarks.md, "Figures that were code comments"); it is bounded whatever the file's
/// size.
const IMPORT_CACHE_SQLITE: &str = "PRAGMA cache_size = -65536";

/// SQLite's own default page cache (2,000 KiB), which the store's connections otherwise use.
const DEFAULT_CACHE_SQLITE: &str = "PRAGMA cache_size = -2000";

impl Attempt<'_> {
    /// Readies this transaction for an import: on SQLite a larger page cache (above), on
    /// PostgreSQL the heads' foreign key deferred (heads are inserted pointing at generations
    /// written just after them).
    pub async fn begin_import(&mut self) -> Result<(), StoreError> {
        match self.dialect() {
            Dialect::Sqlite => self.execute_text(IMPORT_CACHE_SQLITE).await,
            Dialect::Postgres => {
                self.execute_text(
                    "SET CONSTRAINTS ql3.package_installations_active_generation_fkey DEFERRED",
                )
                .await
            }
        }
    }

    /// Writes one chunk of an import; returns the rows inserted. A chunk the database refuses
    /// is written again a row at a time, so the error names the row (under a savepoint on
    /// PostgreSQL).
    pub async fn write_import_chunk(&mut self, chunk: &[ProjectRows]) -> Result<usize, StoreError> {
        write_chunk(self, chunk).await
    }
}

impl Store {
    /// Gives SQLite's connection its default page cache back after an import, for whatever
    /// runs next (`demo` builds snapshots on it). Best effort; a larger cache is only memory.
    pub async fn end_import(&self) {
        if self.dialect() != Dialect::Sqlite {
            return;
        }
        self.transaction(async |a| Ok(((), a.execute_text(DEFAULT_CACHE_SQLITE).await.is_ok())))
            .await
            .ok();
    }
}

/// Writes one chunk; on a refusal, writes it again a row at a time to name the row. Returns
/// the rows inserted. A duplicate key counts as a refusal here: every stored row was compared
/// first, so the key is one the fixture breaks (a package installed twice under two ids), or
/// a concurrent import's row, which the row-by-row pass then finds and compares. Any other
/// error (a full disk, a lost connection) is passed on as it is, never blamed on a row.
///
/// On PostgreSQL the chunk runs under a savepoint, because a refused statement aborts the whole
/// transaction. SQLite undoes only the refused statement and the transaction goes on, and
/// writing the chunk's rows again is harmless (rows already stored are compared, not inserted
/// twice), so there it needs none: a savepoint makes SQLite journal every page the chunk
/// touches, about a tenth of an import's time.
async fn write_chunk(a: &mut Attempt<'_>, chunk: &[ProjectRows]) -> Result<usize, StoreError> {
    let savepoint = a.dialect() == Dialect::Postgres;
    if savepoint {
        a.execute_text("SAVEPOINT import_chunk").await?;
    }
    match write_rows(a, chunk, ROWS_PER_STATEMENT).await {
        Ok(n) => {
            if savepoint {
                a.execute_text("RELEASE SAVEPOINT import_chunk").await?;
            }
            Ok(n)
        }
        Err(StoreError::Refused(refused) | StoreError::Duplicate(refused)) => {
            if savepoint {
                a.execute_text("ROLLBACK TO SAVEPOINT import_chunk").await?;
            }
            let mut inserted = 0;
            for p in chunk {
                inserted += write_rows(a, std::slice::from_ref(p), 1).await?;
            }
            if savepoint {
                // The chunk was undone and written again whole, a row at a time: a concurrent
                // import's rows, committed meanwhile, were found and compared.
                return Ok(inserted);
            }
            // Not expected on SQLite (one writer at a time): the rows went in one at a time
            // but not together, and the rows the chunk wrote before its refusal are uncounted.
            Err(StoreError::Other(format!(
                "the database refused a chunk of the fixture: {refused}; this is a bug, please report it"
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
            .map_err(|e| named(&format!("project {}", shown(ids[0])), e))?;
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
/// for whatever length came, a 1,000-row insert would be parsed anew every time, and SQLite
/// would compile the table's triggers into it again.
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

/// The rows of `rows` that are not stored yet; each stored one must pass `check` against its
/// stored columns (a fixture never changes an immutable row). The one shape of the three
/// compare-then-insert steps below, apart from their SQL.
fn unstored<'r, R, K: std::hash::Hash + Eq, S>(
    rows: &[&'r R],
    stored: &HashMap<K, S>,
    key: impl Fn(&R) -> K,
    check: impl Fn(&R, &S) -> Result<(), FixtureError>,
) -> Result<Vec<&'r R>, StoreError> {
    let mut missing = Vec::new();
    for r in rows {
        match stored.get(&key(r)) {
            Some(columns) => check(r, columns)?,
            None => missing.push(*r),
        }
    }
    Ok(missing)
}

/// Inside `on_conn!` with a database type: the rows of `$table` whose `$key_column` is one of `$rows`' keys
/// (one bind a row, repeats included, so the statement's shape follows the chunk's), as `$columns`.
macro_rules! select_by_keys {
    ($c:ident, $db:ident, $d:ident, $columns:expr, $table:literal, $key_column:literal, $rows:expr, |$r:ident| $bind:expr) => {{
        let mut b = QueryBuilder::<$db>::new(format!(
            "SELECT {} FROM {} WHERE {} IN (",
            $columns,
            crate::statement!(concat!("ql3.", $table)).text($d),
            $key_column
        ));
        let mut list = b.separated(", ");
        for $r in $rows {
            list.push_bind($bind);
        }
        b.push(")");
        b.build().fetch_all(&mut *$c).await?
    }};
}

/// Inside `on_conn!` with a database type: inserts `$rows` into `$table` (`$columns`), in statements of at most
/// [`ROWS_PER_STATEMENT`] rows of the few shapes [`statement_chunks`] makes.
macro_rules! insert_rows {
    ($c:ident, $db:ident, $d:ident, $table:literal, $columns:literal, $rows:expr, |$row:ident, $r:ident| $bind:expr) => {{
        let insert = format!(
            "INSERT INTO {} ({}) ",
            crate::statement!(concat!("ql3.", $table)).text($d),
            $columns
        );
        for part in statement_chunks($rows, ROWS_PER_STATEMENT) {
            let mut b = QueryBuilder::<$db>::new(insert.as_str());
            b.push_values(part, |mut $row, $r| {
                $bind;
            });
            b.build().execute(&mut *$c).await?;
        }
    }};
}

async fn insert_projects(a: &mut Attempt<'_>, ids: &[&str]) -> Result<usize, StoreError> {
    on_conn!(a, |c, d, Db| {
        let mut b = QueryBuilder::<Db>::new(
            crate::statement!("INSERT INTO ql3.projects (project_id) ").text(d),
        );
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
    on_conn!(a, |c, d, Db| {
        let found = select_by_keys!(
            c,
            Db,
            d,
            "installation_id, project_id, package_name",
            "package_installations",
            "installation_id",
            rows,
            |r| r.installation_id.as_str()
        );
        let mut stored = HashMap::new();
        for r in found {
            let id: String = r.try_get("installation_id")?;
            stored.insert(
                id,
                (
                    r.try_get::<String, _>("project_id")?,
                    r.try_get::<String, _>("package_name")?,
                ),
            );
        }
        let missing = unstored(
            rows,
            &stored,
            |r| r.installation_id.clone(),
            |r, (project, package)| installation_conflict(r, project, package),
        )?;
        if missing.is_empty() {
            return Ok(0);
        }
        if let [only] = missing.as_slice() {
            // One row, as when a refused chunk is written again row by row: a stored
            // installation of the same package under another id is named before the insert,
            // because on PostgreSQL nothing more can be read once an insert is refused.
            let other: Option<String> = sqlx::query_scalar(
                crate::statement!(
                    "SELECT i.installation_id FROM ql3.package_installations AS i
                     WHERE i.project_id = $1 AND i.package_name = $2"
                )
                .text(d),
            )
            .bind(only.project_id.as_str())
            .bind(only.package_name.as_str())
            .fetch_optional(&mut *c)
            .await?;
            if let Some(other) = other {
                return Err(input(format!(
                    "{}: the project already has this package, as installation {}; a project \
                     installs a package once, so use installation id {} in the fixture",
                    only.at,
                    shown(&other),
                    shown(&other)
                )));
            }
        }
        insert_rows!(
            c,
            Db,
            d,
            "package_installations",
            "installation_id, project_id, package_name, active_generation",
            &missing,
            |row, r| {
                row.push_bind(r.installation_id.as_str())
                    .push_bind(r.project_id.as_str())
                    .push_bind(r.package_name.as_str())
                    .push_bind(r.active)
            }
        );
        Ok(missing.len())
    })
}

/// Compares the stored revisions among `rows` by the digest of their bytes (computed by the
/// server on PostgreSQL, so stored bytes never travel back), then inserts the others.
async fn write_revisions(a: &mut Attempt<'_>, rows: &[&RevisionRow]) -> Result<usize, StoreError> {
    on_conn!(a, |c, d, Db| {
        let content = match d {
            Dialect::Postgres => "'sha256:' || encode(sha256(content), 'hex') AS content_digest",
            Dialect::Sqlite => "content",
        };
        let found = select_by_keys!(
            c,
            Db,
            d,
            format!("revision_digest, {content}"),
            "materialized_revisions",
            "revision_digest",
            rows,
            |r| r.key.as_str()
        );
        let mut stored = HashMap::new();
        for r in found {
            let key: String = r.try_get("revision_digest")?;
            let digest = match d {
                Dialect::Postgres => r.try_get::<String, _>("content_digest")?,
                Dialect::Sqlite => Digest::of(r.try_get::<&[u8], _>("content")?)
                    .as_str()
                    .to_owned(),
            };
            stored.insert(key, digest);
        }
        let missing = unstored(
            rows,
            &stored,
            |r| r.key.clone(),
            |r, digest| revision_conflict(r, digest),
        )?;
        if missing.is_empty() {
            return Ok(0);
        }
        insert_rows!(
            c,
            Db,
            d,
            "materialized_revisions",
            "revision_digest, content, byte_length",
            &missing,
            |row, r| {
                row.push_bind(r.key.as_str())
                    .push_bind(r.bytes.as_slice())
                    .push_bind(r.bytes.len() as i64)
            }
        );
        Ok(missing.len())
    })
}

/// Compares the stored generations among `rows` on their immutable columns, then inserts the
/// others.
async fn write_generations(
    a: &mut Attempt<'_>,
    rows: &[&GenerationRow],
) -> Result<usize, StoreError> {
    on_conn!(a, |c, d, Db| {
        let found = select_by_keys!(
            c,
            Db,
            d,
            "installation_id, generation, generation_digest, lock_digest, revision_digest, approved_permissions",
            "package_generations",
            "installation_id",
            rows,
            |r| r.installation_id.as_str()
        );
        let mut stored = HashMap::new();
        for r in found {
            let key: (String, i64) = (r.try_get("installation_id")?, r.try_get("generation")?);
            let columns: (String, String, String, String) = (
                r.try_get("generation_digest")?,
                r.try_get("lock_digest")?,
                r.try_get("revision_digest")?,
                r.try_get("approved_permissions")?,
            );
            stored.insert(key, columns);
        }
        let missing = unstored(
            rows,
            &stored,
            |r| (r.installation_id.clone(), r.generation),
            |r, (g, l, rd, p)| generation_conflict(r, (g, l, rd, p)),
        )?;
        if missing.is_empty() {
            return Ok(0);
        }
        insert_rows!(
            c,
            Db,
            d,
            "package_generations",
            "installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions",
            &missing,
            |row, r| {
                row.push_bind(r.installation_id.as_str())
                    .push_bind(r.generation)
                    .push_bind(r.status.as_str())
                    .push_bind(r.generation_digest.as_str())
                    .push_bind(r.lock_digest.as_str())
                    .push_bind(r.revision_digest.as_str())
                    .push_bind(r.approved_permissions.as_str())
            }
        );
        Ok(missing.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
