//! Paced work: bytes owed beyond a rate, with one second of the rate free as burst. The
//! accounting behind both listeners' byte-rate quotas (`PrincipalDebts`, one balance per
//! principal) and decompression budgets (one `Debt` per connection); a pure function of
//! explicit instants.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Principals with a balance kept at once; past it, those whose debt has drained are dropped,
/// and if that frees nothing, new principals share one overflow balance (a flood of invented
/// client ids costs no memory, and frees nobody of their debt).
pub const PRINCIPALS_MAX: usize = 10_000;
/// The longest principal name kept (Kafka client ids may be 32 KiB): longer ones are cut.
pub const PRINCIPAL_BYTES_MAX: usize = 255;
/// The key new principals share once the table is full.
const OVERFLOW: &str = "(overflow)";

/// One rate, and what each principal owes beyond it.
#[derive(Debug)]
pub struct PrincipalDebts {
    bytes_per_second: u64,
    debts: Mutex<HashMap<String, Debt>>,
}

impl PrincipalDebts {
    /// A rate of `bytes_per_second` per principal (0: not limited).
    pub fn new(bytes_per_second: u64) -> Self {
        Self {
            bytes_per_second,
            debts: Mutex::new(HashMap::new()),
        }
    }

    /// Whether there is a limit at all.
    pub fn limits(&self) -> bool {
        self.bytes_per_second > 0
    }

    /// Charges `principal` `bytes` at `now`; the time it must now wait (zero within its rate
    /// and one second's burst, at most `WAIT_MAX`).
    pub fn charge(&self, principal: &str, bytes: u64, now: Instant) -> Duration {
        let rate = self.bytes_per_second;
        if rate == 0 {
            return Duration::ZERO;
        }
        let mut key = cut(principal);
        let mut debts = self.debts.lock().unwrap_or_else(|p| p.into_inner());
        if debts.len() >= PRINCIPALS_MAX && !debts.contains_key(key) {
            // Drop those whose debt has drained by now; if none has, share the overflow.
            debts.retain(|_, debt| !debt.drained(rate, now));
            if debts.len() >= PRINCIPALS_MAX {
                key = OVERFLOW;
            }
        }
        match debts.get_mut(key) {
            Some(debt) => debt.settle(rate, bytes, now),
            None => debts
                .entry(key.to_owned())
                .or_insert(Debt::new(now))
                .settle(rate, bytes, now),
        }
    }

    /// Principals with a balance now.
    pub fn kept(&self) -> usize {
        self.debts.lock().unwrap_or_else(|p| p.into_inner()).len()
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

/// The longest single wait: well inside clients' request timeouts (30 s by default).
pub const WAIT_MAX: Duration = Duration::from_secs(10);

/// Bytes owed beyond the rate, as of `at`.
#[derive(Clone, Copy, Debug)]
pub struct Debt {
    bytes: f64,
    at: Instant,
}

impl Debt {
    /// Nothing owed, from `now`.
    pub fn new(now: Instant) -> Debt {
        Debt {
            bytes: 0.0,
            at: now,
        }
    }

    /// Drains the debt at `bytes_per_second` up to `now` and adds `bytes`; the wait that
    /// then calls for (zero within the rate and one second's burst; at most `WAIT_MAX`; zero
    /// always at a rate of 0, which is no limit).
    pub fn settle(&mut self, bytes_per_second: u64, bytes: u64, now: Instant) -> Duration {
        if bytes_per_second == 0 {
            return Duration::ZERO;
        }
        let rate = bytes_per_second as f64;
        let drained = now.saturating_duration_since(self.at).as_secs_f64() * rate;
        self.bytes = (self.bytes - drained).max(0.0) + bytes as f64;
        self.at = self.at.max(now);
        let over = self.bytes - rate;
        if over <= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(over / rate)
                .unwrap_or(WAIT_MAX)
                .min(WAIT_MAX)
        }
    }

    /// Whether the debt has drained by `now` at `bytes_per_second` (it may be forgotten).
    pub fn drained(&self, bytes_per_second: u64, now: Instant) -> bool {
        self.bytes <= now.saturating_duration_since(self.at).as_secs_f64() * bytes_per_second as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_past_a_seconds_burst_drains_and_is_bounded() {
        let start = Instant::now();
        let mut debt = Debt::new(start);
        assert_eq!(
            debt.settle(100, 100, start),
            Duration::ZERO,
            "one second's burst"
        );
        assert_eq!(debt.settle(100, 50, start), Duration::from_millis(500));
        assert_eq!(
            debt.settle(100, 0, start),
            Duration::from_millis(500),
            "owed, not paid"
        );
        assert!(!debt.drained(100, start));
        let later = start + Duration::from_millis(1500);
        assert_eq!(debt.settle(100, 0, later), Duration::ZERO);
        assert!(debt.drained(100, later));
        assert_eq!(
            Debt::new(start).settle(0, u64::MAX, start),
            Duration::ZERO,
            "no limit"
        );
        assert_eq!(Debt::new(start).settle(1, 1 << 40, start), WAIT_MAX);
    }

    #[test]
    fn principals_pay_apart_and_the_table_is_bounded() {
        let debts = PrincipalDebts::new(1000);
        let now = Instant::now();
        assert_eq!(debts.charge("alice", 1000, now), Duration::ZERO);
        assert_eq!(debts.charge("alice", 500, now), Duration::from_millis(500));
        assert_eq!(debts.charge("bob", 1000, now), Duration::ZERO, "apart");
        assert_eq!(
            PrincipalDebts::new(0).charge("alice", u64::MAX, now),
            Duration::ZERO
        );
        let greedy = PrincipalDebts::new(1);
        assert_eq!(greedy.charge("greedy", u64::MAX / 2, now), WAIT_MAX);
        for i in 0..(PRINCIPALS_MAX + 10) {
            let long = format!("client-{i:05}-{}", "x".repeat(32 << 10));
            greedy.charge(&long, 1, now);
        }
        assert!(greedy.kept() <= PRINCIPALS_MAX + 1);
        assert!(
            greedy
                .debts
                .lock()
                .unwrap()
                .keys()
                .all(|key| key.len() <= PRINCIPAL_BYTES_MAX)
        );
        // Past the bound, newcomers share one balance: a debt is never forgotten.
        assert!(!greedy.charge("newcomer", 10, now).is_zero());
        assert_eq!(cut("é".repeat(200).as_str()).len(), 254);
    }
}
