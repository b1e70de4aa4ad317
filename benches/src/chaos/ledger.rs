//! The exactly-once checker: every acknowledged record is read back exactly once, at the
//! location its ack named, and each log is read in offset order with each producer's records
//! in the order it sent them. Records sent but never acknowledged may be read at most once.
//!
//! Compact, so a chaos run of millions of records fits: record values are
//! `p<producer>-<sequence>`, and each producer's records live in a vector indexed by sequence
//! (a few dozen bytes each) rather than in maps keyed by strings. Order is checked as records
//! are consumed; what needs every ack (lost, misplaced) is checked at the end.

use std::collections::HashMap;
use tailstream_client::{ConsumedRecord, RecordAck};
use tailstream_wire::{LogId, StreamletId};

/// The value of record `sequence` of producer `producer`.
pub fn value(producer: u32, sequence: u64) -> String {
    format!("p{producer}-{sequence}")
}

/// `(producer, sequence)` of a value made by [`value`].
fn parse(value: &[u8]) -> Option<(u32, u64)> {
    let text = std::str::from_utf8(value).ok()?;
    let (producer, sequence) = text.strip_prefix('p')?.split_once('-')?;
    Some((producer.parse().ok()?, sequence.parse().ok()?))
}

/// Where a record was acked or read: streamlet, log, offset.
type Place = (StreamletId, LogId, u64);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Sent {
    #[default]
    Never,
    /// Sent, not acknowledged (failed or timed out): it may be stored, once at most.
    Unacked,
    Acked,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    sent: Sent,
    acked_at: Option<Place>,
    read_at: Option<Place>,
    reads: u32,
}

/// What the check found. Clean when nothing but `acked` and `consumed` is non-zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    pub acked: u64,
    /// Records read (each once, duplicates not counted).
    pub consumed: u64,
    /// Sent, never acknowledged, yet stored (allowed: at most once).
    pub unacked_stored: u64,
    /// Acknowledged and never read.
    pub lost: u64,
    /// Extra copies read.
    pub duplicated: u64,
    /// Reads that went backwards in a log's offsets or in a producer's order.
    pub out_of_order: u64,
    /// Read somewhere other than where the ack said.
    pub misplaced: u64,
    /// Read, but never sent by this load.
    pub unknown: u64,
    /// Records the consumer skipped because retention freed them before it read them (the
    /// consumer fell behind retention). Acked records among them are also `lost`: the run is
    /// not clean, but this tells a slow consumer from a broker that lost what it acked.
    pub skipped_by_retention: u64,
    /// The first few problems, for a person.
    pub examples: Vec<String>,
}

impl Verdict {
    pub fn is_clean(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.out_of_order == 0
            && self.misplaced == 0
            && self.unknown == 0
    }

    fn problem(&mut self, example: impl FnOnce() -> String) {
        if self.examples.len() < 10 {
            self.examples.push(example());
        }
    }
}

/// Every record of a load: what was acked, what was read.
#[derive(Debug, Default)]
pub struct Ledger {
    producers: Vec<Vec<Slot>>,
    last_offset: HashMap<(StreamletId, LogId), u64>,
    last_sequence: HashMap<(StreamletId, LogId, u32), u64>,
    verdict: Verdict,
}

impl Ledger {
    fn slot(&mut self, producer: u32, sequence: u64) -> &mut Slot {
        let producer = producer as usize;
        if self.producers.len() <= producer {
            self.producers.resize_with(producer + 1, Vec::new);
        }
        let slots = &mut self.producers[producer];
        let index = sequence as usize;
        if slots.len() <= index {
            slots.resize(index + 1, Slot::default());
        }
        &mut slots[index]
    }

    /// Record `sequence` of `producer` was acknowledged.
    pub fn acked(&mut self, producer: u32, sequence: u64, ack: &RecordAck) {
        let place = (ack.streamlet, ack.location.log, ack.location.offset.0);
        let slot = self.slot(producer, sequence);
        slot.sent = Sent::Acked;
        slot.acked_at = Some(place);
    }

    /// Record `sequence` of `producer` was sent and its ack failed.
    pub fn unacked(&mut self, producer: u32, sequence: u64) {
        self.slot(producer, sequence).sent = Sent::Unacked;
    }

    /// One record read, in the order the consumer returned it.
    pub fn consumed(&mut self, record: &ConsumedRecord) {
        let Some((producer, sequence)) = record.value.as_deref().and_then(parse) else {
            self.verdict.unknown += 1;
            let at = (record.streamlet, record.log, record.offset);
            self.verdict
                .problem(|| format!("unparseable record at {at:?}"));
            return;
        };
        let log = (record.streamlet, record.log);
        let offset = record.offset.0;
        if let Some(previous) = self.last_offset.insert(log, offset)
            && offset <= previous
        {
            self.verdict.out_of_order += 1;
            self.verdict
                .problem(|| format!("{log:?} went from offset {previous} to {offset}"));
        }
        let key = (record.streamlet, record.log, producer);
        if let Some(previous) = self.last_sequence.insert(key, sequence)
            && sequence <= previous
        {
            self.verdict.out_of_order += 1;
            self.verdict.problem(|| {
                format!("producer {producer} in {log:?}: {sequence} read after {previous}")
            });
        }
        let slot = self.slot(producer, sequence);
        slot.reads += 1;
        let reads = slot.reads;
        if reads == 1 {
            slot.read_at = Some((record.streamlet, record.log, offset));
        } else {
            self.verdict.duplicated += 1;
            let name = value(producer, sequence);
            self.verdict
                .problem(|| format!("{name} read {reads} times (again at {log:?} {offset})"));
        }
    }

    /// The final verdict, once every ack is in and the consumer has read everything.
    pub fn verdict(mut self) -> Verdict {
        let mut verdict = std::mem::take(&mut self.verdict);
        for (producer, slots) in self.producers.iter().enumerate() {
            for (sequence, slot) in slots.iter().enumerate() {
                let name = || value(producer as u32, sequence as u64);
                if slot.reads > 0 {
                    verdict.consumed += 1;
                }
                match slot.sent {
                    Sent::Acked => {
                        verdict.acked += 1;
                        match (slot.acked_at, slot.read_at) {
                            (_, None) => {
                                verdict.lost += 1;
                                verdict.problem(|| format!("{} acked, never read", name()));
                            }
                            (Some(acked), Some(read)) if acked != read => {
                                verdict.misplaced += 1;
                                verdict.problem(|| {
                                    format!("{} acked at {acked:?}, read at {read:?}", name())
                                });
                            }
                            _ => {}
                        }
                    }
                    Sent::Unacked => verdict.unacked_stored += u64::from(slot.reads > 0),
                    Sent::Never if slot.reads > 0 => {
                        verdict.unknown += 1;
                        verdict.problem(|| format!("{} read, never sent", name()));
                    }
                    Sent::Never => {}
                }
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Instant;
    use tailstream_client::RecordLocation;
    use tailstream_wire::{GroupId, RecordOffset, SegmentId, SegmentPosition};

    fn ack(streamlet: u32, log: u32, offset: u64) -> RecordAck {
        RecordAck {
            streamlet: StreamletId(streamlet),
            location: RecordLocation {
                log: LogId(log),
                offset: RecordOffset(offset),
                group: GroupId(0),
                segment: SegmentId(0),
                position: SegmentPosition(0),
            },
            acked_at: Instant::now(),
        }
    }

    fn read(producer: u32, sequence: u64, streamlet: u32, log: u32, offset: u64) -> ConsumedRecord {
        ConsumedRecord {
            streamlet: StreamletId(streamlet),
            log: LogId(log),
            offset: RecordOffset(offset),
            timestamp_ms: 0,
            key: None,
            value: Some(Bytes::from(value(producer, sequence))),
            producer: None,
        }
    }

    #[test]
    fn every_acked_record_read_once_in_order_is_clean() {
        let mut ledger = Ledger::default();
        for sequence in 0..3 {
            ledger.acked(0, sequence, &ack(0, 1, 10 + sequence));
        }
        ledger.unacked(0, 3);
        for sequence in 0..4 {
            ledger.consumed(&read(0, sequence, 0, 1, 10 + sequence));
        }
        let verdict = ledger.verdict();
        assert!(verdict.is_clean(), "{verdict:?}");
        assert_eq!(
            (verdict.acked, verdict.consumed, verdict.unacked_stored),
            (3, 4, 1)
        );
    }

    #[test]
    fn lost_duplicated_reordered_misplaced_and_unknown_records_are_each_counted() {
        let mut ledger = Ledger::default();
        for sequence in 0..4 {
            ledger.acked(0, sequence, &ack(0, 0, sequence));
        }
        ledger.consumed(&read(0, 1, 0, 0, 1));
        ledger.consumed(&read(0, 0, 0, 0, 0)); // backwards: offset and sequence
        ledger.consumed(&read(0, 1, 0, 0, 2)); // again, and elsewhere than acked
        ledger.consumed(&read(7, 0, 0, 1, 0)); // never sent
        ledger.acked(1, 0, &ack(0, 0, 5));
        ledger.consumed(&read(1, 0, 0, 2, 5)); // another log than acked
        let verdict = ledger.verdict();
        assert_eq!(verdict.lost, 2, "{verdict:?}"); // 2 and 3
        assert_eq!(verdict.duplicated, 1);
        assert_eq!(verdict.out_of_order, 2);
        assert_eq!(verdict.misplaced, 1);
        assert_eq!(verdict.unknown, 1);
        assert!(!verdict.is_clean());
        assert!(!verdict.examples.is_empty());
    }

    #[test]
    fn a_foreign_value_is_unknown_not_a_panic() {
        let mut ledger = Ledger::default();
        let mut record = read(0, 0, 0, 0, 0);
        record.value = Some(Bytes::from_static(b"\xff-not-ours"));
        ledger.consumed(&record);
        record.value = None;
        ledger.consumed(&record);
        assert_eq!(ledger.verdict().unknown, 2);
    }
}
