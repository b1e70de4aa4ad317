//! A replicator's answer to lost backups and freed segments: every replica on a lost backup
//! is re-created elsewhere (open segments before their next commit, closed ones in the
//! background), and the replicas of segments retention freed are released. Part of the
//! per-log replicator (see `replicator`).

use super::replicator::{ClosedRecord, Done, Replicator, Tracked, peer_addr, record_of};
use super::segment::ReplicatedSegment;
use std::time::Instant;
use tailstream_wire::messages::ReplicaFreeRequest;
use tailstream_wire::{SegmentId, ServerId};

impl Replicator {
    pub(super) fn quarantine(&self, backup: ServerId) {
        // An incarnation that is no longer a member blames no one: its writes fail because
        // it was fenced.
        let Some(me) = self.me() else { return };
        let mut selector = self.ctx.selector.lock().unwrap_or_else(|p| p.into_inner());
        selector.failed(backup, me, Instant::now());
    }

    /// `backup` is gone: every replica this log has there is re-created elsewhere.
    pub(super) fn backup_lost(&mut self, backup: ServerId) {
        self.quarantine(backup);
        if !self.lost.contains(&backup) {
            self.lost.push(backup);
        }
        let addr = peer_addr(&self.membership.borrow(), backup);
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
                ReplicatedSegment::closed(record.id, record.length, record.epoch, &record.backups)
                    .with_min_insync(self.min_insync);
            seg.backup_lost(backup);
            self.repairs.push(Tracked::new(seg));
        }
    }

    /// Backups the coordinator no longer lists as alive (or that came back as a newer
    /// generation) are lost.
    pub(super) fn check_membership(&mut self) {
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

    /// Moves finished segments to the closed records, finishes repairs, and frees the
    /// replicas of segments retention has freed.
    pub(super) fn retire(&mut self) {
        while self
            .active
            .front()
            .is_some_and(|t| t.seg.is_done() || t.seg.is_closed_short())
        {
            if let Some(tracked) = self.active.pop_front() {
                if tracked.seg.is_done() {
                    self.closed.push_back(record_of(&tracked.seg));
                } else {
                    // Complete on fewer than R backups: it waits for one as a repair, out of
                    // the way of the segments being written.
                    self.repairs.push(tracked);
                }
            }
        }
        let (finished, ongoing): (Vec<Tracked>, Vec<Tracked>) = std::mem::take(&mut self.repairs)
            .into_iter()
            .partition(|t| t.seg.is_done());
        self.repairs = ongoing;
        for tracked in finished {
            self.close_in_order(record_of(&tracked.seg));
        }
        while let Some(front) = self.closed.front() {
            if self.log().contains_segment(front.id.segment) {
                break;
            }
            // Recovery must not look for a freed segment: the coordinator learns the log's
            // new oldest segment before any replica older than it goes.
            let freed_below = self
                .log()
                .oldest_segment()
                .unwrap_or(SegmentId(front.id.segment.0 + 1));
            if !self.oldest_durable(freed_below) {
                break;
            }
            if let Some(record) = self.closed.pop_front() {
                self.free(record);
            }
        }
    }

    /// Stops the repairs of segments retention freed meanwhile (a rebuilt log copies its old
    /// segments while retention goes on): nothing is left to copy from. Their replicas,
    /// complete or half made, are freed as a closed segment's are (once the coordinator saved
    /// the log's new oldest segment). Before, their writes failed with "segment no longer in
    /// memory", which lost the backup and every replica of the log on it, again and again,
    /// until the backups' buffer pools were full.
    pub(super) fn drop_freed_repairs(&mut self) {
        if self.repairs.is_empty() {
            return;
        }
        let oldest = self.log().oldest_segment();
        if !self.repairs.iter().any(|t| is_freed(t, oldest)) {
            return;
        }
        let (gone, kept): (Vec<Tracked>, Vec<Tracked>) = std::mem::take(&mut self.repairs)
            .into_iter()
            .partition(|t| is_freed(t, oldest));
        self.repairs = kept;
        for tracked in gone {
            self.close_in_order(record_of(&tracked.seg));
        }
    }

    /// Adds `record` to the closed records, kept in segment order (they are freed oldest first).
    fn close_in_order(&mut self, record: ClosedRecord) {
        let at = self
            .closed
            .iter()
            .position(|r| r.id.segment > record.id.segment)
            .unwrap_or(self.closed.len());
        self.closed.insert(at, record);
    }

    fn free(&mut self, record: ClosedRecord) {
        let Some(me) = self.me() else { return };
        let membership = self.membership.borrow().clone();
        for backup in record.backups {
            let Some(addr) = peer_addr(&membership, backup) else {
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

/// Whether retention freed `tracked`'s segment, given the log's oldest segment (none: every
/// segment is gone). Retention frees a log's oldest groups first, and segment ids only
/// increase within a log.
fn is_freed(tracked: &Tracked, oldest: Option<SegmentId>) -> bool {
    oldest.is_none_or(|o| tracked.seg.id.segment < o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::messages::ReplicaId;
    use tailstream_wire::{GroupId, LogId, ReplicaEpoch, StreamId, StreamletId};

    fn repair(segment: u64) -> Tracked {
        let id = ReplicaId {
            stream: StreamId(1),
            streamlet: StreamletId(0),
            log: LogId(0),
            group: GroupId(segment),
            segment: SegmentId(segment),
        };
        Tracked::new(ReplicatedSegment::recovered(
            id,
            100,
            ReplicaEpoch(2),
            &[],
            2,
        ))
    }

    /// A 300-cycle chaos run with retention: a rebuilt log's repairs went on after retention
    /// freed their segments, each failed write lost a backup, and the backups' pools filled.
    #[test]
    fn only_segments_below_the_oldest_kept_one_count_as_freed() {
        assert!(is_freed(&repair(3), Some(SegmentId(4))));
        assert!(!is_freed(&repair(4), Some(SegmentId(4))));
        assert!(!is_freed(&repair(9), Some(SegmentId(4))));
        assert!(is_freed(&repair(9), None), "a log with no segment left");
    }
}
