//! What one producer task measured. Settling is on the load generator's hot path (millions of
//! records a second), so it touches nothing shared per record: acks reach the shared counters
//! in bulk, records of one batch sent within one clock reading wait as one [`Pending`] run
//! (they are acknowledged together, so their latency is one value), and equal latencies in a
//! row enter the histogram at once.

use super::Progress;
use crate::latency;
use hdrhistogram::Histogram;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tailstream_client::AckFuture;

/// Records sent with one send time, in one batch: settled together.
#[derive(Debug)]
struct Run {
    sent: Instant,
    measured: bool,
    /// The ack of the run's last record (every record of the run has the same outcome).
    ack: AckFuture,
    records: u64,
}

/// Records sent and not settled yet, oldest first, as runs of records that share a batch and
/// a send time.
#[derive(Debug, Default)]
pub(super) struct Pending {
    runs: VecDeque<Run>,
    records: u64,
}

impl Pending {
    pub fn push(&mut self, sent: Instant, measured: bool, ack: AckFuture) {
        self.records += 1;
        if let Some(last) = self.runs.back_mut()
            && last.sent == sent
            && last.measured == measured
            && last.ack.same_batch(&ack)
        {
            last.records += 1;
            return;
        }
        self.runs.push_back(Run {
            sent,
            measured,
            ack,
            records: 1,
        });
    }

    /// Records not settled yet.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Settles the oldest runs whose outcome is known, stopping at the first that is not.
    pub fn settle_known(&mut self, outcome: &mut ProducerOutcome, progress: &Progress) {
        while let Some(result) = self.runs.front().and_then(|run| run.ack.try_result()) {
            if let Some(run) = self.runs.pop_front() {
                self.records -= run.records;
                let result = result.map(|ack| ack.acked_at);
                outcome.settle(progress, run.sent, run.measured, result, run.records);
            }
        }
    }

    /// Waits for the oldest run and settles it.
    pub async fn settle_oldest(&mut self, outcome: &mut ProducerOutcome, progress: &Progress) {
        if let Some(run) = self.runs.pop_front() {
            self.records -= run.records;
            let result = run.ack.wait().await.map(|ack| ack.acked_at);
            outcome.settle(progress, run.sent, run.measured, result, run.records);
        }
    }

    /// Waits for every run and settles it.
    pub async fn settle_all(&mut self, outcome: &mut ProducerOutcome, progress: &Progress) {
        while !self.runs.is_empty() {
            self.settle_oldest(outcome, progress).await;
        }
    }
}

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

    /// Settles `records` records sent at `sent` that ended in `result`.
    pub fn settle<E>(
        &mut self,
        progress: &Progress,
        sent: Instant,
        measured: bool,
        result: Result<Instant, E>,
        records: u64,
    ) {
        match result {
            Ok(acked_at) => {
                self.unpublished_acked += records;
                if measured {
                    self.unpublished_measured += records;
                    let micros = acked_at.saturating_duration_since(sent).as_micros() as u64;
                    if self.run.1 > 0 && self.run.0 == micros {
                        self.run.1 += records;
                    } else {
                        self.end_run();
                        self.run = (micros, records);
                    }
                    self.last_measured_ack = self.last_measured_ack.max(Some(acked_at));
                }
                if self.unpublished_acked >= PUBLISH_EVERY_ACKS {
                    self.publish(progress);
                }
            }
            Err(_) => self.failed += records,
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

    fn ack(at: Instant) -> Result<Instant, ()> {
        Ok(at)
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
                1,
            );
        }
        outcome.settle(&progress, sent, false, ack(sent), 1);
        outcome.settle(&progress, sent, true, Err::<Instant, ()>(()), 1);
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
        outcome.settle(
            &progress,
            sent,
            true,
            ack(sent + Duration::from_micros(7)),
            1000,
        );
        outcome.settle(&progress, sent, true, Err::<Instant, ()>(()), 7);
        outcome.finish(&progress);
        assert_eq!(progress.measured.load(Ordering::Relaxed), 1005);
        assert_eq!(
            outcome.latency_us.count_at(7),
            1000,
            "a run counts every record"
        );
        assert_eq!(outcome.failed, 8);
    }
}
