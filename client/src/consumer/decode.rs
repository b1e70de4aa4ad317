//! Turning fetched entries into records, verifying every checksum on the way: each entry's
//! CRC32 (written by the broker) and each batch's CRC-32C (written by the producer), so a
//! consumer never hands out a byte that changed since it was produced.

use crate::error::ClientError;
use bytes::Bytes;
use tailstream_wire::batch::{base_offset, read_batch_header};
use tailstream_wire::entry::{EntryType, TRAILER_VALUE_BYTES};
use tailstream_wire::messages::ProducerSession;
use tailstream_wire::records::RecordIter;
use tailstream_wire::scan::EntryIter;
use tailstream_wire::{LogId, RecordOffset, StreamletId};

/// One record as a consumer receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// The streamlet the record was appended to.
    pub streamlet: StreamletId,
    /// The log within that streamlet; offsets increase per log.
    pub log: LogId,
    /// The record's offset in its log.
    pub offset: RecordOffset,
    /// When the producer created the record's batch (milliseconds since the Unix epoch, the
    /// producer's clock) plus the record's own delta.
    pub timestamp_ms: i64,
    /// The record's key, if it has one.
    pub key: Option<Bytes>,
    /// The record's value (`None` only for a record produced with a null value).
    pub value: Option<Bytes>,
    /// The idempotent producer session (id and epoch) whose batch held the record; `None` for
    /// a batch produced without idempotence.
    pub producer: Option<ProducerSession>,
}

/// Decodes the records in `entries` (whole entries of one log), skipping digests and trailers
/// and any record below `skip_below` (already delivered). Returns the offset one past the
/// last record seen.
pub(crate) fn decode_entries(
    streamlet: StreamletId,
    log: LogId,
    entries: &Bytes,
    skip_below: RecordOffset,
    out: &mut Vec<ConsumedRecord>,
) -> Result<RecordOffset, ClientError> {
    let mut next = skip_below;
    for entry in EntryIter::new(entries, true) {
        let entry = entry.map_err(|e| ClientError::Corrupt(e.to_string()))?;
        match entry.header.entry_type {
            EntryType::Batch => {}
            // A fetch never starts at a segment's digest, and a trailer holds exactly its value:
            // any other shape is a damaged header, not something to skip.
            EntryType::Trailer if entry.payload.len() == TRAILER_VALUE_BYTES => continue,
            other => {
                let at = entry.position;
                return Err(ClientError::Corrupt(format!(
                    "unexpected {other:?} entry at {at}"
                )));
            }
        }
        let at = entry.position;
        let corrupt = |what: String| ClientError::Corrupt(format!("batch at {at}: {what}"));
        let info = read_batch_header(entry.payload).map_err(|e| corrupt(e.to_string()))?;
        let base =
            base_offset(entry.payload).ok_or_else(|| corrupt("no valid base offset".into()))?;
        let start = at + tailstream_wire::entry::ENTRY_HEADER_BYTES;
        let batch = entries.slice(start..start + entry.payload.len());
        for record in RecordIter::new(batch, &info) {
            let record = record.map_err(|e| corrupt(e.to_string()))?;
            // Every value below comes from the network: checked, never wrapped.
            let offset = base.checked_advance(record.offset_delta).ok_or_else(|| {
                corrupt(format!(
                    "record {} overflows base offset {}",
                    record.offset_delta, base.0
                ))
            })?;
            if offset < skip_below {
                continue;
            }
            let after = offset
                .checked_advance(1)
                .ok_or_else(|| corrupt(format!("record offset {} is the last one", offset.0)))?;
            next = next.max(after);
            out.push(ConsumedRecord {
                streamlet,
                log,
                offset,
                timestamp_ms: record.timestamp_ms,
                key: record.key,
                value: record.value,
                producer: info.producer.map(|p| ProducerSession {
                    producer_id: p.producer_id,
                    producer_epoch: p.producer_epoch,
                }),
            });
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::batch::stamp_base_offset;
    use tailstream_wire::records::RecordBatchBuilder;
    use tailstream_wire::segment::SegmentImage;
    use tailstream_wire::{BatchSequence, ProducerEpoch, ProducerId};

    fn entries(batches: &[(u64, &[&str])]) -> Bytes {
        let mut image = SegmentImage::new(4096);
        for (base, values) in batches {
            let mut builder = RecordBatchBuilder::new(128);
            for v in *values {
                builder.push(10, None, Some(v.as_bytes()), &[]);
            }
            let mut batch = builder
                .finish(ProducerId(1), ProducerEpoch(0), BatchSequence(0))
                .to_vec();
            stamp_base_offset(&mut batch, RecordOffset(*base));
            image.append(EntryType::Batch, &batch).unwrap();
        }
        Bytes::copy_from_slice(&image.bytes[..image.written()])
    }

    #[test]
    fn records_come_out_with_their_offsets_and_redelivered_ones_are_skipped() {
        let bytes = entries(&[(0, &["a", "b"]), (2, &["c"])]);
        let mut out = Vec::new();
        let next =
            decode_entries(StreamletId(0), LogId(1), &bytes, RecordOffset(1), &mut out).unwrap();
        assert_eq!(next, RecordOffset(3));
        let got: Vec<_> = out
            .iter()
            .map(|r| (r.offset.0, r.value.clone().unwrap()))
            .collect();
        assert_eq!(got, vec![(1, Bytes::from("b")), (2, Bytes::from("c"))]);
    }

    #[test]
    fn producer_values_out_of_range_are_errors_naming_the_record_never_panics() {
        // A batch the broker would now refuse (its base timestamp is near i64::MAX and a
        // record's delta overflows it), stored by an older broker: decoding must fail cleanly.
        let mut builder = RecordBatchBuilder::new(128);
        builder.push(i64::MAX - 1, None, Some(b"a"), &[]);
        builder.push(i64::MAX, None, Some(b"b"), &[]);
        let mut batch = builder
            .finish(ProducerId(1), ProducerEpoch(0), BatchSequence(0))
            .to_vec();
        // Base timestamp i64::MAX - 1 with deltas 0 and 1; move the base up by one so the
        // second record's delta overflows, and repair the CRC as a hostile producer would.
        batch[27..35].copy_from_slice(&i64::MAX.to_be_bytes());
        tailstream_wire::batch::restamp_sequence(&mut batch, BatchSequence(0)).unwrap();
        let mut image = SegmentImage::new(4096);
        image.append(EntryType::Batch, &batch).unwrap();
        let bytes = Bytes::copy_from_slice(&image.bytes[..image.written()]);
        let mut out = Vec::new();
        let error = decode_entries(StreamletId(0), LogId(0), &bytes, RecordOffset(0), &mut out)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("record 1") && error.contains("overflows"),
            "{error}"
        );
        // A negative base offset (outside the producer's CRC) is refused too.
        let mut negative = builder_batch();
        negative[0..8].copy_from_slice(&(-5i64).to_be_bytes());
        let mut image = SegmentImage::new(4096);
        image.append(EntryType::Batch, &negative).unwrap();
        let bytes = Bytes::copy_from_slice(&image.bytes[..image.written()]);
        assert!(
            decode_entries(StreamletId(0), LogId(0), &bytes, RecordOffset(0), &mut out).is_err()
        );
    }

    fn builder_batch() -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new(64);
        builder.push(0, None, Some(b"v"), &[]);
        builder
            .finish(ProducerId(1), ProducerEpoch(0), BatchSequence(0))
            .to_vec()
    }

    #[test]
    fn a_flipped_bit_anywhere_is_reported_as_corruption() {
        let bytes = entries(&[(0, &["hello", "world"])]);
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.to_vec();
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut out = Vec::new();
            let result = decode_entries(
                StreamletId(0),
                LogId(0),
                &Bytes::from(bad),
                RecordOffset(0),
                &mut out,
            );
            assert!(result.is_err(), "bit {bit} flip went unnoticed: {out:?}");
        }
    }
}
