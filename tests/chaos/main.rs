//! The fault scenarios, opt in: they need root (network namespaces, mounts) and minutes each,
//! so every test here is `#[ignore]`d and `scripts/test.sh chaos` runs them with `--ignored`.
//! The storm of crashes, kills and partitions, the Patroni failovers, and a full disk.

mod disk_full;
mod patroni;
mod storm;
