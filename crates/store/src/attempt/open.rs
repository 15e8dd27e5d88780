//! Opening an attempt: the claim, the current check, the first observation and what the
//! project's mark and recorded rejections say (the first of the coordinator's two combined
//! steps; the second is `write.rs`'s `append`).
//!
//! - [`Attempt::open`]: the claim, the current check, the first observation with the stored
//!   length of each head's revision (never its bytes), and the project's recorded rejections.
//! - [`Attempt::append`]: the second observation together with the snapshot insert.
//!
//! On PostgreSQL each step is one statement, because a round trip costs more than the work
//! of most statements: an attempt is `BEGIN`, open, append, `COMMIT`, with the revisions'
//! bytes brought by open when they are small (see [`Attempt::open_with`]) and read in
//! statements of their own otherwise.
//! Both reads of a step share one statement snapshot, so nothing can change between them. The
//! one exception is the currency proof, a statement of its own that open runs only for a
//! project that has a snapshot (see [`sql::OPEN_PG`]); it runs under the claim, so no other
//! executor can publish between the two. On SQLite (in-process, no round trips) the steps are
//! the plain statements in sequence.
//!
//! `append` inserts before the caller compares the two observations, and the caller rolls
//! the transaction back when they differ: nothing is ever committed unless the second
//! observation, taken with the insert, equals the first.

use std::collections::HashMap;

use sqlx::Row;

use super::*;
use crate::sql;
use crate::{Dialect, ObservedHead, RecordedRejection, StoreError, rows};
use package_executor_core::model::Digest;
use package_executor_core::planner::{ActiveHead, StoredLength};
use package_executor_core::rejection::ReportedCode;

/// What opening an attempt found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opening {
    /// Whether this transaction holds the project's claim. When false, nothing else was read.
    pub claimed: bool,
    /// Whether the project's row is gone (deleted outright since it was listed): it gets no
    /// snapshot (contract section 9), whatever else was read.
    pub vanished: bool,
    /// Whether its observation was left out of a batch's opening for the batch's observation
    /// cap (see [`Attempt::open_batch`]): claimed, nothing else read; the next batch takes it.
    pub deferred: bool,
    /// The bytes of its observation's text as the database counted them (names, ids, digests,
    /// approved permissions, 64 a head besides); 0 where not counted (SQLite).
    pub observed_bytes: u64,
    /// The digest of the project's current snapshot, if one is proven current.
    pub current: Option<Digest>,
    /// The first observation: live heads in vector order, at most 129.
    pub heads: Vec<ObservedHead>,
    /// Stored lengths of the heads' revisions, by revision digest (absent revisions missing).
    pub lengths: HashMap<String, StoredLength>,
    /// Rejections recorded for this project, by active vector digest.
    pub rejections: HashMap<Digest, RecordedRejection>,
    /// The version of the project's mark in the pending index, if it is marked: what a final
    /// outcome clears (see [`Attempt::clear_mark`]).
    pub mark: Option<i64>,
    /// The heads' revision contents, by revision digest, when they came with the observation
    /// (all of them or none, see [`Attempt::open_with`]); empty otherwise.
    pub inline: HashMap<String, Vec<u8>>,
}

/// Where a project's claim stands at the end of a run in which another session held it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimState {
    /// The project has a claim row, so an executor can claim it.
    pub claimable: bool,
    /// A live session holds the claim now; only the executor's role can hold one.
    pub held: bool,
    /// The project has a snapshot proven current.
    pub current: bool,
}

/// Revision bytes that came with an observation, by revision digest.
pub(super) type Inline = HashMap<String, Vec<u8>>;

/// The observation queries' inline cap: -1 (never) when there is none.
pub(super) fn cap(inline: Option<u64>) -> i64 {
    inline.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX))
}

/// The contents that came with the heads (all of them or none), by revision digest.
pub(super) fn inline_contents<'h>(
    heads: impl Iterator<Item = (&'h ObservedHead, Option<Vec<u8>>)>,
) -> Inline {
    heads
        .filter_map(|(h, c)| Some((h.head.revision_digest.clone(), c?)))
        .collect()
}

/// A revision's stored `byte_length` and the actual length of its content, as an observation
/// reads them (`None` when the revision row is missing).
pub(super) type Lengths = (Option<i64>, Option<i64>);

/// The stored lengths by revision digest, for the heads whose revision row exists.
pub(super) fn stored_lengths<'h>(
    heads: impl Iterator<Item = (&'h ObservedHead, Lengths)>,
) -> HashMap<String, StoredLength> {
    heads
        .filter_map(|(h, lengths)| match lengths {
            (Some(byte_length), Some(actual_length)) => Some((
                h.head.revision_digest.clone(),
                StoredLength {
                    byte_length,
                    actual_length,
                },
            )),
            _ => None,
        })
        .collect()
}

/// The heads of an `APPEND_PG` row, in vector order.
pub(super) fn heads_from_arrays(
    row: &sqlx::postgres::PgRow,
) -> Result<Vec<ObservedHead>, StoreError> {
    let mut heads = heads_in_array_order(row)?;
    sort_heads(&mut heads);
    Ok(heads)
}

/// The rejections of SQLite's open statement: a JSON array of `[vector, reason, detail]`.
pub(super) fn rejections_from_json(
    text: &str,
) -> Result<HashMap<Digest, RecordedRejection>, StoreError> {
    let rows: Vec<(String, String, String)> = serde_json::from_str(text).map_err(|e| {
        StoreError::Other(format!(
            "unreadable rejections from the open statement: {e}; this is a bug, please report it"
        ))
    })?;
    rejections_that_stand(rows)
}

/// The recorded rejections that stand, by active vector digest: a verdict on a revision row
/// that an older build recorded (`revision-missing`, `revision-digest-mismatch`) never skips a
/// build nor explains one, though its row stays as history ([`ReportedCode::stands`]).
pub(super) fn rejections_that_stand(
    rows: impl IntoIterator<Item = (String, String, String)>,
) -> Result<HashMap<Digest, RecordedRejection>, StoreError> {
    let mut standing = HashMap::new();
    for (vector, reason, detail) in rows {
        let reason = ReportedCode::parse(&reason);
        if reason.stands() {
            standing.insert(rows::digest(vector)?, RecordedRejection { reason, detail });
        }
    }
    Ok(standing)
}

/// Vector order: byte order of package names, which are unique within a project. The arrays
/// of a row are aggregated without an `ORDER BY` of their own (one would cost a sort each).
pub(super) fn sort_heads(heads: &mut [ObservedHead]) {
    heads.sort_unstable_by(|a, b| a.head.package_name.cmp(&b.head.package_name));
}

pub(super) fn misaligned() -> StoreError {
    StoreError::Other(
        "the observation's columns have different lengths; this is a bug, please report it".into(),
    )
}

/// The heads of an `OPEN_PG` or `APPEND_PG` row, which come as parallel arrays, in the order
/// of the arrays (which every other array column of the row shares).
pub(super) fn heads_in_array_order(
    row: &sqlx::postgres::PgRow,
) -> Result<Vec<ObservedHead>, StoreError> {
    let names: Vec<String> = row.try_get("package_names")?;
    let installations: Vec<String> = row.try_get("installation_ids")?;
    let generations: Vec<i64> = row.try_get("generations")?;
    let statuses: Vec<Option<String>> = row.try_get("statuses")?;
    let generation_digests: Vec<Option<String>> = row.try_get("generation_digests")?;
    let lock_digests: Vec<Option<String>> = row.try_get("lock_digests")?;
    let revision_digests: Vec<Option<String>> = row.try_get("revision_digests")?;
    let permissions: Vec<Option<String>> = row.try_get("permissions")?;
    let n = names.len();
    if [
        installations.len(),
        generations.len(),
        statuses.len(),
        generation_digests.len(),
        lock_digests.len(),
        revision_digests.len(),
        permissions.len(),
    ]
    .iter()
    .any(|&len| len != n)
    {
        return Err(misaligned());
    }
    let mut heads = Vec::with_capacity(n);
    let columns = names
        .into_iter()
        .zip(installations)
        .zip(generations)
        .zip(statuses)
        .zip(generation_digests)
        .zip(lock_digests)
        .zip(revision_digests)
        .zip(permissions);
    for (((((((package_name, installation_id), generation), status), gd), ld), rd), p) in columns {
        heads.push(ObservedHead {
            head: ActiveHead {
                package_name,
                installation_id,
                generation,
                generation_digest: gd.unwrap_or_default(),
                lock_digest: ld.unwrap_or_default(),
                revision_digest: rd.unwrap_or_default(),
                approved_permissions: p.unwrap_or_default(),
            },
            status: crate::rows::status(status)?,
        });
    }
    Ok(heads)
}

/// An `OPEN_PG` or `OPEN_BATCH_PG` row as an [`Opening`] without its current proof, and whether
/// the project has a snapshot at all (so whether the proof is worth asking).
pub(super) fn opening_from_row(row: &sqlx::postgres::PgRow) -> Result<(Opening, bool), StoreError> {
    let claimed: bool = row.try_get("claimed")?;
    let mut heads = heads_in_array_order(row)?;
    // Aligned with the heads as they came; NULL where the revision row is missing (and
    // contents NULL unless they all fit the cap).
    let byte_lengths: Vec<Option<i64>> = row.try_get("byte_lengths")?;
    let actual_lengths: Vec<Option<i64>> = row.try_get("actual_lengths")?;
    let contents: Vec<Option<Vec<u8>>> = row.try_get("inline_contents")?;
    if [byte_lengths.len(), actual_lengths.len(), contents.len()]
        .iter()
        .any(|&len| len != heads.len())
    {
        return Err(misaligned());
    }
    let lengths = stored_lengths(
        heads
            .iter()
            .zip(byte_lengths.into_iter().zip(actual_lengths)),
    );
    let inline = inline_contents(heads.iter().zip(contents));
    sort_heads(&mut heads);
    let vectors: Vec<String> = row.try_get("rejected_vectors")?;
    let reasons: Vec<String> = row.try_get("rejected_reasons")?;
    let details: Vec<String> = row.try_get("rejected_details")?;
    let rejections = rejections_that_stand(
        vectors
            .into_iter()
            .zip(reasons.into_iter().zip(details))
            .map(|(v, (reason, detail))| (v, reason, detail)),
    )?;
    let observed: Option<i64> = row.try_get("observed_bytes")?;
    let opening = Opening {
        claimed,
        vanished: row.try_get("vanished")?,
        deferred: false,
        observed_bytes: observed.map_or(0, |b| b.max(0) as u64),
        current: None,
        heads,
        lengths,
        rejections,
        mark: row.try_get("mark_version")?,
        inline,
    };
    Ok((opening, row.try_get("has_snapshot")?))
}

/// The digest of a project's snapshot proven current, under its claim (PostgreSQL): asked only
/// of a project that has a snapshot at all.
async fn current_digest_pg(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    project_id: &str,
) -> Result<Option<Digest>, StoreError> {
    Ok(sqlx::query_scalar(sql::CURRENT_DIGEST_PG)
        .bind(project_id)
        .fetch_optional(&mut **tx)
        .await?
        .map(rows::digest)
        .transpose()?)
}

impl Attempt<'_> {
    /// One observation: the live heads and their generations (at most 129, in vector order).
    pub async fn observe(&mut self, project_id: &str) -> Result<Vec<ObservedHead>, StoreError> {
        on_conn!(self, |c, d| {
            Ok(sqlx::query_as(sql::OBSERVE_HEADS.text(d))
                .bind(project_id)
                .fetch_all(c)
                .await?)
        })
    }

    /// Claims the project and reads everything an attempt needs before the revisions.
    pub async fn open(&mut self, project_id: &str) -> Result<Opening, StoreError> {
        self.open_with(project_id, None).await
    }

    /// [`open`](Self::open); when the heads' revisions together hold at most `inline` bytes,
    /// their contents come with the observation ([`Opening::inline`]), which saves the attempt
    /// a statement (and on PostgreSQL a round trip). The caller holds memory for them.
    pub async fn open_with(
        &mut self,
        project_id: &str,
        inline: Option<u64>,
    ) -> Result<Opening, StoreError> {
        match self {
            Attempt::Pg(tx) => {
                let row = sqlx::query(sql::OPEN_PG)
                    .bind(project_id)
                    .bind(cap(inline))
                    .fetch_one(&mut **tx)
                    .await?;
                let (opening, has_snapshot) = opening_from_row(&row)?;
                let current = if has_snapshot && !opening.vanished {
                    current_digest_pg(tx, project_id).await?
                } else {
                    None
                };
                Ok(Opening { current, ..opening })
            }
            Attempt::Lite(tx) => {
                // One writer per file: the claim always succeeds.
                let row = sqlx::query(sql::OPEN_SQLITE.text(Dialect::Sqlite))
                    .bind(project_id)
                    .fetch_one(&mut **tx)
                    .await?;
                let mark: Option<i64> = row.try_get("mark_version")?;
                if row.try_get("vanished")? {
                    return Ok(Opening {
                        claimed: true,
                        vanished: true,
                        mark,
                        ..Opening::default()
                    });
                }
                let current = row
                    .try_get::<Option<String>, _>("current_digest")?
                    .map(rows::digest)
                    .transpose()?;
                if current.is_some() {
                    return Ok(Opening {
                        claimed: true,
                        current,
                        mark,
                        ..Opening::default()
                    });
                }
                let rejections = rejections_from_json(row.try_get("rejections")?)?;
                let (heads, lengths, inline) =
                    self.observe_with_lengths(project_id, inline).await?;
                Ok(Opening {
                    claimed: true,
                    vanished: false,
                    deferred: false,
                    observed_bytes: 0,
                    current: None,
                    heads,
                    lengths,
                    rejections,
                    mark,
                    inline,
                })
            }
        }
    }

    /// The live heads with the stored lengths of their revisions (absent for a revision that is
    /// not stored), without claiming the project: what `explain` reads.
    pub async fn observe_revisions(
        &mut self,
        project_id: &str,
    ) -> Result<(Vec<ObservedHead>, HashMap<String, StoredLength>), StoreError> {
        let (heads, lengths, _) = self.observe_with_lengths(project_id, None).await?;
        Ok((heads, lengths))
    }

    /// The first observation with the stored lengths of the heads' revisions, and their bytes
    /// when they together hold at most `inline` bytes, in one query.
    pub(super) async fn observe_with_lengths(
        &mut self,
        project_id: &str,
        inline: Option<u64>,
    ) -> Result<(Vec<ObservedHead>, HashMap<String, StoredLength>, Inline), StoreError> {
        super::on_conn!(self, |c, d| {
            let rows = sqlx::query(sql::OBSERVE_WITH_LENGTHS.text(d))
                .bind(project_id)
                .bind(cap(inline))
                .fetch_all(c)
                .await?;
            let heads = rows
                .iter()
                .map(sqlx::FromRow::from_row)
                .collect::<Result<Vec<ObservedHead>, _>>()?;
            let lengths = rows
                .iter()
                .map(|r| Ok((r.try_get("byte_length")?, r.try_get("actual_length")?)))
                .collect::<Result<Vec<Lengths>, StoreError>>()?;
            let contents = rows
                .iter()
                .map(|r| Ok(r.try_get("inline_content")?))
                .collect::<Result<Vec<Option<Vec<u8>>>, StoreError>>()?;
            let lengths = stored_lengths(heads.iter().zip(lengths));
            let inline = inline_contents(heads.iter().zip(contents));
            Ok((heads, lengths, inline))
        })
    }

    /// Every rejection recorded for a project that stands, by active vector digest.
    pub async fn project_rejections(
        &mut self,
        project_id: &str,
    ) -> Result<HashMap<Digest, RecordedRejection>, StoreError> {
        super::on_conn!(self, |c, d| {
            let rows = sqlx::query(sql::PROJECT_REJECTIONS.text(d))
                .bind(project_id)
                .fetch_all(c)
                .await?;
            let rows = rows
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get("active_vector_digest")?,
                        r.try_get("reason")?,
                        r.try_get("detail")?,
                    ))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            rejections_that_stand(rows)
        })
    }

    /// The version of a project's mark in the pending index, if it is marked.
    pub async fn mark_version(&mut self, project_id: &str) -> Result<Option<i64>, StoreError> {
        super::on_conn!(self, |c, d| {
            Ok(sqlx::query_scalar(sql::MARK_VERSION.text(d))
                .bind(project_id)
                .fetch_optional(c)
                .await?)
        })
    }

    /// Where a project's claim stands, for a project whose claim another session held through
    /// every attempt (see [`ClaimState`]). On PostgreSQL this may take the claim for a moment:
    /// the caller rolls back. SQLite has one writer, so a claim is never held elsewhere there.
    pub async fn claim_state(&mut self, project_id: &str) -> Result<ClaimState, StoreError> {
        match self {
            Attempt::Pg(tx) => {
                let row = sqlx::query(sql::CLAIM_STATE_PG)
                    .bind(project_id)
                    .fetch_one(&mut **tx)
                    .await?;
                Ok(ClaimState {
                    claimable: row.try_get("claimable")?,
                    held: row.try_get("held")?,
                    current: row.try_get("current")?,
                })
            }
            Attempt::Lite(_) => Ok(ClaimState {
                claimable: true,
                held: false,
                current: self.find_current(project_id).await?.is_some(),
            }),
        }
    }
}
