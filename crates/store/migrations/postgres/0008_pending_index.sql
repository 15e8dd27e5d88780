-- The pending index (contract section 9): the projects a `run` must look at.
--
-- Every committed change that can change a project's live vector or its proof marks the
-- project in the same transaction, whoever writes it: these triggers fire for the `sources`
-- commands and for a control plane's plain SQL alike. The trigger functions are SECURITY
-- DEFINER (owned by ql3_owner), so the control plane needs no grant on the index.
--
-- A mark carries a version, unique and growing (a sequence). The executor reads the version
-- with its first observation and clears the mark only if it still holds that version, in the
-- transaction that publishes, replays, finds the project current or records its rejection;
-- a change that lands mid-build gives the mark a new version and it stays. On a conflict the
-- version is drawn after the row lock is taken, so it is always newer than the one it replaces.
--
-- The marking functions look projects up by key for each row a statement wrote. Their plans
-- are cached per session and made by whoever writes (a control plane's sessions too), on
-- whatever statistics there are, so they pin the shape: a LATERAL subquery per written row
-- (OFFSET 0 keeps it from being flattened into a join) and no hash or merge joins. A plan that
-- built the join of all installations and generations for every statement made a bulk import
-- quadratic (a 400 MB fixture took minutes in the triggers).
--
-- The index only decides what a run looks at. The current proof never consults it; a lost
-- mark delays a build until the next `run --full-scan`, and never makes anything stale.

CREATE SEQUENCE ql3.pending_version AS bigint;
REVOKE ALL ON SEQUENCE ql3.pending_version FROM PUBLIC;

CREATE TABLE ql3.pending_projects (
  project_id text COLLATE "C" PRIMARY KEY,
  version bigint NOT NULL
);
REVOKE ALL ON ql3.pending_projects FROM PUBLIC;

-- A revision row arriving marks the projects whose heads point at it.
CREATE INDEX package_generations_revision_digest ON ql3.package_generations (revision_digest);

-- Marks projects, each once, in id order (so concurrent markers lock rows in one order).
CREATE FUNCTION ql3.mark_pending(p_project_ids text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  INSERT INTO ql3.pending_projects AS m (project_id, version)
  SELECT d.project_id, nextval('ql3.pending_version')
  FROM (SELECT DISTINCT x.project_id FROM unnest(p_project_ids) AS x(project_id)
        WHERE x.project_id IS NOT NULL ORDER BY x.project_id) AS d
  ON CONFLICT (project_id) DO UPDATE SET version = nextval('ql3.pending_version')
$$;
REVOKE EXECUTE ON FUNCTION ql3.mark_pending(text[]) FROM PUBLIC;

-- projects: a new project is pending; a deleted one needs no mark.
CREATE FUNCTION ql3.mark_projects() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    DELETE FROM ql3.pending_projects AS m USING old_rows AS o WHERE m.project_id = o.project_id;
  ELSIF TG_OP = 'INSERT' THEN
    PERFORM ql3.mark_pending(ARRAY(SELECT n.project_id FROM new_rows AS n));
  ELSE
    PERFORM ql3.mark_pending(ARRAY(SELECT n.project_id FROM new_rows AS n
                                   UNION ALL SELECT o.project_id FROM old_rows AS o));
  END IF;
  RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.mark_projects() FROM PUBLIC;

-- package_installations: heads added, moved, removed or deleted.
CREATE FUNCTION ql3.mark_installations() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM ql3.mark_pending(ARRAY(SELECT n.project_id FROM new_rows AS n));
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM ql3.mark_pending(ARRAY(SELECT o.project_id FROM old_rows AS o));
  ELSE
    PERFORM ql3.mark_pending(ARRAY(SELECT n.project_id FROM new_rows AS n
                                   UNION ALL SELECT o.project_id FROM old_rows AS o));
  END IF;
  RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.mark_installations() FROM PUBLIC;

-- package_generations: a status moved (activation, rollback), or a row added or deleted.
CREATE FUNCTION ql3.mark_generations() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM ql3.mark_pending(ARRAY(
      SELECT i.project_id FROM new_rows AS n,
      LATERAL (SELECT i.project_id FROM ql3.package_installations AS i
               WHERE i.installation_id = n.installation_id OFFSET 0) AS i));
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM ql3.mark_pending(ARRAY(
      SELECT i.project_id FROM old_rows AS o,
      LATERAL (SELECT i.project_id FROM ql3.package_installations AS i
               WHERE i.installation_id = o.installation_id OFFSET 0) AS i));
  ELSE
    PERFORM ql3.mark_pending(ARRAY(
      SELECT i.project_id FROM (SELECT n.installation_id FROM new_rows AS n
                                UNION SELECT o.installation_id FROM old_rows AS o) AS c,
      LATERAL (SELECT i.project_id FROM ql3.package_installations AS i
               WHERE i.installation_id = c.installation_id OFFSET 0) AS i));
  END IF;
  RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.mark_generations() FROM PUBLIC;

-- materialized_revisions: a revision arriving for a head that lacked it.
CREATE FUNCTION ql3.mark_revisions() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
  PERFORM ql3.mark_pending(ARRAY(
    SELECT i.project_id FROM new_rows AS n,
    LATERAL (SELECT g.installation_id, g.generation FROM ql3.package_generations AS g
             WHERE g.revision_digest = n.revision_digest OFFSET 0) AS g,
    LATERAL (SELECT i.project_id FROM ql3.package_installations AS i
             WHERE i.installation_id = g.installation_id AND i.active_generation = g.generation
             OFFSET 0) AS i));
  RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.mark_revisions() FROM PUBLIC;

-- Statement-level triggers with transition tables: one mark statement per source statement,
-- however many rows it wrote. (A trigger with transition tables serves one event.)
CREATE TRIGGER projects_mark_insert AFTER INSERT ON ql3.projects
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_projects();
CREATE TRIGGER projects_mark_update AFTER UPDATE ON ql3.projects
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_projects();
CREATE TRIGGER projects_mark_delete AFTER DELETE ON ql3.projects
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_projects();

CREATE TRIGGER package_installations_mark_insert AFTER INSERT ON ql3.package_installations
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_installations();
CREATE TRIGGER package_installations_mark_update AFTER UPDATE ON ql3.package_installations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_installations();
CREATE TRIGGER package_installations_mark_delete AFTER DELETE ON ql3.package_installations
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_installations();

CREATE TRIGGER package_generations_mark_insert AFTER INSERT ON ql3.package_generations
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_generations();
CREATE TRIGGER package_generations_mark_update AFTER UPDATE ON ql3.package_generations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_generations();
CREATE TRIGGER package_generations_mark_delete AFTER DELETE ON ql3.package_generations
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_generations();

CREATE TRIGGER materialized_revisions_mark_insert AFTER INSERT ON ql3.materialized_revisions
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.mark_revisions();

-- Like the history triggers, these fire under session_replication_role = replica too.
ALTER TABLE ql3.projects ENABLE ALWAYS TRIGGER projects_mark_insert;
ALTER TABLE ql3.projects ENABLE ALWAYS TRIGGER projects_mark_update;
ALTER TABLE ql3.projects ENABLE ALWAYS TRIGGER projects_mark_delete;
ALTER TABLE ql3.package_installations ENABLE ALWAYS TRIGGER package_installations_mark_insert;
ALTER TABLE ql3.package_installations ENABLE ALWAYS TRIGGER package_installations_mark_update;
ALTER TABLE ql3.package_installations ENABLE ALWAYS TRIGGER package_installations_mark_delete;
ALTER TABLE ql3.package_generations ENABLE ALWAYS TRIGGER package_generations_mark_insert;
ALTER TABLE ql3.package_generations ENABLE ALWAYS TRIGGER package_generations_mark_update;
ALTER TABLE ql3.package_generations ENABLE ALWAYS TRIGGER package_generations_mark_delete;
ALTER TABLE ql3.materialized_revisions ENABLE ALWAYS TRIGGER materialized_revisions_mark_insert;

-- The executor reads marks and clears the ones it has dealt with; nobody else touches them.
GRANT SELECT, DELETE ON ql3.pending_projects TO ql3_package_executor;

-- Databases migrated before the index existed: every project is looked at once.
INSERT INTO ql3.pending_projects (project_id, version)
SELECT p.project_id, nextval('ql3.pending_version') FROM ql3.projects AS p ORDER BY p.project_id;
