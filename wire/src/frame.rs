//! Length-prefixed frames: the unit every RPC travels in.
//!
//! ```text
//! offset size field
//!  0     4    magic "TSF1"            rejects non-Tailstream peers (HTTP, garbage) at once
//!  4     4    header_crc32            CRC32 of bytes 8..32, checked before any field is used
//!  8     4    body_len                checked against the receiver's maximum before allocating
//! 12     4    body_crc32              CRC32 of the body (or of its first checked_bytes),
//!                                      checked before the body is decoded
//! 16     8    request_id              echoed in the response; clients pipeline
//! 24     2    opcode                  what the request asks (responses echo it)
//! 26     2    status                  0 in requests; the outcome in responses
//! 28     1    flags                   bit 0: this frame is a response
//!                                      bit 1: the body's tail checks itself (see below)
//! 29     1    version                 FRAME_VERSION
//! 30     2    checked_bytes           with flag bit 1: the body bytes body_crc32 covers;
//!                                      else zero
//! ```
//! All integers little-endian. The decoder is incremental: a partial frame is `Ok(None)`.
//!
//! **Self-checked tails.** A produce request ends in a record batch, which the broker verifies
//! whole (CRC-32C, lengths, every record) before trusting any of it; a fetch answer ends in
//! segment entries, which the consumer verifies whole (each entry's CRC32, each batch's
//! CRC-32C). Checksumming those bytes a second time in the frame cost a tenth of a producer's
//! and a broker's CPU, so for exactly those messages (`Opcode::tail_checks_itself`) the frame
//! checksum covers only the message's own fields, the first body part, and the receiver
//! refuses the flag on any other message. Every byte is still covered by a checksum that is
//! verified before it is trusted.

use crate::ids::RequestId;
use crate::status::Status;
use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

pub const FRAME_MAGIC: [u8; 4] = *b"TSF1";
pub const FRAME_VERSION: u8 = 1;
pub const FRAME_HEADER_BYTES: usize = 32;
const FLAG_RESPONSE: u8 = 0b0000_0001;
const FLAG_TAIL_SELF_CHECKED: u8 = 0b0000_0010;

const _: () = assert!(FRAME_HEADER_BYTES == 4 + 4 + 4 + 4 + 8 + 2 + 2 + 1 + 1 + 2);

macro_rules! opcodes {
    ($($(#[$doc:meta])* $name:ident = $value:literal),* $(,)?) => {
        /// What a request asks for. Discriminants are the wire values and never change.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Opcode {
            $($(#[$doc])* $name = $value,)*
        }

        impl Opcode {
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];

            pub fn from_u16(value: u16) -> Option<Opcode> {
                match value {
                    $($value => Some(Opcode::$name),)*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    /// Liveness probe; empty body both ways.
    Ping = 1,
    /// Server → client, unsolicited, as a response frame with request id 0 and an empty body:
    /// the server closes this connection (it was idle, or the server is going away) once the
    /// requests it already received are answered. Send new requests on a new connection.
    GoAway = 2,
    /// Broker → coordinator: join the cluster, get a server id and assignments.
    RegisterBroker = 10,
    /// Broker → coordinator: still alive.
    BrokerHeartbeat = 11,
    /// Client → coordinator: a fresh, never reused producer id.
    AllocateProducerId = 12,
    CreateStream = 20,
    DescribeStream = 21,
    ListStreams = 22,
    /// Client → coordinator: the registered brokers and whether each is alive.
    ListBrokers = 23,
    /// Client → coordinator: delete a stream (its owners and backups drop its data).
    DeleteStream = 24,
    /// Client → coordinator: the most recent recoveries and their phase times.
    ListRecoveries = 25,
    /// Client → coordinator: the leader, its term and the standbys.
    DescribeLeadership = 26,
    /// Broker → coordinator: a peer did not answer its pings (the coordinator checks it
    /// itself before declaring it crashed).
    ReportSuspect = 13,
    /// Broker → coordinator: make logs' heads and oldest kept segments durable (a record in a
    /// new head is acknowledged only after).
    ReportLogBounds = 14,
    /// Broker → coordinator: a user's SCRAM credentials (salted keys, never a password), to
    /// check a client's authentication against.
    LookupCredentials = 15,
    /// Client → broker or coordinator client listener: one step of the connection's SCRAM
    /// exchange (client-first, then client-final). On a listener that does not require
    /// authentication it is answered `NotRequired`.
    Authenticate = 16,
    /// Broker → coordinator peer listener: the cluster's producer id binding key, so the
    /// broker can refuse a batch under another user's producer id by itself.
    ProducerIdBindingKey = 17,
    /// Client → coordinator: add a user with its salted SCRAM credentials.
    CreateUser = 27,
    /// Client → coordinator: remove a user.
    DeleteUser = 28,
    /// Client → coordinator: the users' names and mechanisms.
    ListUsers = 29,
    /// Client → coordinator: add an access control rule.
    AddAcl = 34,
    /// Client → coordinator: remove an access control rule.
    RemoveAcl = 35,
    /// → coordinator: every access control rule (brokers enforce them).
    ListAcls = 36,
    /// Client → coordinator: grow a stream to more streamlets (answered with its metadata).
    AddStreamlets = 37,
    /// Client → coordinator: change a stream's retention (answered with its metadata).
    AlterRetention = 38,
    /// Client → coordinator: delete a streamlet's logs' records before offsets (answered
    /// empty).
    DeleteRecords = 39,
    /// Client → broker: append one record batch to a streamlet.
    Produce = 30,
    /// Client → broker: read committed entries of one segment of a group.
    Fetch = 31,
    /// Client → broker: the groups of every log of a streamlet.
    ListGroups = 32,
    /// Client → broker: where a record offset of a log is (a group, segment and position).
    LocateOffset = 33,
    /// Coordinator → broker: own (and create) these streamlets.
    AssignStreamlets = 40,
    /// Coordinator → broker: rebuild a crashed broker's streamlet from its backups, then
    /// serve it.
    RecoverStreamlet = 41,
    /// Primary → backup: reserve a pre-zeroed buffer for one segment replica.
    ReplicaOpen = 50,
    /// Primary → backup: the replica is complete; flush it to its segment file.
    ReplicaClose = 51,
    /// Primary → backup: drop a replica (its segment was freed).
    ReplicaFree = 52,
    /// Anyone → backup: the replicas this backup holds (of one primary, or all).
    ListReplicas = 53,
    /// Anyone → backup: bytes of a replica's valid prefix.
    ReadReplica = 54,
    /// Primary → backup, RPC replication mode only: entries for the backup to verify and copy.
    ReplicaWrite = 55,
    /// Primary → backup: the replica set of a segment changed; this replica is current at the
    /// given epoch (and complete, if it was being filled).
    ReplicaSetEpoch = 56,
    /// Primary → backup, rdma backend: connect queue pairs (endpoints exchanged over RPC).
    RdmaConnect = 57,
    /// New owner → backup: a closed replica of a crashed primary's segment now belongs to
    /// the new owner, at a new epoch (recovery adopts copies instead of making new ones).
    ReplicaAdopt = 58,
    /// → coordinator: join (or rejoin) a consumer group; answered once it rebalanced.
    GroupJoin = 60,
    /// → coordinator: bring (leader) or get (every member) the group's assignments.
    GroupSync = 61,
    /// → coordinator: a group member is alive.
    GroupHeartbeat = 62,
    /// → coordinator: members leave a group.
    GroupLeave = 63,
    /// → coordinator: commit a group's offsets (answered once on disk).
    OffsetCommit = 64,
    /// → coordinator: a group's committed offsets.
    OffsetFetch = 65,
    /// → coordinator: every consumer group, its members and its lag per partition.
    DescribeConsumerGroups = 66,
    /// → coordinator: the named groups with their members, or every group's phase.
    DescribeGroups = 67,
    /// → coordinator: remove groups without members and their committed offsets.
    DeleteGroups = 68,
    /// → coordinator: remove some committed offsets of a group without members.
    OffsetDelete = 69,
}

impl Opcode {
    /// Whether this message's body ends in bytes that carry and are checked by their own
    /// checksums (so the frame checksum may cover only the part before them): a produce
    /// request's record batch, a fetch answer's segment entries.
    pub fn tail_checks_itself(self, is_response: bool) -> bool {
        matches!(
            (self, is_response),
            (Opcode::Produce, false) | (Opcode::Fetch, true)
        )
    }
}

/// A frame's fixed header, decoded and checksum-verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Raw opcode: an unknown value must still be answerable with `Status::UnknownOpcode`.
    pub opcode_raw: u16,
    pub status_raw: u16,
    pub is_response: bool,
    pub request_id: RequestId,
    pub body_len: u32,
    pub body_crc32: u32,
    /// The body bytes `body_crc32` covers when the rest checks itself; `None`: all of it.
    pub checked_bytes: Option<u16>,
}

impl FrameHeader {
    pub fn request(opcode: Opcode, request_id: RequestId) -> Self {
        Self {
            opcode_raw: opcode as u16,
            status_raw: Status::Ok as u16,
            is_response: false,
            request_id,
            body_len: 0,
            body_crc32: 0,
            checked_bytes: None,
        }
    }

    pub fn response(opcode_raw: u16, request_id: RequestId, status: Status) -> Self {
        Self {
            opcode_raw,
            status_raw: status as u16,
            is_response: true,
            request_id,
            body_len: 0,
            body_crc32: 0,
            checked_bytes: None,
        }
    }

    pub fn opcode(&self) -> Option<Opcode> {
        Opcode::from_u16(self.opcode_raw)
    }

    /// Header and body together.
    pub fn frame_bytes(&self) -> usize {
        FRAME_HEADER_BYTES + self.body_len as usize
    }

    /// Unknown status values from a newer peer are treated as internal errors.
    pub fn status(&self) -> Status {
        Status::from_u16(self.status_raw).unwrap_or(Status::Internal)
    }

    /// Encodes the header for a body made of `parts` (written after it, in order), filling in
    /// the body length and checksum. For a message whose tail checks itself, sent as its own
    /// fields (the first part) followed by that tail, the checksum covers the first part only.
    pub fn encode_for_body(mut self, parts: &[&[u8]]) -> [u8; FRAME_HEADER_BYTES] {
        let tail_checks_itself = self
            .opcode()
            .is_some_and(|opcode| opcode.tail_checks_itself(self.is_response));
        self.checked_bytes = match parts {
            [fields, _, ..] if tail_checks_itself => u16::try_from(fields.len()).ok(),
            _ => None,
        };
        let checked_parts = if self.checked_bytes.is_some() {
            1
        } else {
            parts.len()
        };
        let mut crc = crc32fast::Hasher::new();
        for part in &parts[..checked_parts] {
            crc.update(part);
        }
        let len: usize = parts.iter().map(|part| part.len()).sum();
        // Senders only build bodies from bounded data far below 4 GiB; saturate rather than
        // wrap so an impossible overflow is caught by the receiver's length check.
        self.body_len = u32::try_from(len).unwrap_or(u32::MAX);
        self.body_crc32 = crc.finalize();
        self.encode()
    }

    /// The body bytes the body checksum covers.
    fn checked_len(&self) -> usize {
        self.checked_bytes
            .map_or(self.body_len as usize, usize::from)
    }

    fn encode(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut out = [0u8; FRAME_HEADER_BYTES];
        out[0..4].copy_from_slice(&FRAME_MAGIC);
        out[8..12].copy_from_slice(&self.body_len.to_le_bytes());
        out[12..16].copy_from_slice(&self.body_crc32.to_le_bytes());
        out[16..24].copy_from_slice(&self.request_id.0.to_le_bytes());
        out[24..26].copy_from_slice(&self.opcode_raw.to_le_bytes());
        out[26..28].copy_from_slice(&self.status_raw.to_le_bytes());
        let mut flags = if self.is_response { FLAG_RESPONSE } else { 0 };
        if let Some(checked) = self.checked_bytes {
            flags |= FLAG_TAIL_SELF_CHECKED;
            out[30..32].copy_from_slice(&checked.to_le_bytes());
        }
        out[28] = flags;
        out[29] = FRAME_VERSION;
        let crc = crc32fast::hash(&out[8..]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and verifies a header. Nothing in it is trusted until the checksum matched.
    pub fn decode(raw: &[u8; FRAME_HEADER_BYTES]) -> Result<Self, FrameError> {
        if raw[0..4] != FRAME_MAGIC {
            return Err(FrameError::BadMagic);
        }
        let stored = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
        if crc32fast::hash(&raw[8..]) != stored {
            return Err(FrameError::HeaderChecksum);
        }
        if raw[29] != FRAME_VERSION {
            return Err(FrameError::UnsupportedVersion(raw[29]));
        }
        let le16 = |at: usize| u16::from_le_bytes([raw[at], raw[at + 1]]);
        let le32 = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&raw[16..24]);
        let flags = raw[28];
        let header = Self {
            body_len: le32(8),
            body_crc32: le32(12),
            request_id: RequestId(u64::from_le_bytes(id)),
            opcode_raw: le16(24),
            status_raw: le16(26),
            is_response: flags & FLAG_RESPONSE != 0,
            checked_bytes: (flags & FLAG_TAIL_SELF_CHECKED != 0).then(|| le16(30)),
        };
        if let Some(checked) = header.checked_bytes {
            // Only a message whose decoder verifies its tail may leave it out of the frame
            // checksum, and the checked part lies within the body.
            let allowed = header
                .opcode()
                .is_some_and(|opcode| opcode.tail_checks_itself(header.is_response));
            if !allowed || u32::from(checked) > header.body_len {
                return Err(FrameError::BadFlags(flags));
            }
        }
        Ok(header)
    }
}

/// A whole frame: verified header and verified body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub header: FrameHeader,
    pub body: Bytes,
}

/// Why a byte stream stopped being a valid frame stream. Every variant ends the connection:
/// after a bad header we can no longer find the next frame boundary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("not a Tailstream frame (bad magic)")]
    BadMagic,
    #[error("frame header checksum mismatch")]
    HeaderChecksum,
    #[error("unsupported frame version {0}")]
    UnsupportedVersion(u8),
    #[error("frame flags {0:#04x} do not fit the frame")]
    BadFlags(u8),
    #[error("frame body of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        len: u32,
        max: u32,
        request_id: RequestId,
        opcode_raw: u16,
    },
    #[error("frame body checksum mismatch")]
    BodyChecksum {
        request_id: RequestId,
        opcode_raw: u16,
    },
}

impl FrameError {
    /// The status to answer with, and the request to answer, when the header was readable.
    pub fn reply_to(&self) -> Option<(RequestId, u16, Status)> {
        match *self {
            FrameError::TooLarge {
                request_id,
                opcode_raw,
                ..
            } => Some((request_id, opcode_raw, Status::FrameTooLarge)),
            FrameError::BodyChecksum {
                request_id,
                opcode_raw,
            } => Some((request_id, opcode_raw, Status::ChecksumMismatch)),
            _ => None,
        }
    }
}

/// Incremental frame decoder for a receive buffer.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    body_bytes_max: u32,
}

impl FrameDecoder {
    pub fn new(body_bytes_max: u32) -> Self {
        Self { body_bytes_max }
    }

    pub fn body_bytes_max(&self) -> u32 {
        self.body_bytes_max
    }

    /// The verified header at the front of `buf`, once its 32 bytes are there; refuses a body
    /// longer than the maximum before anyone allocates room for it.
    pub fn peek(&self, buf: &[u8]) -> Result<Option<FrameHeader>, FrameError> {
        let Some(raw) = buf.first_chunk::<FRAME_HEADER_BYTES>() else {
            return Ok(None);
        };
        let header = FrameHeader::decode(raw)?;
        if header.body_len > self.body_bytes_max {
            return Err(FrameError::TooLarge {
                len: header.body_len,
                max: self.body_bytes_max,
                request_id: header.request_id,
                opcode_raw: header.opcode_raw,
            });
        }
        Ok(Some(header))
    }

    /// Takes one whole frame off the front of `buf`, or returns `Ok(None)` when more bytes are
    /// needed. Allocates nothing: the caller decides when to make room for a large body
    /// (`frame_bytes` of the `peek`ed header), so a server can bound that memory.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some(header) = self.peek(buf)? else {
            return Ok(None);
        };
        if buf.len() < header.frame_bytes() {
            return Ok(None);
        }
        buf.advance(FRAME_HEADER_BYTES);
        let body = buf.split_to(header.body_len as usize).freeze();
        // `decode` checked that the covered part lies within the body.
        let checked = body.get(..header.checked_len()).unwrap_or(&body);
        if crc32fast::hash(checked) != header.body_crc32 {
            return Err(FrameError::BodyChecksum {
                request_id: header.request_id,
                opcode_raw: header.opcode_raw,
            });
        }
        Ok(Some(Frame { header, body }))
    }
}

/// Encodes a whole frame into one buffer (for small bodies; large ones are written as the
/// header from `encode_for_body` followed by their parts, without a copy).
pub fn encode_frame(header: FrameHeader, body: &[u8], out: &mut BytesMut) {
    out.extend_from_slice(&header.encode_for_body(&[body]));
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_bytes(body: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        encode_frame(
            FrameHeader::request(Opcode::Produce, RequestId(42)),
            body,
            &mut out,
        );
        out
    }

    #[test]
    fn a_frame_round_trips_and_partial_input_waits() {
        let decoder = FrameDecoder::new(1024);
        let full = frame_bytes(b"hello");
        for cut in 0..full.len() {
            let mut partial = BytesMut::from(&full[..cut]);
            assert_eq!(decoder.decode(&mut partial), Ok(None), "cut at {cut}");
        }
        let mut partial = BytesMut::from(&full[..full.len() - 1]);
        let capacity = partial.capacity();
        assert_eq!(decoder.decode(&mut partial), Ok(None));
        assert_eq!(partial.capacity(), capacity, "decoding reserves nothing");
        let header = decoder.peek(&partial).unwrap().unwrap();
        assert_eq!(header.frame_bytes(), full.len());
        let mut whole = full.clone();
        let frame = decoder.decode(&mut whole).unwrap().unwrap();
        assert_eq!(&frame.body[..], b"hello");
        assert_eq!(frame.header.opcode(), Some(Opcode::Produce));
        assert_eq!(frame.header.request_id, RequestId(42));
        assert!(whole.is_empty());
    }

    #[test]
    fn oversized_bodies_are_refused_before_allocating() {
        let decoder = FrameDecoder::new(4);
        let mut buf = frame_bytes(b"too long");
        assert_eq!(decoder.peek(&buf[..FRAME_HEADER_BYTES]), decoder.peek(&buf));
        let err = decoder.decode(&mut buf).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len: 8, max: 4, .. }));
        assert_eq!(err.reply_to().map(|r| r.2), Some(Status::FrameTooLarge));
    }

    #[test]
    fn any_single_bit_flip_in_a_frame_is_detected() {
        let decoder = FrameDecoder::new(1024);
        let good = frame_bytes(b"payload");
        for bit in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            match decoder.decode(&mut bad) {
                Err(_) => {}
                // A flipped length bit that makes the frame longer just waits for more bytes.
                Ok(None) => {}
                Ok(Some(frame)) => panic!("bit {bit} flip accepted: {frame:?}"),
            }
        }
    }

    #[test]
    fn only_a_self_checked_tail_is_left_out_of_the_body_checksum() {
        let decoder = FrameDecoder::new(1024);
        let header = FrameHeader::request(Opcode::Produce, RequestId(1));
        let parts: [&[u8]; 2] = [b"fields", b"batch"];
        let mut buf = BytesMut::from(&header.encode_for_body(&parts)[..]);
        buf.extend_from_slice(b"fieldsbatch");
        let good = buf.clone();
        let frame = decoder.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.header.checked_bytes, Some(6));
        assert_eq!(&frame.body[..], b"fieldsbatch");
        // A flip in the fields is caught here; one in the tail is the batch's to catch.
        for (at, caught) in [(FRAME_HEADER_BYTES, true), (FRAME_HEADER_BYTES + 8, false)] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            assert_eq!(decoder.decode(&mut bad).is_err(), caught, "flip at {at}");
        }
        // One part only, or any other message: the whole body is covered.
        let whole =
            FrameHeader::request(Opcode::Produce, RequestId(2)).encode_for_body(&[b"fieldsbatch"]);
        assert_eq!(FrameHeader::decode(&whole).unwrap().checked_bytes, None);
        let other =
            FrameHeader::request(Opcode::CreateStream, RequestId(3)).encode_for_body(&parts);
        assert_eq!(FrameHeader::decode(&other).unwrap().checked_bytes, None);
        let answer = FrameHeader::response(Opcode::Fetch as u16, RequestId(4), Status::Ok)
            .encode_for_body(&parts);
        assert_eq!(FrameHeader::decode(&answer).unwrap().checked_bytes, Some(6));
    }

    #[test]
    fn the_self_checked_flag_is_refused_where_the_tail_does_not_check_itself() {
        let mut raw = FrameHeader::request(Opcode::Produce, RequestId(1))
            .encode_for_body(&[b"fields", b"batch"]);
        let reseal = |raw: &mut [u8; FRAME_HEADER_BYTES]| {
            let crc = crc32fast::hash(&raw[8..]);
            raw[4..8].copy_from_slice(&crc.to_le_bytes());
        };
        // A ping that claims it.
        let mut ping = raw;
        ping[24..26].copy_from_slice(&(Opcode::Ping as u16).to_le_bytes());
        reseal(&mut ping);
        assert!(matches!(
            FrameHeader::decode(&ping),
            Err(FrameError::BadFlags(_))
        ));
        // A checked part longer than the body.
        raw[30..32].copy_from_slice(&100u16.to_le_bytes());
        reseal(&mut raw);
        assert!(matches!(
            FrameHeader::decode(&raw),
            Err(FrameError::BadFlags(_))
        ));
    }

    #[test]
    fn garbage_is_rejected_by_magic() {
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n.........."[..]);
        assert_eq!(
            FrameDecoder::new(1024).decode(&mut buf),
            Err(FrameError::BadMagic)
        );
    }
}
