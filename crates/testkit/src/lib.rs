//! What package-executor's tests, benches and fuzz targets share, as one library instead of
//! files included by path: a throwaway PostgreSQL server ([`pg`]), storage helpers ([`db`]),
//! fixtures, builders of pure-core inputs ([`inputs`]), the chart as helm renders it ([`helm`]),
//! the API server's rules ([`k8s_rules`]), a real cluster as the end-to-end tier drives it
//! ([`cluster`]), the fault scenarios' harness ([`chaos`],
//! [`actors`], [`patroni`]) and the fuzz targets' bodies ([`fuzz_targets`]).
//!
//! Test code: a failed step panics with what went wrong, so `unwrap` and `expect` are the point.
#![allow(
    missing_docs,
    missing_debug_implementations,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub mod actors;
pub mod certs;
pub mod chaos;
pub mod cluster;
pub mod db;
pub mod fixtures;
pub mod fuzz_targets;
pub mod helm;
pub mod inputs;
pub mod k8s_rules;
pub mod patroni;
pub mod pg;
pub mod pty;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// The `package-executor` binary cargo built beside the running test or bench
/// (`target/<profile>/package-executor`; the test itself runs from `target/<profile>/deps/`).
pub fn executable() -> PathBuf {
    let me = std::env::current_exe().expect("the running test's own path");
    let deps = me.parent().expect("the test runs from a directory");
    let profile = if deps.ends_with("deps") {
        deps.parent().expect("deps/ has a parent")
    } else {
        deps
    };
    profile.join(format!("package-executor{}", std::env::consts::EXE_SUFFIX))
}

/// Runs `f`, failing the test if it has not finished after `secs` seconds: every test that waits
/// on a process, a server or another task bounds the wait with this.
pub async fn within<F: Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {secs} s"));
}

/// A TCP port on loopback that nothing listens on right now (the kernel's choice).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on loopback")
}

/// `cargo metadata` of the workspace, locked and offline, with `args` added: its JSON.
pub fn cargo_metadata(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(args)
        .current_dir(helm::root())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}
