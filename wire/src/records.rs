//! Records inside a v2 record batch: the builder producers use and the iterator consumers use.
//! The record layout and the walk that checks it are in `record_scan`; varints in `varint`.

use crate::batch::{
    BATCH_HEADER_BYTES, BATCH_RECORDS_MAX, BatchError, BatchInfo, ProducerSequence, write_header,
};
use crate::ids::{BatchSequence, ProducerEpoch, ProducerId};
use crate::record_scan::RecordCursor;
use crate::varint::{VarlongRun, put_varlong, varlong_len};
use bytes::{BufMut, Bytes, BytesMut};

pub use crate::record_scan::RECORD_HEADERS_MAX;

fn opt_len(value: Option<&[u8]>) -> i64 {
    value.map_or(-1, |v| v.len() as i64)
}

/// A record header (key/value pair).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: String,
    pub value: Option<Bytes>,
}

/// One decoded record. Key, value and header values are zero-copy slices of the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub offset_delta: u32,
    /// Absolute: the batch's base timestamp plus the record's delta (checked, never wraps).
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
}

/// Builds one batch, record by record; `finish` writes the header and CRC-32C.
#[derive(Debug)]
pub struct RecordBatchBuilder {
    buf: BytesMut,
    count: u32,
    base_timestamp_ms: i64,
    max_timestamp_ms: i64,
}

impl RecordBatchBuilder {
    pub fn new(capacity_bytes: usize) -> Self {
        let mut buf = BytesMut::with_capacity(capacity_bytes.max(BATCH_HEADER_BYTES));
        buf.put_bytes(0, BATCH_HEADER_BYTES);
        Self {
            buf,
            count: 0,
            base_timestamp_ms: 0,
            max_timestamp_ms: 0,
        }
    }

    pub fn record_count(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the batch would have if finished now.
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// Upper bound on the bytes `push` adds for a record of this shape.
    pub fn record_len_bound(key_len: usize, value_len: usize, headers_len: usize) -> usize {
        // length(5) + attributes(1) + ts delta(10) + offset delta(5) + 2 lengths(5 each)
        // + header count(5) + payloads.
        36 + key_len + value_len + headers_len
    }

    /// True when the batch can take no more records (count limit).
    pub fn is_full(&self) -> bool {
        self.count >= BATCH_RECORDS_MAX
    }

    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        if self.count == 0 {
            self.base_timestamp_ms = timestamp_ms;
        }
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
        let ts_delta = timestamp_ms - self.base_timestamp_ms;
        let offset_delta = i64::from(self.count);
        let mut body_len = 1 + varlong_len(ts_delta) + varlong_len(offset_delta);
        for field in [key, value] {
            body_len += varlong_len(opt_len(field)) + field.map_or(0, <[u8]>::len);
        }
        body_len += varlong_len(headers.len() as i64);
        for (hkey, hvalue) in headers {
            body_len += varlong_len(hkey.len() as i64) + hkey.len();
            body_len += varlong_len(opt_len(*hvalue)) + hvalue.map_or(0, <[u8]>::len);
        }
        let out = &mut self.buf;
        // The framing before the key in one copy (length, attributes 0, deltas, key length),
        // and for a record without a key the value's length with it.
        let mut head = VarlongRun::default();
        for framing in [body_len as i64, 0, ts_delta, offset_delta, opt_len(key)] {
            // Invariant: a run holds 6 varints, and these are 5.
            let pushed = head.push(framing);
            debug_assert!(pushed);
        }
        match key {
            None => {
                // Invariant: the sixth varint of the run.
                let pushed = head.push(opt_len(value));
                debug_assert!(pushed);
                out.put_slice(head.as_bytes());
            }
            Some(bytes) => {
                out.put_slice(head.as_bytes());
                out.put_slice(bytes);
                put_varlong(out, opt_len(value));
            }
        }
        if let Some(bytes) = value {
            out.put_slice(bytes);
        }
        // The header count: one byte for up to 63 headers.
        put_varlong(out, headers.len() as i64);
        for (hkey, hvalue) in headers {
            put_varlong(out, hkey.len() as i64);
            out.put_slice(hkey.as_bytes());
            put_varlong(out, opt_len(*hvalue));
            if let Some(bytes) = hvalue {
                out.put_slice(bytes);
            }
        }
        self.count += 1;
    }

    /// Seals the batch with its producer identity and sequence. Panics if empty: an empty
    /// batch is a programming error in the caller (producers never seal one).
    pub fn finish(
        self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        base_sequence: BatchSequence,
    ) -> Bytes {
        let producer = ProducerSequence {
            producer_id,
            producer_epoch,
            base_sequence,
        };
        self.seal(Some(producer))
    }

    /// Seals the batch without idempotence: producer id, epoch and sequence -1, as a Kafka
    /// producer without idempotence sends them (each copy of it is appended, retries too).
    pub fn finish_without_producer(self) -> Bytes {
        self.seal(None)
    }

    fn seal(mut self, producer: Option<ProducerSequence>) -> Bytes {
        assert!(self.count > 0, "sealing an empty record batch");
        write_header(
            &mut self.buf,
            self.count,
            self.base_timestamp_ms,
            self.max_timestamp_ms,
            producer,
        );
        self.buf.freeze()
    }
}

/// Iterates the records of a batch whose header passed `read_batch_header`. Yields an error
/// (and stops) on the first malformed record; never panics. Key, value and header values are
/// zero-copy slices of the batch.
#[derive(Debug, Clone)]
pub struct RecordIter {
    batch: Bytes,
    cursor: RecordCursor,
    /// The batch did not decompress: said once, then the iterator ends.
    failed: Option<BatchError>,
}

impl RecordIter {
    /// Records of `batch`, decompressed first if it is compressed (a batch that does not
    /// decompress yields that error, then nothing).
    pub fn new(batch: Bytes, info: &BatchInfo) -> Self {
        let cursor = RecordCursor::new(info);
        let (batch, failed) = match crate::record_scan::plain_image(&batch, info) {
            Ok(std::borrow::Cow::Borrowed(_)) => (batch, None),
            Ok(std::borrow::Cow::Owned(image)) => (Bytes::from(image), None),
            Err(error) => (Bytes::new(), Some(error)),
        };
        Self {
            cursor,
            batch,
            failed,
        }
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.failed.take() {
            self.batch = Bytes::new();
            self.cursor = RecordCursor::exhausted();
            return Some(Err(error));
        }
        let raw = match self.cursor.next_record(&self.batch)? {
            Ok(raw) => raw,
            Err(error) => return Some(Err(error)),
        };
        let slice = |part: Option<&[u8]>| part.map(|part| self.batch.slice_ref(part));
        let headers = raw
            .headers()
            .map(|header| RecordHeader {
                key: header.key.to_string(),
                value: slice(header.value),
            })
            .collect();
        Some(Ok(Record {
            offset_delta: raw.offset_delta,
            timestamp_ms: raw.timestamp_ms,
            key: slice(raw.key),
            value: slice(raw.value),
            headers,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{base_offset, stamp_base_offset, validate_batch};
    use crate::ids::RecordOffset;

    #[test]
    fn a_built_batch_validates_and_its_records_read_back() {
        let mut builder = RecordBatchBuilder::new(1024);
        builder.push(1000, Some(b"k1"), Some(b"v1"), &[]);
        builder.push(1005, None, Some(b"v2"), &[("h", Some(b"x")), ("n", None)]);
        builder.push(1002, Some(b""), None, &[]);
        let batch = builder.finish(ProducerId(9), ProducerEpoch(0), BatchSequence(4));
        let info = validate_batch(&batch).unwrap();
        let producer = info.producer.expect("idempotent");
        assert_eq!(producer.producer_id, ProducerId(9));
        assert_eq!(producer.base_sequence, BatchSequence(4));
        assert_eq!(info.record_count, 3);
        assert_eq!(info.max_timestamp_ms, 1005);
        let records: Vec<_> = RecordIter::new(batch.clone(), &info)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records[0].key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(records[1].key, None);
        assert_eq!(records[0].timestamp_ms, 1000);
        assert_eq!(records[1].timestamp_ms, 1005);
        assert_eq!(records[1].headers[0].key, "h");
        assert_eq!(records[1].headers[1].value, None);
        assert_eq!(records[2].value, None);
        assert_eq!(records[2].offset_delta, 2);
    }

    #[test]
    fn stamping_the_base_offset_keeps_the_batch_valid() {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"v"), &[]);
        let mut batch = builder
            .finish(ProducerId(1), ProducerEpoch(0), BatchSequence(0))
            .to_vec();
        stamp_base_offset(&mut batch, RecordOffset(77));
        assert!(validate_batch(&batch).is_ok());
        assert_eq!(base_offset(&batch), Some(RecordOffset(77)));
    }

    #[test]
    fn a_batch_without_a_producer_carries_minus_one_and_any_sequence_with_it_is_ignored() {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"v"), &[]);
        let batch = builder.finish_without_producer();
        assert_eq!(&batch[43..51], &(-1i64).to_be_bytes());
        assert_eq!(&batch[53..57], &(-1i32).to_be_bytes());
        assert_eq!(validate_batch(&batch).unwrap().producer, None);
        // Kafka takes a batch with producer id -1 whatever its epoch and sequence hold (a
        // client's default producer sends sequence 0): so does Tailstream, without idempotence.
        let mut half = BytesMut::from(&batch[..]);
        crate::batch::restamp_sequence(&mut half, BatchSequence(3)).unwrap();
        assert_eq!(validate_batch(&half).unwrap().producer, None);
    }

    #[test]
    fn the_producer_epoch_is_read_restamped_and_never_negative_for_an_idempotent_batch() {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"v"), &[]);
        let batch = builder.finish(ProducerId(5), ProducerEpoch(7), BatchSequence(3));
        let info = validate_batch(&batch).unwrap();
        let producer = info.producer.unwrap();
        assert_eq!(producer.producer_epoch, ProducerEpoch(7));
        let mut renewed = batch.to_vec();
        crate::batch::restamp_producer(&mut renewed, ProducerEpoch(8), BatchSequence(0)).unwrap();
        let renewed_info = validate_batch(&renewed).unwrap();
        let renewed_producer = renewed_info.producer.unwrap();
        assert_eq!(renewed_producer.producer_epoch, ProducerEpoch(8));
        assert_eq!(renewed_producer.base_sequence, BatchSequence(0));
        assert_ne!(
            renewed_info.checksum, info.checksum,
            "the checksum covers epoch and sequence"
        );
        let mut negative = batch.to_vec();
        crate::batch::restamp_producer(&mut negative, ProducerEpoch(-1), BatchSequence(0)).unwrap();
        assert!(matches!(
            validate_batch(&negative),
            Err(BatchError::BadProducerEpoch(-1))
        ));
    }

    #[test]
    fn compressed_batches_validate_and_read_back_as_the_records_they_hold() {
        use crate::batch::compress_batch;
        use crate::compression::Compression;
        let mut builder = RecordBatchBuilder::new(4096);
        for i in 0..50 {
            builder.push(
                1000 + i,
                Some(b"key"),
                Some(format!("value {i}").as_bytes()),
                &[],
            );
        }
        let plain = builder.finish(ProducerId(3), ProducerEpoch(0), BatchSequence(0));
        let expected: Vec<_> = RecordIter::new(plain.clone(), &validate_batch(&plain).unwrap())
            .map(|r| r.unwrap())
            .collect();
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let compressed = Bytes::from(compress_batch(&plain, codec).unwrap());
            let info = validate_batch(&compressed).unwrap();
            assert_eq!(info.compression, codec);
            assert_eq!(info.record_count, 50);
            let records: Vec<_> = RecordIter::new(compressed.clone(), &info)
                .map(|r| r.unwrap())
                .collect();
            assert_eq!(records, expected, "{codec:?}");
            // Garbage where the records should be, behind a correct CRC: refused, never a panic.
            let mut garbage = compressed.to_vec();
            for byte in &mut garbage[BATCH_HEADER_BYTES..] {
                *byte ^= 0x5a;
            }
            let crc = crc32c::crc32c(&garbage[crate::batch::CRC_START..]);
            garbage[17..21].copy_from_slice(&crc.to_be_bytes());
            assert!(validate_batch(&garbage).is_err(), "{codec:?}");
            let mut iter = RecordIter::new(Bytes::from(garbage.clone()), &info);
            assert!(iter.all(|r| r.is_err()) || validate_batch(&garbage).is_err());
        }
        // Transactional and control batches stay refused, compressed or not.
        let mut transactional = plain.to_vec();
        transactional[22] |= 1 << 4;
        let crc = crc32c::crc32c(&transactional[crate::batch::CRC_START..]);
        transactional[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_batch(&transactional),
            Err(BatchError::UnsupportedAttributes(_))
        ));
    }

    #[test]
    fn restamping_the_sequence_keeps_the_batch_valid() {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"v"), &[]);
        let mut batch = builder
            .finish(ProducerId(1), ProducerEpoch(0), BatchSequence(5))
            .to_vec();
        crate::batch::restamp_sequence(&mut batch, BatchSequence(2)).unwrap();
        assert_eq!(
            validate_batch(&batch)
                .unwrap()
                .producer
                .unwrap()
                .base_sequence,
            BatchSequence(2)
        );
        assert!(crate::batch::restamp_sequence(&mut [0u8; 10], BatchSequence(0)).is_err());
    }

    #[test]
    fn any_bit_flip_in_the_crc_region_is_refused() {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, Some(b"key"), Some(b"value"), &[]);
        let batch = builder
            .finish(ProducerId(1), ProducerEpoch(0), BatchSequence(0))
            .to_vec();
        for bit in (8 * 8)..batch.len() * 8 {
            // The partition leader epoch (bytes 12..16) is outside Kafka's CRC by design.
            if (12..16).contains(&(bit / 8)) {
                continue;
            }
            let mut bad = batch.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(validate_batch(&bad).is_err(), "bit {bit}");
        }
    }
}
