//! An attempt's revision reads: whole revisions in batches, or a large one in slices.

use std::collections::HashMap;

use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

use super::*;
use crate::sql;
use crate::{Dialect, StoreError};

/// A row of either dialect.
#[derive(Debug)]
pub(super) enum RowOf {
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

    /// The slice, borrowed from the row (no copy is made).
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

impl Attempt<'_> {
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
}
