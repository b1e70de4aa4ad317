//! The async shell around [`ReplicatedSegment`]: one task per replicated log.
//!
//! It wakes on every append (and roll) of its log, on answers from backups, and on membership
//! changes. Each round it syncs the segments it tracks with the log (new head, written bytes,
//! sealing; the reserved next segment is tracked, and its replicas opened, before the log
//! rolls into it), lets every segment's state machine say what to do, does it, and commits the
//! log as far as every segment before the point is fully replicated. Done segments are kept as
//! records of where their replicas are, so a lost backup's closed replicas are re-created
//! elsewhere in the background and freed replicas are released when retention frees the data.

use super::backups::Backups;
use super::segment::{Action, ReplicatedSegment};
use super::selector::BackupSelector;
use super::transport::{ReplicaWriter, TransportError, WriteTarget};
use crate::cluster::ClusterState;
use crate::metrics as m;
use crate::storage::{CommitPoint, Log, Store, Streamlet};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_config::ReplicationConfig;
use tailstream_wire::messages::{
    BrokerInfo, ReplicaCloseRequest, ReplicaFreeRequest, ReplicaId, ReplicaOpenRequest,
    ReplicaSetEpochRequest,
};
use tailstream_wire::{LogId, SegmentId, ServerId};
use tokio::sync::watch;

/// How often a round runs while some replica still needs a backup and none was available.
const NO_BACKUP_RETRY: Duration = Duration::from_millis(100);
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
}

#[derive(Debug)]
struct Tracked {
    seg: ReplicatedSegment,
    writers: Vec<Option<Arc<dyn ReplicaWriter>>>,
}

impl Tracked {
    fn new(seg: ReplicatedSegment) -> Self {
        let writers = vec![None; seg.slots().len()];
        Self { seg, writers }
    }
}

/// A fully replicated, closed segment: where its replicas are.
#[derive(Clone, Debug)]
struct ClosedRecord {
    id: ReplicaId,
    length: u32,
    epoch: u32,
    backups: Vec<ServerId>,
}

enum Done {
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
        end: u32,
        started: Instant,
        result: Result<(), TransportError>,
    },
    Closed {
        segment: SegmentId,
        slot: usize,
        result: Result<(), String>,
    },
    EpochSet {
        segment: SegmentId,
        slot: usize,
        epoch: u32,
        result: Result<(), String>,
    },
    Freed,
}

struct Replicator {
    ctx: Arc<ReplicationContext>,
    streamlet: Arc<Streamlet>,
    log: LogId,
    replicas: usize,
    /// Segments being written or closed, in log order (the reserved next one last).
    active: VecDeque<Tracked>,
    /// Closed segments being copied to a replacement backup.
    repairs: Vec<Tracked>,
    closed: VecDeque<ClosedRecord>,
    ops: FuturesUnordered<BoxFuture<'static, Done>>,
    membership: watch::Receiver<Vec<BrokerInfo>>,
    waiting_for_backup: bool,
}

/// Replicates one log of `streamlet` until the streamlet is no longer owned here.
pub fn spawn(ctx: Arc<ReplicationContext>, streamlet: Arc<Streamlet>, log: LogId) {
    let membership = ctx.cluster.brokers();
    let replicas = streamlet.config().replicas as usize;
    let replicator = Replicator {
        ctx,
        streamlet,
        log,
        replicas,
        active: VecDeque::new(),
        repairs: Vec::new(),
        closed: VecDeque::new(),
        ops: FuturesUnordered::new(),
        membership,
        waiting_for_backup: false,
    };
    tokio::spawn(replicator.run());
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
    fn log(&self) -> &Log {
        // `log` is one of the streamlet's logs by construction (see `spawn`'s callers).
        &self.streamlet.logs()[self.log.0 as usize]
    }

    fn me(&self) -> Option<ServerId> {
        self.ctx.cluster.server_id()
    }

    async fn run(mut self) {
        let wake = self.log().replication_wake();
        let mut ownership = tokio::time::interval(OWNERSHIP_CHECK);
        loop {
            self.sync_with_log();
            self.drive();
            self.commit();
            self.retire();
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
                _ = ownership.tick() => {
                    if !self.ctx.store.owns(&self.streamlet) {
                        return;
                    }
                }
            }
        }
    }

    /// Tracks the log's new segments (and the reserved next one) and their written bytes.
    fn sync_with_log(&mut self) {
        let from = self.active.front().map(|t| t.seg.id.segment);
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
                    self.active.insert(
                        at,
                        Tracked::new(ReplicatedSegment::new(id, view.capacity, self.replicas)),
                    );
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
            self.active.push_back(Tracked::new(ReplicatedSegment::new(
                id,
                capacity,
                self.replicas,
            )));
        }
    }

    /// Does what every tracked segment's state machine asks for. Actions are collected first
    /// and carried out in the order the state machines gave them (a segment's writes, in
    /// particular, are queued to their writer in order).
    fn drive(&mut self) {
        self.waiting_for_backup = false;
        let writes_max = self.ctx.config.writes_in_flight_per_replica_max as usize;
        let Some(me) = self.me() else {
            self.waiting_for_backup = true;
            return;
        };
        let membership = self.membership.borrow().clone();
        let mut actions = Vec::new();
        for tracked in self.active.iter_mut().chain(self.repairs.iter_mut()) {
            let segment = tracked.seg.id.segment;
            actions.extend(
                tracked
                    .seg
                    .next_actions(writes_max)
                    .into_iter()
                    .map(|a| (segment, a)),
            );
        }
        for (segment, action) in actions {
            match action {
                Action::NeedBackup { slot, exclude } => {
                    self.open_replica(segment, slot, exclude, &membership, me);
                }
                // Only `assign` produces opens; `open_replica` issues them.
                Action::Open { .. } => {}
                Action::Write {
                    slot,
                    backup,
                    key,
                    from,
                    to,
                } => {
                    self.write(segment, slot, backup, key, from, to);
                }
                Action::Close {
                    slot,
                    backup,
                    key,
                    length,
                } => {
                    let Some(replica) = self.tracked_mut(segment).map(|t| t.seg.id) else {
                        continue;
                    };
                    let request = ReplicaCloseRequest {
                        primary: me,
                        replica,
                        key,
                        length,
                    };
                    self.control(
                        backup,
                        &membership,
                        move |backups, addr| {
                            Box::pin(async move {
                                let result = backups.close(&addr, &request).await;
                                Done::Closed {
                                    segment,
                                    slot,
                                    result,
                                }
                            })
                        },
                        move |result| Done::Closed {
                            segment,
                            slot,
                            result,
                        },
                    );
                }
                Action::SetEpoch {
                    slot,
                    backup,
                    epoch,
                } => {
                    let Some(replica) = self.tracked_mut(segment).map(|t| t.seg.id) else {
                        continue;
                    };
                    let request = ReplicaSetEpochRequest {
                        primary: me,
                        replica,
                        epoch,
                    };
                    self.control(
                        backup,
                        &membership,
                        move |backups, addr| {
                            Box::pin(async move {
                                let result = backups.set_epoch(&addr, &request).await;
                                Done::EpochSet {
                                    segment,
                                    slot,
                                    epoch,
                                    result,
                                }
                            })
                        },
                        move |result| Done::EpochSet {
                            segment,
                            slot,
                            epoch,
                            result,
                        },
                    );
                }
            }
        }
    }

    /// Chooses a backup for `slot` of `segment` and opens the replica there (or notes that
    /// none is available, to try again shortly).
    fn open_replica(
        &mut self,
        segment: SegmentId,
        slot: usize,
        mut exclude: Vec<ServerId>,
        membership: &[BrokerInfo],
        me: ServerId,
    ) {
        let selector = self.ctx.clone();
        let Some(tracked) = self.tracked_mut(segment) else {
            return;
        };
        // Backups assigned earlier in this same round count too.
        exclude.extend(tracked.seg.backups());
        let chosen = {
            let mut selector = selector.selector.lock().unwrap_or_else(|p| p.into_inner());
            selector.choose(membership, me, &exclude, Instant::now())
        };
        let opened =
            chosen.and_then(|broker| Some((tracked.seg.assign(slot, broker.server_id)?, broker)));
        let Some((
            Action::Open {
                slot,
                backup,
                epoch,
                filling,
            },
            broker,
        )) = opened
        else {
            self.waiting_for_backup = true;
            return;
        };
        if filling {
            metrics::counter!(m::REPLICA_RECREATIONS).increment(1);
        }
        let request = ReplicaOpenRequest {
            primary: me,
            replica: tracked.seg.id,
            epoch,
            capacity_bytes: tracked.seg.capacity,
            filling,
        };
        let backups = self.ctx.backups.clone();
        self.ops.push(Box::pin(async move {
            let result = backups.open(backup, &broker.rpc_addr, &request).await;
            Done::Opened {
                segment,
                slot,
                backup,
                result,
            }
        }));
    }

    /// Queues the write of `from..to` of `segment` to `slot`'s replica.
    fn write(
        &mut self,
        segment: SegmentId,
        slot: usize,
        backup: ServerId,
        key: u64,
        from: u32,
        to: u32,
    ) {
        let parts = self.log().segment_bytes(segment, from, to);
        let Some(tracked) = self.tracked_mut(segment) else {
            return;
        };
        let writer = tracked.writers.get(slot).cloned().flatten();
        let target = WriteTarget {
            replica: tracked.seg.id,
            key,
        };
        let started = Instant::now();
        let future = match (parts, writer) {
            (Some(parts), Some(writer)) => writer.write(target, from, parts),
            (None, _) => super::transport::failed("segment no longer in memory"),
            (_, None) => super::transport::failed("no writer for the replica"),
        };
        metrics::counter!(m::REPLICATED_BYTES).increment(u64::from(to - from));
        metrics::gauge!(m::REPLICATION_WRITES_IN_FLIGHT).increment(1.0);
        self.ops.push(Box::pin(async move {
            let result = future.await;
            Done::Written {
                segment,
                slot,
                backup,
                end: to,
                started,
                result,
            }
        }));
    }

    /// Issues a replica control RPC to `backup`, or fails it at once if the backup left.
    fn control(
        &mut self,
        backup: ServerId,
        membership: &[BrokerInfo],
        call: impl FnOnce(Arc<Backups>, String) -> BoxFuture<'static, Done>,
        gone: impl FnOnce(Result<(), String>) -> Done,
    ) {
        match rpc_addr(membership, backup) {
            Some(addr) => self.ops.push(call(self.ctx.backups.clone(), addr)),
            None => {
                let done = gone(Err(format!("{backup} left the cluster")));
                self.ops.push(Box::pin(std::future::ready(done)));
            }
        }
    }

    fn tracked_mut(&mut self, segment: SegmentId) -> Option<&mut Tracked> {
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
                    if let Some(tracked) = self.tracked_mut(segment) {
                        tracked.seg.opened(slot, key);
                        tracked.writers[slot] = Some(writer);
                    }
                }
                Err(error) => {
                    tracing::warn!(%backup, %error, "opening a replica failed; choosing another backup");
                    self.quarantine(backup);
                    if let Some(tracked) = self.tracked_mut(segment) {
                        tracked.seg.failed(slot);
                        tracked.writers[slot] = None;
                    }
                }
            },
            Done::Written {
                segment,
                slot,
                backup,
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
                            tracked.seg.write_done(slot, end);
                        }
                    }
                    Err(error) => {
                        let still_there = self.tracked_mut(segment).is_some_and(|t| {
                            t.seg.slots().get(slot).and_then(|s| s.backup) == Some(backup)
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
                result,
            } => {
                if let Some(tracked) = self.tracked_mut(segment) {
                    match result {
                        Ok(()) => tracked.seg.closed_ok(slot),
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

    fn quarantine(&self, backup: ServerId) {
        let mut selector = self.ctx.selector.lock().unwrap_or_else(|p| p.into_inner());
        selector.failed(backup, Instant::now());
    }

    /// `backup` is gone: every replica this log has there is re-created elsewhere.
    fn backup_lost(&mut self, backup: ServerId) {
        self.quarantine(backup);
        let addr = rpc_addr(&self.membership.borrow(), backup);
        self.ctx.backups.forget(backup, addr.as_deref());
        for tracked in self.active.iter_mut().chain(self.repairs.iter_mut()) {
            if tracked.seg.backup_lost(backup) {
                for (slot, writer) in tracked.writers.iter_mut().enumerate() {
                    if tracked.seg.slots()[slot].backup.is_none() {
                        *writer = None;
                    }
                }
            }
        }
        let (lost, kept): (Vec<ClosedRecord>, Vec<ClosedRecord>) = self
            .closed
            .drain(..)
            .partition(|r| r.backups.contains(&backup));
        self.closed = kept.into();
        for record in lost {
            let mut seg =
                ReplicatedSegment::closed(record.id, record.length, record.epoch, &record.backups);
            seg.backup_lost(backup);
            self.repairs.push(Tracked::new(seg));
        }
    }

    /// Backups the coordinator no longer lists as alive (or that came back as a newer
    /// generation) are lost.
    fn check_membership(&mut self) {
        let membership = self.membership.borrow().clone();
        let in_use: Vec<ServerId> = self
            .active
            .iter()
            .chain(self.repairs.iter())
            .flat_map(|t| t.seg.backups())
            .chain(self.closed.iter().flat_map(|r| r.backups.clone()))
            .collect();
        let mut lost: Vec<ServerId> = in_use
            .into_iter()
            .filter(|b| !membership.iter().any(|m| m.server_id == *b && m.alive))
            .collect();
        lost.sort();
        lost.dedup();
        for backup in lost {
            tracing::warn!(%backup, "backup no longer alive per the coordinator");
            self.backup_lost(backup);
        }
    }

    /// Commits the log through the furthest point every replica holds, in log order.
    fn commit(&mut self) {
        let mut point: Option<CommitPoint> = None;
        for tracked in &self.active {
            let seg = &tracked.seg;
            if seg.written() == 0 {
                break;
            }
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
    }

    /// Moves finished segments to the closed records, finishes repairs, and frees the
    /// replicas of segments retention has freed.
    fn retire(&mut self) {
        while self.active.front().is_some_and(|t| t.seg.is_done()) {
            if let Some(tracked) = self.active.pop_front() {
                self.closed.push_back(record_of(&tracked.seg));
            }
        }
        let (finished, ongoing): (Vec<Tracked>, Vec<Tracked>) = std::mem::take(&mut self.repairs)
            .into_iter()
            .partition(|t| t.seg.is_done());
        self.repairs = ongoing;
        for tracked in finished {
            let record = record_of(&tracked.seg);
            let at = self
                .closed
                .iter()
                .position(|r| r.id.segment > record.id.segment)
                .unwrap_or(self.closed.len());
            self.closed.insert(at, record);
        }
        while let Some(front) = self.closed.front() {
            if self.log().contains_segment(front.id.segment) {
                break;
            }
            if let Some(record) = self.closed.pop_front() {
                self.free(record);
            }
        }
    }

    fn free(&mut self, record: ClosedRecord) {
        let Some(me) = self.me() else { return };
        let membership = self.membership.borrow().clone();
        for backup in record.backups {
            let Some(addr) = rpc_addr(&membership, backup) else {
                continue;
            };
            let request = ReplicaFreeRequest {
                primary: me,
                replica: record.id,
            };
            let backups = self.ctx.backups.clone();
            self.ops.push(Box::pin(async move {
                if let Err(error) = backups.free(&addr, &request).await {
                    tracing::debug!(%error, "freeing a replica failed (the backup reclaims it on its own later)");
                }
                Done::Freed
            }));
        }
    }
}

fn record_of(seg: &ReplicatedSegment) -> ClosedRecord {
    ClosedRecord {
        id: seg.id,
        length: seg.written(),
        epoch: seg.epoch(),
        backups: seg.backups(),
    }
}

fn rpc_addr(membership: &[BrokerInfo], backup: ServerId) -> Option<String> {
    membership
        .iter()
        .find(|b| b.server_id == backup)
        .map(|b| b.rpc_addr.clone())
}
