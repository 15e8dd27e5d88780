-- No NUL byte in a source row's text (contract section 7). SQLite's length(), GLOB and LIKE read
-- a text value only up to its first NUL, so 'demo-1' || char(0) || 'anything' passed every
-- format CHECK of migration 1 and became a project no command could name (PostgreSQL refuses
-- NUL in text outright). instr() over the value as a BLOB sees every byte. Written for
-- inserts and updates alike (materialized_revisions refuses every update already), whoever writes: the `sources` commands or a control plane's SQL.

CREATE TRIGGER projects_no_nul_insert
BEFORE INSERT ON projects
WHEN instr(CAST(NEW.project_id AS BLOB), x'00') > 0
BEGIN
  SELECT RAISE(ABORT, 'projects: a text value holds a NUL byte (U+0000); remove it from the source row');
END;

CREATE TRIGGER projects_no_nul_update
BEFORE UPDATE ON projects
WHEN instr(CAST(NEW.project_id AS BLOB), x'00') > 0
BEGIN
  SELECT RAISE(ABORT, 'projects: a text value holds a NUL byte (U+0000); remove it from the source row');
END;

CREATE TRIGGER package_installations_no_nul_insert
BEFORE INSERT ON package_installations
WHEN instr(CAST(NEW.installation_id AS BLOB), x'00') > 0
  OR instr(CAST(NEW.project_id AS BLOB), x'00') > 0
  OR instr(CAST(NEW.package_name AS BLOB), x'00') > 0
BEGIN
  SELECT RAISE(ABORT, 'package_installations: a text value holds a NUL byte (U+0000); remove it from the source row');
END;

CREATE TRIGGER package_installations_no_nul_update
BEFORE UPDATE ON package_installations
WHEN instr(CAST(NEW.installation_id AS BLOB), x'00') > 0
  OR instr(CAST(NEW.project_id AS BLOB), x'00') > 0
  OR instr(CAST(NEW.package_name AS BLOB), x'00') > 0
BEGIN
  SELECT RAISE(ABORT, 'package_installations: a text value holds a NUL byte (U+0000); remove it from the source row');
END;

CREATE TRIGGER package_generations_no_nul_insert
BEFORE INSERT ON package_generations
WHEN instr(CAST(NEW.installation_id AS BLOB), x'00') > 0
  OR instr(CAST(NEW.status AS BLOB), x'00') > 0
  OR instr(CAST(NEW.generation_digest AS BLOB), x'00') > 0
  OR instr(CAST(NEW.lock_digest AS BLOB), x'00') > 0
  OR instr(CAST(NEW.revision_digest AS BLOB), x'00') > 0
  OR instr(CAST(NEW.approved_permissions AS BLOB), x'00') > 0
BEGIN
  SELECT RAISE(ABORT, 'package_generations: a text value holds a NUL byte (U+0000); remove it from the source row');
END;

CREATE TRIGGER package_generations_no_nul_update
BEFORE UPDATE ON package_generations
WHEN instr(CAST(NEW.installation_id AS BLOB), x'00') > 0
  OR instr(CAST(NEW.status AS BLOB), x'00') > 0
  OR instr(CAST(NEW.generation_digest AS BLOB), x'00') > 0
  OR instr(CAST(NEW.lock_digest AS BLOB), x'00') > 0
  OR instr(CAST(NEW.revision_digest AS BLOB), x'00') > 0
  OR instr(CAST(NEW.approved_permissions AS BLOB), x'00') > 0
BEGIN
  SELECT RAISE(ABORT, 'package_generations: a text value holds a NUL byte (U+0000); remove it from the source row');
END;

CREATE TRIGGER materialized_revisions_no_nul_insert
BEFORE INSERT ON materialized_revisions
WHEN instr(CAST(NEW.revision_digest AS BLOB), x'00') > 0
BEGIN
  SELECT RAISE(ABORT, 'materialized_revisions: a text value holds a NUL byte (U+0000); remove it from the source row');
END;
