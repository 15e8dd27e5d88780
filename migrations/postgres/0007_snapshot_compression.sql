-- Compress snapshot documents with lz4 where the server supports it (most builds do).
--
-- pglz was the largest single cost of the server during `run`: canonical JSON documents of a
-- few KiB are compressed on insert, and lz4 does that several times faster for a similar
-- ratio. Reading is transparent to every consumer. A server built without lz4 keeps pglz.
DO $$
BEGIN
  ALTER TABLE ql3.tool_definition_snapshots ALTER COLUMN canonical_json SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  RAISE NOTICE 'this PostgreSQL server is built without lz4; snapshot documents keep pglz';
END
$$;
