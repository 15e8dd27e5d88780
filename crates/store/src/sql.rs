//! Query texts, written once with `ql3.`-qualified names: a [`Statement`] where both dialects
//! run it (rendered for each at compile time, see `dialect.rs`), a plain text where one alone
//! does (`_PG`, and SQLite's own spellings).

use crate::dialect::Statement;
use crate::statement;

/// Live heads of project `$1` joined to their generations, in vector order; at most 129 rows,
/// which is all `too-many-packages` needs. `$columns`, `$join` and `$gate` add selected
/// columns, joins and conditions for the combined steps of an attempt.
macro_rules! heads_query {
    ($columns:expr, $join:expr, $gate:expr) => {
        concat!(
            "
SELECT i.package_name, i.installation_id, i.active_generation, g.status,
       g.generation_digest, g.lock_digest, g.revision_digest, g.approved_permissions",
            $columns,
            "
FROM ql3.package_installations AS i
LEFT JOIN ql3.package_generations AS g
  ON g.installation_id = i.installation_id AND g.generation = i.active_generation",
            $join,
            "
WHERE i.project_id = $1 AND i.active_generation IS NOT NULL",
            $gate,
            "
ORDER BY i.package_name
LIMIT 129"
        )
    };
}

/// One observation (the first and second, and `explain`'s).
pub const OBSERVE_HEADS: Statement = statement!(heads_query!("", "", ""));

/// `heads_query!` columns for each head's revision: its stored `byte_length` and the actual
/// length of its content (by the dialect's `$length` function), never its bytes (NULL when
/// the revision row is missing).
macro_rules! length_columns {
    ($length:expr) => {
        concat!(
            ",
       r.byte_length, CAST(",
            $length,
            "(r.content) AS BIGINT) AS actual_length"
        )
    };
}

/// The `heads_query!` join that [`length_columns!`] reads.
macro_rules! length_join {
    () => {
        "
  LEFT JOIN ql3.materialized_revisions AS r ON r.revision_digest = g.revision_digest"
    };
}

/// The column that brings a head's revision bytes along when `$total`, the bytes of all the
/// heads' revisions, is at most `$cap` (NULL otherwise); a cap of -1 turns it off. The total
/// is taken from the stored lengths, never by reading the contents.
macro_rules! inline_column {
    ($total:expr, $cap:expr) => {
        concat!(
            ",
       CASE WHEN ",
            $total,
            " <= ",
            $cap,
            " THEN r.content END AS inline_content"
        )
    };
}

/// The first observation with each head's revision lengths, and their bytes within the cap
/// `$2` (SQLite's open step; PostgreSQL's is part of [`OPEN_PG`]). The total is a subquery of
/// its own, evaluated once: SQLite materialises a window's input rows with every column the
/// select list uses, so a window sum here would read every revision whole, however large.
pub const OBSERVE_WITH_LENGTHS: Statement = statement!(heads_query!(
    concat!(
        length_columns!("LENGTH_FN"),
        inline_column!(
            "(SELECT sum(LENGTH_FN(r2.content))
         FROM ql3.package_installations AS i2
         JOIN ql3.package_generations AS g2
           ON g2.installation_id = i2.installation_id AND g2.generation = i2.active_generation
         JOIN ql3.materialized_revisions AS r2 ON r2.revision_digest = g2.revision_digest
         WHERE i2.project_id = $1 AND i2.active_generation IS NOT NULL)",
            "$2"
        )
    ),
    length_join!(),
    ""
));

/// Several revisions' bytes in one statement (PostgreSQL: `$1` a `text[]`), each never more
/// than the 24 MiB limit; the content first, where [`RevisionBytes`](super::RevisionBytes) reads it.
pub const REVISION_CONTENTS_PG: &str = "
SELECT r.content, r.revision_digest FROM ql3.materialized_revisions AS r
WHERE r.revision_digest = ANY($1) AND octet_length(r.content) <= 25165824";

/// A slice of one revision's bytes: `$3` bytes from 1-based offset `$2` (`substr` over bytes on
/// both dialects). Large revisions are read this way. On PostgreSQL a slice reads only its own
/// chunks (migration 0009 stores revisions uncompressed); SQLite loads the whole value to cut it,
/// so slices there are larger and the memory budget counts the whole revision.
pub const REVISION_SLICE: Statement = statement!(
    "
SELECT substr(r.content, $2, $3) AS part FROM ql3.materialized_revisions AS r
WHERE r.revision_digest = $1"
);

/// [`REVISION_CONTENTS_PG`] in SQLite: `$1` a JSON array of digests.
pub const REVISION_CONTENTS_SQLITE: &str = "
SELECT r.content, r.revision_digest FROM materialized_revisions AS r
WHERE r.revision_digest IN (SELECT j.value FROM json_each($1) AS j) AND length(r.content) <= 25165824";

/// Whether a project row exists.
pub const PROJECT_EXISTS: Statement =
    statement!("SELECT COUNT(*) AS n FROM ql3.projects AS p WHERE p.project_id = $1");

/// Records a rejection (once per project and vector).
pub const RECORD_REJECTION: Statement = statement!("
INSERT INTO ql3.tool_definition_snapshot_rejections (project_id, active_vector_digest, reason, detail)
VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING");

/// Appends a snapshot; both unique keys arbitrate (no conflict target).
pub const INSERT_SNAPSHOT: Statement = statement!(
    "
INSERT INTO ql3.tool_definition_snapshots
  (project_id, active_vector_digest, definition_digest, snapshot_digest, package_count,
   definition_count, canonical_json, source_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT DO NOTHING
RETURNING snapshot_id"
);

/// The row an exact replay must match.
pub const SNAPSHOT_BY_VECTOR: Statement = statement!(
    "
SELECT s.snapshot_digest FROM ql3.tool_definition_snapshots AS s
WHERE s.project_id = $1 AND s.active_vector_digest = $2"
);

/// The newest snapshot of a project, current or not (for `explain`).
pub const NEWEST_SNAPSHOT: Statement = statement!(
    "
SELECT s.snapshot_id, s.snapshot_digest, s.active_vector_digest, s.definition_digest,
       COMMITTED_AT AS committed_at
FROM ql3.tool_definition_snapshots AS s
WHERE s.project_id = $1
ORDER BY s.snapshot_id DESC
LIMIT 1"
);

/// Snapshots in id order after `$1`, one page at a time (for `verify`): up to 16, and no more
/// after the documents before a row already hold `$2` bytes, so a page of large documents
/// stays small (the first row always comes, whatever its size). `$filter` narrows the rows.
macro_rules! snapshot_page {
    ($filter:expr) => {
        concat!(
            "
SELECT page.snapshot_id, page.project_id, page.snapshot_digest, page.active_vector_digest,
       page.definition_digest, page.package_count, page.definition_count, page.canonical_json,
       page.source_key
FROM (
  SELECT s.snapshot_id, s.project_id, s.snapshot_digest, s.active_vector_digest,
         s.definition_digest, s.source_key, CAST(s.package_count AS BIGINT) AS package_count,
         CAST(s.definition_count AS BIGINT) AS definition_count, s.canonical_json,
         sum(LENGTH_FN(s.canonical_json)) OVER (ORDER BY s.snapshot_id)
           - LENGTH_FN(s.canonical_json) AS bytes_before
  FROM ql3.tool_definition_snapshots AS s
  WHERE s.snapshot_id > $1",
            $filter,
            "
  ORDER BY s.snapshot_id
  LIMIT 16) AS page
WHERE page.bytes_before < $2
ORDER BY page.snapshot_id"
        )
    };
}

/// Every project's snapshots, a page at a time.
pub const SNAPSHOT_PAGE: Statement = statement!(snapshot_page!(""));

/// How many snapshots are stored (for `verify`'s progress).
pub const COUNT_SNAPSHOTS: Statement =
    statement!("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM ql3.tool_definition_snapshots AS s");

/// How many snapshots project `$1` has.
pub const COUNT_SNAPSHOTS_OF_PROJECT: Statement = statement!(
    "SELECT CAST(COUNT(*) AS BIGINT) AS n \
     FROM ql3.tool_definition_snapshots AS s WHERE s.project_id = $1"
);

/// One project's (`$3`) snapshots, a page at a time: its own statement, so that the project's
/// index serves it (an `OR $3 IS NULL` form scanned every snapshot on SQLite).
pub const SNAPSHOT_PAGE_OF_PROJECT: Statement =
    statement!(snapshot_page!(" AND s.project_id = $3"));

/// The source rows of a page of snapshots, `$1` their ids, in one statement rather than one
/// per snapshot (a round trip each on PostgreSQL).
pub const SNAPSHOT_SOURCES_PG: &str = "
SELECT src.snapshot_id, src.package_name, src.installation_id, src.generation,
       src.generation_digest, src.lock_digest, src.revision_digest
FROM ql3.tool_definition_snapshot_sources AS src
WHERE src.snapshot_id = ANY($1)
ORDER BY src.snapshot_id, src.package_name";

/// [`SNAPSHOT_SOURCES_PG`] in SQLite: `$1` a JSON array of snapshot ids.
pub const SNAPSHOT_SOURCES_SQLITE: &str = "
SELECT src.snapshot_id, src.package_name, src.installation_id, src.generation,
       src.generation_digest, src.lock_digest, src.revision_digest
FROM tool_definition_snapshot_sources AS src
WHERE src.snapshot_id IN (SELECT j.value FROM json_each($1) AS j)
ORDER BY src.snapshot_id, src.package_name";

/// The current proof's body in SQLite, shared by its `find_current` and pending scan (PostgreSQL
/// has the migration's function): `s` is a snapshot of project `PROJECT`; true when its sources
/// equal the live heads. Its first two conditions are an index lookup on the key of the live
/// heads (see `source_key`), so only the snapshots with that key are compared, whatever the
/// project's history. As in PostgreSQL, the key is NULL (nothing is found) for a project with
/// more than 128 heads: `package_count` is at most 128.
macro_rules! proof {
    ($project:literal) => {
        concat!(
            "s.project_id = ",
            $project,
            "
  AND s.source_key = (
    SELECT CASE WHEN COUNT(*) <= 128
                THEN coalesce(group_concat(substr(g.generation_digest, 8, 8)
                                           || substr(g.revision_digest, 8, 8),
                                           '' ORDER BY i.package_name), '') END
    FROM ql3.package_installations AS i
    LEFT JOIN ql3.package_generations AS g
      ON g.installation_id = i.installation_id AND g.generation = i.active_generation
    WHERE i.project_id = ",
            $project,
            " AND i.active_generation IS NOT NULL)
  AND EXISTS (SELECT 1 FROM ql3.projects AS p WHERE p.project_id = ",
            $project,
            ")
  AND s.package_count = (SELECT COUNT(*) FROM ql3.package_installations AS i
                         WHERE i.project_id = ",
            $project,
            " AND i.active_generation IS NOT NULL)
  AND NOT EXISTS (
    SELECT 1 FROM ql3.package_installations AS i
    LEFT JOIN ql3.package_generations AS g
      ON g.installation_id = i.installation_id AND g.generation = i.active_generation
    WHERE i.project_id = ",
            $project,
            " AND i.active_generation IS NOT NULL
      AND (g.status IS NULL OR g.status <> 'active' OR NOT EXISTS (
        SELECT 1 FROM ql3.tool_definition_snapshot_sources AS src
        WHERE src.snapshot_id = s.snapshot_id
          AND src.package_name = i.package_name
          AND src.installation_id = i.installation_id
          AND src.generation = i.active_generation
          AND src.generation_digest = g.generation_digest
          AND src.lock_digest = g.lock_digest
          AND src.revision_digest = g.revision_digest)))
  AND NOT EXISTS (
    SELECT 1 FROM ql3.tool_definition_snapshot_sources AS src
    WHERE src.snapshot_id = s.snapshot_id
      AND NOT EXISTS (
        SELECT 1 FROM ql3.package_installations AS i
        JOIN ql3.package_generations AS g
          ON g.installation_id = i.installation_id AND g.generation = i.active_generation
        WHERE i.project_id = ",
            $project,
            "
          AND i.package_name = src.package_name
          AND i.installation_id = src.installation_id
          AND i.active_generation = src.generation
          AND g.status = 'active'
          AND g.generation_digest = src.generation_digest
          AND g.lock_digest = src.lock_digest
          AND g.revision_digest = src.revision_digest))"
        )
    };
}

/// `find_current` in PostgreSQL: the migration's function, one statement. The document is
/// left out (NULL) when the current snapshot's digest is `$2`, the one the caller holds (the
/// conditional door); it is never read then.
pub const FIND_CURRENT_PG: Statement = statement!("
SELECT f.snapshot_id, f.snapshot_digest, f.active_vector_digest, f.definition_digest,
       CASE WHEN f.snapshot_digest = $2 THEN NULL ELSE f.canonical_json END AS canonical_json,
       to_char(f.committed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS committed_at
FROM ql3.find_current_tool_snapshot($1) AS f");

/// The current snapshot's digest alone (PostgreSQL; the open step's currency check, in the
/// transaction that holds the claim, so no other executor can publish in between).
pub const CURRENT_DIGEST_PG: &str =
    "SELECT f.snapshot_digest FROM ql3.find_current_tool_snapshot($1) AS f";

/// The text of `FIND_CURRENT_SQLITE`, for statements that embed it: the matches' id and digest,
/// and `$columns` of the snapshot besides (`, s.x, s.y`). The matches are read twice, so SQLite
/// materialises them; a column left out is never read (the open step needs no document).
macro_rules! find_current_sqlite {
    ($columns:expr) => {
        concat!(
            "
WITH matches AS (
  SELECT s.snapshot_id, s.snapshot_digest",
            $columns,
            "
  FROM tool_definition_snapshots AS s
  WHERE ",
            proof!("$1"),
            "
)
SELECT m.* FROM matches AS m
WHERE (SELECT COUNT(*) FROM matches) = 1"
        )
    };
}

/// `find_current` in SQLite: the same proof, one statement; more than one match is absent. The
/// document is NULL, and never read, when the snapshot's digest is `$2` (as in PostgreSQL).
pub const FIND_CURRENT_SQLITE: Statement = statement!(find_current_sqlite!(
    ", s.active_vector_digest, s.definition_digest,
     CASE WHEN s.snapshot_digest = $2 THEN NULL ELSE s.canonical_json END AS canonical_json,
     s.committed_at"
));

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

/// Pending projects after a cursor, in byte order: those without a current snapshot. In
/// PostgreSQL the proof is the migration's function (inlined by the planner), asked only for
/// projects that have a snapshot at all, so a page walks the keyset in order and stops at the
/// LIMIT. (A join form let the planner sort every remaining project on each page.)
///
/// `$3`, when not NULL, ends the keyset at that id (inclusive), so that several pages can walk
/// disjoint ranges at once (see [`SPLIT_POINTS_PG`]).
pub const PENDING_PAGE_PG: Statement = statement!(
    "
SELECT p0.project_id FROM ql3.projects AS p0
WHERE p0.project_id > $1 AND ($3::text IS NULL OR p0.project_id <= $3)
  AND (NOT EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s
                   WHERE s.project_id = p0.project_id)
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

/// The observation ([`OBSERVE_HEADS`], with `$columns`, `$join` and `$gate` as there) as one
/// row of parallel arrays, for the combined PostgreSQL steps; `$arrays` aggregates the added
/// columns. One aggregate pass fills every array, so they stay aligned; the reader sorts the
/// heads into vector order (an `ORDER BY` per `array_agg` would cost a sort each).
macro_rules! live_heads {
    ($columns:expr, $arrays:expr, $join:expr, $gate:expr) => {
        concat!(
            "
  SELECT coalesce(array_agg(o.package_name), '{}') AS package_names,
         coalesce(array_agg(o.installation_id), '{}') AS installation_ids,
         coalesce(array_agg(o.active_generation), '{}') AS generations,
         coalesce(array_agg(o.status), '{}') AS statuses,
         coalesce(array_agg(o.generation_digest), '{}') AS generation_digests,
         coalesce(array_agg(o.lock_digest), '{}') AS lock_digests,
         coalesce(array_agg(o.revision_digest), '{}') AS revision_digests,
         coalesce(array_agg(o.approved_permissions), '{}') AS permissions",
            $arrays,
            "
  FROM (",
            heads_query!($columns, $join, $gate),
            ") AS o"
        )
    };
}

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

/// Every rejection recorded for a project.
pub const PROJECT_REJECTIONS: Statement = statement!(
    "
SELECT r.active_vector_digest, r.reason, r.detail
FROM ql3.tool_definition_snapshot_rejections AS r
WHERE r.project_id = $1"
);

// Activation and removal (`control.rs`): the control plane's side, for `sources`.

/// Locks an installation's head (so concurrent activations of one installation serialise) and
/// reads its active generation.
pub const LOCK_INSTALLATION: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = active_generation
WHERE installation_id = $1
RETURNING active_generation"
);

/// A generation's status.
pub const GENERATION_STATUS: Statement = statement!(
    "
SELECT g.status
FROM ql3.package_generations AS g
WHERE g.installation_id = $1 AND g.generation = $2"
);

/// Marks a generation superseded.
pub const SUPERSEDE: Statement = statement!(
    "
UPDATE ql3.package_generations SET status = 'superseded'
WHERE installation_id = $1 AND generation = $2"
);

/// Marks a generation active.
pub const MARK_ACTIVE: Statement = statement!(
    "
UPDATE ql3.package_generations SET status = 'active'
WHERE installation_id = $1 AND generation = $2"
);

/// Points an installation's head at a generation.
pub const POINT_HEAD: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = $1
WHERE installation_id = $2"
);

/// Locks a project's package head and reads its installation and active generation.
pub const LOCK_PACKAGE: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = active_generation
WHERE project_id = $1 AND package_name = $2
RETURNING installation_id, active_generation AS previous"
);

/// Removes a package from its project: the head points at nothing.
pub const CLEAR_HEAD: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = NULL
WHERE project_id = $1 AND package_name = $2"
);
