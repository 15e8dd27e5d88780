//! The stated bound on a run's memory (docs/contract.md, "Memory"), as a function of the flags.
//!
//! Everything a run holds in proportion to its input is either reserved against
//! `--memory-budget` before it is held (revision bytes in flight, slices of 1 MiB on
//! PostgreSQL and 4 MiB on SQLite, the whole value SQLite loads to cut a slice, each revision
//! reader's state: [`crate::revision::HELD_BYTES`] at most) or bounded per worker by the
//! limits (the snapshot being assembled: its kept definition bodies, at most 8 MiB, the
//! document written from them and the copy the driver sends). A budget smaller than the
//! largest single read still lets that read run, alone, so the bound counts the larger of the
//! two. A batch's work beyond one snapshot and one observation (the revisions that came with
//! its opening, its later projects' observations, its later planned snapshots) is reserved
//! against the budget too, without waiting (`batch.rs`), so the bound holds at any
//! `--batch-size`, whatever the source rows. The rest is the process itself. The chart's memory
//! limit is this formula at the chart's values (`pe.memory` in `_pod.tpl`;
//! `tests/it/chart/manifests.rs` holds the two equal).

use crate::limits::MAX_SNAPSHOT_BYTES;
use crate::model::MAX_APPROVED_PERMISSIONS_BYTES;

pub use super::attempt::LARGEST_READ_BYTES;
use super::batch::OBSERVED_COPIES;

/// The process without work: runtime, connection pools, TLS roots, allocator arenas, logging.
/// Freed large blocks are not counted: the binary has glibc unmap them (`fix_mmap_threshold`
/// in main.rs).
pub const BASE_BYTES: u64 = 32 << 20;

/// The largest observation one project can have: 129 heads, each with the longest package
/// name (214 bytes) and installation id (128), three digests (71 each), approved permissions
/// up to [`MAX_APPROVED_PERMISSIONS_BYTES`] (a longer text comes as its length), and 256 bytes
/// of its strings' own overhead. About 2.4 MiB.
const OBSERVATION_BYTES: u64 =
    129 * (214 + 128 + 3 * 71 + MAX_APPROVED_PERMISSIONS_BYTES as u64 + 256);

/// What holding a worker's first (or only) project's observation may take: the observation
/// [`OBSERVED_COPIES`] times, rounded up to 10 MiB. A batch's later projects' observations are
/// reserved against the budget before they are read (`batch.rs`).
const OBSERVATION_HELD_BYTES: u64 = 10 << 20;

const _: () = assert!(OBSERVED_COPIES * OBSERVATION_BYTES <= OBSERVATION_HELD_BYTES);

/// What one worker may hold outside the budget: the kept bodies of the snapshot it builds, the
/// canonical document written from them, and the copy the database driver sends, each at most
/// [`MAX_SNAPSHOT_BYTES`], a MiB of row and protocol buffers, and its first project's
/// observation (10 MiB: the largest observation a project can have, about 2.4 MiB, held
/// `OBSERVED_COPIES` times, rounded up): 35 MiB.
pub const WORKER_BYTES: u64 = 3 * MAX_SNAPSHOT_BYTES + (1 << 20) + OBSERVATION_HELD_BYTES;

/// The most memory a run with these flags holds, whatever the input: the base, the budget (or
/// the largest single read, when the budget is smaller), and each worker's snapshot.
pub fn memory_bound(memory_budget: u64, concurrency: usize) -> u64 {
    BASE_BYTES + memory_budget.max(LARGEST_READ_BYTES) + concurrency as u64 * WORKER_BYTES
}

#[cfg(test)]
mod tests {
    use super::{LARGEST_READ_BYTES, memory_bound};

    #[test]
    fn the_default_flags_give_the_charts_default_limit() {
        // 32 MiB + 96 MiB + 4 × 35 MiB: the chart's default memory limit, 268 MiB.
        assert_eq!(
            memory_bound(crate::defaults::MEMORY_BUDGET.value, 4),
            268 << 20
        );
    }

    #[test]
    fn a_worker_may_hold_35_mib_outside_the_budget() {
        assert_eq!(super::WORKER_BYTES, 35 << 20);
    }

    #[test]
    fn a_small_budget_still_counts_the_largest_read() {
        // The chart rounds the largest read up to 50 MiB (`pe.memory`).
        assert_eq!(LARGEST_READ_BYTES.div_ceil(1 << 20), 50);
        assert_eq!(
            memory_bound(16 << 20, 1),
            memory_bound(LARGEST_READ_BYTES, 1)
        );
    }
}
