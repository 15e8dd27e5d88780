//! package-executor builds immutable, content-addressed tool definition snapshots.
//!
//! For every project whose packages changed (or, in a full scan, every project without a current
//! snapshot) it observes the active package set twice, reads the immutable package revisions in
//! small batches within a memory budget, validates the tool definitions (data only),
//! and appends a canonical three-digest snapshot to PostgreSQL or SQLite. Replicas converge by
//! exact replay; consumers read a snapshot only through a proof that it matches the live set.
//! The contract is `docs/contract.md` (section numbers in comments refer to it); the layout is
//! in `ARCHITECTURE.md`. The pure core is `canonical`, `identity`, `revision` and `planner`.

pub mod canonical;
pub mod canonical_text;
pub mod cli;
pub mod commands;
pub mod coordinator;
pub mod identity;
pub mod k8s;
pub mod metrics;
pub mod model;
pub mod planner;
pub mod quote;
pub mod rejection;
pub mod report;
pub mod revision;
pub mod source_key;
pub mod sources;
pub mod store;
pub mod verify;
