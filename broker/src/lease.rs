//! The broker's lease from the coordinator: it serves, and acknowledges, only until `lease`
//! after it sent the last heartbeat the coordinator answered. The coordinator hands a
//! silent broker's streamlets over only once that lease has surely run out, so a broker
//! cut off (or paused) must stop answering producers by then on its own.
//!
//! **Without a leader the lease runs longer.** When the coordinator that last renewed it
//! answers that it no longer leads, or nothing listens at its address any more (its process is
//! gone), while the short lease still holds (so it cannot have been declared crashed and
//! handed over meanwhile), no leader renews anything and none hands anything over: the broker
//! then serves on until `leaderless` after that last renewal (a new leader's failover, a loss of etcd quorum
//! cost producers nothing). What makes that safe is on the coordinator's side: every leader
//! waits `leaderless` from the start of its term (and from the end of any lapse of its own
//! lease, when its answers said "not leading") before it hands over a broker it has not heard
//! from since. A broker that merely cannot reach the leader (a partition, a paused leader) has
//! no such evidence and keeps the short lease.
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
    /// How long after the last renewal the lease may run once its leader is known to lead no
    /// more (the coordinator's `leaderless_lease_ms`, told at registration too).
    leaderless_nanos: AtomicU64,
    /// The lease's end on the boot-time clock (0: no lease).
    until: AtomicU64,
    /// When the last renewal's heartbeat was sent (0: never).
    renewed_at: AtomicU64,
    /// The leaderless extension's end (0: none since the last renewal).
    extended_until: AtomicU64,
}

impl Lease {
    pub fn new(duration: Duration) -> Self {
        Self {
            duration_nanos: AtomicU64::new(nanos(duration)),
            leaderless_nanos: AtomicU64::new(nanos(duration)),
            until: AtomicU64::new(0),
            renewed_at: AtomicU64::new(0),
            extended_until: AtomicU64::new(0),
        }
    }

    /// From now on each renewal runs for `duration` (the coordinator's lease length), and a
    /// leaderless extension to `leaderless` after the last renewal (never shorter than a
    /// lease).
    pub fn set_durations(&self, duration: Duration, leaderless: Duration) {
        self.duration_nanos
            .store(nanos(duration), Ordering::Release);
        self.leaderless_nanos
            .store(nanos(leaderless.max(duration)), Ordering::Release);
    }

    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.duration_nanos.load(Ordering::Acquire))
    }

    /// The coordinator answered a heartbeat (or registration) sent at `sent_at`: the lease
    /// runs until `duration` after it (never shortened by a late answer to an older one). A
    /// leader renews it, so any leaderless extension is over.
    pub fn renew(&self, sent_at: BootInstant) {
        self.until
            .fetch_max(sent_at.plus(self.duration()).nanos(), Ordering::AcqRel);
        self.renewed_at.fetch_max(sent_at.nanos(), Ordering::AcqRel);
        self.extended_until.store(0, Ordering::Release);
    }

    /// The coordinator that renewed the lease last leads no more (it said so, or nothing
    /// listens at its address): the lease runs until `leaderless` after that renewal. Returns
    /// how long it has left then (`None`: never renewed, nothing to extend).
    pub fn extend_leaderless(&self) -> Option<Duration> {
        let renewed_at = self.renewed_at.load(Ordering::Acquire);
        // Only while the short lease holds: a broker that went longer without a renewal may
        // have been declared crashed and its streamlets handed over after the short lease
        // (its leader leading all along), and "not leading" heard later says nothing of that.
        if renewed_at == 0 || BootInstant::now().nanos() >= self.until.load(Ordering::Acquire) {
            return None;
        }
        let leaderless = Duration::from_nanos(self.leaderless_nanos.load(Ordering::Acquire));
        let end = BootInstant::from_nanos(renewed_at).plus(leaderless).nanos();
        self.extended_until.fetch_max(end, Ordering::AcqRel);
        Some(Duration::from_nanos(
            end.saturating_sub(BootInstant::now().nanos()),
        ))
    }

    /// When the last renewal's heartbeat was sent, in boot-clock nanoseconds (0: never): what
    /// tells whether the lease was renewed between two moments.
    pub fn last_renewal(&self) -> u64 {
        self.renewed_at.load(Ordering::Acquire)
    }

    /// Whether a leaderless extension was taken since the last renewal (told in heartbeats,
    /// so a leader knows when it may count on the short lease again).
    pub fn has_extension(&self) -> bool {
        self.extended_until.load(Ordering::Acquire) != 0
    }

    /// Whether the short lease holds now, extension aside: what an unreplicated stream is
    /// served under (no backup fences its writes if its owner was handed over meanwhile; a
    /// refused connection, which extends the lease, is evidence but not proof).
    pub fn is_short_valid(&self) -> bool {
        BootInstant::now().nanos() < self.until.load(Ordering::Acquire)
    }

    /// Whether this broker may serve, and acknowledge, now.
    pub fn is_valid(&self) -> bool {
        let now = BootInstant::now().nanos();
        now < self.until.load(Ordering::Acquire)
            || now < self.extended_until.load(Ordering::Acquire)
    }

    /// This incarnation is no longer a member: nothing more is served under it.
    pub fn revoke(&self) {
        self.until.store(0, Ordering::Release);
        self.extended_until.store(0, Ordering::Release);
        self.renewed_at.store(0, Ordering::Release);
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

    #[test]
    fn a_leaderless_extension_runs_from_the_last_renewal_and_ends_at_the_next() {
        let lease = Lease::new(Duration::from_millis(30));
        lease.set_durations(Duration::from_millis(30), Duration::from_millis(300));
        assert_eq!(
            lease.extend_leaderless(),
            None,
            "nothing to extend before a renewal"
        );
        assert!(!lease.is_valid());
        lease.renew(BootInstant::now());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!lease.is_valid(), "the short lease ran out");
        assert_eq!(
            lease.extend_leaderless(),
            None,
            "word that the leader is gone, once the short lease ran out, extends nothing"
        );
        assert!(!lease.is_valid());
        lease.renew(BootInstant::now());
        let left = lease.extend_leaderless().unwrap();
        assert!(left > Duration::from_millis(250) && left <= Duration::from_millis(300));
        std::thread::sleep(Duration::from_millis(40));
        assert!(
            lease.is_valid() && !lease.is_short_valid(),
            "valid through the extension alone"
        );
        // A leader renews: the short lease again, the extension over.
        lease.renew(BootInstant::now());
        assert!(!lease.has_extension());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!lease.is_valid(), "a renewal ended the extension");
        // An extension counts from the last renewal, not from the evidence.
        lease.renew(BootInstant::now());
        std::thread::sleep(Duration::from_millis(20));
        let left = lease.extend_leaderless().unwrap();
        assert!(left <= Duration::from_millis(280));
        lease.renew(BootInstant::now());
        lease.extend_leaderless();
        lease.revoke();
        assert!(!lease.is_valid(), "a revoked lease has no extension either");
        assert_eq!(lease.extend_leaderless(), None);
    }
}
