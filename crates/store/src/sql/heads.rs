//! Observing a project's live heads: the observation, its revision lengths and inlined bytes, and
//! the parallel-array form the combined PostgreSQL steps embed (`live_heads!`).

use super::*;

/// Live heads of project `$1` joined to their generations, in vector order; at most 129 rows,
/// which is all `too-many-packages` needs. A generation's approved permissions come only when
/// their text holds at most 18 KiB (`model::MAX_APPROVED_PERMISSIONS_BYTES`, what 256
/// permissions of 64 characters take with room for spaces; the database refuses more since
/// migration 17): a row stored before the limit comes as `{"bytes":N}`, which the planner
/// refuses as `source-invalid`, so no source row can make an observation large. `$columns`, `$join` and `$gate` add selected
/// columns, joins and conditions for the combined steps of an attempt; with a first argument,
/// the project is that expression instead of `$1` (a batch's `b.project_id`).
macro_rules! heads_query {
    ($columns:expr, $join:expr, $gate:expr) => {
        heads_query!("$1"; $columns, $join, $gate)
    };
    ($project:expr; $columns:expr, $join:expr, $gate:expr) => {
        concat!(
            "
SELECT i.package_name, i.installation_id, i.active_generation, g.status,
       g.generation_digest, g.lock_digest, g.revision_digest,
       CASE WHEN octet_length(g.approved_permissions) <= 18432 THEN g.approved_permissions
            ELSE '{\"bytes\":' || octet_length(g.approved_permissions) || '}'
       END AS approved_permissions",
            $columns,
            "
FROM ql3.package_installations AS i
LEFT JOIN ql3.package_generations AS g
  ON g.installation_id = i.installation_id AND g.generation = i.active_generation",
            $join,
            "
WHERE i.project_id = ",
            $project,
            " AND i.active_generation IS NOT NULL",
            $gate,
            "
ORDER BY i.package_name
LIMIT 129"
        )
    };
}

/// One observation (the first and second, and `explain`'s).
pub const OBSERVE_HEADS: Statement = statement!(heads_query!("", "", ""));

/// `heads_query!` columns for each head's revision: its stored `byte_length` and the actual
/// length of its content (by the dialect's `$length` function), never its bytes (NULL when
/// the revision row is missing).
macro_rules! length_columns {
    ($length:expr) => {
        concat!(
            ",
       r.byte_length, CAST(",
            $length,
            "(r.content) AS BIGINT) AS actual_length"
        )
    };
}

/// The `heads_query!` join that [`length_columns!`] reads.
macro_rules! length_join {
    () => {
        "
  LEFT JOIN ql3.materialized_revisions AS r ON r.revision_digest = g.revision_digest"
    };
}

/// The column that brings a head's revision bytes along when `$total`, the bytes of all the
/// heads' revisions, is at most `$cap` (NULL otherwise); a cap of -1 turns it off. The total
/// is taken from the stored lengths, never by reading the contents.
macro_rules! inline_column {
    ($total:expr, $cap:expr) => {
        concat!(
            ",
       CASE WHEN ",
            $total,
            " <= ",
            $cap,
            " THEN r.content END AS inline_content"
        )
    };
}

/// The first observation with each head's revision lengths, and their bytes within the cap
/// `$2` (SQLite's open step; PostgreSQL's is part of [`OPEN_PG`]). The total is a subquery of
/// its own, evaluated once: SQLite materialises a window's input rows with every column the
/// select list uses, so a window sum here would read every revision whole, however large.
pub const OBSERVE_WITH_LENGTHS: Statement = statement!(heads_query!(
    concat!(
        length_columns!("LENGTH_FN"),
        inline_column!(
            "(SELECT sum(LENGTH_FN(r2.content))
         FROM ql3.package_installations AS i2
         JOIN ql3.package_generations AS g2
           ON g2.installation_id = i2.installation_id AND g2.generation = i2.active_generation
         JOIN ql3.materialized_revisions AS r2 ON r2.revision_digest = g2.revision_digest
         WHERE i2.project_id = $1 AND i2.active_generation IS NOT NULL)",
            "$2"
        )
    ),
    length_join!(),
    ""
));

/// The select list that aggregates heads `o` (rows of [`OBSERVE_HEADS`]'s columns) into the
/// parallel arrays an observation's reader takes.
macro_rules! head_arrays {
    () => {
        "
  SELECT coalesce(array_agg(o.package_name), '{}') AS package_names,
         coalesce(array_agg(o.installation_id), '{}') AS installation_ids,
         coalesce(array_agg(o.active_generation), '{}') AS generations,
         coalesce(array_agg(o.status), '{}') AS statuses,
         coalesce(array_agg(o.generation_digest), '{}') AS generation_digests,
         coalesce(array_agg(o.lock_digest), '{}') AS lock_digests,
         coalesce(array_agg(o.revision_digest), '{}') AS revision_digests,
         coalesce(array_agg(o.approved_permissions), '{}') AS permissions"
    };
}

/// The observation ([`OBSERVE_HEADS`], with `$columns`, `$join` and `$gate` as there) as one
/// row of parallel arrays, for the combined PostgreSQL steps; `$arrays` aggregates the added
/// columns. One aggregate pass fills every array, so they stay aligned; the reader sorts the
/// heads into vector order (an `ORDER BY` per `array_agg` would cost a sort each).
macro_rules! live_heads {
    ($columns:expr, $arrays:expr, $join:expr, $gate:expr) => {
        live_heads!("$1"; $columns, $arrays, $join, $gate)
    };
    ($project:expr; $columns:expr, $arrays:expr, $join:expr, $gate:expr) => {
        concat!(
            head_arrays!(),
            $arrays,
            "
  FROM (",
            heads_query!($project; $columns, $join, $gate),
            ") AS o"
        )
    };
}

/// Whether a project row exists.
pub const PROJECT_EXISTS: Statement =
    statement!("SELECT COUNT(*) AS n FROM ql3.projects AS p WHERE p.project_id = $1");
