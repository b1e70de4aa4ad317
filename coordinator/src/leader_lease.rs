//! [`LeaderLease`]: until when this coordinator surely still leads. On etcd that is the send
//! time of its last renewal etcd acknowledged plus most of the lease's TTL (etcd counts the TTL
//! from when the renewal reached it, later than it was sent), on the boot-time clock: a
//! coordinator paused or suspended past it wakes knowing it may have been replaced.
//!
//! Nothing leaves this coordinator that renews a broker's lease (a heartbeat or registration
//! answer) unless its own lease is valid when the answer is made: so every broker lease a
//! deposed leader granted ends within `broker.lease_ms` of its own, and a new leader (elected
//! only after that) waits a broker lease from its start before handing anything over.
//!
//! While this coordinator's lease is lapsed it answers "not leading", and a broker that hears
//! that from the coordinator that renewed it last serves on for `broker.leaderless_lease_ms`
//! after that renewal (`broker::lease`): so [`LeaderLease::valid_since`], the start of the
//! present stretch of validity (the term's first grant, or the first renewal after a lapse),
//! is when a leader's wait for a broker it has not heard from since begins.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tailstream_net::clock::BootInstant;

/// The part of the TTL counted on: a margin for the rates of the two machines' clocks.
const TTL_COUNTED_PERCENT: u32 = 90;

#[derive(Debug)]
pub struct LeaderLease {
    /// Boot-clock nanoseconds; `u64::MAX` for a coordinator that leads for good (the file
    /// store: there is no other).
    valid_until_nanos: AtomicU64,
    /// Boot-clock nanoseconds: when the present stretch of validity began (0: never valid).
    valid_since_nanos: AtomicU64,
}

impl LeaderLease {
    /// Leads until renewed.
    pub fn new() -> Self {
        Self {
            valid_until_nanos: AtomicU64::new(0),
            valid_since_nanos: AtomicU64::new(0),
        }
    }

    /// The only coordinator there is (file store).
    pub fn forever() -> Self {
        Self {
            valid_until_nanos: AtomicU64::new(u64::MAX),
            valid_since_nanos: AtomicU64::new(BootInstant::now().nanos()),
        }
    }

    /// etcd acknowledged a grant or renewal sent at `sent_at`, for `ttl`.
    pub fn renewed(&self, sent_at: BootInstant, ttl: Duration) {
        let counted = ttl * TTL_COUNTED_PERCENT / 100;
        // One task renews; a renewal that finds the lease lapsed starts a new stretch.
        let now = BootInstant::now().nanos();
        if now >= self.valid_until_nanos.load(Ordering::Acquire) {
            // A later start never moves back (`begin_stretch` may run meanwhile).
            self.valid_since_nanos.fetch_max(now, Ordering::AcqRel);
        }
        self.valid_until_nanos
            .fetch_max(sent_at.plus(counted).nanos(), Ordering::AcqRel);
    }

    /// The campaign was won: leadership starts now, whatever the lease's age (it was renewed
    /// while campaigning, but nothing led under it until now).
    pub fn begin_stretch(&self) {
        self.valid_since_nanos
            .fetch_max(BootInstant::now().nanos(), Ordering::AcqRel);
    }

    /// Leadership is over (lost or resigned).
    pub fn end(&self) {
        self.valid_until_nanos.store(0, Ordering::Release);
    }

    pub fn is_valid(&self) -> bool {
        BootInstant::now().nanos() < self.valid_until_nanos.load(Ordering::Acquire)
    }

    /// Since when this coordinator has led without a lapse (`None`: it does not lead now).
    pub fn valid_since(&self) -> Option<BootInstant> {
        if !self.is_valid() {
            return None;
        }
        Some(BootInstant::from_nanos(
            self.valid_since_nanos.load(Ordering::Acquire),
        ))
    }
}

impl Default for LeaderLease {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_for_most_of_the_ttl_after_the_send_then_not() {
        let lease = LeaderLease::new();
        assert!(!lease.is_valid());
        lease.renewed(BootInstant::now(), Duration::from_millis(100));
        assert!(lease.is_valid());
        // A late acknowledgement of an older renewal does not shorten it.
        lease.renewed(BootInstant::from_nanos(1), Duration::from_millis(100));
        assert!(lease.is_valid());
        std::thread::sleep(Duration::from_millis(95));
        assert!(!lease.is_valid(), "90 % of the TTL is counted on");
        lease.renewed(BootInstant::now(), Duration::from_secs(1));
        lease.end();
        assert!(!lease.is_valid());
        assert!(LeaderLease::forever().is_valid());
    }

    #[test]
    fn a_renewal_after_a_lapse_starts_a_new_stretch() {
        let lease = LeaderLease::new();
        assert_eq!(lease.valid_since(), None);
        lease.renewed(BootInstant::now(), Duration::from_millis(100));
        let first = lease.valid_since().unwrap();
        lease.renewed(BootInstant::now(), Duration::from_millis(100));
        assert_eq!(
            lease.valid_since(),
            Some(first),
            "renewed in time: the same stretch"
        );
        std::thread::sleep(Duration::from_millis(95));
        assert_eq!(lease.valid_since(), None, "lapsed");
        lease.renewed(BootInstant::now(), Duration::from_millis(100));
        assert!(lease.valid_since().unwrap().nanos() > first.nanos());
    }
}
