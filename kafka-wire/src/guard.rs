//! Walks a request before `kafka-protocol` sees it: every length and count is checked against
//! the bytes left in the frame, and the walk must end exactly at the frame's end.
//!
//! The crate decodes an array by allocating room for as many elements as the wire claims
//! (`Vec::with_capacity(n)`, n up to 2^31) before reading one, and a byte field by allocating
//! its claimed length, so eight hostile bytes could ask for gigabytes. After this walk every
//! count is at most the bytes that follow it (each element takes at least one byte), so what
//! the crate allocates is bounded by a small multiple of the frame, which is itself capped.

use super::shapes::{Field, Kind};
use bytes::Bytes;
use thiserror::Error;

/// Arrays nest at most this deep in any shape served (a guard against a shape table bug, not
/// against input: input cannot add depth).
const DEPTH_MAX: usize = 4;

/// Why a request was refused before decoding. The connection is closed: after a malformed
/// request nothing guarantees where the next one starts.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GuardError {
    #[error("request truncated at byte {at}")]
    Truncated { at: usize },
    #[error("negative length {length} at byte {at}")]
    NegativeLength { length: i64, at: usize },
    #[error("length {length} at byte {at} exceeds the {left} bytes left in the request")]
    BeyondFrame { length: u64, left: usize, at: usize },
    #[error("{left} bytes left over after the request's last field")]
    TrailingBytes { left: usize },
    #[error("a varint at byte {at} is longer than 5 bytes")]
    BadVarint { at: usize },
}

/// A cursor over a request frame that never reads past its end.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    pub fn position(&self) -> usize {
        self.at
    }

    pub fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], GuardError> {
        if n > self.left() {
            return Err(GuardError::BeyondFrame {
                length: n as u64,
                left: self.left(),
                at: self.at,
            });
        }
        let taken = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(taken)
    }

    /// Skips a fixed-size field.
    fn skip_fixed(&mut self, n: usize) -> Result<(), GuardError> {
        let at = self.at;
        self.take(n).map_err(|_| GuardError::Truncated { at })?;
        Ok(())
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], GuardError> {
        let at = self.at;
        let bytes = self.take(N).map_err(|_| GuardError::Truncated { at })?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub fn i16(&mut self) -> Result<i16, GuardError> {
        Ok(i16::from_be_bytes(self.fixed()?))
    }

    pub fn i32(&mut self) -> Result<i32, GuardError> {
        Ok(i32::from_be_bytes(self.fixed()?))
    }

    pub fn uvarint(&mut self) -> Result<u32, GuardError> {
        let at = self.at;
        let mut value = 0u32;
        for i in 0..5 {
            let [byte] = self.fixed::<1>()?;
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(GuardError::BadVarint { at })
    }

    /// A length read at `at` that is -1 (null) or fits what is left; the count of bytes or
    /// elements that follow it.
    fn length(&mut self, length: i64, at: usize) -> Result<usize, GuardError> {
        match length {
            -1 => Ok(0),
            n if n < -1 => Err(GuardError::NegativeLength { length: n, at }),
            n if n as u64 > self.left() as u64 => Err(GuardError::BeyondFrame {
                length: n as u64,
                left: self.left(),
                at,
            }),
            n => Ok(n as usize),
        }
    }

    /// An i16-length string; its bytes, or `None` for null (-1).
    pub fn string(&mut self) -> Result<Option<&'a [u8]>, GuardError> {
        let at = self.at;
        let length = i64::from(self.i16()?);
        let n = self.length(length, at)?;
        let bytes = self.take(n)?;
        Ok((length >= 0).then_some(bytes))
    }

    /// Tagged fields (flexible versions): a count, then (tag, size, bytes) each.
    pub fn tagged_fields(&mut self) -> Result<(), GuardError> {
        let at = self.at;
        let count = self.uvarint()?;
        let count = self.length(i64::from(count), at)?;
        for _ in 0..count {
            self.uvarint()?;
            let at = self.at;
            let size = self.uvarint()?;
            let size = self.length(i64::from(size), at)?;
            self.take(size)?;
        }
        Ok(())
    }
}

/// Checks that `body` is exactly one request of `shape` at `version`, every length within it.
pub(crate) fn check_body(shape: &[Field], version: i16, body: &Bytes) -> Result<(), GuardError> {
    let mut cursor = Cursor::new(body);
    walk(shape, version, &mut cursor, 0)?;
    match cursor.left() {
        0 => Ok(()),
        left => Err(GuardError::TrailingBytes { left }),
    }
}

fn walk(
    shape: &[Field],
    version: i16,
    cursor: &mut Cursor<'_>,
    depth: usize,
) -> Result<(), GuardError> {
    for field in shape.iter().filter(|f| f.present_in(version)) {
        match field.kind {
            Kind::I8 => cursor.skip_fixed(1)?,
            Kind::I16 => cursor.skip_fixed(2)?,
            Kind::I32 => cursor.skip_fixed(4)?,
            Kind::I64 => cursor.skip_fixed(8)?,
            Kind::Str => {
                cursor.string()?;
            }
            Kind::Bytes => {
                let at = cursor.position();
                let length = i64::from(cursor.i32()?);
                let n = cursor.length(length, at)?;
                cursor.take(n)?;
            }
            Kind::Array(element) => {
                let at = cursor.position();
                let length = i64::from(cursor.i32()?);
                let count = cursor.length(length, at)?;
                if depth >= DEPTH_MAX {
                    return Err(GuardError::BeyondFrame {
                        length: count as u64,
                        left: 0,
                        at,
                    });
                }
                for _ in 0..count {
                    walk(element, version, cursor, depth + 1)?;
                }
            }
            Kind::CompactStr => {
                let at = cursor.position();
                // Length + 1; 0 is null.
                let n = match cursor.uvarint()? {
                    0 => 0,
                    n => cursor.length(i64::from(n) - 1, at)?,
                };
                cursor.take(n)?;
            }
            Kind::TaggedFields => cursor.tagged_fields()?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::request_shape;
    use crate::versions::Api;

    fn body(bytes: &[u8]) -> Bytes {
        Bytes::copy_from_slice(bytes)
    }

    #[test]
    fn a_count_beyond_the_bytes_left_is_refused_before_anything_is_read() {
        let shape = request_shape(Api::Metadata);
        // Metadata v0: topics array claiming 2^31 - 1 names in 4 bytes.
        let hostile = body(&i32::MAX.to_be_bytes());
        assert!(matches!(
            check_body(shape, 0, &hostile),
            Err(GuardError::BeyondFrame { at: 0, .. })
        ));
        // A string claiming more than is left.
        let mut short = 1i32.to_be_bytes().to_vec();
        short.extend_from_slice(&100i16.to_be_bytes());
        short.extend_from_slice(b"abc");
        assert!(matches!(
            check_body(shape, 0, &body(&short)),
            Err(GuardError::BeyondFrame { .. })
        ));
        let mut negative = 1i32.to_be_bytes().to_vec();
        negative.extend_from_slice(&(-7i16).to_be_bytes());
        assert!(matches!(
            check_body(shape, 0, &body(&negative)),
            Err(GuardError::NegativeLength { length: -7, .. })
        ));
    }

    #[test]
    fn a_request_must_end_exactly_at_its_last_field() {
        let shape = request_shape(Api::Metadata);
        let mut ok = 1i32.to_be_bytes().to_vec();
        ok.extend_from_slice(&3i16.to_be_bytes());
        ok.extend_from_slice(b"abc");
        assert_eq!(check_body(shape, 0, &body(&ok)), Ok(()));
        let mut trailing = ok.clone();
        trailing.push(0);
        assert_eq!(
            check_body(shape, 0, &body(&trailing)),
            Err(GuardError::TrailingBytes { left: 1 })
        );
        // v4 adds allow_auto_topic_creation: the same bytes are one short.
        assert!(matches!(
            check_body(shape, 4, &body(&ok)),
            Err(GuardError::Truncated { .. })
        ));
        assert_eq!(check_body(shape, 0, &body(&(-1i32).to_be_bytes())), Ok(()));
    }

    #[test]
    fn varints_and_tagged_fields_are_bounded_too() {
        let shape = request_shape(Api::ApiVersions);
        // v3: name "a", version "b", no tagged fields.
        assert_eq!(check_body(shape, 3, &body(&[2, b'a', 2, b'b', 0])), Ok(()));
        assert!(matches!(
            check_body(shape, 3, &body(&[0xff, 0xff, 0xff, 0xff, 0x0f])),
            Err(GuardError::BeyondFrame { .. })
        ));
        assert!(matches!(
            check_body(shape, 3, &body(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01])),
            Err(GuardError::BadVarint { .. })
        ));
        assert!(matches!(
            check_body(shape, 3, &body(&[1, 1, 0x7f])),
            Err(GuardError::BeyondFrame { .. })
        ));
        assert_eq!(check_body(shape, 0, &body(&[])), Ok(()));
    }
}
