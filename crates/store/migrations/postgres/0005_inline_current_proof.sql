-- Let PostgreSQL inline the current proof into the statement that calls it.
--
-- A SQL function with a SET clause is never inlined: every call re-plans its body, which cost
-- about 0.3 ms per project in `run`. The proof is SECURITY INVOKER and qualifies every table
-- with `ql3.`, and its operators and functions are pg_catalog's (searched first, and no runtime
-- role may CREATE in any schema), so it does not need a pinned search_path. The consumer's
-- SECURITY DEFINER door, `ql3.current_tool_snapshot`, keeps its pinned search_path, and the
-- proof is inlined under that.
ALTER FUNCTION ql3.find_current_tool_snapshot(text) RESET search_path;
