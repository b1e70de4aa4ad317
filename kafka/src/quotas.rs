//! Byte-rate quotas per principal, as Kafka enforces them: each broker lets a principal
//! produce `kafka.quota_produce_bytes_per_second` and fetch `kafka.quota_fetch_bytes_per_second`
//! (one second of burst), and beyond that answers with `throttle_time_ms` and stops reading the
//! connection for that long once the answer is queued (KIP-219: the answer, then the mute; an
//! answer that takes time to build, an acks=all produce or a long poll, spends part of the
//! mute being built), so the client slows down and the broker holds nothing for it meanwhile.
//!
//! A principal is the authenticated user; without authentication, the client id the requests
//! carry (what Kafka quotas unauthenticated clients by). The accounting is a pure state
//! machine over explicit instants ([`Quotas::charge`]), bounded in the principals it keeps;
//! the debt itself is `tailstream_net::pace`'s, so no single throttle exceeds its `WAIT_MAX`
//! (10 s, well inside clients' request timeouts, so requests a client pipelined before it saw
//! the throttle do not time out while muted).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tailstream_net::pace::Debt;
use tokio::time::Instant;

/// Principals with a balance kept at once; past it, those whose debt has drained are dropped,
/// and if that frees nothing, new principals share one overflow balance (a flood of invented
/// client ids costs no memory, and frees nobody of their debt).
const PRINCIPALS_MAX: usize = 10_000;
/// The longest principal name kept (client ids may be 32 KiB): longer ones are cut.
pub(crate) const PRINCIPAL_BYTES_MAX: usize = 255;
/// The key new principals share once the map is full.
const OVERFLOW: &str = "(overflow)";

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
    produce_bytes_per_second: u64,
    fetch_bytes_per_second: u64,
    balances: Mutex<HashMap<(QuotaKind, String), Debt>>,
}

impl Quotas {
    /// Rates in bytes per second; 0: not limited.
    pub fn new(produce_bytes_per_second: u64, fetch_bytes_per_second: u64) -> Self {
        Self {
            produce_bytes_per_second,
            fetch_bytes_per_second,
            balances: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `kind` is limited at all (a rate of 0 is not).
    pub fn limits(&self, kind: QuotaKind) -> bool {
        self.rate(kind) > 0
    }

    fn rate(&self, kind: QuotaKind) -> u64 {
        match kind {
            QuotaKind::Produce => self.produce_bytes_per_second,
            QuotaKind::Fetch => self.fetch_bytes_per_second,
            QuotaKind::Decompress => 0,
        }
    }

    /// Charges `principal` `bytes` of `kind` at `now`; the time it must now wait (zero while
    /// within its rate and one second's burst).
    pub fn charge(&self, kind: QuotaKind, principal: &str, bytes: u64, now: Instant) -> Duration {
        let rate = self.rate(kind);
        if rate == 0 {
            return Duration::ZERO;
        }
        let mut key = (kind, cut(principal).to_owned());
        let mut balances = self.balances.lock().unwrap_or_else(|p| p.into_inner());
        if balances.len() >= PRINCIPALS_MAX && !balances.contains_key(&key) {
            // Drop those whose debt has drained by now; if none has, share the overflow.
            balances.retain(|(kind, _), debt| !debt.drained(self.rate(*kind), now));
            if balances.len() >= PRINCIPALS_MAX {
                key.1 = OVERFLOW.to_owned();
            }
        }
        let debt = balances.entry(key).or_insert(Debt::new(now));
        debt.settle(rate, bytes, now)
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

/// `principal` cut to [`PRINCIPAL_BYTES_MAX`] bytes (at a character boundary).
fn cut(principal: &str) -> &str {
    let mut end = principal.len().min(PRINCIPAL_BYTES_MAX);
    while !principal.is_char_boundary(end) {
        end -= 1;
    }
    &principal[..end]
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
    fn a_throttle_is_bounded_and_so_are_the_principals_kept() {
        let quotas = Quotas::new(1, 1);
        let now = Instant::now();
        assert_eq!(
            quotas.charge(QuotaKind::Fetch, "greedy", u64::MAX / 2, now),
            tailstream_net::pace::WAIT_MAX
        );
        for i in 0..(PRINCIPALS_MAX + 10) {
            let long = format!("client-{i:05}-{}", "x".repeat(32 << 10));
            quotas.charge(QuotaKind::Produce, &long, 1, now);
        }
        let balances = quotas.balances.lock().unwrap();
        assert!(balances.len() <= PRINCIPALS_MAX + 1);
        assert!(
            balances
                .keys()
                .all(|(_, key)| key.len() <= PRINCIPAL_BYTES_MAX)
        );
        drop(balances);
        // Past the bound, newcomers share one balance: a debt is never forgotten.
        assert!(
            !quotas
                .charge(QuotaKind::Produce, "newcomer", 10, now)
                .is_zero()
        );
        assert_eq!(throttle_ms(Duration::from_millis(1500)), 1500);
    }
}
