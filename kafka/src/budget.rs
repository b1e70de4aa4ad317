//! A token bucket: at most `per_second` on average and `burst` at once, and one such bucket
//! per principal (`BucketsByPrincipal`). Pure (time comes in as an argument), so it is tested
//! without sleeping; the caller holds it under its own lock.

use std::collections::HashMap;
use std::time::Instant;
use tailstream_auth::Principal;

/// Principals with a bucket of their own at once; past it, those whose bucket refilled are
/// dropped, and if that frees none, newcomers share the anonymous principal's bucket.
const PRINCIPALS_MAX: usize = 10_000;

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

    /// Whether the bucket has refilled to its burst by `now` (it may be forgotten).
    pub fn is_full(&self, now: Instant) -> bool {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens + elapsed * self.per_second >= self.burst
    }
}

/// One bucket per principal, all at the same rate: every authenticated user spends their own,
/// and everyone without a user (authentication off) shares one.
#[derive(Debug)]
pub(crate) struct BucketsByPrincipal {
    per_second: u32,
    burst: u32,
    buckets: HashMap<Principal, TokenBucket>,
}

impl BucketsByPrincipal {
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            per_second,
            burst,
            buckets: HashMap::new(),
        }
    }

    /// Takes one of `principal`'s tokens if it has one.
    pub fn take(&mut self, principal: &Principal, now: Instant) -> bool {
        let (per_second, burst) = (self.per_second, self.burst);
        let mut key = principal;
        if self.buckets.len() >= PRINCIPALS_MAX && !self.buckets.contains_key(key) {
            self.buckets.retain(|_, bucket| !bucket.is_full(now));
            if self.buckets.len() >= PRINCIPALS_MAX {
                key = &Principal::Anonymous;
            }
        }
        if let Some(bucket) = self.buckets.get_mut(key) {
            return bucket.take(now);
        }
        self.buckets
            .entry(key.clone())
            .or_insert_with(|| TokenBucket::new(per_second, burst, now))
            .take(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_principal_spends_its_own_bucket() {
        let start = Instant::now();
        let mut buckets = BucketsByPrincipal::new(1, 2);
        let mallory = Principal::User("mallory".into());
        let alice = Principal::User("alice".into());
        assert_eq!((0..5).filter(|_| buckets.take(&mallory, start)).count(), 2);
        assert!(
            buckets.take(&alice, start),
            "alice is not held by mallory's spending"
        );
        assert!(buckets.take(&Principal::Anonymous, start));
        // Bounded: past the bound, newcomers share the anonymous bucket.
        for i in 0..PRINCIPALS_MAX {
            buckets.take(&Principal::User(format!("u{i}")), start);
        }
        assert!(buckets.buckets.len() <= PRINCIPALS_MAX);
        let later = start + Duration::from_secs(10);
        assert!(buckets.take(&mallory, later), "refilled");
    }

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
