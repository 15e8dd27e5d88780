-- Source tables: written by the control plane, read by the executor (SPEC section 7).
-- Runs as ql3_owner inside schema ql3.

CREATE FUNCTION ql3.is_permission_array(p_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN pg_catalog.jsonb_typeof(p_text::jsonb) <> 'array' THEN false
    ELSE NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(p_text::jsonb) AS e(v)
                     WHERE pg_catalog.jsonb_typeof(e.v) <> 'string')
     AND (SELECT count(*) = count(DISTINCT e.v) FROM pg_catalog.jsonb_array_elements(p_text::jsonb) AS e(v))
  END
$$;
REVOKE EXECUTE ON FUNCTION ql3.is_permission_array(text) FROM PUBLIC;

CREATE TABLE ql3.projects (
  project_id text COLLATE "C" PRIMARY KEY
    CONSTRAINT projects_project_id_format CHECK (project_id ~ '^[A-Za-z0-9._-]{1,128}$')
);

CREATE TABLE ql3.package_installations (
  installation_id text COLLATE "C" PRIMARY KEY
    CONSTRAINT package_installations_installation_id_format CHECK (installation_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
  project_id text COLLATE "C" NOT NULL REFERENCES ql3.projects (project_id),
  package_name text COLLATE "C" NOT NULL
    CONSTRAINT package_installations_package_name_format
    CHECK (length(package_name) <= 214 AND package_name ~ '^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$'),
  active_generation bigint NULL
    CONSTRAINT package_installations_active_generation_range CHECK (active_generation BETWEEN 1 AND 9007199254740991),
  CONSTRAINT package_installations_project_package_key UNIQUE (project_id, package_name)
);

CREATE TABLE ql3.package_generations (
  installation_id text COLLATE "C" NOT NULL REFERENCES ql3.package_installations (installation_id),
  generation bigint NOT NULL
    CONSTRAINT package_generations_generation_range CHECK (generation BETWEEN 1 AND 9007199254740991),
  status text NOT NULL
    CONSTRAINT package_generations_status_check
    CHECK (status IN ('queued', 'staged', 'activating', 'active', 'superseded', 'failed')),
  generation_digest text COLLATE "C" NOT NULL
    CONSTRAINT package_generations_generation_digest_format CHECK (generation_digest ~ '^sha256:[0-9a-f]{64}$'),
  lock_digest text COLLATE "C" NOT NULL
    CONSTRAINT package_generations_lock_digest_format CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
  revision_digest text COLLATE "C" NOT NULL
    CONSTRAINT package_generations_revision_digest_format CHECK (revision_digest ~ '^sha256:[0-9a-f]{64}$'),
  approved_permissions text NOT NULL DEFAULT '[]'
    CONSTRAINT package_generations_approved_permissions_format CHECK (ql3.is_permission_array(approved_permissions)),
  PRIMARY KEY (installation_id, generation)
);

ALTER TABLE ql3.package_installations
  ADD CONSTRAINT package_installations_active_generation_fkey
  FOREIGN KEY (installation_id, active_generation)
  REFERENCES ql3.package_generations (installation_id, generation)
  DEFERRABLE INITIALLY IMMEDIATE;

CREATE TABLE ql3.materialized_revisions (
  revision_digest text COLLATE "C" PRIMARY KEY
    CONSTRAINT materialized_revisions_revision_digest_format CHECK (revision_digest ~ '^sha256:[0-9a-f]{64}$'),
  content bytea NOT NULL,
  byte_length bigint NOT NULL
    CONSTRAINT materialized_revisions_byte_length_check CHECK (byte_length = octet_length(content))
);

-- A generation's identity, digests and permissions never change; only status moves.
CREATE FUNCTION ql3.refuse_generation_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NEW.installation_id IS DISTINCT FROM OLD.installation_id
     OR NEW.generation IS DISTINCT FROM OLD.generation
     OR NEW.generation_digest IS DISTINCT FROM OLD.generation_digest
     OR NEW.lock_digest IS DISTINCT FROM OLD.lock_digest
     OR NEW.revision_digest IS DISTINCT FROM OLD.revision_digest
     OR NEW.approved_permissions IS DISTINCT FROM OLD.approved_permissions THEN
    RAISE EXCEPTION 'package_generations rows are immutable except status (installation %, generation %)',
      OLD.installation_id, OLD.generation
      USING ERRCODE = 'P0001', HINT = 'create a new generation instead of editing one';
  END IF;
  RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.refuse_generation_change() FROM PUBLIC;

CREATE TRIGGER package_generations_immutable
  BEFORE UPDATE ON ql3.package_generations
  FOR EACH ROW EXECUTE FUNCTION ql3.refuse_generation_change();
ALTER TABLE ql3.package_generations ENABLE ALWAYS TRIGGER package_generations_immutable;

-- Shared by every append-only or never-updated table.
CREATE FUNCTION ql3.refuse_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION '% on ql3.% is refused: the table is append-only', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'P0001', HINT = 'snapshots and revisions are immutable; append a new row instead';
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.refuse_change() FROM PUBLIC;

CREATE TRIGGER materialized_revisions_no_update
  BEFORE UPDATE ON ql3.materialized_revisions
  FOR EACH ROW EXECUTE FUNCTION ql3.refuse_change();
ALTER TABLE ql3.materialized_revisions ENABLE ALWAYS TRIGGER materialized_revisions_no_update;
