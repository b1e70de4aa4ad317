//! The coordinator file store's journal: the writes of each change since the last snapshot,
//! appended (the store itself is `tailstream_coordinator::persist::file`).
//!
//! ```text
//! header (once, 24 bytes)
//!  0  4  magic "TSMJ"     4  4  version (1)
//!  8  8  the snapshot's length in bytes        16  4  the snapshot's CRC32   20  4  CRC32 of 0..20
//! record (one per saved change)
//!  0  4  payload length   4  4  CRC32 of the payload   8  ..  payload: ops, back to back
//! op
//!  0  1  kind (1 put, 2 delete)   1  4  key length   5  ..  key   [put: 4  value length, value]
//! ```
//!
//! A journal names the snapshot it follows (length and checksum): one left behind by a
//! compaction that wrote a newer snapshot but died before replacing the journal is recognised
//! and ignored, never replayed over state that already holds it. Replay stops at the first
//! record that is short or fails its checksum: a torn append, never acknowledged. Pure
//! encoding and decoding.

/// One write of a change: a key (the coordinator's one-key-per-object layout) set or removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalOp {
    Put { key: String, value: Vec<u8> },
    Delete { key: String },
}

use JournalOp as Op;

pub const JOURNAL_MAGIC: [u8; 4] = *b"TSMJ";
pub const JOURNAL_VERSION: u32 = 1;
pub const HEADER_BYTES: usize = 24;
const RECORD_HEADER_BYTES: usize = 8;
/// Largest record read back: a change is a few objects; anything larger is damage.
pub const RECORD_BYTES_MAX: usize = 64 << 20;

const _: () = assert!(HEADER_BYTES == 4 + 4 + 8 + 4 + 4);
const _: () = assert!(RECORD_HEADER_BYTES == 4 + 4);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum OpKind {
    Put = 1,
    Delete = 2,
}

/// What a journal follows: a snapshot, known by its length and checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotId {
    pub length: u64,
    pub crc: u32,
}

impl SnapshotId {
    pub fn of(snapshot: &[u8]) -> Self {
        Self {
            length: snapshot.len() as u64,
            crc: crc32fast::hash(snapshot),
        }
    }
}

pub fn encode_header(snapshot: SnapshotId) -> [u8; HEADER_BYTES] {
    let mut raw = [0u8; HEADER_BYTES];
    raw[0..4].copy_from_slice(&JOURNAL_MAGIC);
    raw[4..8].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
    raw[8..16].copy_from_slice(&snapshot.length.to_le_bytes());
    raw[16..20].copy_from_slice(&snapshot.crc.to_le_bytes());
    let crc = crc32fast::hash(&raw[..20]);
    raw[20..24].copy_from_slice(&crc.to_le_bytes());
    raw
}

fn le32(raw: &[u8], at: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&raw[at..at + 4]);
    u32::from_le_bytes(bytes)
}

/// The snapshot a journal's header names; `None` for anything that is not a whole, valid
/// header (such a journal holds nothing to replay).
pub fn decode_header(raw: &[u8]) -> Option<SnapshotId> {
    let header = raw.get(..HEADER_BYTES)?;
    if header[0..4] != JOURNAL_MAGIC
        || le32(header, 4) != JOURNAL_VERSION
        || crc32fast::hash(&header[..20]) != le32(header, 20)
    {
        return None;
    }
    let mut length = [0u8; 8];
    length.copy_from_slice(&header[8..16]);
    Some(SnapshotId {
        length: u64::from_le_bytes(length),
        crc: le32(header, 16),
    })
}

/// One record holding `ops`.
pub fn encode_record(ops: &[Op]) -> Vec<u8> {
    let mut payload = Vec::new();
    for op in ops {
        match op {
            Op::Put { key, value } => {
                payload.push(OpKind::Put as u8);
                payload.extend_from_slice(&(key.len() as u32).to_le_bytes());
                payload.extend_from_slice(key.as_bytes());
                payload.extend_from_slice(&(value.len() as u32).to_le_bytes());
                payload.extend_from_slice(value);
            }
            Op::Delete { key } => {
                payload.push(OpKind::Delete as u8);
                payload.extend_from_slice(&(key.len() as u32).to_le_bytes());
                payload.extend_from_slice(key.as_bytes());
            }
        }
    }
    let mut record = Vec::with_capacity(RECORD_HEADER_BYTES + payload.len());
    record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    record
}

/// Reads a length-prefixed byte string at `at`, checked against what is left.
fn take<'a>(payload: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let length = le32(payload.get(*at..*at + 4)?, 0) as usize;
    *at += 4;
    let bytes = payload.get(*at..at.checked_add(length)?)?;
    *at += length;
    Some(bytes)
}

fn decode_ops(payload: &[u8]) -> Option<Vec<Op>> {
    let mut ops = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let kind = payload[at];
        at += 1;
        let key = String::from_utf8(take(payload, &mut at)?.to_vec()).ok()?;
        if kind == OpKind::Put as u8 {
            let value = take(payload, &mut at)?.to_vec();
            ops.push(Op::Put { key, value });
        } else if kind == OpKind::Delete as u8 {
            ops.push(Op::Delete { key });
        } else {
            return None;
        }
    }
    Some(ops)
}

/// Every whole, valid record after the header, in order, and the length of the journal they
/// fill (never panics; allocates no more than the bytes it is given) (where the next append goes: a torn or damaged tail is cut there). A record whose
/// checksum holds but whose ops do not parse is damage too: replay stops before it.
pub fn decode_records(journal: &[u8]) -> (Vec<Vec<Op>>, usize) {
    let mut records = Vec::new();
    let mut at = HEADER_BYTES.min(journal.len());
    while let Some(header) = journal.get(at..at + RECORD_HEADER_BYTES) {
        let length = le32(header, 0) as usize;
        if length > RECORD_BYTES_MAX {
            break;
        }
        let start = at + RECORD_HEADER_BYTES;
        let Some(payload) = journal.get(start..start + length) else {
            break;
        };
        if crc32fast::hash(payload) != le32(header, 4) {
            break;
        }
        let Some(ops) = decode_ops(payload) else {
            break;
        };
        records.push(ops);
        at = start + length;
    }
    (records, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops() -> Vec<Op> {
        vec![
            Op::Put {
                key: "m/streams/00000000000000000007".into(),
                value: br#"{"name":"clicks"}"#.to_vec(),
            },
            Op::Delete {
                key: "m/streams/00000000000000000003".into(),
            },
            Op::Put {
                key: "m/counters".into(),
                value: Vec::new(),
            },
        ]
    }

    fn journal(records: &[Vec<Op>]) -> Vec<u8> {
        let mut journal = encode_header(SnapshotId::of(b"snapshot")).to_vec();
        for ops in records {
            journal.extend(encode_record(ops));
        }
        journal
    }

    #[test]
    fn records_round_trip_and_the_header_names_its_snapshot() {
        let records = vec![ops(), Vec::new(), ops()[..1].to_vec()];
        let bytes = journal(&records);
        assert_eq!(decode_header(&bytes), Some(SnapshotId::of(b"snapshot")));
        assert_ne!(decode_header(&bytes), Some(SnapshotId::of(b"snapshot2")));
        assert_eq!(decode_records(&bytes), (records, bytes.len()));
    }

    #[test]
    fn replay_stops_at_a_torn_or_damaged_record_and_never_panics() {
        let bytes = journal(&[ops(), ops()]);
        let first_end = HEADER_BYTES + encode_record(&ops()).len();
        // Every truncation: whole records before the cut come back, nothing after it.
        for cut in 0..bytes.len() {
            let (records, end) = decode_records(&bytes[..cut]);
            let whole = if cut >= bytes.len() {
                2
            } else if cut >= first_end {
                1
            } else {
                0
            };
            assert_eq!(records.len(), whole, "cut at {cut}");
            assert!(end <= cut);
        }
        // Every flipped bit in the second record: the first still comes back, alone.
        for bit in (first_end * 8)..(bytes.len() * 8) {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let (records, end) = decode_records(&damaged);
            assert_eq!(records, vec![ops()], "bit {bit}");
            assert_eq!(end, first_end);
        }
        // A damaged header names no snapshot.
        for bit in 0..(HEADER_BYTES * 8) {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(decode_header(&damaged), Some(SnapshotId::of(b"snapshot")));
        }
    }

    #[test]
    fn a_forged_length_is_refused_before_anything_is_read() {
        let mut bytes = encode_header(SnapshotId::of(b"")).to_vec();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode_records(&bytes), (Vec::new(), HEADER_BYTES));
        // Inside a record: an op's key length past the payload.
        let mut payload = vec![OpKind::Put as u8];
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        let mut bytes = encode_header(SnapshotId::of(b"")).to_vec();
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        assert_eq!(decode_records(&bytes), (Vec::new(), HEADER_BYTES));
    }
}
