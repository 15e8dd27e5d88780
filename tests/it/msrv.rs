//! `rust-version` in Cargo.toml states the real minimum: the highest `rust_version` that a
//! locked dependency declares (cargo refuses to build a dependency that needs a newer
//! compiler), and the Dockerfile's default Rust image is at least that new. Before, the crate
//! said 1.89 and the image was `rust:1.89` while sqlx 0.9 needs 1.94: no image could build.

use std::process::Command;

/// `major.minor` of a version string (`1.94`, `1.94.0`).
fn major_minor(v: &str) -> (u64, u64) {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap_or(0))
}

fn host_triple() -> String {
    let out = Command::new("rustc").arg("-vV").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host")
}

/// The highest `rust_version` among the locked dependencies built for this host, and who
/// declares it.
fn highest_dependency_rust_version() -> ((u64, u64), String) {
    let meta = package_executor_testkit::cargo_metadata(&["--filter-platform", &host_triple()]);
    let root = meta["resolve"]["root"].as_str().unwrap().to_owned();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["id"].as_str() != Some(root.as_str()))
        .filter_map(|p| {
            let v = p["rust_version"].as_str()?;
            Some((major_minor(v), p["name"].as_str().unwrap().to_owned()))
        })
        .max()
        .expect("some dependency declares a rust_version")
}

#[test]
fn rust_version_is_the_highest_a_locked_dependency_needs() {
    let ours = major_minor(env!("CARGO_PKG_RUST_VERSION"));
    let (needed, by) = highest_dependency_rust_version();
    assert!(
        ours >= needed,
        "Cargo.toml's rust-version is {}, but {by} needs Rust {}.{}: raise rust-version (and the \
         Dockerfile's RUST_IMAGE)",
        env!("CARGO_PKG_RUST_VERSION"),
        needed.0,
        needed.1
    );
    assert_eq!(
        ours, needed,
        "rust-version states more than any dependency needs ({by}: {needed:?}); if our own code \
         needs it, say so here"
    );
}

#[test]
fn the_dockerfile_builds_on_a_rust_image_at_least_that_new() {
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    let image = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_IMAGE=rust:"))
        .expect("ARG RUST_IMAGE=rust:<version>-… in the Dockerfile");
    let version = image.split('-').next().unwrap();
    let ours = major_minor(env!("CARGO_PKG_RUST_VERSION"));
    assert!(
        major_minor(version) >= ours,
        "the Dockerfile builds on rust:{version}, older than rust-version {ours:?}"
    );
    assert!(
        dockerfile.contains("ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot")
            && dockerfile.contains("USER 65532:65532"),
        "the runtime base is an argument with the public default, and the user is non-root"
    );
}
