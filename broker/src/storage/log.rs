//! One log of a MultiLog: its own append lock, one head segment, groups of segments.
//!
//! An append takes the log's lock, checks the producer's sequence, rolls to a new segment (and
//! maybe a new group) when the head is full, copies the batch into the head segment stamping
//! its base offset, and writes the checksum trailer. Every new segment starts with a log digest
//! entry naming all live segments of the log. Readers see only committed bytes: with R = 0 an
//! append commits at once; with replication, the replication layer commits once every backup
//! holds the bytes (`commit_through`).

use super::error::StorageError;
use super::group::Group;
use super::producers::{ProducerTable, SequenceCheck};
use super::segment::Segment;
use super::streamlet::StreamletShared;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use tailstream_wire::batch::{BatchInfo, stamp_base_offset};
use tailstream_wire::entry::{DigestSegment, EntryType, LogDigest};
use tailstream_wire::messages::LogGroups;
use tailstream_wire::segment::append_bytes;
use tailstream_wire::{Encode, GroupId, LogId, RecordOffset, SegmentId, SegmentPosition};
use tokio::sync::watch;

/// Where a batch was appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendLocation {
    pub log: LogId,
    pub group: GroupId,
    pub segment: SegmentId,
    /// Offset of the batch entry's header in the segment.
    pub position: SegmentPosition,
    /// Segment length just past the trailer that followed the batch.
    pub end: u32,
    pub base_offset: RecordOffset,
}

/// The outcome of an append: where, and whether it was a retry of an earlier append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub location: AppendLocation,
    pub duplicate: bool,
}

/// Committed entries read from one segment, and where the reader goes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOutcome {
    pub segment: SegmentId,
    pub position: SegmentPosition,
    pub parts: Vec<Bytes>,
    pub next_segment: SegmentId,
    pub next_position: SegmentPosition,
    pub end_of_group: bool,
    pub next_group: Option<GroupId>,
}

#[derive(Debug)]
struct LogState {
    groups: VecDeque<Group>,
    next_offset: RecordOffset,
    committed_offset: RecordOffset,
    producers: ProducerTable<AppendLocation>,
    /// Every live segment of the log, in order: the body of each new segment's digest.
    live_segments: Vec<DigestSegment>,
}

#[derive(Debug)]
pub struct Log {
    id: LogId,
    state: Mutex<LogState>,
    /// Bumped on every commit; long-polling readers wait on it.
    commits: watch::Sender<u64>,
}

fn to_position(position: usize) -> SegmentPosition {
    // Segments are at most 1 GiB (config::SEGMENT_SIZE_BYTES_MAX), so positions fit a u32.
    SegmentPosition(u32::try_from(position).unwrap_or(u32::MAX))
}

impl Log {
    pub fn new(id: LogId, producers_max: usize) -> Self {
        Self {
            id,
            state: Mutex::new(LogState {
                groups: VecDeque::new(),
                next_offset: RecordOffset(0),
                committed_offset: RecordOffset(0),
                producers: ProducerTable::new(producers_max),
                live_segments: Vec::new(),
            }),
            commits: watch::Sender::new(0),
        }
    }

    pub fn id(&self) -> LogId {
        self.id
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        // A panic while holding the lock would be a bug in this module; the state it guards
        // is still structurally valid, so keep serving rather than poisoning the broker.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for commits: a receiver that sees every commit after this call.
    pub fn subscribe_commits(&self) -> watch::Receiver<u64> {
        self.commits.subscribe()
    }

    /// Appends one validated record batch.
    pub fn append(
        &self,
        shared: &StreamletShared,
        batch: &[u8],
        info: &BatchInfo,
        now: Instant,
    ) -> Result<Appended, StorageError> {
        let mut state = self.lock();
        match state.producers.check(info.producer_id, info.base_sequence) {
            SequenceCheck::Append => {}
            SequenceCheck::Duplicate(location) => {
                return Ok(Appended {
                    location,
                    duplicate: true,
                });
            }
            SequenceCheck::DuplicateForgotten => {
                return Err(StorageError::DuplicateSequence(info.base_sequence));
            }
            SequenceCheck::OutOfOrder { expected } => {
                return Err(StorageError::OutOfOrderSequence {
                    expected,
                    got: info.base_sequence,
                });
            }
        }
        let segment_bytes = shared.config.segment_size_bytes as usize;
        let digest_bytes = LogDigest::FIXED_BYTES + 16 * (state.live_segments.len() + 1);
        if append_bytes(digest_bytes) + append_bytes(batch.len()) > segment_bytes {
            return Err(StorageError::BatchTooLarge {
                batch_bytes: batch.len(),
                segment_bytes,
            });
        }
        let head_fits = state
            .groups
            .back()
            .and_then(Group::head)
            .is_some_and(|head| head.fits(batch.len()));
        if !head_fits {
            self.roll(&mut state, shared, now)?;
        }
        let offset = state.next_offset;
        let group = state.groups.back_mut().ok_or(StorageError::NotOwner)?;
        let group_id = group.id();
        let head = group.head_mut().ok_or(StorageError::NotOwner)?;
        let appended = head
            .append(EntryType::Batch, batch.len(), |slot| {
                slot.copy_from_slice(batch);
                stamp_base_offset(slot, offset);
            })
            // The size check above and the roll guarantee room; refusing is still safer
            // than writing anywhere else.
            .map_err(|_| StorageError::BatchTooLarge {
                batch_bytes: batch.len(),
                segment_bytes,
            })?;
        let location = AppendLocation {
            log: self.id,
            group: group_id,
            segment: head.id(),
            position: to_position(appended.position),
            end: to_position(appended.end).0,
            base_offset: offset,
        };
        state.next_offset = offset.advance(info.record_count);
        state
            .producers
            .appended(info.producer_id, info.base_sequence, location);
        if shared.config.replicas == 0 {
            let committed = state.next_offset;
            self.commit_locked(&mut state, location.segment, location.end, committed);
        }
        Ok(Appended {
            location,
            duplicate: false,
        })
    }

    /// Seals the head segment (and its group when full) and opens a new segment that starts
    /// with the log digest. Reserves the memory first, so a refusal changes nothing.
    fn roll(
        &self,
        state: &mut LogState,
        shared: &StreamletShared,
        now: Instant,
    ) -> Result<(), StorageError> {
        let capacity = shared.config.segment_size_bytes as usize;
        let lease =
            shared
                .memory
                .try_reserve(capacity as u64)
                .ok_or(StorageError::Backpressure {
                    bytes_max: shared.memory.bytes_max(),
                })?;
        let segments_per_group = shared.config.segments_per_group as usize;
        let new_group = match state.groups.back_mut() {
            None => true,
            Some(group) => {
                if let Some(head) = group.head_mut() {
                    head.seal();
                }
                let full = group.segment_count() >= segments_per_group;
                if full {
                    group.seal(now);
                }
                full
            }
        };
        if new_group {
            state
                .groups
                .push_back(Group::new(shared.ids.next_group(), state.next_offset));
        }
        let segment_id = shared.ids.next_segment();
        let group = state.groups.back_mut().ok_or(StorageError::NotOwner)?;
        let group_id = group.id();
        let mut segment = Segment::new(segment_id, capacity, state.next_offset, lease);
        state.live_segments.push(DigestSegment {
            group: group_id,
            segment: segment_id,
        });
        let digest = LogDigest {
            stream: shared.stream,
            streamlet: shared.streamlet,
            log: self.id,
            group: group_id,
            segment: segment_id,
            base_offset: state.next_offset,
            segments: state.live_segments.clone(),
        }
        .to_bytes();
        let appended = match segment.append(EntryType::LogDigest, digest.len(), |slot| {
            slot.copy_from_slice(&digest)
        }) {
            Ok(appended) => appended,
            Err(_) => {
                state.live_segments.pop();
                let live_segments = state.live_segments.len();
                return Err(StorageError::DigestTooLarge { live_segments });
            }
        };
        if shared.config.replicas == 0 {
            segment.commit_to(appended.end);
        }
        let group = state.groups.back_mut().ok_or(StorageError::NotOwner)?;
        group.push_segment(segment);
        Ok(())
    }

    /// Makes the log readable up to `end` of `segment`, whose last record is just before
    /// `committed_offset`.
    fn commit_locked(
        &self,
        state: &mut LogState,
        segment: SegmentId,
        end: u32,
        committed_offset: RecordOffset,
    ) {
        if let Some(head) = state.groups.back_mut().and_then(Group::head_mut)
            && head.id() == segment
        {
            head.commit_to(end as usize);
        }
        state.committed_offset = state.committed_offset.max(committed_offset);
        self.commits.send_modify(|count| *count += 1);
    }

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
            log: self.id,
            next_offset: state.next_offset,
            committed_offset: state.committed_offset,
            groups: state.groups.iter().map(Group::summary).collect(),
        }
    }

    /// Offset the next record will get, and one past the last committed record.
    pub fn offsets(&self) -> (RecordOffset, RecordOffset) {
        let state = self.lock();
        (state.next_offset, state.committed_offset)
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
}
