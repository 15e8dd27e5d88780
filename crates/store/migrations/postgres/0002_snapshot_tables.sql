-- Snapshot tables: append-only, written only by the executor (SPEC section 7).

CREATE TABLE ql3.tool_definition_snapshots (
  snapshot_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  project_id text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshots_project_id_format CHECK (project_id ~ '^[A-Za-z0-9._-]{1,128}$'),
  active_vector_digest text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshots_active_vector_digest_format CHECK (active_vector_digest ~ '^sha256:[0-9a-f]{64}$'),
  definition_digest text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshots_definition_digest_format CHECK (definition_digest ~ '^sha256:[0-9a-f]{64}$'),
  snapshot_digest text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshots_snapshot_digest_key UNIQUE
    CONSTRAINT tool_definition_snapshots_snapshot_digest_format CHECK (snapshot_digest ~ '^sha256:[0-9a-f]{64}$'),
  package_count integer NOT NULL
    CONSTRAINT tool_definition_snapshots_package_count_range CHECK (package_count BETWEEN 0 AND 128),
  definition_count integer NOT NULL
    CONSTRAINT tool_definition_snapshots_definition_count_range CHECK (definition_count BETWEEN 0 AND 128),
  canonical_json bytea NOT NULL
    CONSTRAINT tool_definition_snapshots_canonical_json_size CHECK (octet_length(canonical_json) <= 8388608),
  committed_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT tool_definition_snapshots_project_vector_key UNIQUE (project_id, active_vector_digest)
);

CREATE TABLE ql3.tool_definition_snapshot_sources (
  snapshot_id bigint NOT NULL REFERENCES ql3.tool_definition_snapshots (snapshot_id),
  package_name text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_package_name_format
    CHECK (length(package_name) <= 214 AND package_name ~ '^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$'),
  installation_id text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_installation_id_format CHECK (installation_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
  generation bigint NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_generation_range CHECK (generation BETWEEN 1 AND 9007199254740991),
  generation_digest text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_generation_digest_format CHECK (generation_digest ~ '^sha256:[0-9a-f]{64}$'),
  lock_digest text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_lock_digest_format CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
  revision_digest text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshot_sources_revision_digest_format CHECK (revision_digest ~ '^sha256:[0-9a-f]{64}$'),
  PRIMARY KEY (snapshot_id, package_name)
);

CREATE TABLE ql3.tool_definition_snapshot_rejections (
  project_id text COLLATE "C" NOT NULL,
  active_vector_digest text COLLATE "C" NOT NULL
    CONSTRAINT tool_definition_snapshot_rejections_active_vector_digest_format CHECK (active_vector_digest ~ '^sha256:[0-9a-f]{64}$'),
  reason text NOT NULL
    CONSTRAINT tool_definition_snapshot_rejections_reason_check CHECK (reason IN (
      'too-many-packages', 'source-invalid', 'revision-missing', 'revision-too-large',
      'revision-digest-mismatch', 'revision-malformed', 'package-mismatch', 'forbidden-field',
      'invalid-definition', 'namespace-violation', 'permission-not-approved',
      'too-many-definitions', 'duplicate-definition', 'identity-case-collision',
      'alias-collision', 'snapshot-too-large')),
  detail text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, active_vector_digest)
);

CREATE TRIGGER tool_definition_snapshots_append_only
  BEFORE UPDATE OR DELETE ON ql3.tool_definition_snapshots
  FOR EACH ROW EXECUTE FUNCTION ql3.refuse_change();
CREATE TRIGGER tool_definition_snapshots_no_truncate
  BEFORE TRUNCATE ON ql3.tool_definition_snapshots
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.refuse_change();
CREATE TRIGGER tool_definition_snapshot_sources_append_only
  BEFORE UPDATE OR DELETE ON ql3.tool_definition_snapshot_sources
  FOR EACH ROW EXECUTE FUNCTION ql3.refuse_change();
CREATE TRIGGER tool_definition_snapshot_sources_no_truncate
  BEFORE TRUNCATE ON ql3.tool_definition_snapshot_sources
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.refuse_change();
CREATE TRIGGER tool_definition_snapshot_rejections_append_only
  BEFORE UPDATE OR DELETE ON ql3.tool_definition_snapshot_rejections
  FOR EACH ROW EXECUTE FUNCTION ql3.refuse_change();
CREATE TRIGGER tool_definition_snapshot_rejections_no_truncate
  BEFORE TRUNCATE ON ql3.tool_definition_snapshot_rejections
  FOR EACH STATEMENT EXECUTE FUNCTION ql3.refuse_change();

ALTER TABLE ql3.tool_definition_snapshots ENABLE ALWAYS TRIGGER tool_definition_snapshots_append_only;
ALTER TABLE ql3.tool_definition_snapshots ENABLE ALWAYS TRIGGER tool_definition_snapshots_no_truncate;
ALTER TABLE ql3.tool_definition_snapshot_sources ENABLE ALWAYS TRIGGER tool_definition_snapshot_sources_append_only;
ALTER TABLE ql3.tool_definition_snapshot_sources ENABLE ALWAYS TRIGGER tool_definition_snapshot_sources_no_truncate;
ALTER TABLE ql3.tool_definition_snapshot_rejections ENABLE ALWAYS TRIGGER tool_definition_snapshot_rejections_append_only;
ALTER TABLE ql3.tool_definition_snapshot_rejections ENABLE ALWAYS TRIGGER tool_definition_snapshot_rejections_no_truncate;

CREATE INDEX package_installations_project_active
  ON ql3.package_installations (project_id, package_name) WHERE active_generation IS NOT NULL;
