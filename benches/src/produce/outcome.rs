//! What one producer task measured, settled record by record. Settling is on the load
//! generator's hot path (millions of records a second), so it touches nothing shared per
//! record: acks reach the shared counters in bulk, and equal latencies in a row (records of one
//! batch sent within one clock reading) enter the histogram at once.

use super::Progress;
use crate::latency;
use hdrhistogram::Histogram;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tailstream_client::RecordAck;

/// Acks a producer task settles before adding them to the shared counters.
const PUBLISH_EVERY_ACKS: u64 = 256;

#[derive(Debug)]
pub(super) struct ProducerOutcome {
    pub failed: u64,
    pub latency_us: Histogram<u64>,
    /// Open loop: how late the sending thread sent records after their scheduled time.
    pub send_lag_us: Histogram<u64>,
    /// When the last measured record was acknowledged.
    pub last_measured_ack: Option<Instant>,
    unpublished_acked: u64,
    unpublished_measured: u64,
    /// The current run of equal latencies: (microseconds, records).
    run: (u64, u64),
}

impl ProducerOutcome {
    pub fn new() -> Self {
        Self {
            failed: 0,
            latency_us: latency::histogram(),
            send_lag_us: latency::histogram(),
            last_measured_ack: None,
            unpublished_acked: 0,
            unpublished_measured: 0,
            run: (0, 0),
        }
    }

    pub fn settle<E>(
        &mut self,
        progress: &Progress,
        sent: Instant,
        measured: bool,
        result: Result<RecordAck, E>,
    ) {
        match result {
            Ok(ack) => {
                self.unpublished_acked += 1;
                if measured {
                    self.unpublished_measured += 1;
                    let micros = ack.acked_at.saturating_duration_since(sent).as_micros() as u64;
                    if self.run.1 > 0 && self.run.0 == micros {
                        self.run.1 += 1;
                    } else {
                        self.end_run();
                        self.run = (micros, 1);
                    }
                    self.last_measured_ack = self.last_measured_ack.max(Some(ack.acked_at));
                }
                if self.unpublished_acked >= PUBLISH_EVERY_ACKS {
                    self.publish(progress);
                }
            }
            Err(_) => self.failed += 1,
        }
    }

    /// Everything settled so far is in the shared counters and the histogram.
    pub fn finish(&mut self, progress: &Progress) {
        self.end_run();
        self.publish(progress);
    }

    fn end_run(&mut self) {
        let (micros, records) = std::mem::take(&mut self.run);
        if records > 0 {
            latency::record_n(&mut self.latency_us, micros, records);
        }
    }

    fn publish(&mut self, progress: &Progress) {
        let acked = std::mem::take(&mut self.unpublished_acked);
        let measured = std::mem::take(&mut self.unpublished_measured);
        progress.acked.fetch_add(acked, Ordering::Relaxed);
        progress.measured.fetch_add(measured, Ordering::Relaxed);
    }

    /// Adds a finished outcome of another producer.
    pub fn merge(&mut self, other: ProducerOutcome) -> Result<(), String> {
        self.failed += other.failed;
        self.latency_us
            .add(&other.latency_us)
            .map_err(|e| e.to_string())?;
        self.send_lag_us
            .add(&other.send_lag_us)
            .map_err(|e| e.to_string())?;
        self.last_measured_ack = self.last_measured_ack.max(other.last_measured_ack);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tailstream_wire::StreamletId;

    fn ack(at: Instant) -> Result<RecordAck, ()> {
        Ok(RecordAck {
            streamlet: StreamletId(0),
            location: None,
            acked_at: at,
        })
    }

    #[test]
    fn runs_of_equal_latencies_count_every_record_and_counters_are_published() {
        let progress = Progress::default();
        let mut outcome = ProducerOutcome::new();
        let sent = Instant::now();
        for micros in [5u64, 5, 5, 9, 5] {
            outcome.settle(
                &progress,
                sent,
                true,
                ack(sent + Duration::from_micros(micros)),
            );
        }
        outcome.settle(&progress, sent, false, ack(sent));
        outcome.settle(&progress, sent, true, Err::<RecordAck, ()>(()));
        assert_eq!(
            progress.acked.load(Ordering::Relaxed),
            0,
            "not yet published"
        );
        outcome.finish(&progress);
        assert_eq!(progress.acked.load(Ordering::Relaxed), 6);
        assert_eq!(progress.measured.load(Ordering::Relaxed), 5);
        assert_eq!(outcome.failed, 1);
        assert_eq!(outcome.latency_us.len(), 5);
        assert_eq!(outcome.latency_us.count_at(5), 4);
    }
}
