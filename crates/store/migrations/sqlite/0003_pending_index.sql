-- The pending index (contract section 9): the projects a `run` must look at.
--
-- As in PostgreSQL: every change to the source tables that can change a project's live vector
-- or its proof marks the project in the same transaction, by trigger, whoever writes it. A
-- mark carries a version drawn from a counter that only grows (SQLite has no sequences; one
-- writer at a time makes the counter exact). The executor clears a mark only if it still
-- holds the version read with its first observation. The proof never consults the index.
--
-- Each mark deletes the old row and inserts the new one, with no conflict clause: an outer
-- statement's `OR IGNORE` or `OR REPLACE` would override one inside the trigger, and a mark
-- that kept its old version could be cleared by an executor that never saw the change.
--
-- The insert triggers skip a project whose mark already holds the counter's latest value: no
-- mark was made since, so nothing has read that version and nothing can clear it before this
-- transaction commits (SQLite serializes writers, and an executor whose read predates this
-- commit cannot write afterwards). An import of a project's many rows then marks it once or
-- twice, not once per row; the revision trigger runs only when a head points at the revision.

CREATE TABLE pending_projects (
  project_id TEXT NOT NULL PRIMARY KEY,
  version INTEGER NOT NULL
) STRICT;

CREATE TABLE pending_version (
  only_row INTEGER NOT NULL PRIMARY KEY CHECK (only_row = 1),
  n INTEGER NOT NULL
) STRICT;
INSERT INTO pending_version (only_row, n) VALUES (1, 0);

CREATE INDEX package_generations_revision_digest ON package_generations (revision_digest);

-- A new project is pending.
CREATE TRIGGER projects_mark_insert AFTER INSERT ON projects
WHEN NOT EXISTS (SELECT 1 FROM pending_projects AS m JOIN pending_version AS v ON m.version = v.n
                 WHERE m.project_id = NEW.project_id)
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT NEW.project_id AS project_id);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT NEW.project_id AS project_id) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- A renamed project (the old id's mark goes with the row below).
CREATE TRIGGER projects_mark_update AFTER UPDATE ON projects
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT NEW.project_id AS project_id);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT NEW.project_id AS project_id) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

CREATE TRIGGER projects_mark_delete AFTER DELETE ON projects
BEGIN
  DELETE FROM pending_projects WHERE project_id = OLD.project_id;
END;

-- Heads added, moved, removed or deleted.
CREATE TRIGGER package_installations_mark_insert AFTER INSERT ON package_installations
WHEN NOT EXISTS (SELECT 1 FROM pending_projects AS m JOIN pending_version AS v ON m.version = v.n
                 WHERE m.project_id = NEW.project_id)
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT NEW.project_id AS project_id);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT NEW.project_id AS project_id) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- Heads moved or removed.
CREATE TRIGGER package_installations_mark_update AFTER UPDATE ON package_installations
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT OLD.project_id AS project_id UNION SELECT NEW.project_id);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT OLD.project_id AS project_id UNION SELECT NEW.project_id) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- Heads deleted.
CREATE TRIGGER package_installations_mark_delete AFTER DELETE ON package_installations
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT OLD.project_id AS project_id);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT OLD.project_id AS project_id) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- A generation added.
CREATE TRIGGER package_generations_mark_insert AFTER INSERT ON package_generations
WHEN NOT EXISTS (SELECT 1 FROM package_installations AS i
                 JOIN pending_projects AS m ON m.project_id = i.project_id
                 JOIN pending_version AS v ON m.version = v.n
                 WHERE i.installation_id = NEW.installation_id)
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT i.project_id FROM package_installations AS i WHERE i.installation_id = NEW.installation_id);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT i.project_id FROM package_installations AS i WHERE i.installation_id = NEW.installation_id) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- A status moved (activation, rollback).
CREATE TRIGGER package_generations_mark_update AFTER UPDATE ON package_generations
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT i.project_id FROM package_installations AS i WHERE i.installation_id IN (OLD.installation_id, NEW.installation_id));
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT i.project_id FROM package_installations AS i WHERE i.installation_id IN (OLD.installation_id, NEW.installation_id)) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- A generation deleted.
CREATE TRIGGER package_generations_mark_delete AFTER DELETE ON package_generations
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT i.project_id FROM package_installations AS i WHERE i.installation_id = OLD.installation_id);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT i.project_id FROM package_installations AS i WHERE i.installation_id = OLD.installation_id) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- A revision arriving for a head that lacked it.
CREATE TRIGGER materialized_revisions_mark_insert AFTER INSERT ON materialized_revisions
WHEN EXISTS (SELECT 1 FROM package_generations AS g
             JOIN package_installations AS i
               ON i.installation_id = g.installation_id AND i.active_generation = g.generation
             WHERE g.revision_digest = NEW.revision_digest)
BEGIN
  UPDATE pending_version SET n = n + 1;
  DELETE FROM pending_projects WHERE project_id IN (SELECT i.project_id FROM package_generations AS g JOIN package_installations AS i ON i.installation_id = g.installation_id AND i.active_generation = g.generation WHERE g.revision_digest = NEW.revision_digest);
  INSERT INTO pending_projects (project_id, version)
    SELECT DISTINCT x.project_id, v.n FROM (SELECT i.project_id FROM package_generations AS g JOIN package_installations AS i ON i.installation_id = g.installation_id AND i.active_generation = g.generation WHERE g.revision_digest = NEW.revision_digest) AS x, pending_version AS v
    WHERE x.project_id IS NOT NULL;
END;

-- Files migrated before the index existed: every project is looked at once.
UPDATE pending_version SET n = n + 1;
INSERT INTO pending_projects (project_id, version)
  SELECT p.project_id, v.n FROM projects AS p, pending_version AS v;
