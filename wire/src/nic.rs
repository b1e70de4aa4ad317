//! The software one-sided write protocol: what a primary sends to a backup's "NIC" endpoint
//! (the TCP backend standing in for RDMA WRITE).
//!
//! ```text
//! hello (primary → backup, once per connection, 24 bytes)
//!  0  4  magic "TSN1"             4  4  primary index        8  4  primary generation
//! 12  8  ticket                  20  4  CRC32 of bytes 0..20
//!
//! write header (primary → backup, 32 bytes), followed by `len` payload bytes
//!  0  8  buffer key               8  4  offset in buffer     12  4  len
//! 16  8  write id                24  4  reserved (0)         28  4  CRC32 of bytes 0..28
//!
//! completion (backup → primary, 16 bytes), one per write, in write order
//!  0  8  write id                 8  4  status (0 = done)    12  4  CRC32 of bytes 0..12
//! ```
//! The ticket is what the backup granted this primary in every buffer descriptor, over the
//! peer RPC (mutually authenticated where TLS is on): a connection without it is closed before
//! the primary it names is believed, so nobody who merely reaches the NIC port can write into
//! a buffer or fence a live primary by claiming a newer generation.
//!
//! The backup checks the header (checksum, key, bounds) and places the payload at the offset
//! in the registered buffer without looking at it. A bad header or a bad key or bound ends the
//! connection, like an RDMA queue pair entering the error state: the primary learns of it as a
//! failed write and treats the replica as lost.

use crate::ids::ServerId;
use thiserror::Error;

pub const NIC_MAGIC: [u8; 4] = *b"TSN1";
pub const HELLO_BYTES: usize = 24;
pub const WRITE_HEADER_BYTES: usize = 32;
pub const COMPLETION_BYTES: usize = 16;
/// The key no buffer ever has (backups never hand it out): keepalive writes use it.
pub const KEEPALIVE_KEY: u64 = 0;

const _: () = assert!(HELLO_BYTES == 4 + 4 + 4 + 8 + 4);
const _: () = assert!(WRITE_HEADER_BYTES == 8 + 4 + 4 + 8 + 4 + 4);
const _: () = assert!(COMPLETION_BYTES == 8 + 4 + 4);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum NicError {
    #[error("not a Tailstream NIC peer (bad magic)")]
    BadMagic,
    #[error("NIC header checksum mismatch")]
    Checksum,
}

fn le32(raw: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]])
}

fn le64(raw: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&raw[at..at + 8]);
    u64::from_le_bytes(bytes)
}

fn seal(raw: &mut [u8]) {
    let end = raw.len() - 4;
    let crc = crc32fast::hash(&raw[..end]);
    raw[end..].copy_from_slice(&crc.to_le_bytes());
}

fn verify(raw: &[u8]) -> Result<(), NicError> {
    let end = raw.len() - 4;
    if crc32fast::hash(&raw[..end]) == le32(raw, end) {
        Ok(())
    } else {
        Err(NicError::Checksum)
    }
}

/// Opens a connection: who the writes on it come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub primary: ServerId,
    /// The backup's ticket for `primary` (from a buffer descriptor).
    pub ticket: u64,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut raw = [0u8; HELLO_BYTES];
        raw[0..4].copy_from_slice(&NIC_MAGIC);
        raw[4..8].copy_from_slice(&self.primary.index.to_le_bytes());
        raw[8..12].copy_from_slice(&self.primary.generation.to_le_bytes());
        raw[12..20].copy_from_slice(&self.ticket.to_le_bytes());
        seal(&mut raw);
        raw
    }

    pub fn decode(raw: &[u8; HELLO_BYTES]) -> Result<Self, NicError> {
        if raw[0..4] != NIC_MAGIC {
            return Err(NicError::BadMagic);
        }
        verify(raw)?;
        Ok(Self {
            primary: ServerId::new(le32(raw, 4), le32(raw, 8)),
            ticket: le64(raw, 12),
        })
    }
}

/// One one-sided write: `len` bytes at `offset` of the buffer named by `key`. Key 0 names no
/// buffer: a write with key 0 and no payload is a keepalive, completed like any write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteHeader {
    pub key: u64,
    pub offset: u32,
    pub len: u32,
    pub write_id: u64,
}

impl WriteHeader {
    pub fn encode(&self) -> [u8; WRITE_HEADER_BYTES] {
        let mut raw = [0u8; WRITE_HEADER_BYTES];
        raw[0..8].copy_from_slice(&self.key.to_le_bytes());
        raw[8..12].copy_from_slice(&self.offset.to_le_bytes());
        raw[12..16].copy_from_slice(&self.len.to_le_bytes());
        raw[16..24].copy_from_slice(&self.write_id.to_le_bytes());
        seal(&mut raw);
        raw
    }

    pub fn decode(raw: &[u8; WRITE_HEADER_BYTES]) -> Result<Self, NicError> {
        verify(raw)?;
        Ok(Self {
            key: le64(raw, 0),
            offset: le32(raw, 8),
            len: le32(raw, 12),
            write_id: le64(raw, 16),
        })
    }

    /// A write that carries nothing and keeps an idle connection open.
    pub fn keepalive(write_id: u64) -> Self {
        Self {
            key: KEEPALIVE_KEY,
            offset: 0,
            len: 0,
            write_id,
        }
    }

    pub fn is_keepalive(&self) -> bool {
        self.key == KEEPALIVE_KEY && self.len == 0
    }

    /// The write's end, if it fits in a buffer of `capacity` bytes.
    pub fn end_within(&self, capacity: u32) -> Option<u32> {
        self.offset
            .checked_add(self.len)
            .filter(|end| *end <= capacity)
    }
}

/// The backup's answer to one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub write_id: u64,
    /// 0 when the bytes are in the buffer.
    pub status: u32,
}

impl Completion {
    pub fn encode(&self) -> [u8; COMPLETION_BYTES] {
        let mut raw = [0u8; COMPLETION_BYTES];
        raw[0..8].copy_from_slice(&self.write_id.to_le_bytes());
        raw[8..12].copy_from_slice(&self.status.to_le_bytes());
        seal(&mut raw);
        raw
    }

    pub fn decode(raw: &[u8; COMPLETION_BYTES]) -> Result<Self, NicError> {
        verify(raw)?;
        Ok(Self {
            write_id: le64(raw, 0),
            status: le32(raw, 8),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_messages_round_trip_and_any_flipped_bit_is_caught() {
        let hello = Hello {
            primary: ServerId::new(3, 7),
            ticket: 0xfeed_beef_0123_4567,
        };
        assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
        let write = WriteHeader {
            key: u64::MAX - 5,
            offset: 4096,
            len: 77,
            write_id: 12,
        };
        assert_eq!(WriteHeader::decode(&write.encode()), Ok(write));
        let done = Completion {
            write_id: 12,
            status: 0,
        };
        assert_eq!(Completion::decode(&done.encode()), Ok(done));
        let raw = write.encode();
        for bit in 0..raw.len() * 8 {
            let mut bad = raw;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(WriteHeader::decode(&bad).is_err(), "bit {bit}");
        }
        let mut bad = hello.encode();
        bad[0] = b'X';
        assert_eq!(Hello::decode(&bad), Err(NicError::BadMagic));
    }

    #[test]
    fn bounds_are_checked_without_overflow() {
        let write = WriteHeader {
            key: 1,
            offset: u32::MAX,
            len: 2,
            write_id: 0,
        };
        assert_eq!(write.end_within(u32::MAX), None);
        let write = WriteHeader {
            key: 1,
            offset: 10,
            len: 6,
            write_id: 0,
        };
        assert_eq!(write.end_within(16), Some(16));
        assert_eq!(write.end_within(15), None);
    }
}
