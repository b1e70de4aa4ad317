//! Carrying out what the replicated segments' state machines ask for: choosing backups and
//! opening replicas, queueing writes to writers (in the order given), and the replica control
//! RPCs. Part of the per-log replicator (see `replicator`).

use super::backups::Backups;
use super::replicator::{Done, Replicator, Tracked, peer_addr};
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

/// Closed segments of one log being copied to new backups at once, and their bytes: each
/// holds a buffer on its backups until it closes, and a recovery may have a whole log's worth
/// of them. Small segments go many at a time (each close is a round trip and a sync on its
/// backup), large ones a few (the bytes bound them).
const REPAIRS_AT_ONCE_MAX: usize = 16;
const REPAIR_BYTES_AT_ONCE_MAX: u64 = 32 << 20;

/// Which repairs (indices into `repairs`, ascending) are driven this round, most urgent first:
/// those with a copy under way (they hold buffers), those short of `min_insync` complete
/// copies (a recovery waits on them before its streamlet may serve), the rest being copied,
/// and last those complete on fewer than R backups waiting for a broker to come back (so they
/// never hold up a copy that can be made, whatever their count of copies). Within an order, log order. At least one is driven
/// whatever its size.
pub(super) fn repairs_to_drive(repairs: &[Tracked], min_insync: usize) -> Vec<usize> {
    let urgency = |t: &Tracked| {
        if t.seg.copy_under_way() {
            0
        } else if t.seg.is_closed_short() {
            // No copy can be made now (checked first: with min_insync = R these are short of
            // it too, and must not crowd out copies that can be made).
            3
        } else if t.seg.in_sync() < min_insync {
            1
        } else {
            2
        }
    };
    let mut order: Vec<usize> = (0..repairs.len()).collect();
    order.sort_by_key(|&i| urgency(&repairs[i]));
    let mut chosen = Vec::new();
    let mut bytes = 0u64;
    for i in order {
        bytes += u64::from(repairs[i].seg.written());
        if chosen.len() == REPAIRS_AT_ONCE_MAX
            || (!chosen.is_empty() && bytes > REPAIR_BYTES_AT_ONCE_MAX)
        {
            break;
        }
        chosen.push(i);
    }
    chosen.sort_unstable();
    chosen
}

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
        self.drop_freed_repairs();
        let chosen = repairs_to_drive(&self.repairs, self.min_insync);
        let repairs = self
            .repairs
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| chosen.binary_search(i).is_ok())
            .map(|(_, t)| t);
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
        if parts.is_none()
            && self.repairs.iter().any(|t| t.seg.id.segment == segment)
            && self.log().oldest_segment().is_none_or(|o| segment < o)
        {
            // A repair whose segment retention freed since this round began: the next round
            // stops it. Failing the write would lose a backup that did nothing wrong.
            return;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::segment::ReplicatedSegment;
    use tailstream_wire::messages::ReplicaId;
    use tailstream_wire::{GroupId, LogId, ReplicaEpoch, StreamId, StreamletId};

    /// A recovered closed segment of `length` bytes with complete copies on `holders`, to be
    /// brought to R = 2 copies (min_insync 1).
    fn repair(segment: u64, length: u32, holders: &[u32]) -> Tracked {
        let id = ReplicaId {
            stream: StreamId(1),
            streamlet: StreamletId(0),
            log: LogId(0),
            group: GroupId(segment / 2),
            segment: SegmentId(segment),
        };
        let holders: Vec<ServerId> = holders.iter().map(|i| ServerId::new(*i, 1)).collect();
        Tracked::new(
            ReplicatedSegment::recovered(id, length, ReplicaEpoch(2), &holders, 2)
                .with_min_insync(1),
        )
    }

    #[test]
    fn small_repairs_go_many_at_once_and_those_short_of_min_insync_first() {
        // Even segments already have one copy; odd ones have none (the recovery waits on them).
        let repairs: Vec<Tracked> = (0..40)
            .map(|s| repair(s, 64 << 10, if s % 2 == 0 { &[7] } else { &[] }))
            .collect();
        let chosen = repairs_to_drive(&repairs, 1);
        assert_eq!(chosen.len(), REPAIRS_AT_ONCE_MAX);
        assert!(chosen.iter().all(|i| i % 2 == 1), "{chosen:?}");
        assert_eq!(chosen[0], 1, "in log order within an urgency");
    }

    #[test]
    fn large_repairs_are_bounded_by_bytes_but_one_always_goes() {
        let repairs: Vec<Tracked> = (0..10).map(|s| repair(s, 8 << 20, &[])).collect();
        assert_eq!(repairs_to_drive(&repairs, 1), vec![0, 1, 2, 3]);
        let huge = vec![repair(0, 64 << 20, &[]), repair(1, 64 << 20, &[])];
        assert_eq!(repairs_to_drive(&huge, 1), vec![0]);
        assert!(repairs_to_drive(&[], 1).is_empty());
    }

    #[test]
    fn copies_that_cannot_be_made_never_crowd_out_those_that_can() {
        // min_insync = R = 2: segments with one copy and no broker for the second are short
        // of min_insync too, yet nothing can be done for them now.
        let mut repairs: Vec<Tracked> = (0..30).map(|s| repair(s, 64 << 10, &[7])).collect();
        for tracked in &mut repairs[..20] {
            for action in tracked.seg.next_actions(4) {
                if let Action::NeedBackup { slot, .. } = action {
                    tracked.seg.unavailable(slot);
                }
            }
            assert!(tracked.seg.is_closed_short());
        }
        let chosen = repairs_to_drive(&repairs, 2);
        assert_eq!(chosen.len(), REPAIRS_AT_ONCE_MAX);
        assert!((20..30).all(|i| chosen.contains(&i)), "{chosen:?}");
    }

    #[test]
    fn a_copy_under_way_keeps_its_turn_over_more_urgent_ones() {
        let mut repairs: Vec<Tracked> = (0..30).map(|s| repair(s, 64 << 10, &[])).collect();
        // The last segment, now with one copy and its second being opened: it holds a buffer.
        repairs[29] = repair(29, 64 << 10, &[7]);
        let slot = repairs[29]
            .seg
            .next_actions(4)
            .into_iter()
            .find_map(|a| match a {
                Action::NeedBackup { slot, .. } => Some(slot),
                _ => None,
            })
            .expect("a second copy to make");
        assert!(repairs[29].seg.assign(slot, ServerId::new(8, 1)).is_some());
        assert!(repairs[29].seg.copy_under_way());
        let chosen = repairs_to_drive(&repairs, 1);
        assert_eq!(chosen.len(), REPAIRS_AT_ONCE_MAX);
        assert!(chosen.contains(&29), "{chosen:?}");
    }
}
