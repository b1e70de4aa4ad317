//! The coordinator file store's journal: the writes of each change since the last snapshot,
//! appended (the store itself is `tailstream_coordinator::persist::file`).
//!
//! ```text
//! header (once, 28 bytes)
//!  0  4  magic "TSMJ"     4  4  version (2)
//!  8  8  the snapshot's length in bytes     16  4  its CRC32     20  4  its CRC-32C
//! 24  4  CRC32 of bytes 0..24
//! record (one per saved change; never empty)
//!  0  4  payload length (1..=RECORD_BYTES_MAX)    4  4  CRC32 of bytes 0..4 and the payload
//!  8  ..  payload: ops, back to back
//! op
//!  0  1  kind (1 put, 2 delete)   1  4  key length   5  ..  key   [put: 4  value length, value]
//! ```
//!
//! A journal names the snapshot it follows (length and two checksums): one left behind by a
//! compaction that wrote a newer snapshot but died before replacing the journal is recognised
//! and ignored, never replayed over state that already holds it. Each append is fsynced before
//! the next starts, so only the last record can be torn by a crash: a record that fails its
//! checksum and reaches the end of the file is such a tear ([`Tail::Torn`], never
//! acknowledged); one followed by further bytes is damage ([`Tail::Damaged`]), which the store
//! refuses to load past rather than drop acknowledged changes silently. Pure encoding and
//! decoding.

/// One write of a change: a key (the coordinator's one-key-per-object layout) set or removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalOp {
    Put { key: String, value: Vec<u8> },
    Delete { key: String },
}

use JournalOp as Op;

pub const JOURNAL_MAGIC: [u8; 4] = *b"TSMJ";
pub const JOURNAL_VERSION: u32 = 2;
pub const HEADER_BYTES: usize = 28;
const RECORD_HEADER_BYTES: usize = 8;
/// Largest record read back: a change is a few objects; anything larger is damage.
pub const RECORD_BYTES_MAX: usize = 64 << 20;

const _: () = assert!(HEADER_BYTES == 4 + 4 + 8 + 4 + 4 + 4);
const _: () = assert!(RECORD_HEADER_BYTES == 4 + 4);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum OpKind {
    Put = 1,
    Delete = 2,
}

/// What a journal follows: a snapshot, known by its length and two independent checksums
/// (a newer snapshot of the same length must not pass for the old one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotId {
    pub length: u64,
    pub crc: u32,
    pub crc32c: u32,
}

impl SnapshotId {
    pub fn of(snapshot: &[u8]) -> Self {
        Self {
            length: snapshot.len() as u64,
            crc: crc32fast::hash(snapshot),
            crc32c: crc32c::crc32c(snapshot),
        }
    }
}

/// How a journal ends after its last valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Nothing follows.
    Clean,
    /// A record cut short by a crash: it reaches the end of the file (never acknowledged).
    Torn,
    /// A bad record with bytes after it: not what a crash leaves.
    Damaged,
}

pub fn encode_header(snapshot: SnapshotId) -> [u8; HEADER_BYTES] {
    let mut raw = [0u8; HEADER_BYTES];
    raw[0..4].copy_from_slice(&JOURNAL_MAGIC);
    raw[4..8].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
    raw[8..16].copy_from_slice(&snapshot.length.to_le_bytes());
    raw[16..20].copy_from_slice(&snapshot.crc.to_le_bytes());
    raw[20..24].copy_from_slice(&snapshot.crc32c.to_le_bytes());
    let crc = crc32fast::hash(&raw[..24]);
    raw[24..28].copy_from_slice(&crc.to_le_bytes());
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
        || crc32fast::hash(&header[..24]) != le32(header, 24)
    {
        return None;
    }
    let mut length = [0u8; 8];
    length.copy_from_slice(&header[8..16]);
    Some(SnapshotId {
        length: u64::from_le_bytes(length),
        crc: le32(header, 16),
        crc32c: le32(header, 20),
    })
}

/// One record holding `ops` (the store appends none for a change without writes, and
/// writes a snapshot instead of a record over [`RECORD_BYTES_MAX`]).
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
    let length = (payload.len() as u32).to_le_bytes();
    let mut record = Vec::with_capacity(RECORD_HEADER_BYTES + payload.len());
    record.extend_from_slice(&length);
    record.extend_from_slice(&record_crc(&length, &payload).to_le_bytes());
    record.extend_from_slice(&payload);
    record
}

/// A record's checksum: its length and payload (a run of zeros is no valid record).
fn record_crc(length: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(length);
    hasher.update(payload);
    hasher.finalize()
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

/// Every whole, valid record after the header, in order; the length of the journal they fill
/// (where the next append goes); and how the journal ends after them. Never panics, and
/// allocates no more than the bytes it is given. A record whose checksum holds but whose ops
/// do not parse is damage.
pub fn decode_records(journal: &[u8]) -> (Vec<Vec<Op>>, usize, Tail) {
    let mut records = Vec::new();
    let mut at = HEADER_BYTES.min(journal.len());
    loop {
        if at == journal.len() {
            return (records, at, Tail::Clean);
        }
        let Some(header) = journal.get(at..at + RECORD_HEADER_BYTES) else {
            return (records, at, Tail::Torn);
        };
        let length = le32(header, 0) as usize;
        let start = at + RECORD_HEADER_BYTES;
        // A crash can cut only the last append: a record claiming to reach the file's end,
        // or a zero-filled tail (a size made durable before its data), is such a tear.
        let reaches_end = start.saturating_add(length) >= journal.len();
        let zeros_to_end = journal[at..].iter().all(|&b| b == 0);
        let bad = if reaches_end || zeros_to_end {
            Tail::Torn
        } else {
            Tail::Damaged
        };
        if length == 0 || length > RECORD_BYTES_MAX {
            return (records, at, bad);
        }
        let Some(payload) = journal.get(start..start + length) else {
            return (records, at, Tail::Torn);
        };
        if record_crc(&header[0..4], payload) != le32(header, 4) {
            return (records, at, bad);
        }
        let Some(ops) = decode_ops(payload) else {
            return (records, at, Tail::Damaged);
        };
        records.push(ops);
        at = start + length;
    }
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
        let records = vec![ops(), ops()[1..].to_vec(), ops()[..1].to_vec()];
        let bytes = journal(&records);
        assert_eq!(decode_header(&bytes), Some(SnapshotId::of(b"snapshot")));
        assert_ne!(decode_header(&bytes), Some(SnapshotId::of(b"snapshoT")));
        assert_eq!(decode_records(&bytes), (records, bytes.len(), Tail::Clean));
        // A run of zeros (a tail a crash may leave) is no record.
        let mut zeros = bytes.clone();
        zeros.extend_from_slice(&[0u8; 64]);
        assert_eq!(decode_records(&zeros).2, Tail::Torn);
    }

    #[test]
    fn replay_stops_at_a_torn_or_damaged_record_and_never_panics() {
        let bytes = journal(&[ops(), ops(), ops()]);
        let record = encode_record(&ops()).len();
        let first_end = HEADER_BYTES + record;
        // Every truncation: whole records before the cut come back, the rest is a torn tail.
        for cut in HEADER_BYTES..bytes.len() {
            let (records, end, tail) = decode_records(&bytes[..cut]);
            assert_eq!(records.len(), (cut - HEADER_BYTES) / record, "cut at {cut}");
            assert!(end <= cut);
            let expected = if end == cut { Tail::Clean } else { Tail::Torn };
            assert_eq!(tail, expected, "cut at {cut}");
        }
        // Every flipped bit in the second record: the first comes back, alone, and the damage
        // is told from a tear (the third record follows it), except where the flip makes the
        // second claim to reach the end of the file.
        for bit in (first_end * 8)..((first_end + record) * 8) {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let (records, end, tail) = decode_records(&damaged);
            assert_eq!(records, vec![ops()], "bit {bit}");
            assert_eq!(end, first_end);
            assert_ne!(tail, Tail::Clean, "bit {bit}");
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
        assert_eq!(
            decode_records(&bytes),
            (Vec::new(), HEADER_BYTES, Tail::Torn)
        );
        // Inside a record: an op's key length past the payload.
        let mut payload = vec![OpKind::Put as u8];
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        let length = (payload.len() as u32).to_le_bytes();
        let mut bytes = encode_header(SnapshotId::of(b"")).to_vec();
        bytes.extend_from_slice(&length);
        bytes.extend_from_slice(&record_crc(&length, &payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        assert_eq!(
            decode_records(&bytes),
            (Vec::new(), HEADER_BYTES, Tail::Damaged)
        );
    }
}
