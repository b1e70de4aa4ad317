//! The reading side of a log: committed entries for consumers, group listings, the views the
//! replication layer and retention need. Same lock as appends; every method holds it briefly.

use super::error::StorageError;
use super::group::Group;
use super::log::{CommitPoint, Log, ReadOutcome, SegmentView, to_position};
use super::segment::Segment;
use bytes::Bytes;
use std::time::Instant;
use tailstream_wire::messages::LogGroups;
use tailstream_wire::{GroupId, RecordOffset, SegmentId, SegmentPosition};

impl Log {
    /// Reads committed entries of `segment` of `group` from `position` (0 = the first entry
    /// after the digest), moving on to the group's next segment when this one is complete.
    pub fn read(
        &self,
        group: GroupId,
        segment: SegmentId,
        position: SegmentPosition,
        max_bytes: usize,
    ) -> Result<ReadOutcome, StorageError> {
        let state = self.lock();
        let group_index = state
            .groups
            .binary_search_by_key(&group, Group::id)
            .map_err(|_| match state.groups.front() {
                Some(oldest) if group < oldest.id() => StorageError::GroupRetired(group),
                _ => StorageError::UnknownGroup(group),
            })?;
        let g = &state.groups[group_index];
        let mut index = g
            .segment_index(segment)
            .ok_or(StorageError::UnknownSegment(segment))?;
        let mut pos = match position.0 {
            0 => g.segments()[index].first_entry_position(),
            p => p as usize,
        };
        loop {
            let seg = &g.segments()[index];
            let empty =
                |next_pos: usize, end_of_group: bool, next_group: Option<GroupId>| ReadOutcome {
                    segment: seg.id(),
                    position: to_position(next_pos),
                    parts: Vec::new(),
                    next_segment: seg.id(),
                    next_position: to_position(next_pos),
                    end_of_group,
                    next_group,
                };
            // The digest of a segment may not be committed yet (with replication).
            if pos > seg.committed_bytes() && pos == seg.first_entry_position() {
                return Ok(empty(pos, false, None));
            }
            let (parts, next) = seg.read_committed(pos, max_bytes).map_err(|_| {
                StorageError::PositionOutOfRange {
                    segment: seg.id(),
                    position: to_position(pos).0,
                }
            })?;
            if !parts.is_empty() {
                return Ok(ReadOutcome {
                    segment: seg.id(),
                    position: to_position(pos),
                    parts,
                    next_segment: seg.id(),
                    next_position: to_position(next),
                    end_of_group: false,
                    next_group: None,
                });
            }
            if !seg.is_complete() {
                return Ok(empty(pos, false, None));
            }
            if index + 1 < g.segment_count() {
                index += 1;
                pos = g.segments()[index].first_entry_position();
                continue;
            }
            if g.is_sealed() {
                let next_group = state.groups.get(group_index + 1).map(Group::id);
                return Ok(empty(pos, true, next_group));
            }
            return Ok(empty(pos, false, None));
        }
    }

    /// Where the batch holding record `offset` starts (group, segment, position), or the end
    /// of the committed data when `offset` is the next offset to be committed.
    pub fn locate_offset(
        &self,
        offset: RecordOffset,
    ) -> Result<(GroupId, SegmentId, SegmentPosition), StorageError> {
        let state = self.lock();
        let out_of_range = || StorageError::OffsetOutOfRange {
            offset,
            first: state
                .groups
                .front()
                .map_or(state.next_offset, Group::first_offset),
            committed: state.committed_offset,
        };
        if offset > state.committed_offset {
            return Err(out_of_range());
        }
        let segment = state
            .groups
            .iter()
            .rev()
            .flat_map(|g| g.segments().iter().rev().map(move |s| (g.id(), s)))
            .find(|(_, s)| s.base_offset() <= offset);
        let Some((group, segment)) = segment else {
            return Err(out_of_range());
        };
        let position = segment.position_of_offset(offset);
        Ok((group, segment.id(), to_position(position)))
    }

    /// Runs `f` on one live segment (tests and diagnostics; holds the log's lock meanwhile).
    pub fn with_segment<T>(
        &self,
        group: GroupId,
        segment: SegmentId,
        f: impl FnOnce(&Segment) -> T,
    ) -> Option<T> {
        let state = self.lock();
        let g = state.groups.iter().find(|g| g.id() == group)?;
        let index = g.segment_index(segment)?;
        Some(f(&g.segments()[index]))
    }

    /// The live groups of this log, oldest first.
    pub fn groups(&self) -> LogGroups {
        let state = self.lock();
        LogGroups {
            log: self.id(),
            next_offset: state.next_offset,
            committed_offset: state.committed_offset,
            groups: state.groups.iter().map(Group::summary).collect(),
            // Storage does not know where replicas are: the data plane adds them.
            replicas: Vec::new(),
        }
    }

    /// The first retained record offset (where reading from the beginning starts) and one
    /// past the last committed record.
    pub fn bounds(&self) -> (RecordOffset, RecordOffset) {
        let state = self.lock();
        let kept = state
            .groups
            .front()
            .map_or(state.committed_offset, Group::first_offset);
        // A start past the commit point (never set so: it is checked against the committed
        // end) would serve nothing rather than a range that ends before it begins.
        let first = kept.max(self.start()).min(state.committed_offset.max(kept));
        (first, state.committed_offset)
    }

    /// The first committed record at or after `timestamp_ms` (its offset and timestamp), or
    /// `None` when every committed record is older.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Option<(RecordOffset, i64)> {
        let state = self.lock();
        let found = state
            .groups
            .iter()
            .flat_map(|g| g.segments().iter())
            .find_map(|segment| segment.first_at_or_after(timestamp_ms))?;
        // Never a deleted record (DeleteRecords): a consumer sent below the start would be
        // answered out of range and could skip to the end. The start is the first record
        // served, so the answer is never past a record the timestamp asks for.
        let start = self.start().min(state.committed_offset);
        Some(if found.0 < start {
            (start, found.1)
        } else {
            found
        })
    }

    /// The first committed record with the log's largest timestamp (its offset and
    /// timestamp), or `None` when nothing is committed.
    pub fn offset_of_max_timestamp(&self) -> Option<(RecordOffset, i64)> {
        let state = self.lock();
        let mut newest: Option<(RecordOffset, i64)> = None;
        for segment in state.groups.iter().flat_map(|g| g.segments().iter()) {
            if let Some(found) = segment.max_timestamp()
                && newest.is_none_or(|(_, best)| found.1 > best)
            {
                newest = Some(found);
            }
        }
        newest
    }

    /// Offset the next record will get, and one past the last committed record.
    pub fn offsets(&self) -> (RecordOffset, RecordOffset) {
        let state = self.lock();
        (state.next_offset, state.committed_offset)
    }

    /// The newest segment, if any.
    pub fn head_segment(&self) -> Option<SegmentId> {
        let state = self.lock();
        state.groups.back()?.head().map(Segment::id)
    }

    /// Written bytes of all live groups.
    pub fn written_bytes(&self) -> u64 {
        self.lock().groups.iter().map(Group::written_bytes).sum()
    }

    /// The oldest group, if sealed (only sealed groups may be freed): id, bytes, sealed at.
    pub fn oldest_sealed_group(&self) -> Option<(GroupId, u64, Instant)> {
        let state = self.lock();
        let oldest = state.groups.front()?;
        Some((oldest.id(), oldest.written_bytes(), oldest.sealed_at()?))
    }

    /// The oldest group, if sealed and every record of it is before the log's start (the
    /// next group begins at or before it): DeleteRecords deleted it all.
    pub fn oldest_group_before_start(&self) -> Option<GroupId> {
        let state = self.lock();
        let oldest = state.groups.front()?;
        let next = state.groups.get(1)?;
        // Never past the commit point, whatever start was set: nothing committed later, nor
        // anything not yet on every backup, is freed for it.
        let start = self.start().min(state.committed_offset);
        (oldest.is_sealed() && next.first_offset() <= start).then(|| oldest.id())
    }

    /// Frees the oldest group if it is `group` and sealed; returns its bytes.
    pub fn free_oldest_group(&self, group: GroupId) -> Option<u64> {
        let mut state = self.lock();
        let oldest = state.groups.front()?;
        if oldest.id() != group || !oldest.is_sealed() {
            return None;
        }
        let freed = state.groups.pop_front()?;
        state.live_segments.retain(|s| s.group != group);
        Some(freed.written_bytes())
    }

    /// The log's segments from `from` on (all when `None`), in order, as the replication layer
    /// sees them.
    pub fn segments_since(&self, from: Option<SegmentId>) -> Vec<SegmentView> {
        let state = self.lock();
        let mut views = Vec::new();
        for group in state.groups.iter().rev() {
            for segment in group.segments().iter().rev() {
                if from.is_some_and(|from| segment.id() < from) {
                    views.reverse();
                    return views;
                }
                views.push(SegmentView {
                    group: group.id(),
                    segment: segment.id(),
                    written: to_position(segment.written_bytes()).0,
                    capacity: to_position(segment.capacity_bytes()).0,
                    sealed: segment.is_sealed(),
                });
            }
        }
        views.reverse();
        views
    }

    /// The written bytes `from..to` of `segment`, as zero-copy slices (None if it is gone).
    pub fn segment_bytes(&self, segment: SegmentId, from: u32, to: u32) -> Option<Vec<Bytes>> {
        self.find_segment(segment, |s| s.slice(from as usize, to as usize))
    }

    /// The oldest live segment (retention frees from the front), if the log has any.
    pub fn oldest_segment(&self) -> Option<SegmentId> {
        let state = self.lock();
        let group = state.groups.front()?;
        group.segments().first().map(|s| s.id())
    }

    /// Whether `segment` is still live (not freed by retention).
    pub fn contains_segment(&self, segment: SegmentId) -> bool {
        self.find_segment(segment, |_| ()).is_some()
    }

    fn find_segment<T>(&self, segment: SegmentId, f: impl FnOnce(&Segment) -> T) -> Option<T> {
        let state = self.lock();
        // Newest first: replication mostly touches the head.
        let group = state
            .groups
            .iter()
            .rev()
            .find(|g| g.segments().first().is_some_and(|s| s.id() <= segment))?;
        let index = group.segment_index(segment)?;
        Some(f(&group.segments()[index]))
    }

    /// How far the log is committed.
    pub fn commit_point(&self) -> CommitPoint {
        *self.subscribe_commits().borrow()
    }

    /// The newest segment holding committed bytes, if any: every counted backup holds it. The
    /// owner reports this one (not its head in memory, which may not have reached any backup
    /// yet) to the coordinator, so a recovery that finds no copy of it knows acknowledged
    /// records would be missing, and one that finds none of a newer segment knows that
    /// nothing acknowledged is.
    pub fn committed_segment(&self) -> Option<SegmentId> {
        let point = self.commit_point();
        (point != CommitPoint::default()).then_some(point.segment)
    }
}
