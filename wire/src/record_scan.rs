//! Walking the records of a v2 record batch: the one parser of record framing.
//!
//! The broker runs it over every produced batch before the batch is stored
//! (`validate_records`, no allocation), and consumers run the same walk to decode
//! (`records::RecordIter`), so a batch the broker accepted is a batch every consumer can read.
//!
//! ```text
//! record := length varint      bytes after this field
//!           attributes i8      (unused)
//!           timestamp delta varlong
//!           offset delta varint
//!           key length varint (-1 = null), key
//!           value length varint (-1 = null), value
//!           header count varint, then per header: key length varint, key (UTF-8),
//!                                                 value length varint (-1 = null), value
//! ```
//! Checked per record: every length is non-negative (or -1 where null is allowed) and ends
//! inside the record, the fields fill the record exactly, the offset delta is the record's
//! index, the absolute timestamp (base + delta) does not overflow, header keys are UTF-8 and
//! the header count is bounded; per batch: exactly `record count` records fill it, and its max
//! timestamp is the largest record timestamp.

use crate::batch::{BATCH_HEADER_BYTES, BatchError, BatchInfo};
use crate::compression::{Compression, decompress};
use crate::varint::{read_nullable_len, read_varint, read_varlong};
use std::borrow::Cow;

/// Per-record header count limit.
pub const RECORD_HEADERS_MAX: usize = 1024;

/// Smallest encoded record: length, attributes, timestamp delta, offset delta, key length,
/// value length and header count, one byte each.
pub const RECORD_BYTES_MIN: usize = 7;

/// One record, borrowed from its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawRecord<'a> {
    pub offset_delta: u32,
    /// Absolute: the batch's base timestamp plus the record's delta.
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    header_count: u32,
    /// The encoded headers (already validated by the walk).
    headers: &'a [u8],
}

impl<'a> RawRecord<'a> {
    pub fn header_count(&self) -> u32 {
        self.header_count
    }

    /// The record's headers, in order.
    pub fn headers(&self) -> RawHeaders<'a> {
        RawHeaders {
            buf: self.headers,
            pos: 0,
            left: self.header_count,
        }
    }
}

/// A record header, borrowed from its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawHeader<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// The headers of a record that passed the walk.
#[derive(Clone, Debug)]
pub struct RawHeaders<'a> {
    buf: &'a [u8],
    pos: usize,
    left: u32,
}

impl<'a> Iterator for RawHeaders<'a> {
    type Item = RawHeader<'a>;

    fn next(&mut self) -> Option<RawHeader<'a>> {
        if self.left == 0 {
            return None;
        }
        // The walk validated this region; a failure here cannot happen and ends the headers.
        let end = self.buf.len();
        let key = field(self.buf, &mut self.pos, end).ok()??;
        let key = std::str::from_utf8(key).ok()?;
        let value = field(self.buf, &mut self.pos, end).ok()?;
        self.left -= 1;
        Some(RawHeader { key, value })
    }
}

/// A length-prefixed field (`-1` = null) at `pos` that must end by `end`; the field and the
/// position after it.
#[inline(always)]
fn read_field(buf: &[u8], pos: usize, end: usize) -> Result<(Option<&[u8]>, usize), &'static str> {
    let (len, pos) = read_nullable_len(buf, pos).ok_or("bad field length")?;
    let Some(len) = len else {
        return Ok((None, pos));
    };
    let stop = pos
        .checked_add(len)
        .filter(|stop| *stop <= end)
        .ok_or("field runs past the end of its record")?;
    // `get`, not indexing: no panic path, so a walk that ignores the field (validation) costs
    // nothing for it.
    let field = buf
        .get(pos..stop)
        .ok_or("field runs past the end of the batch")?;
    Ok((Some(field), stop))
}

/// `read_field` advancing a position in place (off the hot path).
fn field<'a>(buf: &'a [u8], pos: &mut usize, end: usize) -> Result<Option<&'a [u8]>, &'static str> {
    let (value, next) = read_field(buf, *pos, end)?;
    *pos = next;
    Ok(value)
}

/// Where a walk over one batch's records stands. Holds no reference to the batch, so an owner
/// of the batch's bytes can keep both (see `records::RecordIter`).
#[derive(Clone, Debug)]
pub struct RecordCursor {
    pos: usize,
    index: u32,
    count: u32,
    base_timestamp_ms: i64,
    failed: bool,
}

impl RecordCursor {
    /// A walk over the records of a batch whose header was read as `info`.
    pub fn new(info: &BatchInfo) -> Self {
        Self {
            pos: BATCH_HEADER_BYTES,
            index: 0,
            count: info.record_count,
            base_timestamp_ms: info.base_timestamp_ms,
            failed: false,
        }
    }

    /// A walk that yields nothing more.
    pub fn exhausted() -> Self {
        Self {
            pos: 0,
            index: 0,
            count: 0,
            base_timestamp_ms: 0,
            failed: true,
        }
    }

    /// The next record of `batch` (always the same batch), `None` after the last one, or the
    /// first malformation (after which the walk stops).
    #[inline]
    pub fn next_record<'a>(
        &mut self,
        batch: &'a [u8],
    ) -> Option<Result<RawRecord<'a>, BatchError>> {
        if self.failed {
            return None;
        }
        let outcome = if self.index == self.count {
            if self.pos == batch.len() {
                return None;
            }
            Err("bytes after the last record")
        } else {
            self.record(batch)
        };
        Some(outcome.map_err(|reason| {
            self.failed = true;
            BatchError::BadRecord {
                index: self.index,
                reason,
            }
        }))
    }

    #[inline(always)]
    fn record<'a>(&mut self, batch: &'a [u8]) -> Result<RawRecord<'a>, &'static str> {
        let (len, pos) = read_varint(batch, self.pos).ok_or("truncated record length")?;
        let len = usize::try_from(len).map_err(|_| "negative record length")?;
        let end = pos
            .checked_add(len)
            .filter(|end| *end <= batch.len())
            .ok_or("record runs past the end of the batch")?;
        // Attributes: one byte, unused.
        let pos = pos + 1;
        if pos > end {
            return Err("record too short for its attributes");
        }
        let (timestamp_delta, pos) = read_varlong(batch, pos).ok_or("truncated timestamp delta")?;
        let timestamp_ms = self
            .base_timestamp_ms
            .checked_add(timestamp_delta)
            .ok_or("timestamp delta overflows the base timestamp")?;
        let (offset_delta, pos) = read_varint(batch, pos).ok_or("truncated offset delta")?;
        if i64::from(offset_delta) != i64::from(self.index) {
            return Err("offset delta is not the record's index");
        }
        if pos > end {
            return Err("record too short for its timestamp and offset");
        }
        let (key, pos) = read_field(batch, pos, end)?;
        let (value, pos) = read_field(batch, pos, end)?;
        let (header_count, mut pos) = read_varint(batch, pos).ok_or("truncated header count")?;
        let header_count = usize::try_from(header_count)
            .ok()
            .filter(|count| *count <= RECORD_HEADERS_MAX)
            .ok_or("header count out of range")?;
        let headers_start = pos;
        for _ in 0..header_count {
            let key = field(batch, &mut pos, end)?.ok_or("null header key")?;
            std::str::from_utf8(key).map_err(|_| "header key is not UTF-8")?;
            field(batch, &mut pos, end)?;
        }
        if pos != end {
            return Err("record length does not match its fields");
        }
        self.pos = end;
        self.index += 1;
        Ok(RawRecord {
            offset_delta: offset_delta as u32,
            timestamp_ms,
            key,
            value,
            header_count: header_count as u32,
            headers: batch.get(headers_start..end).unwrap_or_default(),
        })
    }
}

/// The common record (no headers) checked with as few branches as possible: its end and
/// timestamp, or `None` to leave it to the full walk. It only ever accepts what
/// `RecordCursor::record` accepts: positions only move forward, and the record must end
/// exactly at its header count of 0, so every field lies inside the record.
#[inline(always)]
fn plain_record(
    batch: &[u8],
    pos: usize,
    index: u32,
    base_timestamp_ms: i64,
) -> Option<(usize, i64)> {
    let (len, pos) = read_varlong(batch, pos)?;
    let end = pos.checked_add(usize::try_from(len).ok()?)?;
    if end > batch.len() {
        return None;
    }
    let (timestamp_delta, pos) = read_varlong(batch, pos + 1)?;
    let timestamp_ms = base_timestamp_ms.checked_add(timestamp_delta)?;
    let (offset_delta, pos) = read_varlong(batch, pos)?;
    if offset_delta != i64::from(index) {
        return None;
    }
    let (key, pos) = read_nullable_len(batch, pos)?;
    let (value, pos) = read_nullable_len(batch, pos.checked_add(key.unwrap_or(0))?)?;
    let header_count_at = pos.checked_add(value.unwrap_or(0))?;
    (header_count_at + 1 == end && batch.get(header_count_at) == Some(&0))
        .then_some((end, timestamp_ms))
}

/// The batch as the record walk reads it: itself when uncompressed; else its header followed
/// by its records decompressed (bounded by `compression::DECOMPRESSED_BYTES_MAX`), so that
/// every position the walk uses means the same in both.
pub fn plain_image<'a>(batch: &'a [u8], info: &BatchInfo) -> Result<Cow<'a, [u8]>, BatchError> {
    if info.compression == Compression::None {
        return Ok(Cow::Borrowed(batch));
    }
    let records = batch
        .get(BATCH_HEADER_BYTES..)
        .ok_or(BatchError::TooShort { len: batch.len() })?;
    let plain = decompress(info.compression, records)?;
    let mut image = Vec::with_capacity(BATCH_HEADER_BYTES + plain.len());
    image.extend_from_slice(&batch[..BATCH_HEADER_BYTES]);
    image.extend_from_slice(&plain);
    Ok(Cow::Owned(image))
}

/// Walks every record of `batch` (whose header and CRC were checked into `info`), and checks
/// the batch's max timestamp against them. Allocates nothing for an uncompressed batch; a
/// compressed one is decompressed once, into one buffer.
pub fn validate_records(batch: &[u8], info: &BatchInfo) -> Result<(), BatchError> {
    let image = plain_image(batch, info)?;
    let batch: &[u8] = &image;
    let mut cursor = RecordCursor::new(info);
    let mut max_timestamp_ms = i64::MIN;
    // The cursor's own loop, without `next_record`'s wrapping: only the timestamp leaves each
    // step, so the walk stays in registers. The common record takes the short path; anything
    // else (or anything wrong) takes the full walk, which also names the error.
    while cursor.index < cursor.count {
        if let Some((end, timestamp_ms)) =
            plain_record(batch, cursor.pos, cursor.index, cursor.base_timestamp_ms)
        {
            cursor.pos = end;
            cursor.index += 1;
            max_timestamp_ms = max_timestamp_ms.max(timestamp_ms);
            continue;
        }
        match cursor.record(batch) {
            Ok(record) => max_timestamp_ms = max_timestamp_ms.max(record.timestamp_ms),
            Err(reason) => {
                return Err(BatchError::BadRecord {
                    index: cursor.index,
                    reason,
                });
            }
        }
    }
    if cursor.pos != batch.len() {
        return Err(BatchError::BadRecord {
            index: cursor.index,
            reason: "bytes after the last record",
        });
    }
    if max_timestamp_ms != info.max_timestamp_ms {
        return Err(BatchError::MaxTimestamp {
            stored: info.max_timestamp_ms,
            computed: max_timestamp_ms,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{CRC_START, read_batch_header, validate_batch};
    use crate::ids::{BatchSequence, ProducerEpoch, ProducerId};
    use crate::records::{RecordBatchBuilder, RecordIter};
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;

    /// A batch of `count` records whose record bytes are exactly `records`, with a correct
    /// length and CRC-32C: what a hostile producer can send.
    fn forged(records: &[u8], count: i32, base_ts: i64, max_ts: i64) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"x"), &[]);
        let mut bytes = builder
            .finish(ProducerId(1), ProducerEpoch(0), BatchSequence(0))
            .to_vec();
        bytes.truncate(BATCH_HEADER_BYTES);
        bytes.extend_from_slice(records);
        let len = (bytes.len() - 12) as i32;
        bytes[8..12].copy_from_slice(&len.to_be_bytes());
        bytes[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        bytes[27..35].copy_from_slice(&base_ts.to_be_bytes());
        bytes[35..43].copy_from_slice(&max_ts.to_be_bytes());
        bytes[57..61].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    fn varlongs(values: &[i64]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for value in values {
            crate::varint::put_varlong(&mut out, *value);
        }
        out.to_vec()
    }

    fn bad_record(bytes: &[u8]) -> (u32, &'static str) {
        match validate_batch(bytes) {
            Err(BatchError::BadRecord { index, reason }) => (index, reason),
            other => panic!("expected a bad record, got {other:?}"),
        }
    }

    #[test]
    fn a_negative_record_length_with_a_valid_crc_is_refused() {
        // The poison pill of the issue: header and CRC are fine, the record is not.
        let mut records = varlongs(&[-3]);
        records.extend_from_slice(&[0; 6]);
        let batch = forged(&records, 1, 0, 0);
        assert!(read_batch_header(&batch).is_ok(), "the header alone passes");
        assert_eq!(bad_record(&batch), (0, "negative record length"));
    }

    #[test]
    fn a_timestamp_delta_that_overflows_is_refused() {
        // attributes, ts delta, offset delta, key, value, headers
        let mut body = vec![0u8];
        body.extend(varlongs(&[i64::MAX, 0, -1, -1, 0]));
        let mut records = varlongs(&[body.len() as i64]);
        records.extend(body);
        let batch = forged(&records, 1, i64::MAX - 5, i64::MAX);
        assert_eq!(
            bad_record(&batch),
            (0, "timestamp delta overflows the base timestamp")
        );
    }

    #[test]
    fn a_max_timestamp_that_is_not_the_largest_record_timestamp_is_refused() {
        let mut body = vec![0u8];
        body.extend(varlongs(&[7, 0, -1, -1, 0]));
        let mut records = varlongs(&[body.len() as i64]);
        records.extend(body);
        assert!(validate_batch(&forged(&records, 1, 100, 107)).is_ok());
        assert_eq!(
            validate_batch(&forged(&records, 1, 100, i64::MAX)),
            Err(BatchError::MaxTimestamp {
                stored: i64::MAX,
                computed: 107
            })
        );
    }

    #[test]
    fn every_framing_mistake_is_named() {
        let record = |fields: &[i64], extra: &[u8]| {
            let mut body = vec![0u8];
            body.extend(varlongs(fields));
            body.extend_from_slice(extra);
            let mut out = varlongs(&[body.len() as i64]);
            out.extend(body);
            out
        };
        let cases: Vec<(Vec<u8>, i32, &str)> = vec![
            (
                record(&[0, 1, -1, -1, 0], &[]),
                1,
                "offset delta is not the record's index",
            ),
            (record(&[0, 0, -2, -1, 0], &[]), 1, "bad field length"),
            (
                record(&[0, 0, 5, -1, 0], &[]),
                1,
                "field runs past the end of its record",
            ),
            (
                record(&[0, 0, -1, -1, 0], &[9]),
                1,
                "record length does not match its fields",
            ),
            (
                record(&[0, 0, -1, -1, 2000], &[]),
                1,
                "header count out of range",
            ),
            (
                record(&[0, 0, -1, -1, 1, -1, -1], &[]),
                1,
                "null header key",
            ),
            (
                record(&[0, 0, -1, -1, 1, 1], &[0xff, 0x00]),
                1,
                "header key is not UTF-8",
            ),
            (
                [record(&[0, 0, -1, -1, 0], &[]), vec![0; 7]].concat(),
                1,
                "bytes after the last record",
            ),
        ];
        for (records, count, reason) in cases {
            let batch = forged(&records, count, 0, 0);
            assert_eq!(bad_record(&batch).1, reason, "{records:?}");
        }
    }

    /// Key, value and how many headers (each with the value) of one record.
    type RecordShape = (Option<Vec<u8>>, Option<Vec<u8>>, u8);

    /// A valid batch from the builder, with some keys, values and headers.
    fn built(values: &[RecordShape]) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new(256);
        for (i, (key, value, headers)) in values.iter().enumerate() {
            let headers: Vec<(&str, Option<&[u8]>)> =
                (0..*headers).map(|_| ("h", value.as_deref())).collect();
            builder.push(1_000 + i as i64, key.as_deref(), value.as_deref(), &headers);
        }
        builder
            .finish(ProducerId(3), ProducerEpoch(0), BatchSequence(0))
            .to_vec()
    }

    fn reseal(bytes: &mut [u8]) {
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    proptest! {
        /// The property the broker and every consumer rely on: whatever the record bytes (with
        /// a repaired CRC), `validate_batch` accepts exactly the batches that every record of
        /// decodes from, consistently with the header.
        #[test]
        fn validation_accepts_exactly_what_consumers_can_decode(
            values in proptest::collection::vec(
                (
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
                    0u8..3,
                ),
                1..6,
            ),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        ) {
            let mut batch = built(&values);
            prop_assert!(validate_batch(&batch).is_ok());
            for (at, byte) in flips {
                let at = BATCH_HEADER_BYTES + at.index(batch.len() - BATCH_HEADER_BYTES);
                batch[at] = byte;
            }
            reseal(&mut batch);
            let validated = validate_batch(&batch);
            let decoded = read_batch_header(&batch).and_then(|info| {
                let records: Vec<_> =
                    RecordIter::new(Bytes::copy_from_slice(&batch), &info).collect::<Result<_, _>>()?;
                let max = records.iter().map(|r| r.timestamp_ms).max().unwrap_or(i64::MIN);
                if max == info.max_timestamp_ms { Ok(records.len()) } else {
                    Err(BatchError::MaxTimestamp { stored: info.max_timestamp_ms, computed: max })
                }
            });
            prop_assert_eq!(validated.is_ok(), decoded.is_ok(), "{:?} vs {:?}", validated, decoded);
        }
    }
}
