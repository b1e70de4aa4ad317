//! Streams: creation with round-robin placement, descriptions for clients, and each broker's
//! assignment.

use super::{Metadata, MetadataError, Placement, STREAM_NAME_BYTES_MAX, StreamRecord};

/// Deleted stream ids the metadata remembers for backups that have yet to drop their replicas
/// (a backup away for more deletions than this keeps the oldest ones' files).
pub const DELETED_STREAMS_KEPT: usize = 256;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tailstream_config::{STREAMLETS_MAX, validate_stream_config};
use tailstream_wire::messages::{
    AssignStreamletsRequest, BrokerInfo, LogStart, PlacementState, StreamConfig, StreamMetadata,
    StreamletAssignment, StreamletPlacement,
};
use tailstream_wire::{OwnershipEpoch, ServerId, StreamId, StreamletId};

fn validate_name(name: &str) -> Result<(), MetadataError> {
    let ok = !name.is_empty()
        && name.len() <= STREAM_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(MetadataError::InvalidArgument(format!(
            "stream name {name:?} must be 1..={STREAM_NAME_BYTES_MAX} characters of [A-Za-z0-9._-]"
        )))
    }
}

impl Metadata {
    /// The members of `live` streamlets may be placed on (registered, not crashed), sorted,
    /// if they are enough for `replicas`: each segment needs R backups other than its primary.
    fn placeable(&self, live: &[ServerId], replicas: u32) -> Result<Vec<ServerId>, MetadataError> {
        let mut live: Vec<ServerId> = live
            .iter()
            .copied()
            .filter(|id| self.check_server(*id).is_ok())
            .collect();
        live.sort();
        live.dedup();
        if live.is_empty() {
            return Err(MetadataError::NoBrokers);
        }
        if replicas as usize > live.len() - 1 {
            return Err(MetadataError::InvalidArgument(format!(
                "{} replicas need {} live brokers; {} are alive",
                replicas,
                replicas + 1,
                live.len()
            )));
        }
        Ok(live)
    }

    /// Creates a stream, placing its streamlets round-robin over `live` brokers (starting at a
    /// different broker for each stream, so small streams spread out too).
    pub fn create_stream(
        &mut self,
        name: &str,
        streamlets: u32,
        mut config: StreamConfig,
        live: &[ServerId],
    ) -> Result<&StreamRecord, MetadataError> {
        validate_name(name)?;
        // Saved as the value in force, so a later change of the default changes no stream.
        config.min_insync_replicas = config.min_insync();
        if !(1..=STREAMLETS_MAX).contains(&streamlets) {
            return Err(MetadataError::InvalidArgument(format!(
                "streamlets must be in 1..={STREAMLETS_MAX}"
            )));
        }
        validate_stream_config(&config).map_err(MetadataError::InvalidArgument)?;
        if self.streams.contains_key(name) {
            return Err(MetadataError::StreamExists(name.to_string()));
        }
        let live = self.placeable(live, config.replicas)?;
        let id = StreamId(self.next_stream_id);
        self.next_stream_id += 1;
        let start = (id.0 % live.len() as u64) as usize;
        let placements = (0..streamlets as usize)
            .map(|i| Placement {
                owner: live[(start + i) % live.len()],
                epoch: OwnershipEpoch(1),
                state: PlacementState::Serving,
                detail: String::new(),
                log_bounds: BTreeMap::new(),
                log_starts: BTreeMap::new(),
            })
            .collect();
        let record = StreamRecord {
            id,
            name: name.to_string(),
            config,
            placements,
        };
        self.version += 1;
        Ok(self
            .streams
            .entry(Arc::from(name))
            .or_insert(Arc::new(record)))
    }

    /// Grows a stream to `streamlets` streamlets, placing the new ones round-robin over `live`
    /// brokers (continuing where the stream's placement left off); the existing ones stay where
    /// they are. Returns the stream and how many streamlets it had before: the same count
    /// again changes nothing (a retried request), fewer is refused (a streamlet's records
    /// cannot move).
    pub fn add_streamlets(
        &mut self,
        name: &str,
        streamlets: u32,
        live: &[ServerId],
    ) -> Result<(Arc<StreamRecord>, u32), MetadataError> {
        let stream = self
            .streams
            .get(name)
            .ok_or_else(|| MetadataError::UnknownStream(name.to_string()))?;
        let before = u32::try_from(stream.placements.len()).unwrap_or(u32::MAX);
        if streamlets == before {
            return Ok((stream.clone(), before));
        }
        if streamlets < before {
            return Err(MetadataError::InvalidArgument(format!(
                "stream {name:?} has {before} streamlets: a stream never shrinks"
            )));
        }
        if streamlets > STREAMLETS_MAX {
            return Err(MetadataError::InvalidArgument(format!(
                "streamlets must be in 1..={STREAMLETS_MAX}"
            )));
        }
        let live = self.placeable(live, stream.config.replicas)?;
        // Where a creation would have placed streamlet `before` had the stream been this big.
        let start = (stream.id.0 % live.len() as u64) as usize;
        let added = (before as usize..streamlets as usize).map(|i| Placement {
            owner: live[(start + i) % live.len()],
            epoch: OwnershipEpoch(1),
            state: PlacementState::Serving,
            detail: String::new(),
            log_bounds: BTreeMap::new(),
            log_starts: BTreeMap::new(),
        });
        let Some(stream) = self.streams.get_mut(name) else {
            return Err(MetadataError::UnknownStream(name.to_string()));
        };
        Arc::make_mut(stream).placements.extend(added);
        let grown = stream.clone();
        self.version += 1;
        Ok((grown, before))
    }

    /// Sets a stream's retention limits (`None` leaves one as it is; 0 is none), the only
    /// settings that change after creation. Returns the stream as it is now; setting what it
    /// has changes nothing (no new version).
    pub fn alter_retention(
        &mut self,
        name: &str,
        retention_ms: Option<u64>,
        retention_bytes: Option<u64>,
    ) -> Result<Arc<StreamRecord>, MetadataError> {
        let stream = self
            .streams
            .get_mut(name)
            .ok_or_else(|| MetadataError::UnknownStream(name.to_string()))?;
        let config = &stream.config;
        let ms = retention_ms.unwrap_or(config.retention_ms);
        let bytes = retention_bytes.unwrap_or(config.retention_bytes);
        if (ms, bytes) == (config.retention_ms, config.retention_bytes) {
            return Ok(stream.clone());
        }
        let record = Arc::make_mut(stream);
        record.config.retention_ms = ms;
        record.config.retention_bytes = bytes;
        let altered = stream.clone();
        self.version += 1;
        Ok(altered)
    }

    /// Moves the starts of some logs of one streamlet forward (Kafka's DeleteRecords), as
    /// checked by its owner under `epoch`: refused if the stream named is no longer `id`, or
    /// the streamlet is not serving under that epoch any more. A start at or before the one
    /// kept changes nothing. Returns the streamlet's owner and assignment (to be told) and
    /// whether anything changed.
    pub fn delete_records(
        &mut self,
        name: &str,
        id: StreamId,
        streamlet: StreamletId,
        epoch: OwnershipEpoch,
        starts: &[LogStart],
    ) -> Result<(ServerId, Option<StreamletAssignment>), MetadataError> {
        let stream = self
            .streams
            .get_mut(name)
            .filter(|s| s.id == id)
            .ok_or_else(|| MetadataError::UnknownStream(name.to_string()))?;
        let logs = stream.config.logs_per_streamlet;
        let placement = stream.placements.get(streamlet.0 as usize).ok_or_else(|| {
            MetadataError::InvalidArgument(format!("stream {name:?} has no {streamlet}"))
        })?;
        if placement.epoch != epoch || placement.state != PlacementState::Serving {
            return Err(MetadataError::InvalidArgument(format!(
                "{name:?} {streamlet} moved since its offsets were checked (now {} on {}, {:?})",
                placement.epoch, placement.owner, placement.state
            )));
        }
        if let Some(start) = starts.iter().find(|s| s.log.0 >= logs) {
            return Err(MetadataError::InvalidArgument(format!(
                "stream {name:?} has {logs} logs per streamlet, no {}",
                start.log
            )));
        }
        let owner = placement.owner;
        let raised: Vec<&LogStart> = starts
            .iter()
            .filter(|s| {
                placement
                    .log_starts
                    .get(&s.log.0)
                    .is_none_or(|kept| s.offset > *kept)
            })
            .collect();
        if raised.is_empty() {
            return Ok((owner, None));
        }
        let record = Arc::make_mut(stream);
        let placement = &mut record.placements[streamlet.0 as usize];
        for start in raised {
            let kept = placement
                .log_starts
                .entry(start.log.0)
                .or_insert(start.offset);
            *kept = (*kept).max(start.offset);
        }
        let assignment = record.assignment(streamlet);
        self.version += 1;
        Ok((owner, assignment))
    }

    /// Deletes a stream: its owners drop its streamlets at the next assignment, and backups
    /// drop its replicas once heartbeats tell them. Refused while a streamlet of it is being
    /// recovered (the rebuild would race the deletion). Returns the stream's id and the brokers
    /// that owned it.
    pub fn delete_stream(
        &mut self,
        name: &str,
    ) -> Result<(StreamId, Vec<ServerId>), MetadataError> {
        let stream = self
            .streams
            .get(name)
            .ok_or_else(|| MetadataError::UnknownStream(name.to_string()))?;
        if stream
            .placements
            .iter()
            .any(|p| p.state == PlacementState::Recovering)
        {
            return Err(MetadataError::InvalidArgument(format!(
                "stream {name:?} has a streamlet being recovered; delete it once that is over"
            )));
        }
        let owners = self.owners_of(name);
        let id = stream.id;
        self.streams.remove(name);
        self.deleted_streams.push(id);
        let excess = self
            .deleted_streams
            .len()
            .saturating_sub(DELETED_STREAMS_KEPT);
        self.deleted_streams.drain(..excess);
        self.version += 1;
        Ok((id, owners))
    }

    pub fn stream_metadata(&self, name: &str) -> Result<StreamMetadata, MetadataError> {
        let stream = self
            .streams
            .get(name)
            .ok_or_else(|| MetadataError::UnknownStream(name.to_string()))?;
        Ok(self.describe(stream))
    }

    pub fn describe(&self, stream: &StreamRecord) -> StreamMetadata {
        let streamlets = stream
            .streamlet_ids()
            .map(|(streamlet, placement)| StreamletPlacement {
                streamlet,
                owner: placement.owner,
                owner_addr: self
                    .brokers
                    .get(placement.owner.index as usize)
                    .map(|b| b.rpc_addr.clone())
                    .unwrap_or_default(),
                epoch: placement.epoch,
                state: placement.state,
                detail: placement.detail.clone(),
                // Live state, not metadata: `core::State::with_replication` fills it in.
                replication: Vec::new(),
            })
            .collect();
        StreamMetadata {
            id: stream.id,
            name: stream.name.clone(),
            config: stream.config.clone(),
            streamlets,
        }
    }

    pub fn all_streams(&self) -> Vec<StreamMetadata> {
        self.streams.values().map(|s| self.describe(s)).collect()
    }

    /// The stream with id `id`.
    pub fn stream_by_id(&self, id: StreamId) -> Option<&StreamRecord> {
        self.streams.values().find(|s| s.id == id).map(|s| &**s)
    }

    /// Every stream by id (`stream_by_id` walks the streams: for many lookups, build this once).
    pub fn streams_by_id(&self) -> HashMap<StreamId, &StreamRecord> {
        self.streams.values().map(|s| (s.id, &**s)).collect()
    }

    /// The assignment of one streamlet, as its owner receives it.
    pub fn assignment(
        &self,
        stream: &StreamRecord,
        streamlet: StreamletId,
    ) -> Option<StreamletAssignment> {
        stream.assignment(streamlet)
    }

    /// The full set of streamlets `server` must own (serving or being rebuilt), as of the
    /// current version, with the membership `brokers`. Lost streamlets are nobody's.
    pub fn assignments_for(
        &self,
        server: ServerId,
        brokers: Vec<BrokerInfo>,
    ) -> AssignStreamletsRequest {
        let mut assignments = Vec::new();
        for stream in self.streams.values() {
            for (streamlet, placement) in stream.streamlet_ids() {
                if placement.owner == server && placement.state != PlacementState::Lost {
                    assignments.extend(self.assignment(stream, streamlet));
                }
            }
        }
        AssignStreamletsRequest {
            term: self.term,
            target: server,
            version: self.version,
            added_since: None,
            assignments,
            brokers,
        }
    }

    /// The members that own at least one streamlet of `stream`.
    pub fn owners_of(&self, stream: &str) -> Vec<ServerId> {
        let Some(stream) = self.streams.get(stream) else {
            return Vec::new();
        };
        let mut owners: Vec<ServerId> = stream.placements.iter().map(|p| p.owner).collect();
        owners.sort();
        owners.dedup();
        owners.retain(|id| self.check_server(*id).is_ok());
        owners
    }
}
