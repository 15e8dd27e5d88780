//! How the store's rows decode: one `FromRow` for each row type, the same for both dialects, so
//! a column is named once and a query reads its rows with `query_as`.
//!
//! Written out rather than derived: sqlx's `derive` feature builds a proc macro that links both
//! drivers (SQLite's C source included) a second time, for the host, in every build tier and
//! the image; the [`from_row!`] arms below are what the derive would generate.

use package_executor_core::model::{Digest, GenerationStatus};
use package_executor_core::planner::ActiveHead;
use package_executor_core::verify::StoredSnapshot;

use super::ObservedHead;
use super::queries::SnapshotHead;

/// A core type decoded from a row. The core has no sqlx (its layer), so the orphan rule keeps its
/// types' `FromRow` here, on this wrapper.
#[derive(Debug)]
pub(crate) struct Decoded<T>(pub T);

/// One source row of a stored snapshot (`SNAPSHOT_SOURCES_PG` or its SQLite twin): the
/// snapshot it belongs to and the head it recorded.
#[derive(Debug)]
pub(crate) struct SnapshotSource {
    pub snapshot_id: i64,
    pub head: ActiveHead,
}

/// A generation's status as its column holds it (`None` where the generation row is missing).
/// The database's `CHECK` admits only the contract's words; anything else fails closed.
pub(crate) fn status(text: Option<String>) -> sqlx::Result<Option<GenerationStatus>> {
    text.as_deref().map(generation_status).transpose()
}

/// A `package_generations.status` that is there (see [`status`]).
pub(crate) fn generation_status(text: &str) -> sqlx::Result<GenerationStatus> {
    GenerationStatus::parse(text).ok_or_else(|| {
        sqlx::Error::Decode(
            format!(
                "a generation's status is {text:?}, which this build does not know; is the \
                 schema newer than this build?"
            )
            .into(),
        )
    })
}

/// A digest column, checked as it enters (the tables' `CHECK`s hold the format, so a failure
/// here means a row written past them).
pub(crate) fn digest(text: String) -> sqlx::Result<Digest> {
    Digest::parse(&text).map_err(|e| sqlx::Error::Decode(e.to_string().into()))
}

/// `FromRow` for PostgreSQL's and SQLite's rows from one body (`$r` the row).
macro_rules! from_row {
    ($($ty:ty => |$r:ident| $body:expr;)*) => {$(
        impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for $ty {
            fn from_row($r: &'r sqlx::postgres::PgRow) -> sqlx::Result<Self> {
                use sqlx::Row as _;
                Ok($body)
            }
        }
        impl<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> for $ty {
            fn from_row($r: &'r sqlx::sqlite::SqliteRow) -> sqlx::Result<Self> {
                use sqlx::Row as _;
                Ok($body)
            }
        }
    )*};
}

from_row! {
    SnapshotHead => |r| SnapshotHead {
        snapshot_id: r.try_get("snapshot_id")?,
        snapshot_digest: digest(r.try_get("snapshot_digest")?)?,
        active_vector_digest: digest(r.try_get("active_vector_digest")?)?,
        definition_digest: digest(r.try_get("definition_digest")?)?,
        committed_at: r.try_get("committed_at")?,
    };
    // Sources are read by a second statement (`snapshot_page`).
    Decoded<StoredSnapshot> => |r| Decoded(StoredSnapshot {
        snapshot_id: r.try_get("snapshot_id")?,
        project_id: r.try_get("project_id")?,
        snapshot_digest: r.try_get("snapshot_digest")?,
        active_vector_digest: r.try_get("active_vector_digest")?,
        definition_digest: r.try_get("definition_digest")?,
        package_count: r.try_get("package_count")?,
        definition_count: r.try_get("definition_count")?,
        canonical_json: r.try_get("canonical_json")?,
        source_key: r.try_get("source_key")?,
        sources: Vec::new(),
    });
    // A source row keeps no permissions: the snapshot document holds them.
    SnapshotSource => |r| SnapshotSource {
        snapshot_id: r.try_get("snapshot_id")?,
        head: ActiveHead {
            package_name: r.try_get("package_name")?,
            installation_id: r.try_get("installation_id")?,
            generation: r.try_get("generation")?,
            generation_digest: r.try_get("generation_digest")?,
            lock_digest: r.try_get("lock_digest")?,
            revision_digest: r.try_get("revision_digest")?,
            approved_permissions: String::new(),
        },
    };
    // One head of an observation (`OBSERVE_HEADS` and the queries built on it); a missing
    // generation row leaves its columns empty and its status `None`.
    ObservedHead => |r| ObservedHead {
        head: ActiveHead {
            package_name: r.try_get("package_name")?,
            installation_id: r.try_get("installation_id")?,
            generation: r.try_get("active_generation")?,
            generation_digest: r.try_get::<Option<String>, _>("generation_digest")?.unwrap_or_default(),
            lock_digest: r.try_get::<Option<String>, _>("lock_digest")?.unwrap_or_default(),
            revision_digest: r.try_get::<Option<String>, _>("revision_digest")?.unwrap_or_default(),
            approved_permissions: r
                .try_get::<Option<String>, _>("approved_permissions")?
                .unwrap_or_default(),
        },
        status: status(r.try_get("status")?)?,
    };
}
