//! One streamlet's outgoing batches: sequence numbers, the in-flight window, and retries.
//! A pure state machine; the sender task drives it and does the I/O.
//!
//! Invariant: the batches the broker has appended are exactly the acknowledged ones plus,
//! possibly, some whose answer never came (`maybe_stored`). The broker refuses a batch whose
//! predecessor is missing, so after any failure the lane waits for every in-flight answer
//! ("drains"), puts the failed batches back at the front of the queue in sequence order, and
//! resends them after a backoff: a batch that did land the first time is answered as a
//! duplicate with its original location (the broker compares its bytes), so nothing is
//! appended twice and order is kept. A batch refused for good (not retryable) is failed
//! alone, and the batches behind it are renumbered to close the gap it leaves.
//!
//! Renumbering is not enough when the lane gives up on a batch that may be in the log (its
//! delivery timeout ran out while its fate was unknown), or when the broker says the slot of
//! a sequence holds another batch (`SequenceClash`): then the lane moves to the next
//! **producer epoch**, as Kafka's producers do. A new epoch starts the sequences at 0, and
//! the broker fences the old one. Batches that may already be stored under the old epoch are
//! failed (`MaybeStored`) rather than resent under the new one, where they would be stored
//! twice.

use super::accumulator::SealedBatch;
use super::ack::{BatchAck, BatchCell, RecordLocation};
use crate::error::ClientError;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_net::RpcError;
use tailstream_wire::batch::restamp_producer;
use tailstream_wire::messages::ProduceResponse;
use tailstream_wire::{
    BatchSequence, ProducerEpoch, ProducerId, SEQUENCE_MODULUS, Status, StreamletId,
};
use tokio::sync::OwnedSemaphorePermit;

/// Which attempt an answer belongs to: a batch's epoch and sequence.
pub(crate) type BatchKey = (ProducerEpoch, BatchSequence);

/// A numbered, encoded batch.
#[derive(Debug)]
pub(crate) struct ReadyBatch {
    /// The producer epoch it is stamped with.
    pub epoch: ProducerEpoch,
    /// Its first record's sequence (sequences count records, as Kafka's do).
    pub sequence: BatchSequence,
    pub records: u32,
    pub bytes: Bytes,
    pub cell: Arc<BatchCell>,
    pub opened_at: Instant,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// An attempt got no verdict (the connection failed, or the broker appended the batch and
    /// its replication timed out): the batch may be in the log at its epoch and sequence.
    pub maybe_stored: bool,
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
    /// The epoch new batches are stamped with (local to this lane, whose batches all go to
    /// one log: Kafka's idempotent producers bump theirs locally too).
    epoch: ProducerEpoch,
    /// The lane must move to a new epoch once its in-flight answers are in, and why.
    new_epoch_due: Option<&'static str>,
    /// Every epoch was used: the lane refuses new batches (a new producer gets a new id).
    epochs_exhausted: bool,
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
            epoch: ProducerEpoch(0),
            new_epoch_due: None,
            epochs_exhausted: false,
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
        if self.epochs_exhausted {
            batch.cell.resolve(Err(epochs_exhausted()));
            return;
        }
        let sequence = self.next_sequence;
        let records = batch.builder.record_count();
        self.next_sequence = sequence.advance(records);
        let bytes = batch.builder.finish(self.producer, self.epoch, sequence);
        self.queued.push_back(ReadyBatch {
            epoch: self.epoch,
            sequence,
            records,
            bytes,
            cell: batch.cell,
            opened_at: batch.opened_at,
            attempts: 0,
            last_error: None,
            maybe_stored: false,
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
    pub fn peek_sendable(&self, now: Instant) -> Option<(BatchKey, &Bytes)> {
        if self.draining || self.paused_until.is_some_and(|t| now < t) {
            return None;
        }
        self.queued
            .front()
            .map(|b| ((b.epoch, b.sequence), &b.bytes))
    }

    /// The batch from `peek_sendable` was handed to the connection.
    pub fn mark_sent(&mut self) {
        self.paused_until = None;
        if let Some(mut batch) = self.queued.pop_front() {
            batch.attempts += 1;
            self.in_flight.push_back(batch);
        }
    }

    /// Handles the answer to the batch sent as `key`.
    pub fn on_answer(
        &mut self,
        key: BatchKey,
        answer: Result<ProduceResponse, RpcError>,
        now: Instant,
        backoff: Backoff,
    ) -> AnswerEffect {
        let Some(index) = self
            .in_flight
            .iter()
            .position(|b| (b.epoch, b.sequence) == key)
        else {
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
                self.settle(batch, location, now);
            }
            Err(error) if error.status() == Some(Status::SequenceClash) => {
                // Another batch holds this sequence's place (or it is too old to compare):
                // ours is not stored there. Renumbering would land on the same places, so
                // the lane moves to a new epoch.
                batch.cell.resolve(Err(refused(error)));
                self.draining = true;
                self.new_epoch_due =
                    Some("the broker found another batch at this producer's sequence");
            }
            Err(error) if error.status() == Some(Status::UnknownProducer) => {
                // The log has no state for this producer (it was forgotten, or an earlier
                // batch was refused): this batch was not stored. A new epoch starts the
                // sequences at 0, which the log takes; batches that may be stored under the
                // old one are failed, not resent (`start_new_epoch`).
                let mut batch = batch;
                batch.last_error = Some(error.to_string());
                self.failed.push(batch);
                self.draining = true;
                self.new_epoch_due = Some("the broker keeps no state for this producer");
            }
            Err(error) if error.is_retryable() => {
                if error.is_transport()
                    || error.status().is_some_and(|s| s.needs_metadata_refresh())
                {
                    effect = AnswerEffect::RefreshMetadata;
                }
                let mut batch = batch;
                batch.maybe_stored |= outcome_unknown(&error);
                batch.last_error = Some(error.to_string());
                self.last_failure.get_or_insert_with(|| error.to_string());
                self.failed.push(batch);
                self.draining = true;
            }
            Err(error) => {
                batch.cell.resolve(Err(refused(error)));
                self.draining = true;
                self.renumber = true;
            }
        }
        if self.draining && self.in_flight.is_empty() {
            self.finish_drain(now, backoff);
        }
        effect
    }

    fn settle(&mut self, batch: ReadyBatch, location: RecordLocation, now: Instant) {
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
        if let Some(why) = self.new_epoch_due {
            self.renumber = false;
            self.start_new_epoch(why);
        } else if self.renumber {
            self.renumber = false;
            self.renumber_queued();
        }
        if had_retries {
            self.consecutive_failures += 1;
            self.paused_until = Some(now + backoff.delay(self.consecutive_failures));
        }
    }

    /// Gives the queued batches consecutive sequences from `acked_next` in the lane's epoch,
    /// closing any gap.
    fn renumber_queued(&mut self) {
        let mut sequence = self.acked_next;
        for batch in &mut self.queued {
            if (batch.epoch, batch.sequence) != (self.epoch, sequence) {
                let mut bytes = BytesMut::from(&batch.bytes[..]);
                // Sealed batches always have a full header; a failure here would be a bug in
                // the builder, and the broker would refuse the batch anyway.
                if restamp_producer(&mut bytes, self.epoch, sequence).is_ok() {
                    batch.bytes = bytes.freeze();
                    batch.epoch = self.epoch;
                    batch.sequence = sequence;
                }
            }
            sequence = sequence.advance(batch.records);
        }
        self.next_sequence = sequence;
    }

    /// Moves the lane to the next producer epoch (nothing is in flight): the batches that may
    /// already be stored under the old one are failed, since resending them under the new one
    /// could store them twice; the rest are renumbered from sequence 0.
    fn start_new_epoch(&mut self, why: &str) {
        self.new_epoch_due = None;
        self.queued.retain(|batch| {
            if batch.maybe_stored {
                let last_error = batch.last_error.as_deref().unwrap_or("no answer");
                batch.cell.resolve(Err(ClientError::MaybeStored {
                    reason: format!(
                        "{why}; the producer moved to a new epoch (last error: {last_error})"
                    ),
                }));
            }
            !batch.maybe_stored
        });
        match self.epoch.next() {
            Some(epoch) => self.epoch = epoch,
            None => {
                self.epochs_exhausted = true;
                for batch in self.queued.drain(..) {
                    batch.cell.resolve(Err(epochs_exhausted()));
                }
            }
        }
        self.acked_next = BatchSequence(0);
        self.renumber_queued();
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
        let mut gave_up_on_stored = false;
        self.queued.retain(|batch| {
            let alive = now.saturating_duration_since(batch.opened_at) < timeout;
            if !alive {
                gave_up_on_stored |= batch.maybe_stored;
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
        // The broker may hold a batch given up on: the next batch cannot take its sequence.
        if gave_up_on_stored {
            self.new_epoch_due = Some("a batch before it timed out and may be stored");
        }
        let expired = before - self.queued.len();
        if let (true, Some(why)) = (expired > 0, self.new_epoch_due) {
            self.start_new_epoch(why);
        } else if expired > 0 {
            self.renumber_queued();
        }
        expired
    }
}

/// The client error for a refusal the lane does not retry.
fn refused(error: RpcError) -> ClientError {
    match error.status() {
        Some(status) => ClientError::Refused {
            status,
            message: error.to_string(),
        },
        None => ClientError::Rpc(error),
    }
}

/// The attempt got no verdict: it may have been appended (the connection failed after the
/// request left, or the broker appended it and the replicas were late).
fn outcome_unknown(error: &RpcError) -> bool {
    error.is_transport() || matches!(error.status(), Some(Status::Timeout | Status::ShuttingDown))
}

fn epochs_exhausted() -> ClientError {
    ClientError::Config(
        "this producer used every producer epoch of its lane; create a new producer".into(),
    )
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
        while let Some(((epoch, seq), bytes)) = lane.peek_sendable(now) {
            let producer = validate_batch(bytes).unwrap().producer.unwrap();
            assert_eq!(producer.base_sequence, seq);
            assert_eq!(producer.producer_epoch, epoch);
            sent.push(seq.0);
            lane.mark_sent();
        }
        sent
    }

    fn key(sequence: u32) -> BatchKey {
        (ProducerEpoch(0), BatchSequence(sequence))
    }

    fn epoch_of_next(lane: &Lane, now: Instant) -> ProducerEpoch {
        lane.peek_sendable(now).unwrap().0.0
    }

    fn timeout() -> Result<ProduceResponse, RpcError> {
        Err(RpcError::Timeout {
            addr: "broker".into(),
            timeout_ms: 100,
        })
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
        lane.on_answer(key(0), status(Status::Backpressure), now, BACKOFF);
        lane.push(sealed(b"d"));
        assert!(
            lane.peek_sendable(now).is_none(),
            "draining: nothing new goes out"
        );
        lane.on_answer(key(1), status(Status::OutOfOrderSequence), now, BACKOFF);
        lane.on_answer(key(2), status(Status::OutOfOrderSequence), now, BACKOFF);
        assert!(lane.peek_sendable(now).is_none(), "paused for the backoff");
        let later = now + Duration::from_millis(10);
        assert_eq!(send_all(&mut lane, later), vec![0, 1, 2, 3]);
        for seq in 0..4 {
            lane.on_answer(key(seq), ok(u64::from(seq)), later, BACKOFF);
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
        lane.on_answer(key(0), ok(0), now, BACKOFF);
        lane.on_answer(key(1), status(Status::InvalidBatch), now, BACKOFF);
        lane.on_answer(key(2), status(Status::OutOfOrderSequence), now, BACKOFF);
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

    /// Case 5 of issue 20 seen from the client: the broker says another batch holds our
    /// sequence. The batch fails (never acknowledged), and the lane moves to a new epoch, so
    /// the batches behind it are stored rather than clashing one after another.
    #[test]
    fn a_clash_fails_the_batch_and_moves_the_lane_to_a_new_epoch() {
        let mut lane = Lane::new(StreamletId(0), ProducerId(1));
        let first = sealed(b"a");
        let first_cell = first.cell.clone();
        lane.push(first);
        lane.push(sealed(b"b"));
        let now = Instant::now();
        assert_eq!(send_all(&mut lane, now), vec![0, 1]);
        lane.on_answer(key(0), status(Status::SequenceClash), now, BACKOFF);
        lane.on_answer(key(1), status(Status::OutOfOrderSequence), now, BACKOFF);
        assert!(matches!(
            first_cell.outcome(),
            Some(Err(ClientError::Refused {
                status: Status::SequenceClash,
                ..
            }))
        ));
        let later = now + Duration::from_secs(1);
        assert_eq!(epoch_of_next(&lane, later), ProducerEpoch(1));
        assert_eq!(send_all(&mut lane, later), vec![0], "renumbered from 0");
        lane.on_answer((ProducerEpoch(1), BatchSequence(0)), ok(7), later, BACKOFF);
        assert!(lane.is_idle());
    }

    /// Issue 21, finding 5, seen from the client: the log forgot this producer (or refused
    /// an earlier batch). The batches were not stored: the lane resends them, in order, in a
    /// new epoch that starts at 0, and fails none of them.
    #[test]
    fn an_unknown_producer_resends_its_batches_in_a_new_epoch() {
        let mut lane = Lane::new(StreamletId(0), ProducerId(1));
        let cells: Vec<_> = (0..2)
            .map(|_| {
                let batch = sealed(b"x");
                let cell = batch.cell.clone();
                lane.push(batch);
                cell
            })
            .collect();
        let now = Instant::now();
        assert_eq!(send_all(&mut lane, now), vec![0, 1]);
        lane.on_answer(key(0), status(Status::UnknownProducer), now, BACKOFF);
        lane.on_answer(key(1), status(Status::UnknownProducer), now, BACKOFF);
        assert!(
            cells.iter().all(|c| c.outcome().is_none()),
            "nothing failed"
        );
        let later = now + Duration::from_secs(1);
        assert_eq!(epoch_of_next(&lane, later), ProducerEpoch(1));
        assert_eq!(send_all(&mut lane, later), vec![0, 1], "renumbered from 0");
        lane.on_answer((ProducerEpoch(1), BatchSequence(0)), ok(7), later, BACKOFF);
        lane.on_answer((ProducerEpoch(1), BatchSequence(1)), ok(8), later, BACKOFF);
        assert!(cells.iter().all(|c| matches!(c.outcome(), Some(Ok(_)))));
        assert!(lane.is_idle());
    }

    /// librdkafka's timeout path, done safely: a batch whose fate is unknown times out, so the
    /// lane moves to a new epoch; a later batch that may also be stored is failed rather than
    /// resent under the new epoch (where it could be stored twice); one never sent is renumbered.
    #[test]
    fn giving_up_on_a_batch_that_may_be_stored_starts_a_new_epoch() {
        let mut lane = Lane::new(StreamletId(0), ProducerId(1));
        let cells: Vec<_> = (0..3)
            .map(|_| {
                let batch = sealed(b"x");
                let cell = batch.cell.clone();
                lane.push(batch);
                cell
            })
            .collect();
        let start = Instant::now();
        // Two go out and get no verdict; the third is never sent.
        while lane.queued.len() > 1 {
            lane.mark_sent();
        }
        lane.on_answer(key(0), timeout(), start, BACKOFF);
        lane.on_answer(key(1), timeout(), start, BACKOFF);
        // The first batch was opened long before the others.
        lane.queued[0].opened_at = start - Duration::from_secs(10);
        assert_eq!(lane.expire(start, Duration::from_secs(5)), 1);
        assert!(matches!(
            cells[0].outcome(),
            Some(Err(ClientError::DeliveryTimeout { .. }))
        ));
        assert!(matches!(
            cells[1].outcome(),
            Some(Err(ClientError::MaybeStored { .. }))
        ));
        assert!(cells[2].outcome().is_none());
        let later = start + Duration::from_secs(1);
        assert_eq!(epoch_of_next(&lane, later), ProducerEpoch(1));
        assert_eq!(send_all(&mut lane, later), vec![0]);
    }

    /// A batch the broker refused before appending it (backpressure) is surely not stored:
    /// when it times out, the batches behind it take its sequence in the same epoch.
    #[test]
    fn a_batch_surely_not_stored_times_out_without_a_new_epoch() {
        let mut lane = Lane::new(StreamletId(0), ProducerId(1));
        lane.push(sealed(b"old"));
        lane.push(sealed(b"new"));
        let start = Instant::now();
        lane.mark_sent();
        lane.on_answer(key(0), status(Status::Backpressure), start, BACKOFF);
        lane.queued[0].opened_at = start - Duration::from_secs(10);
        assert_eq!(lane.expire(start, Duration::from_secs(5)), 1);
        let later = start + Duration::from_secs(1);
        assert_eq!(epoch_of_next(&lane, later), ProducerEpoch(0));
        assert_eq!(send_all(&mut lane, later), vec![0]);
    }
}
