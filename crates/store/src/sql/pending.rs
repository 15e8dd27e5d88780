//! Finding work: pending and marked pages, the keyset's split points, a project's mark and its
//! clearing, and where a claim held elsewhere stands.

use super::*;

/// Pending projects after a cursor, in byte order: those without a current snapshot. In
/// PostgreSQL the proof is the migration's function (inlined by the planner), asked only for
/// projects that have a snapshot at all, so a page walks the keyset in order and stops at the
/// LIMIT. (A join form let the planner sort every remaining project on each page; `OFFSET 0`
/// keeps the first test a lookup per project, never a hash of every snapshot per page.)
///
/// `$3`, when not NULL, ends the keyset at that id (inclusive), so that several pages can walk
/// disjoint ranges at once (see [`SPLIT_POINTS_PG`]).
pub const PENDING_PAGE_PG: Statement = statement!(
    "
SELECT p0.project_id FROM ql3.projects AS p0
WHERE p0.project_id > $1 AND ($3::text IS NULL OR p0.project_id <= $3)
  AND (NOT EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s
                   WHERE s.project_id = p0.project_id OFFSET 0)
       OR NOT EXISTS (SELECT 1 FROM ql3.find_current_tool_snapshot(p0.project_id) AS f))
ORDER BY p0.project_id
LIMIT $2"
);

/// Marked projects after a cursor, in byte order (the pending index, contract section 9): what
/// a run looks at unless it is a full scan. Only ids that are still projects.
pub const MARKED_PAGE: Statement = statement!(
    "
SELECT m.project_id FROM ql3.pending_projects AS m
JOIN ql3.projects AS p0 ON p0.project_id = m.project_id
WHERE m.project_id > $1 AND (CAST($3 AS TEXT) IS NULL OR m.project_id <= $3)
ORDER BY m.project_id
LIMIT $2"
);

/// A project's mark, if any: its version.
pub const MARK_VERSION: Statement =
    statement!("SELECT m.version FROM ql3.pending_projects AS m WHERE m.project_id = $1");

/// Clears a project's mark if it still holds the version read before the build (`$2`); a
/// change since gave it a new version, and it stays. SQLite's text; PostgreSQL's is
/// [`CLEAR_MARK_PG`].
pub const CLEAR_MARK: Statement =
    statement!("DELETE FROM ql3.pending_projects WHERE project_id = $1 AND version = $2");

/// [`CLEAR_MARK`] in PostgreSQL: through the migration's function, since the executor's role
/// has no DELETE on the index (a DELETE grant would let it lock the whole table).
pub const CLEAR_MARK_PG: &str = "SELECT ql3.clear_pending_mark($1, $2) AS cleared";

/// Where a project's claim stands (PostgreSQL), for a project whose claim another session held
/// through every attempt: whether it has a claim row at all, whether a live session holds it
/// now (only executors can: see [`OPEN_PG`]), and whether the project is current. Run in a
/// transaction that is rolled back, so a claim this takes is let go at once.
pub const CLAIM_STATE_PG: &str = "
WITH k AS MATERIALIZED (
  SELECT k.project_id FROM ql3.project_claims AS k WHERE k.project_id = $1
  FOR UPDATE SKIP LOCKED
)
SELECT EXISTS (SELECT 1 FROM ql3.project_claims AS k0 WHERE k0.project_id = $1) AS claimable,
       EXISTS (SELECT 1 FROM ql3.project_claims AS k1 WHERE k1.project_id = $1)
         AND NOT EXISTS (SELECT 1 FROM k) AS held,
       EXISTS (SELECT 1 FROM ql3.find_current_tool_snapshot($1) AS f) AS current";

/// Pending projects after a cursor, SQLite: the same proof as `FIND_CURRENT_SQLITE`.
pub const PENDING_PAGE_SQLITE: Statement = statement!(concat!(
    "
SELECT p0.project_id FROM ql3.projects AS p0
WHERE p0.project_id > $1 AND ($3 IS NULL OR p0.project_id <= $3)
  AND NOT EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s WHERE ",
    proof!("p0.project_id"),
    ")
ORDER BY p0.project_id
LIMIT $2"
));

/// Project ids that split the keyset into parts of about equal size, at the fractions `$1`
/// (PostgreSQL; one sort of the ids, which costs far less than the proofs of a pending scan).
pub const SPLIT_POINTS_PG: &str = "
SELECT coalesce(percentile_disc($1::float8[]) WITHIN GROUP (ORDER BY p.project_id), '{}') AS points
FROM ql3.projects AS p";

/// [`SPLIT_POINTS_PG`] over the marked projects.
pub const SPLIT_MARKED_PG: &str = "
SELECT coalesce(percentile_disc($1::float8[]) WITHIN GROUP (ORDER BY m.project_id), '{}') AS points
FROM ql3.pending_projects AS m";
