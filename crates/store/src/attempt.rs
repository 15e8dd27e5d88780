//! One attempt: one connection, one READ COMMITTED transaction. Every query the coordinator and
//! the commands make runs through here, so both dialects share one text per query.

use std::collections::HashMap;

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, Postgres, Row, Sqlite, Transaction};

use super::queries::{Current, CurrentSnapshot, SnapshotHead, StoredSnapshot};
use super::rows::{Decoded, SnapshotSource};
use super::sql;
use super::{Dialect, ObservedHead, StoreError};
use package_executor_core::planner::Snapshot;
use package_executor_core::rejection::Rejection;
use package_executor_core::source_key::source_key;

/// An open transaction on one connection.
#[derive(Debug)]
pub enum Attempt<'c> {
    /// PostgreSQL.
    Pg(Transaction<'c, Postgres>),
    /// SQLite.
    Lite(Transaction<'c, Sqlite>),
}

/// A row of either dialect.
#[derive(Debug)]
enum RowOf {
    Pg(PgRow),
    Lite(SqliteRow),
}

/// One revision's bytes, borrowed from the row they arrived in rather than copied out of it.
///
/// A revision can be 24 MiB. On PostgreSQL the row's bytes are a slice of the connection's
/// read buffer, and on SQLite a value SQLite already copied once; decoding into a `Vec<u8>`
/// would hold the revision a second time for as long as it is parsed.
#[derive(Debug)]
pub struct RevisionBytes {
    row: RowOf,
    len: usize,
}

impl RevisionBytes {
    fn new(row: RowOf) -> Result<Self, StoreError> {
        let len = match &row {
            RowOf::Pg(r) => r.try_get::<&[u8], _>(0)?.len(),
            RowOf::Lite(r) => r.try_get::<&[u8], _>(0)?.len(),
        };
        Ok(Self { row, len })
    }

    /// The bytes.
    pub fn bytes(&self) -> Result<&[u8], StoreError> {
        Ok(match &self.row {
            RowOf::Pg(r) => r.try_get::<&[u8], _>(0)?,
            RowOf::Lite(r) => r.try_get::<&[u8], _>(0)?,
        })
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Which projects a pass of `run` looks at (contract section 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// The projects marked in the pending index: what changed since they were last dealt with.
    #[default]
    Marked,
    /// Every project, each proven current or not (`run --full-scan`, the periodic sweep).
    Full,
}

/// Runs `$body` with `$c` bound to the connection and `$d` to the dialect, for either arm, so
/// one query text and one row mapping serve both dialects; with a third name, `$db` is also
/// the arm's sqlx database type, so one query builder serves both. Written like a closure
/// (`on_conn!(a, |c, d| { … })`) so that rustfmt formats the body; it is not one: the body is
/// compiled once per arm, against that arm's connection type.
macro_rules! on_conn {
    ($self:ident, |$c:ident, $d:ident| $body:expr) => {
        $crate::attempt::on_conn!($self, |$c, $d, _Db| $body)
    };
    ($self:ident, |$c:ident, $d:ident, $db:ident| $body:expr) => {
        match $self {
            Attempt::Pg(tx) => {
                #[allow(dead_code)]
                type $db = sqlx::Postgres;
                let $c = &mut **tx;
                let $d = $crate::Dialect::Postgres;
                $body
            }
            Attempt::Lite(tx) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                let $c = &mut **tx;
                let $d = $crate::Dialect::Sqlite;
                $body
            }
        }
    };
}

pub(crate) use on_conn;

impl Attempt<'_> {
    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            Attempt::Pg(_) => Dialect::Postgres,
            Attempt::Lite(_) => Dialect::Sqlite,
        }
    }

    /// Commits.
    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Attempt::Pg(tx) => tx.commit().await?,
            Attempt::Lite(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Rolls back.
    pub async fn rollback(self) -> Result<(), StoreError> {
        match self {
            Attempt::Pg(tx) => tx.rollback().await?,
            Attempt::Lite(tx) => tx.rollback().await?,
        }
        Ok(())
    }

    /// Runs one statement of fixed text, without parameters or rows (`SAVEPOINT`, `SET`).
    pub async fn execute_text(&mut self, text: &'static str) -> Result<(), StoreError> {
        on_conn!(self, |c, _d| {
            sqlx::query(text).execute(c).await?;
            Ok(())
        })
    }

    /// Whether the project row exists.
    pub async fn project_exists(&mut self, project_id: &str) -> Result<bool, StoreError> {
        on_conn!(self, |c, d| {
            let row = sqlx::query(sql::PROJECT_EXISTS.text(d))
                .bind(project_id)
                .fetch_one(c)
                .await?;
            Ok(row.try_get::<i64, _>("n")? > 0)
        })
    }

    /// The current snapshot of a project, by the one-statement current proof.
    pub async fn find_current(
        &mut self,
        project_id: &str,
    ) -> Result<Option<CurrentSnapshot>, StoreError> {
        match self.revalidate(project_id, None).await? {
            None => Ok(None),
            Some(Current::Changed(c)) => Ok(Some(c)),
            Some(Current::Unchanged(_)) => Err(StoreError::Other(
                "the current proof left out a document no one holds; this is a bug, please \
                 report it"
                    .into(),
            )),
        }
    }

    /// The conditional door: the current snapshot of a project, without its document when its
    /// digest is `known` (the copy the caller holds is current; the document is never read).
    pub async fn revalidate(
        &mut self,
        project_id: &str,
        known: Option<&str>,
    ) -> Result<Option<Current>, StoreError> {
        on_conn!(self, |c, d| {
            let text = match d {
                Dialect::Postgres => sql::FIND_CURRENT_PG,
                Dialect::Sqlite => sql::FIND_CURRENT_SQLITE,
            };
            let row = sqlx::query(text.text(d))
                .bind(project_id)
                .bind(known)
                .fetch_optional(c)
                .await?;
            let Some(r) = row else {
                return Ok(None);
            };
            let head = <SnapshotHead as sqlx::FromRow<_>>::from_row(&r)?;
            Ok(Some(
                match r.try_get::<Option<Vec<u8>>, _>("canonical_json")? {
                    None => Current::Unchanged(head),
                    Some(canonical_json) => Current::Changed(CurrentSnapshot {
                        snapshot_id: head.snapshot_id,
                        snapshot_digest: head.snapshot_digest,
                        active_vector_digest: head.active_vector_digest,
                        definition_digest: head.definition_digest,
                        canonical_json,
                        committed_at: head.committed_at,
                    }),
                },
            ))
        })
    }

    /// One observation: the live heads and their generations (at most 129, in vector order).
    pub async fn observe(&mut self, project_id: &str) -> Result<Vec<ObservedHead>, StoreError> {
        on_conn!(self, |c, d| {
            Ok(sqlx::query_as(sql::OBSERVE_HEADS.text(d))
                .bind(project_id)
                .fetch_all(c)
                .await?)
        })
    }

    /// Several revisions' bytes in one statement, by digest (absent or oversized ones left
    /// out). The caller sizes the batch against the memory budget from the stored lengths.
    pub async fn revision_contents(
        &mut self,
        revision_digests: &[&str],
    ) -> Result<HashMap<String, RevisionBytes>, StoreError> {
        let rows = match self {
            Attempt::Pg(tx) => sqlx::query(sql::REVISION_CONTENTS_PG)
                .bind(revision_digests)
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .map(RowOf::Pg)
                .collect::<Vec<_>>(),
            Attempt::Lite(tx) => {
                let list = serde_json::to_string(revision_digests)
                    .map_err(|e| StoreError::Other(e.to_string()))?;
                sqlx::query(sql::REVISION_CONTENTS_SQLITE)
                    .bind(list)
                    .fetch_all(&mut **tx)
                    .await?
                    .into_iter()
                    .map(RowOf::Lite)
                    .collect()
            }
        };
        let mut out = HashMap::with_capacity(rows.len());
        for row in rows {
            let digest: String = match &row {
                RowOf::Pg(r) => r.try_get(1)?,
                RowOf::Lite(r) => r.try_get(1)?,
            };
            out.insert(digest, RevisionBytes::new(row)?);
        }
        Ok(out)
    }

    /// `len` bytes of a revision from `offset` (0-based), borrowed from the row they arrive in;
    /// `None` when the revision row is gone. Only the slice travels on PostgreSQL (revisions are
    /// stored uncompressed there, migration 0009); SQLite loads the whole value to cut it.
    pub async fn revision_slice(
        &mut self,
        revision_digest: &str,
        offset: u64,
        len: u64,
    ) -> Result<Option<RevisionBytes>, StoreError> {
        // Revisions are at most 24 MiB, so offsets fit substring()'s int4.
        let to_i32 = |n: u64| i32::try_from(n).map_err(|e| StoreError::Other(e.to_string()));
        let (from, len) = (to_i32(offset + 1)?, to_i32(len)?);
        let row = match self {
            Attempt::Pg(tx) => sqlx::query(sql::REVISION_SLICE.text(Dialect::Postgres))
                .bind(revision_digest)
                .bind(from)
                .bind(len)
                .fetch_optional(&mut **tx)
                .await?
                .map(RowOf::Pg),
            Attempt::Lite(tx) => sqlx::query(sql::REVISION_SLICE.text(Dialect::Sqlite))
                .bind(revision_digest)
                .bind(from)
                .bind(len)
                .fetch_optional(&mut **tx)
                .await?
                .map(RowOf::Lite),
        };
        row.map(RevisionBytes::new).transpose()
    }

    /// Records a rejection for a project's vector (a second record is ignored).
    pub async fn record_rejection(
        &mut self,
        project_id: &str,
        vector_digest: &str,
        rejection: &Rejection,
    ) -> Result<(), StoreError> {
        on_conn!(self, |c, d| {
            sqlx::query(sql::RECORD_REJECTION.text(d))
                .bind(project_id)
                .bind(vector_digest)
                .bind(rejection.code.as_str())
                .bind(&rejection.detail)
                .execute(c)
                .await?;
            Ok(())
        })
    }

    /// Inserts the snapshot row (`ON CONFLICT DO NOTHING`) and, when it was inserted, its
    /// source rows; true when inserted.
    pub(super) async fn insert_rows(&mut self, s: &Snapshot) -> Result<bool, StoreError> {
        on_conn!(self, |c, d| {
            let inserted = sqlx::query(sql::INSERT_SNAPSHOT.text(d))
                .bind(&s.project_id)
                .bind(s.active_vector_digest.as_str())
                .bind(s.definition_digest.as_str())
                .bind(s.snapshot_digest.as_str())
                .bind(s.sources.len() as i32)
                .bind(s.definition_count as i32)
                .bind(s.canonical_json.as_slice())
                .bind(source_key(&s.sources))
                .fetch_optional(&mut *c)
                .await?;
            let Some(row) = inserted else {
                return Ok(false);
            };
            let snapshot_id: i64 = row.try_get("snapshot_id")?;
            if !s.sources.is_empty() {
                let text = insert_sources_sql(d, s.sources.len());
                let mut q = sqlx::query(AssertSqlSafe(text));
                for h in &s.sources {
                    q = q
                        .bind(snapshot_id)
                        .bind(&h.package_name)
                        .bind(&h.installation_id)
                        .bind(h.generation)
                        .bind(&h.generation_digest)
                        .bind(&h.lock_digest)
                        .bind(&h.revision_digest);
                }
                q.execute(&mut *c).await?;
            }
            Ok(true)
        })
    }

    /// Projects after `after` (and up to `through`, inclusive, when given), in byte order: the
    /// pending ones (no current snapshot, by the proof) for [`Scope::Full`], the marked ones
    /// for [`Scope::Marked`].
    pub async fn pending_page(
        &mut self,
        after: &str,
        through: Option<&str>,
        limit: u32,
        scope: Scope,
    ) -> Result<Vec<String>, StoreError> {
        if scope == Scope::Full
            && let Attempt::Pg(tx) = self
        {
            // The executor's sessions use generic plans (see Store::connect), but how much of
            // the keyset the cursor leaves, and the LIMIT, decide the full page's best plan. The
            // marked page is one index range scan whatever the values: its generic plan serves.
            sqlx::query("SET LOCAL plan_cache_mode = force_custom_plan")
                .execute(&mut **tx)
                .await?;
        }
        on_conn!(self, |c, d| {
            let text = match (scope, d) {
                (Scope::Marked, _) => sql::MARKED_PAGE,
                (Scope::Full, Dialect::Postgres) => sql::PENDING_PAGE_PG,
                (Scope::Full, Dialect::Sqlite) => sql::PENDING_PAGE_SQLITE,
            };
            let rows = sqlx::query(text.text(d))
                .bind(after)
                .bind(i64::from(limit))
                .bind(through)
                .fetch_all(c)
                .await?;
            rows.iter()
                .map(|r| {
                    r.try_get::<String, _>("project_id")
                        .map_err(StoreError::from)
                })
                .collect()
        })
    }

    /// Up to `parts - 1` distinct project ids that split the keyset into `parts` ranges of
    /// about equal size, in byte order, each the last id of its range; none on SQLite, where
    /// pages are read one at a time.
    pub async fn split_points(
        &mut self,
        parts: usize,
        scope: Scope,
    ) -> Result<Vec<String>, StoreError> {
        let Attempt::Pg(tx) = self else {
            return Ok(Vec::new());
        };
        let fractions: Vec<f64> = (1..parts).map(|i| i as f64 / parts as f64).collect();
        let text = match scope {
            Scope::Marked => sql::SPLIT_MARKED_PG,
            Scope::Full => sql::SPLIT_POINTS_PG,
        };
        let row = sqlx::query(text)
            .bind(fractions)
            .fetch_one(&mut **tx)
            .await?;
        let mut points: Vec<String> = row.try_get("points")?;
        points.dedup();
        Ok(points)
    }

    /// The newest snapshot of a project, current or not.
    pub async fn newest_snapshot(
        &mut self,
        project_id: &str,
    ) -> Result<Option<SnapshotHead>, StoreError> {
        on_conn!(self, |c, d| {
            Ok(sqlx::query_as(sql::NEWEST_SNAPSHOT.text(d))
                .bind(project_id)
                .fetch_optional(c)
                .await?)
        })
    }

    /// How many snapshots are stored (of one project, when given).
    pub async fn count_snapshots(&mut self, project_id: Option<&str>) -> Result<u64, StoreError> {
        let text = match project_id {
            None => sql::COUNT_SNAPSHOTS,
            Some(_) => sql::COUNT_SNAPSHOTS_OF_PROJECT,
        };
        let n: i64 = on_conn!(self, |c, d| {
            let mut query = sqlx::query_scalar(text.text(d));
            if let Some(project_id) = project_id {
                query = query.bind(project_id);
            }
            query.fetch_one(c).await?
        });
        Ok(n.unsigned_abs())
    }

    /// Up to 16 stored snapshots after `after_id` (optionally of one project), with sources:
    /// two statements a page. Rows stop once the documents before one hold `max_bytes`, so a
    /// page holds less than `max_bytes` plus one document; the first row always comes.
    pub async fn snapshot_page(
        &mut self,
        after_id: i64,
        project_id: Option<&str>,
        max_bytes: i64,
    ) -> Result<Vec<StoredSnapshot>, StoreError> {
        let text = match project_id {
            None => sql::SNAPSHOT_PAGE,
            Some(_) => sql::SNAPSHOT_PAGE_OF_PROJECT,
        };
        let mut snapshots = on_conn!(self, |c, d| {
            let mut query = sqlx::query_as::<_, Decoded<StoredSnapshot>>(text.text(d))
                .bind(after_id)
                .bind(max_bytes);
            if let Some(project_id) = project_id {
                query = query.bind(project_id);
            }
            query.fetch_all(c).await?
        })
        .into_iter()
        .map(|Decoded(s)| s)
        .collect::<Vec<_>>();
        if snapshots.is_empty() {
            return Ok(snapshots);
        }
        let ids: Vec<i64> = snapshots.iter().map(|s| s.snapshot_id).collect();
        let sources: Vec<SnapshotSource> = match self {
            Attempt::Pg(tx) => {
                sqlx::query_as(sql::SNAPSHOT_SOURCES_PG)
                    .bind(&ids)
                    .fetch_all(&mut **tx)
                    .await?
            }
            Attempt::Lite(tx) => {
                let list =
                    serde_json::to_string(&ids).map_err(|e| StoreError::Other(e.to_string()))?;
                sqlx::query_as(sql::SNAPSHOT_SOURCES_SQLITE)
                    .bind(list)
                    .fetch_all(&mut **tx)
                    .await?
            }
        };
        let index: HashMap<i64, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        for SnapshotSource { snapshot_id, head } in sources {
            if let Some(&i) = index.get(&snapshot_id) {
                snapshots[i].sources.push(head);
            }
        }
        Ok(snapshots)
    }
}

fn insert_sources_sql(d: Dialect, rows: usize) -> String {
    let table = match d {
        Dialect::Postgres => "ql3.tool_definition_snapshot_sources",
        Dialect::Sqlite => "tool_definition_snapshot_sources",
    };
    let mut text = format!(
        "INSERT INTO {table} (snapshot_id, package_name, installation_id, generation, \
         generation_digest, lock_digest, revision_digest) VALUES "
    );
    for i in 0..rows {
        let b = i * 7;
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5,
            b + 6,
            b + 7
        ));
    }
    text
}
