-- Generation keys keep their first values for ever (contract section 7), as on PostgreSQL: the
-- first digests and permissions written under an (installation, generation) key are kept here,
-- and a later INSERT of the key (after a DELETE, with foreign keys deferred or not, or through
-- INSERT OR REPLACE) must bring the same ones, or it is refused. With the UPDATE trigger of
-- migration 1 a key never stands for other values than it first had, so no snapshot built from
-- it can be proven current over approvals that changed behind it.
--
-- SQLite has no roles: whoever can write the file can drop these triggers too. The file is the
-- executor's own (edge and local use, one authority), so this guards against a control plane's
-- mistakes, not against its owner; `verify` recomputes what the snapshots claim.

CREATE TABLE generation_ledger (
  installation_id TEXT NOT NULL,
  generation INTEGER NOT NULL,
  generation_digest TEXT NOT NULL,
  lock_digest TEXT NOT NULL,
  revision_digest TEXT NOT NULL,
  approved_permissions TEXT NOT NULL,
  PRIMARY KEY (installation_id, generation)
) STRICT, WITHOUT ROWID;

INSERT INTO generation_ledger
SELECT g.installation_id, g.generation, g.generation_digest, g.lock_digest, g.revision_digest,
       g.approved_permissions
FROM package_generations AS g;

CREATE TRIGGER package_generations_key_unchanged
BEFORE INSERT ON package_generations
WHEN EXISTS (
  SELECT 1 FROM generation_ledger AS l
  WHERE l.installation_id = NEW.installation_id AND l.generation = NEW.generation
    AND (l.generation_digest IS NOT NEW.generation_digest OR l.lock_digest IS NOT NEW.lock_digest
         OR l.revision_digest IS NOT NEW.revision_digest
         OR l.approved_permissions IS NOT NEW.approved_permissions))
BEGIN
  SELECT RAISE(ABORT, 'a generation key keeps its first digests and permissions for ever, even after a DELETE: create a new generation number instead');
END;

CREATE TRIGGER package_generations_key_ledger
AFTER INSERT ON package_generations
BEGIN
  INSERT OR IGNORE INTO generation_ledger
  VALUES (NEW.installation_id, NEW.generation, NEW.generation_digest, NEW.lock_digest,
          NEW.revision_digest, NEW.approved_permissions);
END;
