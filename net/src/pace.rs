//! Paced work: bytes owed beyond a rate, with one second of the rate free as burst. The
//! accounting behind the Kafka listener's byte-rate quotas and both listeners' decompression
//! budgets; a pure function of explicit instants.

use std::time::Duration;
use tokio::time::Instant;

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
}
