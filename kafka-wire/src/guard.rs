//! Walks a request before `kafka-protocol` sees it: every length and count is checked against
//! the bytes left in the frame. Bytes after the last field are left alone, as Kafka leaves
//! them: librdkafka's all-topics Metadata from v9 on carries three (the rest of an array
//! count's reserved room), and Kafka reads past nothing it does not need. The tests check that
//! every shape walks a client's request to its last byte.
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

/// Checks that `body` starts with one request of `shape` at `version`, every length within
/// it; returns how many bytes follow its last field (which nothing reads). `flexible` (KIP-482) is whether that version is a flexible one: then every string, byte
/// field and array is compact (an unsigned varint length + 1, 0 for null) and every struct,
/// the body included, ends with tagged fields.
pub(crate) fn check_body(
    shape: &[Field],
    version: i16,
    flexible: bool,
    body: &Bytes,
) -> Result<usize, GuardError> {
    let mut cursor = Cursor::new(body);
    walk(shape, version, flexible, &mut cursor, 0)?;
    Ok(cursor.left())
}

impl Cursor<'_> {
    /// A length or count, i16 (`short`) or i32 in a classic version, a compact one in a
    /// flexible version: what follows it (bytes or elements), 0 for null, at most what is
    /// left.
    fn count(&mut self, flexible: bool, short: bool) -> Result<usize, GuardError> {
        let at = self.position();
        let length = if flexible {
            // Length + 1; 0 is null.
            i64::from(self.uvarint()?) - 1
        } else if short {
            i64::from(self.i16()?)
        } else {
            i64::from(self.i32()?)
        };
        self.length(length, at)
    }
}

fn walk(
    shape: &[Field],
    version: i16,
    flexible: bool,
    cursor: &mut Cursor<'_>,
    depth: usize,
) -> Result<(), GuardError> {
    for field in shape.iter().filter(|f| f.present_in(version)) {
        match field.kind {
            Kind::I8 => cursor.skip_fixed(1)?,
            Kind::I16 => cursor.skip_fixed(2)?,
            Kind::I32 => cursor.skip_fixed(4)?,
            Kind::I64 => cursor.skip_fixed(8)?,
            Kind::Uuid => cursor.skip_fixed(16)?,
            Kind::Str => {
                let n = cursor.count(flexible, true)?;
                cursor.take(n)?;
            }
            Kind::Bytes => {
                let n = cursor.count(flexible, false)?;
                cursor.take(n)?;
            }
            Kind::I32s => {
                let count = cursor.count(flexible, false)?;
                for _ in 0..count {
                    cursor.skip_fixed(4)?;
                }
            }
            Kind::Strs => {
                let count = cursor.count(flexible, false)?;
                for _ in 0..count {
                    let n = cursor.count(flexible, true)?;
                    cursor.take(n)?;
                }
            }
            Kind::Array(element) => {
                let at = cursor.position();
                let count = cursor.count(flexible, false)?;
                if depth >= DEPTH_MAX {
                    return Err(GuardError::BeyondFrame {
                        length: count as u64,
                        left: 0,
                        at,
                    });
                }
                for _ in 0..count {
                    walk(element, version, flexible, cursor, depth + 1)?;
                }
            }
        }
    }
    if flexible {
        // Every struct of a flexible version ends with its tagged fields: skipped here,
        // bounded like everything else (the crate keeps unknown ones as byte strings).
        cursor.tagged_fields()?;
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
            check_body(shape, 0, false, &hostile),
            Err(GuardError::BeyondFrame { at: 0, .. })
        ));
        // A string claiming more than is left.
        let mut short = 1i32.to_be_bytes().to_vec();
        short.extend_from_slice(&100i16.to_be_bytes());
        short.extend_from_slice(b"abc");
        assert!(matches!(
            check_body(shape, 0, false, &body(&short)),
            Err(GuardError::BeyondFrame { .. })
        ));
        let mut negative = 1i32.to_be_bytes().to_vec();
        negative.extend_from_slice(&(-7i16).to_be_bytes());
        assert!(matches!(
            check_body(shape, 0, false, &body(&negative)),
            Err(GuardError::NegativeLength { length: -7, .. })
        ));
    }

    #[test]
    fn a_walk_ends_at_the_last_field_and_counts_what_follows() {
        let shape = request_shape(Api::Metadata);
        let mut ok = 1i32.to_be_bytes().to_vec();
        ok.extend_from_slice(&3i16.to_be_bytes());
        ok.extend_from_slice(b"abc");
        assert_eq!(check_body(shape, 0, false, &body(&ok)), Ok(0));
        let mut trailing = ok.clone();
        trailing.push(0);
        assert_eq!(check_body(shape, 0, false, &body(&trailing)), Ok(1));
        // v4 adds allow_auto_topic_creation: the same bytes are one short.
        assert!(matches!(
            check_body(shape, 4, false, &body(&ok)),
            Err(GuardError::Truncated { .. })
        ));
        assert_eq!(
            check_body(shape, 0, false, &body(&(-1i32).to_be_bytes())),
            Ok(0)
        );
        // librdkafka's all-topics Metadata v12: a null topics array in a four-byte count's
        // room, then allow_auto_topic_creation, include_topic_authorized_operations, tags.
        let librdkafka = body(&[0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(check_body(shape, 12, true, &librdkafka), Ok(3));
    }

    #[test]
    fn varints_and_tagged_fields_are_bounded_too() {
        let shape = request_shape(Api::ApiVersions);
        // v3: name "a", version "b", no tagged fields.
        assert_eq!(
            check_body(shape, 3, true, &body(&[2, b'a', 2, b'b', 0])),
            Ok(0)
        );
        assert!(matches!(
            check_body(shape, 3, true, &body(&[0xff, 0xff, 0xff, 0xff, 0x0f])),
            Err(GuardError::BeyondFrame { .. })
        ));
        assert!(matches!(
            check_body(shape, 3, true, &body(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01])),
            Err(GuardError::BadVarint { .. })
        ));
        assert!(matches!(
            check_body(shape, 3, true, &body(&[1, 1, 0x7f])),
            Err(GuardError::BeyondFrame { .. })
        ));
        assert_eq!(check_body(shape, 0, false, &body(&[])), Ok(0));
    }
}
