//! Moving streamlets through a rebuild: handed to a new owner under a new epoch, served again
//! when the rebuild is done, or marked lost. Each move takes many streamlets at once, because
//! one broker's crash can leave tens of thousands of them among thousands of streams: every
//! streamlet is found through one index of the streams by id, and what depends on the whole
//! cluster (the crashes' `recovered` flags) is worked out once per call, not per streamlet.

use super::{Metadata, MetadataError, Placement, StreamRecord};
use std::collections::HashMap;
use std::sync::Arc;
use tailstream_wire::messages::{PlacementState, StreamletAssignment};
use tailstream_wire::{LogId, OwnershipEpoch, ServerId, StreamId, StreamletId};

/// A streamlet, as the coordinator names it.
pub type StreamletKey = (StreamId, StreamletId);

impl Metadata {
    /// Hands each streamlet in recovery (or lost, and now recoverable) to its target under a
    /// new epoch; returns the assignments the rebuilds use, in order. Refuses the whole batch
    /// if any target is not a member or any streamlet is unknown or serving.
    pub fn begin_rebuilds(
        &mut self,
        chosen: &[(StreamletKey, ServerId)],
    ) -> Result<Vec<StreamletAssignment>, MetadataError> {
        for (_, target) in chosen {
            self.check_server(*target)?;
        }
        let mut by_id = streams_by_id_mut(self);
        let mut assignments = Vec::with_capacity(chosen.len());
        for &((stream, streamlet), target) in chosen {
            let record =
                Arc::make_mut(by_id.get_mut(&stream).ok_or_else(|| {
                    MetadataError::InvalidArgument(format!("no stream {stream}"))
                })?);
            let placement = record
                .placements
                .get_mut(streamlet.0 as usize)
                .ok_or_else(|| no_streamlet(stream, streamlet))?;
            if placement.state == PlacementState::Serving {
                return Err(MetadataError::InvalidArgument(format!(
                    "{stream}/{streamlet} is serving"
                )));
            }
            placement.owner = target;
            placement.epoch = placement
                .epoch
                .next()
                .ok_or(MetadataError::Exhausted("the streamlet's epoch"))?;
            placement.state = PlacementState::Recovering;
            placement.detail = format!("being rebuilt on {target}");
            assignments.push(
                record
                    .assignment(streamlet)
                    .ok_or_else(|| no_streamlet(stream, streamlet))?,
            );
        }
        if !chosen.is_empty() {
            self.version += 1;
        }
        Ok(assignments)
    }

    /// One streamlet's `begin_rebuilds`.
    pub fn begin_rebuild(
        &mut self,
        stream: StreamId,
        streamlet: StreamletId,
        target: ServerId,
    ) -> Result<StreamletAssignment, MetadataError> {
        self.begin_rebuilds(&[((stream, streamlet), target)])?
            .pop()
            .ok_or_else(|| no_streamlet(stream, streamlet))
    }

    /// The rebuilds at these epochs finished: each streamlet serves again, unless it moved
    /// since, its stream is gone, or its new owner was declared crashed meanwhile (then it is
    /// an orphan again). Says, per streamlet in order, whether it serves now.
    pub fn finish_rebuilds(&mut self, finished: &[(StreamletKey, OwnershipEpoch)]) -> Vec<bool> {
        let serves: Vec<bool> = {
            let by_id = self.streams_by_id();
            finished
                .iter()
                .map(|((stream, streamlet), epoch)| {
                    by_id
                        .get(stream)
                        .and_then(|s| s.placements.get(streamlet.0 as usize))
                        .is_some_and(|p| {
                            p.epoch == *epoch
                                && p.state == PlacementState::Recovering
                                && self.check_server(p.owner).is_ok()
                        })
                })
                .collect()
        };
        let mut by_id = streams_by_id_mut(self);
        for (((stream, streamlet), _), serves) in finished.iter().zip(&serves) {
            if !serves {
                continue;
            }
            let placement = by_id
                .get_mut(stream)
                .and_then(|s| Arc::make_mut(s).placements.get_mut(streamlet.0 as usize));
            if let Some(placement) = placement {
                placement.state = PlacementState::Serving;
                placement.detail.clear();
            }
        }
        if serves.contains(&true) {
            self.version += 1;
            self.update_crashes();
        }
        serves
    }

    /// One streamlet's `finish_rebuilds`; unknown streamlets are refused.
    pub fn finish_rebuild(
        &mut self,
        stream: StreamId,
        streamlet: StreamletId,
        epoch: OwnershipEpoch,
    ) -> Result<bool, MetadataError> {
        self.stream_by_id(stream)
            .and_then(|s| s.placements.get(streamlet.0 as usize))
            .ok_or_else(|| no_streamlet(stream, streamlet))?;
        Ok(self.finish_rebuilds(&[((stream, streamlet), epoch)]) == [true])
    }

    /// No live backup can supply what these streamlets need: none is served until one can.
    /// A streamlet that serves, is unknown, or is already lost for the same reason is left
    /// alone.
    pub fn mark_lost_all(&mut self, lost: &[(StreamletKey, String)]) {
        let mut by_id = streams_by_id_mut(self);
        let mut changed = false;
        for ((stream, streamlet), detail) in lost {
            // Serving, or already lost for the same reason: nothing to change (and no version
            // to bump, which would send every broker its full assignment).
            let Some(placement) = placement_to_change(&mut by_id, *stream, *streamlet, |p| {
                p.state != PlacementState::Serving
                    && (p.state != PlacementState::Lost || p.detail != *detail)
            }) else {
                continue;
            };
            placement.state = PlacementState::Lost;
            placement.detail.clone_from(detail);
            changed = true;
        }
        if changed {
            self.version += 1;
            self.update_crashes();
        }
    }

    /// One streamlet's `mark_lost_all`; unknown streamlets are refused.
    pub fn mark_lost(
        &mut self,
        stream: StreamId,
        streamlet: StreamletId,
        detail: String,
    ) -> Result<(), MetadataError> {
        self.stream_by_id(stream)
            .and_then(|s| s.placements.get(streamlet.0 as usize))
            .ok_or_else(|| no_streamlet(stream, streamlet))?;
        self.mark_lost_all(&[((stream, streamlet), detail)]);
        Ok(())
    }

    /// Forgets the open segments of each streamlet's `logs` its rebuild proved empty: their
    /// owner is fenced, so they stay empty, and a later recovery need not prove it again
    /// (their empty copies may be gone by then).
    pub fn forget_open_segments(&mut self, proven_empty: &[(StreamletKey, Vec<LogId>)]) {
        let mut by_id = streams_by_id_mut(self);
        for ((stream, streamlet), logs) in proven_empty {
            let binds = |kept: &super::KeptSegments| kept.open_past_head().is_some();
            let Some(placement) = placement_to_change(&mut by_id, *stream, *streamlet, |p| {
                logs.iter()
                    .any(|log| p.log_bounds.get(&log.0).is_some_and(binds))
            }) else {
                continue;
            };
            for log in logs {
                if let Some(kept) = placement.log_bounds.get_mut(&log.0) {
                    kept.open = kept.open.filter(|o| o.segment < kept.head);
                }
            }
        }
    }
}

/// Every stream by id, to change (one walk, then each lookup is a hash). A stream is copied
/// (`Arc::make_mut`) only where a move really changes it.
fn streams_by_id_mut(metadata: &mut Metadata) -> HashMap<StreamId, &mut Arc<StreamRecord>> {
    metadata.streams.values_mut().map(|s| (s.id, s)).collect()
}

/// A streamlet's placement, made writable (its stream copied if shared) only when `changes`
/// says the move alters it; `None` for an unknown streamlet or one left as it is.
fn placement_to_change<'a>(
    by_id: &'a mut HashMap<StreamId, &mut Arc<StreamRecord>>,
    stream: StreamId,
    streamlet: StreamletId,
    changes: impl FnOnce(&Placement) -> bool,
) -> Option<&'a mut Placement> {
    let record = by_id.get_mut(&stream)?;
    if !changes(record.placements.get(streamlet.0 as usize)?) {
        return None;
    }
    Arc::make_mut(record)
        .placements
        .get_mut(streamlet.0 as usize)
}

fn no_streamlet(stream: StreamId, streamlet: StreamletId) -> MetadataError {
    MetadataError::InvalidArgument(format!("no streamlet {stream}/{streamlet}"))
}
