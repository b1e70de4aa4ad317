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

pub use tailstream_net::clock::BootInstant;

#[derive(Debug)]
pub struct Lease {
    /// In nanoseconds: the coordinator tells it at registration (one setting, the
    /// coordinator's, which is also what recovery waits out).
    duration_nanos: AtomicU64,
    /// The lease's end on the boot-time clock (0: no lease).
    until: AtomicU64,
}

impl Lease {
    pub fn new(duration: Duration) -> Self {
        Self {
            duration_nanos: AtomicU64::new(nanos(duration)),
            until: AtomicU64::new(0),
        }
    }

    /// From now on each renewal runs for `duration` (the coordinator's lease length).
    pub fn set_duration(&self, duration: Duration) {
        self.duration_nanos
            .store(nanos(duration), Ordering::Release);
    }

    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.duration_nanos.load(Ordering::Acquire))
    }

    /// The coordinator answered a heartbeat (or registration) sent at `sent_at`: the lease
    /// runs until `duration` after it (never shortened by a late answer to an older one).
    pub fn renew(&self, sent_at: BootInstant) {
        self.until
            .fetch_max(sent_at.plus(self.duration()).nanos(), Ordering::AcqRel);
    }

    /// Whether this broker may serve, and acknowledge, now.
    pub fn is_valid(&self) -> bool {
        BootInstant::now().nanos() < self.until.load(Ordering::Acquire)
    }

    /// This incarnation is no longer a member: nothing more is served under it.
    pub fn revoke(&self) {
        self.until.store(0, Ordering::Release);
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
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
        lease.renew(BootInstant::from_nanos(1));
        assert!(lease.is_valid());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!lease.is_valid());
        lease.renew(BootInstant::now());
        assert!(lease.is_valid());
        lease.revoke();
        assert!(!lease.is_valid());
    }
}
