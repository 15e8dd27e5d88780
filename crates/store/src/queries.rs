//! Rows the store hands back, and store-level reads that need no attempt of their own.

use std::collections::HashMap;

use package_executor_core::model::Digest;
use package_executor_core::planner::{self, StoredLength};
use package_executor_core::rejection::ReportedCode;

use super::{Dialect, ObservedHead, Store, StoreError, answered};
use sqlx::Row as _;
/// The server's connection slots as a run reads them before it opens its workers' connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionSlots {
    /// `max_connections`.
    pub max_connections: i64,
    /// Slots no executor login may take: `superuser_reserved_connections`, and
    /// `reserved_connections` (PostgreSQL 16 and later).
    pub reserved: i64,
    /// Client sessions open now, this run's own among them.
    pub in_use: i64,
    /// The login's `CONNECTION LIMIT` (`-1`: none).
    pub role_limit: i64,
    /// Sessions of the login open now, this run's own among them.
    pub role_in_use: i64,
}

/// A snapshot proven current: its row in `tool_definition_snapshots`.
#[derive(Clone, Debug, PartialEq, Eq)]
// Each undocumented field is the column of the same name (contract section 7).
#[allow(missing_docs)]
pub struct CurrentSnapshot {
    pub snapshot_id: i64,
    pub snapshot_digest: Digest,
    pub active_vector_digest: Digest,
    pub definition_digest: Digest,
    /// The stored canonical document.
    pub canonical_json: Vec<u8>,
    /// RFC 3339 UTC with milliseconds.
    pub committed_at: String,
}

/// A snapshot's row without its document: the conditional door's answer when the caller's copy
/// is current, and the newest snapshot `explain` shows (current or not).
#[derive(Clone, Debug, PartialEq, Eq)]
// Each undocumented field is the column of the same name (contract section 7).
#[allow(missing_docs)]
pub struct SnapshotHead {
    pub snapshot_id: i64,
    pub snapshot_digest: Digest,
    pub active_vector_digest: Digest,
    pub definition_digest: Digest,
    /// RFC 3339 UTC with milliseconds.
    pub committed_at: String,
}

/// What the conditional door answers for a project that has a current snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Current {
    /// The caller's copy (the digest it gave) is the current snapshot: no document sent.
    Unchanged(SnapshotHead),
    /// Another snapshot is current (or the caller gave none): the whole row.
    Changed(CurrentSnapshot),
}

/// A rejection recorded for the live vector (`tool_definition_rejections`): it stands until
/// the vector changes. A code this build does not know (a newer release wrote it) is kept as
/// written.
#[derive(Clone, Debug, PartialEq, Eq)]
// The fields are the row's columns of the same names.
#[allow(missing_docs)]
pub struct RecordedRejection {
    pub reason: ReportedCode,
    pub detail: String,
}

pub use package_executor_core::verify::StoredSnapshot;

/// What `explain` reads of one project, in one transaction, so every part is of one moment.
#[derive(Clone, Debug)]
pub struct ProjectFacts {
    /// The proven-current snapshot.
    pub current: Option<CurrentSnapshot>,
    /// The live heads, as observed (at most one past the package limit).
    pub live: Vec<ObservedHead>,
    /// The stored lengths of the revisions they point at, by revision digest.
    pub stored: HashMap<String, StoredLength>,
    /// The live vector's digest.
    pub vector: Digest,
    /// The newest snapshot of any vector.
    pub newest: Option<SnapshotHead>,
    /// The rejection recorded for the live vector.
    pub rejection: Option<RecordedRejection>,
    /// The project's mark in the pending index (its version).
    pub mark: Option<i64>,
}

impl Store {
    /// What `explain` says of a project, read in one short transaction; `None` when the
    /// project does not exist.
    pub async fn explain(&self, project_id: &str) -> Result<Option<ProjectFacts>, StoreError> {
        let limit = self.answer_timeout();
        self.transaction(async |a| {
            if !answered(limit, a.project_exists(project_id)).await? {
                return Ok((None, false));
            }
            let current = answered(limit, a.find_current(project_id)).await?;
            let (live, stored) = answered(limit, a.observe_revisions(project_id)).await?;
            let heads: Vec<_> = live.iter().map(|o| o.head.clone()).collect();
            let vector = planner::active_vector_digest(project_id, &heads);
            let newest = answered(limit, a.newest_snapshot(project_id)).await?;
            let rejection = answered(limit, a.project_rejections(project_id))
                .await?
                .remove(&vector);
            let mark = answered(limit, a.mark_version(project_id)).await?;
            let facts = ProjectFacts {
                current,
                live,
                stored,
                vector,
                newest,
                rejection,
                mark,
            };
            Ok((Some(facts), false))
        })
        .await
    }

    /// The current snapshot of a project (one statement, in its own short transaction).
    pub async fn find_current(
        &self,
        project_id: &str,
    ) -> Result<Option<CurrentSnapshot>, StoreError> {
        let limit = self.answer_timeout();
        self.transaction(async |a| Ok((answered(limit, a.find_current(project_id)).await?, false)))
            .await
    }

    /// The conditional door (one statement, in its own short transaction): see
    /// [`super::Attempt::revalidate`].
    pub async fn revalidate(
        &self,
        project_id: &str,
        known: Option<&Digest>,
    ) -> Result<Option<Current>, StoreError> {
        self.door(project_id, known, false).await
    }

    /// The door `current` opens from a shell: the consumers' own function for a login that may
    /// execute it (a `ql3_tool_consumer` member, who may not execute the executor's), else the
    /// executor's, as [`Store::revalidate`]. The same answer either way.
    pub async fn current_door(
        &self,
        project_id: &str,
        known: Option<&Digest>,
    ) -> Result<Option<Current>, StoreError> {
        self.door(project_id, known, true).await
    }

    /// [`Store::revalidate`] and [`Store::current_door`]: through the consumers' function when
    /// `consumer_if_allowed` and the login may execute it, else the executor's.
    async fn door(
        &self,
        project_id: &str,
        known: Option<&Digest>,
        consumer_if_allowed: bool,
    ) -> Result<Option<Current>, StoreError> {
        let limit = self.answer_timeout();
        self.transaction(async |a| {
            let consumer =
                consumer_if_allowed && answered(limit, a.may_use_consumer_door()).await?;
            let found = answered(limit, a.revalidate_through(project_id, known, consumer)).await?;
            Ok((found, false))
        })
        .await
    }

    /// How many connections the server admits now (PostgreSQL; `None` for SQLite): its limits
    /// and what is in use, read in one statement that any login may run.
    pub async fn connection_slots(&self) -> Result<Option<ConnectionSlots>, StoreError> {
        if self.dialect() == Dialect::Sqlite {
            return Ok(None);
        }
        let limit = self.answer_timeout();
        self.transaction(async |a| {
            let super::Attempt::Pg(tx) = a else {
                return Ok((None, false));
            };
            let row = answered(limit, async {
                Ok(sqlx::query(crate::sql::CONNECTION_SLOTS_PG)
                    .fetch_one(&mut **tx)
                    .await?)
            })
            .await?;
            let slots = ConnectionSlots {
                max_connections: row.try_get("max_connections")?,
                reserved: row.try_get("reserved")?,
                in_use: row.try_get("in_use")?,
                role_limit: row.try_get("role_limit")?,
                role_in_use: row.try_get("role_in_use")?,
            };
            Ok((Some(slots), false))
        })
        .await
    }

    /// Whether a project exists.
    pub async fn project_exists(&self, project_id: &str) -> Result<bool, StoreError> {
        let limit = self.answer_timeout();
        self.transaction(async |a| {
            Ok((answered(limit, a.project_exists(project_id)).await?, false))
        })
        .await
    }

    /// Whether the database answers within `timeout` (a fresh transaction, rolled back; a
    /// connection that stays silent is closed, not returned to the pool).
    pub async fn ping(&self, timeout: std::time::Duration) -> Result<(), StoreError> {
        let mut session = self.session();
        let check = session.transaction(async |a| Ok((a.project_exists("").await?, false)));
        match tokio::time::timeout(timeout, check).await {
            Ok(result) => result.map(|_| ()),
            Err(_) => {
                session.discard();
                Err(StoreError::Unavailable(format!(
                    "no answer within {timeout:?}; {}",
                    super::error::CHECK_SERVER
                )))
            }
        }
    }

    /// A page of pending projects (no current snapshot, by the proof) after a cursor, in a
    /// transaction of its own (read only, rolled back), within the answer timeout.
    pub async fn pending_page(&self, after: &str, limit: u32) -> Result<Vec<String>, StoreError> {
        self.page_through(after, None, limit, super::Scope::Full)
            .await
    }

    /// A page of a pass's projects in `scope`, within a range of the keyset: after `after`
    /// and, when given, up to `through` (inclusive).
    pub async fn page_through(
        &self,
        after: &str,
        through: Option<&str>,
        limit: u32,
        scope: super::Scope,
    ) -> Result<Vec<String>, StoreError> {
        self.read(async |a| a.pending_page(after, through, limit, scope).await)
            .await
    }

    /// Splits the keyset of `scope` into up to `parts` ranges of about equal size: the last
    /// id of each range but the last (see [`super::Attempt::split_points`]).
    pub async fn split_points(
        &self,
        parts: usize,
        scope: super::Scope,
    ) -> Result<Vec<String>, StoreError> {
        if parts < 2 {
            return Ok(Vec::new());
        }
        self.read(async |a| a.split_points(parts, scope).await)
            .await
    }

    /// A page of stored snapshots with their source rows, for `verify` (see
    /// [`super::Attempt::snapshot_page`]), within the answer timeout.
    pub async fn snapshot_page(
        &self,
        after_id: i64,
        project_id: Option<&str>,
        max_bytes: i64,
    ) -> Result<Vec<StoredSnapshot>, StoreError> {
        self.read(async |a| a.snapshot_page(after_id, project_id, max_bytes).await)
            .await
    }

    /// How many snapshots are stored (of one project, when given), within the answer timeout.
    pub async fn count_snapshots(&self, project_id: Option<&str>) -> Result<u64, StoreError> {
        self.read(async |a| a.count_snapshots(project_id).await)
            .await
    }

    /// One read in a transaction of its own (rolled back), within the answer timeout, on a
    /// connection that is closed rather than returned if anything fails.
    async fn read<T>(
        &self,
        step: impl AsyncFnOnce(&mut super::Attempt<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut session = self.session();
        let bound = session.answer_timeout();
        session
            .transaction(async |a| Ok((super::answered(bound, step(a)).await?, false)))
            .await
    }
}
