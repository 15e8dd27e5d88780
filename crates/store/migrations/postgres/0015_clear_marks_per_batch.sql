-- A batch's marks cleared by one call (contract section 9.2): `clear_pending_mark` (migration
-- 13) for a whole batch, with the same grant, taking its projects and versions as two arrays.
-- A name of its own, not an overload: an overload would make a call with untyped parameters,
-- `clear_pending_mark($1, $2)`, ambiguous. One call per project cost a SECURITY DEFINER entry
-- and exit (a `search_path` set and restored) and a DELETE each, 1-3% of the server's CPU in a
-- cold run (docs/benchmarks.md). A mark is deleted only where it still holds the version
-- given, as by the one-project form, which stays for `--batch-size 1` and for older executors
-- during an upgrade. Returns how many marks were deleted.
CREATE FUNCTION ql3.clear_pending_marks(p_project_ids text[], p_versions bigint[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  deleted integer;
BEGIN
  -- In the order given (the batch's), one key lookup each, as the calls one by one did.
  DELETE FROM ql3.pending_projects AS m
  USING unnest(p_project_ids, p_versions) AS c(project_id, version)
  WHERE m.project_id = c.project_id COLLATE "C" AND m.version = c.version;
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.clear_pending_marks(text[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ql3.clear_pending_marks(text[], bigint[]) TO ql3_package_executor;
