//! libFuzzer target: see `fuzz/targets.rs` for the properties it asserts.
#![no_main]

// Each target uses one of the shared bodies.
#[allow(dead_code)]
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::fixture(data));
