//! One segment's replicas on the primary, as a pure state machine (RAMCloud's
//! `ReplicatedSegment`, with Tailwind's epochs): events in, actions out, no I/O.
//!
//! Each of the R slots walks `NeedsBackup → Opening → Open → Closing → Closed`. An open slot
//! gets every written byte in writes of `sent..written` (appends that arrive while writes are
//! in flight go out together in the next one: group commit), at most `writes_max` in flight.
//! The segment is durable up to `committed`: the lowest `acked` among slots that count, and
//! it only moves when *all* R slots count, so an acknowledged byte is on every backup.
//!
//! A slot whose backup fails goes back to `NeedsBackup` and stops counting. Its replacement is
//! opened `filling` with a new, higher epoch, receives the whole segment, and counts again
//! only once every slot has been told the new epoch (`SetEpoch`), which also clears the
//! replacement's `filling` mark. Recovery trusts only replicas that are not `filling`, and
//! among those the highest epoch: a half-built replica is never taken for a complete one, and
//! a backup that comes back with a replica from before the failure is outvoted.

use std::collections::VecDeque;
use tailstream_wire::ServerId;
use tailstream_wire::messages::ReplicaId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    NeedsBackup,
    Opening,
    Open,
    Closing,
    Closed,
}

#[derive(Clone, Debug)]
pub struct Slot {
    pub backup: Option<ServerId>,
    pub state: SlotState,
    pub key: u64,
    /// Holds everything acknowledged so far: its `acked` bounds the commit point.
    pub counts: bool,
    /// Replaces a lost replica: counts only after the next epoch is set everywhere.
    pub replacement: bool,
    pub sent: u32,
    pub acked: u32,
    /// Writes in flight, oldest first: their end and whether they completed. `acked` moves
    /// over completed writes from the front only, so a write that completes before an earlier
    /// one (possible in RPC mode) acknowledges nothing until the earlier one does too.
    pub in_flight: VecDeque<(u32, bool)>,
}

impl Slot {
    fn fresh(replacement: bool) -> Self {
        Self {
            backup: None,
            state: SlotState::NeedsBackup,
            key: 0,
            counts: !replacement,
            replacement,
            sent: 0,
            acked: 0,
            in_flight: VecDeque::new(),
        }
    }
}

/// What the shell must do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Pick a backup for `slot` that is none of `exclude`, then call `assign`.
    NeedBackup { slot: usize, exclude: Vec<ServerId> },
    Open {
        slot: usize,
        backup: ServerId,
        epoch: u32,
        filling: bool,
    },
    Write {
        slot: usize,
        backup: ServerId,
        key: u64,
        from: u32,
        to: u32,
    },
    Close {
        slot: usize,
        backup: ServerId,
        key: u64,
        length: u32,
    },
    SetEpoch {
        slot: usize,
        backup: ServerId,
        epoch: u32,
    },
}

#[derive(Clone, Debug)]
pub struct ReplicatedSegment {
    pub id: ReplicaId,
    pub capacity: u32,
    written: u32,
    sealed: bool,
    epoch: u32,
    slots: Vec<Slot>,
    committed: u32,
    /// A `SetEpoch` round in progress: how many answers are still missing.
    epoch_round: Option<usize>,
}

impl ReplicatedSegment {
    /// A segment about to be written, replicated `replicas` times.
    pub fn new(id: ReplicaId, capacity: u32, replicas: usize) -> Self {
        Self {
            id,
            capacity,
            written: 0,
            sealed: false,
            epoch: 1,
            slots: (0..replicas).map(|_| Slot::fresh(false)).collect(),
            committed: 0,
            epoch_round: None,
        }
    }

    /// A closed segment of `length` bytes whose replicas are on `backups` (for re-replication
    /// after one of them failed).
    pub fn closed(id: ReplicaId, length: u32, epoch: u32, backups: &[ServerId]) -> Self {
        let slots = backups
            .iter()
            .map(|backup| Slot {
                backup: Some(*backup),
                state: SlotState::Closed,
                key: 0,
                counts: true,
                replacement: false,
                sent: length,
                acked: length,
                in_flight: VecDeque::new(),
            })
            .collect();
        Self {
            id,
            capacity: length,
            written: length,
            sealed: true,
            epoch,
            slots,
            committed: length,
            epoch_round: None,
        }
    }

    pub fn written(&self) -> u32 {
        self.written
    }

    pub fn committed(&self) -> u32 {
        self.committed
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Every byte is on every backup, every replica is closed and current.
    pub fn is_done(&self) -> bool {
        self.sealed
            && self.epoch_round.is_none()
            && self
                .slots
                .iter()
                .all(|s| s.state == SlotState::Closed && s.counts)
    }

    pub fn backups(&self) -> Vec<ServerId> {
        self.slots.iter().filter_map(|s| s.backup).collect()
    }

    /// The log appended: `written` bytes exist now.
    pub fn appended(&mut self, written: u32) {
        self.written = self.written.max(written.min(self.capacity));
    }

    /// The log sealed the segment at `written` bytes.
    pub fn seal(&mut self, written: u32) {
        self.appended(written);
        self.sealed = true;
    }

    /// The backup chosen for a slot that needed one: open it.
    pub fn assign(&mut self, slot: usize, backup: ServerId) -> Option<Action> {
        let s = self.slots.get_mut(slot)?;
        if s.state != SlotState::NeedsBackup {
            return None;
        }
        s.backup = Some(backup);
        s.state = SlotState::Opening;
        if s.replacement {
            // A replacement gets a new epoch, higher than any replica it replaces.
            self.epoch += 1;
        }
        let filling = s.replacement;
        Some(Action::Open {
            slot,
            backup,
            epoch: self.epoch,
            filling,
        })
    }

    pub fn opened(&mut self, slot: usize, key: u64) {
        if let Some(s) = self
            .slots
            .get_mut(slot)
            .filter(|s| s.state == SlotState::Opening)
        {
            s.state = SlotState::Open;
            s.key = key;
            s.sent = 0;
            s.acked = 0;
            s.in_flight.clear();
        }
    }

    /// A write to `slot` ending at `end` completed.
    pub fn write_done(&mut self, slot: usize, end: u32) {
        if let Some(s) = self
            .slots
            .get_mut(slot)
            .filter(|s| s.state == SlotState::Open)
        {
            // An end no write in flight has is a stale completion from a replica this slot no
            // longer uses: ignored.
            if let Some(write) = s.in_flight.iter_mut().find(|(e, done)| *e == end && !done) {
                write.1 = true;
            }
            while let Some(&(end, true)) = s.in_flight.front() {
                s.in_flight.pop_front();
                s.acked = end;
            }
        }
        self.advance_commit();
    }

    pub fn closed_ok(&mut self, slot: usize) {
        if let Some(s) = self
            .slots
            .get_mut(slot)
            .filter(|s| s.state == SlotState::Closing)
        {
            s.state = SlotState::Closed;
        }
    }

    /// The replica in `slot` is lost (write, open, close or set-epoch failure): find another.
    pub fn failed(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Slot::fresh(true);
            // A round that included the lost replica cannot complete; the replacement will
            // start a new one.
            self.epoch_round = None;
        }
    }

    /// Fails every slot on `backup`; returns whether any was.
    pub fn backup_lost(&mut self, backup: ServerId) -> bool {
        let lost: Vec<usize> = (0..self.slots.len())
            .filter(|i| self.slots[*i].backup == Some(backup))
            .collect();
        for slot in &lost {
            self.failed(*slot);
        }
        !lost.is_empty()
    }

    /// One `SetEpoch` answer of the current round arrived.
    pub fn epoch_set(&mut self, epoch: u32) {
        if epoch != self.epoch {
            return;
        }
        let Some(waiting) = self.epoch_round.as_mut() else {
            return;
        };
        *waiting = waiting.saturating_sub(1);
        if *waiting == 0 {
            self.epoch_round = None;
            for s in &mut self.slots {
                s.replacement = false;
                s.counts = true;
            }
            self.advance_commit();
        }
    }

    fn advance_commit(&mut self) {
        if self.slots.iter().all(|s| s.counts) {
            let lowest = self
                .slots
                .iter()
                .map(|s| s.acked)
                .min()
                .unwrap_or(self.written);
            self.committed = self.committed.max(lowest);
        }
    }

    /// Replacements that hold everything committed (and, once sealed, everything written).
    fn replacements_caught_up(&self) -> bool {
        let target = if self.sealed {
            self.written
        } else {
            self.committed
        };
        self.slots.iter().any(|s| s.replacement)
            && self.slots.iter().all(|s| match s.state {
                SlotState::Open | SlotState::Closing | SlotState::Closed => {
                    !s.replacement || s.acked >= target
                }
                SlotState::NeedsBackup | SlotState::Opening => false,
            })
    }

    /// The actions the current state calls for. Marks writes, closes and epoch rounds as
    /// issued, so calling it again does not repeat them.
    pub fn next_actions(&mut self, writes_max: usize) -> Vec<Action> {
        let mut actions = Vec::new();
        let backups: Vec<Option<ServerId>> = self.slots.iter().map(|s| s.backup).collect();
        for (slot, s) in self.slots.iter_mut().enumerate() {
            match s.state {
                SlotState::NeedsBackup => {
                    let exclude = backups
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != slot)
                        .filter_map(|(_, b)| *b)
                        .collect();
                    actions.push(Action::NeedBackup { slot, exclude });
                }
                SlotState::Open => {
                    let Some(backup) = s.backup else { continue };
                    if s.in_flight.len() < writes_max.max(1) && s.sent < self.written {
                        actions.push(Action::Write {
                            slot,
                            backup,
                            key: s.key,
                            from: s.sent,
                            to: self.written,
                        });
                        s.in_flight.push_back((self.written, false));
                        s.sent = self.written;
                    }
                    if self.sealed && s.acked == self.written && s.in_flight.is_empty() {
                        actions.push(Action::Close {
                            slot,
                            backup,
                            key: s.key,
                            length: self.written,
                        });
                        s.state = SlotState::Closing;
                    }
                }
                SlotState::Opening | SlotState::Closing | SlotState::Closed => {}
            }
        }
        if self.epoch_round.is_none() && self.replacements_caught_up() {
            self.epoch_round = Some(self.slots.len());
            for (slot, s) in self.slots.iter().enumerate() {
                if let Some(backup) = s.backup {
                    actions.push(Action::SetEpoch {
                        slot,
                        backup,
                        epoch: self.epoch,
                    });
                }
            }
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::{GroupId, LogId, SegmentId, StreamId, StreamletId};

    fn id() -> ReplicaId {
        ReplicaId {
            stream: StreamId(1),
            streamlet: StreamletId(0),
            log: LogId(0),
            group: GroupId(0),
            segment: SegmentId(3),
        }
    }

    fn server(index: u32) -> ServerId {
        ServerId::new(index, 1)
    }

    /// Assigns backups 1..=R and opens every slot.
    fn opened(replicas: usize) -> ReplicatedSegment {
        let mut seg = ReplicatedSegment::new(id(), 1 << 20, replicas);
        for action in seg.next_actions(4) {
            let Action::NeedBackup { slot, .. } = action else {
                panic!("{action:?}")
            };
            let open = seg.assign(slot, server(slot as u32 + 1)).unwrap();
            assert!(matches!(
                open,
                Action::Open {
                    epoch: 1,
                    filling: false,
                    ..
                }
            ));
            seg.opened(slot, 100 + slot as u64);
        }
        seg
    }

    fn writes(actions: &[Action]) -> Vec<(usize, u32, u32)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Write { slot, from, to, .. } => Some((*slot, *from, *to)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn appends_during_a_write_are_coalesced_and_commit_needs_every_replica() {
        let mut seg = opened(3);
        seg.appended(100);
        assert_eq!(
            writes(&seg.next_actions(1)),
            vec![(0, 0, 100), (1, 0, 100), (2, 0, 100)]
        );
        // Three appends while the first write is in flight: one write carries them all.
        seg.appended(150);
        seg.appended(220);
        seg.appended(300);
        assert!(
            writes(&seg.next_actions(1)).is_empty(),
            "one write in flight per replica"
        );
        seg.write_done(0, 100);
        seg.write_done(1, 100);
        assert_eq!(seg.committed(), 0, "the third replica has not acknowledged");
        seg.write_done(2, 100);
        assert_eq!(seg.committed(), 100);
        assert_eq!(
            writes(&seg.next_actions(1)),
            vec![(0, 100, 300), (1, 100, 300), (2, 100, 300)]
        );
    }

    #[test]
    fn a_sealed_segment_closes_each_replica_once_it_has_everything() {
        let mut seg = opened(2);
        seg.appended(64);
        seg.next_actions(4);
        seg.seal(64);
        seg.write_done(0, 64);
        let actions = seg.next_actions(4);
        assert_eq!(
            actions,
            vec![Action::Close {
                slot: 0,
                backup: server(1),
                key: 100,
                length: 64
            }]
        );
        seg.write_done(1, 64);
        seg.closed_ok(0);
        let actions = seg.next_actions(4);
        assert_eq!(
            actions,
            vec![Action::Close {
                slot: 1,
                backup: server(2),
                key: 101,
                length: 64
            }]
        );
        assert!(!seg.is_done());
        seg.closed_ok(1);
        assert!(seg.is_done() && seg.next_actions(4).is_empty());
    }

    #[test]
    fn a_lost_replica_freezes_the_commit_until_its_filled_replacement_is_current() {
        let mut seg = opened(3);
        seg.appended(100);
        seg.next_actions(4);
        for slot in 0..3 {
            seg.write_done(slot, 100);
        }
        assert_eq!(seg.committed(), 100);
        seg.appended(200);
        seg.next_actions(4);
        seg.write_done(0, 200);
        seg.write_done(1, 200);
        // Backup 3 dies before acknowledging 200.
        assert!(seg.backup_lost(server(3)));
        seg.write_done(2, 200);
        assert_eq!(seg.committed(), 100, "nothing commits without all R");
        let actions = seg.next_actions(4);
        let exclude = match &actions[..] {
            [Action::NeedBackup { slot: 2, exclude }] => exclude.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(exclude, vec![server(1), server(2)]);
        let open = seg.assign(2, server(4)).unwrap();
        assert_eq!(
            open,
            Action::Open {
                slot: 2,
                backup: server(4),
                epoch: 2,
                filling: true
            }
        );
        seg.opened(2, 999);
        // The replacement is filled from byte 0.
        assert_eq!(writes(&seg.next_actions(4)), vec![(2, 0, 200)]);
        seg.write_done(2, 200);
        assert_eq!(seg.committed(), 100, "a filling replica does not count yet");
        let rounds: Vec<_> = seg
            .next_actions(4)
            .into_iter()
            .filter(|a| matches!(a, Action::SetEpoch { .. }))
            .collect();
        assert_eq!(rounds.len(), 3);
        assert!(
            rounds
                .iter()
                .all(|a| matches!(a, Action::SetEpoch { epoch: 2, .. }))
        );
        seg.epoch_set(2);
        seg.epoch_set(2);
        assert_eq!(seg.committed(), 100);
        seg.epoch_set(2);
        assert_eq!(
            seg.committed(),
            200,
            "current at epoch 2 on every replica: commits resume"
        );
        assert!(seg.next_actions(4).is_empty());
    }

    #[test]
    fn a_closed_segment_on_a_lost_backup_is_copied_to_a_new_one_and_closed() {
        let mut seg = ReplicatedSegment::closed(id(), 500, 1, &[server(1), server(2), server(3)]);
        assert!(seg.is_done());
        seg.backup_lost(server(2));
        assert!(!seg.is_done());
        let actions = seg.next_actions(4);
        assert!(matches!(&actions[..], [Action::NeedBackup { slot: 1, .. }]));
        seg.assign(1, server(5));
        seg.opened(1, 7);
        assert_eq!(writes(&seg.next_actions(4)), vec![(1, 0, 500)]);
        seg.write_done(1, 500);
        let actions = seg.next_actions(4);
        assert!(actions.contains(&Action::Close {
            slot: 1,
            backup: server(5),
            key: 7,
            length: 500
        }));
        assert_eq!(
            actions
                .iter()
                .filter(|a| matches!(a, Action::SetEpoch { epoch: 2, .. }))
                .count(),
            3
        );
        seg.closed_ok(1);
        for _ in 0..3 {
            seg.epoch_set(2);
        }
        assert!(seg.is_done());
    }

    #[test]
    fn an_early_completion_acknowledges_nothing_until_the_earlier_write_completes() {
        let mut seg = opened(1);
        seg.appended(10);
        seg.next_actions(4);
        seg.appended(30);
        seg.next_actions(4);
        seg.write_done(0, 30);
        assert_eq!(seg.committed(), 0);
        seg.write_done(0, 10);
        assert_eq!(seg.committed(), 30);
    }

    #[test]
    fn stale_completions_and_events_for_other_states_are_ignored() {
        let mut seg = opened(1);
        seg.appended(10);
        seg.next_actions(4);
        seg.write_done(0, 99);
        assert_eq!(seg.committed(), 0);
        seg.closed_ok(0);
        seg.epoch_set(7);
        seg.write_done(0, 10);
        assert_eq!(seg.committed(), 10);
    }
}
