-- The database's trust boundaries (contract sections 6 to 9): claims that only the executor's
-- role can take, generation keys that keep their first values for ever, snapshots the database
-- checks on insert, and no grant that lets the executor lock the control plane out.

-- 1. Claims. A claim is a row lock (FOR UPDATE) on the project's row here. Locking a row takes
-- UPDATE privilege on the table or one of its columns; the executor's role has it on one column
-- and nothing else has any, so no other login can take, hold or block a claim (an advisory lock
-- has no privileges at all: any login could take the old one). A column grant does not allow
-- LOCK TABLE beyond ACCESS SHARE (that needs table-level UPDATE, DELETE or TRUNCATE), so the
-- executor cannot lock the table itself over the trigger below that adds rows to it.
CREATE TABLE ql3.project_claims (
  project_id text COLLATE "C" PRIMARY KEY
    CONSTRAINT project_claims_project_id_format CHECK (project_id ~ '^[A-Za-z0-9._-]{1,128}$')
);
REVOKE ALL ON ql3.project_claims FROM PUBLIC;

-- Every project that ever existed has its claim row; a deleted project's row stays (deleting it
-- would wait on a claim). `ON CONFLICT DO NOTHING` does not wait on a row a claim has locked.
CREATE FUNCTION ql3.add_project_claims() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  INSERT INTO ql3.project_claims (project_id)
  SELECT DISTINCT n.project_id FROM new_rows AS n ORDER BY n.project_id
  ON CONFLICT (project_id) DO NOTHING;
  RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.add_project_claims() FROM PUBLIC;

CREATE TRIGGER projects_claim_insert AFTER INSERT ON ql3.projects
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ql3.add_project_claims();
CREATE TRIGGER projects_claim_update AFTER UPDATE ON ql3.projects
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ql3.add_project_claims();
ALTER TABLE ql3.projects ENABLE ALWAYS TRIGGER projects_claim_insert;
ALTER TABLE ql3.projects ENABLE ALWAYS TRIGGER projects_claim_update;

INSERT INTO ql3.project_claims (project_id)
SELECT p.project_id FROM ql3.projects AS p ORDER BY p.project_id;

GRANT SELECT, UPDATE (project_id) ON ql3.project_claims TO ql3_package_executor;

-- 2. Generation keys. The first values written under an (installation, generation) key are kept
-- here for ever; a later INSERT of the key (after a DELETE, deferred constraints or not) must
-- bring the same digests and permissions, or it is refused. With the UPDATE trigger of
-- migration 1 a key can never stand for other values than it first had, so a snapshot built
-- from it cannot be proven current over approvals that changed behind it. The check waits on
-- a concurrent writer of the same key (the ledger's unique index), so two transactions cannot
-- both be first.
CREATE TABLE ql3.generation_ledger (
  installation_id text COLLATE "C" NOT NULL,
  generation bigint NOT NULL,
  generation_digest text COLLATE "C" NOT NULL,
  lock_digest text COLLATE "C" NOT NULL,
  revision_digest text COLLATE "C" NOT NULL,
  approved_permissions text NOT NULL,
  PRIMARY KEY (installation_id, generation)
);
REVOKE ALL ON ql3.generation_ledger FROM PUBLIC;

INSERT INTO ql3.generation_ledger
SELECT g.installation_id, g.generation, g.generation_digest, g.lock_digest, g.revision_digest,
       g.approved_permissions
FROM ql3.package_generations AS g ORDER BY g.installation_id, g.generation;

CREATE FUNCTION ql3.hold_generation_keys() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  changed record;
BEGIN
  INSERT INTO ql3.generation_ledger AS l
  SELECT n.installation_id, n.generation, n.generation_digest, n.lock_digest, n.revision_digest,
         n.approved_permissions
  FROM new_rows AS n ORDER BY n.installation_id, n.generation
  ON CONFLICT (installation_id, generation) DO NOTHING;
  SELECT n.installation_id, n.generation INTO changed
  FROM new_rows AS n,
  LATERAL (SELECT l.* FROM ql3.generation_ledger AS l
           WHERE l.installation_id = n.installation_id AND l.generation = n.generation
           OFFSET 0) AS l
  WHERE (l.generation_digest, l.lock_digest, l.revision_digest, l.approved_permissions)
        IS DISTINCT FROM (n.generation_digest, n.lock_digest, n.revision_digest, n.approved_permissions)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'generation % of installation % keeps its first digests and permissions for ever: it was written before with other ones',
      changed.generation, changed.installation_id
      USING ERRCODE = 'P0001',
            HINT = 'a generation key keeps its first values for ever, even after a DELETE; create a new generation number instead';
  END IF;
  RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.hold_generation_keys() FROM PUBLIC;

CREATE TRIGGER package_generations_hold_keys AFTER INSERT ON ql3.package_generations
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ql3.hold_generation_keys();
ALTER TABLE ql3.package_generations ENABLE ALWAYS TRIGGER package_generations_hold_keys;

-- 3. Snapshots the database checks, whoever inserts them. At commit (a deferred constraint
-- trigger, so the source rows are in), a snapshot row must hold exactly `package_count` source
-- rows, and its document must be the canonical one of contract section 3 around them: it begins
-- with the active vector those rows spell (their columns are format-checked, so their JSON needs
-- no escaping) and the row's two digests, ends with the row's project, its `definitions` are a
-- JSON array of `definition_count` entries, `active_vector_digest` and `definition_digest` are
-- the SHA-256 of their documents and `snapshot_digest` that of the whole. A source row may only
-- be added in the transaction that inserted its snapshot, so no row can be added later. Both
-- functions pin their plans to key lookups, as the marking functions do (migration 8): they
-- are planned in whichever session writes, on whatever statistics there are.
CREATE FUNCTION ql3.check_snapshot() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  n_sources integer;
  vector text;
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
           ',' ORDER BY src.package_name), '')
    INTO n_sources, vector
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
REVOKE EXECUTE ON FUNCTION ql3.check_snapshot() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER tool_definition_snapshots_hold
  AFTER INSERT ON ql3.tool_definition_snapshots
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION ql3.check_snapshot();
ALTER TABLE ql3.tool_definition_snapshots ENABLE ALWAYS TRIGGER tool_definition_snapshots_hold;

CREATE FUNCTION ql3.check_snapshot_sources() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  late bigint;
BEGIN
  -- One key lookup per distinct snapshot of the statement (OFFSET 0 keeps it a per-row
  -- subquery): a plan that joined the whole snapshots table, as the planner may choose for a
  -- transition table it has no statistics for, made every append cost the table's size.
  SELECT n.snapshot_id INTO late
  FROM (SELECT DISTINCT r.snapshot_id FROM new_rows AS r) AS n
  WHERE NOT EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s
                    WHERE s.snapshot_id = n.snapshot_id
                      AND s.xmin = pg_current_xact_id()::xid
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
REVOKE EXECUTE ON FUNCTION ql3.check_snapshot_sources() FROM PUBLIC;

-- One call per statement (an append inserts all its source rows in one), not one per row.
CREATE TRIGGER tool_definition_snapshot_sources_hold
  AFTER INSERT ON ql3.tool_definition_snapshot_sources
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.check_snapshot_sources();
ALTER TABLE ql3.tool_definition_snapshot_sources ENABLE ALWAYS TRIGGER tool_definition_snapshot_sources_hold;

-- 4. Marks are cleared through a function, not a DELETE grant: DELETE would also let the
-- executor LOCK the whole index in ACCESS EXCLUSIVE MODE, and every control-plane write marks a
-- project in it. The function deletes one row, the one whose version the build read.
CREATE FUNCTION ql3.clear_pending_mark(p_project_id text, p_version bigint) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  WITH cleared AS (
    DELETE FROM ql3.pending_projects AS m
    WHERE m.project_id = p_project_id AND m.version = p_version
    RETURNING 1
  )
  SELECT count(*) > 0 FROM cleared
$$;
REVOKE EXECUTE ON FUNCTION ql3.clear_pending_mark(text, bigint) FROM PUBLIC;
REVOKE DELETE ON ql3.pending_projects FROM ql3_package_executor;
GRANT EXECUTE ON FUNCTION ql3.clear_pending_mark(text, bigint) TO ql3_package_executor;
