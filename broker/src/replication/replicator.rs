//! The async shell around [`ReplicatedSegment`]: one task per replicated log.
//!
//! It wakes on every append (and roll) of its log, on answers from backups, and on membership
//! changes. Each round it syncs the segments it tracks with the log (new head, written bytes,
//! sealing; the reserved next segment is tracked, and its replicas opened, before the log
//! rolls into it), lets every segment's state machine say what to do, does it, and commits the
//! log as far as every segment before the point is fully replicated. Done segments are kept as
//! records of where their replicas are, so a lost backup's closed replicas are re-created
//! elsewhere in the background and freed replicas are released when retention frees the data.
//!
//! With too few live brokers for R copies, a segment commits on `min_insync_replicas` (see
//! `ReplicatedSegment`); the replicator tells its log whether that many copies can be had
//! (`Log::set_insync`: appends are refused while not), publishes the log's replica set and its
//! health (under-replicated, below min insync), and keeps asking for backups, so a segment
//! short of copies gets them once brokers return.

use super::backups::Backups;
use super::placements::SegmentReplicas;
use super::segment::{ReplicatedSegment, SlotState};
use super::selector::BackupSelector;
use super::transport::{ReplicaWriter, TransportError};
use crate::cluster::ClusterState;
use crate::log_bounds::Kept;
use crate::metrics as m;
use crate::storage::{CommitPoint, Log, Store, Streamlet};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_config::ReplicationConfig;
use tailstream_wire::messages::{BrokerInfo, LogReplicaSet, OpenSegment, ReplicaId};
use tailstream_wire::{LogId, ReplicaEpoch, SegmentId, ServerId};
use tokio::sync::watch;

/// How often a round runs while some replica still needs a backup and none was available.
const NO_BACKUP_RETRY: Duration = Duration::from_millis(100);
/// The wait before opening replicas again after an open failed, doubling up to the max while
/// opens keep failing.
const OPEN_RETRY_FIRST: Duration = Duration::from_millis(50);
const OPEN_RETRY_MAX: Duration = Duration::from_secs(2);
/// How often the task checks that its streamlet is still owned here.
const OWNERSHIP_CHECK: Duration = Duration::from_secs(2);

/// What every replicator of a broker shares.
#[derive(Debug)]
pub struct ReplicationContext {
    pub cluster: Arc<ClusterState>,
    pub store: Arc<Store>,
    pub backups: Arc<Backups>,
    pub config: ReplicationConfig,
    pub selector: Mutex<BackupSelector>,
    pub placements: Arc<super::placements::ReplicaPlacements>,
}

#[derive(Debug)]
pub(super) struct Tracked {
    pub(super) seg: ReplicatedSegment,
    pub(super) writers: Vec<Option<Arc<dyn ReplicaWriter>>>,
}

impl Tracked {
    pub(super) fn new(seg: ReplicatedSegment) -> Self {
        let writers = vec![None; seg.slots().len()];
        Self { seg, writers }
    }
}

/// A fully replicated, closed segment: where its replicas are.
#[derive(Clone, Debug)]
pub struct ClosedRecord {
    pub id: ReplicaId,
    pub length: u32,
    pub epoch: ReplicaEpoch,
    pub backups: Vec<ServerId>,
}

pub(super) enum Done {
    Opened {
        segment: SegmentId,
        slot: usize,
        backup: ServerId,
        result: Result<(u64, Arc<dyn ReplicaWriter>), String>,
    },
    Written {
        segment: SegmentId,
        slot: usize,
        backup: ServerId,
        /// The replica written (a slot's replica is replaced when lost, maybe on the same
        /// backup): a late answer must not count for its successor.
        key: u64,
        end: u32,
        started: Instant,
        result: Result<(), TransportError>,
    },
    Closed {
        segment: SegmentId,
        slot: usize,
        backup: ServerId,
        key: u64,
        result: Result<(), String>,
    },
    EpochSet {
        segment: SegmentId,
        slot: usize,
        epoch: ReplicaEpoch,
        result: Result<(), String>,
    },
    Freed,
}

pub(super) struct Replicator {
    pub(super) ctx: Arc<ReplicationContext>,
    pub(super) streamlet: Arc<Streamlet>,
    pub(super) log: LogId,
    pub(super) replicas: usize,
    /// Complete copies a segment commits with when no backup can be had for the others.
    pub(super) min_insync: usize,
    /// Backups lost that no segment's copy replaced yet: Kafka's replica list names them
    /// until the log has R copies everywhere again.
    pub(super) lost: Vec<ServerId>,
    /// Segments being written or closed, in log order (the reserved next one last).
    pub(super) active: VecDeque<Tracked>,
    /// Closed segments being copied to a replacement backup.
    pub(super) repairs: Vec<Tracked>,
    pub(super) closed: VecDeque<ClosedRecord>,
    pub(super) ops: FuturesUnordered<BoxFuture<'static, Done>>,
    pub(super) membership: watch::Receiver<Vec<BrokerInfo>>,
    pub(super) waiting_for_backup: bool,
    /// Segments below this were rebuilt by recovery and are tracked as closed records and
    /// repairs from the start, not as segments being written.
    pub(super) floor: Option<SegmentId>,
    /// True while every segment being repaired has `min_insync` complete copies (what a
    /// recovery waits for before the streamlet serves).
    pub(super) in_sync: watch::Sender<bool>,
    /// What `publish_placement` last published.
    pub(super) published: Vec<SegmentReplicas>,
    /// What `publish_health` last published.
    pub(super) health: Option<LogReplicaSet>,
    /// The log's kept segments as the coordinator last said it saved them (cached from the
    /// cluster's `LogBoundsBook`, asked again when a segment needs more).
    pub(super) durable: Option<Kept>,
    /// The newest segment committed unsaved while leaderless (each is counted once).
    pub(super) unsaved_leaderless: Option<SegmentId>,
    /// Per backup whose last open failed: not asked to open again before this (the wait
    /// doubling while its opens keep failing), so a backup whose pool is full is not asked
    /// in a tight loop when the selector has no other to choose. Other backups are not held
    /// up.
    pub(super) open_backoff: std::collections::HashMap<ServerId, (Instant, Duration)>,
    /// This replicator's entries in the placements (see `placements::Publisher`).
    pub(super) publisher: super::placements::Publisher,
}

/// Replicates one log of `streamlet` until the streamlet is no longer owned here.
pub fn spawn(ctx: Arc<ReplicationContext>, streamlet: Arc<Streamlet>, log: LogId) {
    spawn_recovered(ctx, streamlet, log, RecoveredReplicas::default());
}

/// What recovery knows of a rebuilt log's replicas: segments whose adopted copies are all
/// there, segments with copies still to make (the recovered head among them), and the first
/// segment id the log's own appends will have.
#[derive(Debug, Default)]
pub struct RecoveredReplicas {
    pub complete: Vec<ClosedRecord>,
    pub incomplete: Vec<ReplicatedSegment>,
    pub floor: Option<SegmentId>,
}

/// Replicates a rebuilt log: its recovered segments are known closed (or repaired from the
/// start), and only segments from `floor` on are written as the log appends. The returned
/// watch turns true once every recovered segment has `min_insync_replicas` complete copies
/// (the rest are made in the background, as brokers allow).
pub fn spawn_recovered(
    ctx: Arc<ReplicationContext>,
    streamlet: Arc<Streamlet>,
    log: LogId,
    recovered: RecoveredReplicas,
) -> watch::Receiver<bool> {
    let membership = ctx.cluster.brokers();
    let replicas = streamlet.config().replicas as usize;
    let min_insync = streamlet.config().min_insync() as usize;
    let (in_sync, in_sync_rx) = watch::channel(recovered.incomplete.is_empty());
    let replicator = Replicator {
        ctx,
        streamlet,
        log,
        replicas,
        min_insync,
        lost: Vec::new(),
        active: VecDeque::new(),
        repairs: recovered.incomplete.into_iter().map(Tracked::new).collect(),
        closed: recovered.complete.into(),
        ops: FuturesUnordered::new(),
        membership,
        waiting_for_backup: false,
        floor: recovered.floor,
        in_sync,
        published: Vec::new(),
        health: None,
        durable: None,
        unsaved_leaderless: None,
        open_backoff: std::collections::HashMap::new(),
        publisher: super::placements::new_publisher(),
    };
    tokio::spawn(replicator.run());
    in_sync_rx
}

fn replica_id(
    streamlet: &Streamlet,
    log: LogId,
    group: tailstream_wire::GroupId,
    segment: SegmentId,
) -> ReplicaId {
    ReplicaId {
        stream: streamlet.stream(),
        streamlet: streamlet.id(),
        log,
        group,
        segment,
    }
}

impl Replicator {
    pub(super) fn log(&self) -> &Log {
        // `log` is one of the streamlet's logs by construction (see `spawn`'s callers).
        &self.streamlet.logs()[self.log.0 as usize]
    }

    pub(super) fn me(&self) -> Option<ServerId> {
        self.ctx.cluster.server_id()
    }

    async fn run(self) {
        let (ctx, key, by) = (self.ctx.clone(), self.log_key(), self.publisher);
        self.run_rounds().await;
        // A log no longer replicated here has no placement to show.
        ctx.placements.remove(key, by);
    }

    async fn run_rounds(mut self) {
        let wake = self.log().replication_wake();
        let mut durable = self.ctx.cluster.log_bounds().subscribe();
        let mut ownership = tokio::time::interval(OWNERSHIP_CHECK);
        loop {
            if self.streamlet.is_retired() {
                return;
            }
            self.sync_with_log();
            self.drive();
            self.commit();
            self.retire();
            self.publish_placement();
            self.publish_health();
            let in_sync = self
                .repairs
                .iter()
                .all(|t| t.seg.in_sync() >= self.min_insync);
            self.in_sync
                .send_if_modified(|d| std::mem::replace(d, in_sync) != in_sync);
            let retry = self.waiting_for_backup;
            tokio::select! {
                _ = wake.notified() => {}
                Some(done) = self.ops.next() => {
                    self.apply(done);
                    while let Some(Some(done)) = futures::FutureExt::now_or_never(self.ops.next()) {
                        self.apply(done);
                    }
                }
                changed = self.membership.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.check_membership();
                }
                _ = tokio::time::sleep(NO_BACKUP_RETRY), if retry => {}
                _ = durable.changed() => {}
                _ = ownership.tick() => {
                    if !self.ctx.store.owns(&self.streamlet) {
                        return;
                    }
                }
            }
        }
    }

    fn log_key(
        &self,
    ) -> (
        tailstream_wire::StreamId,
        tailstream_wire::StreamletId,
        LogId,
    ) {
        (self.streamlet.stream(), self.streamlet.id(), self.log)
    }

    /// Tells the log whether `min_insync_replicas` copies can be had (every segment in flight
    /// has enough backups, or can get them), and publishes the log's replica set when it
    /// changed: the newest segment's backups (with those lost and not replaced yet), the ones
    /// of them in sync, and the fewest complete copies any segment not yet done has.
    fn publish_health(&mut self) {
        let possible = self.active.iter().all(|t| t.seg.can_reach_min_insync());
        self.log().set_insync(possible);
        let fewest = self
            .active
            .iter()
            .chain(self.repairs.iter())
            .filter(|t| t.seg.written() > 0 || t.seg.is_sealed())
            .map(|t| t.seg.in_sync())
            .min()
            .unwrap_or(self.replicas)
            .min(self.replicas);
        if fewest >= self.replicas {
            self.lost.clear();
        }
        let head = self
            .active
            .iter()
            .rev()
            .find(|t| t.seg.slots().iter().any(|s| s.backup.is_some()))
            .map(|t| t.seg.slots());
        // Compared in place: a round with nothing new (every append's) allocates nothing.
        let head_backups = || head.into_iter().flatten().filter_map(|s| s.backup);
        let head_in_sync = || {
            head.into_iter()
                .flatten()
                .filter(|s| s.is_in_sync())
                .filter_map(|s| s.backup)
        };
        let shown_lost = || {
            let room = self.replicas.saturating_sub(head_backups().count());
            self.lost
                .iter()
                .copied()
                .filter(move |lost| !head_backups().any(|b| b == *lost))
                .take(room)
        };
        let same = self.health.as_ref().is_some_and(|shown| {
            shown.in_sync_replicas == fewest as u32
                && shown.in_sync.iter().copied().eq(head_in_sync())
                && shown
                    .backups
                    .iter()
                    .copied()
                    .eq(head_backups().chain(shown_lost()))
        });
        if same {
            return;
        }
        let set = LogReplicaSet {
            log: self.log,
            backups: head_backups().chain(shown_lost()).collect(),
            in_sync: head_in_sync().collect(),
            in_sync_replicas: fewest as u32,
        };
        self.health = Some(set.clone());
        self.ctx.placements.publish_health(
            self.log_key(),
            self.publisher,
            set,
            self.replicas as u32,
            self.min_insync as u32,
        );
    }

    /// Publishes where the segments in flight have their replicas, when that changed (compared
    /// in place: a round with nothing new allocates nothing).
    fn publish_placement(&mut self) {
        let same = self.published.len() == self.active.len()
            && self
                .published
                .iter()
                .zip(&self.active)
                .all(|(shown, tracked)| {
                    shown.segment == tracked.seg.id.segment
                        && shown.backups.iter().copied().eq(tracked
                            .seg
                            .slots()
                            .iter()
                            .filter_map(|s| s.backup))
                });
        if same {
            return;
        }
        self.published = self
            .active
            .iter()
            .map(|tracked| SegmentReplicas {
                segment: tracked.seg.id.segment,
                backups: tracked.seg.backups(),
            })
            .collect();
        let key = self.log_key();
        self.ctx
            .placements
            .publish(key, self.publisher, self.published.clone());
    }

    /// Tracks the log's new segments (and the reserved next one) and their written bytes.
    fn sync_with_log(&mut self) {
        let from = self.active.front().map(|t| t.seg.id.segment).or(self.floor);
        let views = self.log().segments_since(from);
        for view in views {
            let position = self
                .active
                .iter()
                .position(|t| t.seg.id.segment == view.segment);
            let index = match position {
                Some(index) => index,
                None => {
                    let id = replica_id(&self.streamlet, self.log, view.group, view.segment);
                    let at = self
                        .active
                        .iter()
                        .position(|t| t.seg.id.segment > view.segment)
                        .unwrap_or(self.active.len());
                    let seg = ReplicatedSegment::new(id, view.capacity, self.replicas)
                        .with_min_insync(self.min_insync);
                    self.active.insert(at, Tracked::new(seg));
                    at
                }
            };
            let seg = &mut self.active[index].seg;
            if view.sealed {
                seg.seal(view.written);
            } else {
                seg.appended(view.written);
            }
        }
        if let Some((group, segment)) = self.log().upcoming()
            && !self.active.iter().any(|t| t.seg.id.segment == segment)
        {
            let id = replica_id(&self.streamlet, self.log, group, segment);
            let capacity = self.streamlet.config().segment_size_bytes;
            let seg = ReplicatedSegment::new(id, capacity, self.replicas)
                .with_min_insync(self.min_insync);
            self.active.push_back(Tracked::new(seg));
        }
    }

    pub(super) fn tracked_mut(&mut self, segment: SegmentId) -> Option<&mut Tracked> {
        self.active
            .iter_mut()
            .chain(self.repairs.iter_mut())
            .find(|t| t.seg.id.segment == segment)
    }

    fn apply(&mut self, done: Done) {
        match done {
            Done::Opened {
                segment,
                slot,
                backup,
                result,
            } => match result {
                Ok((key, writer)) => {
                    self.open_backoff.remove(&backup);
                    if let Some(tracked) = self.tracked_mut(segment)
                        && tracked.seg.slots().get(slot).is_some_and(|s| {
                            s.state == SlotState::Opening && s.backup == Some(backup)
                        })
                    {
                        tracked.seg.opened(slot, backup, key);
                        tracked.writers[slot] = Some(writer);
                    }
                }
                Err(error) => {
                    let wait = self
                        .open_backoff
                        .get(&backup)
                        .map_or(OPEN_RETRY_FIRST, |(_, wait)| {
                            (*wait * 2).min(OPEN_RETRY_MAX)
                        });
                    self.open_backoff
                        .insert(backup, (Instant::now() + wait, wait));
                    tracing::warn!(%backup, %error, retry_in_ms = wait.as_millis() as u64, "opening a replica failed; choosing another backup");
                    self.quarantine(backup);
                    if let Some(tracked) = self.tracked_mut(segment)
                        && tracked.seg.slots().get(slot).is_some_and(|s| {
                            s.state == SlotState::Opening && s.backup == Some(backup)
                        })
                    {
                        tracked.seg.failed(slot);
                        tracked.writers[slot] = None;
                    }
                }
            },
            Done::Written {
                segment,
                slot,
                backup,
                key,
                end,
                started,
                result,
            } => {
                metrics::gauge!(m::REPLICATION_WRITES_IN_FLIGHT).decrement(1.0);
                match result {
                    Ok(()) => {
                        metrics::histogram!(m::REPLICATION_WRITE_LATENCY)
                            .record(started.elapsed().as_secs_f64());
                        if let Some(tracked) = self.tracked_mut(segment) {
                            tracked.seg.write_done(slot, backup, key, end);
                        }
                    }
                    Err(error) => {
                        let still_there = self.tracked_mut(segment).is_some_and(|t| {
                            t.seg
                                .slots()
                                .get(slot)
                                .is_some_and(|s| s.is_replica(backup, key))
                        });
                        if still_there {
                            tracing::warn!(%backup, %error, "replica write failed; the backup is lost");
                            self.backup_lost(backup);
                        }
                    }
                }
            }
            Done::Closed {
                segment,
                slot,
                backup,
                key,
                result,
            } => {
                if let Some(tracked) = self.tracked_mut(segment)
                    && tracked
                        .seg
                        .slots()
                        .get(slot)
                        .is_some_and(|s| s.is_replica(backup, key))
                {
                    match result {
                        Ok(()) => tracked.seg.closed_ok(slot, backup, key),
                        Err(error) => {
                            tracing::warn!(%error, ?segment, "closing a replica failed; re-creating it");
                            tracked.seg.failed(slot);
                            tracked.writers[slot] = None;
                        }
                    }
                }
            }
            Done::EpochSet {
                segment,
                slot,
                epoch,
                result,
            } => {
                if let Some(tracked) = self.tracked_mut(segment) {
                    match result {
                        Ok(()) => tracked.seg.epoch_set(epoch),
                        Err(error) => {
                            tracing::warn!(%error, ?segment, "setting a replica's epoch failed; re-creating it");
                            tracked.seg.failed(slot);
                            tracked.writers[slot] = None;
                        }
                    }
                }
            }
            Done::Freed => {}
        }
    }

    /// Commits the log through the furthest point every replica holds, in log order, and
    /// never into a segment the coordinator's saved bounds do not allow (see
    /// [`Kept::allows_commit`]): what would allow it is asked for, and the commit follows once
    /// the coordinator answers. The next segment's replicas are saved as the log's open
    /// segment as soon as they are open, so a roll normally waits for nothing. The one
    /// exception is while no coordinator leads ([`Self::commit_unsaved_leaderless`]).
    fn commit(&mut self) {
        let mut point: Option<CommitPoint> = None;
        let mut blocked = None;
        for index in 0..self.active.len() {
            let seg = &self.active[index].seg;
            if seg.written() == 0 {
                break;
            }
            let (segment, epoch, settled) = (seg.id.segment, seg.epoch(), seg.epoch_settled());
            if !self.commit_allowed(segment, epoch) {
                // Asked for only once the epoch is settled (see `epoch_settled`); the commit
                // could not move before that anyway.
                // (A later blocked segment replaces an earlier one committed unsaved, but
                // never with nothing: the earlier one's bounds are still to be asked for.)
                if settled {
                    blocked = Some(OpenSegment { segment, epoch });
                }
                if !self.commit_unsaved_leaderless(index) {
                    break;
                }
            }
            let seg = &self.active[index].seg;
            if seg.committed() > 0 {
                point = Some(CommitPoint {
                    segment: seg.id.segment,
                    end: seg.committed(),
                });
            }
            if !(seg.is_sealed() && seg.committed() == seg.written()) {
                break;
            }
        }
        if let Some(point) = point {
            self.log().commit_through(point);
        }
        self.ask_bounds(blocked);
    }
}

impl Replicator {
    /// Whether the segment at `index`, which the saved bounds do not cover, may be committed
    /// anyway because no coordinator leads (the lease runs on its leaderless extension, so
    /// nothing could save them) and recovery finds it whole without them
    /// ([`ReplicatedSegment::found_whole_by_recovery`]): a log's first segment, or one rolled
    /// to while leaderless, then costs producers no wait for the next leader. Acknowledged
    /// records stay on all R backups, where the next leader's recovery reads them. What is
    /// given up until the bounds are saved (they are still asked for) is only the naming of
    /// a loss beyond what R copies survive: if the owner and every copy of such a segment were
    /// lost, recovery would serve the log without it (a log's first segment: without the
    /// log) instead of declaring it lost.
    fn commit_unsaved_leaderless(&mut self, index: usize) -> bool {
        let lease = self.ctx.cluster.lease();
        let leaderless = lease.has_extension() && lease.is_valid();
        if !(leaderless && self.active[index].seg.found_whole_by_recovery()) {
            return false;
        }
        let segment = self.active[index].seg.id.segment;
        // Counted once: the commit passes over a sealed segment still closing each round.
        if self.unsaved_leaderless < Some(segment) {
            self.unsaved_leaderless = Some(segment);
            tracing::info!(log = ?self.log_key(), ?segment, "no coordinator leads: committing a segment whose bounds are not saved yet (on all R backups at its first epoch)");
            metrics::counter!(m::COMMITS_UNSAVED_LEADERLESS).increment(1);
        }
        true
    }

    /// Whether the saved bounds allow acknowledging a record in `segment` at `epoch`.
    fn commit_allowed(&mut self, segment: SegmentId, epoch: ReplicaEpoch) -> bool {
        if self
            .durable
            .is_some_and(|d| d.allows_commit(segment, epoch))
        {
            return true;
        }
        self.durable = self.ctx.cluster.log_bounds().durable(self.log_key());
        self.durable
            .is_some_and(|d| d.allows_commit(segment, epoch))
    }

    /// Asks the coordinator to save the bounds the log needs next: the segment after its head
    /// as the open segment once that segment's replicas are open (with the head raised to the
    /// newest segment whose digest is on its replicas), or, when a commit is `blocked`, the
    /// blocked segment at its current epoch.
    fn ask_bounds(&mut self, blocked: Option<OpenSegment>) {
        let durable_head = self.durable.map(|d| d.head);
        let digest_on_replicas = self
            .active
            .iter()
            .rev()
            .find(|t| t.seg.committed() > 0)
            .map(|t| t.seg.id.segment);
        let head = digest_on_replicas.max(durable_head);
        let next = self
            .active
            .iter()
            .find(|t| head.is_none_or(|head| t.seg.id.segment > head));
        let next_open = next.filter(|t| t.seg.epoch_settled()).map(|t| OpenSegment {
            segment: t.seg.id.segment,
            epoch: t.seg.epoch(),
        });
        // A log with no head yet asks once its first segment's digest is on its replicas
        // (its first acknowledgements wait for that one save).
        let (Some(head), Some(open)) = (head, next_open.or(blocked)) else {
            return;
        };
        let log_oldest = self.log().oldest_segment().unwrap_or(head).min(head);
        let oldest = self
            .durable
            .map_or(log_oldest, |d| d.oldest.max(log_oldest).min(head));
        let wanted = Kept {
            oldest,
            head,
            open: Some(open),
        };
        if self.durable.is_some_and(|d| d.covers(&wanted)) {
            return;
        }
        // Saved meanwhile (by a report this log did not wait on)?
        self.durable = self.ctx.cluster.log_bounds().durable(self.log_key());
        if self.durable.is_some_and(|d| d.covers(&wanted)) {
            return;
        }
        self.ctx.cluster.log_bounds().want(self.log_key(), wanted);
    }

    /// Whether the coordinator durably knows this log keeps nothing older than `oldest`, so
    /// replicas of older segments may go; if not, asks for it (with a head it may hold: the
    /// newest committed segment, which has its copies, a rebuilt log's included).
    pub(super) fn oldest_durable(&mut self, oldest: SegmentId) -> bool {
        if self.durable.is_some_and(|d| d.oldest >= oldest) {
            return true;
        }
        let (book, key) = (self.ctx.cluster.log_bounds().clone(), self.log_key());
        self.durable = book.durable(key);
        if self.durable.is_some_and(|d| d.oldest >= oldest) {
            return true;
        }
        let committed = self.log().committed_segment();
        let head = committed.max(self.durable.map(|d| d.head));
        if let Some(head) = head.filter(|head| oldest <= *head) {
            book.want(
                key,
                Kept {
                    oldest,
                    head,
                    open: None,
                },
            );
        }
        false
    }
}

pub(super) fn record_of(seg: &ReplicatedSegment) -> ClosedRecord {
    ClosedRecord {
        id: seg.id,
        length: seg.written(),
        epoch: seg.epoch(),
        backups: seg.backups(),
    }
}

/// Where `backup` serves replica RPCs (its peer listener).
pub(super) fn peer_addr(membership: &[BrokerInfo], backup: ServerId) -> Option<String> {
    membership
        .iter()
        .find(|b| b.server_id == backup)
        .map(|b| b.peer_addr.clone())
}
