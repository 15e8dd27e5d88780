-- The executor's open step asks whether a project is already current through this function,
-- and only for a project that has a snapshot at all.
--
-- Inlined into the open statement, the proof added some thirty plan nodes that PostgreSQL
-- initialised on every attempt, and a cold run (no snapshots yet) never needed them: about 5%
-- of a cold `run`. Called through PL/pgSQL, the proof is planned once per session (the plan
-- is cached, with `find_current_tool_snapshot` inlined into it) and costs nothing when it is
-- not called. STABLE: it reads in the calling statement's snapshot, so the open step still
-- sees one moment. SECURITY INVOKER, with every name qualified, like the proof itself.
CREATE FUNCTION ql3.current_snapshot_digest(p_project_id text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY INVOKER PARALLEL SAFE
AS $$
BEGIN
  RETURN (SELECT f.snapshot_digest FROM ql3.find_current_tool_snapshot(p_project_id) AS f);
END
$$;
REVOKE EXECUTE ON FUNCTION ql3.current_snapshot_digest(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ql3.current_snapshot_digest(text) TO ql3_package_executor;
