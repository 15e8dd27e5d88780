-- How snapshot documents are stored: compressed with lz4 where the server supports it (most
-- builds do), and kept in the table's own pages up to 8 KiB after compression.
--
-- pglz was the largest single cost of the server during `run`: canonical JSON documents of a
-- few KiB to a few hundred KiB are compressed on insert, and lz4 does that several times
-- faster for a similar ratio. A server built without lz4 keeps pglz. With the default
-- toast_tuple_target (2 KiB), a typical compressed document (about 3 KiB) also went out of line
-- into the TOAST table, a second heap and index insert for every snapshot. Reading is
-- unchanged for every consumer.
ALTER TABLE ql3.tool_definition_snapshots SET (toast_tuple_target = 8160);
DO $$
BEGIN
  ALTER TABLE ql3.tool_definition_snapshots ALTER COLUMN canonical_json SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  RAISE NOTICE 'this PostgreSQL server is built without lz4; snapshot documents keep pglz';
END
$$;
