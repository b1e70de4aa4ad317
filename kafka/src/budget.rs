//! A token bucket: at most `per_second` on average and `burst` at once. Pure (time comes in as
//! an argument), so it is tested without sleeping; the caller holds it under its own lock.

use std::time::Instant;

#[derive(Debug)]
pub(crate) struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    /// Full: a burst can be spent at once.
    pub fn new(per_second: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            per_second: f64::from(per_second),
            burst,
            tokens: burst,
            refilled_at: now,
        }
    }

    /// Takes one token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        // A clock that went back (it cannot: `Instant` is monotonic) would refill nothing.
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.refilled_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, 3, start);
        assert!((0..3).all(|_| bucket.take(start)), "the burst at once");
        assert!(!bucket.take(start), "nothing past the burst");
        // 10 a second: one every 100 ms.
        assert!(!bucket.take(start + Duration::from_millis(50)));
        assert!(bucket.take(start + Duration::from_millis(100)));
        assert!(!bucket.take(start + Duration::from_millis(150)));
        // A long idle refills no more than the burst.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..10).filter(|_| bucket.take(later)).count(), 3);
    }

    #[test]
    fn over_a_long_run_the_average_holds() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, 5, start);
        // Asked every millisecond for 10 s: the burst plus 10 a second.
        let taken = (0..10_000)
            .filter(|ms| bucket.take(start + Duration::from_millis(*ms)))
            .count();
        assert!((104..=106).contains(&taken), "{taken}");
    }
}
