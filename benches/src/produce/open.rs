//! Open-loop load: records are sent on a fixed schedule (record k of a producer at
//! `start + k / rate`), whatever the broker does, and each record's latency is counted from
//! its *scheduled* send time to its acknowledgement. A stalled broker thus shows up as
//! latency of every record that should have been sent meanwhile (no coordinated omission).
//!
//! Each producer runs on its own OS thread, sleeping until the next record is due (at least
//! `SLEEP_MIN`) and then sending every due record in one go: tokio's timers tick in
//! milliseconds, far coarser than the gaps between records. How late the thread itself sends
//! is reported as send lag.

use super::{ProducerOutcome, Progress};
use crate::latency;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_client::{AckFuture, Producer};
use tokio::runtime::Handle;

/// One producer's schedule.
#[derive(Clone, Copy, Debug)]
pub(super) struct Schedule {
    pub start: Instant,
    pub records_per_sec: f64,
    /// Records scheduled before `start + warmup` are sent but not measured.
    pub warmup: Duration,
    pub duration: Duration,
    /// Nothing is sent after this, however far behind the schedule the sender is.
    pub deadline: Instant,
}

impl Schedule {
    /// Records in the whole run (warm-up included).
    fn records(&self) -> u64 {
        ((self.warmup + self.duration).as_secs_f64() * self.records_per_sec).ceil() as u64
    }

    /// The index of the first measured record.
    fn first_measured(&self) -> u64 {
        (self.warmup.as_secs_f64() * self.records_per_sec).ceil() as u64
    }

    fn send_time(&self, record: u64) -> Instant {
        self.start + Duration::from_secs_f64(record as f64 / self.records_per_sec)
    }

    /// How many records are due at `now` (scheduled at or before it).
    fn due_at(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
        ((elapsed * self.records_per_sec).floor() as u64 + 1).min(self.records())
    }
}

/// The shortest sleep between two bursts of sends: at most 20 000 wake-ups a second, and a
/// record sent at most this late (its latency counts it; `send_lag_*` shows it).
const SLEEP_MIN: Duration = Duration::from_micros(50);

/// Bytes at the start of a value that carry its stamp: the scheduled send time (8 bytes,
/// little-endian nanoseconds, see `latency::stamp`) and 1 if the record is measured.
pub(crate) const STAMP_BYTES: usize = 9;

/// Writes the stamp into as much of `value` as it has room for.
fn stamp_value(value: &mut [u8], scheduled: Instant, measured: bool) {
    let mut stamp = [0u8; STAMP_BYTES];
    stamp[..8].copy_from_slice(&latency::stamp(scheduled).to_le_bytes());
    stamp[8] = u8::from(measured);
    let n = STAMP_BYTES.min(value.len());
    value[..n].copy_from_slice(&stamp[..n]);
}

/// The scheduled send time of a measured record, from its value's stamp.
pub(crate) fn measured_send_time(value: &[u8]) -> Option<Instant> {
    let stamp = value.get(..STAMP_BYTES)?;
    let nanos = u64::from_le_bytes(stamp[..8].try_into().ok()?);
    (stamp[8] == 1).then(|| latency::unstamp(nanos))
}

/// Runs one producer on its schedule on a thread of its own; `runtime` drives the producer.
pub(super) fn spawn(
    producer: Producer,
    schedule: Schedule,
    record_bytes: usize,
    runtime: Handle,
    progress: Arc<Progress>,
) -> std::thread::JoinHandle<Result<ProducerOutcome, String>> {
    std::thread::spawn(move || {
        // Linux lets a sleeping thread wake up to 50 us late by default (timer slack), which
        // would count as latency of every record sent on that wake-up. Best effort: without
        // it the lag shows in `send_lag_*`.
        let _ = nix::sys::prctl::set_timerslack(1);
        let mut outcome = ProducerOutcome::new();
        // (scheduled time, measured, ack)
        let mut pending: VecDeque<(Instant, bool, AckFuture)> = VecDeque::new();
        let mut value = vec![b'x'; record_bytes];
        let (records, first_measured) = (schedule.records(), schedule.first_measured());
        let mut next = 0u64;
        while next < records {
            let now = Instant::now();
            if now >= schedule.deadline {
                break;
            }
            let due = schedule.due_at(now);
            // Every due record in one trip into the runtime.
            runtime.block_on(async {
                while next < due {
                    let scheduled = schedule.send_time(next);
                    let measured = next >= first_measured;
                    if measured {
                        // Read per record: a send that waited for buffer space delays the
                        // ones after it, and that lag must show.
                        let lag = Instant::now().saturating_duration_since(scheduled);
                        latency::record(&mut outcome.send_lag_us, lag.as_micros() as u64);
                    }
                    // The scheduled send time and whether it is measured, for an end-to-end
                    // consumer to read back.
                    stamp_value(&mut value, scheduled, measured);
                    let ack = producer
                        .send(None, &value)
                        .await
                        .map_err(|e| e.to_string())?;
                    pending.push_back((scheduled, measured, ack));
                    next += 1;
                }
                Ok::<_, String>(())
            })?;
            while let Some(result) = pending.front().and_then(|(_, _, ack)| ack.try_result()) {
                if let Some((scheduled, measured, _)) = pending.pop_front() {
                    let result = result.map(|ack| ack.acked_at);
                    outcome.settle(&progress, scheduled, measured, result, 1);
                }
            }
            if next < records {
                // Wake for the next record, but not sooner than `SLEEP_MIN` from now: each
                // wake-up costs the machine CPU (on a VM, ~10-40 us), and a generator waking
                // every few microseconds would take a core from the system it measures.
                let wake = schedule.send_time(next);
                let now = Instant::now();
                if wake > now {
                    std::thread::sleep((wake - now).max(SLEEP_MIN));
                }
            }
        }
        runtime.block_on(async {
            producer.flush().await.map_err(|e| e.to_string())?;
            for (scheduled, measured, ack) in pending {
                let result = ack.wait().await.map(|ack| ack.acked_at);
                outcome.settle(&progress, scheduled, measured, result, 1);
            }
            Ok::<_, String>(())
        })?;
        outcome.finish(&progress);
        Ok(outcome)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_spaces_records_evenly_and_measures_after_the_warmup() {
        let start = Instant::now();
        let schedule = Schedule {
            start,
            records_per_sec: 1000.0,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(2),
            deadline: start + Duration::from_secs(10),
        };
        assert_eq!(schedule.records(), 3000);
        assert_eq!(schedule.first_measured(), 1000);
        assert_eq!(schedule.send_time(500), start + Duration::from_millis(500));
        assert_eq!(schedule.due_at(start), 1, "record 0 is due at once");
        assert_eq!(schedule.due_at(start + Duration::from_micros(2500)), 3);
        assert_eq!(schedule.due_at(start + Duration::from_secs(60)), 3000);
    }

    #[test]
    fn stamps_carry_the_send_time_of_measured_records_only() {
        let at = Instant::now();
        let mut value = vec![0u8; 100];
        stamp_value(&mut value, at, true);
        assert_eq!(measured_send_time(&value), Some(at));
        stamp_value(&mut value, at, false);
        assert_eq!(measured_send_time(&value), None);
        let mut short = vec![0u8; 4];
        stamp_value(&mut short, at, true);
        assert_eq!(measured_send_time(&short), None);
    }
}
