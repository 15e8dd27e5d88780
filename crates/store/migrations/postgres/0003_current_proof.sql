-- The current proof (SPEC section 7): one statement, defined once.
-- A snapshot is current for a project when the project exists, its package_count equals the
-- number of live heads, every live head's generation is active, and its source rows equal the
-- live heads in all six columns, both ways. Zero or several matches mean absent.

CREATE FUNCTION ql3.find_current_tool_snapshot(p_project_id text)
RETURNS TABLE (
  snapshot_id bigint,
  snapshot_digest text,
  active_vector_digest text,
  definition_digest text,
  canonical_json bytea,
  committed_at timestamptz
)
LANGUAGE sql STABLE SECURITY INVOKER PARALLEL SAFE
SET search_path = ql3, pg_temp
AS $$
  WITH live AS (
    SELECT i.package_name, i.installation_id, i.active_generation AS generation,
           g.status, g.generation_digest, g.lock_digest, g.revision_digest
    FROM ql3.package_installations AS i
    LEFT JOIN ql3.package_generations AS g
      ON g.installation_id = i.installation_id AND g.generation = i.active_generation
    WHERE i.project_id = p_project_id AND i.active_generation IS NOT NULL
  ),
  matches AS (
    SELECT s.snapshot_id, s.snapshot_digest, s.active_vector_digest, s.definition_digest,
           s.canonical_json, s.committed_at
    FROM ql3.tool_definition_snapshots AS s
    WHERE s.project_id = p_project_id
      AND EXISTS (SELECT 1 FROM ql3.projects AS p WHERE p.project_id = p_project_id)
      AND s.package_count = (SELECT count(*) FROM live)
      AND NOT EXISTS (SELECT 1 FROM live AS l WHERE l.status IS DISTINCT FROM 'active')
      AND NOT EXISTS (
        SELECT 1 FROM live AS l
        WHERE NOT EXISTS (
          SELECT 1 FROM ql3.tool_definition_snapshot_sources AS src
          WHERE src.snapshot_id = s.snapshot_id
            AND src.package_name = l.package_name
            AND src.installation_id = l.installation_id
            AND src.generation = l.generation
            AND src.generation_digest = l.generation_digest
            AND src.lock_digest = l.lock_digest
            AND src.revision_digest = l.revision_digest))
      AND NOT EXISTS (
        SELECT 1 FROM ql3.tool_definition_snapshot_sources AS src
        WHERE src.snapshot_id = s.snapshot_id
          AND NOT EXISTS (
            SELECT 1 FROM live AS l
            WHERE l.package_name = src.package_name
              AND l.installation_id = src.installation_id
              AND l.generation = src.generation
              AND l.generation_digest = src.generation_digest
              AND l.lock_digest = src.lock_digest
              AND l.revision_digest = src.revision_digest))
  )
  SELECT m.snapshot_id, m.snapshot_digest, m.active_vector_digest, m.definition_digest,
         m.canonical_json, m.committed_at
  FROM matches AS m
  WHERE (SELECT count(*) FROM matches) = 1
$$;
REVOKE EXECUTE ON FUNCTION ql3.find_current_tool_snapshot(text) FROM PUBLIC;

-- The consumer's door: runs as the owner, re-proves currency on every call, and returns only
-- the asked project's current snapshot.
CREATE FUNCTION ql3.current_tool_snapshot(p_project_id text)
RETURNS TABLE (
  snapshot_digest text,
  active_vector_digest text,
  definition_digest text,
  canonical_json bytea,
  committed_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ql3, pg_temp
AS $$
  SELECT f.snapshot_digest, f.active_vector_digest, f.definition_digest, f.canonical_json,
         f.committed_at
  FROM ql3.find_current_tool_snapshot(p_project_id) AS f
$$;
REVOKE EXECUTE ON FUNCTION ql3.current_tool_snapshot(text) FROM PUBLIC;
