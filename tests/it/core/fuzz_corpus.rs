//! Every committed fuzz corpus file (`fuzz/corpus/<target>/`) replayed through the same target
//! bodies the fuzzers run (`crates/testkit/src/fuzz_targets.rs`), on the stable toolchain: an input a fuzzer once
//! found keeps failing `cargo test` if its defect comes back. (The revision target's allocation
//! bound needs a counting global allocator and is checked by the fuzzer only.)

use package_executor_testkit::fuzz_targets as targets;

use std::path::PathBuf;

fn replay(target: &str, body: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus for {target}");
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| body(&data)) {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!("{target}: {} fails: {why}", file.display());
        }
    }
    eprintln!("{target}: {} corpus files replayed", files.len());
}

#[test]
fn revision_corpus() {
    replay("revision", targets::revision);
}

#[test]
fn canonical_corpus() {
    replay("canonical", targets::canonical);
}

#[test]
fn identity_corpus() {
    replay("identity", targets::identity);
}

#[test]
fn fixture_corpus() {
    replay("fixture", targets::fixture);
}
