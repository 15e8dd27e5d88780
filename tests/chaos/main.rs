//! The fault scenarios, opt in: they need root (network namespaces, mounts) and minutes each,
//! so every test here is `#[ignore]`d and `scripts/test.sh chaos` runs them with `--ignored`.
//! The storm of crashes, kills and partitions, the Patroni failovers, and a full disk.

// A failed unwrap is a failed test: allowed once here for every module of this binary (clippy's
// `allow-unwrap-in-tests` covers `#[test]` functions, not the helpers beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod disk_full;
mod patroni;
mod storm;
