//! Byte-rate quotas per principal, as Kafka enforces them: each broker lets a principal
//! produce `kafka.quota_produce_bytes_per_second` and fetch `kafka.quota_fetch_bytes_per_second`
//! (one second of burst), and beyond that answers with `throttle_time_ms` and stops reading the
//! connection for that long once the answer is queued (KIP-219: the answer, then the mute; an
//! answer that takes time to build, an acks=all produce or a long poll, spends part of the
//! mute being built), so the client slows down and the broker holds nothing for it meanwhile.
//!
//! A principal is the authenticated user; without authentication, the client id the requests
//! carry (what Kafka quotas unauthenticated clients by). The accounting is a pure state
//! machine over explicit instants ([`Quotas::charge`]), bounded in the principals it keeps:
//! `tailstream_net::pace`'s, shared with the native listener's quotas, so no single throttle
//! exceeds its `WAIT_MAX` (10 s, well inside clients' request timeouts, so requests a client
//! pipelined before it saw the throttle do not time out while muted).

use std::time::Duration;
use tailstream_net::pace::{Debt, PrincipalDebts};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum QuotaKind {
    Produce,
    Fetch,
    /// Decompression, paid per connection (`ConnectionBudget`, a produce waiting before each
    /// batch while it owes), never through `Quotas`.
    Decompress,
}

impl QuotaKind {
    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
            QuotaKind::Decompress => "decompress",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Quotas {
    produce: PrincipalDebts,
    fetch: PrincipalDebts,
}

impl Quotas {
    /// Rates in bytes per second; 0: not limited.
    pub fn new(produce_bytes_per_second: u64, fetch_bytes_per_second: u64) -> Self {
        Self {
            produce: PrincipalDebts::new(produce_bytes_per_second),
            fetch: PrincipalDebts::new(fetch_bytes_per_second),
        }
    }

    fn debts(&self, kind: QuotaKind) -> Option<&PrincipalDebts> {
        match kind {
            QuotaKind::Produce => Some(&self.produce),
            QuotaKind::Fetch => Some(&self.fetch),
            QuotaKind::Decompress => None,
        }
    }

    /// Whether `kind` is limited at all (a rate of 0 is not).
    pub fn limits(&self, kind: QuotaKind) -> bool {
        self.debts(kind).is_some_and(PrincipalDebts::limits)
    }

    /// Charges `principal` `bytes` of `kind` at `now`; the time it must now wait (zero while
    /// within its rate and one second's burst).
    pub fn charge(&self, kind: QuotaKind, principal: &str, bytes: u64, now: Instant) -> Duration {
        self.debts(kind)
            .map_or(Duration::ZERO, |debts| debts.charge(principal, bytes, now))
    }
}

/// How one request of a connection is paced: the quota throttle its answer reports, and the
/// connection's decompression budget, which a produce pays batch by batch.
pub(crate) struct Pacing<'a> {
    pub throttle_ms: i32,
    pub decompression: &'a mut ConnectionBudget,
}

/// One connection's own rate of some work (decompression): the same accounting as a quota,
/// kept by the connection, so opening more connections or changing client ids buys no more.
#[derive(Debug)]
pub(crate) struct ConnectionBudget {
    bytes_per_second: u64,
    debt: Debt,
}

impl ConnectionBudget {
    /// A budget of `bytes_per_second` (0: not limited) from `now`.
    pub fn new(bytes_per_second: u64, now: Instant) -> Self {
        Self {
            bytes_per_second,
            debt: Debt::new(now),
        }
    }

    /// Charges `bytes` at `now`; the time the connection must now wait.
    pub fn charge(&mut self, bytes: u64, now: Instant) -> Duration {
        self.debt.settle(self.bytes_per_second, bytes, now)
    }
}

/// A throttle as Kafka's `throttle_time_ms` field carries it.
pub(crate) fn throttle_ms(throttle: Duration) -> i32 {
    i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_rate_and_burst_nothing_waits_beyond_it_the_excess_does() {
        let quotas = Quotas::new(1000, 0);
        let start = Instant::now();
        // One second of burst is free.
        assert_eq!(
            quotas.charge(QuotaKind::Produce, "alice", 1000, start),
            Duration::ZERO
        );
        // 500 bytes beyond it: half a second to drain.
        let wait = quotas.charge(QuotaKind::Produce, "alice", 500, start);
        assert_eq!(wait, Duration::from_millis(500));
        // Once that time passed, at the rate, it owes nothing beyond its burst again.
        let later = start + Duration::from_millis(500);
        assert_eq!(
            quotas.charge(QuotaKind::Produce, "alice", 0, later),
            Duration::ZERO
        );
        // Another principal, and the unlimited kind, are untouched.
        assert_eq!(
            quotas.charge(QuotaKind::Produce, "bob", 1000, start),
            Duration::ZERO
        );
        assert_eq!(
            quotas.charge(QuotaKind::Fetch, "alice", 1 << 40, start),
            Duration::ZERO
        );
    }

    #[test]
    fn a_connection_budget_throttles_past_its_burst_and_drains() {
        let start = Instant::now();
        let mut budget = ConnectionBudget::new(100, start);
        assert_eq!(
            budget.charge(100, start),
            Duration::ZERO,
            "one second's burst"
        );
        assert_eq!(budget.charge(50, start), Duration::from_millis(500));
        assert_eq!(
            budget.charge(0, start),
            Duration::from_millis(500),
            "owed, not paid"
        );
        let later = start + Duration::from_millis(1500);
        assert_eq!(budget.charge(0, later), Duration::ZERO, "drained");
        let mut open = ConnectionBudget::new(0, start);
        assert_eq!(
            open.charge(u64::MAX, start),
            Duration::ZERO,
            "0: not limited"
        );
        assert_eq!(
            ConnectionBudget::new(1, start).charge(1 << 40, start),
            tailstream_net::pace::WAIT_MAX,
            "bounded"
        );
    }

    #[test]
    fn a_throttle_is_bounded() {
        let quotas = Quotas::new(1, 1);
        let now = Instant::now();
        assert_eq!(
            quotas.charge(QuotaKind::Fetch, "greedy", u64::MAX / 2, now),
            tailstream_net::pace::WAIT_MAX
        );
        assert!(!quotas.limits(QuotaKind::Decompress));
        assert_eq!(throttle_ms(Duration::from_millis(1500)), 1500);
    }
}
