//! Every test that needs no root, as one binary (one link, one PostgreSQL server shared by its
//! storage tests). Its modules follow the source: `core` the pure core, `store` the storage
//! contract and the database's trust boundaries, `commands` the binary's commands end to end,
//! `chart` the Helm chart, its alerts and its metrics, then the docs and the toolchain.
//!
//! `cargo test` runs it. The fault scenarios that need root are the `chaos` binary
//! (`tests/chaos/`), the container image the `image` binary; `scripts/test.sh` runs each tier.

// A failed unwrap is a failed test: allowed once here for every module of this binary (clippy's
// `allow-unwrap-in-tests` covers `#[test]` functions, not the helpers beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod architecture;
mod chart;
mod commands;
mod core;
mod docs;
mod msrv;
pub(crate) mod store;
