//! package-executor builds immutable, content-addressed tool definition snapshots.
//!
//! For every project whose packages changed (or, in a full scan, every project without a current
//! snapshot) it observes the active package set twice, reads the immutable package revisions in
//! small batches within a memory budget, validates the tool definitions (data only),
//! and appends a canonical three-digest snapshot to PostgreSQL or SQLite. Replicas converge by
//! exact replay; consumers read a snapshot only through a proof that it matches the live set.
//! The contract is `docs/contract.md` (section numbers in comments refer to it); the layout is
//! in `ARCHITECTURE.md`. The pure core is the `package-executor-core` crate (`crates/core`), re-exported here under
//! its module names; this crate is the shell around it.

pub mod audit;
pub mod cli;
pub mod commands;
pub mod coordinator;
pub mod k8s;
pub mod metrics;
pub mod sources;

pub use package_executor_core::{
    canonical, defaults, exit, identity, limits, model, planner, quote, rejection, report,
    revision, source_key, standing, verify,
};
pub use package_executor_store as store;
