//! The broker's segment memory budget.
//!
//! Every segment reserves its whole size from one budget when it is allocated and gives it back
//! when it is freed (its lease is dropped). A segment that cannot get a reservation is never
//! allocated: the append that needed it answers `Backpressure` instead, so memory use is
//! bounded however fast producers write.

use crate::metrics as m;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
struct Budget {
    used_bytes: AtomicU64,
    bytes_max: u64,
}

/// A shared budget of segment bytes.
#[derive(Clone, Debug)]
pub struct SegmentMemory {
    budget: Arc<Budget>,
}

impl SegmentMemory {
    pub fn new(bytes_max: u64) -> Self {
        Self {
            budget: Arc::new(Budget {
                used_bytes: AtomicU64::new(0),
                bytes_max,
            }),
        }
    }

    /// Reserves `bytes`, or returns `None` when that would exceed the budget.
    pub fn try_reserve(&self, bytes: u64) -> Option<MemoryLease> {
        let budget = &self.budget;
        budget
            .used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes)
                    .filter(|total| *total <= budget.bytes_max)
            })
            .ok()?;
        metrics::gauge!(m::SEGMENT_MEMORY).increment(bytes as f64);
        Some(MemoryLease {
            budget: self.budget.clone(),
            bytes,
        })
    }

    pub fn used_bytes(&self) -> u64 {
        self.budget.used_bytes.load(Ordering::Acquire)
    }

    pub fn bytes_max(&self) -> u64 {
        self.budget.bytes_max
    }
}

/// Bytes reserved from a `SegmentMemory`; returned when dropped.
#[derive(Debug)]
pub struct MemoryLease {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        self.budget
            .used_bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
        metrics::gauge!(m::SEGMENT_MEMORY).decrement(self.bytes as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_budget_and_come_back_when_dropped() {
        let memory = SegmentMemory::new(100);
        let a = memory.try_reserve(60).unwrap();
        assert!(memory.try_reserve(50).is_none());
        let b = memory.try_reserve(40).unwrap();
        assert_eq!(memory.used_bytes(), 100);
        drop(a);
        assert_eq!(memory.used_bytes(), 40);
        assert!(memory.try_reserve(60).is_some());
        drop(b);
    }
}
