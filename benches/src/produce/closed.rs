//! Closed-loop load: each producer sends its records as fast as the producer's buffer takes
//! them. Measures saturated throughput; its latencies are mostly queueing in that buffer.

use super::outcome::Pending;
use super::{ProducerOutcome, Progress};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tailstream_client::Producer;

/// Unsettled records one producer task tracks before awaiting the oldest.
const PENDING_MAX: u64 = 1 << 20;
/// The send clock is read once per this many records (a clock read per 100-byte record costs
/// more than the rest of `send`); latencies are thus up to that many records' send time late.
const CLOCK_EVERY_RECORDS: u64 = 32;

/// Sends `records` records of `record_bytes` through `producer`, stopping at `deadline`.
pub(super) async fn produce(
    producer: Producer,
    records: u64,
    record_bytes: usize,
    deadline: Instant,
    progress: Arc<Progress>,
) -> Result<ProducerOutcome, String> {
    let mut outcome = ProducerOutcome::new();
    let mut pending = Pending::default();
    let mut value = vec![b'x'; record_bytes];
    let mut now = Instant::now();
    let mut measuring = false;
    for i in 0..records {
        if i % CLOCK_EVERY_RECORDS == 0 {
            now = Instant::now();
            measuring = progress.measuring.load(Ordering::Relaxed);
            if now >= deadline {
                break;
            }
            // Settled runs leave the queue once per clock reading: a run holds up to
            // CLOCK_EVERY_RECORDS records, so looking more often finds nothing new.
            pending.settle_known(&mut outcome, &progress);
            while pending.records() > PENDING_MAX {
                pending.settle_oldest(&mut outcome, &progress).await;
            }
        }
        // Vary the value so batches are not trivially identical.
        let stamp = i.to_le_bytes();
        let n = stamp.len().min(value.len());
        value[..n].copy_from_slice(&stamp[..n]);
        let ack = producer
            .send(None, &value)
            .await
            .map_err(|e| e.to_string())?;
        pending.push(now, measuring, ack);
    }
    producer.flush().await.map_err(|e| e.to_string())?;
    pending.settle_all(&mut outcome, &progress).await;
    outcome.finish(&progress);
    Ok(outcome)
}
