//! An attempt's combined steps, each one statement: opening it (the claim, the current check, the
//! first observation) and, on PostgreSQL, appending (the snapshot, its sources, the mark, the
//! second observation).

use super::*;

/// SQLite's open step up to the observation, in one statement (the connection's worker thread
/// is a hop per statement, and a hop costs more than these lookups): whether the project's row
/// is gone (`vanished`), the project's mark version, the digest of the snapshot proven current (NULL when none is), and the recorded
/// rejections as a JSON array of `[active_vector_digest, reason, detail]`. All of it is read
/// in the attempt's transaction, so in the same database snapshot as the observation after it.
pub const OPEN_SQLITE: Statement = statement!(concat!(
    "
SELECT NOT EXISTS (SELECT 1 FROM projects AS p WHERE p.project_id = $1) AS vanished,
       (SELECT m.version FROM pending_projects AS m WHERE m.project_id = $1) AS mark_version,
       (SELECT c.snapshot_digest FROM (",
    find_current_sqlite!(""),
    "
       ) AS c) AS current_digest,
       (SELECT json_group_array(json_array(r.active_vector_digest, r.reason, r.detail))
        FROM tool_definition_snapshot_rejections AS r
        WHERE r.project_id = $1) AS rejections"
));

/// What opening reads of project `$project` once `c.claimed` says its claim is held: its
/// snapshot's existence, whether its row is gone (`vanished`: deleted since it was listed), its
/// mark, its first observation with the revisions' lengths (and their
/// contents within the cap `$2`), and its recorded rejections; the select list and the laterals
/// after `FROM c` (shared by [`OPEN_PG`] and [`OPEN_BATCH_PG`]).
///
/// `OFFSET 0` keeps "has a snapshot" one key lookup per project. Without it PostgreSQL may
/// turn the batch's correlated `EXISTS` into a hashed subplan, which reads every stored
/// snapshot into a hash table once per batch: a cost that grew with the table (a sixth of the
/// server's CPU in a 20,000-project cold run, docs/benchmarks.md). The plans test asserts that
/// no statement of a batch hashes a keyed table.
macro_rules! opened {
    ($project:expr) => {
        concat!(
            "c.claimed,
       c.claimed AND EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s0
                             WHERE s0.project_id = ",
            $project,
            " OFFSET 0) AS has_snapshot,
       c.claimed AND NOT EXISTS (SELECT 1 FROM ql3.projects AS p0 WHERE p0.project_id = ",
            $project,
            " OFFSET 0) AS vanished,
       (SELECT m.version FROM ql3.pending_projects AS m WHERE m.project_id = ",
            $project,
            ") AS mark_version,
       h.*, rj.*
FROM c
CROSS JOIN LATERAL (",
            live_heads!(
                $project;
                concat!(
                    length_columns!("octet_length"),
                    // PostgreSQL's window keeps each revision as its TOAST pointer: summing
                    // the lengths reads no content.
                    inline_column!("sum(octet_length(r.content)) OVER ()", "$2")
                ),
                ",
         coalesce(array_agg(o.byte_length), '{}') AS byte_lengths,
         coalesce(array_agg(o.actual_length), '{}') AS actual_lengths,
         coalesce(array_agg(o.inline_content), '{}') AS inline_contents,
         coalesce(sum(octet_length(o.package_name) + octet_length(o.installation_id)
                      + coalesce(octet_length(o.generation_digest), 0)
                      + coalesce(octet_length(o.lock_digest), 0)
                      + coalesce(octet_length(o.revision_digest), 0)
                      + coalesce(octet_length(o.approved_permissions), 0) + 64), 0)
           AS observed_bytes",
                length_join!(),
                " AND c.claimed"
            ),
            "
) AS h
CROSS JOIN LATERAL (
  SELECT coalesce(array_agg(r.active_vector_digest), '{}') AS rejected_vectors,
         coalesce(array_agg(r.reason), '{}') AS rejected_reasons,
         coalesce(array_agg(r.detail), '{}') AS rejected_details
  FROM ql3.tool_definition_snapshot_rejections AS r
  WHERE r.project_id = ",
            $project,
            " AND c.claimed
) AS rj"
        )
    };
}

/// Opens an attempt in one PostgreSQL statement: the claim, then, only when it is held, whether the project has a snapshot at all, the first observation with each
/// revision's stored lengths, and the project's recorded rejections. When the heads' revisions
/// together hold at most `$2` bytes, their contents come too (`inline_contents`, aligned with
/// the heads; see `inline_column!`), which saves a cold project its revision read: a round
/// trip and a statement, about a tenth of what a typical project costs client and server.
/// The current proof is [`CURRENT_DIGEST_PG`], asked only when there is a snapshot: inlined
/// here, its thirty-odd plan nodes would be initialised on every attempt, a project built for
/// the first time included.
///
/// The claim is a row lock on the project's row of `ql3.project_claims` (migration 11), taken
/// with `SKIP LOCKED` so that a claim held by another executor is seen at once, never waited
/// for. Locking a row needs UPDATE privilege there, which only the executor's role has: no
/// other login can take or hold a claim. Both steps are `MATERIALIZED` CTEs so that the lock
/// is tried exactly once: as a plain subquery the planner may copy it into every gate that
/// reads `c.claimed`, and if another replica committed between two of those tries, one gate
/// would see the claim and another not (an empty first observation under a granted claim).
pub const OPEN_PG: &str = concat!(
    "
WITH k AS MATERIALIZED (
  SELECT k.project_id FROM ql3.project_claims AS k WHERE k.project_id = $1
  FOR UPDATE SKIP LOCKED
), c AS MATERIALIZED (SELECT EXISTS (SELECT 1 FROM k) AS claimed)
SELECT ",
    opened!("$1")
);

/// Appends in one PostgreSQL statement: the snapshot (`$1`–`$7` and its key `$15`, both unique
/// keys arbitrating),
/// its source rows from parallel arrays (`$8`–`$13`) only when the snapshot row was inserted,
/// the clearing of the project's mark if it still holds version `$14` (see [`CLEAR_MARK`]; the
/// caller rolls back on drift or a mismatch, which keeps it), and the second observation with
/// whether the project's row is gone (`vanished`: the caller rolls back then too), all in one
/// statement snapshot.
pub const APPEND_PG: &str = concat!(
    "
WITH ins AS (
  INSERT INTO ql3.tool_definition_snapshots
    (project_id, active_vector_digest, definition_digest, snapshot_digest, package_count,
     definition_count, canonical_json, source_key)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $15)
  ON CONFLICT DO NOTHING
  RETURNING snapshot_id
), src AS (
  INSERT INTO ql3.tool_definition_snapshot_sources
    (snapshot_id, package_name, installation_id, generation, generation_digest, lock_digest,
     revision_digest)
  SELECT ins.snapshot_id, e.package_name, e.installation_id, e.generation, e.generation_digest,
         e.lock_digest, e.revision_digest
  FROM ins
  CROSS JOIN unnest($8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::text[])
    AS e(package_name, installation_id, generation, generation_digest, lock_digest, revision_digest)
), clr AS MATERIALIZED (
  SELECT ql3.clear_pending_mark($1, $14) AS cleared
)
SELECT (SELECT ins.snapshot_id FROM ins) AS snapshot_id, clr.cleared,
       NOT EXISTS (SELECT 1 FROM ql3.projects AS p0 WHERE p0.project_id = $1) AS vanished, h.*
FROM clr CROSS JOIN (",
    live_heads!("", "", "", ""),
    "
) AS h"
);

/// Opens a batch's attempt in one PostgreSQL statement: [`OPEN_PG`] for every project of `$1`
/// at once, one row each, in the order given. The claims are one `SKIP LOCKED` scan of the
/// batch's claim rows, so a project another executor holds is left out at once (its row says
/// `claimed` false and nothing else was read for it), and the rest are claimed together. The
/// inline cap `$2` holds for each project on its own.
///
/// The observations' text (`observed_bytes`: names, ids, digests and approved permissions, 64
/// bytes a head besides) is held to `$3` bytes for the whole batch, counted in order: the
/// first project always comes whole, and from the first project past the cap on, a row says
/// `kept` false and brings nothing but its claim, so what a batch holds is reserved before it
/// is read (contract section 2) and the batch closes before that project, which the next
/// batch takes.
pub const OPEN_BATCH_PG: &str = concat!(
    "
WITH b AS MATERIALIZED (
  SELECT b.project_id, b.ord FROM unnest($1::text[]) WITH ORDINALITY AS b(project_id, ord)
), k AS MATERIALIZED (
  SELECT k.project_id FROM ql3.project_claims AS k WHERE k.project_id = ANY($1::text[])
  FOR UPDATE SKIP LOCKED
), c AS MATERIALIZED (
  SELECT b.project_id, b.ord, EXISTS (SELECT 1 FROM k WHERE k.project_id = b.project_id) AS claimed
  FROM b
), q AS (
  SELECT c.project_id, c.ord, ",
    opened!("c.project_id"),
    "
), w AS (
  SELECT q.*, q.ord = 1 OR sum(q.observed_bytes) OVER (ORDER BY q.ord) <= $3 AS kept FROM q
)
SELECT w.project_id, w.claimed, w.has_snapshot, w.vanished, w.mark_version, w.kept,
       w.observed_bytes,
       CASE WHEN w.kept THEN w.package_names END AS package_names,
       CASE WHEN w.kept THEN w.installation_ids END AS installation_ids,
       CASE WHEN w.kept THEN w.generations END AS generations,
       CASE WHEN w.kept THEN w.statuses END AS statuses,
       CASE WHEN w.kept THEN w.generation_digests END AS generation_digests,
       CASE WHEN w.kept THEN w.lock_digests END AS lock_digests,
       CASE WHEN w.kept THEN w.revision_digests END AS revision_digests,
       CASE WHEN w.kept THEN w.permissions END AS permissions,
       CASE WHEN w.kept THEN w.byte_lengths END AS byte_lengths,
       CASE WHEN w.kept THEN w.actual_lengths END AS actual_lengths,
       CASE WHEN w.kept THEN w.inline_contents END AS inline_contents,
       CASE WHEN w.kept THEN w.rejected_vectors END AS rejected_vectors,
       CASE WHEN w.kept THEN w.rejected_reasons END AS rejected_reasons,
       CASE WHEN w.kept THEN w.rejected_details END AS rejected_details
FROM w
ORDER BY w.ord"
);

named_params! {
    /// [`FINISH_BATCH_PG`]'s parameters, by name: one column per array, entries in order, and
    /// the first observations' heads flattened with the (1-based) position of their entry.
    pub(crate) struct FinishBatch<'s> {
        project_ids: Vec<&'s str>,
        vectors: Vec<Option<&'s str>>,
        definition_digests: Vec<Option<&'s str>>,
        snapshot_digests: Vec<Option<&'s str>>,
        package_counts: Vec<Option<i32>>,
        definition_counts: Vec<Option<i32>>,
        documents: Vec<Option<&'s [u8]>>,
        source_keys: Vec<Option<String>>,
        marks: Vec<Option<i64>>,
        reasons: Vec<Option<&'static str>>,
        details: Vec<Option<&'s str>>,
        observe: Vec<bool>,
        head_entries: Vec<i64>,
        package_names: Vec<&'s str>,
        installation_ids: Vec<&'s str>,
        generations: Vec<i64>,
        generation_digests: Vec<&'s str>,
        lock_digests: Vec<&'s str>,
        revision_digests: Vec<&'s str>,
        permissions: Vec<&'s str>,
    }
}

/// Ends a batch's attempt in one PostgreSQL statement, every project's outcome written as if it
/// had been alone, all in one statement snapshot. Its parameters are `FinishBatch`'s, by name
/// (declared above): one entry per project, in parallel arrays in order (its snapshot's columns, NULL
/// `definition_digest` when it publishes nothing; its mark's version, NULL when it had none;
/// the rejection to record, NULL reason when none; and whether its writes wait on a second
/// observation, `observe`). The heads of the first observations, flattened (`head_entries`
/// the entry's 1-based position), are what each second observation must equal, column for
/// column, the status `active` included; they are also the published snapshots' source rows.
///
/// An entry whose second observation differs writes nothing and keeps its mark: its row says
/// `steady` false and carries the heads seen, for the caller to name the drift. An entry whose
/// project row is gone at the second observation writes nothing either (`vanished`: no
/// snapshot is ever stored for a project id without a project row; its deletion took its mark). A steady entry
/// inserts its snapshot (`ON CONFLICT DO NOTHING`, both unique keys arbitrating) with its
/// source rows, records its rejection, and clears its mark if it still holds the version read
/// before the build; a snapshot that was not inserted clears the mark only when the same
/// snapshot is already stored (an exact replay): a different one is `replay-mismatch`, and
/// one not yet visible is tried again, both of which keep the mark as a rollback would.
///
/// Two things keep the server's work per snapshot down (docs/benchmarks.md): the documents
/// (`documents`) are not part of `p`, which every step reads, but taken by position where they are
/// inserted, so each is copied once on its way in; and the batch's marks are cleared by one
/// call of `ql3.clear_pending_marks` (migration 15), not one call each. The replay test's
/// `OFFSET 0` keeps it a key lookup per project (`opened!` says why).
pub const FINISH_BATCH_PG: &str = named_text!(
    concat!(
    "
WITH p AS MATERIALIZED (
  SELECT * FROM unnest($project_ids::text[], $vectors::text[], $definition_digests::text[], $snapshot_digests::text[], $package_counts::int[], $definition_counts::int[],
                       $source_keys::text[], $marks::bigint[], $reasons::text[], $details::text[], $observe::bool[])
    WITH ORDINALITY AS p(project_id, active_vector_digest, definition_digest, snapshot_digest,
                         package_count, definition_count, source_key, mark, reason, detail,
                         observe, ord)
), e AS MATERIALIZED (
  SELECT e.*, 'active' AS status
  FROM unnest($head_entries::bigint[], $package_names::text[], $installation_ids::text[], $generations::bigint[], $generation_digests::text[],
              $lock_digests::text[], $revision_digests::text[], $permissions::text[])
    AS e(ord, package_name, installation_id, generation, generation_digest, lock_digest,
         revision_digest, approved_permissions)
), o AS MATERIALIZED (
  SELECT p.ord, h.* FROM p CROSS JOIN LATERAL (",
    heads_query!("p.project_id"; "", "", ""),
    "
  ) AS h
  WHERE p.observe
), d AS MATERIALIZED (
  SELECT DISTINCT coalesce(e.ord, o.ord) AS ord
  FROM e FULL JOIN o
    ON o.ord = e.ord AND o.package_name = e.package_name
   AND o.installation_id = e.installation_id AND o.active_generation = e.generation
   AND o.status = e.status AND o.generation_digest = e.generation_digest
   AND o.lock_digest = e.lock_digest AND o.revision_digest = e.revision_digest
   AND o.approved_permissions = e.approved_permissions
  WHERE e.ord IS NULL OR o.ord IS NULL
), x AS MATERIALIZED (
  SELECT p.ord FROM p
  WHERE p.observe AND NOT EXISTS (SELECT 1 FROM ql3.projects AS p0
                                  WHERE p0.project_id = p.project_id OFFSET 0)
), v AS MATERIALIZED (
  SELECT p.ord, d.ord IS NULL AND x.ord IS NULL AS steady, x.ord IS NOT NULL AS vanished
  FROM p LEFT JOIN d ON d.ord = p.ord LEFT JOIN x ON x.ord = p.ord
), ins AS (
  INSERT INTO ql3.tool_definition_snapshots
    (project_id, active_vector_digest, definition_digest, snapshot_digest, package_count,
     definition_count, canonical_json, source_key)
  SELECT p.project_id, p.active_vector_digest, p.definition_digest, p.snapshot_digest,
         p.package_count, p.definition_count, ($documents::bytea[])[p.ord::int], p.source_key
  FROM p JOIN v ON v.ord = p.ord
  WHERE v.steady AND p.definition_digest IS NOT NULL
  ORDER BY p.ord
  ON CONFLICT DO NOTHING
  RETURNING snapshot_id, project_id
), src AS (
  INSERT INTO ql3.tool_definition_snapshot_sources
    (snapshot_id, package_name, installation_id, generation, generation_digest, lock_digest,
     revision_digest)
  SELECT i.snapshot_id, e.package_name, e.installation_id, e.generation, e.generation_digest,
         e.lock_digest, e.revision_digest
  FROM ins AS i JOIN p ON p.project_id = i.project_id JOIN e ON e.ord = p.ord
), rej AS (
  INSERT INTO ql3.tool_definition_snapshot_rejections
    (project_id, active_vector_digest, reason, detail)
  SELECT p.project_id, p.active_vector_digest, p.reason, p.detail
  FROM p JOIN v ON v.ord = p.ord
  WHERE v.steady AND p.reason IS NOT NULL
  ON CONFLICT DO NOTHING
), clr AS MATERIALIZED (
  SELECT ql3.clear_pending_marks(array_agg(p.project_id ORDER BY p.ord),
                                 array_agg(p.mark ORDER BY p.ord)) AS cleared
  FROM p JOIN v ON v.ord = p.ord LEFT JOIN ins AS i ON i.project_id = p.project_id
  WHERE v.steady AND p.mark IS NOT NULL
    AND (p.definition_digest IS NULL
         OR i.snapshot_id IS NOT NULL
         OR EXISTS (SELECT 1 FROM ql3.tool_definition_snapshots AS s
                    WHERE s.project_id = p.project_id
                      AND s.active_vector_digest = p.active_vector_digest
                      AND s.snapshot_digest = p.snapshot_digest
                    OFFSET 0))
)
SELECT p.ord, v.steady, v.vanished, i.snapshot_id, (SELECT c.cleared FROM clr AS c) AS cleared,
       h.package_names, h.installation_ids, h.generations, h.statuses, h.generation_digests,
       h.lock_digests, h.revision_digests, h.permissions
FROM p JOIN v ON v.ord = p.ord
LEFT JOIN ins AS i ON i.project_id = p.project_id
LEFT JOIN LATERAL (",
    head_arrays!(),
    "
  FROM o WHERE o.ord = p.ord AND NOT v.steady
) AS h ON true
ORDER BY p.ord"
),
    FinishBatch::PLACEHOLDERS
);
