//! The snapshot tables: an append and its replay, the recorded rejections, and `verify`'s and
//! `explain`'s reads.

use super::*;

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

/// Every rejection recorded for a project.
pub const PROJECT_REJECTIONS: Statement = statement!(
    "
SELECT r.active_vector_digest, r.reason, r.detail
FROM ql3.tool_definition_snapshot_rejections AS r
WHERE r.project_id = $1"
);
