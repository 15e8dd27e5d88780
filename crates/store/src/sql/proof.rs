//! The current proof: PostgreSQL's through the migration's function, SQLite's spelled here
//! (`proof!`; see ARCHITECTURE.md, "How to change the proof", for the three copies).

use super::*;

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

/// The consumers' conditional door (PostgreSQL), as `current` opens it for a login that may:
/// the columns of [`FIND_CURRENT_PG`]. The door names no row id, and `current` prints none: 0
/// stands in its place.
pub const CONSUMER_DOOR_PG: Statement = statement!("
SELECT 0::bigint AS snapshot_id, f.snapshot_digest, f.active_vector_digest, f.definition_digest,
       f.canonical_json,
       to_char(f.committed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS committed_at
FROM ql3.current_tool_snapshot($1, $2) AS f");

/// Whether the session's login may execute the consumers' door.
pub const MAY_USE_CONSUMER_DOOR_PG: &str = "SELECT has_function_privilege(\
    'ql3.current_tool_snapshot(text, text)', 'EXECUTE')";

/// The current snapshot's digest alone (PostgreSQL; the open step's currency check, in the
/// transaction that holds the claim, so no other executor can publish in between).
pub const CURRENT_DIGEST_PG: &str =
    "SELECT f.snapshot_digest FROM ql3.find_current_tool_snapshot($1) AS f";

/// [`CURRENT_DIGEST_PG`] for several projects at once (a batch's that have a snapshot at all):
/// a row for each project proven current, with its id.
pub const CURRENT_DIGESTS_PG: &str = "
SELECT b.project_id, f.snapshot_digest
FROM unnest($1::text[]) AS b(project_id)
CROSS JOIN LATERAL ql3.find_current_tool_snapshot(b.project_id) AS f";

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

/// The server's connection slots (see `ConnectionSlots`): every field of `pg_stat_activity`
/// read here is visible to any login. `reserved_connections` exists from PostgreSQL 16 on.
pub const CONNECTION_SLOTS_PG: &str = "
SELECT current_setting('max_connections')::bigint AS max_connections,
       current_setting('superuser_reserved_connections')::bigint
         + coalesce(current_setting('reserved_connections', true)::bigint, 0) AS reserved,
       (SELECT count(*) FROM pg_catalog.pg_stat_activity
        WHERE backend_type = 'client backend') AS in_use,
       (SELECT rolconnlimit::bigint FROM pg_catalog.pg_roles
        WHERE rolname = session_user) AS role_limit,
       (SELECT count(*) FROM pg_catalog.pg_stat_activity
        WHERE backend_type = 'client backend' AND usename = session_user) AS role_in_use";
