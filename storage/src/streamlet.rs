//! A streamlet on its broker: a MultiLog of Q independent logs.
//!
//! A producer's batches always go to the same log (`producer id mod Q`), so Q producers append
//! in parallel, each under its own log's lock, and one producer's batches stay in order.
//! Group and segment ids are drawn from counters shared by the streamlet's logs, so they are
//! unique within the streamlet and only increase (a rebuilt streamlet's counters start above
//! every id its crashed owner used). A streamlet carries its ownership epoch and whether it
//! serves yet (a rebuilt one waits for the coordinator's word).

use super::commit_feed::{CommitFeed, FeedLink};
use super::error::StorageError;
use super::log::{Appended, Log};
use super::memory::{MemoryLease, SegmentMemory};
use super::producers::ProducerOwner;
use super::rebuild::{RebuildSummary, RecoveredSegment};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_wire::batch::BatchInfo;
use tailstream_wire::messages::{LogGroups, LogStart, StreamConfig};
use tailstream_wire::{
    GroupId, LogId, OwnershipEpoch, ProducerId, SegmentId, StreamId, StreamletId,
};

/// Streamlet-wide, only-increasing group and segment ids.
#[derive(Debug, Default)]
pub struct IdAllocator {
    next_group: AtomicU64,
    next_segment: AtomicU64,
}

impl IdAllocator {
    /// Counters that hand out `group` and `segment` next.
    pub fn starting_at(group: GroupId, segment: SegmentId) -> Self {
        Self {
            next_group: AtomicU64::new(group.0),
            next_segment: AtomicU64::new(segment.0),
        }
    }

    pub fn next_group(&self) -> GroupId {
        GroupId(self.next_group.fetch_add(1, Ordering::Relaxed))
    }

    pub fn next_segment(&self) -> SegmentId {
        SegmentId(self.next_segment.fetch_add(1, Ordering::Relaxed))
    }
}

/// A streamlet's retention limits (0: none). The only settings that change after creation
/// (Kafka's IncrementalAlterConfigs, `stream alter`): the coordinator's next assignment
/// carries them, and the next retention pass frees by them.
#[derive(Debug)]
pub struct RetentionLimits {
    ms: AtomicU64,
    bytes: AtomicU64,
}

impl RetentionLimits {
    fn of(config: &StreamConfig) -> Self {
        Self {
            ms: AtomicU64::new(config.retention_ms),
            bytes: AtomicU64::new(config.retention_bytes),
        }
    }

    pub fn ms(&self) -> u64 {
        self.ms.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// What every log of a streamlet shares.
#[derive(Debug)]
pub struct StreamletShared {
    pub stream: StreamId,
    pub streamlet: StreamletId,
    /// The settings the streamlet was created with; its retention is `retention`'s.
    pub config: StreamConfig,
    pub retention: RetentionLimits,
    pub memory: SegmentMemory,
    pub ids: IdAllocator,
    /// Appended but not yet replicated bytes a log may hold (replicated streams only).
    pub replication_backlog_bytes_max: u64,
    pub producers_per_log_max: usize,
}

impl StreamletShared {
    /// Memory for one more segment of this streamlet, or `Backpressure` when the broker's
    /// segment budget has none left.
    pub fn reserve_segment(&self) -> Result<MemoryLease, StorageError> {
        self.memory
            .try_reserve(u64::from(self.config.segment_size_bytes))
            .ok_or(StorageError::Backpressure {
                bytes_max: self.memory.bytes_max(),
            })
    }
}

/// Whether a request may be served here, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Serve,
    /// The request named an older epoch: the client must refresh and re-route.
    StaleEpoch {
        ours: OwnershipEpoch,
    },
    /// The request named a newer epoch than we hold (our assignment is behind, or we are a
    /// zombie): not ours to serve.
    NewerEpoch {
        ours: OwnershipEpoch,
    },
    /// Rebuilt (or being rebuilt) and not yet handed over.
    Recovering,
}

#[derive(Debug)]
pub struct Streamlet {
    shared: StreamletShared,
    logs: Vec<Log>,
    epoch: AtomicU32,
    serving: AtomicBool,
    /// No longer held by the store (dropped, or replaced by a newer rebuild): its replicators
    /// stop at once instead of writing replicas a successor also writes.
    retired: AtomicBool,
    /// The coordinator metadata version this streamlet was created for: an assignment older
    /// than that never drops it.
    created_version: u64,
}

impl Streamlet {
    pub fn new(
        stream: StreamId,
        streamlet: StreamletId,
        config: StreamConfig,
        memory: SegmentMemory,
        producers_per_log_max: usize,
        replication_backlog_bytes_max: u64,
    ) -> Self {
        let logs = (0..config.logs_per_streamlet.max(1))
            .map(|id| Log::new(LogId(id), producers_per_log_max))
            .collect();
        Self {
            shared: StreamletShared {
                stream,
                streamlet,
                retention: RetentionLimits::of(&config),
                config,
                memory,
                ids: IdAllocator::default(),
                replication_backlog_bytes_max,
                producers_per_log_max,
            },
            logs,
            epoch: AtomicU32::new(1),
            serving: AtomicBool::new(true),
            retired: AtomicBool::new(false),
            created_version: 0,
        }
    }

    /// A streamlet rebuilt from recovered segments (per log, in log order), at `epoch`, not
    /// serving until `set_ownership` says so; its id counters start at `next_ids`.
    #[allow(clippy::too_many_arguments)]
    pub fn rebuilt(
        stream: StreamId,
        streamlet: StreamletId,
        config: StreamConfig,
        memory: SegmentMemory,
        producers_per_log_max: usize,
        replication_backlog_bytes_max: u64,
        epoch: OwnershipEpoch,
        created_version: u64,
        next_ids: (GroupId, SegmentId),
        logs: &[(LogId, Vec<RecoveredSegment>)],
        now: Instant,
    ) -> Result<(Self, Vec<RebuildSummary>), StorageError> {
        let mut rebuilt = Self::new(
            stream,
            streamlet,
            config,
            memory,
            producers_per_log_max,
            replication_backlog_bytes_max,
        );
        rebuilt.shared.ids = IdAllocator::starting_at(next_ids.0, next_ids.1);
        rebuilt.epoch = AtomicU32::new(epoch.0);
        rebuilt.serving = AtomicBool::new(false);
        rebuilt.created_version = created_version;
        let mut summaries = Vec::new();
        for (log, segments) in logs {
            let target = rebuilt.log(*log)?;
            summaries.push(target.rebuild(&rebuilt.shared, segments, now)?);
        }
        Ok((rebuilt, summaries))
    }

    /// Whether a request naming `epoch` may be served.
    pub fn admit(&self, epoch: OwnershipEpoch) -> Admission {
        let ours = OwnershipEpoch(self.epoch.load(Ordering::Acquire));
        if epoch < ours {
            Admission::StaleEpoch { ours }
        } else if epoch > ours {
            Admission::NewerEpoch { ours }
        } else if !self.serving.load(Ordering::Acquire) {
            Admission::Recovering
        } else {
            Admission::Serve
        }
    }

    pub fn epoch(&self) -> OwnershipEpoch {
        OwnershipEpoch(self.epoch.load(Ordering::Acquire))
    }

    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }

    /// The store let go of this streamlet: it serves nothing more and its replicators stop.
    pub fn retire(&self) {
        self.serving.store(false, Ordering::Release);
        self.retired.store(true, Ordering::Release);
        for log in &self.logs {
            log.replication_wake().notify_one();
        }
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The coordinator's word on this streamlet: its epoch, and whether it serves.
    pub fn set_ownership(&self, epoch: OwnershipEpoch, serving: bool) {
        self.epoch.store(epoch.0, Ordering::Release);
        self.serving.store(serving, Ordering::Release);
    }

    pub fn created_version(&self) -> u64 {
        self.created_version
    }

    pub fn stream(&self) -> StreamId {
        self.shared.stream
    }

    pub fn id(&self) -> StreamletId {
        self.shared.streamlet
    }

    /// The settings the streamlet was created with (retention may have changed since: see
    /// `retention`).
    pub fn config(&self) -> &StreamConfig {
        &self.shared.config
    }

    /// The retention limits in force.
    pub fn retention(&self) -> &RetentionLimits {
        &self.shared.retention
    }

    /// Takes the stream's current retention limits (an assignment's); the next retention pass
    /// frees by them. Returns whether they changed.
    pub fn set_retention(&self, retention_ms: u64, retention_bytes: u64) -> bool {
        let limits = &self.shared.retention;
        let ms = limits.ms.swap(retention_ms, Ordering::Relaxed);
        let bytes = limits.bytes.swap(retention_bytes, Ordering::Relaxed);
        ms != retention_ms || bytes != retention_bytes
    }

    /// Takes the starts of an assignment (records before them deleted); returns whether any
    /// moved. A start naming no log of this streamlet is ignored (the coordinator checked
    /// it against the stream's Q).
    pub fn set_log_starts(&self, starts: &[LogStart]) -> bool {
        let mut moved = false;
        for start in starts {
            if let Ok(log) = self.log(start.log) {
                moved |= log.raise_start(start.offset);
            }
        }
        moved
    }

    pub fn logs(&self) -> &[Log] {
        &self.logs
    }

    /// Tells `feed` of every later move of its logs' commit points (and of where they are now).
    pub(crate) fn link_commit_feed(&self, feed: &Arc<CommitFeed>) {
        for log in &self.logs {
            let key = (self.shared.stream, self.shared.streamlet, log.id());
            log.link_commit_feed(FeedLink::new(key, feed.clone()));
        }
    }

    /// The log a producer appends to.
    pub fn log_for(&self, producer: ProducerId) -> &Log {
        // `logs` is never empty (at least one log is created), so the modulus is non-zero.
        let index = (producer.0 % self.logs.len() as u64) as usize;
        &self.logs[index]
    }

    pub fn log(&self, id: LogId) -> Result<&Log, StorageError> {
        self.logs
            .get(id.0 as usize)
            .ok_or(StorageError::UnknownLog(id))
    }

    /// Appends one validated batch to `log` (the log its producer maps to, `log_for`, for a
    /// native producer; the partition's log for a Kafka one).
    pub fn append(
        &self,
        log: LogId,
        batch: &[u8],
        info: &BatchInfo,
        owner: ProducerOwner,
        now: Instant,
    ) -> Result<Appended, StorageError> {
        let appended = self
            .log(log)?
            .append(&self.shared, batch, info, owner, now)?;
        // Size-based retention as soon as a log grows by a segment (the periodic pass is for
        // age): the streamlet stays within `retention_bytes` plus one segment per log, and a
        // freed segment's buffer is reused by the next one instead of fresh memory.
        if appended.rolled && self.shared.retention.bytes() > 0 {
            self.enforce_retention(now);
        }
        Ok(appended)
    }

    pub fn list_groups(&self) -> Vec<LogGroups> {
        self.logs.iter().map(Log::groups).collect()
    }

    /// Frees sealed groups older than `retention_ms`, then the oldest sealed groups while the
    /// streamlet holds more than `retention_bytes`. Returns the bytes freed.
    pub fn enforce_retention(&self, now: Instant) -> u64 {
        let freed = self.free_past_retention(now);
        if freed > 0 {
            metrics::counter!(crate::metrics::RETENTION_FREED).increment(freed);
        }
        freed
    }

    fn free_past_retention(&self, now: Instant) -> u64 {
        // Groups whose records were all deleted (DeleteRecords) go first, whatever the limits.
        let mut freed = 0;
        // A log with no start set (nearly all) is skipped on an atomic load, without its lock:
        // this runs on every roll of a size-limited stream.
        for log in self.logs.iter().filter(|log| log.start().0 > 0) {
            while let Some(group) = log.oldest_group_before_start() {
                match log.free_oldest_group(group) {
                    Some(bytes) => freed += bytes,
                    None => break,
                }
            }
        }
        freed + self.free_past_limits(now)
    }

    fn free_past_limits(&self, now: Instant) -> u64 {
        let (retention_ms, retention_bytes) =
            (self.shared.retention.ms(), self.shared.retention.bytes());
        if retention_bytes == 0 && retention_ms == 0 {
            return 0;
        }
        let max_age = Duration::from_millis(retention_ms);
        let mut total: u64 = self.logs.iter().map(Log::written_bytes).sum();
        let mut freed = 0;
        loop {
            let candidates = self
                .logs
                .iter()
                .filter_map(|log| Some((log, log.oldest_sealed_group()?)));
            let expired = |sealed_at: Instant| {
                retention_ms > 0 && now.saturating_duration_since(sealed_at) >= max_age
            };
            let over_size = retention_bytes > 0 && total > retention_bytes;
            // Among the logs' oldest sealed groups, the lowest id is the oldest in the streamlet.
            let victim = candidates
                .filter(|(_, (_, _, sealed_at))| over_size || expired(*sealed_at))
                .min_by_key(|(_, (group, _, _))| *group);
            let Some((log, (group, _, _))) = victim else {
                return freed;
            };
            match log.free_oldest_group(group) {
                Some(bytes) => {
                    freed += bytes;
                    total = total.saturating_sub(bytes);
                }
                None => return freed,
            }
        }
    }
}
