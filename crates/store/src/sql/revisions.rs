//! Reading revision bytes: several at once, or a slice of one.

use super::*;

/// Several revisions' bytes in one statement (PostgreSQL: `$1` a `text[]`), each never more
/// than the 24 MiB limit; the content first, where [`RevisionBytes`](crate::RevisionBytes) reads it.
pub const REVISION_CONTENTS_PG: &str = "
SELECT r.content, r.revision_digest FROM ql3.materialized_revisions AS r
WHERE r.revision_digest = ANY($1) AND octet_length(r.content) <= 25165824";

/// A slice of one revision's bytes: `$3` bytes from 1-based offset `$2` (`substr` over bytes on
/// both dialects). Large revisions are read this way. On PostgreSQL a slice reads only its own
/// chunks (migration 0009 stores revisions uncompressed); SQLite loads the whole value to cut it,
/// so slices there are larger and the memory budget counts the whole revision.
pub const REVISION_SLICE: Statement = statement!(
    "
SELECT substr(r.content, $2, $3) AS part FROM ql3.materialized_revisions AS r
WHERE r.revision_digest = $1"
);

/// [`REVISION_CONTENTS_PG`] in SQLite: `$1` a JSON array of digests.
pub const REVISION_CONTENTS_SQLITE: &str = "
SELECT r.content, r.revision_digest FROM materialized_revisions AS r
WHERE r.revision_digest IN (SELECT j.value FROM json_each($1) AS j) AND length(r.content) <= 25165824";
