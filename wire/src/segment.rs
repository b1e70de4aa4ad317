//! Writing entries into a segment buffer: entry, then trailer, at increasing offsets.
//!
//! `SegmentAppender` holds the running header chain and the write offset. It writes into the
//! *unwritten tail* of a buffer handed to it by its owner, so the owner can keep the written
//! part shared with readers (the broker) or replicate it (the replication layer) while the
//! appender only ever touches bytes nobody else looks at yet.

use crate::entry::{ENTRY_HEADER_BYTES, EntryHeader, EntryType, HeaderChain, TRAILER_BYTES};
use bytes::{BufMut, BytesMut};
use thiserror::Error;

/// Bytes one append of a `payload_len`-byte payload takes: header, payload, trailer.
pub const fn append_bytes(payload_len: usize) -> usize {
    ENTRY_HEADER_BYTES + payload_len + TRAILER_BYTES
}

/// The append does not fit in what is left of the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("append of {needed} bytes does not fit in the {remaining} bytes left in the segment")]
pub struct SegmentFull {
    pub needed: usize,
    pub remaining: usize,
}

/// Where an append landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendedEntry {
    /// Offset of the entry header in the segment.
    pub position: usize,
    /// Offset just past the trailer: the segment's written length after this append.
    pub end: usize,
}

/// Appends entries + trailers to one segment.
#[derive(Clone, Debug)]
pub struct SegmentAppender {
    chain: HeaderChain,
    written: usize,
    capacity: usize,
}

impl SegmentAppender {
    pub fn new(capacity: usize) -> Self {
        Self {
            chain: HeaderChain::new(),
            written: 0,
            capacity,
        }
    }

    /// An appender for a segment whose valid prefix is `valid` (as Algorithm 1 finds it, e.g.
    /// a segment rebuilt from a replica): its header chain is rebuilt, so appends continue as
    /// if it had written them. `None` unless `valid` is exactly a valid prefix.
    pub fn resume(capacity: usize, valid: &[u8]) -> Option<Self> {
        if valid.len() > capacity || crate::scan::scan_segment(valid).valid_len != valid.len() {
            return None;
        }
        let mut chain = HeaderChain::new();
        for entry in crate::scan::EntryIter::new(valid, false) {
            let entry = entry.ok()?;
            if entry.header.entry_type != EntryType::Trailer {
                chain.push(&entry.header.encode());
            }
        }
        Some(Self {
            chain,
            written: valid.len(),
            capacity,
        })
    }

    /// Bytes written so far (the position the next entry will have).
    pub fn written(&self) -> usize {
        self.written
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn remaining(&self) -> usize {
        self.capacity - self.written
    }

    pub fn fits(&self, payload_len: usize) -> bool {
        append_bytes(payload_len) <= self.remaining()
    }

    /// Appends one entry whose payload `fill` writes (into a slice of exactly `payload_len`
    /// bytes), then its trailer. `tail` must be the buffer from `self.written()` to its end and
    /// must be all zeroes. The payload checksum is computed after `fill`, so `fill` may stamp
    /// fields (the broker stamps a batch's base offset) while copying.
    pub fn append_with(
        &mut self,
        tail: &mut [u8],
        entry_type: EntryType,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<AppendedEntry, SegmentFull> {
        let needed = append_bytes(payload_len);
        if needed > self.remaining() || needed > tail.len() {
            return Err(SegmentFull {
                needed,
                remaining: self.remaining().min(tail.len()),
            });
        }
        debug_assert_ne!(
            entry_type,
            EntryType::Trailer,
            "trailers are written by the appender"
        );
        let (header_slot, rest) = tail.split_at_mut(ENTRY_HEADER_BYTES);
        let (payload_slot, rest) = rest.split_at_mut(payload_len);
        fill(payload_slot);
        let header = EntryHeader::for_payload(entry_type, payload_slot).encode();
        header_slot.copy_from_slice(&header);
        self.chain.push(&header);
        rest[..TRAILER_BYTES].copy_from_slice(&self.chain.trailer());
        let position = self.written;
        self.written += needed;
        Ok(AppendedEntry {
            position,
            end: self.written,
        })
    }

    /// Appends one entry whose payload is a copy of `payload`, then its trailer, at the end of
    /// `out`, in `out`'s spare capacity. Nothing needs to be pre-zeroed: every byte of the
    /// append is written here. `stamp` may change fields of the copied payload (the broker
    /// stamps a batch's base offset) before its checksum is computed. `out` is never grown:
    /// a segment is one fixed allocation whose written part is shared with readers, so an
    /// append without room in `out`'s capacity is refused like one past the segment's end.
    pub fn append_copy(
        &mut self,
        out: &mut BytesMut,
        entry_type: EntryType,
        payload: &[u8],
        stamp: impl FnOnce(&mut [u8]),
    ) -> Result<AppendedEntry, SegmentFull> {
        let needed = append_bytes(payload.len());
        let room = out.capacity() - out.len();
        if needed > self.remaining() || needed > room {
            return Err(SegmentFull {
                needed,
                remaining: self.remaining().min(room),
            });
        }
        debug_assert_ne!(
            entry_type,
            EntryType::Trailer,
            "trailers are written by the appender"
        );
        let header_at = out.len();
        // The header's place, written once the payload's checksum is known.
        out.put_bytes(0, ENTRY_HEADER_BYTES);
        out.put_slice(payload);
        let payload_slot = &mut out[header_at + ENTRY_HEADER_BYTES..];
        stamp(payload_slot);
        let header = EntryHeader::for_payload(entry_type, payload_slot).encode();
        out[header_at..header_at + ENTRY_HEADER_BYTES].copy_from_slice(&header);
        self.chain.push(&header);
        out.put_slice(&self.chain.trailer());
        let position = self.written;
        self.written += needed;
        Ok(AppendedEntry {
            position,
            end: self.written,
        })
    }

    /// `append_with` for a payload that is already in one slice.
    pub fn append(
        &mut self,
        tail: &mut [u8],
        entry_type: EntryType,
        payload: &[u8],
    ) -> Result<AppendedEntry, SegmentFull> {
        self.append_with(tail, entry_type, payload.len(), |slot| {
            slot.copy_from_slice(payload)
        })
    }
}

/// A whole segment in a `Vec`, for tests, tools and recovery: a pre-zeroed buffer plus its
/// appender.
#[derive(Clone, Debug)]
pub struct SegmentImage {
    pub bytes: Vec<u8>,
    appender: SegmentAppender,
}

impl SegmentImage {
    pub fn new(capacity: usize) -> Self {
        Self {
            bytes: vec![0; capacity],
            appender: SegmentAppender::new(capacity),
        }
    }

    pub fn append(
        &mut self,
        entry_type: EntryType,
        payload: &[u8],
    ) -> Result<AppendedEntry, SegmentFull> {
        let tail = &mut self.bytes[self.appender.written()..];
        self.appender.append(tail, entry_type, payload)
    }

    pub fn written(&self) -> usize {
        self.appender.written()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{ScanStop, scan_segment};

    #[test]
    fn appends_are_entry_then_trailer_and_scan_finds_them_all() {
        let mut image = SegmentImage::new(256);
        let first = image.append(EntryType::LogDigest, b"digest").unwrap();
        let second = image.append(EntryType::Batch, b"batch-one").unwrap();
        assert_eq!(first.position, 0);
        assert_eq!(second.position, append_bytes(6));
        let outcome = scan_segment(&image.bytes);
        assert_eq!(outcome.valid_len, second.end);
        assert_eq!(outcome.batch_entries, 1);
        assert_eq!(outcome.stop, ScanStop::Unwritten);
        assert_eq!(
            outcome.digest,
            Some(ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + 6)
        );
    }

    #[test]
    fn a_resumed_appender_continues_exactly_where_the_prefix_ends() {
        let mut whole = SegmentImage::new(512);
        whole.append(EntryType::LogDigest, b"digest").unwrap();
        whole.append(EntryType::Batch, b"one").unwrap();
        let prefix = whole.bytes[..whole.written()].to_vec();
        whole.append(EntryType::Batch, b"two").unwrap();
        let mut resumed = SegmentAppender::resume(512, &prefix).unwrap();
        let mut bytes = vec![0u8; 512];
        bytes[..prefix.len()].copy_from_slice(&prefix);
        resumed
            .append(&mut bytes[prefix.len()..], EntryType::Batch, b"two")
            .unwrap();
        assert_eq!(bytes, whole.bytes, "same bytes, trailer chain included");
        assert!(SegmentAppender::resume(512, &prefix[..prefix.len() - 1]).is_none());
    }

    #[test]
    fn copying_appends_into_spare_capacity_write_the_same_bytes_and_never_grow_it() {
        let mut image = SegmentImage::new(128);
        image.append(EntryType::LogDigest, b"digest").unwrap();
        image.append(EntryType::Batch, b"BATCH-one").unwrap();
        let mut appender = SegmentAppender::new(128);
        // Stale bytes from an earlier use of the memory must not matter.
        let mut out = BytesMut::with_capacity(128);
        out.put_bytes(0xAB, 128);
        out.clear();
        appender
            .append_copy(&mut out, EntryType::LogDigest, b"digest", |_| {})
            .unwrap();
        let batch = appender
            .append_copy(&mut out, EntryType::Batch, b"batch-one", |slot| {
                slot[..5].copy_from_slice(b"BATCH")
            })
            .unwrap();
        assert_eq!(&out[..], &image.bytes[..image.written()]);
        assert_eq!(batch.end, out.len());
        let capacity = out.capacity();
        let before = out.clone();
        let err = appender
            .append_copy(&mut out, EntryType::Batch, &[1; 80], |_| {})
            .unwrap_err();
        assert_eq!(err.needed, append_bytes(80));
        assert_eq!((out.capacity(), &out[..]), (capacity, &before[..]));
        // Room in the appender but not in the buffer: refused too, never reallocated.
        let mut small = BytesMut::with_capacity(16);
        let mut fresh = SegmentAppender::new(1 << 20);
        assert!(
            fresh
                .append_copy(&mut small, EntryType::Batch, &[0; 64], |_| {})
                .is_err()
        );
        assert!(small.is_empty());
    }

    #[test]
    fn an_append_that_does_not_fit_leaves_the_segment_untouched() {
        let mut image = SegmentImage::new(40);
        assert!(image.append(EntryType::Batch, &[7; 10]).is_ok());
        let before = image.bytes.clone();
        let err = image.append(EntryType::Batch, &[7; 10]).unwrap_err();
        assert_eq!(err.needed, append_bytes(10));
        assert_eq!(image.bytes, before);
    }
}
