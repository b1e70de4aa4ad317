//! One fixed-size segment on its primary: one buffer written front to back.
//!
//! The written part is a list of immutable chunks, one per append (entry + trailer), all slices
//! of the one allocation; the unwritten tail is an empty `BytesMut` whose spare capacity is
//! the rest of that allocation, and only the appender touches it. Every exposed byte is
//! written by an append, so the buffer needs no zeroing and is reused once the segment is
//! freed and its readers are done (`MemoryLease::take_buffer`). Readers take zero-copy
//! `Bytes` of committed chunks and send them without holding any lock, and the replication
//! layer ships the very same chunks. Nothing is copied after the append's single copy of the
//! batch into the segment.

use super::memory::MemoryLease;
use bytes::{Bytes, BytesMut};
use tailstream_wire::batch::BatchInfo;
use tailstream_wire::entry::EntryType;
use tailstream_wire::segment::{AppendedEntry, SegmentAppender, SegmentFull};
use tailstream_wire::{RecordOffset, SegmentId};

/// The written bytes of one append.
#[derive(Clone, Debug)]
struct Chunk {
    position: u32,
    bytes: Bytes,
}

impl Chunk {
    fn end(&self) -> usize {
        self.position as usize + self.bytes.len()
    }
}

/// A fetch position that is not the start of an entry of this segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotAnEntryBoundary;

#[derive(Debug)]
pub struct Segment {
    id: SegmentId,
    base_offset: RecordOffset,
    chunks: Vec<Chunk>,
    tail: BytesMut,
    appender: SegmentAppender,
    committed_bytes: usize,
    sealed: bool,
    lease: MemoryLease,
}

impl Segment {
    /// A new, empty segment of `capacity_bytes` whose first record will have `base_offset`.
    pub fn new(
        id: SegmentId,
        capacity_bytes: usize,
        base_offset: RecordOffset,
        lease: MemoryLease,
    ) -> Self {
        Self {
            id,
            base_offset,
            chunks: Vec::new(),
            tail: lease.take_buffer(),
            appender: SegmentAppender::new(capacity_bytes),
            committed_bytes: 0,
            sealed: false,
            lease,
        }
    }

    /// A sealed, fully committed segment rebuilt from `valid`, the valid prefix of one of its
    /// replicas (recovery): the same bytes at the same positions, one chunk per append, so
    /// every position a consumer holds is an entry boundary here too. `None` unless `valid`
    /// is exactly a valid prefix that fits. The chunks share `valid`'s memory (no copy: a
    /// sealed segment never writes again, and copying a rebuilt log into fresh memory would
    /// cost as much as reading it).
    pub fn recovered(
        id: SegmentId,
        capacity_bytes: usize,
        valid: &Bytes,
        base_offset: RecordOffset,
        lease: MemoryLease,
    ) -> Option<Self> {
        let appender = SegmentAppender::resume(capacity_bytes, valid)?;
        let mut chunks = Vec::new();
        let mut position = 0usize;
        for entry in tailstream_wire::scan::EntryIter::new(valid, false) {
            let entry = entry.ok()?;
            if entry.header.entry_type == EntryType::Trailer {
                let end = entry.end();
                chunks.push(Chunk {
                    position: u32::try_from(position).ok()?,
                    bytes: valid.slice(position..end),
                });
                position = end;
            }
        }
        if position != valid.len() {
            return None;
        }
        Some(Self {
            id,
            base_offset,
            chunks,
            tail: BytesMut::new(),
            appender,
            committed_bytes: valid.len(),
            sealed: true,
            lease,
        })
    }

    pub fn id(&self) -> SegmentId {
        self.id
    }

    pub fn base_offset(&self) -> RecordOffset {
        self.base_offset
    }

    pub fn capacity_bytes(&self) -> usize {
        self.appender.capacity()
    }

    pub fn written_bytes(&self) -> usize {
        self.appender.written()
    }

    pub fn committed_bytes(&self) -> usize {
        self.committed_bytes
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Every committed byte has been written and no more will be.
    pub fn is_complete(&self) -> bool {
        self.sealed && self.committed_bytes == self.written_bytes()
    }

    pub fn fits(&self, payload_len: usize) -> bool {
        !self.sealed && self.appender.fits(payload_len)
    }

    /// Appends one entry (and its trailer) whose payload is a copy of `payload`, which
    /// `stamp` may then change in place (before its checksum is taken).
    pub fn append(
        &mut self,
        entry_type: EntryType,
        payload: &[u8],
        stamp: impl FnOnce(&mut [u8]),
    ) -> Result<AppendedEntry, SegmentFull> {
        if self.sealed {
            return Err(SegmentFull {
                needed: payload.len(),
                remaining: 0,
            });
        }
        let appended = self
            .appender
            .append_copy(&mut self.tail, entry_type, payload, stamp)?;
        let bytes = self.tail.split().freeze();
        // Positions fit in u32: segments are at most 1 GiB (config::SEGMENT_SIZE_BYTES_MAX).
        let position = u32::try_from(appended.position).unwrap_or(u32::MAX);
        self.chunks.push(Chunk { position, bytes });
        Ok(appended)
    }

    /// Makes every byte up to `end` visible to readers. Commits only move forward and only to
    /// the end of an append.
    pub fn commit_to(&mut self, end: usize) {
        debug_assert!(end <= self.written_bytes(), "commit past the written bytes");
        debug_assert!(
            end == 0 || self.chunks.iter().any(|c| c.end() == end),
            "commit mid-entry"
        );
        self.committed_bytes = self.committed_bytes.max(end.min(self.written_bytes()));
    }

    /// No more appends. (The empty tail stays: it is how the buffer is reused once the
    /// segment is freed.)
    pub fn seal(&mut self) {
        self.sealed = true;
    }

    /// Position of the first entry after the segment's log digest (what position 0 means in a
    /// fetch).
    pub fn first_entry_position(&self) -> usize {
        self.chunks.first().map_or(0, Chunk::end)
    }

    /// Committed whole appends from `position` (which must start an append, or be the end of
    /// the committed bytes), up to `max_bytes` but always at least one append. Returns the
    /// chunks and the position just past them.
    pub fn read_committed(
        &self,
        position: usize,
        max_bytes: usize,
    ) -> Result<(Vec<Bytes>, usize), NotAnEntryBoundary> {
        if position == self.committed_bytes {
            return Ok((Vec::new(), position));
        }
        if position > self.committed_bytes {
            return Err(NotAnEntryBoundary);
        }
        let start = self
            .chunks
            .binary_search_by_key(&position, |chunk| chunk.position as usize)
            .map_err(|_| NotAnEntryBoundary)?;
        let mut parts = Vec::new();
        let mut total = 0usize;
        let mut next = position;
        for chunk in &self.chunks[start..] {
            if chunk.end() > self.committed_bytes
                || (!parts.is_empty() && total + chunk.bytes.len() > max_bytes)
            {
                break;
            }
            total += chunk.bytes.len();
            next = chunk.end();
            parts.push(chunk.bytes.clone());
        }
        Ok((parts, next))
    }

    /// The position of the committed batch entry that holds record `offset`, or the end of
    /// the committed bytes when `offset` lies past every committed batch here.
    pub fn position_of_offset(&self, offset: RecordOffset) -> usize {
        for chunk in &self.chunks {
            if chunk.end() > self.committed_bytes {
                break;
            }
            let Some(entry) = tailstream_wire::scan::entry_at(&chunk.bytes, 0).ok() else {
                continue;
            };
            if entry.header.entry_type != EntryType::Batch {
                continue;
            }
            let Ok(info) = tailstream_wire::batch::read_batch_header(entry.payload) else {
                continue;
            };
            let Some(base) = tailstream_wire::batch::base_offset(entry.payload) else {
                continue;
            };
            let end = base.checked_advance(info.record_count).unwrap_or(base);
            if offset < end {
                return chunk.position as usize;
            }
        }
        self.committed_bytes
    }

    /// The first committed record whose timestamp is at or after `timestamp_ms`: its offset
    /// and timestamp. Batches whose max timestamp is earlier are skipped by their header; in
    /// the first one that is not, records are walked (a compressed one decompressed for it).
    pub fn first_at_or_after(&self, timestamp_ms: i64) -> Option<(RecordOffset, i64)> {
        let (payload, info, base) = self
            .committed_batches()
            .find(|(_, info, _)| info.max_timestamp_ms >= timestamp_ms)?;
        Some(
            first_record_at_or_after(payload, &info, base, timestamp_ms)
                .unwrap_or((base, info.max_timestamp_ms)),
        )
    }

    /// The first committed record with this segment's largest timestamp, and that timestamp
    /// (what ListOffsets answers for Kafka's "max timestamp", -3).
    pub fn max_timestamp(&self) -> Option<(RecordOffset, i64)> {
        // The first batch holding the largest timestamp: a later tie does not replace it.
        let mut newest: Option<(&[u8], BatchInfo, RecordOffset)> = None;
        for (payload, info, base) in self.committed_batches() {
            if newest.is_none_or(|(_, best, _)| info.max_timestamp_ms > best.max_timestamp_ms) {
                newest = Some((payload, info, base));
            }
        }
        let (payload, info, base) = newest?;
        Some(
            first_record_at_or_after(payload, &info, base, info.max_timestamp_ms)
                .unwrap_or((base, info.max_timestamp_ms)),
        )
    }

    /// Every committed batch entry whose header reads: its payload, header and base offset.
    fn committed_batches(&self) -> impl Iterator<Item = (&[u8], BatchInfo, RecordOffset)> {
        self.chunks
            .iter()
            .take_while(|chunk| chunk.end() <= self.committed_bytes)
            .filter_map(|chunk| {
                let entry = tailstream_wire::scan::entry_at(&chunk.bytes, 0).ok()?;
                if entry.header.entry_type != EntryType::Batch {
                    return None;
                }
                let info = tailstream_wire::batch::read_batch_header(entry.payload).ok()?;
                let base = tailstream_wire::batch::base_offset(entry.payload)?;
                Some((entry.payload, info, base))
            })
    }

    /// The written bytes `from..to` as zero-copy slices of the chunks they lie in.
    pub fn slice(&self, from: usize, to: usize) -> Vec<Bytes> {
        let to = to.min(self.written_bytes());
        if from >= to {
            return Vec::new();
        }
        let first = match self
            .chunks
            .binary_search_by_key(&from, |c| c.position as usize)
        {
            Ok(index) => index,
            Err(index) => index.saturating_sub(1),
        };
        let mut parts = Vec::new();
        for chunk in &self.chunks[first..] {
            let start = chunk.position as usize;
            if start >= to {
                break;
            }
            let lo = from.saturating_sub(start);
            let hi = (to - start).min(chunk.bytes.len());
            if lo < hi {
                parts.push(chunk.bytes.slice(lo..hi));
            }
        }
        parts
    }

    /// Every written byte, in order (for verification and, later, replication catch-up).
    pub fn written_chunks(&self) -> impl Iterator<Item = &Bytes> {
        self.chunks.iter().map(|chunk| &chunk.bytes)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.lease.retire(std::mem::take(&mut self.tail));
    }
}

/// The first record of a batch stamped `timestamp_ms` or later, with its offset and stamp;
/// `None` when none reads (a reader finds a malformed record itself).
fn first_record_at_or_after(
    payload: &[u8],
    info: &BatchInfo,
    base: RecordOffset,
    timestamp_ms: i64,
) -> Option<(RecordOffset, i64)> {
    let records =
        tailstream_wire::records::RecordIter::new(bytes::Bytes::copy_from_slice(payload), info);
    for record in records {
        let record = record.ok()?;
        if record.timestamp_ms >= timestamp_ms {
            return Some((
                base.checked_advance(record.offset_delta)?,
                record.timestamp_ms,
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SegmentMemory;
    use tailstream_wire::scan::scan_segment;

    fn segment(capacity: usize) -> Segment {
        let lease = SegmentMemory::new(1 << 30)
            .try_reserve(capacity as u64)
            .unwrap();
        Segment::new(SegmentId(1), capacity, RecordOffset(0), lease)
    }

    fn append(segment: &mut Segment, entry_type: EntryType, payload: &[u8]) -> AppendedEntry {
        segment.append(entry_type, payload, |_| {}).unwrap()
    }

    #[test]
    fn chunks_rebuild_a_buffer_that_scans_clean() {
        let mut s = segment(1024);
        append(&mut s, EntryType::LogDigest, b"digest");
        let a = append(&mut s, EntryType::Batch, b"first");
        let b = append(&mut s, EntryType::Batch, b"second");
        let mut image = vec![0u8; 1024];
        let mut at = 0;
        for chunk in s.written_chunks() {
            image[at..at + chunk.len()].copy_from_slice(chunk);
            at += chunk.len();
        }
        let outcome = scan_segment(&image);
        assert_eq!(outcome.valid_len, b.end);
        assert_eq!(outcome.batch_entries, 2);
        assert_eq!(s.first_entry_position(), a.position);
    }

    #[test]
    fn readers_see_only_committed_whole_appends_from_entry_boundaries() {
        let mut s = segment(1024);
        let digest = append(&mut s, EntryType::LogDigest, b"d");
        let a = append(&mut s, EntryType::Batch, &[1; 50]);
        let b = append(&mut s, EntryType::Batch, &[2; 50]);
        s.commit_to(a.end);
        let (parts, next) = s.read_committed(a.position, 1 << 20).unwrap();
        assert_eq!((parts.len(), next), (1, a.end));
        // b is written but not committed: invisible, and its start is the committed end.
        assert_eq!(s.read_committed(b.position, 1 << 20).unwrap().0.len(), 0);
        s.commit_to(b.end);
        // At least one append even when it exceeds max_bytes.
        let (parts, next) = s.read_committed(digest.end, 1).unwrap();
        assert_eq!((parts.len(), next), (1, a.end));
        assert_eq!(
            s.read_committed(a.position + 1, 100),
            Err(NotAnEntryBoundary)
        );
        assert_eq!(s.read_committed(b.end + 13, 100), Err(NotAnEntryBoundary));
    }

    #[test]
    fn slices_cover_exactly_the_requested_range_across_chunks() {
        let mut s = segment(1024);
        append(&mut s, EntryType::LogDigest, b"digest");
        append(&mut s, EntryType::Batch, b"first");
        append(&mut s, EntryType::Batch, b"second");
        let whole: Vec<u8> = s.written_chunks().flat_map(|c| c.to_vec()).collect();
        for from in 0..whole.len() {
            for to in from..=whole.len() {
                let got: Vec<u8> = s.slice(from, to).iter().flat_map(|b| b.to_vec()).collect();
                assert_eq!(got, &whole[from..to], "{from}..{to}");
            }
        }
    }

    #[test]
    fn a_recovered_segment_serves_the_same_entries_at_the_same_positions() {
        let mut original = segment(1024);
        append(&mut original, EntryType::LogDigest, b"digest");
        let a = append(&mut original, EntryType::Batch, b"first");
        let b = append(&mut original, EntryType::Batch, b"second");
        original.commit_to(b.end);
        let valid: Bytes = original
            .written_chunks()
            .flat_map(|c| c.to_vec())
            .collect::<Vec<u8>>()
            .into();
        let lease = SegmentMemory::new(1 << 30).try_reserve(1024).unwrap();
        let recovered =
            Segment::recovered(SegmentId(1), 1024, &valid, RecordOffset(0), lease).unwrap();
        assert!(recovered.is_complete() && !recovered.fits(1));
        assert_eq!(recovered.first_entry_position(), a.position);
        assert_eq!(
            recovered.read_committed(a.position, 1 << 20).unwrap(),
            original.read_committed(a.position, 1 << 20).unwrap()
        );
        assert_eq!(recovered.written_bytes(), b.end);
        let lease = SegmentMemory::new(1 << 30).try_reserve(1024).unwrap();
        assert!(
            Segment::recovered(
                SegmentId(1),
                1024,
                &valid.slice(..b.end - 1),
                RecordOffset(0),
                lease
            )
            .is_none(),
            "not a valid prefix"
        );
    }

    #[test]
    fn a_sealed_segment_takes_no_more_appends() {
        let mut s = segment(1024);
        append(&mut s, EntryType::LogDigest, b"d");
        s.seal();
        assert!(!s.fits(1));
        assert!(s.append(EntryType::Batch, &[1], |_| {}).is_err());
    }
}
