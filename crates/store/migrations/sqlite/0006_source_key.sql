-- The proof's key (contract section 7; PostgreSQL's migration 12 says why): for each source row
-- in package order, the first 8 hex digits of its generation digest and the first 8 of its
-- revision digest. The proof computes it from the live heads and looks it up by index, so its
-- cost follows the live vector, not the project's history.
--
-- The backfill runs with the append-only trigger dropped and created again in this one
-- migration transaction (BEGIN IMMEDIATE: no other connection writes meanwhile, and none sees
-- the table without its trigger). No digest changes.
ALTER TABLE tool_definition_snapshots ADD COLUMN source_key TEXT NOT NULL DEFAULT '';
DROP TRIGGER tool_definition_snapshots_no_update;
UPDATE tool_definition_snapshots
SET source_key = coalesce((
  SELECT group_concat(substr(src.generation_digest, 8, 8) || substr(src.revision_digest, 8, 8),
                      '' ORDER BY src.package_name)
  FROM tool_definition_snapshot_sources AS src
  WHERE src.snapshot_id = tool_definition_snapshots.snapshot_id), '');
CREATE TRIGGER tool_definition_snapshots_no_update BEFORE UPDATE ON tool_definition_snapshots
BEGIN SELECT RAISE(ABORT, 'UPDATE on tool_definition_snapshots is refused: the table is append-only'); END;
CREATE INDEX tool_definition_snapshots_source_key
  ON tool_definition_snapshots (project_id, source_key);

-- A snapshot's key has 16 characters a source row, as PostgreSQL's CHECK says: an executor from
-- before this migration inserts none (the column's default, ''), and its snapshot could never be
-- found current; it is refused instead, loudly.
CREATE TRIGGER tool_definition_snapshots_need_key BEFORE INSERT ON tool_definition_snapshots
WHEN length(NEW.source_key) <> 16 * NEW.package_count
BEGIN SELECT RAISE(ABORT, 'snapshot refused: its source_key does not have 16 characters a package; it was written by a package-executor from before migration 6: upgrade it'); END;
