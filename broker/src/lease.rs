//! The broker's lease from the coordinator: it serves, and acknowledges, only until `lease`
//! after it sent the last heartbeat the coordinator answered. The coordinator hands a
//! silent broker's streamlets over only once that lease has surely run out, so a broker
//! cut off (or paused) must stop answering producers by then on its own.
//!
//! The lease is checked twice per produce: when the request is admitted, and again when its
//! acknowledgement is about to leave ([`crate::data_plane::CommitWaiter::wait`]); a batch
//! admitted before a pause is never acknowledged after the lease ran out meanwhile (the
//! records may be in no copy the new owner read).
//!
//! Time is the boot-time clock (Linux `CLOCK_BOOTTIME`), which keeps counting while the
//! machine is suspended: a broker whose host slept through its lease does not wake believing
//! it still holds it, as it would on the monotonic clock, which stops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A reading of the boot-time clock, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(u64);

impl BootInstant {
    pub fn now() -> BootInstant {
        BootInstant(boot_clock_nanos())
    }

    fn plus(self, duration: Duration) -> BootInstant {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        BootInstant(self.0.saturating_add(nanos))
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn boot_clock_nanos() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(now) => {
            let seconds = u64::try_from(now.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(now.tv_nsec()).unwrap_or(0);
            seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
        }
        // CLOCK_BOOTTIME exists on every kernel since 2.6.39; were it refused, no lease
        // could be judged: read as the end of time, so every lease counts as run out.
        Err(_) => u64::MAX,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boot_clock_nanos() -> u64 {
    // Elsewhere, the monotonic clock (which may stop in a suspend).
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Debug)]
pub struct Lease {
    duration: Duration,
    /// The lease's end on the boot-time clock (0: no lease).
    until: AtomicU64,
}

impl Lease {
    pub fn new(duration: Duration) -> Self {
        Self {
            duration,
            until: AtomicU64::new(0),
        }
    }

    /// The coordinator answered a heartbeat (or registration) sent at `sent_at`: the lease
    /// runs until `duration` after it (never shortened by a late answer to an older one).
    pub fn renew(&self, sent_at: BootInstant) {
        self.until
            .fetch_max(sent_at.plus(self.duration).0, Ordering::AcqRel);
    }

    /// Whether this broker may serve, and acknowledge, now.
    pub fn is_valid(&self) -> bool {
        BootInstant::now().0 < self.until.load(Ordering::Acquire)
    }

    /// This incarnation is no longer a member: nothing more is served under it.
    pub fn revoke(&self) {
        self.until.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_from_the_send_and_ends_or_is_revoked() {
        let lease = Lease::new(Duration::from_millis(50));
        assert!(!lease.is_valid(), "no lease before the first answer");
        lease.renew(BootInstant::now());
        assert!(lease.is_valid());
        // An answer to an older heartbeat does not shorten it.
        lease.renew(BootInstant(1));
        assert!(lease.is_valid());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!lease.is_valid());
        lease.renew(BootInstant::now());
        assert!(lease.is_valid());
        lease.revoke();
        assert!(!lease.is_valid());
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let before = BootInstant::now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(BootInstant::now() > before);
    }
}
