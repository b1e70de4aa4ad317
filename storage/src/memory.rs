//! The broker's segment memory budget, and the reuse of segment buffers.
//!
//! Every segment reserves its whole size from one budget when it is allocated and gives it back
//! when it is freed (its lease is dropped). A segment that cannot get a reservation is never
//! allocated: the append that needed it answers `Backpressure` instead, so memory use is
//! bounded however fast producers write.
//!
//! A freed segment's buffer is *retired*, not returned to the allocator: once the last reader
//! has dropped its chunks, the next segment of the same size reuses it. A fresh allocation
//! costs a page fault and the kernel zeroing a page for every 4 KiB written (a third of a
//! broker's CPU at full speed); a reused one costs nothing, and needs no zeroing, because a
//! segment writes every byte it exposes (`SegmentAppender::append_copy`). Retired buffers are
//! memory beyond the budget, so they are bounded: at most `RETIRED_FRACTION` of the budget,
//! oldest dropped first.

use crate::metrics as m;
use bytes::BytesMut;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Retired buffers hold at most 1/this of the budget.
const RETIRED_FRACTION: u64 = 16;

#[derive(Debug)]
struct Budget {
    used_bytes: AtomicU64,
    bytes_max: u64,
    retired: Mutex<Retired>,
    reused: AtomicU64,
}

/// Buffers of freed segments, oldest first: each an empty view at the end of its allocation
/// (which readers may still share) and the bytes it was leased for.
#[derive(Debug, Default)]
struct Retired {
    buffers: VecDeque<(BytesMut, u64)>,
    bytes: u64,
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
                retired: Mutex::new(Retired::default()),
                reused: AtomicU64::new(0),
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

    /// Segment buffers taken from retired segments so far.
    pub fn buffers_reused(&self) -> u64 {
        self.budget.reused.load(Ordering::Relaxed)
    }

    /// Bytes of retired buffers waiting for reuse (outside the budget).
    #[cfg(test)]
    fn retired_bytes(&self) -> u64 {
        self.budget.lock_retired().bytes
    }
}

impl Budget {
    fn lock_retired(&self) -> std::sync::MutexGuard<'_, Retired> {
        self.retired.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Bytes reserved from a `SegmentMemory`; returned when dropped.
#[derive(Debug)]
pub struct MemoryLease {
    budget: Arc<Budget>,
    bytes: u64,
}

impl MemoryLease {
    /// An empty buffer with room for exactly the lease's bytes: a retired one no reader
    /// shares any more, else a fresh allocation (untouched, so it costs no memory until
    /// written).
    pub fn take_buffer(&self) -> BytesMut {
        let capacity = usize::try_from(self.bytes).unwrap_or(usize::MAX);
        let mut retired = self.budget.lock_retired();
        let reusable = retired.buffers.iter_mut().position(|(buffer, bytes)| {
            *bytes == self.bytes && buffer.try_reclaim(capacity) && buffer.capacity() == capacity
        });
        match reusable.and_then(|index| retired.buffers.remove(index)) {
            Some((buffer, bytes)) => {
                retired.bytes -= bytes;
                self.budget.reused.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(m::SEGMENT_BUFFERS_REUSED).increment(1);
                buffer
            }
            None => BytesMut::with_capacity(capacity),
        }
    }

    /// Keeps the buffer of a freed segment for reuse. `tail` is the segment's unwritten
    /// tail: a view at the end of its allocation, which becomes reusable once every chunk
    /// cut from it is dropped.
    pub fn retire(&self, mut tail: BytesMut) {
        tail.clear();
        let bytes = self.bytes;
        let bytes_max = self.budget.bytes_max / RETIRED_FRACTION;
        if tail.capacity() == 0 || bytes > bytes_max {
            return;
        }
        let mut retired = self.budget.lock_retired();
        retired.buffers.push_back((tail, bytes));
        retired.bytes += bytes;
        while retired.bytes > bytes_max {
            // Dropping the view frees the memory once its readers are done.
            let Some((_, oldest)) = retired.buffers.pop_front() else {
                break;
            };
            retired.bytes -= oldest;
        }
    }
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
    use bytes::BufMut;

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

    #[test]
    fn a_retired_buffer_is_reused_only_once_its_readers_are_gone() {
        let memory = SegmentMemory::new(1 << 20);
        let lease = memory.try_reserve(4096).unwrap();
        let mut buffer = lease.take_buffer();
        assert_eq!((buffer.len(), buffer.capacity()), (0, 4096));
        let base = buffer.as_ptr();
        buffer.put_bytes(7, 100);
        let chunk = buffer.split_to(100).freeze();
        lease.retire(buffer);
        drop(lease);
        assert_eq!(memory.retired_bytes(), 4096);
        let next = memory.try_reserve(4096).unwrap();
        let fresh = next.take_buffer();
        assert_ne!(
            fresh.as_ptr(),
            base,
            "a reader still holds a chunk: not reused"
        );
        drop(chunk);
        let again = memory.try_reserve(4096).unwrap();
        let reused = again.take_buffer();
        assert_eq!(reused.as_ptr(), base, "the whole allocation again");
        assert_eq!((reused.len(), reused.capacity()), (0, 4096));
        assert_eq!(memory.retired_bytes(), 0);
    }

    #[test]
    fn retired_buffers_stay_within_their_share_of_the_budget() {
        let memory = SegmentMemory::new(16 * 4096);
        for _ in 0..3 {
            let lease = memory.try_reserve(4096).unwrap();
            lease.retire(lease.take_buffer());
        }
        assert_eq!(
            memory.retired_bytes(),
            4096,
            "1/16 of the budget: one buffer"
        );
        let lease = memory.try_reserve(1024).unwrap();
        assert_eq!(lease.take_buffer().capacity(), 1024, "another size: fresh");
    }
}
