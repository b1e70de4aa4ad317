//! The compression codecs a Kafka record batch may use (attributes bits 0-2): gzip, snappy,
//! lz4 and zstd. A compressed batch is stored and served as it came; it is decompressed only to
//! walk its records (the broker's validation, a consumer's decoding), never re-compressed.
//!
//! Every decompression stops at `DECOMPRESSED_BYTES_MAX`: a small batch cannot ask for more
//! memory than that however well it compresses. Snappy comes in two framings: Kafka's Java
//! client wraps blocks in the xerial framing, librdkafka sends raw snappy; both are read.

use crate::batch::BatchError;
use std::io::Read;

/// The most bytes one batch's records may decompress to.
pub const DECOMPRESSED_BYTES_MAX: usize = 32 << 20;

/// The codec of a batch. Discriminants are Kafka's attribute values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Compression {
    pub fn from_attributes(attributes: u16) -> Option<Compression> {
        match attributes & 0b111 {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// The xerial framing's magic and header: magic, version 1, compatible version 1.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_BYTES: usize = 16;

fn failed(reason: &'static str) -> BatchError {
    BatchError::Compression(reason)
}

std::thread_local! {
    /// Bytes decompressed on this thread so far (`decompressed_on_this_thread`).
    static DECOMPRESSED_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Bytes this thread has decompressed so far: read before and after a synchronous piece of
/// work (a produce's validation), the difference is what that work decompressed, failures
/// included (a batch that does not decompress counts `DECOMPRESSED_BYTES_MAX`, the most its
/// attempt can have cost). Lets a front end charge decompression to whoever asked for it
/// without threading a meter through storage.
pub fn decompressed_on_this_thread() -> u64 {
    DECOMPRESSED_HERE.with(std::cell::Cell::get)
}

/// Decompresses a batch's records (`None` is returned as a copy), counted on this thread's
/// meter.
pub fn decompress(codec: Compression, input: &[u8]) -> Result<Vec<u8>, BatchError> {
    let result = decompress_uncounted(codec, input);
    let work = match (&result, codec) {
        (_, Compression::None) => 0,
        (Ok(plain), _) => plain.len(),
        (Err(_), _) => DECOMPRESSED_BYTES_MAX,
    };
    DECOMPRESSED_HERE.with(|here| here.set(here.get().saturating_add(work as u64)));
    result
}

fn decompress_uncounted(codec: Compression, input: &[u8]) -> Result<Vec<u8>, BatchError> {
    match codec {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(input)),
        Compression::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(input)),
        Compression::Zstd => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(input)
                .map_err(|_| failed("not a zstd frame"))?;
            read_bounded(decoder)
        }
        Compression::Snappy => {
            if input.starts_with(&XERIAL_MAGIC) {
                snappy_xerial(input)
            } else {
                let mut out = Vec::new();
                snappy_block(input, &mut out)?;
                Ok(out)
            }
        }
    }
}

/// Reads a decompressing reader to its end, refusing more than `DECOMPRESSED_BYTES_MAX`.
fn read_bounded(reader: impl Read) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    reader
        .take(DECOMPRESSED_BYTES_MAX as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| failed("compressed records do not decompress"))?;
    if out.len() > DECOMPRESSED_BYTES_MAX {
        return Err(failed("records decompress to more than the limit"));
    }
    Ok(out)
}

/// One raw snappy block appended to `out`, its announced length checked first.
fn snappy_block(block: &[u8], out: &mut Vec<u8>) -> Result<(), BatchError> {
    let length = snap::raw::decompress_len(block).map_err(|_| failed("not snappy"))?;
    if out.len().saturating_add(length) > DECOMPRESSED_BYTES_MAX {
        return Err(failed("records decompress to more than the limit"));
    }
    let start = out.len();
    out.resize(start + length, 0);
    snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|_| failed("snappy block does not decompress"))?;
    Ok(())
}

/// Xerial-framed snappy: the header, then blocks, each a big-endian length and a raw block.
fn snappy_xerial(input: &[u8]) -> Result<Vec<u8>, BatchError> {
    let mut at = XERIAL_HEADER_BYTES;
    if input.len() < at {
        return Err(failed("truncated xerial snappy header"));
    }
    let mut out = Vec::new();
    while at < input.len() {
        let length = input
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or(failed("truncated xerial snappy block length"))?;
        at += 4;
        let block = at
            .checked_add(length)
            .and_then(|end| input.get(at..end))
            .ok_or(failed("xerial snappy block runs past the batch"))?;
        snappy_block(block, &mut out)?;
        at += length;
    }
    Ok(out)
}

/// Compresses `input` with `codec` (for tests and tools: producers that compress build their
/// batches with it). Snappy is written raw, as librdkafka does.
pub fn compress(codec: Compression, input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match codec {
        Compression::None => input.to_vec(),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            // Writing to a Vec cannot fail.
            let _ = encoder.write_all(input);
            encoder.finish().unwrap_or_default()
        }
        Compression::Snappy => snap::raw::Encoder::new()
            .compress_vec(input)
            .unwrap_or_default(),
        Compression::Lz4 => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
            let _ = encoder.write_all(input);
            encoder.finish().unwrap_or_default()
        }
        Compression::Zstd => {
            ruzstd::encoding::compress_to_vec(input, ruzstd::encoding::CompressionLevel::Fastest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn every_codec_round_trips_and_refuses_garbage() {
        let input: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for codec in CODECS {
            let compressed = compress(codec, &input);
            assert_eq!(decompress(codec, &compressed).unwrap(), input, "{codec:?}");
            assert!(
                decompress(codec, b"definitely not compressed").is_err(),
                "{codec:?}"
            );
            // Nothing decompresses to nothing (or an error); a cut stream never to the input.
            assert!(decompress(codec, &[]).map_or(true, |out| out.is_empty()));
            for cut in [1, compressed.len() / 2] {
                assert!(
                    decompress(codec, &compressed[..cut]).map_or(true, |out| out != input),
                    "{codec:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn the_meter_counts_what_this_thread_decompressed_failures_at_the_most() {
        let input = vec![7u8; 100_000];
        let compressed = compress(Compression::Lz4, &input);
        let before = decompressed_on_this_thread();
        decompress(Compression::Lz4, &compressed).unwrap();
        assert_eq!(decompressed_on_this_thread() - before, 100_000);
        let before = decompressed_on_this_thread();
        assert!(decompress(Compression::Zstd, b"not zstd").is_err());
        assert_eq!(
            decompressed_on_this_thread() - before,
            DECOMPRESSED_BYTES_MAX as u64
        );
        let before = decompressed_on_this_thread();
        decompress(Compression::None, &input).unwrap();
        assert_eq!(decompressed_on_this_thread(), before, "a copy is no work");
    }

    #[test]
    fn xerial_framed_snappy_is_read_too() {
        let input = b"hello hello hello hello xerial".repeat(50);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&1u32.to_be_bytes());
        framed.extend_from_slice(&1u32.to_be_bytes());
        for chunk in input.chunks(700) {
            let block = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(decompress(Compression::Snappy, &framed).unwrap(), input);
        assert!(decompress(Compression::Snappy, &framed[..framed.len() - 3]).is_err());
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; DECOMPRESSED_BYTES_MAX + 4096];
        for codec in CODECS {
            let bomb = compress(codec, &zeros);
            assert!(bomb.len() < zeros.len() / 10, "{codec:?} compresses zeros");
            assert!(
                matches!(decompress(codec, &bomb), Err(BatchError::Compression(_))),
                "{codec:?}"
            );
        }
    }
}
