//! One streamlet's outgoing batches: sequence numbers, the in-flight window, and retries.
//! A pure state machine; the sender task drives it and does the I/O.
//!
//! Invariant: the batches the broker has appended are exactly the acknowledged ones plus,
//! possibly, a prefix of those whose answer was lost. The broker refuses a batch whose
//! predecessor is missing, so after any failure the lane waits for every in-flight answer
//! ("drains"), puts the failed batches back at the front of the queue in sequence order, and
//! resends them after a backoff: a batch that did land the first time is answered as a
//! duplicate with its original location, so nothing is appended twice and order is kept.
//! A batch refused for good (not retryable) is failed alone, and the batches behind it are
//! renumbered to close the gap it leaves.

use super::accumulator::SealedBatch;
use super::ack::{BatchAck, BatchCell, RecordLocation};
use crate::error::ClientError;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_net::RpcError;
use tailstream_wire::batch::restamp_sequence;
use tailstream_wire::messages::ProduceResponse;
use tailstream_wire::{BatchSequence, ProducerId, SEQUENCE_MODULUS, Status, StreamletId};
use tokio::sync::OwnedSemaphorePermit;

/// A numbered, encoded batch.
#[derive(Debug)]
pub(crate) struct ReadyBatch {
    /// Its first record's sequence (sequences count records, as Kafka's do).
    pub sequence: BatchSequence,
    pub records: u32,
    pub bytes: Bytes,
    pub cell: Arc<BatchCell>,
    pub opened_at: Instant,
    pub attempts: u32,
    pub last_error: Option<String>,
    _permit: Option<OwnedSemaphorePermit>,
}

/// What the lane asks of the sender after an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnswerEffect {
    None,
    /// The answer says our view of ownership is stale: refresh metadata before resending.
    RefreshMetadata,
}

#[derive(Debug)]
pub(crate) struct Lane {
    pub streamlet: StreamletId,
    producer: ProducerId,
    /// Sequence of the next batch that enters the lane (its first record's).
    next_sequence: BatchSequence,
    /// The sequence after the last acknowledged record: what the broker expects next, unless
    /// an answer was lost.
    acked_next: BatchSequence,
    queued: VecDeque<ReadyBatch>,
    in_flight: VecDeque<ReadyBatch>,
    /// Failed batches collected while draining.
    failed: Vec<ReadyBatch>,
    draining: bool,
    renumber: bool,
    paused_until: Option<Instant>,
    consecutive_failures: u32,
    /// Why the lane's most recent attempt failed: reported for batches that expire while
    /// queued behind it without ever being sent.
    last_failure: Option<String>,
}

impl Lane {
    pub fn new(streamlet: StreamletId, producer: ProducerId) -> Self {
        Self {
            streamlet,
            producer,
            next_sequence: BatchSequence(0),
            acked_next: BatchSequence(0),
            queued: VecDeque::new(),
            in_flight: VecDeque::new(),
            failed: Vec::new(),
            draining: false,
            renumber: false,
            paused_until: None,
            consecutive_failures: 0,
            last_failure: None,
        }
    }

    /// Numbers a sealed batch and queues it.
    pub fn push(&mut self, batch: SealedBatch) {
        let sequence = self.next_sequence;
        let records = batch.builder.record_count();
        self.next_sequence = sequence.advance(records);
        let bytes = batch.builder.finish(self.producer, 0, sequence);
        self.queued.push_back(ReadyBatch {
            sequence,
            records,
            bytes,
            cell: batch.cell,
            opened_at: batch.opened_at,
            attempts: 0,
            last_error: None,
            _permit: batch.permit,
        });
    }

    pub fn is_idle(&self) -> bool {
        self.queued.is_empty() && self.in_flight.is_empty() && self.failed.is_empty()
    }

    /// Every unsettled batch's cell (what a flush waits for).
    pub fn cells(&self) -> impl Iterator<Item = &Arc<BatchCell>> {
        self.queued
            .iter()
            .chain(&self.in_flight)
            .chain(&self.failed)
            .map(|b| &b.cell)
    }

    /// When a paused lane may send again.
    pub fn paused_until(&self) -> Option<Instant> {
        self.paused_until
    }

    /// Holds sending until `until` (a broker is unreachable).
    pub fn pause(&mut self, until: Instant) {
        self.paused_until = Some(self.paused_until.map_or(until, |t| t.max(until)));
    }

    /// Whether a request of this lane awaits its answer.
    pub fn has_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Whether a batch sealed now would be sent at once: nothing queued ahead of it, not
    /// draining, not paused. (The broker's request window is the sender's to check.)
    pub fn would_send_now(&self, now: Instant) -> bool {
        self.queued.is_empty() && !self.draining && self.paused_until.is_none_or(|t| now >= t)
    }

    /// The next batch to send, if the lane may send now.
    pub fn peek_sendable(&self, now: Instant) -> Option<(BatchSequence, &Bytes)> {
        if self.draining || self.paused_until.is_some_and(|t| now < t) {
            return None;
        }
        self.queued.front().map(|b| (b.sequence, &b.bytes))
    }

    /// The batch from `peek_sendable` was handed to the connection.
    pub fn mark_sent(&mut self) {
        self.paused_until = None;
        if let Some(mut batch) = self.queued.pop_front() {
            batch.attempts += 1;
            self.in_flight.push_back(batch);
        }
    }

    /// Handles the answer to the batch with `sequence`.
    pub fn on_answer(
        &mut self,
        sequence: BatchSequence,
        answer: Result<ProduceResponse, RpcError>,
        now: Instant,
        backoff: Backoff,
    ) -> AnswerEffect {
        let Some(index) = self.in_flight.iter().position(|b| b.sequence == sequence) else {
            return AnswerEffect::None;
        };
        let Some(batch) = self.in_flight.remove(index) else {
            return AnswerEffect::None;
        };
        let mut effect = AnswerEffect::None;
        match answer {
            Ok(response) => {
                let location = RecordLocation {
                    log: response.log,
                    offset: response.base_offset,
                    group: response.group,
                    segment: response.segment,
                    position: response.position,
                };
                self.settle(batch, Some(location), now);
            }
            Err(error) if error.status() == Some(Status::DuplicateSequence) => {
                self.settle(batch, None, now);
            }
            Err(error) if error.is_retryable() => {
                if error.is_transport()
                    || error.status().is_some_and(|s| s.needs_metadata_refresh())
                {
                    effect = AnswerEffect::RefreshMetadata;
                }
                let mut batch = batch;
                batch.last_error = Some(error.to_string());
                self.last_failure.get_or_insert_with(|| error.to_string());
                self.failed.push(batch);
                self.draining = true;
            }
            Err(error) => {
                let refused = match error.status() {
                    Some(status) => ClientError::Refused {
                        status,
                        message: error.to_string(),
                    },
                    None => ClientError::Rpc(error),
                };
                batch.cell.resolve(Err(refused));
                self.draining = true;
                self.renumber = true;
            }
        }
        if self.draining && self.in_flight.is_empty() {
            self.finish_drain(now, backoff);
        }
        effect
    }

    fn settle(&mut self, batch: ReadyBatch, location: Option<RecordLocation>, now: Instant) {
        let after = batch.sequence.advance(batch.records);
        if self.acked_next.precedes(after) {
            self.acked_next = after;
        }
        self.consecutive_failures = 0;
        self.last_failure = None;
        batch.cell.resolve(Ok(BatchAck {
            streamlet: self.streamlet,
            location,
            acked_at: now,
        }));
    }

    /// Every answer of the failed round is in: requeue the failures in order, renumber if a
    /// batch was dropped, and pause before resending.
    fn finish_drain(&mut self, now: Instant, backoff: Backoff) {
        self.draining = false;
        let mut failed = std::mem::take(&mut self.failed);
        // In sequence order (wrapping included): by distance from what was acknowledged.
        let acked = self.acked_next;
        failed.sort_by_key(|b| b.sequence.0.wrapping_sub(acked.0) & (SEQUENCE_MODULUS - 1));
        // The batches behind the first failure mostly failed *because* of it (out of order):
        // the first failure's reason is the one worth reporting for all of them.
        let root_cause = failed.first().and_then(|b| b.last_error.clone());
        for batch in &mut failed {
            batch.last_error.clone_from(&root_cause);
        }
        if root_cause.is_some() {
            self.last_failure = root_cause;
        }
        let had_retries = !failed.is_empty();
        for batch in failed.into_iter().rev() {
            self.queued.push_front(batch);
        }
        if self.renumber {
            self.renumber = false;
            self.renumber_queued();
        }
        if had_retries {
            self.consecutive_failures += 1;
            self.paused_until = Some(now + backoff.delay(self.consecutive_failures));
        }
    }

    /// Gives the queued batches consecutive sequences from `acked_next`, closing any gap.
    fn renumber_queued(&mut self) {
        let mut sequence = self.acked_next;
        for batch in &mut self.queued {
            if batch.sequence != sequence {
                let mut bytes = BytesMut::from(&batch.bytes[..]);
                // Sealed batches always have a full header; a failure here would be a bug in
                // the builder, and the broker would refuse the batch anyway.
                if restamp_sequence(&mut bytes, sequence).is_ok() {
                    batch.bytes = bytes.freeze();
                    batch.sequence = sequence;
                }
            }
            sequence = sequence.advance(batch.records);
        }
        self.next_sequence = sequence;
    }

    /// Fails queued batches older than `timeout` (only when nothing is in flight, so that the
    /// renumbering that follows cannot collide with an answer still on its way).
    pub fn expire(&mut self, now: Instant, timeout: Duration) -> usize {
        if !self.in_flight.is_empty() || self.draining {
            return 0;
        }
        let before = self.queued.len();
        let timeout_ms = timeout.as_millis() as u64;
        let lane_failure = self.last_failure.clone();
        self.queued.retain(|batch| {
            let alive = now.saturating_duration_since(batch.opened_at) < timeout;
            if !alive {
                let last_error = batch
                    .last_error
                    .clone()
                    .or_else(|| lane_failure.clone())
                    .unwrap_or_else(|| "never sent: no broker connection".into());
                batch.cell.resolve(Err(ClientError::DeliveryTimeout {
                    timeout_ms,
                    last_error,
                }));
            }
            alive
        });
        let expired = before - self.queued.len();
        if expired > 0 {
            self.renumber_queued();
        }
        expired
    }
}

/// Exponential backoff between retry rounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.saturating_sub(1).min(10);
        (self.initial * factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::batch::validate_batch;
    use tailstream_wire::records::RecordBatchBuilder;
    use tailstream_wire::{GroupId, LogId, RecordOffset, SegmentId, SegmentPosition};

    const BACKOFF: Backoff = Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(100),
    };

    fn sealed(value: &[u8]) -> SealedBatch {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(value), &[]);
        SealedBatch {
            streamlet: StreamletId(0),
            builder,
            cell: BatchCell::new(),
            opened_at: Instant::now(),
            permit: None,
        }
    }

    fn ok(offset: u64) -> Result<ProduceResponse, RpcError> {
        Ok(ProduceResponse {
            log: LogId(0),
            group: GroupId(0),
            segment: SegmentId(0),
            position: SegmentPosition(0),
            base_offset: RecordOffset(offset),
            duplicate: false,
        })
    }

    fn status(status: Status) -> Result<ProduceResponse, RpcError> {
        Err(RpcError::Status {
            status,
            message: String::new(),
        })
    }

    /// Sends everything sendable; returns the sequences sent.
    fn send_all(lane: &mut Lane, now: Instant) -> Vec<u32> {
        let mut sent = Vec::new();
        while let Some((seq, bytes)) = lane.peek_sendable(now) {
            assert_eq!(
                validate_batch(bytes)
                    .unwrap()
                    .producer
                    .unwrap()
                    .base_sequence,
                seq
            );
            sent.push(seq.0);
            lane.mark_sent();
        }
        sent
    }

    #[test]
    fn a_failure_drains_the_window_then_resends_the_failed_batches_in_order() {
        let mut lane = Lane::new(StreamletId(0), ProducerId(1));
        for v in [b"a", b"b", b"c"] {
            lane.push(sealed(v));
        }
        let now = Instant::now();
        assert_eq!(send_all(&mut lane, now), vec![0, 1, 2]);
        // 0 hits backpressure; 1 and 2 arrive out of order behind it.
        lane.on_answer(BatchSequence(0), status(Status::Backpressure), now, BACKOFF);
        lane.push(sealed(b"d"));
        assert!(
            lane.peek_sendable(now).is_none(),
            "draining: nothing new goes out"
        );
        lane.on_answer(
            BatchSequence(1),
            status(Status::OutOfOrderSequence),
            now,
            BACKOFF,
        );
        lane.on_answer(
            BatchSequence(2),
            status(Status::OutOfOrderSequence),
            now,
            BACKOFF,
        );
        assert!(lane.peek_sendable(now).is_none(), "paused for the backoff");
        let later = now + Duration::from_millis(10);
        assert_eq!(send_all(&mut lane, later), vec![0, 1, 2, 3]);
        for seq in 0..4 {
            lane.on_answer(BatchSequence(seq), ok(u64::from(seq)), later, BACKOFF);
        }
        assert!(lane.is_idle());
    }

    #[test]
    fn a_permanently_refused_batch_fails_alone_and_the_rest_are_renumbered() {
        let mut lane = Lane::new(StreamletId(0), ProducerId(1));
        let cells: Vec<_> = (0..3)
            .map(|_| {
                let batch = sealed(b"x");
                let cell = batch.cell.clone();
                lane.push(batch);
                cell
            })
            .collect();
        let now = Instant::now();
        send_all(&mut lane, now);
        lane.on_answer(BatchSequence(0), ok(0), now, BACKOFF);
        lane.on_answer(BatchSequence(1), status(Status::InvalidBatch), now, BACKOFF);
        lane.on_answer(
            BatchSequence(2),
            status(Status::OutOfOrderSequence),
            now,
            BACKOFF,
        );
        assert!(cells[0].is_resolved() && cells[1].is_resolved() && !cells[2].is_resolved());
        // The third batch takes the refused one's sequence.
        assert_eq!(send_all(&mut lane, now + Duration::from_secs(1)), vec![1]);
        lane.push(sealed(b"y"));
        assert_eq!(send_all(&mut lane, now + Duration::from_secs(1)), vec![2]);
    }

    #[test]
    fn queued_batches_past_the_delivery_timeout_fail() {
        let mut lane = Lane::new(StreamletId(0), ProducerId(1));
        lane.push(sealed(b"old"));
        let now = Instant::now();
        assert_eq!(lane.expire(now, Duration::from_secs(1)), 0);
        assert_eq!(
            lane.expire(now + Duration::from_secs(2), Duration::from_secs(1)),
            1
        );
        assert!(lane.is_idle());
    }
}
