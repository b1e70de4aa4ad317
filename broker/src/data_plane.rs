//! The broker's data plane, neutral to front ends: produce, fetch (by position or by record
//! offset) and group listings, addressed by (stream, streamlet, ownership epoch). The native
//! RPC service is one front end over it; a Kafka listener will be another.
//!
//! Every operation first asks whether this broker may serve the streamlet now: it must hold
//! it, at the epoch the request names, handed over (not still being rebuilt), and under a
//! live lease from the coordinator (a broker that cannot renew its lease may have been
//! declared crashed, its streamlets moved: it serves nothing until it hears back). A produce
//! returns where its batch landed and a `CommitWaiter` for the moment every backup holds it.

use crate::cluster::ClusterState;
use crate::lease::Lease;
use crate::metrics as m;
use crate::replication::placements::ReplicaPlacements;
use crate::storage::streamlet::Admission;
use crate::storage::{
    AppendLocation, CommitPoint, ProducerOwner, ReadOutcome, StorageError, Store, Streamlet,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_wire::batch::{BatchError, BatchInfo, validate_batch};
use tailstream_wire::entry::{ENTRY_HEADER_BYTES, EntryType};
use tailstream_wire::messages::LogGroups;
use tailstream_wire::scan::EntryIter;
use tailstream_wire::{
    GroupId, LogId, OwnershipEpoch, RecordOffset, SegmentId, SegmentPosition, Status, StreamId,
    StreamletId,
};
use thiserror::Error;
use tokio::sync::watch;

/// A streamlet as a request names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamletRef {
    pub stream: StreamId,
    pub streamlet: StreamletId,
    pub epoch: OwnershipEpoch,
}

/// Why the data plane refused, and the status each reason is answered with.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DataError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the request names {theirs}, the streamlet is at {ours}: refresh metadata")]
    StaleEpoch {
        theirs: OwnershipEpoch,
        ours: OwnershipEpoch,
    },
    #[error("the request names {theirs}; this broker holds {ours}")]
    NewerEpoch {
        theirs: OwnershipEpoch,
        ours: OwnershipEpoch,
    },
    #[error("the streamlet is being recovered here; retry shortly")]
    Recovering,
    #[error("this broker's lease from the coordinator expired; it serves nothing until renewed")]
    LeaseExpired,
    #[error("{0}")]
    InvalidBatch(BatchError),
    #[error("{0}")]
    UnsupportedBatch(BatchError),
    #[error("not replicated within {0} ms; retry")]
    CommitTimeout(u128),
    #[error(
        "appended, but fewer than min_insync_replicas backups can hold it now (brokers are gone and none can replace them); retry"
    )]
    NotEnoughReplicasAfterAppend,
    #[error("the log is gone")]
    LogGone,
}

impl DataError {
    pub fn status(&self) -> Status {
        match self {
            DataError::Storage(error) => error.status(),
            DataError::StaleEpoch { .. } => Status::StaleEpoch,
            DataError::NewerEpoch { .. } | DataError::LeaseExpired => Status::NotOwner,
            DataError::Recovering => Status::Recovering,
            DataError::InvalidBatch(_) => Status::InvalidBatch,
            DataError::UnsupportedBatch(_) => Status::UnsupportedBatch,
            // Appended, its fate unknown until its copies are made: a retry lands once.
            DataError::CommitTimeout(_) | DataError::NotEnoughReplicasAfterAppend => {
                Status::Timeout
            }
            DataError::LogGone => Status::ShuttingDown,
        }
    }
}

/// Where a produced batch landed, and whether it was a retry of an earlier append.
#[derive(Debug)]
pub struct Produced {
    pub location: AppendLocation,
    pub duplicate: bool,
    pub commit: CommitWaiter,
}

/// Resolves once an append is committed (on every backup).
#[derive(Debug)]
pub struct CommitWaiter {
    commits: watch::Receiver<CommitPoint>,
    /// The log's "min_insync_replicas copies can be had" flag: a wait ends early when it
    /// turns false, since the commit cannot come until a backup returns.
    insync: watch::Receiver<bool>,
    target: CommitPoint,
    timeout: Duration,
    /// Checked again once committed: no ack leaves a broker whose lease ran out while the
    /// batch waited (a new owner may have rebuilt the log without it).
    lease: Arc<Lease>,
    /// An unreplicated log: only the short lease counts (see `Lease::is_short_valid`).
    unreplicated: bool,
}

impl CommitWaiter {
    pub fn is_committed(&self) -> bool {
        *self.commits.borrow() >= self.target
    }

    /// Waits at most `timeout` (a Kafka produce's own `timeout_ms`), never longer than the
    /// broker's ack timeout: a client then hears "timed out, retry" before it gives up on the
    /// request itself, and its retry, in the same producer epoch, lands once.
    pub fn within(mut self, timeout: Duration) -> Self {
        self.timeout = self.timeout.min(timeout);
        self
    }

    pub async fn wait(self) -> Result<(), DataError> {
        let (lease, unreplicated) = (self.lease.clone(), self.unreplicated);
        self.wait_for_commit().await?;
        if lease_holds(&lease, unreplicated) {
            Ok(())
        } else {
            metrics::counter!(m::ACKS_WITHHELD_LEASE_EXPIRED).increment(1);
            Err(DataError::LeaseExpired)
        }
    }

    async fn wait_for_commit(mut self) -> Result<(), DataError> {
        let target = self.target;
        let latest = self.commits.clone();
        let waited = async {
            tokio::select! {
                biased;
                committed = self.commits.wait_for(|p| *p >= target) => {
                    committed.map(|_| ()).map_err(|_| DataError::LogGone)
                }
                below = self.insync.wait_for(|possible| !possible) => {
                    if *latest.borrow() >= target {
                        Ok(())
                    } else if below.is_err() {
                        // The flag's sender went with its log.
                        Err(DataError::LogGone)
                    } else {
                        Err(DataError::NotEnoughReplicasAfterAppend)
                    }
                }
            }
        };
        match tokio::time::timeout(self.timeout, waited).await {
            Ok(result) => result,
            Err(_) => Err(DataError::CommitTimeout(self.timeout.as_millis())),
        }
    }
}

/// Whether the lease lets this broker serve a log now: a leaderless extension counts only for
/// replicated logs, whose writes the backups fence once a recovery began.
fn lease_holds(lease: &Lease, unreplicated: bool) -> bool {
    if unreplicated {
        lease.is_short_valid()
    } else {
        lease.is_valid()
    }
}

/// Validates a batch as every front end must before it is stored.
fn validate(batch: &[u8]) -> Result<BatchInfo, DataError> {
    validate_batch(batch).map_err(|error| {
        refused(&error);
        match error {
            BatchError::UnsupportedAttributes(_) => DataError::UnsupportedBatch(error),
            error => DataError::InvalidBatch(error),
        }
    })
}

/// Counts a refused batch by reason, and says why in the log at most once a second (a client
/// whose every batch is refused must not flood the log, but its operator must learn why).
fn refused(error: &BatchError) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_LOGGED_MS: AtomicU64 = AtomicU64::new(0);
    static UNLOGGED: AtomicU64 = AtomicU64::new(0);
    metrics::counter!(m::INVALID_BATCHES, "reason" => error.reason()).increment(1);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let last = LAST_LOGGED_MS.load(Ordering::Relaxed);
    let due = now_ms.saturating_sub(last) >= 1000
        && LAST_LOGGED_MS
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
    if due {
        let also = UNLOGGED.swap(0, Ordering::Relaxed);
        tracing::warn!(%error, reason = error.reason(), unlogged_since = also, "record batch refused");
    } else {
        UNLOGGED.fetch_add(1, Ordering::Relaxed);
    }
}

/// A fetch's first read, and what a long-poll needs to read again.
#[derive(Debug)]
pub struct Fetched {
    pub outcome: ReadOutcome,
    pub streamlet: Arc<Streamlet>,
    pub commits: watch::Receiver<CommitPoint>,
}

#[derive(Debug)]
pub struct DataPlane {
    store: Arc<Store>,
    cluster: Arc<ClusterState>,
    /// How long a produce on a replicated stream waits for its replicas.
    ack_timeout: Duration,
    /// Where replicated logs' segments in flight have their replicas (for `list_groups`).
    placements: Arc<ReplicaPlacements>,
}

impl DataPlane {
    pub fn new(
        store: Arc<Store>,
        cluster: Arc<ClusterState>,
        ack_timeout: Duration,
        placements: Arc<ReplicaPlacements>,
    ) -> Self {
        Self {
            store,
            cluster,
            ack_timeout,
            placements,
        }
    }

    /// The name of stream `stream`, as its assignment here gave it.
    pub fn stream_name(&self, stream: StreamId) -> Option<Arc<str>> {
        self.store.stream_name(stream)
    }

    /// The streamlet, if this broker may serve `at` now.
    pub fn admit(&self, at: StreamletRef) -> Result<Arc<Streamlet>, DataError> {
        let streamlet = self.store.get(at.stream, at.streamlet)?;
        match streamlet.admit(at.epoch) {
            Admission::Serve => {}
            Admission::StaleEpoch { ours } => {
                return Err(DataError::StaleEpoch {
                    theirs: at.epoch,
                    ours,
                });
            }
            Admission::NewerEpoch { ours } => {
                return Err(DataError::NewerEpoch {
                    theirs: at.epoch,
                    ours,
                });
            }
            Admission::Recovering => return Err(DataError::Recovering),
        }
        if !lease_holds(self.cluster.lease(), streamlet.config().replicas == 0) {
            return Err(DataError::LeaseExpired);
        }
        Ok(streamlet)
    }

    /// Validates and appends one record batch of a native producer (sent by `owner`: a
    /// producer id is refused to any user but the first to write under it), to the log its
    /// producer id maps to. Native producers are always idempotent: a batch without a producer id is
    /// refused.
    pub fn produce(
        &self,
        at: StreamletRef,
        batch: &[u8],
        owner: ProducerOwner,
        started: Instant,
    ) -> Result<Produced, DataError> {
        let info = validate(batch)?;
        let Some(producer) = info.producer else {
            let error = BatchError::BadProducerId(-1);
            refused(&error);
            return Err(DataError::InvalidBatch(error));
        };
        let streamlet = self.admit(at)?;
        let log = streamlet.log_for(producer.producer_id).id();
        self.append(&streamlet, log, batch, &info, owner, started)
    }

    /// Validates and appends one record batch to `log`: a front end whose clients address
    /// logs themselves (a Kafka partition is one log). The batch may come without a producer
    /// id (no idempotence).
    pub fn produce_to_log(
        &self,
        at: StreamletRef,
        log: LogId,
        batch: &[u8],
        owner: ProducerOwner,
        started: Instant,
    ) -> Result<Produced, DataError> {
        let info = validate(batch)?;
        let streamlet = self.admit(at)?;
        self.append(&streamlet, log, batch, &info, owner, started)
    }

    fn append(
        &self,
        streamlet: &Streamlet,
        log: LogId,
        batch: &[u8],
        info: &BatchInfo,
        owner: ProducerOwner,
        started: Instant,
    ) -> Result<Produced, DataError> {
        let appended = self
            .store
            .append(streamlet, log, batch, info, owner, started)
            .inspect_err(|error| match error {
                StorageError::Backpressure { .. } => {
                    metrics::counter!(m::PRODUCE_BACKPRESSURE).increment(1);
                }
                StorageError::NotEnoughReplicas { .. } => {
                    metrics::counter!(m::PRODUCE_NOT_ENOUGH_REPLICAS).increment(1);
                }
                _ => {}
            })?;
        if appended.duplicate {
            metrics::counter!(m::DUPLICATE_BATCHES).increment(1);
        } else {
            metrics::counter!(m::APPENDED_RECORDS).increment(u64::from(info.record_count));
            metrics::counter!(m::APPENDED_BYTES).increment(batch.len() as u64);
        }
        let location = appended.location;
        // Acknowledged only once committed: at once without replication, after every backup
        // holds the bytes with it. A retried batch waits for its first append's commit.
        let log = streamlet.log(location.log)?;
        let commits = log.subscribe_commits();
        let insync = log.subscribe_insync();
        Ok(Produced {
            location,
            duplicate: appended.duplicate,
            commit: CommitWaiter {
                commits,
                insync,
                target: location.commit_point(),
                timeout: self.ack_timeout,
                lease: self.cluster.lease().clone(),
                unreplicated: streamlet.config().replicas == 0,
            },
        })
    }

    /// Committed entries of one segment of `log`'s `group` from `position` (0 = the first
    /// entry after the digest), and what a long-poll needs to read again.
    pub fn fetch(
        &self,
        at: StreamletRef,
        log: LogId,
        group: GroupId,
        segment: SegmentId,
        position: SegmentPosition,
        max_bytes: usize,
    ) -> Result<Fetched, DataError> {
        let streamlet = self.admit(at)?;
        let target = streamlet.log(log)?;
        // Subscribe before reading, so a commit between the read and the wait is not missed.
        let commits = target.subscribe_commits();
        let outcome = target.read(group, segment, position, max_bytes)?;
        Ok(Fetched {
            outcome,
            streamlet,
            commits,
        })
    }

    /// Where the batch holding record `offset` of `log` starts: its group, segment and
    /// position (what a front end that addresses records by offset fetches from).
    pub fn locate_offset(
        &self,
        at: StreamletRef,
        log: LogId,
        offset: RecordOffset,
    ) -> Result<(GroupId, SegmentId, SegmentPosition), DataError> {
        let streamlet = self.admit(at)?;
        Ok(streamlet.log(log)?.locate_offset(offset)?)
    }

    /// The streamlet at whatever epoch this broker holds it, if it may serve it now: for a
    /// front end whose clients do not know epochs (Kafka's address a partition by its leader).
    pub fn admit_current(
        &self,
        stream: StreamId,
        streamlet: StreamletId,
    ) -> Result<Arc<Streamlet>, DataError> {
        let held = self.store.get(stream, streamlet)?;
        self.admit(StreamletRef {
            stream,
            streamlet,
            epoch: held.epoch(),
        })
    }

    /// Committed record batches of `log` starting with the one that holds record `from`,
    /// whole, as zero-copy slices of the segments they are stored in: about `max_bytes` of
    /// them, at least one when any is committed. Empty when `from` is the committed end.
    pub fn read_batches(
        &self,
        streamlet: &Streamlet,
        log: LogId,
        from: RecordOffset,
        max_bytes: usize,
    ) -> Result<Vec<bytes::Bytes>, DataError> {
        let target = streamlet.log(log)?;
        let (group, segment, position) = target.locate_offset(from)?;
        let outcome = target.read(group, segment, position, max_bytes)?;
        let mut batches = Vec::new();
        for part in &outcome.parts {
            // Every part is whole entries this broker wrote: a walk that fails is a bug.
            for entry in EntryIter::new(part, false) {
                let entry = entry.map_err(|_| {
                    DataError::Storage(StorageError::invariant("a stored entry does not parse"))
                })?;
                if entry.header.entry_type == EntryType::Batch {
                    let start = entry.position + ENTRY_HEADER_BYTES;
                    batches.push(part.slice(start..start + entry.payload.len()));
                }
            }
        }
        Ok(batches)
    }

    /// The live groups of every log of the streamlet, with where each log's segments in
    /// flight have their replicas.
    pub fn list_groups(&self, at: StreamletRef) -> Result<Vec<LogGroups>, DataError> {
        let mut logs = self.admit(at)?.list_groups();
        for log in &mut logs {
            log.replicas = self.placements.of((at.stream, at.streamlet, log.log));
        }
        Ok(logs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::BootInstant;
    use tailstream_wire::SegmentId;

    /// A waiter for commit point (0, 100), with the senders of its log's commits and
    /// in-sync flag.
    fn waiter(
        lease: &Arc<Lease>,
    ) -> (
        watch::Sender<CommitPoint>,
        watch::Sender<bool>,
        CommitWaiter,
    ) {
        let start = CommitPoint {
            segment: SegmentId(0),
            end: 0,
        };
        let (commits, commits_rx) = watch::channel(start);
        let (insync_tx, insync) = watch::channel(true);
        let waiter = CommitWaiter {
            commits: commits_rx,
            insync,
            target: CommitPoint {
                segment: SegmentId(0),
                end: 100,
            },
            timeout: Duration::from_secs(5),
            lease: lease.clone(),
            unreplicated: false,
        };
        (commits, insync_tx, waiter)
    }

    /// Issue 21, finding 1: a batch admitted under a live lease, committed only after the
    /// lease ran out (a pause, a partition from the coordinator), must not be acknowledged.
    #[tokio::test]
    async fn no_ack_leaves_once_the_lease_ran_out_while_the_batch_waited() {
        let lease = Arc::new(Lease::new(Duration::from_millis(40)));
        lease.renew(BootInstant::now());
        let (commits, _insync, waiting) = waiter(&lease);
        let answer = tokio::spawn(waiting.wait());
        tokio::time::sleep(Duration::from_millis(60)).await;
        commits.send_replace(CommitPoint {
            segment: SegmentId(0),
            end: 100,
        });
        assert!(matches!(
            answer.await.unwrap(),
            Err(DataError::LeaseExpired)
        ));

        // Under a live lease, the same commit is acknowledged.
        lease.renew(BootInstant::now());
        let (commits, _insync, waiting) = waiter(&lease);
        commits.send_replace(CommitPoint {
            segment: SegmentId(0),
            end: 100,
        });
        assert!(waiting.wait().await.is_ok());
    }
}
