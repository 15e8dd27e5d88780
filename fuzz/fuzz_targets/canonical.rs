//! libFuzzer target: see `crates/testkit/src/fuzz_targets.rs` for the properties it asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| package_executor_testkit::fuzz_targets::canonical(data));
