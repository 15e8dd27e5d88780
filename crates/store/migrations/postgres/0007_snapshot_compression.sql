-- Snapshot documents are compressed with lz4 where the server supports it (most builds do).
--
-- pglz was the largest single cost of the server during `run`: canonical JSON documents of a
-- few KiB to a few hundred KiB are compressed on insert, and lz4 does that several times
-- faster for a similar ratio. A server built without lz4 keeps pglz. Reading is unchanged for
-- every consumer. (Keeping compressed documents in the table's own pages, toast_tuple_target
-- 8160, gained nothing measurable and made every scan of the table four times wider.)
DO $$
BEGIN
  ALTER TABLE ql3.tool_definition_snapshots ALTER COLUMN canonical_json SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  RAISE NOTICE 'this PostgreSQL server is built without lz4; snapshot documents keep pglz';
END
$$;
