//! Finding the valid prefix of a segment buffer: Tailwind's Algorithm 1.
//!
//! `scan_segment` is the one function that decides which bytes of a segment are real. The
//! broker uses it to verify its own segments, a backup to rebuild an open replica's length
//! after its primary crashed, and recovery to check closed replicas before serving them.
//!
//! It walks entry headers from the start, chaining a CRC32 over every non-trailer header and
//! verifying each payload's CRC32, and stops at the first of: an unwritten (zero) type byte,
//! an unknown type, a length past the end of the buffer, a payload checksum mismatch, or a
//! trailer that does not match the chain. The valid prefix ends at the last trailer that
//! matched. Verifying payload checksums (beyond the paper's header-only chain) means a bit
//! flip anywhere in the last write also drops that write, never serves it.

use crate::entry::{ENTRY_HEADER_BYTES, EntryHeader, EntryType, HeaderChain, TRAILER_VALUE_BYTES};
use std::ops::Range;
use thiserror::Error;

/// Why the scan stopped where it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanStop {
    /// A zero type byte: nothing was written from here on (the normal end of an open buffer).
    Unwritten,
    /// The last entry ended exactly at the end of the buffer.
    EndOfBuffer,
    /// A type byte that is no entry type: a torn or corrupted header.
    UnknownType(u8),
    /// A header, or the payload it announces, runs past the end of the buffer.
    LengthPastEnd,
    /// An entry's payload does not match the CRC32 in its header.
    PayloadChecksum,
    /// A trailer whose value does not match the chained header checksum, that is malformed, or
    /// that follows no entry (the appender writes one trailer after each entry, so a trailer
    /// first or right after another is damage: a flipped type bit can make one).
    TrailerMismatch,
}

impl ScanStop {
    /// True when the scan ended because the written bytes ended, not because of damage.
    pub fn is_clean(self) -> bool {
        matches!(self, ScanStop::Unwritten | ScanStop::EndOfBuffer)
    }
}

/// Result of scanning one segment buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Bytes from the start of the buffer up to the end of the last matching trailer.
    pub valid_len: usize,
    /// Batch entries inside the valid prefix.
    pub batch_entries: u32,
    /// Byte range of the log digest payload, when the first entry of the valid prefix is one.
    pub digest: Option<Range<usize>>,
    /// The value of the last matching trailer (0 when none matched).
    pub last_trailer: u32,
    pub stop: ScanStop,
    /// Where the scan stopped (start of the offending entry, or the end of written bytes).
    pub stop_at: usize,
}

/// Whether a scan checks batch payloads against their CRC32 (the small payloads of trailers
/// and log digests are always checked: recovery plans from digests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PayloadChecks {
    /// Every payload: what deciding which bytes to serve needs.
    Verify = 0,
    /// Headers, the trailer chain and digests only: the structure, for a check that the
    /// bytes end where the writer said (a backup closing a replica) without reading the data.
    SkipBatches = 1,
}

/// Algorithm 1 over `buf`. Never panics and never reads outside `buf`.
pub fn scan_segment(buf: &[u8]) -> ScanOutcome {
    scan_segment_with(buf, PayloadChecks::Verify)
}

/// Algorithm 1 over `buf`, checking batch payloads or not. With `PayloadChecks::SkipBatches`
/// a flipped bit in a batch's payload goes unnoticed: the outcome says where the structure
/// ends, not that the data is intact.
pub fn scan_segment_with(buf: &[u8], payloads: PayloadChecks) -> ScanOutcome {
    let mut chain = HeaderChain::new();
    let mut pos = 0usize;
    let mut outcome = ScanOutcome {
        valid_len: 0,
        batch_entries: 0,
        digest: None,
        last_trailer: 0,
        stop: ScanStop::EndOfBuffer,
        stop_at: 0,
    };
    let mut pending_batches = 0u32;
    let mut pending_digest = None;
    // Entries since the last trailer: a trailer must follow at least one.
    let mut entries_since_trailer = 0u32;
    let stop = loop {
        if pos == buf.len() {
            break ScanStop::EndOfBuffer;
        }
        if buf[pos] == 0 {
            break ScanStop::Unwritten;
        }
        let Some(raw) = buf.get(pos..pos + ENTRY_HEADER_BYTES) else {
            break ScanStop::LengthPastEnd;
        };
        let raw: &[u8; ENTRY_HEADER_BYTES] = raw.try_into().expect("invariant: slice of len 9");
        let header = match EntryHeader::decode(raw) {
            Ok(header) => header,
            Err(raw_type) => break ScanStop::UnknownType(raw_type),
        };
        let payload_start = pos + ENTRY_HEADER_BYTES;
        let Some(payload) = payload_start
            .checked_add(header.payload_len as usize)
            .and_then(|end| buf.get(payload_start..end))
        else {
            break ScanStop::LengthPastEnd;
        };
        let check = payloads == PayloadChecks::Verify || header.entry_type != EntryType::Batch;
        if check && crc32fast::hash(payload) != header.payload_crc32 {
            break if header.entry_type == EntryType::Trailer {
                ScanStop::TrailerMismatch
            } else {
                ScanStop::PayloadChecksum
            };
        }
        let entry_end = payload_start + payload.len();
        match header.entry_type {
            EntryType::Trailer => {
                let Ok(value) = <[u8; TRAILER_VALUE_BYTES]>::try_from(payload) else {
                    break ScanStop::TrailerMismatch;
                };
                let value = u32::from_le_bytes(value);
                if value != chain.trailer_value() || entries_since_trailer == 0 {
                    break ScanStop::TrailerMismatch;
                }
                entries_since_trailer = 0;
                outcome.valid_len = entry_end;
                outcome.last_trailer = value;
                outcome.batch_entries += std::mem::take(&mut pending_batches);
                if outcome.digest.is_none() {
                    outcome.digest = pending_digest.take();
                }
            }
            EntryType::Batch => {
                chain.push(raw);
                pending_batches += 1;
                entries_since_trailer += 1;
            }
            EntryType::LogDigest => {
                chain.push(raw);
                entries_since_trailer += 1;
                if pos == 0 {
                    pending_digest = Some(payload_start..entry_end);
                }
            }
        }
        pos = entry_end;
    };
    outcome.stop = stop;
    outcome.stop_at = pos;
    outcome
}

/// A closed replica that does not hold exactly what its primary closed it with.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "corrupt closed segment: valid prefix is {valid_len} bytes, expected {expected_len} ({stop:?} at {stop_at})"
)]
pub struct Corruption {
    pub valid_len: usize,
    pub expected_len: usize,
    pub stop: ScanStop,
    pub stop_at: usize,
}

/// Verifies a closed segment: its valid prefix must be exactly `expected_len` bytes. A closed
/// replica that fails this is corrupt and must never be served.
pub fn verify_closed(buf: &[u8], expected_len: usize) -> Result<ScanOutcome, Corruption> {
    verify_closed_with(buf, expected_len, PayloadChecks::Verify)
}

/// `verify_closed`, checking payloads or only the structure (see `PayloadChecks`).
pub fn verify_closed_with(
    buf: &[u8],
    expected_len: usize,
    payloads: PayloadChecks,
) -> Result<ScanOutcome, Corruption> {
    let outcome = scan_segment_with(buf, payloads);
    if outcome.valid_len == expected_len {
        Ok(outcome)
    } else {
        Err(Corruption {
            valid_len: outcome.valid_len,
            expected_len,
            stop: outcome.stop,
            stop_at: outcome.stop_at,
        })
    }
}

/// One entry read from a run of committed entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// Byte offset of the entry's header within the buffer that was iterated.
    pub position: usize,
    pub header: EntryHeader,
    pub payload: &'a [u8],
}

impl EntryRef<'_> {
    pub fn end(&self) -> usize {
        self.position + ENTRY_HEADER_BYTES + self.payload.len()
    }
}

/// Why a run of entries (a fetch response, a committed segment range) is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum EntryError {
    #[error("entry at {position}: unknown type {raw_type}")]
    UnknownType { position: usize, raw_type: u8 },
    #[error("entry at {position}: truncated")]
    Truncated { position: usize },
    #[error("entry at {position}: payload checksum mismatch")]
    PayloadChecksum { position: usize },
}

/// Iterates the entries of `buf`, which must consist of whole entries only (a committed range).
/// With `verify_payloads`, each payload's CRC32 is checked (consumers do this end to end).
/// Stops after the first error.
#[derive(Clone, Debug)]
pub struct EntryIter<'a> {
    buf: &'a [u8],
    pos: usize,
    verify_payloads: bool,
    failed: bool,
}

impl<'a> EntryIter<'a> {
    pub fn new(buf: &'a [u8], verify_payloads: bool) -> Self {
        Self {
            buf,
            pos: 0,
            verify_payloads,
            failed: false,
        }
    }
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = Result<EntryRef<'a>, EntryError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let position = self.pos;
        let result = read_entry(self.buf, position, self.verify_payloads);
        match &result {
            Ok(entry) => self.pos = entry.end(),
            Err(_) => self.failed = true,
        }
        Some(result)
    }
}

fn read_entry(buf: &[u8], position: usize, verify: bool) -> Result<EntryRef<'_>, EntryError> {
    let raw = buf
        .get(position..position + ENTRY_HEADER_BYTES)
        .ok_or(EntryError::Truncated { position })?;
    let raw: &[u8; ENTRY_HEADER_BYTES] = raw.try_into().expect("invariant: slice of len 9");
    let header = EntryHeader::decode(raw)
        .map_err(|raw_type| EntryError::UnknownType { position, raw_type })?;
    let start = position + ENTRY_HEADER_BYTES;
    let payload = start
        .checked_add(header.payload_len as usize)
        .and_then(|end| buf.get(start..end))
        .ok_or(EntryError::Truncated { position })?;
    if verify && crc32fast::hash(payload) != header.payload_crc32 {
        return Err(EntryError::PayloadChecksum { position });
    }
    Ok(EntryRef {
        position,
        header,
        payload,
    })
}

/// Reads the single entry starting at `position` (used by the broker to walk its own
/// committed bytes by header only).
pub fn entry_at(buf: &[u8], position: usize) -> Result<EntryRef<'_>, EntryError> {
    read_entry(buf, position, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::SegmentImage;
    use proptest::prelude::*;

    #[test]
    fn a_trailer_that_follows_no_entry_is_damage() {
        // A matching trailer with no entry before it: first in the buffer...
        let lone = HeaderChain::new().trailer();
        let outcome = scan_segment(&lone);
        assert_eq!(
            (outcome.valid_len, outcome.stop),
            (0, ScanStop::TrailerMismatch)
        );
        // ...or right after the trailer of a real append.
        let (image, spans) = build(256, &[b"one".to_vec()]);
        let mut bytes = image.bytes[..image.written()].to_vec();
        let mut chain = HeaderChain::new();
        for entry in EntryIter::new(&bytes, true) {
            let entry = entry.unwrap();
            if entry.header.entry_type != EntryType::Trailer {
                chain.push(&entry.header.encode());
            }
        }
        bytes.extend_from_slice(&chain.trailer());
        let outcome = scan_segment(&bytes);
        assert_eq!(outcome.valid_len, spans.last().unwrap().1);
        assert_eq!(outcome.stop, ScanStop::TrailerMismatch);
    }

    /// A segment with a digest and `payloads` as batches; returns it and each append's
    /// (start, end).
    fn build(capacity: usize, payloads: &[Vec<u8>]) -> (SegmentImage, Vec<(usize, usize)>) {
        let mut image = SegmentImage::new(capacity);
        let mut spans = Vec::new();
        let digest = image.append(EntryType::LogDigest, b"digest").unwrap();
        spans.push((digest.position, digest.end));
        for payload in payloads {
            let appended = image.append(EntryType::Batch, payload).unwrap();
            spans.push((appended.position, appended.end));
        }
        (image, spans)
    }

    fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6)
    }

    #[test]
    fn a_flip_of_any_bit_of_any_append_drops_exactly_that_append_and_what_follows() {
        let (image, spans) = build(512, &[b"one".to_vec(), vec![7; 30], b"three".to_vec()]);
        for (index, &(start, end)) in spans.iter().enumerate() {
            for bit in start * 8..end * 8 {
                let mut bytes = image.bytes.clone();
                bytes[bit / 8] ^= 1 << (bit % 8);
                let outcome = scan_segment(&bytes);
                assert_eq!(outcome.valid_len, start, "append {index}, bit {bit}");
                assert!(!outcome.stop.is_clean() || outcome.valid_len == start);
            }
        }
    }

    /// The last write (one append: entry + trailer) is torn at every byte, zeroed, and has each
    /// of its bits flipped in turn: the valid prefix is always exactly what was acknowledged
    /// before it, for segments of several appends of several shapes.
    #[test]
    fn every_damage_to_the_last_write_yields_exactly_the_acked_prefix() {
        let shapes: [&[usize]; 4] = [&[1], &[0, 17], &[5, 64, 3], &[200, 1, 1, 90]];
        for shape in shapes {
            let payloads: Vec<Vec<u8>> = shape
                .iter()
                .enumerate()
                .map(|(i, len)| vec![i as u8 + 1; *len])
                .collect();
            let (image, spans) = build(1024, &payloads);
            let (last_start, last_end) = *spans.last().unwrap();
            let acked = last_start;
            for cut in last_start..last_end {
                let mut torn = image.bytes.clone();
                torn[cut..last_end].fill(0);
                assert_eq!(
                    scan_segment(&torn).valid_len,
                    acked,
                    "{shape:?} cut at {cut}"
                );
            }
            let mut zeroed = image.bytes.clone();
            zeroed[last_start..last_end].fill(0);
            assert_eq!(scan_segment(&zeroed).valid_len, acked, "{shape:?} zeroed");
            for bit in last_start * 8..last_end * 8 {
                let mut flipped = image.bytes.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert_eq!(
                    scan_segment(&flipped).valid_len,
                    acked,
                    "{shape:?} bit {bit}"
                );
            }
            assert_eq!(scan_segment(&image.bytes).valid_len, last_end);
        }
    }

    /// A closed segment fails verification for a flip of any one of its bits.
    #[test]
    fn a_closed_segment_with_any_flipped_bit_fails_verification() {
        let (image, spans) = build(512, &[b"one".to_vec(), vec![9; 40], b"three".to_vec()]);
        let length = spans.last().unwrap().1;
        assert!(verify_closed(&image.bytes, length).is_ok());
        for bit in 0..length * 8 {
            let mut flipped = image.bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(verify_closed(&flipped, length).is_err(), "bit {bit}");
        }
    }

    /// Without batch payload checks, a flip inside a batch's payload goes unnoticed, while a flip
    /// in any header or trailer still ends the structure there.
    #[test]
    fn a_structure_check_sees_every_header_and_trailer_flip_and_no_payload_flip() {
        let (image, spans) = build(512, &[b"one".to_vec(), vec![9; 40], b"three".to_vec()]);
        let length = spans.last().unwrap().1;
        let skip = PayloadChecks::SkipBatches;
        assert_eq!(
            verify_closed_with(&image.bytes, length, skip)
                .unwrap()
                .batch_entries,
            3
        );
        // Each batch's payload follows its header; the trailer comes after it.
        let lens = [3, 40, 5];
        let in_payload = |byte: usize| {
            spans[1..].iter().zip(lens).any(|(span, len)| {
                (span.0 + ENTRY_HEADER_BYTES..span.0 + ENTRY_HEADER_BYTES + len).contains(&byte)
            })
        };
        for bit in 0..length * 8 {
            let mut flipped = image.bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let structure = verify_closed_with(&flipped, length, skip);
            assert_eq!(structure.is_ok(), in_payload(bit / 8), "bit {bit}");
            assert!(verify_closed(&flipped, length).is_err(), "bit {bit}");
        }
    }

    proptest! {
        #[test]
        fn a_whole_segment_scans_to_its_last_trailer(payloads in payloads()) {
            let (image, spans) = build(1024, &payloads);
            let outcome = scan_segment(&image.bytes);
            prop_assert_eq!(outcome.valid_len, spans.last().unwrap().1);
            prop_assert_eq!(outcome.batch_entries as usize, payloads.len());
            prop_assert_eq!(outcome.stop, ScanStop::Unwritten);
            prop_assert!(verify_closed(&image.bytes, image.written()).is_ok());
        }

        #[test]
        fn a_torn_write_keeps_only_the_appends_that_ended_before_the_tear(
            payloads in payloads(), cut in any::<proptest::sample::Index>()
        ) {
            let (image, spans) = build(1024, &payloads);
            let cut = cut.index(image.written() + 1);
            let mut bytes = image.bytes.clone();
            bytes[cut..].fill(0);
            // The write is torn where the zeroed bytes first differ from what was written: a
            // cut inside bytes that were zero already (a trailer's high byte, say) tears
            // nothing there.
            let torn = (cut..image.written())
                .find(|i| image.bytes[*i] != 0)
                .unwrap_or(image.written());
            let expected = spans.iter().map(|s| s.1).filter(|end| *end <= torn).max().unwrap_or(0);
            let outcome = scan_segment(&bytes);
            prop_assert_eq!(outcome.valid_len, expected);
            if expected < image.written() {
                prop_assert!(verify_closed(&bytes, image.written()).is_err());
            }
        }

        #[test]
        fn a_flipped_bit_is_never_inside_the_valid_prefix(
            payloads in payloads(), at in any::<proptest::sample::Index>(), bit in 0u8..8
        ) {
            let (image, spans) = build(1024, &payloads);
            let at = at.index(image.written());
            let mut bytes = image.bytes.clone();
            bytes[at] ^= 1 << bit;
            let start = spans.iter().find(|s| s.0 <= at && at < s.1).unwrap().0;
            prop_assert_eq!(scan_segment(&bytes).valid_len, start);
            prop_assert!(verify_closed(&bytes, image.written()).is_err());
        }

        #[test]
        fn committed_entries_iterate_back_as_written(payloads in payloads()) {
            let (image, _) = build(1024, &payloads);
            let entries: Vec<_> = EntryIter::new(&image.bytes[..image.written()], true)
                .collect::<Result<_, _>>()
                .unwrap();
            let batches: Vec<_> = entries
                .iter()
                .filter(|e| e.header.entry_type == EntryType::Batch)
                .map(|e| e.payload.to_vec())
                .collect();
            prop_assert_eq!(batches, payloads);
        }
    }
}
