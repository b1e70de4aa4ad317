//! Idempotent produce: per log, each producer's next expected sequence and where its most
//! recent batches landed. Sequences count records, as Kafka's do: a batch of n records with
//! base sequence s is followed by one with base sequence s + n (wrapping at `i32::MAX`), so
//! Kafka's idempotent producers and Tailstream's own share one table.
//!
//! A retried batch (same producer, same sequence) is answered with where it was appended the
//! first time instead of being appended again; a batch that skips ahead is refused as out of
//! order (retryable: the missing earlier batch is on its way). Both the remembered batches per
//! producer and the producers per log are bounded; the least recently seen producer is
//! forgotten first, and a forgotten producer starts afresh at whatever sequence it sends next.

use std::collections::{HashMap, VecDeque};
use tailstream_wire::{BatchSequence, ProducerId};

/// How many of a producer's latest batches a log remembers (the protocol's idempotence window).
pub const RECENT_BATCHES_MAX: usize = tailstream_wire::batch::IDEMPOTENCE_WINDOW_BATCHES;

/// What the table says about an incoming batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceCheck<L> {
    /// Next in line (or a producer we do not know): append it.
    Append,
    /// Already appended; here is where.
    Duplicate(L),
    /// Already appended long ago; where is forgotten.
    DuplicateForgotten,
    /// An earlier batch is missing.
    OutOfOrder { expected: BatchSequence },
}

#[derive(Debug)]
struct ProducerState<L> {
    next_sequence: BatchSequence,
    recent: VecDeque<(BatchSequence, L)>,
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

    pub fn check(&self, producer: ProducerId, sequence: BatchSequence) -> SequenceCheck<L> {
        let Some(state) = self.producers.get(&producer) else {
            return SequenceCheck::Append;
        };
        if sequence == state.next_sequence {
            return SequenceCheck::Append;
        }
        if sequence.precedes(state.next_sequence) {
            return match state.recent.iter().find(|(seq, _)| *seq == sequence) {
                Some((_, location)) => SequenceCheck::Duplicate(*location),
                None => SequenceCheck::DuplicateForgotten,
            };
        }
        SequenceCheck::OutOfOrder {
            expected: state.next_sequence,
        }
    }

    /// Records that the batch of `records` records with base `sequence` of `producer` was
    /// appended at `location`.
    pub fn appended(
        &mut self,
        producer: ProducerId,
        sequence: BatchSequence,
        records: u32,
        location: L,
    ) {
        self.tick += 1;
        if !self.producers.contains_key(&producer) && self.producers.len() >= self.producers_max {
            self.forget_least_recent();
        }
        let state = self
            .producers
            .entry(producer)
            .or_insert_with(|| ProducerState {
                next_sequence: sequence,
                recent: VecDeque::with_capacity(4),
                last_seen_tick: 0,
            });
        state.next_sequence = sequence.advance(records);
        state.last_seen_tick = self.tick;
        if state.recent.len() == RECENT_BATCHES_MAX {
            state.recent.pop_front();
        }
        state.recent.push_back((sequence, location));
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

    #[test]
    fn sequences_count_records_and_wrap() {
        let mut table = ProducerTable::<u32>::new(16);
        let p = ProducerId(1);
        table.appended(p, BatchSequence(0), 40, 1);
        assert_eq!(table.check(p, BatchSequence(40)), SequenceCheck::Append);
        assert_eq!(
            table.check(p, BatchSequence(41)),
            SequenceCheck::OutOfOrder {
                expected: BatchSequence(40)
            },
            "a gap"
        );
        let near_end = BatchSequence(tailstream_wire::SEQUENCE_MODULUS - 10);
        table.appended(p, near_end, 25, 2);
        assert_eq!(
            table.check(p, BatchSequence(15)),
            SequenceCheck::Append,
            "wrapped"
        );
        assert_eq!(table.check(p, near_end), SequenceCheck::Duplicate(2));
    }

    #[test]
    fn retries_are_found_and_gaps_are_refused() {
        let mut table = ProducerTable::<u32>::new(16);
        let p = ProducerId(7);
        assert_eq!(table.check(p, BatchSequence(5)), SequenceCheck::Append);
        // Batches of one record: sequences advance by one.
        table.appended(p, BatchSequence(5), 1, 500);
        table.appended(p, BatchSequence(6), 1, 600);
        assert_eq!(table.check(p, BatchSequence(7)), SequenceCheck::Append);
        assert_eq!(
            table.check(p, BatchSequence(5)),
            SequenceCheck::Duplicate(500)
        );
        assert_eq!(
            table.check(p, BatchSequence(9)),
            SequenceCheck::OutOfOrder {
                expected: BatchSequence(7)
            }
        );
        for seq in 7..7 + RECENT_BATCHES_MAX as u32 {
            table.appended(p, BatchSequence(seq), 1, seq);
        }
        assert_eq!(
            table.check(p, BatchSequence(6)),
            SequenceCheck::DuplicateForgotten
        );
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_least_recent_producers() {
        let mut table = ProducerTable::<u32>::new(8);
        for id in 0..100u64 {
            table.appended(ProducerId(id), BatchSequence(0), 1, 0);
            assert!(table.len() <= 8);
        }
        // The most recent producer is always remembered.
        assert_eq!(
            table.check(ProducerId(99), BatchSequence(0)),
            SequenceCheck::Duplicate(0)
        );
    }
}
