//! The exactly-once checker: every acknowledged record is read back exactly once, at the
//! location its ack named, and each log is read in offset order with each producer's records
//! in the order it sent them.

use std::collections::{HashMap, HashSet};
use tailstream_client::{ConsumedRecord, RecordAck};
use tailstream_wire::{LogId, StreamletId};

/// Record values are `p<producer>-<sequence>`.
pub fn value(producer: u32, sequence: u64) -> String {
    format!("p{producer}-{sequence}")
}

fn parse(value: &[u8]) -> (u32, u64) {
    let text = std::str::from_utf8(value).unwrap();
    let (producer, sequence) = text.trim_start_matches('p').split_once('-').unwrap();
    (producer.parse().unwrap(), sequence.parse().unwrap())
}

#[derive(Default)]
pub struct Ledger {
    acked: HashMap<String, RecordAck>,
    /// Sent but not acknowledged (may or may not be stored): allowed once at most.
    unacked: HashSet<String>,
}

impl Ledger {
    pub fn acked(&mut self, value: String, ack: RecordAck) {
        self.acked.insert(value, ack);
    }

    pub fn unacked(&mut self, value: String) {
        self.unacked.insert(value);
    }

    /// Adds another producer's ledger to this one.
    pub fn merge(&mut self, other: Ledger) {
        self.acked.extend(other.acked);
        self.unacked.extend(other.unacked);
    }

    pub fn acked_count(&self) -> usize {
        self.acked.len()
    }

    /// Checks `consumed` (in the order a consumer returned them) against the acks.
    pub fn check(&self, consumed: &[ConsumedRecord]) {
        let mut seen = HashSet::new();
        let mut last_offset: HashMap<(StreamletId, LogId), u64> = HashMap::new();
        let mut last_sequence: HashMap<(StreamletId, LogId, u32), u64> = HashMap::new();
        for record in consumed {
            let raw = record
                .value
                .as_ref()
                .expect("every test record has a value");
            let text = String::from_utf8(raw.to_vec()).unwrap();
            assert!(seen.insert(text.clone()), "{text} consumed twice");
            let log = (record.streamlet, record.log);
            if let Some(previous) = last_offset.insert(log, record.offset.0) {
                assert!(
                    record.offset.0 > previous,
                    "{log:?} went from offset {previous} to {}",
                    record.offset.0
                );
            }
            let (producer, sequence) = parse(raw);
            let key = (record.streamlet, record.log, producer);
            if let Some(previous) = last_sequence.insert(key, sequence) {
                assert!(
                    sequence > previous,
                    "producer {producer} in {log:?}: {sequence} after {previous}"
                );
            }
            match self.acked.get(&text) {
                Some(ack) => {
                    assert_eq!(ack.streamlet, record.streamlet, "{text}: streamlet");
                    assert_eq!(
                        (ack.location.log, ack.location.offset),
                        (record.log, record.offset),
                        "{text}: location"
                    );
                }
                None => assert!(self.unacked.contains(&text), "{text} was never produced"),
            }
        }
        let missing: Vec<_> = self
            .acked
            .keys()
            .filter(|v| !seen.contains(*v))
            .take(10)
            .collect();
        assert!(
            missing.is_empty(),
            "acked records never consumed (first 10): {missing:?}"
        );
    }
}
