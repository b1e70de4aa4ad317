//! One log of a MultiLog: its own append lock, one head segment, groups of segments.
//!
//! An append takes the log's lock, checks the producer's sequence, rolls to a new segment (and
//! maybe a new group) when the head is full, copies the batch into the head segment stamping
//! its base offset, and writes the checksum trailer. Every new segment starts with a log digest
//! entry naming all live segments of the log. Readers see only committed bytes: with R = 0 an
//! append commits at once; with replication, the replicator commits (`commit_through`) once
//! every backup holds the bytes, and wakes on `replication_wake` after every append. The ids
//! of the segment after the head are reserved in advance (`upcoming`), so the replicator can
//! open its replicas before the head fills.
//!
//! Reading, listing and the replication/retention views are in `log_read`.

use super::commit_feed::FeedLink;
use super::error::StorageError;
use super::group::Group;
use super::producers::{ProducedBatch, ProducerOwner, ProducerTable, SequenceCheck};
use super::segment::Segment;
use super::streamlet::StreamletShared;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;
use tailstream_wire::batch::{BatchInfo, stamp_base_offset};
use tailstream_wire::entry::{DigestSegment, EntryType, LogDigest};
use tailstream_wire::segment::append_bytes;
use tailstream_wire::{Encode, GroupId, LogId, RecordOffset, SegmentId, SegmentPosition};
use tokio::sync::{Notify, watch};

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

impl AppendLocation {
    /// The commit point at which this append is durable.
    pub fn commit_point(&self) -> CommitPoint {
        CommitPoint {
            segment: self.segment,
            end: self.end,
        }
    }
}

/// The outcome of an append: where, and whether it was a retry of an earlier append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub location: AppendLocation,
    pub duplicate: bool,
    /// The append opened a new segment (the log grew by a segment: time to look at
    /// size-based retention).
    pub rolled: bool,
}

/// How far a log is committed: every byte of earlier segments, and `end` bytes of `segment`.
/// Ordered by segment, then end (segment ids increase along a log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommitPoint {
    pub segment: SegmentId,
    pub end: u32,
}

/// A segment as the replicator sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentView {
    pub group: GroupId,
    pub segment: SegmentId,
    pub written: u32,
    pub capacity: u32,
    pub sealed: bool,
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

/// An append waiting for replication: where it ends, its size, and the offset after it.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingCommit {
    point: CommitPoint,
    bytes: u64,
    next_offset: RecordOffset,
}

#[derive(Debug)]
pub(super) struct LogState {
    pub(super) groups: VecDeque<Group>,
    pub(super) next_offset: RecordOffset,
    pub(super) committed_offset: RecordOffset,
    pub(super) producers: ProducerTable<AppendLocation>,
    /// Every live segment of the log, in order: the body of each new segment's digest.
    pub(super) live_segments: Vec<DigestSegment>,
    /// Ids reserved for the segment after the head (and whether it opens a new group).
    pub(super) upcoming: Option<(GroupId, SegmentId)>,
    /// Appends not yet committed (replicated logs only), oldest first.
    pub(super) pending: VecDeque<PendingCommit>,
    pub(super) pending_bytes: u64,
}

#[derive(Debug)]
pub struct Log {
    id: LogId,
    state: Mutex<LogState>,
    /// The commit point; readers long-poll on it, produce requests wait for theirs.
    commits: watch::Sender<CommitPoint>,
    replication_wake: OnceLock<Arc<Notify>>,
    /// Whether the log's replicator can have `min_insync_replicas` copies of what is
    /// appended now (set by the replicator; always true for an unreplicated log). While it
    /// cannot, appends are refused (`NotEnoughReplicas`) rather than left waiting.
    insync: watch::Sender<bool>,
    /// Where a moved commit point is told (set once the store holds the log).
    commit_feed: OnceLock<FeedLink>,
    /// The first record offset still served: Kafka's DeleteRecords deleted those before it
    /// (the coordinator keeps it; an assignment brings it). Only grows; outside `state`, so a
    /// rebuild that replaces the state keeps it.
    start: AtomicU64,
}

pub(super) fn to_position(position: usize) -> SegmentPosition {
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
                upcoming: None,
                pending: VecDeque::new(),
                pending_bytes: 0,
            }),
            commits: watch::Sender::new(CommitPoint::default()),
            replication_wake: OnceLock::new(),
            insync: watch::Sender::new(true),
            commit_feed: OnceLock::new(),
            start: AtomicU64::new(0),
        }
    }

    /// Moves the log's start forward to `offset` (never back); returns whether it moved.
    pub fn raise_start(&self, offset: RecordOffset) -> bool {
        self.start.fetch_max(offset.0, Ordering::Relaxed) < offset.0
    }

    /// The start as set (`bounds` gives the first record actually served).
    pub fn start(&self) -> RecordOffset {
        RecordOffset(self.start.load(Ordering::Relaxed))
    }

    /// Links the log to its store's feed and queues it there once, so what it holds already
    /// (a rebuilt log's commit point) is reported like any later move.
    pub(crate) fn link_commit_feed(&self, link: FeedLink) {
        if self.commit_feed.set(link).is_ok() {
            self.commit_moved();
        }
    }

    /// Called after every publication of a new commit point.
    fn commit_moved(&self) {
        if let Some(link) = self.commit_feed.get() {
            link.moved();
        }
    }

    /// The replicator says whether `min_insync_replicas` copies can be had now.
    pub fn set_insync(&self, possible: bool) {
        // Every replication round calls this: a read first, the write lock only on a change.
        if *self.insync.borrow() != possible {
            self.insync
                .send_if_modified(|now| std::mem::replace(now, possible) != possible);
        }
    }

    /// A receiver of the flag `set_insync` sets (produce requests waiting for their commit
    /// stop waiting when it turns false).
    pub fn subscribe_insync(&self) -> watch::Receiver<bool> {
        self.insync.subscribe()
    }

    pub fn id(&self) -> LogId {
        self.id
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, LogState> {
        // A panic while holding the lock would be a bug in this module; the state it guards
        // is still structurally valid, so keep serving rather than poisoning the broker.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The lock, for an append: an uncontended append pays one `try_lock`; a contended one
    /// is counted and its wait timed (`/metrics`), so contention between producers sharing
    /// a log shows in production.
    fn lock_for_append(&self) -> MutexGuard<'_, LogState> {
        match self.state.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let started = Instant::now();
                let guard = self.lock();
                metrics::counter!(crate::metrics::APPEND_LOCK_CONTENDED).increment(1);
                metrics::histogram!(crate::metrics::APPEND_LOCK_WAIT)
                    .record(started.elapsed().as_secs_f64());
                guard
            }
        }
    }

    /// A receiver of the commit point (readers long-poll on changes, producers wait for theirs).
    pub fn subscribe_commits(&self) -> watch::Receiver<CommitPoint> {
        self.commits.subscribe()
    }

    /// Notified after every append and roll: what the replicator of this log waits on.
    pub fn replication_wake(&self) -> Arc<Notify> {
        self.replication_wake
            .get_or_init(|| Arc::new(Notify::new()))
            .clone()
    }

    /// The ids reserved for the segment that will follow the head.
    pub fn upcoming(&self) -> Option<(GroupId, SegmentId)> {
        self.lock().upcoming
    }

    /// Appends one validated record batch, sent by `owner`.
    pub fn append(
        &self,
        shared: &StreamletShared,
        batch: &[u8],
        info: &BatchInfo,
        owner: ProducerOwner,
        now: Instant,
    ) -> Result<Appended, StorageError> {
        let mut state = self.lock_for_append();
        // A batch without idempotence is appended as it comes.
        let produced = ProducedBatch::of(info).map(|p| p.by(owner));
        let check = produced.map_or(SequenceCheck::Append, |p| state.producers.check(&p));
        match (check, produced) {
            (SequenceCheck::Append, _) | (_, None) => {}
            (SequenceCheck::Duplicate(location), Some(_)) => {
                return Ok(Appended {
                    location,
                    duplicate: true,
                    rolled: false,
                });
            }
            (SequenceCheck::Clash, Some(p)) => {
                return Err(StorageError::SequenceClash {
                    producer: p.producer,
                    epoch: p.epoch,
                    sequence: p.base_sequence,
                });
            }
            (SequenceCheck::OutOfOrder { expected }, Some(p)) => {
                return Err(StorageError::OutOfOrderSequence {
                    expected,
                    got: p.base_sequence,
                });
            }
            (SequenceCheck::Fenced { current }, Some(p)) => {
                return Err(StorageError::ProducerFenced {
                    producer: p.producer,
                    got: p.epoch,
                    current,
                });
            }
            (SequenceCheck::UnknownProducer, Some(p)) => {
                return Err(StorageError::UnknownProducer {
                    producer: p.producer,
                    epoch: p.epoch,
                    sequence: p.base_sequence,
                });
            }
            (SequenceCheck::Foreign, Some(p)) => {
                return Err(StorageError::ForeignProducer {
                    producer: p.producer,
                });
            }
        }
        let segment_bytes = shared.config.segment_size_bytes as usize;
        let digest_bytes = LogDigest::FIXED_BYTES + 16 * (state.live_segments.len() + 1);
        if append_bytes(digest_bytes) + append_bytes(batch.len()) > segment_bytes {
            // Every segment opens with a digest naming each live segment of its log, so a log
            // that keeps many small segments leaves less room in each new one. Say which of
            // the two is too large: the batch, or the log for its segment size.
            let empty_log_digest_bytes = LogDigest::FIXED_BYTES + 16;
            if append_bytes(empty_log_digest_bytes) + append_bytes(batch.len()) > segment_bytes {
                return Err(StorageError::BatchTooLarge {
                    batch_bytes: batch.len(),
                    segment_bytes,
                });
            }
            return Err(StorageError::DigestTooLarge {
                live_segments: state.live_segments.len(),
            });
        }
        let replicated = shared.config.replicas > 0;
        if replicated && !*self.insync.borrow() {
            return Err(StorageError::NotEnoughReplicas {
                required: shared.config.min_insync(),
            });
        }
        if replicated
            && state.pending_bytes + batch.len() as u64 > shared.replication_backlog_bytes_max
        {
            return Err(StorageError::ReplicationBacklog {
                bytes: state.pending_bytes,
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
        // The roll above left a group with a head segment that fits the batch.
        let group = state
            .groups
            .back_mut()
            .ok_or_else(|| StorageError::invariant("no group after a roll"))?;
        let group_id = group.id();
        let head = group
            .head_mut()
            .ok_or_else(|| StorageError::invariant("no head segment after a roll"))?;
        let appended = head
            .append(EntryType::Batch, batch, |slot| {
                stamp_base_offset(slot, offset)
            })
            // The size check above and the roll guarantee room; refusing is still safer
            // than writing anywhere else.
            .map_err(|_| StorageError::invariant("a fresh head segment has no room for a batch"))?;
        let location = AppendLocation {
            log: self.id,
            group: group_id,
            segment: head.id(),
            position: to_position(appended.position),
            end: to_position(appended.end).0,
            base_offset: offset,
        };
        state.next_offset = offset.advance(info.record_count);
        if let Some(produced) = produced {
            state.producers.appended(&produced, location);
        }
        if replicated {
            let pending = PendingCommit {
                point: location.commit_point(),
                bytes: (appended.end - appended.position) as u64,
                next_offset: state.next_offset,
            };
            state.pending_bytes += pending.bytes;
            state.pending.push_back(pending);
            drop(state);
            self.replication_wake().notify_one();
        } else {
            let committed = state.next_offset;
            if let Some(head) = state.groups.back_mut().and_then(Group::head_mut) {
                head.commit_to(location.end as usize);
            }
            state.committed_offset = committed;
            self.commits.send_replace(location.commit_point());
            self.commit_moved();
        }
        Ok(Appended {
            location,
            duplicate: false,
            rolled: !head_fits,
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
        let lease = shared.reserve_segment()?;
        let segments_per_group = shared.config.segments_per_group as usize;
        let group_full = state
            .groups
            .back()
            .is_none_or(|g| g.segment_count() >= segments_per_group);
        let (group_id, segment_id) = state.upcoming.take().unwrap_or_else(|| {
            let group = match state.groups.back() {
                Some(g) if !group_full => g.id(),
                _ => shared.ids.next_group(),
            };
            (group, shared.ids.next_segment())
        });
        if let Some(group) = state.groups.back_mut() {
            if let Some(head) = group.head_mut() {
                head.seal();
            }
            if group_full {
                group.seal(now);
            }
        }
        if state.groups.back().is_none_or(|g| g.id() != group_id) {
            state
                .groups
                .push_back(Group::new(group_id, state.next_offset));
        }
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
        let appended = match segment.append(EntryType::LogDigest, &digest, |_| {}) {
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
        // A group was pushed above when the last one was not `group_id`.
        let group = state
            .groups
            .back_mut()
            .ok_or_else(|| StorageError::invariant("no group to hold a new segment"))?;
        group.push_segment(segment);
        // Reserve the next segment's ids now, so its replicas can be opened before this one
        // fills.
        let next_group = if group.segment_count() >= segments_per_group {
            shared.ids.next_group()
        } else {
            group_id
        };
        state.upcoming = Some((next_group, shared.ids.next_segment()));
        if shared.config.replicas > 0 {
            self.replication_wake().notify_one();
        }
        Ok(())
    }

    /// A rebuilt log is committed through `point` (all of it): readers and waiting producers
    /// see it.
    pub(super) fn commit_rebuilt(&self, point: CommitPoint) {
        self.commits.send_replace(point);
        self.commit_moved();
    }

    /// Replicated logs: every byte up to `point` is on every backup. Makes it readable,
    /// advances the committed offset and wakes produce requests waiting for it.
    pub fn commit_through(&self, point: CommitPoint) {
        let mut state = self.lock();
        let previous = *self.commits.borrow();
        if point <= previous {
            return;
        }
        // Segments between the previous commit point and this one are complete up to it.
        'groups: for group in state.groups.iter_mut().rev() {
            for segment in group.segments_mut().iter_mut().rev() {
                if segment.id() < previous.segment {
                    break 'groups;
                }
                if segment.id() < point.segment {
                    let written = segment.written_bytes();
                    segment.commit_to(written);
                } else if segment.id() == point.segment {
                    segment.commit_to(point.end as usize);
                }
            }
        }
        while let Some(front) = state.pending.front().copied() {
            if front.point > point {
                break;
            }
            state.pending.pop_front();
            state.pending_bytes -= front.bytes;
            state.committed_offset = front.next_offset;
        }
        drop(state);
        self.commits.send_replace(point);
        self.commit_moved();
    }
}
