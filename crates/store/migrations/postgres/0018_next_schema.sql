-- Only in builds with the `next-schema` feature (the cluster tier's upgrade tests), never in a
-- release: a migration that changes nothing but the schema's version, which `migrate` records.
SELECT 1;
