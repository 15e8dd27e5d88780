//! The memory budget: revision bytes in flight across all workers stay within `--memory-budget`.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A byte-weighted semaphore, counted in KiB so that budgets up to terabytes fit in `u32`.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    total_kib: u32,
}

/// Bytes held against the budget; released on drop.
#[derive(Debug)]
pub struct Reservation {
    permit: OwnedSemaphorePermit,
}

impl Reservation {
    /// Gives back what is held beyond `bytes` (at least 1 KiB stays held).
    pub fn shrink_to(&mut self, bytes: u64) {
        let keep = usize::try_from(bytes.div_ceil(1024))
            .unwrap_or(usize::MAX)
            .max(1);
        let held = self.permit.num_permits();
        if held > keep {
            drop(self.permit.split(held - keep));
        }
    }
}

impl MemoryBudget {
    /// A budget of `bytes` (at least 1 KiB).
    pub fn new(bytes: u64) -> Self {
        let total_kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .max(1);
        Self {
            permits: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    /// Waits until `bytes` fit. A request larger than the whole budget takes the whole budget,
    /// so an oversized revision still runs, alone.
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total_kib);
        #[allow(clippy::expect_used)]
        let permit = Arc::clone(&self.permits)
            .acquire_many_owned(kib)
            .await
            // Invariant: the semaphore is private to this type and never closed.
            .expect("the memory budget semaphore is never closed");
        Reservation { permit }
    }

    /// Takes `bytes` now if they are free, without waiting (a request larger than the whole
    /// budget never fits).
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let kib = u32::try_from(bytes.div_ceil(1024)).ok()?.max(1);
        let permit = Arc::clone(&self.permits).try_acquire_many_owned(kib).ok()?;
        Some(Reservation { permit })
    }

    /// KiB currently free (for tests and progress).
    pub fn available_kib(&self) -> usize {
        self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn oversized_runs_alone_and_bytes_are_returned() {
        let budget = MemoryBudget::new(10 * 1024);
        let big = budget.reserve(1 << 30).await;
        assert_eq!(budget.available_kib(), 0);
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), budget.reserve(1)).await;
        assert!(
            waiting.is_err(),
            "a second reservation must wait while the oversized one runs"
        );
        drop(big);
        let small =
            tokio::time::timeout(std::time::Duration::from_secs(5), budget.reserve(4096)).await;
        assert!(small.is_ok());
        assert_eq!(budget.available_kib(), 6);
        assert!(
            budget.try_reserve(7 * 1024).is_none(),
            "7 KiB do not fit in 6"
        );
        let now = budget.try_reserve(6 * 1024).expect("6 KiB fit");
        assert_eq!(budget.available_kib(), 0);
        drop(now);
        assert_eq!(budget.available_kib(), 6);
        let mut most = budget.try_reserve(6 * 1024).expect("6 KiB fit");
        most.shrink_to(2 * 1024);
        assert_eq!(budget.available_kib(), 4, "4 KiB given back");
        most.shrink_to(4 * 1024);
        assert_eq!(budget.available_kib(), 4, "shrinking never grows");
        drop(most);
        assert_eq!(budget.available_kib(), 6);
    }
}
