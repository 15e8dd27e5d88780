//! The contract's limits on what one project may hold (section 2): the planner and the revision
//! reader both enforce them, and the shell sizes its memory bound from them.

/// Most active packages in one project.
pub const MAX_PACKAGES: usize = 128;
/// Most tool definitions in one project.
pub const MAX_DEFINITIONS: usize = 128;
/// Largest canonical snapshot document.
pub const MAX_SNAPSHOT_BYTES: u64 = 8 * 1024 * 1024;
/// Largest materialized revision.
pub const MAX_REVISION_BYTES: i64 = 24 * 1024 * 1024;
/// Nesting limit of a whole revision document.
pub const MAX_REVISION_DEPTH: usize = 128;
/// Nesting limit of one definition (the definition object is depth 1).
pub const MAX_DEFINITION_DEPTH: usize = 64;
/// Largest canonical definition, in bytes.
pub const MAX_DEFINITION_BYTES: u64 = 256 * 1024;
