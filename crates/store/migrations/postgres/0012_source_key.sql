-- The consumer's door at scale (contract section 7): a proof whose cost follows the live
-- vector, not the project's history, and a conditional door.
--
-- Until now the proof took every snapshot the project ever had as a candidate and compared
-- each one's source rows with the live heads, so every tool call and every attempt got slower
-- as history grew (16.7 ms at 2,000 snapshots, 13 times the cost at one). Now each snapshot
-- carries `source_key`, a short text the proof computes from the live heads in the same
-- statement and looks up by index: at most the few snapshots whose key matches are compared,
-- in full, both ways, as before. The key is not a digest (SQLite's SQL has no hash function and
-- both dialects compute it the same way): for each source row in package order, the first 8
-- hex digits of its generation digest and the first 8 of its revision digest. A key match
-- proves nothing; it only chooses which snapshots to compare. Vectors that share every such
-- prefix (the same contents reinstalled under other ids) share a key, and the comparison tells
-- them apart.

-- 1. The key, for every stored snapshot. Adding the column takes ACCESS EXCLUSIVE on the table
-- until this migration commits, so while the append-only trigger is off for the backfill no
-- other session can read or write the table, let alone update it. No digest changes.
ALTER TABLE ql3.tool_definition_snapshots ADD COLUMN source_key text COLLATE "C";
ALTER TABLE ql3.tool_definition_snapshots DISABLE TRIGGER tool_definition_snapshots_append_only;
UPDATE ql3.tool_definition_snapshots AS s
SET source_key = coalesce((
  SELECT string_agg(substr(src.generation_digest, 8, 8) || substr(src.revision_digest, 8, 8),
                    '' ORDER BY src.package_name)
  FROM ql3.tool_definition_snapshot_sources AS src
  WHERE src.snapshot_id = s.snapshot_id), '');
ALTER TABLE ql3.tool_definition_snapshots ENABLE ALWAYS TRIGGER tool_definition_snapshots_append_only;
ALTER TABLE ql3.tool_definition_snapshots ALTER COLUMN source_key SET NOT NULL;
-- 16 characters a source row (at most 2,048, well inside a btree entry).
ALTER TABLE ql3.tool_definition_snapshots ADD CONSTRAINT tool_definition_snapshots_source_key_format
  CHECK (length(source_key) = 16 * package_count);
-- The proof looks its candidates up by this expression, which only this index answers: with
-- `project_id = …` and `source_key = …` apart, the planner, pricing every path alike on empty
-- tables, took the (project_id, active_vector_digest) key or the primary key instead and read
-- every snapshot of the project, or of the table, for as long as that plan was kept. A space
-- never occurs in a project id or a key, so the pair is spelled without ambiguity.
CREATE INDEX tool_definition_snapshots_source_key
  ON ql3.tool_definition_snapshots ((project_id || ' ' || source_key));

-- 2. The database checks the key of every new snapshot, with its digests (migration 11).
CREATE OR REPLACE FUNCTION ql3.check_snapshot() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  n_sources integer;
  vector text;
  key text;
  head bytea;
  tail bytea;
  doc bytea := NEW.canonical_json;
  defs bytea;
  problem text;
BEGIN
  SELECT count(*),
         coalesce(string_agg(
           '{"generation":' || src.generation
           || ',"generationDigest":"' || src.generation_digest
           || '","installationId":"' || src.installation_id
           || '","lockDigest":"' || src.lock_digest
           || '","packageName":"' || src.package_name
           || '","revisionDigest":"' || src.revision_digest || '"}',
           ',' ORDER BY src.package_name), ''),
         coalesce(string_agg(substr(src.generation_digest, 8, 8) || substr(src.revision_digest, 8, 8),
           '' ORDER BY src.package_name), '')
    INTO n_sources, vector, key
  FROM ql3.tool_definition_snapshot_sources AS src
  WHERE src.snapshot_id = NEW.snapshot_id;
  vector := '[' || vector || ']';
  head := convert_to('{"activeVector":' || vector || ',"activeVectorDigest":"'
                     || NEW.active_vector_digest || '","definitionDigest":"'
                     || NEW.definition_digest || '","definitions":', 'UTF8');
  tail := convert_to(',"projectId":"' || NEW.project_id
                     || '","schema":"qinglong/project-tool-definition-snapshot@v1"}', 'UTF8');
  IF n_sources <> NEW.package_count THEN
    problem := format('it has %s source rows for a package_count of %s', n_sources, NEW.package_count);
  ELSIF key <> NEW.source_key THEN
    problem := 'source_key is not the key of its source rows';
  ELSIF 'sha256:' || encode(sha256(doc), 'hex') <> NEW.snapshot_digest THEN
    problem := 'snapshot_digest is not the SHA-256 of canonical_json';
  ELSIF 'sha256:' || encode(sha256(convert_to('{"packages":' || vector || ',"projectId":"'
        || NEW.project_id || '","schema":"qinglong/active-vector@v1"}', 'UTF8')), 'hex')
        <> NEW.active_vector_digest THEN
    problem := 'active_vector_digest is not the digest of its source rows';
  ELSIF octet_length(doc) < octet_length(head) + octet_length(tail) + 2
        OR substring(doc FROM 1 FOR octet_length(head)) <> head
        OR substring(doc FROM octet_length(doc) - octet_length(tail) + 1) <> tail THEN
    problem := 'canonical_json is not the document of its source rows, digests and project';
  ELSE
    defs := substring(doc FROM octet_length(head) + 1
                      FOR octet_length(doc) - octet_length(head) - octet_length(tail));
    IF 'sha256:' || encode(sha256(convert_to('{"definitions":', 'UTF8') || defs
          || convert_to(',"schema":"qinglong/tool-definitions@v1"}', 'UTF8')), 'hex')
          <> NEW.definition_digest THEN
      problem := 'definition_digest is not the digest of its definitions';
    ELSE
      -- `json`, not `jsonb`: validating the text costs a quarter of building the tree.
      BEGIN
        IF json_array_length(convert_from(defs, 'UTF8')::json) <> NEW.definition_count THEN
          problem := format('its definitions are not an array of %s entries', NEW.definition_count);
        END IF;
      EXCEPTION WHEN data_exception THEN
        problem := 'its definitions are not a well-formed UTF-8 JSON array';
      END;
    END IF;
  END IF;
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION 'snapshot % of project % is refused: %', NEW.snapshot_digest, NEW.project_id, problem
      USING ERRCODE = 'check_violation',
            HINT = 'only package-executor writes snapshots; `package-executor verify` recomputes every stored one';
  END IF;
  RETURN NULL;
END
$$;

-- 3. The proof, unchanged in meaning (migration 10), in a shape whose cost follows the live
-- vector:
-- - Its candidates are found by index: the project and the live heads' key, as one expression
--   (the project's own condition is part of it). The key is NULL, so nothing is found, for a
--   project with more than 128 heads: package_count is at most 128.
-- - The six-column comparison, both ways, is one comparison of two texts: the candidate's
--   source rows and the live heads, each row's six columns joined by '|', the rows by ',', in
--   package order. Every column is format-checked on both sides, so neither character occurs
--   in one and the text spells the rows without ambiguity; package names are unique on both
--   sides, so equal texts are equal sets of rows. (Row by row, the way back looked each source
--   row up in the live heads, a scan of them each: 128 x 128 comparisons for 128 packages.)
-- - The subqueries stay per-row subqueries (OFFSET 0, migration 10), not joins: as joins, an
--   order by snapshot_id was worth having, and the primary key's full scan came back.
-- Still inlinable: no SET clause.
CREATE OR REPLACE FUNCTION ql3.find_current_tool_snapshot(p_project_id text)
RETURNS TABLE (
  snapshot_id bigint,
  snapshot_digest text,
  active_vector_digest text,
  definition_digest text,
  canonical_json bytea,
  committed_at timestamptz
)
LANGUAGE sql STABLE SECURITY INVOKER PARALLEL SAFE
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
    WHERE (s.project_id || ' ' || s.source_key) = p_project_id || ' ' || (
        SELECT CASE WHEN count(*) <= 128
                    THEN coalesce(string_agg(substr(k.generation_digest, 8, 8)
                                             || substr(k.revision_digest, 8, 8),
                                             '' ORDER BY k.package_name COLLATE "C"), '') END
        FROM live AS k)
      AND EXISTS (SELECT 1 FROM ql3.projects AS p WHERE p.project_id = p_project_id)
      AND s.package_count = (SELECT count(*) FROM live)
      AND NOT EXISTS (SELECT 1 FROM live AS l WHERE l.status IS DISTINCT FROM 'active')
      AND (SELECT coalesce(string_agg(src.package_name || '|' || src.installation_id || '|'
                                      || src.generation || '|' || src.generation_digest || '|'
                                      || src.lock_digest || '|' || src.revision_digest,
                                      ',' ORDER BY src.package_name COLLATE "C"), '')
           FROM ql3.tool_definition_snapshot_sources AS src
           WHERE src.snapshot_id = s.snapshot_id)
        = (SELECT coalesce(string_agg(l.package_name || '|' || l.installation_id || '|'
                                      || l.generation || '|' || l.generation_digest || '|'
                                      || l.lock_digest || '|' || l.revision_digest,
                                      ',' ORDER BY l.package_name COLLATE "C"), '')
           FROM live AS l)
  )
  SELECT m.snapshot_id, m.snapshot_digest, m.active_vector_digest, m.definition_digest,
         m.canonical_json, m.committed_at
  FROM matches AS m
  WHERE (SELECT count(*) FROM matches) = 1
$$;

-- 4. The consumer's doors in PL/pgSQL, which keeps each statement's plan for the session: a
-- SQL function that cannot be inlined (SECURITY DEFINER, a SET clause) was planned again on
-- every call before PostgreSQL 18, a few milliseconds each. A kept plan must not depend on the
-- statistics of the moment (it may be made while the tables are empty), so the doors price
-- out what the executor's sessions do and what the checks do (migrations 8 and 11), and use
-- the generic plan from the first call, as the executor does: left to choose, PostgreSQL
-- planned every call afresh (a custom plan for each project id), which cost twice the proof. The one-argument door returns the
-- current snapshot; the two-argument door returns the same row with `canonical_json` NULL when
-- the current snapshot's digest is the one the caller already holds (snapshots are immutable,
-- so its copy is still good), which never reads the document. A NULL digest is no copy.
CREATE OR REPLACE FUNCTION ql3.current_tool_snapshot(p_project_id text)
RETURNS TABLE (
  snapshot_digest text,
  active_vector_digest text,
  definition_digest text,
  canonical_json bytea,
  committed_at timestamptz
)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT f.snapshot_digest, f.active_vector_digest, f.definition_digest, f.canonical_json,
         f.committed_at
  FROM ql3.find_current_tool_snapshot(p_project_id) AS f;
END
$$;

CREATE FUNCTION ql3.current_tool_snapshot(p_project_id text, p_known_snapshot_digest text)
RETURNS TABLE (
  snapshot_digest text,
  active_vector_digest text,
  definition_digest text,
  canonical_json bytea,
  committed_at timestamptz
)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT f.snapshot_digest, f.active_vector_digest, f.definition_digest,
         CASE WHEN f.snapshot_digest = p_known_snapshot_digest THEN NULL ELSE f.canonical_json END,
         f.committed_at
  FROM ql3.find_current_tool_snapshot(p_project_id) AS f;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.current_tool_snapshot(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ql3.current_tool_snapshot(text, text) TO ql3_tool_consumer;
