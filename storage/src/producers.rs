//! Idempotent produce: per log, each producer's current epoch, its next expected sequence and
//! its most recent batches. Sequences count records, as Kafka's do: a batch of n records with
//! base sequence s is followed by one with base sequence s + n (wrapping at `i32::MAX`), so
//! Kafka's idempotent producers and Tailstream's own share one table.
//!
//! The rules are Kafka's, with one more check on duplicates:
//! - a batch of an older epoch than the producer's latest is fenced;
//! - a batch of a newer epoch starts the producer's sequences afresh, at 0;
//! - in the current epoch, the next sequence is appended, a later one is out of order
//!   (retryable: the missing earlier batch is on its way), and an earlier one is answered as a
//!   duplicate only when it is the *same batch* as one remembered: same base sequence, record
//!   count and CRC-32C. Any other earlier sequence (another batch under the same id, epoch and
//!   sequence, a sequence inside a stored batch, or one too old to compare) is a clash: an
//!   error, never an acknowledgement, since the log does not hold those bytes there.
//!
//! Both the remembered batches per producer and the producers per log are bounded; the least
//! recently seen producer is forgotten first. A producer the table does not know may only
//! start a sequence (0, in any epoch): any other sequence is `UnknownProducer` (Kafka's
//! UNKNOWN_PRODUCER_ID), since it may be the retry of a batch stored before the producer was
//! forgotten, which must not be appended twice, or follow a batch that was refused, which
//! must not leave a gap. Its client then moves to a new epoch, which starts at 0.
//!
//! Where clients authenticate, a producer id belongs to the user whose batch first used it in
//! the log (the coordinator hands out ids that cannot be guessed, but anyone who reads a stream
//! sees them in its batches): a batch under it from any other user is refused before it is
//! compared with anything, so it can neither be appended, nor answered as a duplicate of the
//! owner's batch, nor break the owner's sequence. A table rebuilt from a log knows no owners
//! (the log does not keep them): the next user to write under an id owns it again.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::OnceLock;
use tailstream_wire::batch::BatchInfo;
use tailstream_wire::{BatchSequence, ProducerEpoch, ProducerId};

/// How many of a producer's latest batches a log remembers (the protocol's idempotence window).
pub const RECENT_BATCHES_MAX: usize = tailstream_wire::batch::IDEMPOTENCE_WINDOW_BATCHES;

/// Who wrote a batch: an authenticated user (a keyed hash of its name, the key this process's
/// own), or nobody in particular (authentication off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProducerOwner(u64);

impl ProducerOwner {
    /// Authentication is off: nothing binds a producer id.
    pub const ANYONE: ProducerOwner = ProducerOwner(0);

    /// The user `name`.
    pub fn user(name: &str) -> ProducerOwner {
        static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
        let hash = KEY.get_or_init(Default::default).hash_one(name);
        // 0 is ANYONE's: no user hashes to it.
        ProducerOwner(hash.max(1))
    }
}

/// What makes a batch this batch: where its producer put it and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducedBatch {
    pub producer: ProducerId,
    pub epoch: ProducerEpoch,
    pub base_sequence: BatchSequence,
    pub record_count: u32,
    /// The batch's CRC-32C, which covers its epoch, sequence and every record.
    pub checksum: u32,
    /// Who sent it.
    pub owner: ProducerOwner,
}

impl ProducedBatch {
    /// The identity of a validated batch; `None` for a batch without idempotence.
    pub fn of(info: &BatchInfo) -> Option<ProducedBatch> {
        info.producer.map(|p| ProducedBatch {
            producer: p.producer_id,
            epoch: p.producer_epoch,
            base_sequence: p.base_sequence,
            record_count: info.record_count,
            checksum: info.checksum,
            owner: ProducerOwner::ANYONE,
        })
    }

    /// This batch, sent by `owner`.
    pub fn by(self, owner: ProducerOwner) -> ProducedBatch {
        ProducedBatch { owner, ..self }
    }
}

/// What the table says about an incoming batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceCheck<L> {
    /// Next in line, the first of a newer epoch, or the first batch (sequence 0) of a
    /// producer we do not know: append it.
    Append,
    /// This very batch was appended; here is where.
    Duplicate(L),
    /// The sequence names a place in the log that holds something else (or is too old to
    /// compare): not appended, not acknowledged.
    Clash,
    /// An earlier batch is missing (or a newer epoch did not start at sequence 0).
    OutOfOrder { expected: BatchSequence },
    /// A newer epoch of this producer was seen: this session is fenced.
    Fenced { current: ProducerEpoch },
    /// No state for this producer, and the batch does not start a sequence.
    UnknownProducer,
    /// The producer id belongs to another user.
    Foreign,
}

#[derive(Clone, Copy, Debug)]
struct RecentBatch<L> {
    base_sequence: BatchSequence,
    record_count: u32,
    checksum: u32,
    location: L,
}

#[derive(Debug)]
struct ProducerState<L> {
    /// The user the id belongs to (`ANYONE` until an authenticated user writes under it).
    owner: ProducerOwner,
    epoch: ProducerEpoch,
    next_sequence: BatchSequence,
    recent: VecDeque<RecentBatch<L>>,
    last_seen_tick: u64,
}

#[derive(Debug)]
pub struct ProducerTable<L> {
    producers: HashMap<ProducerId, ProducerState<L>>,
    producers_max: usize,
    tick: u64,
}

impl<L: Copy> ProducerTable<L> {
    pub fn new(producers_max: usize) -> Self {
        Self {
            producers: HashMap::new(),
            producers_max: producers_max.max(1),
            tick: 0,
        }
    }

    pub fn check(&self, batch: &ProducedBatch) -> SequenceCheck<L> {
        let Some(state) = self.producers.get(&batch.producer) else {
            return if batch.base_sequence == BatchSequence(0) {
                SequenceCheck::Append
            } else {
                SequenceCheck::UnknownProducer
            };
        };
        if state.owner != ProducerOwner::ANYONE && batch.owner != state.owner {
            return SequenceCheck::Foreign;
        }
        if batch.epoch < state.epoch {
            return SequenceCheck::Fenced {
                current: state.epoch,
            };
        }
        if batch.epoch > state.epoch {
            // A new session of the producer: its sequences start over.
            return if batch.base_sequence == BatchSequence(0) {
                SequenceCheck::Append
            } else {
                SequenceCheck::OutOfOrder {
                    expected: BatchSequence(0),
                }
            };
        }
        if batch.base_sequence == state.next_sequence {
            return SequenceCheck::Append;
        }
        if !batch.base_sequence.precedes(state.next_sequence) {
            return SequenceCheck::OutOfOrder {
                expected: state.next_sequence,
            };
        }
        match state
            .recent
            .iter()
            .find(|r| r.base_sequence == batch.base_sequence)
        {
            Some(recent)
                if recent.record_count == batch.record_count
                    && recent.checksum == batch.checksum =>
            {
                SequenceCheck::Duplicate(recent.location)
            }
            _ => SequenceCheck::Clash,
        }
    }

    /// Records that `batch` was appended at `location` (after `check` said `Append`, or while
    /// rebuilding the table from a log, in log order).
    pub fn appended(&mut self, batch: &ProducedBatch, location: L) {
        self.tick += 1;
        if !self.producers.contains_key(&batch.producer)
            && self.producers.len() >= self.producers_max
        {
            self.forget_least_recent();
        }
        let state = self
            .producers
            .entry(batch.producer)
            .or_insert_with(|| ProducerState {
                owner: ProducerOwner::ANYONE,
                epoch: batch.epoch,
                next_sequence: batch.base_sequence,
                recent: VecDeque::with_capacity(4),
                last_seen_tick: 0,
            });
        if batch.epoch != state.epoch {
            // A newer session: the older one's batches can no longer be retried (its retries
            // are fenced), so they are not kept for comparison.
            state.epoch = batch.epoch;
            state.recent.clear();
        }
        if state.owner == ProducerOwner::ANYONE {
            state.owner = batch.owner;
        }
        state.next_sequence = batch.base_sequence.advance(batch.record_count);
        state.last_seen_tick = self.tick;
        if state.recent.len() == RECENT_BATCHES_MAX {
            state.recent.pop_front();
        }
        state.recent.push_back(RecentBatch {
            base_sequence: batch.base_sequence,
            record_count: batch.record_count,
            checksum: batch.checksum,
            location,
        });
    }

    /// Forgets the least recently seen eighth of the producers at once, so eviction is
    /// amortised rather than a scan on every new producer.
    fn forget_least_recent(&mut self) {
        let mut ticks: Vec<u64> = self.producers.values().map(|s| s.last_seen_tick).collect();
        let cut = (ticks.len() / 8).max(1);
        let (_, threshold, _) = ticks.select_nth_unstable(cut - 1);
        let threshold = *threshold;
        self.producers
            .retain(|_, state| state.last_seen_tick > threshold);
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(producer: u64, epoch: i16, sequence: u32, records: u32) -> ProducedBatch {
        ProducedBatch {
            producer: ProducerId(producer),
            epoch: ProducerEpoch(epoch),
            base_sequence: BatchSequence(sequence),
            record_count: records,
            // Stands for the bytes: the same batch resent has the same checksum.
            checksum: (producer as u32) ^ (u32::from(epoch as u16) << 8) ^ (sequence << 12),
            owner: ProducerOwner::ANYONE,
        }
    }

    #[test]
    fn a_producer_id_belongs_to_the_first_user_who_writes_under_it() {
        let alice = ProducerOwner::user("alice");
        let mallory = ProducerOwner::user("mallory");
        assert_ne!(alice, mallory);
        assert_ne!(alice, ProducerOwner::ANYONE);
        let mut table = ProducerTable::<u32>::new(16);
        table.appended(&batch(3, 0, 0, 2).by(alice), 10);
        // Another user: refused before anything is compared: not her next batch, not a
        // duplicate of hers (which would acknowledge bytes she never sent), not a new epoch.
        for other in [batch(3, 0, 2, 1), batch(3, 0, 0, 2), batch(3, 1, 0, 1)] {
            assert_eq!(table.check(&other.by(mallory)), SequenceCheck::Foreign);
            assert_eq!(table.check(&other), SequenceCheck::Foreign, "nor anyone");
        }
        assert_eq!(
            table.check(&batch(3, 0, 2, 1).by(alice)),
            SequenceCheck::Append
        );
        assert_eq!(
            table.check(&batch(3, 0, 0, 2).by(alice)),
            SequenceCheck::Duplicate(10)
        );
        // An id first used without authentication (or rebuilt from a log, which keeps no
        // owners) goes to the first user who writes under it.
        table.appended(&batch(4, 0, 0, 1), 20);
        assert_eq!(
            table.check(&batch(4, 0, 1, 1).by(mallory)),
            SequenceCheck::Append
        );
        table.appended(&batch(4, 0, 1, 1).by(mallory), 21);
        assert_eq!(
            table.check(&batch(4, 0, 2, 1).by(alice)),
            SequenceCheck::Foreign
        );
    }

    #[test]
    fn sequences_count_records_and_wrap() {
        let mut table = ProducerTable::<u32>::new(16);
        table.appended(&batch(1, 0, 0, 40), 1);
        assert_eq!(table.check(&batch(1, 0, 40, 1)), SequenceCheck::Append);
        assert_eq!(
            table.check(&batch(1, 0, 41, 1)),
            SequenceCheck::OutOfOrder {
                expected: BatchSequence(40)
            },
            "a gap"
        );
        let near_end = tailstream_wire::SEQUENCE_MODULUS - 10;
        table.appended(&batch(1, 0, near_end, 25), 2);
        assert_eq!(
            table.check(&batch(1, 0, 15, 1)),
            SequenceCheck::Append,
            "wrapped"
        );
        assert_eq!(
            table.check(&batch(1, 0, near_end, 25)),
            SequenceCheck::Duplicate(2)
        );
    }

    #[test]
    fn retries_are_found_and_gaps_are_refused() {
        let mut table = ProducerTable::<u32>::new(16);
        assert_eq!(
            table.check(&batch(7, 0, 5, 1)),
            SequenceCheck::UnknownProducer,
            "a producer we do not know starts at 0"
        );
        assert_eq!(table.check(&batch(7, 0, 0, 1)), SequenceCheck::Append);
        // Rebuilt from a log whose older batches retention freed: the table takes the
        // producer at whatever sequence its oldest kept batch has.
        // Batches of one record: sequences advance by one.
        table.appended(&batch(7, 0, 5, 1), 500);
        table.appended(&batch(7, 0, 6, 1), 600);
        assert_eq!(table.check(&batch(7, 0, 7, 1)), SequenceCheck::Append);
        assert_eq!(
            table.check(&batch(7, 0, 5, 1)),
            SequenceCheck::Duplicate(500)
        );
        assert_eq!(
            table.check(&batch(7, 0, 9, 1)),
            SequenceCheck::OutOfOrder {
                expected: BatchSequence(7)
            }
        );
        for seq in 7..7 + RECENT_BATCHES_MAX as u32 {
            table.appended(&batch(7, 0, seq, 1), seq);
        }
        assert_eq!(
            table.check(&batch(7, 0, 6, 1)),
            SequenceCheck::Clash,
            "too old to compare: never acknowledged as a duplicate"
        );
    }

    #[test]
    fn a_duplicate_is_only_the_same_batch() {
        let mut table = ProducerTable::<u32>::new(16);
        table.appended(&batch(3, 0, 0, 10), 100);
        table.appended(&batch(3, 0, 10, 10), 200);
        let mut other_bytes = batch(3, 0, 0, 10);
        other_bytes.checksum ^= 1;
        assert_eq!(
            table.check(&other_bytes),
            SequenceCheck::Clash,
            "other bytes"
        );
        assert_eq!(
            table.check(&batch(3, 0, 0, 4)),
            SequenceCheck::Clash,
            "another record count"
        );
        assert_eq!(
            table.check(&batch(3, 0, 5, 5)),
            SequenceCheck::Clash,
            "inside a stored batch"
        );
        assert_eq!(
            table.check(&batch(3, 0, 10, 10)),
            SequenceCheck::Duplicate(200)
        );
    }

    #[test]
    fn epochs_fence_older_sessions_and_restart_sequences() {
        let mut table = ProducerTable::<u32>::new(16);
        table.appended(&batch(4, 0, 0, 5), 1);
        table.appended(&batch(4, 0, 5, 5), 2);
        // A newer epoch must start at 0; sequence 0 of the old epoch is no duplicate of it.
        assert_eq!(
            table.check(&batch(4, 1, 5, 5)),
            SequenceCheck::OutOfOrder {
                expected: BatchSequence(0)
            }
        );
        assert_eq!(table.check(&batch(4, 1, 0, 5)), SequenceCheck::Append);
        table.appended(&batch(4, 1, 0, 5), 3);
        assert_eq!(
            table.check(&batch(4, 0, 10, 5)),
            SequenceCheck::Fenced {
                current: ProducerEpoch(1)
            },
            "the old session is fenced, even at its next sequence"
        );
        assert_eq!(
            table.check(&batch(4, 0, 0, 5)),
            SequenceCheck::Fenced {
                current: ProducerEpoch(1)
            },
            "and its retries are not duplicates"
        );
        assert_eq!(table.check(&batch(4, 1, 0, 5)), SequenceCheck::Duplicate(3));
        assert_eq!(table.check(&batch(4, 1, 5, 1)), SequenceCheck::Append);
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_least_recent_producers() {
        let mut table = ProducerTable::<u32>::new(8);
        for id in 0..100u64 {
            table.appended(&batch(id, 0, 0, 1), 0);
            assert!(table.len() <= 8);
        }
        // The most recent producer is always remembered.
        assert_eq!(
            table.check(&batch(99, 0, 0, 1)),
            SequenceCheck::Duplicate(0)
        );
    }

    /// Issue 21, finding 5: a producer forgotten to make room for others used to start
    /// afresh at whatever sequence it sent next, so its retry of a stored batch (the answer
    /// lost) was appended a second time.
    #[test]
    fn a_forgotten_producer_is_never_appended_twice() {
        let mut table = ProducerTable::<u32>::new(8);
        table.appended(&batch(1, 0, 0, 5), 10);
        table.appended(&batch(1, 0, 5, 5), 20);
        for id in 100..200u64 {
            table.appended(&batch(id, 0, 0, 1), 0);
        }
        assert_eq!(
            table.check(&batch(1, 0, 5, 5)),
            SequenceCheck::UnknownProducer
        );
        assert_eq!(
            table.check(&batch(1, 0, 10, 5)),
            SequenceCheck::UnknownProducer
        );
        // A new epoch (or a fresh producer) starts at 0 and is taken.
        assert_eq!(table.check(&batch(1, 1, 0, 5)), SequenceCheck::Append);
    }
}
