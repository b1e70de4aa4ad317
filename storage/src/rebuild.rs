//! Rebuilding a log from the valid bytes of its segments' replicas (recovery), keeping every
//! group and segment id, every byte position and every record offset, so consumer positions
//! stay valid. The rebuilt log is fully committed (its bytes were on every backup) and its
//! segments are all sealed: the next append rolls to a fresh segment with a fresh id. Its
//! producer table is rebuilt from the batch headers, so a retried batch is recognised as a
//! duplicate exactly as on the crashed owner.

use super::error::StorageError;
use super::group::Group;
use super::log::{AppendLocation, CommitPoint, Log, LogState, PendingCommit, to_position};
use super::producers::{ProducedBatch, ProducerTable};
use super::segment::Segment;
use super::streamlet::StreamletShared;
use std::collections::VecDeque;
use std::time::Instant;
use tailstream_wire::batch::{base_offset, read_batch_header};
use tailstream_wire::codec::Decode;
use tailstream_wire::entry::{DigestSegment, EntryType, LogDigest};
use tailstream_wire::scan::EntryIter;
use tailstream_wire::{GroupId, RecordOffset, SegmentId};

/// One segment's recovered bytes: exactly its valid prefix (digest, entries, trailers).
#[derive(Clone, Debug)]
pub struct RecoveredSegment {
    pub group: GroupId,
    pub segment: SegmentId,
    pub bytes: bytes::Bytes,
}

/// What a rebuilt log holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildSummary {
    pub segments: usize,
    pub batches: u64,
    pub next_offset: RecordOffset,
}

fn corrupt(segment: SegmentId, why: &str) -> StorageError {
    StorageError::Recovery(format!("{segment}: {why}"))
}

impl Log {
    /// Replaces this empty log's content with `segments` (in log order).
    pub(super) fn rebuild(
        &self,
        shared: &StreamletShared,
        segments: &[RecoveredSegment],
        now: Instant,
    ) -> Result<RebuildSummary, StorageError> {
        let capacity = shared.config.segment_size_bytes as usize;
        let mut groups: VecDeque<Group> = VecDeque::new();
        let mut producers = ProducerTable::new(shared.producers_per_log_max);
        let mut live_segments = Vec::new();
        let mut next_offset = RecordOffset(0);
        let mut batches = 0u64;
        let mut commit = CommitPoint::default();
        for recovered in segments {
            let id = recovered.segment;
            let bytes = &recovered.bytes[..];
            let mut entries = EntryIter::new(bytes, true);
            let digest = entries
                .next()
                .and_then(Result::ok)
                .filter(|e| e.header.entry_type == EntryType::LogDigest)
                .and_then(|e| {
                    // `e.payload` lies inside `recovered.bytes` (the iterator walks them),
                    // as `slice_ref` requires.
                    LogDigest::decode_exact(recovered.bytes.slice_ref(e.payload)).ok()
                })
                .filter(|d| d.segment == id && d.log == self.id() && d.group == recovered.group)
                .ok_or_else(|| corrupt(id, "does not open with its own log digest"))?;
            let lease = shared.reserve_segment()?;
            let segment =
                Segment::recovered(id, capacity, &recovered.bytes, digest.base_offset, lease)
                    .ok_or_else(|| corrupt(id, "is not a valid prefix"))?;
            next_offset = next_offset.max(digest.base_offset);
            for entry in entries {
                let entry = entry.map_err(|e| corrupt(id, &e.to_string()))?;
                if entry.header.entry_type != EntryType::Batch {
                    continue;
                }
                let info =
                    read_batch_header(entry.payload).map_err(|e| corrupt(id, &e.to_string()))?;
                let base = base_offset(entry.payload)
                    .ok_or_else(|| corrupt(id, "a batch has no base offset"))?;
                let after = base
                    .checked_advance(info.record_count)
                    .ok_or_else(|| corrupt(id, "a batch's offsets overflow"))?;
                // The trailer that follows the batch ends its append.
                let end = entry.end() + tailstream_wire::entry::TRAILER_BYTES;
                let location = AppendLocation {
                    log: self.id(),
                    group: recovered.group,
                    segment: id,
                    position: to_position(entry.position),
                    end: to_position(end).0,
                    base_offset: base,
                };
                if let Some(produced) = ProducedBatch::of(&info) {
                    producers.appended(&produced, location);
                }
                next_offset = after;
                batches += 1;
            }
            if groups.back().is_none_or(|g| g.id() != recovered.group) {
                if let Some(previous) = groups.back_mut() {
                    previous.seal(now);
                }
                groups.push_back(Group::new(recovered.group, digest.base_offset));
            }
            // invariant: a group was pushed just above when the last one was another.
            let group = groups
                .back_mut()
                .ok_or_else(|| StorageError::invariant("no group for a recovered segment"))?;
            group.push_segment(segment);
            if group.segment_count() >= shared.config.segments_per_group as usize {
                group.seal(now);
            }
            live_segments.push(DigestSegment {
                group: recovered.group,
                segment: id,
            });
            commit = CommitPoint {
                segment: id,
                end: to_position(bytes.len()).0,
            };
        }
        let mut state = self.lock();
        if !state.groups.is_empty() {
            return Err(StorageError::invariant(
                "rebuilding a log that has segments",
            ));
        }
        *state = LogState {
            groups,
            next_offset,
            committed_offset: next_offset,
            producers,
            live_segments,
            upcoming: None,
            pending: VecDeque::<PendingCommit>::new(),
            pending_bytes: 0,
        };
        drop(state);
        self.commit_rebuilt(commit);
        Ok(RebuildSummary {
            segments: segments.len(),
            batches,
            next_offset,
        })
    }
}
