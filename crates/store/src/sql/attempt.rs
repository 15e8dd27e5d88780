//! An attempt's combined steps, each one statement: opening it (the claim, the current check, the
//! first observation) and, on PostgreSQL, appending (the snapshot, its sources, the mark, the
//! second observation).

use super::*;

/// SQLite's open step up to the observation, in one statement (the connection's worker thread
/// is a hop per statement, and a hop costs more than these lookups): the project's mark
/// version, the digest of the snapshot proven current (NULL when none is), and the recorded
/// rejections as a JSON array of `[active_vector_digest, reason, detail]`. All of it is read
/// in the attempt's transaction, so in the same database snapshot as the observation after it.
pub const OPEN_SQLITE: Statement = statement!(concat!(
    "
SELECT (SELECT m.version FROM pending_projects AS m WHERE m.project_id = $1) AS mark_version,
       (SELECT c.snapshot_digest FROM (",
    find_current_sqlite!(""),
    "
       ) AS c) AS current_digest,
       (SELECT json_group_array(json_array(r.active_vector_digest, r.reason, r.detail))
        FROM tool_definition_snapshot_rejections AS r
        WHERE r.project_id = $1) AS rejections"
));

/// Opens an attempt in one PostgreSQL statement: the claim, then, only when it is held, whether the project has a snapshot at all, the first observation with each
/// revision's stored lengths, and the project's recorded rejections. When the heads' revisions
/// together hold at most `$2` bytes, their contents come too (`inline_contents`, aligned with
/// the heads; see `inline_column!`), which saves a cold project its revision read: a round
/// trip and a statement, about a tenth of what a typical project costs client and server.
/// The current proof is [`CURRENT_DIGEST_PG`], asked only when there is a snapshot: inlined
/// here, its thirty-odd plan nodes would be initialised on every attempt, a project built for
/// the first time included.
///
/// The claim is a row lock on the project's row of `ql3.project_claims` (migration 11), taken
/// with `SKIP LOCKED` so that a claim held by another executor is seen at once, never waited
/// for. Locking a row needs UPDATE privilege there, which only the executor's role has: no
/// other login can take or hold a claim. Both steps are `MATERIALIZED` CTEs so that the lock
/// is tried exactly once: as a plain subquery the planner may copy it into every gate that
/// reads `c.claimed`, and if another replica committed between two of those tries, one gate
/// would see the claim and another not (an empty first observation under a granted claim).
pub const OPEN_PG: &str = concat!(
    "
WITH k AS MATERIALIZED (
  SELECT k.project_id FROM ql3.project_claims AS k WHERE k.project_id = $1
  FOR UPDATE SKIP LOCKED
), c AS MATERIALIZED (SELECT EXISTS (SELECT 1 FROM k) AS claimed)
SELECT c.claimed,
       c.claimed AND EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s0
                             WHERE s0.project_id = $1) AS has_snapshot,
       (SELECT m.version FROM ql3.pending_projects AS m WHERE m.project_id = $1) AS mark_version,
       h.*, rj.*
FROM c
CROSS JOIN LATERAL (",
    live_heads!(
        concat!(
            length_columns!("octet_length"),
            // PostgreSQL's window keeps each revision as its TOAST pointer: summing the
            // lengths reads no content.
            inline_column!("sum(octet_length(r.content)) OVER ()", "$2")
        ),
        ",
         coalesce(array_agg(o.byte_length), '{}') AS byte_lengths,
         coalesce(array_agg(o.actual_length), '{}') AS actual_lengths,
         coalesce(array_agg(o.inline_content), '{}') AS inline_contents",
        length_join!(),
        " AND c.claimed"
    ),
    "
) AS h
CROSS JOIN LATERAL (
  SELECT coalesce(array_agg(r.active_vector_digest), '{}') AS rejected_vectors,
         coalesce(array_agg(r.reason), '{}') AS rejected_reasons,
         coalesce(array_agg(r.detail), '{}') AS rejected_details
  FROM ql3.tool_definition_snapshot_rejections AS r
  WHERE r.project_id = $1 AND c.claimed
) AS rj"
);

/// Appends in one PostgreSQL statement: the snapshot (`$1`–`$7` and its key `$15`, both unique
/// keys arbitrating),
/// its source rows from parallel arrays (`$8`–`$13`) only when the snapshot row was inserted,
/// the clearing of the project's mark if it still holds version `$14` (see [`CLEAR_MARK`]; the
/// caller rolls back on drift or a mismatch, which keeps it), and the second observation, all
/// in one statement snapshot.
pub const APPEND_PG: &str = concat!(
    "
WITH ins AS (
  INSERT INTO ql3.tool_definition_snapshots
    (project_id, active_vector_digest, definition_digest, snapshot_digest, package_count,
     definition_count, canonical_json, source_key)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $15)
  ON CONFLICT DO NOTHING
  RETURNING snapshot_id
), src AS (
  INSERT INTO ql3.tool_definition_snapshot_sources
    (snapshot_id, package_name, installation_id, generation, generation_digest, lock_digest,
     revision_digest)
  SELECT ins.snapshot_id, e.package_name, e.installation_id, e.generation, e.generation_digest,
         e.lock_digest, e.revision_digest
  FROM ins
  CROSS JOIN unnest($8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::text[])
    AS e(package_name, installation_id, generation, generation_digest, lock_digest, revision_digest)
), clr AS MATERIALIZED (
  SELECT ql3.clear_pending_mark($1, $14) AS cleared
)
SELECT (SELECT ins.snapshot_id FROM ins) AS snapshot_id, clr.cleared, h.*
FROM clr CROSS JOIN (",
    live_heads!("", "", "", ""),
    "
) AS h"
);
