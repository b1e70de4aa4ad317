//! tailstream-wire: the only place Tailstream's bytes are defined.
//!
//! Nothing here does I/O; every decoder takes bytes and returns a value or an error, never a
//! panic, and caps every length before allocating.
//!
//! - [`ids`]: typed identifiers (`StreamId`, `StreamletId`, `LogId`, `GroupId`, `SegmentId`,
//!   `ServerId` with generation, ...).
//! - [`codec`]: bounded little-endian reader/writer primitives, `Encode`/`Decode`.
//! - [`field`]: `WireField` per field type and the `wire_message!` macro.
//! - [`frame`]: the 32-byte frame header (magic, checksums, request id, opcode, status) and the
//!   incremental `FrameDecoder`.
//! - [`status`]: typed status codes and what a caller should do about each.
//! - [`messages`]: request/response bodies for every opcode.
//! - [`nic`]: the software one-sided write protocol (hello, write header, completion).
//! - [`entry`]: segment entries: entry header, types, checksum trailer, log digest.
//! - [`segment`]: `SegmentAppender`, which writes entry + trailer into a segment buffer.
//! - [`scan`]: Algorithm 1 (`scan_segment`), closed-segment verification, entry iteration.
//! - [`batch`]: the Kafka RecordBatch v2 header: validation, stamping, sequence;
//!   [`compression`]: the batch codecs (gzip, snappy, lz4, zstd), decompression bounded.
//! - [`record_scan`]: the one walk over a batch's records (validation without allocating, and
//!   the cursor decoders share); [`records`]: the builder producers use and the record
//!   iterator consumers use; [`varint`]: zigzag varints.
//! - [`replica_files`]: a backup's on-disk formats (claim records, closed replicas' file
//!   names), which recovery reads; [`offsets_file`]: the coordinator's committed-offsets file;
//!   [`metadata_journal`]: the coordinator file store's journal of changes.
//! - [`fuzzing`]: every decoder behind a few entry points, fed raw bytes and, through
//!   [`fuzzing::Source`], recipes for checksum-repaired input; for fuzz targets and property
//!   tests.

pub mod batch;
pub mod codec;
pub mod compression;
pub mod entry;
pub mod field;
pub mod frame;
pub mod fuzzing;
pub mod ids;
pub mod messages;
pub mod metadata_journal;
pub mod nic;
pub mod offsets_file;
pub mod record_scan;
pub mod records;
pub mod replica_files;
pub mod scan;
pub mod segment;
pub mod status;
pub mod varint;

pub use codec::{Decode, DecodeError, Encode};
pub use field::Appended;
pub use frame::{Frame, FrameDecoder, FrameError, FrameHeader, Opcode};
pub use ids::*;
pub use status::Status;
