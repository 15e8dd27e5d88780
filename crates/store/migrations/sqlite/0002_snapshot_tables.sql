-- Snapshot tables: append-only, written only by the executor (SPEC section 7).

CREATE TABLE tool_definition_snapshots (
  snapshot_id INTEGER PRIMARY KEY,
  project_id TEXT NOT NULL
    CONSTRAINT tool_definition_snapshots_project_id_format
    CHECK (length(project_id) BETWEEN 1 AND 128 AND project_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  active_vector_digest TEXT NOT NULL
    CONSTRAINT tool_definition_snapshots_active_vector_digest_format
    CHECK (length(active_vector_digest) = 71 AND active_vector_digest GLOB 'sha256:*'
           AND substr(active_vector_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  definition_digest TEXT NOT NULL
    CONSTRAINT tool_definition_snapshots_definition_digest_format
    CHECK (length(definition_digest) = 71 AND definition_digest GLOB 'sha256:*'
           AND substr(definition_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  snapshot_digest TEXT NOT NULL
    CONSTRAINT tool_definition_snapshots_snapshot_digest_key UNIQUE
    CONSTRAINT tool_definition_snapshots_snapshot_digest_format
    CHECK (length(snapshot_digest) = 71 AND snapshot_digest GLOB 'sha256:*'
           AND substr(snapshot_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  package_count INTEGER NOT NULL
    CONSTRAINT tool_definition_snapshots_package_count_range CHECK (package_count BETWEEN 0 AND 128),
  definition_count INTEGER NOT NULL
    CONSTRAINT tool_definition_snapshots_definition_count_range CHECK (definition_count BETWEEN 0 AND 128),
  canonical_json BLOB NOT NULL
    CONSTRAINT tool_definition_snapshots_canonical_json_size CHECK (length(canonical_json) <= 8388608),
  committed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    CONSTRAINT tool_definition_snapshots_committed_at_format
    CHECK (committed_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  CONSTRAINT tool_definition_snapshots_project_vector_key UNIQUE (project_id, active_vector_digest)
) STRICT;

CREATE TABLE tool_definition_snapshot_sources (
  snapshot_id INTEGER NOT NULL REFERENCES tool_definition_snapshots (snapshot_id),
  package_name TEXT NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_package_name_format
    CHECK (length(package_name) BETWEEN 1 AND 214 AND (
      (package_name GLOB '[a-z0-9]*' AND package_name NOT GLOB '*[^a-z0-9._-]*')
      OR (package_name GLOB '@[a-z0-9]*/[a-z0-9]*' AND package_name NOT GLOB '*/*/*'
          AND substr(package_name, 2) NOT GLOB '*[^a-z0-9._/-]*'))),
  installation_id TEXT NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_installation_id_format
    CHECK (length(installation_id) BETWEEN 1 AND 128 AND installation_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
  generation INTEGER NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_generation_range CHECK (generation BETWEEN 1 AND 9007199254740991),
  generation_digest TEXT NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_generation_digest_format
    CHECK (length(generation_digest) = 71 AND generation_digest GLOB 'sha256:*'
           AND substr(generation_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  lock_digest TEXT NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_lock_digest_format
    CHECK (length(lock_digest) = 71 AND lock_digest GLOB 'sha256:*'
           AND substr(lock_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  revision_digest TEXT NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_revision_digest_format
    CHECK (length(revision_digest) = 71 AND revision_digest GLOB 'sha256:*'
           AND substr(revision_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  PRIMARY KEY (snapshot_id, package_name)
) STRICT;

CREATE TABLE tool_definition_snapshot_rejections (
  project_id TEXT NOT NULL,
  active_vector_digest TEXT NOT NULL
    CONSTRAINT tool_definition_snapshot_rejections_active_vector_digest_format
    CHECK (length(active_vector_digest) = 71 AND active_vector_digest GLOB 'sha256:*'
           AND substr(active_vector_digest, 8) NOT GLOB '*[^0-9a-f]*'),
  reason TEXT NOT NULL
    CONSTRAINT tool_definition_snapshot_rejections_reason_check CHECK (reason IN (
      'too-many-packages', 'source-invalid', 'revision-missing', 'revision-too-large',
      'revision-digest-mismatch', 'revision-malformed', 'package-mismatch', 'forbidden-field',
      'invalid-definition', 'namespace-violation', 'permission-not-approved',
      'too-many-definitions', 'duplicate-definition', 'identity-case-collision',
      'alias-collision', 'snapshot-too-large')),
  detail TEXT NOT NULL,
  recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (project_id, active_vector_digest)
) STRICT;

-- Append-only: UPDATE and DELETE are refused; an insert that would replace a row (INSERT OR
-- REPLACE, REPLACE) is ignored before conflict resolution can delete history.
CREATE TRIGGER tool_definition_snapshots_no_update BEFORE UPDATE ON tool_definition_snapshots
BEGIN SELECT RAISE(ABORT, 'UPDATE on tool_definition_snapshots is refused: the table is append-only'); END;
CREATE TRIGGER tool_definition_snapshots_no_delete BEFORE DELETE ON tool_definition_snapshots
BEGIN SELECT RAISE(ABORT, 'DELETE on tool_definition_snapshots is refused: the table is append-only'); END;
CREATE TRIGGER tool_definition_snapshots_no_replace BEFORE INSERT ON tool_definition_snapshots
WHEN EXISTS (SELECT 1 FROM tool_definition_snapshots AS s
             WHERE s.snapshot_id = NEW.snapshot_id OR s.snapshot_digest = NEW.snapshot_digest
                OR (s.project_id = NEW.project_id AND s.active_vector_digest = NEW.active_vector_digest))
BEGIN SELECT RAISE(IGNORE); END;

CREATE TRIGGER tool_definition_snapshot_sources_no_update BEFORE UPDATE ON tool_definition_snapshot_sources
BEGIN SELECT RAISE(ABORT, 'UPDATE on tool_definition_snapshot_sources is refused: the table is append-only'); END;
CREATE TRIGGER tool_definition_snapshot_sources_no_delete BEFORE DELETE ON tool_definition_snapshot_sources
BEGIN SELECT RAISE(ABORT, 'DELETE on tool_definition_snapshot_sources is refused: the table is append-only'); END;
CREATE TRIGGER tool_definition_snapshot_sources_no_replace BEFORE INSERT ON tool_definition_snapshot_sources
WHEN EXISTS (SELECT 1 FROM tool_definition_snapshot_sources AS s
             WHERE s.snapshot_id = NEW.snapshot_id AND s.package_name = NEW.package_name)
BEGIN SELECT RAISE(IGNORE); END;

CREATE TRIGGER tool_definition_snapshot_rejections_no_update BEFORE UPDATE ON tool_definition_snapshot_rejections
BEGIN SELECT RAISE(ABORT, 'UPDATE on tool_definition_snapshot_rejections is refused: the table is append-only'); END;
CREATE TRIGGER tool_definition_snapshot_rejections_no_delete BEFORE DELETE ON tool_definition_snapshot_rejections
BEGIN SELECT RAISE(ABORT, 'DELETE on tool_definition_snapshot_rejections is refused: the table is append-only'); END;
CREATE TRIGGER tool_definition_snapshot_rejections_no_replace BEFORE INSERT ON tool_definition_snapshot_rejections
WHEN EXISTS (SELECT 1 FROM tool_definition_snapshot_rejections AS r
             WHERE r.project_id = NEW.project_id AND r.active_vector_digest = NEW.active_vector_digest)
BEGIN SELECT RAISE(IGNORE); END;

CREATE INDEX package_installations_project_active
  ON package_installations (project_id, package_name) WHERE active_generation IS NOT NULL;
