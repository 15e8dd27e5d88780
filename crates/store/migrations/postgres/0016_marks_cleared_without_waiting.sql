-- A mark is cleared only if it can be locked at once (contract section 9.2: a batch never waits
-- for a row lock while it holds another). A control plane's transaction that changes project B
-- and then, later, project A locks B's mark and then A's (the triggers of migration 8); a batch
-- [A, B] that cleared A's mark and then waited for B's made the two wait on each other, and
-- PostgreSQL aborted one of them with `deadlock detected`, the control plane's as often as not.
-- Now a mark another transaction holds is skipped, never waited for: that transaction is
-- changing the project, so the mark gets a new version when it commits (and the next run builds
-- the change), or keeps the old one when it rolls back (and the next run finds the project
-- current at little cost). Either way no snapshot is made stale: the mark only decides what a
-- run looks at. Same signatures, grants and results (a mark skipped counts as not deleted).
CREATE OR REPLACE FUNCTION ql3.clear_pending_mark(p_project_id text, p_version bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  DELETE FROM ql3.pending_projects AS m
  USING (SELECT l.project_id FROM ql3.pending_projects AS l
         WHERE l.project_id = p_project_id AND l.version = p_version
         FOR UPDATE SKIP LOCKED) AS k
  WHERE m.project_id = k.project_id;
  RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION ql3.clear_pending_marks(p_project_ids text[], p_versions bigint[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
  deleted integer;
BEGIN
  -- In the order given (the batch's), one key lookup each; a row another transaction has
  -- locked is left as it is.
  DELETE FROM ql3.pending_projects AS m
  USING (SELECT l.project_id
         FROM unnest(p_project_ids, p_versions) AS c(project_id, version)
         JOIN ql3.pending_projects AS l
           ON l.project_id = c.project_id COLLATE "C" AND l.version = c.version
         FOR UPDATE OF l SKIP LOCKED) AS k
  WHERE m.project_id = k.project_id;
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;
