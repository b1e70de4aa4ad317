//! The coordinator's committed-offsets file: an append-only sequence of records,
//!
//! ```text
//! offset size field
//!  0     4    body length            little-endian, at most RECORD_BODY_BYTES_MAX
//!  4     4    CRC32 of the body
//!  8     ..   body                   an `OffsetsRecord` (one group's commit)
//! ```
//!
//! Appended and fsynced before a commit is answered; compacted by writing a new file of one
//! record per group and renaming it over the old one. A reader stops at the first record that
//! is torn or fails its checksum (the tail of a crash mid-append): what follows is never
//! trusted, and the writer truncates the file to the valid prefix before appending again.

use crate::codec::{Decode, Encode};
use crate::messages::OffsetsRecord;
use bytes::{BufMut, Bytes, BytesMut};

pub const RECORD_HEADER_BYTES: usize = 8;
/// Largest record body: a group's commit carries at most this many bytes (the coordinator's
/// request body limit is smaller).
pub const RECORD_BODY_BYTES_MAX: u32 = 4 << 20;

/// One record, framed.
pub fn encode_record(record: &OffsetsRecord) -> Bytes {
    let body = record.to_bytes();
    let mut out = BytesMut::with_capacity(RECORD_HEADER_BYTES + body.len());
    // Bodies come from bounded requests, far below 4 GiB.
    out.put_u32_le(u32::try_from(body.len()).unwrap_or(u32::MAX));
    out.put_u32_le(crc32fast::hash(&body));
    out.put_slice(&body);
    out.freeze()
}

/// The records of a file, in order, up to the first damaged one.
#[derive(Debug)]
pub struct Records {
    bytes: Bytes,
    at: usize,
}

impl Records {
    pub fn new(bytes: Bytes) -> Self {
        Self { bytes, at: 0 }
    }

    /// Bytes of whole, valid records read so far: where the file's valid prefix ends once the
    /// iterator returned `None`.
    pub fn valid_len(&self) -> usize {
        self.at
    }
}

impl Iterator for Records {
    type Item = OffsetsRecord;

    fn next(&mut self) -> Option<OffsetsRecord> {
        let header = self.bytes.get(self.at..self.at + RECORD_HEADER_BYTES)?;
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if length > RECORD_BODY_BYTES_MAX {
            return None;
        }
        let start = self.at + RECORD_HEADER_BYTES;
        let body = self.bytes.get(start..start + length as usize)?;
        if crc32fast::hash(body) != crc {
            return None;
        }
        let record =
            OffsetsRecord::decode_exact(self.bytes.slice(start..start + length as usize)).ok()?;
        self.at = start + length as usize;
        Some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::CommittedOffset;

    fn record(group: &str, offset: u64) -> OffsetsRecord {
        OffsetsRecord {
            group: group.into(),
            offsets: vec![CommittedOffset {
                topic: "t".into(),
                partition: 3,
                offset,
                metadata: String::new(),
            }],
            removed: Default::default(),
        }
    }

    #[test]
    fn records_read_back_up_to_a_torn_or_flipped_tail() {
        let mut file = BytesMut::new();
        for i in 0..3 {
            file.extend_from_slice(&encode_record(&record("g", i)));
        }
        let whole = file.len();
        let all: Vec<_> = Records::new(file.clone().freeze()).collect();
        assert_eq!(all.len(), 3);
        for cut in 0..whole {
            let mut records = Records::new(file.clone().freeze().slice(..cut));
            let read = records.by_ref().count();
            assert!(read < 3, "cut at {cut}");
            assert!(records.valid_len() <= cut);
        }
        for bit in 0..whole * 8 {
            let mut flipped = file.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let mut records = Records::new(flipped.freeze());
            let read: Vec<_> = records.by_ref().collect();
            // Whatever is read is exactly what was written, in order.
            for (i, r) in read.iter().enumerate() {
                assert_eq!(*r, record("g", i as u64), "flip {bit}");
            }
        }
    }
}
