//! The pure core of package-executor: everything that decides, and nothing that does I/O.
//!
//! Canonical JSON and its digests, tool identity, revision parsing and validation, the snapshot
//! planner, a stored snapshot's re-proof, the outcomes of a run and the exit codes they map to.
//! No async runtime, database driver or Kubernetes client is among this crate's dependencies:
//! Cargo enforces the layer that `ARCHITECTURE.md` describes. The contract is
//! `docs/contract.md` (section numbers in comments refer to it).

pub mod canonical;
pub mod defaults;
pub mod exit;
pub mod fixture;
pub mod identity;
pub mod import_rows;
pub mod limits;
pub mod model;
pub mod planner;
pub mod quote;
pub mod rejection;
pub mod report;
pub mod revision;
pub mod source_key;
pub mod standing;
pub mod verify;
