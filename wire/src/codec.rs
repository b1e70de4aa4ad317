//! Bounded little-endian primitives that every message is built from.
//!
//! `WireReader` never panics and never allocates more than the input it was given: every read
//! checks the remaining length first, and every variable-length field has an explicit maximum
//! that is checked before the field is taken. Byte fields are zero-copy slices of the input.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Why a message body could not be decoded. The peer sent something we refuse; it never
/// means our own state is damaged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("truncated {what}: needed {needed} bytes, {remaining} remain")]
    Truncated {
        what: &'static str,
        needed: usize,
        remaining: usize,
    },
    #[error("{what} is {len} long, the maximum is {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("invalid {what}: {value}")]
    InvalidValue { what: &'static str, value: u64 },
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 { what: &'static str },
    #[error("{count} unexpected trailing bytes after the message")]
    TrailingBytes { count: usize },
}

/// Reads fields from a message body, front to back.
#[derive(Debug, Clone)]
pub struct WireReader {
    buf: Bytes,
}

impl WireReader {
    pub fn new(buf: Bytes) -> Self {
        Self { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, what: &'static str, n: usize) -> Result<Bytes, DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                what,
                needed: n,
                remaining: self.buf.len(),
            });
        }
        Ok(self.buf.split_to(n))
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(what, N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&bytes);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::InvalidValue {
                what,
                value: u64::from(other),
            }),
        }
    }

    /// A `u32` length followed by that many bytes; the length is checked against `max` before
    /// anything is taken.
    pub fn bytes(&mut self, what: &'static str, max: usize) -> Result<Bytes, DecodeError> {
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(DecodeError::TooLong { what, len, max });
        }
        self.take(what, len)
    }

    /// Like `bytes`, but the content must be UTF-8.
    pub fn string(&mut self, what: &'static str, max: usize) -> Result<String, DecodeError> {
        let raw = self.bytes(what, max)?;
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::InvalidUtf8 { what })
    }

    /// A `u32` element count, checked against `max` and against what the remaining bytes can
    /// hold (`min_element_bytes` each), so a forged count cannot make us reserve memory.
    pub fn count(
        &mut self,
        what: &'static str,
        max: usize,
        min_element_bytes: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.u32(what)? as usize;
        if count > max {
            return Err(DecodeError::TooLong {
                what,
                len: count,
                max,
            });
        }
        let needed = count.saturating_mul(min_element_bytes);
        if needed > self.buf.len() {
            return Err(DecodeError::Truncated {
                what,
                needed,
                remaining: self.buf.len(),
            });
        }
        Ok(count)
    }

    /// Everything left; used for a message's final, unframed payload (a record batch, the
    /// entries of a fetch response).
    pub fn rest(&mut self) -> Bytes {
        self.buf.split_off(0)
    }

    /// Fails unless the whole body was consumed: a longer body is a different message.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                count: self.buf.len(),
            })
        }
    }
}

/// The writing half: thin helpers over `BytesMut` matching `WireReader` field for field.
pub trait WireWrite {
    fn put_bool(&mut self, value: bool);
    fn put_len_bytes(&mut self, value: &[u8]);
    fn put_str(&mut self, value: &str);
    fn put_count(&mut self, count: usize);
}

impl WireWrite for BytesMut {
    fn put_bool(&mut self, value: bool) {
        self.put_u8(u8::from(value));
    }

    fn put_len_bytes(&mut self, value: &[u8]) {
        self.put_count(value.len());
        self.put_slice(value);
    }

    fn put_str(&mut self, value: &str) {
        self.put_len_bytes(value.as_bytes());
    }

    fn put_count(&mut self, count: usize) {
        // Every count and length we send was built from data that already obeys a `*_max`
        // far below u32::MAX; saturating keeps a bug from wrapping into a small, valid length.
        self.put_u32_le(u32::try_from(count).unwrap_or(u32::MAX));
    }
}

/// A message body that can be written to the wire.
pub trait Encode {
    fn encode(&self, out: &mut BytesMut);

    fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out.freeze()
    }
}

/// A message body that can be read from the wire. `decode_exact` is what servers use: it
/// rejects bodies with trailing bytes.
pub trait Decode: Sized {
    fn decode(reader: &mut WireReader) -> Result<Self, DecodeError>;

    fn decode_exact(body: Bytes) -> Result<Self, DecodeError> {
        let mut reader = WireReader::new(body);
        let value = Self::decode(&mut reader)?;
        reader.finish()?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_reads_fail_without_panicking() {
        let mut reader = WireReader::new(Bytes::from_static(&[1, 2, 3]));
        assert!(matches!(
            reader.u32("x"),
            Err(DecodeError::Truncated { needed: 4, .. })
        ));
    }

    #[test]
    fn lengths_are_checked_before_taking() {
        let mut body = BytesMut::new();
        body.put_u32_le(1_000_000);
        let mut reader = WireReader::new(body.freeze());
        assert!(matches!(
            reader.bytes("name", 16),
            Err(DecodeError::TooLong { .. })
        ));
    }

    #[test]
    fn forged_counts_cannot_exceed_the_remaining_bytes() {
        let mut body = BytesMut::new();
        body.put_u32_le(100);
        body.put_u64_le(1);
        let mut reader = WireReader::new(body.freeze());
        assert!(matches!(
            reader.count("items", 1000, 8),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let mut reader = WireReader::new(Bytes::from_static(&[1, 0]));
        assert!(reader.u8("a").is_ok());
        assert_eq!(
            reader.finish(),
            Err(DecodeError::TrailingBytes { count: 1 })
        );
    }
}
