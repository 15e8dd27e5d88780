-- Least privilege (SPEC section 8). PUBLIC gets nothing; each role exactly what it needs.

REVOKE ALL ON SCHEMA ql3 FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA ql3 FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA ql3 FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE ql3_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

GRANT USAGE ON SCHEMA ql3 TO ql3_control_plane, ql3_package_executor, ql3_tool_consumer;

-- Control plane: writes the source tables (and may call the CHECK helper they use).
GRANT SELECT, INSERT, UPDATE, DELETE
  ON ql3.projects, ql3.package_installations, ql3.package_generations, ql3.materialized_revisions
  TO ql3_control_plane;
GRANT EXECUTE ON FUNCTION ql3.is_permission_array(text) TO ql3_control_plane;

-- Executor: reads sources, appends snapshots, proves currency.
GRANT SELECT
  ON ql3.projects, ql3.package_installations, ql3.package_generations, ql3.materialized_revisions
  TO ql3_package_executor;
GRANT SELECT, INSERT
  ON ql3.tool_definition_snapshots, ql3.tool_definition_snapshot_sources,
     ql3.tool_definition_snapshot_rejections
  TO ql3_package_executor;
GRANT EXECUTE ON FUNCTION ql3.find_current_tool_snapshot(text) TO ql3_package_executor;

-- Consumer: only the proven read.
GRANT EXECUTE ON FUNCTION ql3.current_tool_snapshot(text) TO ql3_tool_consumer;
