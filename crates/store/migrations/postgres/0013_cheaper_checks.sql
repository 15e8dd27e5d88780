-- The database's checks (migration 11) at less of their cost, every refusal kept, in the same
-- order and with the same words.

-- 1. The mark is cleared by PL/pgSQL, which keeps its statement's plan for the session. As a
-- SQL function that cannot be inlined (SECURITY DEFINER, a SET clause) it was parsed, analysed
-- and planned again on every call before PostgreSQL 18: a tenth of the server's time in a cold
-- run. Same signature, grants and result: whether the row holding that version was deleted.
CREATE OR REPLACE FUNCTION ql3.clear_pending_mark(p_project_id text, p_version bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  DELETE FROM ql3.pending_projects AS m
  WHERE m.project_id = p_project_id AND m.version = p_version;
  RETURN FOUND;
END
$$;

-- 2. The snapshot check, the same tests in the same order, cheaper to run:
-- - the source rows are read once, in package order from the primary key, and both aggregates
--   fold them in the order the subquery gives (an `ORDER BY` in each aggregate sorted the rows
--   again, once each). PostgreSQL keeps a sorted subquery's order into a plain aggregate over
--   it, as here (one index scan, no join); were it ever not kept, the texts would differ and the
--   snapshot be refused: the check can fail closed this way, never let a forgery through;
-- - the document is decompressed once, into the function's own copy: kept compressed, it was
--   decompressed again for its digest, its head, its tail and its definitions, which costs
--   little with lz4 but a fifth of the check with pglz (the compression of a server built
--   without lz4, migration 7);
-- - the definitions' digest is taken over constant bytes around them (ASCII, so the same in
--   any server encoding), not texts converted at every call.
CREATE OR REPLACE FUNCTION ql3.check_snapshot() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  n_sources integer;
  vector text;
  key text;
  doc bytea := NEW.canonical_json || '\x'::bytea;
  n_doc integer := octet_length(doc);
  head bytea;
  tail bytea;
  defs bytea;
  problem text;
BEGIN
  SELECT count(*),
         '[' || coalesce(string_agg(
           '{"generation":' || o.generation
           || ',"generationDigest":"' || o.generation_digest
           || '","installationId":"' || o.installation_id
           || '","lockDigest":"' || o.lock_digest
           || '","packageName":"' || o.package_name
           || '","revisionDigest":"' || o.revision_digest || '"}', ','), '') || ']',
         coalesce(string_agg(substr(o.generation_digest, 8, 8) || substr(o.revision_digest, 8, 8), ''), '')
    INTO n_sources, vector, key
  FROM (SELECT src.generation, src.generation_digest, src.installation_id, src.lock_digest,
               src.package_name, src.revision_digest
        FROM ql3.tool_definition_snapshot_sources AS src
        WHERE src.snapshot_id = NEW.snapshot_id
        ORDER BY src.package_name) AS o;
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
  ELSIF n_doc < octet_length(head) + octet_length(tail) + 2
        OR substring(doc FROM 1 FOR octet_length(head)) <> head
        OR substring(doc FROM n_doc - octet_length(tail) + 1) <> tail THEN
    problem := 'canonical_json is not the document of its source rows, digests and project';
  ELSE
    defs := substring(doc FROM octet_length(head) + 1
                      FOR n_doc - octet_length(head) - octet_length(tail));
    IF 'sha256:' || encode(sha256('{"definitions":'::bytea || defs
          || ',"schema":"qinglong/tool-definitions@v1"}'::bytea), 'hex')
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
