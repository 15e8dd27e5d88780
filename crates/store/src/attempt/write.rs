//! What makes an attempt's outcome final: the snapshot appended with the second observation,
//! the replay check, a recorded rejection, the mark cleared.

use sqlx::{AssertSqlSafe, Row};

use super::open::heads_from_arrays;
use super::*;
use crate::sql;
use crate::{Dialect, ObservedHead, StoreError};
use package_executor_core::planner::{ActiveHead, Snapshot};
use package_executor_core::rejection::Rejection;
use package_executor_core::source_key::source_key;

/// `$query` with the snapshot row's first seven parameters bound (`$1` … `$7`, in the order
/// `INSERT_SNAPSHOT` and `APPEND_PG` both take them), for either dialect's query type.
macro_rules! snapshot_columns {
    ($query:expr, $s:expr) => {
        $query
            .bind($s.project_id.as_str())
            .bind($s.active_vector_digest.as_str())
            .bind($s.definition_digest.as_str())
            .bind($s.snapshot_digest.as_str())
            .bind($s.sources.len() as i32)
            .bind($s.definition_count as i32)
            .bind($s.canonical_json.as_slice())
    };
}

pub(super) fn insert_sources_sql(d: Dialect, rows: usize) -> String {
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

/// What an insert that did nothing met: the same snapshot, or another one for this vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replay {
    /// An identical snapshot for this project and vector already existed.
    Exact,
    /// A different snapshot exists for this project and vector: `replay-mismatch`.
    Mismatch {
        /// The stored snapshot digest.
        existing: String,
    },
}

/// What appending found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appending {
    /// The second observation, read in the same statement snapshot as the insert.
    pub second: Vec<ObservedHead>,
    /// Whether a new snapshot row (with its source rows) was inserted. When false, a row for
    /// this project and vector, or with this snapshot digest, already existed.
    pub inserted: bool,
    /// Whether the project's row was gone at the second observation: the caller rolls back,
    /// and the project ends `vanished`.
    pub vanished: bool,
}

impl Attempt<'_> {
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
            let inserted = snapshot_columns!(sqlx::query(sql::INSERT_SNAPSHOT.text(d)), s)
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

    /// Clears a project's mark if it still holds `version`, the one read when the attempt
    /// opened: a change committed since gave the mark a new version, and it stays for the next
    /// run. Part of the transaction that makes the outcome final.
    pub async fn clear_mark(&mut self, project_id: &str, version: i64) -> Result<(), StoreError> {
        super::on_conn!(self, |c, d| {
            let text = match d {
                Dialect::Postgres => sql::CLEAR_MARK_PG,
                Dialect::Sqlite => sql::CLEAR_MARK.text(d),
            };
            sqlx::query(text)
                .bind(project_id)
                .bind(version)
                .execute(c)
                .await?;
            Ok(())
        })
    }

    /// Takes the second observation and inserts the snapshot with its source rows (`ON
    /// CONFLICT DO NOTHING`, both unique keys arbitrating), and clears the project's mark if
    /// it still holds `mark`. The caller compares the observations and rolls back when they
    /// differ.
    pub async fn append(
        &mut self,
        s: &Snapshot,
        mark: Option<i64>,
    ) -> Result<Appending, StoreError> {
        match self {
            Attempt::Pg(tx) => {
                let column =
                    |f: fn(&ActiveHead) -> &str| -> Vec<&str> { s.sources.iter().map(f).collect() };
                let row = snapshot_columns!(sqlx::query(sql::APPEND_PG), s)
                    .bind(column(|h| &h.package_name))
                    .bind(column(|h| &h.installation_id))
                    .bind(s.sources.iter().map(|h| h.generation).collect::<Vec<i64>>())
                    .bind(column(|h| &h.generation_digest))
                    .bind(column(|h| &h.lock_digest))
                    .bind(column(|h| &h.revision_digest))
                    .bind(mark)
                    .bind(source_key(&s.sources))
                    .fetch_one(&mut **tx)
                    .await?;
                Ok(Appending {
                    second: heads_from_arrays(&row)?,
                    inserted: row.try_get::<Option<i64>, _>("snapshot_id")?.is_some(),
                    vanished: row.try_get("vanished")?,
                })
            }
            Attempt::Lite(_) => {
                let second = self.observe(s.project_id.as_str()).await?;
                let inserted = self.insert_rows(s).await?;
                if let Some(version) = mark {
                    self.clear_mark(s.project_id.as_str(), version).await?;
                }
                // SQLite's transaction reads one snapshot of the file throughout (a writer
                // that committed since makes this transaction's first write fail), so the
                // project row the opening found is still there.
                Ok(Appending {
                    second,
                    inserted,
                    vanished: false,
                })
            }
        }
    }

    /// After an insert that did nothing: the same snapshot digest for this project and vector
    /// is an exact replay; a different one is `replay-mismatch`.
    pub async fn replay_outcome(&mut self, s: &Snapshot) -> Result<Replay, StoreError> {
        super::on_conn!(self, |c, d| {
            let existing = sqlx::query(sql::SNAPSHOT_BY_VECTOR.text(d))
                .bind(s.project_id.as_str())
                .bind(s.active_vector_digest.as_str())
                .fetch_optional(c)
                .await?;
            match existing {
                Some(r) => {
                    let existing: String = r.try_get("snapshot_digest")?;
                    if existing == s.snapshot_digest.as_str() {
                        Ok(Replay::Exact)
                    } else {
                        Ok(Replay::Mismatch { existing })
                    }
                }
                // Conflict on a row this transaction cannot see yet: retry.
                None => Err(StoreError::Transient(
                    "snapshot insert conflicted with a row not yet visible".into(),
                )),
            }
        })
    }
}
