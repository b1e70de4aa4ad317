//! Record batches in the Kafka RecordBatch v2 layout (big-endian, as Kafka writes them).
//!
//! ```text
//! offset size field
//!  0     8    base offset            stamped by the broker at append (outside the CRC)
//!  8     4    batch length           bytes after this field
//! 12     4    partition leader epoch (unused, 0)
//! 16     1    magic                  2
//! 17     4    CRC-32C                over bytes 21..end
//! 21     2    attributes             bits 0-2 compression (none, gzip, snappy, lz4, zstd),
//!                                      4 transactional, 5 control (both refused)
//! 23     4    last offset delta      record count - 1
//! 27     8    base timestamp (ms)
//! 35     8    max timestamp (ms)
//! 43     8    producer id
//! 51     2    producer epoch
//! 53     4    base sequence
//! 57     4    record count
//! 61     ..   records (see `records`)
//! ```
//! A producer sends, the broker stores and a consumer receives these same bytes. The broker
//! validates the header, the CRC and every record (`validate_batch`) before appending and never
//! re-encodes records; a consumer checks the header and CRC (`read_batch_header`) and walks the
//! records as it decodes them.

pub use crate::compression::Compression;
use crate::ids::{BatchSequence, ProducerEpoch, ProducerId, RecordOffset};
use crate::record_scan::RECORD_BYTES_MIN;
use thiserror::Error;

pub const BATCH_HEADER_BYTES: usize = 61;
pub const BATCH_MAGIC: u8 = 2;
/// Bytes before the CRC-covered region.
pub const CRC_START: usize = 21;
/// How many of a producer's latest batches a broker log remembers to answer retries with the
/// original location. A producer keeps at most this many batches of one streamlet in flight,
/// so every retry it can send is recognised as one.
pub const IDEMPOTENCE_WINDOW_BATCHES: usize = 32;

/// Largest record batch a producer sends. Brokers accept frames of at least this size plus
/// the produce request's prefix (`broker.frame_body_bytes_max` is validated against it).
pub const PRODUCE_BATCH_BYTES_MAX: usize = 8 << 20;

/// A batch may hold at most this many records (bounds per-record work on the broker).
pub const BATCH_RECORDS_MAX: u32 = 1 << 22;

const ATTR_TRANSACTIONAL: u16 = 1 << 4;
const ATTR_CONTROL: u16 = 1 << 5;

const _: () = assert!(BATCH_HEADER_BYTES == 8 + 4 + 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4);
const _: () = assert!(CRC_START == 8 + 4 + 4 + 1 + 4);

/// Why a record batch was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BatchError {
    #[error("record batch of {len} bytes is shorter than its {BATCH_HEADER_BYTES}-byte header")]
    TooShort { len: usize },
    #[error("record batch length field says {declared} bytes follow, {actual} do")]
    LengthMismatch { declared: i64, actual: usize },
    #[error("record batch magic {0} is not 2")]
    BadMagic(u8),
    #[error("record batch CRC-32C mismatch: header {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("record batch count {count} does not match last offset delta {last_offset_delta}")]
    RecordCount { count: i32, last_offset_delta: i32 },
    #[error(
        "record batch attributes {0:#06x} are not supported (no transactional or control batches, no compression codec beyond zstd)"
    )]
    UnsupportedAttributes(u16),
    #[error("record batch compression: {0}")]
    Compression(&'static str),
    #[error("record batch producer id {0} is negative (and not -1, no producer)")]
    BadProducerId(i64),
    #[error("record batch base sequence {0} is negative for an idempotent batch")]
    BadSequence(i32),
    #[error("record batch producer epoch {0} is negative for an idempotent batch")]
    BadProducerEpoch(i16),
    #[error("record {index} of the batch is malformed: {reason}")]
    BadRecord { index: u32, reason: &'static str },
    #[error("record batch max timestamp {stored} is not its largest record timestamp {computed}")]
    MaxTimestamp { stored: i64, computed: i64 },
}

impl BatchError {
    /// A short name for what is wrong, as a metric label (a few fixed values).
    pub fn reason(&self) -> &'static str {
        match self {
            BatchError::TooShort { .. } => "too_short",
            BatchError::LengthMismatch { .. } => "length",
            BatchError::BadMagic(_) => "magic",
            BatchError::Checksum { .. } => "checksum",
            BatchError::RecordCount { .. } => "record_count",
            BatchError::UnsupportedAttributes(_) => "attributes",
            BatchError::Compression(_) => "compression",
            BatchError::BadProducerId(_) => "producer_id",
            BatchError::BadSequence(_) => "sequence",
            BatchError::BadProducerEpoch(_) => "producer_epoch",
            BatchError::BadRecord { .. } => "record",
            BatchError::MaxTimestamp { .. } => "max_timestamp",
        }
    }
}

/// An idempotent batch's producer (id and epoch: one producer session) and the sequence
/// number of its first record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerSequence {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub base_sequence: BatchSequence,
}

/// Header fields of a validated batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchInfo {
    /// The producer and sequence of an idempotent batch; `None` for a batch without
    /// idempotence (a Kafka producer without it sends producer id -1 and sequence -1), which
    /// is appended as it comes, retries included.
    pub producer: Option<ProducerSequence>,
    /// The batch's CRC-32C (over everything but its base offset, length, leader epoch and
    /// magic): with the producer and sequence, what tells a retry from another batch.
    pub checksum: u32,
    /// How the records are compressed (the batch is stored and served compressed).
    pub compression: Compression,
    pub record_count: u32,
    pub base_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(raw)
}

/// Everything the broker checks before it stores a batch: the header and CRC-32C
/// (`read_batch_header`), then every record (`record_scan::validate_records`). Allocates
/// nothing; one CRC pass and one walk over the record framing.
pub fn validate_batch(bytes: &[u8]) -> Result<BatchInfo, BatchError> {
    let info = read_batch_header(bytes)?;
    crate::record_scan::validate_records(bytes, &info)?;
    Ok(info)
}

/// Checks magic, length, CRC-32C, attributes and record count; returns the header fields.
/// No per-record work: a reader that walks the records next (`records::RecordIter`) finds any
/// malformed one itself.
pub fn read_batch_header(bytes: &[u8]) -> Result<BatchInfo, BatchError> {
    if bytes.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::TooShort { len: bytes.len() });
    }
    let declared = i64::from(be_i32(bytes, 8));
    if declared != bytes.len() as i64 - 12 {
        return Err(BatchError::LengthMismatch {
            declared,
            actual: bytes.len() - 12,
        });
    }
    if bytes[16] != BATCH_MAGIC {
        return Err(BatchError::BadMagic(bytes[16]));
    }
    let stored = u32::from_be_bytes([bytes[17], bytes[18], bytes[19], bytes[20]]);
    let computed = crc32c::crc32c(&bytes[CRC_START..]);
    if stored != computed {
        return Err(BatchError::Checksum { stored, computed });
    }
    let attributes = be_i16(bytes, 21) as u16;
    let compression = Compression::from_attributes(attributes)
        .filter(|_| attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL) == 0)
        .ok_or(BatchError::UnsupportedAttributes(attributes))?;
    let last_offset_delta = be_i32(bytes, 23);
    let count = be_i32(bytes, 57);
    // Every record takes at least RECORD_BYTES_MIN bytes, so the count of an uncompressed
    // batch is also bounded by its length (a compressed one's, by what it decompresses to).
    let fits = compression != Compression::None
        || (count.max(0) as usize) * RECORD_BYTES_MIN <= bytes.len() - BATCH_HEADER_BYTES;
    let plausible = count >= 1 && count as u32 <= BATCH_RECORDS_MAX && fits;
    if !plausible || last_offset_delta != count - 1 {
        return Err(BatchError::RecordCount {
            count,
            last_offset_delta,
        });
    }
    let producer_id = be_i64(bytes, 43);
    let producer_epoch = be_i16(bytes, 51);
    let base_sequence = be_i32(bytes, 53);
    let producer = match (producer_id, base_sequence) {
        // No idempotence: Kafka's "no producer id". As Kafka does, the epoch and sequence are
        // then ignored, whatever they hold: a widely used client's default producer sends
        // sequence 0 with it, and every one of its batches was refused.
        (-1, _) => None,
        (id, _) if id < 0 => return Err(BatchError::BadProducerId(id)),
        (_, _) if producer_epoch < 0 => return Err(BatchError::BadProducerEpoch(producer_epoch)),
        (id, sequence) => {
            let Ok(sequence) = u32::try_from(sequence) else {
                return Err(BatchError::BadSequence(sequence));
            };
            Some(ProducerSequence {
                producer_id: ProducerId(id as u64),
                producer_epoch: ProducerEpoch(producer_epoch),
                base_sequence: BatchSequence(sequence),
            })
        }
    };
    Ok(BatchInfo {
        producer,
        checksum: stored,
        compression,
        record_count: count as u32,
        base_timestamp_ms: be_i64(bytes, 27),
        max_timestamp_ms: be_i64(bytes, 35),
    })
}

/// The producer id a batch's header names, read *without* checking its CRC: for a check that
/// may pass a batch on to one that does (`read_batch_header`), never to act on alone. `None`
/// when the batch is too short or names no producer (id -1 or another negative value).
pub fn peek_producer_id(bytes: &[u8]) -> Option<ProducerId> {
    if bytes.len() < BATCH_HEADER_BYTES {
        return None;
    }
    u64::try_from(be_i64(bytes, 43)).ok().map(ProducerId)
}

/// Writes the base offset into a batch (outside the CRC, so nothing else changes).
pub fn stamp_base_offset(bytes: &mut [u8], offset: RecordOffset) {
    bytes[0..8].copy_from_slice(&(offset.0 as i64).to_be_bytes());
}

/// The base offset stamped into a batch at append time (`None` if missing or negative).
pub fn base_offset(bytes: &[u8]) -> Option<RecordOffset> {
    let raw = bytes.get(0..8)?;
    u64::try_from(be_i64(raw, 0)).ok().map(RecordOffset)
}

/// Gives a batch a new base sequence and recomputes its CRC-32C (the sequence lies inside the
/// CRC). A producer uses it to close the gap a permanently refused batch leaves behind.
pub fn restamp_sequence(bytes: &mut [u8], sequence: BatchSequence) -> Result<(), BatchError> {
    if bytes.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::TooShort { len: bytes.len() });
    }
    let epoch = ProducerEpoch(be_i16(bytes, 51));
    restamp_producer(bytes, epoch, sequence)
}

/// Gives a batch a new producer epoch and base sequence and recomputes its CRC-32C. A
/// producer moving to a new epoch renumbers the batches it has not sent yet with it.
pub fn restamp_producer(
    bytes: &mut [u8],
    epoch: ProducerEpoch,
    sequence: BatchSequence,
) -> Result<(), BatchError> {
    if bytes.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::TooShort { len: bytes.len() });
    }
    bytes[51..53].copy_from_slice(&epoch.0.to_be_bytes());
    bytes[53..57].copy_from_slice(&(sequence.0 as i32).to_be_bytes());
    let crc = crc32c::crc32c(&bytes[CRC_START..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The same batch with its records compressed by `codec` (header fields kept, attributes,
/// length and CRC-32C rewritten). For tools and tests: Tailstream's own producers do not
/// compress; Kafka clients do, and the broker stores what they send.
pub fn compress_batch(
    batch: &[u8],
    codec: crate::compression::Compression,
) -> Result<Vec<u8>, BatchError> {
    let info = read_batch_header(batch)?;
    if info.compression != Compression::None {
        return Err(BatchError::UnsupportedAttributes(codec as u16));
    }
    let records = crate::compression::compress(codec, &batch[BATCH_HEADER_BYTES..]);
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + records.len());
    out.extend_from_slice(&batch[..BATCH_HEADER_BYTES]);
    out.extend_from_slice(&records);
    let length = i32::try_from(out.len() - 12).map_err(|_| BatchError::TooShort { len: 0 })?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let attributes = (be_i16(batch, 21) as u16 & !0b111) | codec as u16;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Fills in the header of a batch whose records are already at `bytes[61..]` and computes
/// its CRC-32C. Used by `RecordBatchBuilder`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_header(
    bytes: &mut [u8],
    record_count: u32,
    base_timestamp_ms: i64,
    max_timestamp_ms: i64,
    producer: Option<ProducerSequence>,
) {
    let batch_length = (bytes.len() - 12) as i32;
    // No producer: Kafka's -1 for the id, the epoch and the sequence.
    let (producer_id, producer_epoch, base_sequence) =
        producer.map_or((-1i64, -1i16, -1i32), |p| {
            (
                p.producer_id.0 as i64,
                p.producer_epoch.0,
                p.base_sequence.0 as i32,
            )
        });
    bytes[0..8].copy_from_slice(&0i64.to_be_bytes());
    bytes[8..12].copy_from_slice(&batch_length.to_be_bytes());
    bytes[12..16].copy_from_slice(&0i32.to_be_bytes());
    bytes[16] = BATCH_MAGIC;
    bytes[21..23].copy_from_slice(&0i16.to_be_bytes());
    bytes[23..27].copy_from_slice(&(record_count as i32 - 1).to_be_bytes());
    bytes[27..35].copy_from_slice(&base_timestamp_ms.to_be_bytes());
    bytes[35..43].copy_from_slice(&max_timestamp_ms.to_be_bytes());
    bytes[43..51].copy_from_slice(&producer_id.to_be_bytes());
    bytes[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
    bytes[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    bytes[57..61].copy_from_slice(&(record_count as i32).to_be_bytes());
    let crc = crc32c::crc32c(&bytes[CRC_START..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
}
