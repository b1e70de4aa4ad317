//! Latency histograms and what a report prints of them.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The instant record stamps count from (this process's first use of them).
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `at` as nanoseconds since this process's stamp base: what a record carries in its value so
/// that its consumer (in this process) can tell when it was meant to be sent.
pub fn stamp(at: Instant) -> u64 {
    at.saturating_duration_since(base()).as_nanos() as u64
}

/// The instant a [`stamp`] stands for.
pub fn unstamp(nanos: u64) -> Instant {
    base() + Duration::from_nanos(nanos)
}

/// Highest latency a histogram holds: 10 minutes, in microseconds (longer is clamped).
const LATENCY_US_MAX: u64 = 600_000_000;

/// A latency histogram in microseconds, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    // Invariant: the bounds are constants hdrhistogram accepts (low >= 1, high >= 2 * low).
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("constant bounds are valid")
}

/// Records `micros` (at least 1, at most the histogram's bound).
pub fn record(histogram: &mut Histogram<u64>, micros: u64) {
    histogram.saturating_record(micros.clamp(1, LATENCY_US_MAX));
}

/// Records `count` samples of `micros` at once.
pub fn record_n(histogram: &mut Histogram<u64>, micros: u64, count: u64) {
    histogram.saturating_record_n(micros.clamp(1, LATENCY_US_MAX), count);
}

/// Percentiles of a latency histogram, in microseconds; `None` when nothing was measured.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct LatencySummary {
    pub samples: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl LatencySummary {
    pub fn of(histogram: &Histogram<u64>) -> Option<Self> {
        (!histogram.is_empty()).then(|| Self {
            samples: histogram.len(),
            p50_us: histogram.value_at_quantile(0.5),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_to_the_nanosecond() {
        let at = Instant::now() + Duration::from_nanos(12_345);
        assert_eq!(unstamp(stamp(at)), at);
    }

    #[test]
    fn an_empty_histogram_has_no_summary() {
        assert!(LatencySummary::of(&histogram()).is_none());
    }

    #[test]
    fn percentiles_come_from_the_samples() {
        let mut h = histogram();
        for micros in 1..=1000 {
            record(&mut h, micros);
        }
        record(&mut h, u64::MAX);
        let summary = LatencySummary::of(&h).expect("samples");
        assert_eq!(summary.samples, 1001);
        assert!((495..=505).contains(&summary.p50_us));
        assert!(summary.max_us >= LATENCY_US_MAX - LATENCY_US_MAX / 1000);
    }
}
