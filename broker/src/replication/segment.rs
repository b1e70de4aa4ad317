//! One segment's replicas on the primary, as a pure state machine (RAMCloud's
//! `ReplicatedSegment`, with Tailwind's epochs): events in, actions out, no I/O.
//!
//! Each of the R slots walks `NeedsBackup → Opening → Open → Closing → Closed`. An open slot
//! gets every written byte in writes of `sent..written` (appends that arrive while writes are
//! in flight go out together in the next one: group commit), at most `writes_max` in flight.
//! The segment is durable up to `committed`: the lowest `acked` among slots that count.
//!
//! A slot whose backup fails goes back to `NeedsBackup` and stops counting. Its replacement is
//! opened `filling` with a new, higher epoch, receives the whole segment, and counts again
//! only once every slot has been told the new epoch (`SetEpoch`), which also clears the
//! replacement's `filling` mark. Recovery trusts only replicas that are not `filling`, and
//! among those the highest epoch: a half-built replica is never taken for a complete one, and
//! a backup that comes back with a replica from before the failure is outvoted.
//!
//! The commit moves only when every slot counts, except slots for which no backup can be had
//! at all (`unavailable`: too few live brokers; the shell says so when its selector finds
//! none), and only while at least `min_insync` slots count: with every broker there, an
//! acknowledged byte is on all R backups; with some gone and none to replace them, on at least
//! `min_insync` (Kafka's `min.insync.replicas`), and the segment says it is under-replicated.
//! Below `min_insync` nothing commits. A slot without a backup never counts: once one can be
//! had it is opened as a replacement (filling, at a higher epoch), so the segment heals by
//! itself. The copies that count always hold every committed byte, and a copy that stopped
//! counting holds a prefix of theirs at a lower or equal epoch, which recovery never prefers.

use std::collections::VecDeque;
use tailstream_wire::messages::ReplicaId;
use tailstream_wire::{ReplicaEpoch, ServerId};

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
    /// No backup could be had for it when one was last looked for: the segment does without
    /// it (see `min_insync`) until one can.
    pub unavailable: bool,
    pub sent: u32,
    pub acked: u32,
    /// Writes in flight, oldest first: their end and whether they completed. `acked` moves
    /// over completed writes from the front only, so a write that completes before an earlier
    /// one (possible in RPC mode) acknowledges nothing until the earlier one does too.
    pub in_flight: VecDeque<(u32, bool)>,
}

impl Slot {
    /// A slot the segment does without for now: no backup can be had for it.
    pub fn is_excused(&self) -> bool {
        self.unavailable && self.state == SlotState::NeedsBackup
    }

    /// Whether the slot uses the replica opened with `key` on `backup`.
    pub fn is_replica(&self, backup: ServerId, key: u64) -> bool {
        self.backup == Some(backup) && self.key == key
    }

    /// Holds every committed byte, and counts (a current, complete copy).
    pub fn is_in_sync(&self) -> bool {
        self.counts
            && matches!(
                self.state,
                SlotState::Open | SlotState::Closing | SlotState::Closed
            )
    }

    fn fresh(replacement: bool) -> Self {
        Self {
            backup: None,
            state: SlotState::NeedsBackup,
            key: 0,
            counts: !replacement,
            replacement,
            unavailable: false,
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
        epoch: ReplicaEpoch,
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
        epoch: ReplicaEpoch,
    },
}

#[derive(Clone, Debug)]
pub struct ReplicatedSegment {
    pub id: ReplicaId,
    pub capacity: u32,
    written: u32,
    sealed: bool,
    epoch: ReplicaEpoch,
    slots: Vec<Slot>,
    committed: u32,
    /// Copies that must count for the commit to move when some slots have no backup.
    min_insync: usize,
    /// A `SetEpoch` round in progress: how many answers are still missing.
    epoch_round: Option<usize>,
    /// A replica that held bytes was lost: until a replacement (at a higher epoch) takes its
    /// place, or the epoch of the copies that still count is raised, that copy is a possible
    /// stale prefix at the current epoch.
    stale_copy: bool,
    /// The epoch was raised past a stale copy whose slot no backup can replace: nothing
    /// commits until the copies that count are set to it.
    raise_pending: bool,
}

impl ReplicatedSegment {
    /// A segment about to be written, replicated `replicas` times.
    pub fn new(id: ReplicaId, capacity: u32, replicas: usize) -> Self {
        Self {
            id,
            capacity,
            written: 0,
            sealed: false,
            epoch: ReplicaEpoch(1),
            slots: (0..replicas).map(|_| Slot::fresh(false)).collect(),
            committed: 0,
            min_insync: replicas,
            epoch_round: None,
            stale_copy: false,
            raise_pending: false,
        }
    }

    /// The same, committing with as few as `min_insync` counted copies while no backup can be
    /// had for the others (at least one, at most every slot).
    pub fn with_min_insync(mut self, min_insync: usize) -> Self {
        self.min_insync = min_insync.clamp(1, self.slots.len().max(1));
        self
    }

    /// How many copies count now (current and complete).
    pub fn in_sync(&self) -> usize {
        self.slots.iter().filter(|s| s.is_in_sync()).count()
    }

    /// Whether a copy is being made (some replica is being opened, written or closed): it
    /// holds a buffer on its backup until it closes.
    pub fn copy_under_way(&self) -> bool {
        self.slots.iter().any(|s| {
            matches!(
                s.state,
                SlotState::Opening | SlotState::Open | SlotState::Closing
            )
        })
    }

    /// Whether the commit can move at all: enough slots have (or can get) a backup.
    pub fn can_reach_min_insync(&self) -> bool {
        self.slots.iter().filter(|s| !s.is_excused()).count() >= self.min_insync
    }

    /// Sealed, every byte committed and every copy that has a backup closed and counting,
    /// but some slot has no backup to be had: complete on fewer than R backups, waiting for
    /// one to come back (a repair, from then on).
    pub fn is_closed_short(&self) -> bool {
        self.sealed
            && self.epoch_round.is_none()
            && !self.raise_pending
            && self.committed == self.written
            && self.slots.iter().any(Slot::is_excused)
            && self
                .slots
                .iter()
                .all(|s| s.is_excused() || (s.state == SlotState::Closed && s.counts))
    }

    /// A closed segment of `length` bytes whose replicas are on `backups` (for re-replication
    /// after one of them failed).
    pub fn closed(id: ReplicaId, length: u32, epoch: ReplicaEpoch, backups: &[ServerId]) -> Self {
        let slots: Vec<Slot> = backups
            .iter()
            .map(|backup| Slot {
                backup: Some(*backup),
                state: SlotState::Closed,
                key: 0,
                counts: true,
                replacement: false,
                unavailable: false,
                sent: length,
                acked: length,
                in_flight: VecDeque::new(),
            })
            .collect();
        let min_insync = slots.len();
        Self {
            id,
            capacity: length,
            written: length,
            sealed: true,
            epoch,
            slots,
            committed: length,
            min_insync,
            epoch_round: None,
            stale_copy: false,
            raise_pending: false,
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

    pub fn epoch(&self) -> ReplicaEpoch {
        self.epoch
    }

    /// A segment rebuilt by recovery: `length` bytes, already closed on `holders` at `epoch`
    /// (the copies recovery adopted), with `replicas - holders` copies still to make, as
    /// replacements (filling, then counted at a higher epoch once complete).
    pub fn recovered(
        id: ReplicaId,
        length: u32,
        epoch: ReplicaEpoch,
        holders: &[ServerId],
        replicas: usize,
    ) -> Self {
        let mut seg = Self::closed(id, length, epoch, holders);
        while seg.slots.len() < replicas {
            seg.slots.push(Slot::fresh(true));
        }
        seg.min_insync = seg.slots.len();
        seg
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Whether the segment's replica epoch is settled: every slot that is not excused has an
    /// open (or closed) replica that counts, and no epoch change is under way. Only then is
    /// `(segment, epoch)` worth saving as a log's open segment: a copy at that epoch holds
    /// every committed byte, so recovery can take it (or prove the segment empty with it).
    pub fn epoch_settled(&self) -> bool {
        self.epoch_round.is_none()
            && !self.raise_pending
            && !self.stale_copy
            && self.slots.iter().any(|s| !s.is_excused())
            && self.slots.iter().all(|s| {
                s.is_excused()
                    || (s.counts
                        && matches!(
                            s.state,
                            SlotState::Open | SlotState::Closing | SlotState::Closed
                        ))
            })
    }

    /// Whether every copy recovery could find of this segment holds everything it commits:
    /// the epoch is settled at the first one (no copy was ever replaced, so no copy is stale)
    /// and no slot is excused (all R copies count). Recovery then finds the segment, whole,
    /// on any one backup that holds it, without the coordinator having saved anything of it.
    pub fn found_whole_by_recovery(&self) -> bool {
        self.epoch == ReplicaEpoch(1)
            && self.epoch_settled()
            && self.slots.iter().all(|s| !s.is_excused())
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
        s.unavailable = false;
        if s.replacement {
            // A replacement gets a new epoch, higher than any replica it replaces.
            self.epoch = self.epoch.saturating_next();
            self.stale_copy = false;
        }
        let filling = s.replacement;
        Some(Action::Open {
            slot,
            backup,
            epoch: self.epoch,
            filling,
        })
    }

    /// The replica `slot` is opening on `backup` was opened with `key` (an answer for a
    /// replica the slot gave up meanwhile, on another backup, is ignored).
    pub fn opened(&mut self, slot: usize, backup: ServerId, key: u64) {
        if let Some(s) = self
            .slots
            .get_mut(slot)
            .filter(|s| s.state == SlotState::Opening && s.backup == Some(backup))
        {
            s.state = SlotState::Open;
            s.key = key;
            s.sent = 0;
            s.acked = 0;
            s.in_flight.clear();
        }
    }

    /// A write ending at `end` to the replica `key` on `backup`, in `slot`, completed.
    pub fn write_done(&mut self, slot: usize, backup: ServerId, key: u64, end: u32) {
        if let Some(s) = self
            .slots
            .get_mut(slot)
            .filter(|s| s.state == SlotState::Open && s.is_replica(backup, key))
        {
            // A completion from a replica this slot no longer uses (lost, then replaced,
            // maybe on the same backup) never counts for the one it uses now, even at an end
            // that one's writes have too: it is told apart by backup and key.
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

    /// The replica `key` on `backup`, in `slot`, was closed (flushed by its backup).
    pub fn closed_ok(&mut self, slot: usize, backup: ServerId, key: u64) {
        if let Some(s) = self
            .slots
            .get_mut(slot)
            .filter(|s| s.state == SlotState::Closing && s.is_replica(backup, key))
        {
            s.state = SlotState::Closed;
        }
    }

    /// No backup can be had for `slot` now (every live broker other than the primary holds a
    /// copy already, or there is none): the segment does without it. It stops counting for
    /// good: once a backup can be had, it is opened as a replacement.
    pub fn unavailable(&mut self, slot: usize) {
        if let Some(s) = self
            .slots
            .get_mut(slot)
            .filter(|s| s.state == SlotState::NeedsBackup)
        {
            *s = Slot {
                unavailable: true,
                ..Slot::fresh(true)
            };
            if self.stale_copy {
                // The segment goes on without the lost copy: the copies that count move to a
                // higher epoch first, so the lost one (maybe a prefix, maybe empty) is never
                // taken by recovery for the segment's current end.
                self.stale_copy = false;
                self.epoch = self.epoch.saturating_next();
                self.raise_pending = true;
            }
        }
        self.advance_commit();
    }

    /// The replica in `slot` is lost (write, open, close or set-epoch failure): find another.
    pub fn failed(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            // Its replica may live on (the backup may only be out of reach).
            self.stale_copy |= s.backup.is_some();
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
    pub fn epoch_set(&mut self, epoch: ReplicaEpoch) {
        if epoch != self.epoch {
            return;
        }
        let Some(waiting) = self.epoch_round.as_mut() else {
            return;
        };
        *waiting = waiting.saturating_sub(1);
        if *waiting == 0 {
            self.epoch_round = None;
            self.raise_pending = false;
            // The round went to every slot with a backup; one without stays a replacement.
            for s in self.slots.iter_mut().filter(|s| !s.is_excused()) {
                s.replacement = false;
                s.counts = true;
            }
            self.advance_commit();
        }
    }

    /// Moves the commit to the lowest `acked` of the counting slots, when every slot counts
    /// but those with no backup to be had, and at least `min_insync` do.
    fn advance_commit(&mut self) {
        let waiting_for_a_copy =
            self.raise_pending || self.slots.iter().any(|s| !s.counts && !s.is_excused());
        let counting = self.slots.iter().filter(|s| s.counts).count();
        if waiting_for_a_copy || counting < self.min_insync.max(1) {
            return;
        }
        let lowest = self
            .slots
            .iter()
            .filter(|s| s.counts)
            .map(|s| s.acked)
            .min()
            .unwrap_or(self.written);
        if lowest > self.written {
            // No replica can hold bytes this primary never wrote: counting such an answer
            // would commit (acknowledge) what is in no log. Refused, counted, logged.
            let _ = tailstream_storage::StorageError::invariant(
                "a replica acknowledged more of a segment than its primary wrote",
            );
            return;
        }
        self.committed = self.committed.max(lowest);
    }

    /// Replacements that hold everything committed (and, once sealed, everything written).
    fn replacements_caught_up(&self) -> bool {
        let target = if self.sealed {
            self.written
        } else {
            self.committed
        };
        self.slots.iter().any(|s| s.replacement && !s.is_excused())
            && self.slots.iter().all(|s| match s.state {
                _ if s.is_excused() => true,
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
        let raise = self.raise_pending
            && self.slots.iter().all(|s| {
                s.is_excused()
                    || matches!(
                        s.state,
                        SlotState::Open | SlotState::Closing | SlotState::Closed
                    )
            });
        if self.epoch_round.is_none() && (self.replacements_caught_up() || raise) {
            // Every slot that is not excused has a backup (caught up means open or closed).
            let round: Vec<Action> = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(slot, s)| {
                    s.backup.map(|backup| Action::SetEpoch {
                        slot,
                        backup,
                        epoch: self.epoch,
                    })
                })
                .collect();
            self.epoch_round = Some(round.len());
            actions.extend(round);
        }
        actions
    }
}

#[cfg(test)]
#[path = "segment_tests.rs"]
mod tests;
