//! An attempt's reads outside a build: the current proof, the pages of projects a run walks,
//! and the snapshots `verify` and `explain` read.

use std::collections::HashMap;

use sqlx::Row;

use super::*;
use crate::queries::{Current, CurrentSnapshot, SnapshotHead, StoredSnapshot};
use crate::rows::{Decoded, SnapshotSource};
use crate::sql;
use crate::{Dialect, StoreError};
use package_executor_core::model::Digest;

/// Which projects a pass of `run` looks at (contract section 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// The projects marked in the pending index: what changed since they were last dealt with.
    #[default]
    Marked,
    /// Every project, each proven current or not (`run --full-scan`, the periodic sweep).
    Full,
}

impl Attempt<'_> {
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
        known: Option<&Digest>,
    ) -> Result<Option<Current>, StoreError> {
        self.revalidate_through(project_id, known, false).await
    }

    /// Whether this login may open the consumers' door, `ql3.current_tool_snapshot(text,
    /// text)` (PostgreSQL; a `ql3_tool_consumer` member): `current` goes through it then, so a
    /// consumer's login reads from a shell exactly what its application reads.
    pub async fn may_use_consumer_door(&mut self) -> Result<bool, StoreError> {
        match self {
            Attempt::Lite(_) => Ok(false),
            Attempt::Pg(tx) => Ok(sqlx::query_scalar(sql::MAY_USE_CONSUMER_DOOR_PG)
                .fetch_one(&mut **tx)
                .await?),
        }
    }

    /// [`Attempt::revalidate`], through the consumers' door when `consumer` (PostgreSQL).
    pub async fn revalidate_through(
        &mut self,
        project_id: &str,
        known: Option<&Digest>,
        consumer: bool,
    ) -> Result<Option<Current>, StoreError> {
        on_conn!(self, |c, d| {
            let text = match d {
                Dialect::Postgres if consumer => sql::CONSUMER_DOOR_PG,
                Dialect::Postgres => sql::FIND_CURRENT_PG,
                Dialect::Sqlite => sql::FIND_CURRENT_SQLITE,
            };
            let row = sqlx::query(text.text(d))
                .bind(project_id)
                .bind(known.map(Digest::as_str))
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
