-- Source tables: written by the control plane, read by the executor (SPEC section 7).
-- STRICT tables; formats checked with GLOB and length (no REGEXP in SQLite).

CREATE TABLE projects (
  project_id TEXT NOT NULL PRIMARY KEY
    CONSTRAINT projects_project_id_format
    CHECK (length(project_id) BETWEEN 1 AND 128 AND project_id NOT GLOB '*[^A-Za-z0-9._-]*')
) STRICT;

CREATE TABLE package_installations (
  installation_id TEXT NOT NULL PRIMARY KEY
    CONSTRAINT package_installations_installation_id_format
    CHECK (length(installation_id) BETWEEN 1 AND 128 AND installation_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
  project_id TEXT NOT NULL REFERENCES projects (project_id),
  package_name TEXT NOT NULL
    CONSTRAINT package_installations_package_name_format
    CHECK (length(package_name) BETWEEN 1 AND 214 AND (
      (package_name GLOB '[a-z0-9]*' AND package_name NOT GLOB '*[^a-z0-9._-]*')
      OR (package_name GLOB '@[a-z0-9]*/[a-z0-9]*' AND package_name NOT GLOB '*/*/*'
          AND substr(package_name, 2) NOT GLOB '*[^a-z0-9._/-]*'))),
  active_generation INTEGER NULL
    CONSTRAINT package_installations_active_generation_range
    CHECK (active_generation BETWEEN 1 AND 9007199254740991),
  CONSTRAINT package_installations_project_package_key UNIQUE (project_id, package_name),
  FOREIGN KEY (installation_id, active_generation)
    REFERENCES package_generations (installation_id, generation) DEFERRABLE INITIALLY DEFERRED
) STRICT;

CREATE TABLE package_generations (
  installation_id TEXT NOT NULL REFERENCES package_installations (installation_id),
  generation INTEGER NOT NULL
    CONSTRAINT package_generations_generation_range CHECK (generation BETWEEN 1 AND 9007199254740991),
  status TEXT NOT NULL
    CONSTRAINT package_generations_status_check
    CHECK (status IN ('queued', 'staged', 'activating', 'active', 'superseded', 'failed')),
  generation_digest TEXT NOT NULL
    CONSTRAINT package_generations_generation_digest_format
    CHECK (length(generation_digest) = 71 AND generation_digest GLOB 'sha256:*'
           AND substr(generation_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  lock_digest TEXT NOT NULL
    CONSTRAINT package_generations_lock_digest_format
    CHECK (length(lock_digest) = 71 AND lock_digest GLOB 'sha256:*'
           AND substr(lock_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  revision_digest TEXT NOT NULL
    CONSTRAINT package_generations_revision_digest_format
    CHECK (length(revision_digest) = 71 AND revision_digest GLOB 'sha256:*'
           AND substr(revision_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  approved_permissions TEXT NOT NULL DEFAULT '[]'
    CONSTRAINT package_generations_approved_permissions_format
    CHECK (json_valid(approved_permissions) AND json_type(approved_permissions) = 'array'),
  PRIMARY KEY (installation_id, generation)
) STRICT;

-- CHECK cannot hold a subquery: distinct strings are enforced by a trigger.
CREATE TRIGGER package_generations_permissions_distinct
BEFORE INSERT ON package_generations
WHEN json_valid(NEW.approved_permissions) AND json_type(NEW.approved_permissions) = 'array' AND (
  EXISTS (SELECT 1 FROM json_each(NEW.approved_permissions) WHERE type <> 'text')
  OR (SELECT count(*) <> count(DISTINCT value) FROM json_each(NEW.approved_permissions)))
BEGIN
  SELECT RAISE(ABORT, 'package_generations.approved_permissions must be a JSON array of distinct strings');
END;

CREATE TRIGGER package_generations_immutable
BEFORE UPDATE ON package_generations
WHEN NEW.installation_id IS NOT OLD.installation_id
  OR NEW.generation IS NOT OLD.generation
  OR NEW.generation_digest IS NOT OLD.generation_digest
  OR NEW.lock_digest IS NOT OLD.lock_digest
  OR NEW.revision_digest IS NOT OLD.revision_digest
  OR NEW.approved_permissions IS NOT OLD.approved_permissions
BEGIN
  SELECT RAISE(ABORT, 'package_generations rows are immutable except status');
END;

CREATE TABLE materialized_revisions (
  revision_digest TEXT NOT NULL PRIMARY KEY
    CONSTRAINT materialized_revisions_revision_digest_format
    CHECK (length(revision_digest) = 71 AND revision_digest GLOB 'sha256:*'
           AND substr(revision_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  content BLOB NOT NULL,
  byte_length INTEGER NOT NULL
    CONSTRAINT materialized_revisions_byte_length_check CHECK (byte_length = length(content))
) STRICT;

CREATE TRIGGER materialized_revisions_no_update
BEFORE UPDATE ON materialized_revisions
BEGIN
  SELECT RAISE(ABORT, 'UPDATE on materialized_revisions is refused: the table is append-only');
END;

CREATE TRIGGER materialized_revisions_no_replace
BEFORE INSERT ON materialized_revisions
WHEN EXISTS (SELECT 1 FROM materialized_revisions AS r WHERE r.revision_digest = NEW.revision_digest)
BEGIN
  SELECT RAISE(IGNORE);
END;
