//! Giving a burst's memory back to the system.
//!
//! glibc's malloc keeps what a process frees in its arenas for the next allocation, and
//! returns to the system only the free top of each heap. After a flood of connections (issue
//! 23: 1,100 per port from 253 addresses) a broker kept about 0.9 GB it no longer used, for
//! good. So every process checks, every `listeners.memory_trim_interval_ms`, how much its
//! allocator holds free, and past `listeners.memory_trim_free_bytes_min` asks it to give the
//! free pages back (`malloc_trim(0)`, which releases free pages inside the heaps too).
//!
//! The check (`mallinfo2`, glibc 2.33 or later) walks the allocator's free lists, and a trim
//! holds each arena's lock while it releases: both take milliseconds at most, once per
//! interval. A trim gives pages back but leaves their chunks counted free, so the threshold
//! is measured from what was free right after the last trim (lowered whenever less is free):
//! a fragmented heap is trimmed once, not at every check. Elsewhere than glibc (or with
//! another allocator, e.g. the `jemalloc` build, whose own background threads give pages
//! back) the check finds nothing and nothing is done.

use std::time::Duration;
use tokio::sync::watch;

/// Bytes given back, by processes' trims (an estimate: the drop in resident memory).
pub const TRIMMED_BYTES: &str = "tailstream_memory_trimmed_bytes_total";

/// When to trim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrimPolicy {
    /// How often to check; zero: never.
    pub interval: Duration,
    /// Free bytes held by the allocator past which a check trims.
    pub free_bytes_min: u64,
}

/// What the checks remember: the free bytes a trim can no longer give back (those left
/// counted free by the last trim, or fewer if they were reused since).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimState {
    settled_free_bytes: u64,
}

impl TrimState {
    /// Whether a check that found `free_bytes` held free should trim (`policy`'s threshold
    /// beyond what was left free after the last trim).
    pub fn should_trim(&mut self, policy: &TrimPolicy, free_bytes: u64) -> bool {
        self.settled_free_bytes = self.settled_free_bytes.min(free_bytes);
        free_bytes
            >= self
                .settled_free_bytes
                .saturating_add(policy.free_bytes_min)
    }

    /// A trim just ran, after which `free_bytes` were still counted free.
    pub fn trimmed(&mut self, free_bytes: u64) {
        self.settled_free_bytes = free_bytes;
    }
}

/// Bytes the allocator holds free (in its heaps, not given back): `None` where it cannot tell.
pub fn allocator_free_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's own bookkeeping (under its locks) and
        // returns a plain struct by value.
        #[allow(unsafe_code)]
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Asks the allocator to give its free pages back; whether it did.
pub fn trim_allocator() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes the allocator's own locks; it frees nothing in use.
        #[allow(unsafe_code)]
        let trimmed = unsafe { libc::malloc_trim(0) };
        trimmed == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// This process's resident memory, from `/proc/self/statm`; `None` where it cannot be read.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    #[allow(unsafe_code)]
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// Checks every `policy.interval` until `shutdown`, trimming when worth it. The work runs on
/// the blocking pool: a trim of a large heap must not hold a runtime worker.
pub async fn trim_loop(policy: TrimPolicy, mut shutdown: watch::Receiver<bool>) {
    if policy.interval.is_zero() {
        return;
    }
    let mut state = TrimState::default();
    let mut tick = tokio::time::interval(policy.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::server::shutdown_signalled(&mut shutdown) => return,
        }
        let checked = tokio::task::spawn_blocking(move || {
            let free = allocator_free_bytes()?;
            if !state.should_trim(&policy, free) {
                return Some((state, None));
            }
            let before = resident_bytes();
            trim_allocator();
            let after = resident_bytes();
            state.trimmed(allocator_free_bytes().unwrap_or(free));
            let released = before.zip(after).map(|(b, a)| b.saturating_sub(a));
            Some((state, Some((free, released.unwrap_or(0)))))
        })
        .await;
        let Ok(Some((checked_state, trimmed))) = checked else {
            continue;
        };
        state = checked_state;
        if let Some((free, released)) = trimmed {
            metrics::counter!(TRIMMED_BYTES).increment(released);
            tracing::debug!(free, released, "gave free memory back to the system");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_past_the_threshold_beyond_what_the_last_trim_left() {
        const MIB: u64 = 1 << 20;
        let policy = TrimPolicy {
            interval: Duration::from_secs(10),
            free_bytes_min: 64 * MIB,
        };
        let mut state = TrimState::default();
        assert!(!state.should_trim(&policy, 0));
        assert!(!state.should_trim(&policy, 64 * MIB - 1));
        assert!(state.should_trim(&policy, 64 * MIB));
        // The trim left 100 MiB counted free (fragments): no trim again for those alone.
        state.trimmed(100 * MIB);
        assert!(!state.should_trim(&policy, 100 * MIB));
        assert!(!state.should_trim(&policy, 150 * MIB));
        assert!(state.should_trim(&policy, 164 * MIB), "a new burst's worth");
        // Reused since: the threshold is measured from the lower mark.
        state.trimmed(100 * MIB);
        assert!(!state.should_trim(&policy, 20 * MIB));
        assert!(state.should_trim(&policy, 84 * MIB));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_memory_shows_as_free_to_the_check() {
        // 64 MiB in 4 KiB blocks (below the mmap threshold: they live in a heap), all but the
        // last freed, so the heap's top stays in use and only a trim inside it can release.
        let blocks: Vec<Vec<u8>> = (0..16_384).map(|i| vec![i as u8; 4096]).collect();
        let before_free = allocator_free_bytes().unwrap();
        let mut blocks = blocks;
        let last = blocks.pop();
        drop(blocks);
        let free = allocator_free_bytes().unwrap();
        assert!(
            free >= before_free + (32 << 20),
            "free grew from {before_free} to only {free}"
        );
        assert!(resident_bytes().unwrap() > 0);
        trim_allocator();
        drop(last);
    }
}
