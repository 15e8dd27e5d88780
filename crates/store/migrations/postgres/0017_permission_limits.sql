-- The approved permissions' limits (contract sections 2 and 5): a generation approves at most
-- 256 permissions, each matching the pattern a definition's `permissions` must match
-- (`^[a-z][a-z0-9._:-]{0,63}$`; an approved permission no definition could name serves
-- nothing). Without a limit one generation could approve any number of any strings, and every
-- batch that observed its heads held them all (20,000 permissions a generation took a run past
-- half a GiB, whatever `--memory-budget` said).
--
-- A trigger on INSERT, not a CHECK constraint: rows stored before this migration keep their
-- values and stay writable (a CHECK, even NOT VALID, is checked again on every UPDATE of the
-- row, so the control plane could no longer supersede such a generation); the executor refuses
-- their projects as `source-invalid` instead. `approved_permissions` cannot be updated at all
-- (migration 1), so INSERT is the only way a new value enters. The format check of migration 1
-- (a JSON array of distinct strings) still runs first; this one tests only arrays of strings,
-- and an empty array ('[]') not at all. The text itself is held to 18 KiB (256 permissions of
-- 64 characters take 17,153 bytes written compactly), so that no row can make an observation
-- large: the executor reads a longer one, stored before this migration, as its length only.
CREATE FUNCTION ql3.within_permission_limits(p_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.octet_length(p_text) <= 18432
     AND (pg_catalog.jsonb_typeof(p_text::jsonb) <> 'array'
      OR (pg_catalog.jsonb_array_length(p_text::jsonb) <= 256
          AND NOT EXISTS (
            SELECT 1 FROM pg_catalog.jsonb_array_elements(p_text::jsonb) AS e(v)
            WHERE pg_catalog.jsonb_typeof(e.v) = 'string'
              AND (e.v #>> '{}') COLLATE "C" !~ '^[a-z][a-z0-9._:-]{0,63}$')))
$$;
REVOKE EXECUTE ON FUNCTION ql3.within_permission_limits(text) FROM PUBLIC;
-- The trigger's WHEN calls it as the writer: the control plane, as for the format check.
GRANT EXECUTE ON FUNCTION ql3.within_permission_limits(text) TO ql3_control_plane;

CREATE FUNCTION ql3.refuse_permissions_past_limits() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION 'package_generations.approved_permissions of installation % generation % breaks its limits',
    NEW.installation_id, NEW.generation
    USING ERRCODE = 'check_violation',
          DETAIL = 'A generation approves at most 256 distinct permissions, each matching ^[a-z][a-z0-9._:-]{0,63}$, in at most 18 KiB of JSON text.',
          HINT = 'Approve only permissions a definition could name, at most 256 a generation.';
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.refuse_permissions_past_limits() FROM PUBLIC;

CREATE TRIGGER package_generations_permission_limits BEFORE INSERT ON ql3.package_generations
  FOR EACH ROW WHEN (NEW.approved_permissions <> '[]'
                     AND NOT ql3.within_permission_limits(NEW.approved_permissions))
  EXECUTE FUNCTION ql3.refuse_permissions_past_limits();
ALTER TABLE ql3.package_generations ENABLE ALWAYS TRIGGER package_generations_permission_limits;
