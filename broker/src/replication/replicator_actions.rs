//! Carrying out what the replicated segments' state machines ask for: choosing backups and
//! opening replicas, queueing writes to writers (in the order given), and the replica control
//! RPCs. Part of the per-log replicator (see `replicator`).

use super::backups::Backups;
use super::replicator::{Done, Replicator, peer_addr};
use super::segment::Action;
use super::transport::{TransportError, WriteTarget};
use crate::metrics as m;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_wire::messages::{
    BrokerInfo, ReplicaCloseRequest, ReplicaOpenRequest, ReplicaSetEpochRequest,
};
use tailstream_wire::{SegmentId, ServerId};

/// Closed segments of one log being copied to a new backup at once.
const REPAIRS_AT_ONCE_MAX: usize = 4;

impl Replicator {
    /// Does what every tracked segment's state machine asks for. Actions are collected first
    /// and carried out in the order the state machines gave them (a segment's writes, in
    /// particular, are queued to their writer in order).
    pub(super) fn drive(&mut self) {
        self.waiting_for_backup = false;
        let writes_max = self.ctx.config.writes_in_flight_per_replica_max as usize;
        let Some(me) = self.me() else {
            self.waiting_for_backup = true;
            return;
        };
        let membership = self.membership.borrow().clone();
        let mut actions = Vec::new();
        // Repairs (closed segments copied again) go a few at a time: each holds a buffer on
        // its backups until it closes, and a recovery may have a whole log's worth of them.
        // Those being copied come first; segments complete on fewer than R backups (waiting
        // for a broker to come back) only look for one with what is left of the allowance,
        // so they never hold up a copy that can be made (a recovered head's, say).
        let (copying, short): (Vec<&mut _>, Vec<&mut _>) = self
            .repairs
            .iter_mut()
            .partition(|t: &&mut super::replicator::Tracked| !t.seg.is_closed_short());
        let repairs = copying.into_iter().chain(short).take(REPAIRS_AT_ONCE_MAX);
        for tracked in self.active.iter_mut().chain(repairs) {
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
                                    backup,
                                    key,
                                    result,
                                }
                            })
                        },
                        move |result| Done::Closed {
                            segment,
                            slot,
                            backup,
                            key,
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
        // The selector avoids a backup that failed recently while another qualifies; when
        // none does, it is asked again only after its backoff (the retry tick wakes us).
        let now = Instant::now();
        let backing_off = chosen.as_ref().is_some_and(|broker| {
            self.open_backoff
                .get(&broker.server_id)
                .is_some_and(|(until, _)| now < *until)
        });
        if backing_off {
            self.waiting_for_backup = true;
            return;
        }
        let Some(tracked) = self.tracked_mut(segment) else {
            return;
        };
        let none_to_be_had = chosen.is_none();
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
            // No broker can take a copy now: the segment does without this one (committing
            // on min_insync_replicas copies) and asks again shortly.
            if none_to_be_had {
                tracked.seg.unavailable(slot);
            }
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
            let result = backups.open(backup, &broker.peer_addr, &request).await;
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
        let timeout = Duration::from_millis(self.ctx.config.write_timeout_ms);
        self.ops.push(Box::pin(async move {
            // A backup that never answers (cut off by the network, not crashed) is lost like
            // one whose write failed, so the log goes on with a replacement.
            let result = match tokio::time::timeout(timeout, future).await {
                Ok(result) => result,
                Err(_) => Err(TransportError::Broken(format!(
                    "no answer to a replica write in {} ms",
                    timeout.as_millis()
                ))),
            };
            Done::Written {
                segment,
                slot,
                backup,
                key,
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
        match peer_addr(membership, backup) {
            Some(addr) => self.ops.push(call(self.ctx.backups.clone(), addr)),
            None => {
                let done = gone(Err(format!("{backup} left the cluster")));
                self.ops.push(Box::pin(std::future::ready(done)));
            }
        }
    }
}
