//! libFuzzer target: see `fuzz/targets.rs` for the properties it asserts. Here also: parsing a
//! revision never allocates more than a fixed multiple of its size (a counting allocator).
#![no_main]

// Each target uses one of the shared bodies.
#[allow(dead_code)]
#[path = "../targets.rs"]
mod targets;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes live now, and the most since the last reset.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let now = LIVE.fetch_add(grow, Ordering::Relaxed) + grow;
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The bound: this multiple of the input, plus a constant for fixed-size state.
const FACTOR: usize = 64;
const CONSTANT: usize = 256 * 1024;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    targets::revision(data);
    let used = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    assert!(
        used <= FACTOR * data.len() + CONSTANT,
        "{used} bytes allocated for a {}-byte revision",
        data.len()
    );
});
