//! Segment entries: the bytes of storage, replication and recovery.
//!
//! A segment is a fixed-size, pre-zeroed buffer holding entries, each `header + payload`:
//!
//! ```text
//! entry header (9 bytes, little-endian)     checksum trailer (13 bytes)
//!  0  1  entry type (0 = no entry)           header { type = Trailer, len = 4, crc32(value) }
//!  1  4  payload length                      value u32: CRC32 chained over every non-trailer
//!  5  4  CRC32 of the payload                       entry header so far; 0 is written as 1
//! ```
//!
//! Every append writes its entry followed by a trailer; trailers stay in place and the next
//! append goes after them. Because buffers are pre-zeroed and 0 is never a valid type or
//! trailer value, a reader can tell written bytes from unwritten ones (see `scan`).

use crate::codec::{Decode, DecodeError, Encode, WireReader, WireWrite};
use crate::ids::{GroupId, LogId, RecordOffset, SegmentId, StreamId, StreamletId};
use bytes::{BufMut, BytesMut};

pub const ENTRY_HEADER_BYTES: usize = 9;
pub const TRAILER_VALUE_BYTES: usize = 4;
pub const TRAILER_BYTES: usize = ENTRY_HEADER_BYTES + TRAILER_VALUE_BYTES;

const _: () = assert!(ENTRY_HEADER_BYTES == 1 + 4 + 4);
const _: () = assert!(TRAILER_BYTES == 13);

/// Kind of a segment entry. 0 is never valid, so zeroed memory reads as "no entry here".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EntryType {
    /// First entry of every segment: its identity and the ids of all segments of its log.
    LogDigest = 1,
    /// One record batch (one producer request).
    Batch = 2,
    /// Checksum trailer written after every append.
    Trailer = 3,
}

impl EntryType {
    pub fn from_u8(value: u8) -> Option<EntryType> {
        match value {
            1 => Some(EntryType::LogDigest),
            2 => Some(EntryType::Batch),
            3 => Some(EntryType::Trailer),
            _ => None,
        }
    }
}

/// A decoded entry header. Only trusted once its place in the checksum chain was verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    pub entry_type: EntryType,
    pub payload_len: u32,
    pub payload_crc32: u32,
}

impl EntryHeader {
    /// The header of an entry carrying `payload`.
    pub fn for_payload(entry_type: EntryType, payload: &[u8]) -> Self {
        Self {
            entry_type,
            // Payloads are bounded by the segment size, which is a u32.
            payload_len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            payload_crc32: crc32fast::hash(payload),
        }
    }

    pub fn encode(&self) -> [u8; ENTRY_HEADER_BYTES] {
        let mut out = [0u8; ENTRY_HEADER_BYTES];
        out[0] = self.entry_type as u8;
        out[1..5].copy_from_slice(&self.payload_len.to_le_bytes());
        out[5..9].copy_from_slice(&self.payload_crc32.to_le_bytes());
        out
    }

    /// Decodes a header; `Err(raw_type)` when the type byte is not a known entry type
    /// (0 means "nothing written here").
    pub fn decode(raw: &[u8; ENTRY_HEADER_BYTES]) -> Result<Self, u8> {
        let entry_type = EntryType::from_u8(raw[0]).ok_or(raw[0])?;
        Ok(Self {
            entry_type,
            payload_len: u32::from_le_bytes([raw[1], raw[2], raw[3], raw[4]]),
            payload_crc32: u32::from_le_bytes([raw[5], raw[6], raw[7], raw[8]]),
        })
    }

    pub fn entry_bytes(&self) -> usize {
        ENTRY_HEADER_BYTES + self.payload_len as usize
    }
}

/// The CRC32 chained over every non-trailer entry header of a segment, in order.
#[derive(Clone, Debug, Default)]
pub struct HeaderChain {
    crc: crc32fast::Hasher,
}

impl HeaderChain {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, header: &[u8; ENTRY_HEADER_BYTES]) {
        self.crc.update(header);
    }

    /// The value a trailer written now must hold: never 0, so that a zeroed (unwritten)
    /// trailer can never match.
    pub fn trailer_value(&self) -> u32 {
        match self.crc.clone().finalize() {
            0 => 1,
            value => value,
        }
    }

    /// The complete 13-byte trailer for the chain as it stands.
    pub fn trailer(&self) -> [u8; TRAILER_BYTES] {
        let value = self.trailer_value().to_le_bytes();
        let header = EntryHeader::for_payload(EntryType::Trailer, &value);
        let mut out = [0u8; TRAILER_BYTES];
        out[..ENTRY_HEADER_BYTES].copy_from_slice(&header.encode());
        out[ENTRY_HEADER_BYTES..].copy_from_slice(&value);
        out
    }
}

/// Upper bound on segments listed in one digest (keeps digests, and their decode, bounded).
pub const DIGEST_SEGMENTS_MAX: usize = 1 << 20;

/// One segment of a log, as listed in a log digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DigestSegment {
    pub group: GroupId,
    pub segment: SegmentId,
}

/// Payload of the `LogDigest` entry that opens every segment: the segment's own identity
/// (so a replica file describes itself) and every live segment of its log up to and including
/// this one, in log order. Recovery uses the newest digest to know which segments must exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogDigest {
    pub stream: StreamId,
    pub streamlet: StreamletId,
    pub log: LogId,
    pub group: GroupId,
    pub segment: SegmentId,
    /// Offset of the first record appended to this segment.
    pub base_offset: RecordOffset,
    pub segments: Vec<DigestSegment>,
}

impl LogDigest {
    pub const FIXED_BYTES: usize = 8 + 4 + 4 + 8 + 8 + 8 + 4;

    pub fn encoded_len(&self) -> usize {
        Self::FIXED_BYTES + self.segments.len() * 16
    }
}

impl Encode for LogDigest {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.stream.0);
        out.put_u32_le(self.streamlet.0);
        out.put_u32_le(self.log.0);
        out.put_u64_le(self.group.0);
        out.put_u64_le(self.segment.0);
        out.put_u64_le(self.base_offset.0);
        out.put_count(self.segments.len());
        for s in &self.segments {
            out.put_u64_le(s.group.0);
            out.put_u64_le(s.segment.0);
        }
    }
}

impl Decode for LogDigest {
    fn decode(r: &mut WireReader) -> Result<Self, DecodeError> {
        let stream = StreamId(r.u64("digest stream")?);
        let streamlet = StreamletId(r.u32("digest streamlet")?);
        let log = LogId(r.u32("digest log")?);
        let group = GroupId(r.u64("digest group")?);
        let segment = SegmentId(r.u64("digest segment")?);
        let base_offset = RecordOffset(r.u64("digest base offset")?);
        let count = r.count("digest segments", DIGEST_SEGMENTS_MAX, 16)?;
        let mut segments = Vec::with_capacity(count);
        for _ in 0..count {
            segments.push(DigestSegment {
                group: GroupId(r.u64("digest entry group")?),
                segment: SegmentId(r.u64("digest entry segment")?),
            });
        }
        Ok(Self {
            stream,
            streamlet,
            log,
            group,
            segment,
            base_offset,
            segments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_zero_is_no_entry() {
        let header = EntryHeader::for_payload(EntryType::Batch, b"abc");
        assert_eq!(EntryHeader::decode(&header.encode()), Ok(header));
        assert_eq!(EntryHeader::decode(&[0u8; ENTRY_HEADER_BYTES]), Err(0));
        assert_eq!(EntryHeader::decode(&[9u8; ENTRY_HEADER_BYTES]), Err(9));
    }

    #[test]
    fn a_trailer_value_is_never_zero() {
        let chain = HeaderChain::new();
        assert_ne!(chain.trailer_value(), 0);
        let trailer = chain.trailer();
        assert_eq!(trailer[0], EntryType::Trailer as u8);
        assert_ne!(&trailer[ENTRY_HEADER_BYTES..], &[0, 0, 0, 0]);
    }

    #[test]
    fn digests_round_trip() {
        let digest = LogDigest {
            stream: StreamId(1),
            streamlet: StreamletId(2),
            log: LogId(3),
            group: GroupId(4),
            segment: SegmentId(5),
            base_offset: RecordOffset(6),
            segments: vec![DigestSegment {
                group: GroupId(4),
                segment: SegmentId(5),
            }],
        };
        let bytes = digest.to_bytes();
        assert_eq!(bytes.len(), digest.encoded_len());
        assert_eq!(LogDigest::decode_exact(bytes), Ok(digest));
    }
}
