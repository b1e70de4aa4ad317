//! Zigzag LEB128 varints, as Kafka's record format (and protobuf) writes them.
//!
//! Readers never panic and never read past the slice: a truncated or over-long varint is
//! `None`. The one-byte case is the common one for small records (offset deltas below 64,
//! short keys, no headers), so it is tried first without a loop.

use bytes::{BufMut, BytesMut};

/// Longest encoding of a 64-bit varint.
pub const VARLONG_BYTES_MAX: usize = 10;

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

/// Appends `value` as a zigzag varint.
pub fn put_varlong(out: &mut BytesMut, value: i64) {
    let mut v = zigzag(value);
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Bytes a [`VarlongRun`] holds: room for 6 varints of any size.
const VARLONG_RUN_BYTES: usize = 6 * VARLONG_BYTES_MAX;

/// A few varints encoded on the stack, to be appended with one copy: per-byte `put_u8` calls
/// cost more than a small record's value.
#[derive(Debug)]
pub struct VarlongRun {
    bytes: [u8; VARLONG_RUN_BYTES],
    len: usize,
}

impl Default for VarlongRun {
    fn default() -> Self {
        Self {
            bytes: [0; VARLONG_RUN_BYTES],
            len: 0,
        }
    }
}

impl VarlongRun {
    /// Adds `value`; returns false (adding nothing) when the run might not have room for it.
    /// (Inlined: a producer pushes six per record, and a call each cost a third of encoding.)
    #[inline]
    pub fn push(&mut self, value: i64) -> bool {
        let Some(room) = self.bytes.get_mut(self.len..self.len + VARLONG_BYTES_MAX) else {
            return false;
        };
        let mut v = zigzag(value);
        // A u64 takes at most VARLONG_BYTES_MAX groups of 7 bits: the loop ends within `room`.
        let mut written = 0;
        for byte in room.iter_mut() {
            written += 1;
            if v < 0x80 {
                *byte = v as u8;
                break;
            }
            *byte = (v as u8) | 0x80;
            v >>= 7;
        }
        self.len += written;
        true
    }

    /// The varints pushed so far, back to back.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Bytes `put_varlong` writes for `value`.
pub fn varlong_len(value: i64) -> usize {
    (64 - (zigzag(value) | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a zigzag varint at `*pos`, advancing it; `None` on truncation or more than
/// `VARLONG_BYTES_MAX` bytes (or bits beyond 64), leaving `*pos` alone.
#[inline(always)]
pub fn get_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let (value, next) = read_varlong(buf, *pos)?;
    *pos = next;
    Some(value)
}

/// Reads a varint that Kafka defines as 32-bit (lengths, counts, offset deltas): `None` when it
/// does not fit an `i32`.
#[inline(always)]
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<i32> {
    let (value, next) = read_varint(buf, *pos)?;
    *pos = next;
    Some(value)
}

/// `get_varlong` by value: the varint at `at` and the position after it. The position stays
/// in a register on the hot path (record validation walks millions of these per second).
#[inline(always)]
pub fn read_varlong(buf: &[u8], at: usize) -> Option<(i64, usize)> {
    let first = *buf.get(at)?;
    if first < 0x80 {
        return Some((unzigzag(u64::from(first)), at + 1));
    }
    // Two bytes cover lengths up to 8 KiB, the common case for record and value lengths.
    let second = *buf.get(at + 1)?;
    if second < 0x80 {
        let raw = u64::from(first & 0x7f) | (u64::from(second) << 7);
        return Some((unzigzag(raw), at + 2));
    }
    read_varlong_slow(buf, at)
}

/// `read_varlong` for 32-bit varints.
#[inline(always)]
pub fn read_varint(buf: &[u8], at: usize) -> Option<(i32, usize)> {
    let (value, next) = read_varlong(buf, at)?;
    Some((i32::try_from(value).ok()?, next))
}

/// A varint holding a length where -1 means null (Kafka's key, value and header lengths),
/// read without unzigzag and range checks on the hot path: `Some(None)` for null,
/// `Some(Some(len))` for a length, `None` for truncation or any other negative value.
/// The caller bounds the length by the bytes that follow.
#[inline(always)]
pub fn read_nullable_len(buf: &[u8], at: usize) -> Option<(Option<usize>, usize)> {
    let first = *buf.get(at)?;
    let (raw, next) = if first < 0x80 {
        (u64::from(first), at + 1)
    } else {
        let (value, next) = read_varlong(buf, at)?;
        (zigzag(value), next)
    };
    match raw {
        1 => Some((None, next)),
        raw if raw & 1 == 0 => Some((Some(usize::try_from(raw >> 1).ok()?), next)),
        _ => None,
    }
}

#[cold]
#[inline(never)]
fn read_varlong_slow(buf: &[u8], mut at: usize) -> Option<(i64, usize)> {
    let mut result: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *buf.get(at)?;
        at += 1;
        let bits = u64::from(byte & 0x7f);
        // The tenth byte may carry only the 64th bit.
        if shift == 63 && bits > 1 {
            return None;
        }
        result |= bits << shift;
        if byte & 0x80 == 0 {
            return Some((unzigzag(result), at));
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varlongs_round_trip_at_the_edges() {
        for value in [
            0,
            1,
            -1,
            63,
            -64,
            64,
            -65,
            i64::from(i32::MAX),
            i64::from(i32::MIN),
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = BytesMut::new();
            put_varlong(&mut out, value);
            assert_eq!(out.len(), varlong_len(value), "{value}");
            let mut pos = 0;
            assert_eq!(get_varlong(&out, &mut pos), Some(value));
            assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn malformed_varints_are_refused_and_leave_the_position_alone() {
        let mut pos = 0;
        assert_eq!(get_varlong(&[0xff; 11], &mut pos), None);
        assert_eq!(get_varlong(&[0x80, 0x80], &mut pos), None, "truncated");
        assert_eq!(get_varlong(&[], &mut pos), None);
        // Ten bytes whose last carries more than the 64th bit.
        let mut too_wide = [0xffu8; 10];
        too_wide[9] = 0x02;
        assert_eq!(get_varlong(&too_wide, &mut pos), None);
        assert_eq!(pos, 0);
        let mut big = BytesMut::new();
        put_varlong(&mut big, i64::from(i32::MAX) + 1);
        assert_eq!(get_varint(&big, &mut pos), None);
        assert_eq!(pos, 0);
    }

    #[test]
    fn nullable_lengths_are_null_or_non_negative() {
        for (value, expected) in [
            (-1i64, Some(None)),
            (0, Some(Some(0))),
            (300, Some(Some(300))),
        ] {
            let mut out = BytesMut::new();
            put_varlong(&mut out, value);
            assert_eq!(read_nullable_len(&out, 0).map(|(len, _)| len), expected);
        }
        for value in [-2i64, -300, i64::MIN] {
            let mut out = BytesMut::new();
            put_varlong(&mut out, value);
            assert_eq!(read_nullable_len(&out, 0), None, "{value}");
        }
    }

    proptest! {
        #[test]
        fn a_run_encodes_as_put_varlong_does(values in proptest::collection::vec(any::<i64>(), 0..8)) {
            let mut run = VarlongRun::default();
            let mut expected = BytesMut::new();
            for value in &values {
                if run.push(*value) {
                    put_varlong(&mut expected, *value);
                }
            }
            prop_assert_eq!(run.as_bytes(), &expected[..]);
            prop_assert!(values.len() < 6 || expected.len() >= 6);
        }

        #[test]
        fn every_value_round_trips(value in any::<i64>()) {
            let mut out = BytesMut::new();
            put_varlong(&mut out, value);
            prop_assert_eq!(out.len(), varlong_len(value));
            let mut pos = 0;
            prop_assert_eq!(get_varlong(&out, &mut pos), Some(value));
            prop_assert_eq!(pos, out.len());
        }
    }
}
