-- The database's snapshot check (migrations 11 and 13) once per statement, over every row the
-- statement inserted, instead of once per row at COMMIT: the same tests in the same order, the
-- same refusals in the same words. Under batches (contract section 9.2) one statement inserts
-- a batch's snapshots with their source rows, and the per-row check was a fifth of the
-- server's CPU in a cold run: a deferred event per row, a PL/pgSQL call and a planned
-- statement per row, and each document read back from its TOAST slices and decompressed. Over
-- the statement's transition table the documents are the inserted values themselves, and the
-- source rows of all of them are read by one statement.
--
-- What makes checking at the end of the statement as strong as at COMMIT: a snapshot's source
-- rows must now be inserted by the very statement that inserted it (the source-row trigger
-- below compares command ids as well as transaction ids), and snapshots and source rows are
-- append-only, so nothing a later statement does can change what was checked. Every writer of
-- snapshots (package-executor's append and batch statements, the tests' forgeries) inserts a
-- snapshot and its source rows in one statement.

-- 1. The check. The first form evaluates every row's tests in one statement; the tests run in
-- order and stop at the first that fails (CASE), so a document's definitions are parsed as
-- JSON only when everything before holds. A parse that fails raises, which aborts that
-- statement: only then are the rows checked one at a time, to name the first refused one
-- exactly as before. A statement that inserts no snapshot returns at once.
CREATE FUNCTION ql3.check_snapshots() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  ids bigint[];
  i integer := 0;
  one bigint;  -- NULL: every row of the statement at once
  bad record;
  refused boolean := false;
BEGIN
  LOOP
    BEGIN
      SELECT q.snapshot_digest, q.project_id, q.problem INTO bad
      FROM (
        SELECT n.snapshot_id, n.snapshot_digest, n.project_id,
          CASE
            WHEN a.n_sources <> n.package_count THEN
              format('it has %s source rows for a package_count of %s', a.n_sources, n.package_count)
            WHEN a.key <> n.source_key THEN 'source_key is not the key of its source rows'
            WHEN 'sha256:' || encode(sha256(n.canonical_json), 'hex') <> n.snapshot_digest THEN
              'snapshot_digest is not the SHA-256 of canonical_json'
            WHEN 'sha256:' || encode(sha256(convert_to('{"packages":' || a.vector || ',"projectId":"'
                  || n.project_id || '","schema":"qinglong/active-vector@v1"}', 'UTF8')), 'hex')
                  <> n.active_vector_digest THEN
              'active_vector_digest is not the digest of its source rows'
            WHEN h.n_doc < octet_length(h.head) + octet_length(h.tail) + 2
                 OR substring(n.canonical_json FROM 1 FOR octet_length(h.head)) <> h.head
                 OR substring(n.canonical_json FROM h.n_doc - octet_length(h.tail) + 1) <> h.tail THEN
              'canonical_json is not the document of its source rows, digests and project'
            WHEN 'sha256:' || encode(sha256('{"definitions":'::bytea
                  || substring(n.canonical_json FROM octet_length(h.head) + 1
                               FOR h.n_doc - octet_length(h.head) - octet_length(h.tail))
                  || ',"schema":"qinglong/tool-definitions@v1"}'::bytea), 'hex')
                  <> n.definition_digest THEN
              'definition_digest is not the digest of its definitions'
            -- `json`, not `jsonb`: validating the text costs a quarter of building the tree.
            WHEN json_array_length(convert_from(substring(n.canonical_json FROM octet_length(h.head) + 1
                   FOR h.n_doc - octet_length(h.head) - octet_length(h.tail)), 'UTF8')::json)
                 <> n.definition_count THEN
              format('its definitions are not an array of %s entries', n.definition_count)
          END AS problem
        FROM new_rows AS n
        -- The source rows in package order from the primary key; both aggregates fold them in
        -- the order the subquery gives (migration 13 says why that fails closed if ever not).
        CROSS JOIN LATERAL (
          SELECT count(*) AS n_sources,
                 '[' || coalesce(string_agg(
                   '{"generation":' || o.generation
                   || ',"generationDigest":"' || o.generation_digest
                   || '","installationId":"' || o.installation_id
                   || '","lockDigest":"' || o.lock_digest
                   || '","packageName":"' || o.package_name
                   || '","revisionDigest":"' || o.revision_digest || '"}', ','), '') || ']' AS vector,
                 coalesce(string_agg(substr(o.generation_digest, 8, 8) || substr(o.revision_digest, 8, 8), ''), '') AS key
          FROM (SELECT src.generation, src.generation_digest, src.installation_id, src.lock_digest,
                       src.package_name, src.revision_digest
                FROM ql3.tool_definition_snapshot_sources AS src
                WHERE src.snapshot_id = n.snapshot_id
                ORDER BY src.package_name) AS o
        ) AS a
        CROSS JOIN LATERAL (
          SELECT convert_to('{"activeVector":' || a.vector || ',"activeVectorDigest":"'
                            || n.active_vector_digest || '","definitionDigest":"'
                            || n.definition_digest || '","definitions":', 'UTF8') AS head,
                 convert_to(',"projectId":"' || n.project_id
                            || '","schema":"qinglong/project-tool-definition-snapshot@v1"}', 'UTF8') AS tail,
                 octet_length(n.canonical_json) AS n_doc
        ) AS h
        WHERE one IS NULL OR n.snapshot_id = one
      ) AS q
      WHERE q.problem IS NOT NULL
      ORDER BY q.snapshot_id
      LIMIT 1;
      refused := FOUND;
    EXCEPTION WHEN data_exception THEN
      IF one IS NULL THEN
        SELECT array_agg(n.snapshot_id ORDER BY n.snapshot_id) INTO ids FROM new_rows AS n;
      ELSE
        SELECT n.snapshot_digest, n.project_id,
               'its definitions are not a well-formed UTF-8 JSON array' AS problem
          INTO bad
        FROM new_rows AS n WHERE n.snapshot_id = one;
        refused := true;
      END IF;
    END;
    EXIT WHEN refused OR ids IS NULL OR i >= cardinality(ids);
    i := i + 1;
    one := ids[i];
  END LOOP;
  IF refused THEN
    RAISE EXCEPTION 'snapshot % of project % is refused: %', bad.snapshot_digest, bad.project_id, bad.problem
      USING ERRCODE = 'check_violation',
            HINT = 'only package-executor writes snapshots; `package-executor verify` recomputes every stored one';
  END IF;
  -- Fail closed: a statement whose rows raised together but none alone is refused as a whole.
  IF ids IS NOT NULL THEN
    RAISE EXCEPTION 'the % snapshots of this statement are refused: their check failed and no one row can be named', cardinality(ids)
      USING ERRCODE = 'check_violation',
            HINT = 'only package-executor writes snapshots; `package-executor verify` recomputes every stored one';
  END IF;
  RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.check_snapshots() FROM PUBLIC;

-- The same name, so that an owner who switches the check off (as the tests that show the
-- executor failing closed on a bypassed database do) names the same trigger.
DROP TRIGGER tool_definition_snapshots_hold ON ql3.tool_definition_snapshots;
DROP FUNCTION ql3.check_snapshot();
CREATE TRIGGER tool_definition_snapshots_hold
  AFTER INSERT ON ql3.tool_definition_snapshots
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.check_snapshots();
ALTER TABLE ql3.tool_definition_snapshots ENABLE ALWAYS TRIGGER tool_definition_snapshots_hold;

-- 2. Source rows come with their snapshot, in the same statement: the snapshot row was inserted
-- by this transaction (its `xmin`, as before) and by the same command (its `cmin` is that of
-- the statement's source rows, read from one of them: a statement's rows share one command
-- id). A source row added by a later statement of the same transaction, after the check above
-- ran, is refused as one added by a later transaction always was.
CREATE OR REPLACE FUNCTION ql3.check_snapshot_sources() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  command cid;
  late bigint;
BEGIN
  SELECT src.cmin INTO command
  FROM (SELECT r.snapshot_id, r.package_name FROM new_rows AS r LIMIT 1) AS r
  JOIN ql3.tool_definition_snapshot_sources AS src
    ON src.snapshot_id = r.snapshot_id AND src.package_name = r.package_name;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  -- One key lookup per distinct snapshot of the statement (OFFSET 0 keeps it a per-row
  -- subquery; migration 11 says why).
  SELECT n.snapshot_id INTO late
  FROM (SELECT DISTINCT r.snapshot_id FROM new_rows AS r) AS n
  WHERE NOT EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s
                    WHERE s.snapshot_id = n.snapshot_id
                      AND s.xmin = pg_current_xact_id()::xid
                      AND s.cmin = command
                    OFFSET 0)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'a source row for snapshot % is refused: source rows are inserted with their snapshot, never later',
      late
      USING ERRCODE = 'check_violation',
            HINT = 'snapshots are immutable; only package-executor writes them';
  END IF;
  RETURN NULL;
END
$$;
