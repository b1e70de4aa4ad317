//! A crashed broker's streamlets through recovery: each one is handed to a new owner under a
//! new epoch while it is rebuilt, then serves again (or is lost, explicitly). One record per
//! crash keeps what happened and how long each phase took, and survives a coordinator restart,
//! so an unfinished recovery is resumed. The moves themselves are in `rebuilds`.

use super::{Metadata, RECOVERY_RECORDS_MAX};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use tailstream_wire::messages::PlacementState;
use tailstream_wire::{ServerId, StreamId, StreamletId};

/// Where a recovery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecoveryPhase {
    /// Asking the backups what they hold of the crashed broker.
    Locating,
    /// New owners are reading and replaying the replicas.
    Rebuilding,
    /// Every streamlet serves again, or is explicitly lost.
    Done,
}

/// One crash and its recovery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryRecord {
    pub id: u64,
    pub crashed: ServerId,
    pub phase: RecoveryPhase,
    pub streamlets: Vec<(StreamId, StreamletId)>,
    /// Wall-clock times (Unix ms) of the phase boundaries, for the admin page and metrics.
    pub declared_at_ms: u64,
    /// From the first report of the broker's silence to the declaration.
    pub detect_ms: u64,
    pub locate_ms: Option<u64>,
    pub replay_ms: Option<u64>,
    pub rereplicate_ms: Option<u64>,
    /// After the rebuild, waiting for the crashed broker's lease to run out (so that, paused
    /// rather than dead, it cannot serve anything that moved).
    #[serde(default)]
    pub lease_wait_ms: Option<u64>,
    pub total_ms: Option<u64>,
    /// Bytes read from backups and segments adopted / copied, over all streamlets.
    pub bytes: u64,
    pub segments_adopted: u64,
    pub segments_copied: u64,
    /// Streamlets that could not be rebuilt, and why.
    pub lost: Vec<String>,
}

impl Metadata {
    /// Records a recovery of `crashed`'s `streamlets`, declared at `now_ms` after `detect_ms`
    /// of suspicion. Returns its id.
    pub fn open_recovery(
        &mut self,
        crashed: ServerId,
        streamlets: Vec<(StreamId, StreamletId)>,
        now_ms: u64,
        detect_ms: u64,
    ) -> u64 {
        let id = self.next_recovery_id;
        self.next_recovery_id += 1;
        let phase = if streamlets.is_empty() {
            RecoveryPhase::Done
        } else {
            RecoveryPhase::Locating
        };
        self.recoveries.push(RecoveryRecord {
            id,
            crashed,
            phase,
            streamlets,
            declared_at_ms: now_ms,
            detect_ms,
            locate_ms: None,
            replay_ms: None,
            rereplicate_ms: None,
            lease_wait_ms: None,
            total_ms: (phase == RecoveryPhase::Done).then_some(0),
            bytes: 0,
            segments_adopted: 0,
            segments_copied: 0,
            lost: Vec::new(),
        });
        while self.recoveries.len() > RECOVERY_RECORDS_MAX {
            match self
                .recoveries
                .iter()
                .position(|r| r.phase == RecoveryPhase::Done)
            {
                Some(done) => {
                    self.recoveries.remove(done);
                }
                None => break,
            }
        }
        self.update_crashes();
        id
    }

    pub fn recovery_mut(&mut self, id: u64) -> Option<&mut RecoveryRecord> {
        self.recoveries.iter_mut().find(|r| r.id == id)
    }

    /// Streamlets waiting for a new owner: recovering, with an owner that is not a member
    /// (crashed, or crashed again while rebuilding).
    pub fn orphans(&self) -> Vec<(StreamId, StreamletId)> {
        let by_id = self.streams_by_id();
        self.unsettled()
            .into_iter()
            .filter(|(stream, streamlet)| {
                by_id
                    .get(stream)
                    .and_then(|s| s.placements.get(streamlet.0 as usize))
                    .is_some_and(|p| {
                        p.state == PlacementState::Lost || self.check_server(p.owner).is_err()
                    })
            })
            .collect()
    }

    /// Every streamlet not serving: recovering (wherever) or lost.
    pub fn unsettled(&self) -> Vec<(StreamId, StreamletId)> {
        let mut unsettled = Vec::new();
        for stream in self.streams.values() {
            for (streamlet, placement) in stream.streamlet_ids() {
                if placement.state != PlacementState::Serving {
                    unsettled.push((stream.id, streamlet));
                }
            }
        }
        unsettled
    }

    /// The recovery that covers `streamlet` (the newest, when several did).
    pub fn recovery_of(
        &mut self,
        stream: StreamId,
        streamlet: StreamletId,
    ) -> Option<&mut RecoveryRecord> {
        self.recoveries
            .iter_mut()
            .rev()
            .find(|r| r.streamlets.contains(&(stream, streamlet)))
    }

    /// For each streamlet some record covers, the index in `recoveries` of the newest one
    /// (what `recovery_of` finds, for many streamlets at the price of one walk).
    pub fn recovery_index(&self) -> HashMap<(StreamId, StreamletId), usize> {
        let mut index = HashMap::new();
        // Records are pushed in order: a later one overrides an earlier one.
        for (at, record) in self.recoveries.iter().enumerate() {
            for key in &record.streamlets {
                index.insert(*key, at);
            }
        }
        index
    }

    /// Closes the records whose streamlets all serve or are lost, with their total time.
    pub fn settle_recoveries(&mut self, now_ms: u64) {
        // Looked up by id once, not by a walk of every stream per streamlet (a crash may
        // leave tens of thousands of streamlets among thousands of streams).
        let by_id = self.streams_by_id();
        let states: Vec<(u64, bool)> = self
            .recoveries
            .iter()
            .filter(|r| r.phase != RecoveryPhase::Done)
            .map(|r| {
                let settled = r.streamlets.iter().all(|(stream, streamlet)| {
                    by_id
                        .get(stream)
                        .and_then(|s| s.placements.get(streamlet.0 as usize))
                        .is_none_or(|p| p.state != PlacementState::Recovering)
                });
                (r.id, settled)
            })
            .collect();
        for (id, settled) in states {
            if let Some(record) = self.recovery_mut(id)
                && settled
            {
                record.phase = RecoveryPhase::Done;
                record.total_ms = Some(now_ms.saturating_sub(record.declared_at_ms));
            }
        }
    }

    /// A crash is recovered (its generation's replicas may be dropped) once no streamlet
    /// anywhere is still recovering or lost: a crashed broker may hold copies it adopted while
    /// rebuilding another crash's streamlet, so only a cluster where everything serves again
    /// needs none of them.
    pub(super) fn update_crashes(&mut self) {
        let settled = self.unsettled().is_empty();
        for crash in &mut self.crashes {
            crash.recovered = settled;
        }
        // Retired crashes are remembered a while, so backups that were away still learn of
        // them; beyond that, the oldest retired ones go.
        const RETIRED_KEPT: usize = 256;
        let retired = self.crashes.iter().filter(|c| c.recovered).count();
        let mut excess = retired.saturating_sub(RETIRED_KEPT);
        self.crashes.retain(|c| {
            if c.recovered && excess > 0 {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
}
