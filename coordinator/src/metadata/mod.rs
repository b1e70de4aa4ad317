//! The coordinator's state as a pure state machine: every change is a method that checks its
//! arguments, changes the state, and bumps `version` when brokers' assignments change. The
//! service persists the state after each change and before answering. No I/O, no clock: times
//! come in as arguments.
//!
//! - this file: the types, loading checks, producer ids;
//! - [`brokers`]: registration (new generations), crash declarations, liveness views;
//! - [`streams`]: creation, placement, descriptions and assignments;
//! - [`log_bounds`]: each log's head and oldest kept segment, durable before acknowledgements;
//! - [`invariants`]: what every change must keep true (checked before it is saved);
//! - [`rebuilds`]: moving a crashed broker's streamlets through recovery (owner, epoch, state),
//!   many at once;
//! - [`recovery`]: the record of each recovery and its phases;
//! - [`users`]: users and their SCRAM credentials; [`acls`]: access control rules.

pub mod acls;
mod brokers;
pub mod invariants;
mod log_bounds;
pub mod producer_ids;
mod rebuilds;
mod recovery;
mod streams;
#[cfg(test)]
mod tests;
pub mod users;

pub use log_bounds::KeptSegments;
pub use producer_ids::ProducerIds;
pub use rebuilds::StreamletKey;
pub use recovery::{RecoveryPhase, RecoveryRecord};
pub use users::UserRecord;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tailstream_auth::producer_binding::BindingKey;
use tailstream_wire::messages::{LogStart, PlacementState, StreamConfig, StreamletAssignment};
use tailstream_wire::{
    CoordinatorTerm, LogId, OwnershipEpoch, RecordOffset, ServerId, Status, StreamId, StreamletId,
};
use thiserror::Error;

/// Producer ids are persisted in blocks of this many, so allocating one is not a disk write.
pub const PRODUCER_ID_BLOCK: u64 = 1024;
/// Longest stream name.
pub const STREAM_NAME_BYTES_MAX: usize = 255;
/// Recoveries remembered for the admin page (the oldest finished ones are dropped first).
pub const RECOVERY_RECORDS_MAX: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MetadataError {
    #[error("no stream named {0:?}")]
    UnknownStream(String),
    #[error("a stream named {0:?} already exists")]
    StreamExists(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("no live brokers to place streamlets on")]
    NoBrokers,
    #[error("{0} is not a registered broker")]
    UnknownServer(ServerId),
    #[error("{0} is an old incarnation; register again")]
    StaleGeneration(ServerId),
    /// A counter reached its end: refused rather than wrapped (a wrapped generation would
    /// un-fence old incarnations).
    #[error("{0} is exhausted")]
    Exhausted(&'static str),
    /// A configured limit (`coordinator.streams_max`) was reached.
    #[error("{0}")]
    LimitReached(String),
    #[error("no user named {0:?}")]
    UnknownUser(String),
    #[error("a user named {0:?} already exists")]
    UserExists(String),
}

impl MetadataError {
    pub fn status(&self) -> Status {
        match self {
            MetadataError::UnknownStream(_) => Status::UnknownStream,
            MetadataError::StreamExists(_) => Status::StreamExists,
            MetadataError::InvalidArgument(_) => Status::InvalidArgument,
            MetadataError::NoBrokers => Status::NoBrokers,
            MetadataError::UnknownServer(_) => Status::UnknownServer,
            MetadataError::StaleGeneration(_) => Status::StaleGeneration,
            MetadataError::Exhausted(_) => Status::Internal,
            MetadataError::LimitReached(_) => Status::QuotaExceeded,
            MetadataError::UnknownUser(_) => Status::UnknownUser,
            MetadataError::UserExists(_) => Status::UserExists,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    /// The current incarnation of this slot.
    pub server_id: ServerId,
    pub rpc_addr: String,
    /// Where the coordinator and other brokers call it.
    pub peer_addr: String,
    pub admin_addr: String,
    /// Where Kafka clients reach it (empty: no Kafka listener).
    #[serde(default)]
    pub kafka_addr: String,
    /// The incarnation was declared crashed (and the slot not re-registered since): fenced
    /// everywhere, its streamlets moved.
    pub crashed: bool,
}

/// A declared crash, kept until its recovery finished and backups were told to drop what
/// they still hold of that generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crash {
    pub server_id: ServerId,
    /// Every streamlet it owned is serving elsewhere (none lost, none recovering).
    pub recovered: bool,
}

/// Where one streamlet lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub owner: ServerId,
    /// Bumped at every change of owner.
    pub epoch: OwnershipEpoch,
    pub state: PlacementState,
    /// For `Lost`: what is missing; for `Recovering`: from which broker.
    pub detail: String,
    /// Per log id: the segments recovery must find, as its owners made them durable here
    /// (see [`log_bounds`]). A log with no entry never acknowledged a record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub log_bounds: BTreeMap<u32, KeptSegments>,
    /// Per log id: the first record still served (Kafka's DeleteRecords deleted those before
    /// it). Only moves forward; travels with the streamlet to every later owner.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub log_starts: BTreeMap<u32, RecordOffset>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    pub id: StreamId,
    pub name: String,
    pub config: StreamConfig,
    /// `placements[i]` is streamlet i's.
    pub placements: Vec<Placement>,
}

impl StreamRecord {
    /// Each owner's assignments of this stream's streamlets (lost ones are nobody's).
    pub fn assignments_by_owner(&self) -> HashMap<ServerId, Vec<StreamletAssignment>> {
        self.assignments_from(StreamletId(0))
    }

    /// Each owner's assignments of the streamlets from `first` on (those a growth added).
    pub fn assignments_from(
        &self,
        first: StreamletId,
    ) -> HashMap<ServerId, Vec<StreamletAssignment>> {
        let mut by_owner: HashMap<ServerId, Vec<StreamletAssignment>> = HashMap::new();
        for (streamlet, placement) in self.streamlet_ids().skip(first.0 as usize) {
            if placement.state != PlacementState::Lost {
                by_owner
                    .entry(placement.owner)
                    .or_default()
                    .extend(self.assignment(streamlet));
            }
        }
        by_owner
    }

    /// The assignment of one streamlet, as its owner receives it.
    pub fn assignment(&self, streamlet: StreamletId) -> Option<StreamletAssignment> {
        let placement = self.placements.get(streamlet.0 as usize)?;
        Some(StreamletAssignment {
            stream: self.id,
            stream_name: self.name.clone(),
            streamlet,
            config: self.config.clone(),
            epoch: placement.epoch,
            recovering: placement.state == PlacementState::Recovering,
            log_starts: placement
                .log_starts
                .iter()
                .map(|(log, offset)| LogStart {
                    log: LogId(*log),
                    offset: *offset,
                })
                .collect(),
        })
    }

    pub fn streamlet_ids(&self) -> impl Iterator<Item = (StreamletId, &Placement)> {
        self.placements
            .iter()
            .enumerate()
            .map(|(i, p)| (StreamletId(i as u32), p))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Bumped whenever any broker's assignment changes.
    pub version: u64,
    /// Indexed by `ServerId::index`.
    pub brokers: Vec<BrokerRecord>,
    /// Shared with earlier copies until changed (`Arc::make_mut`), names included: copying the
    /// metadata for a change allocates nothing per stream, and comparing the copies and
    /// diffing them for the store cost the streams changed, not every stream (at 10,000
    /// streams of 16 streamlets, each create compared them all).
    pub streams: BTreeMap<Arc<str>, Arc<StreamRecord>>,
    pub next_stream_id: u64,
    /// Every producer id counter below this may have been handed out; a restarted
    /// coordinator starts allocating here, so ids are never reused.
    pub producer_id_ceiling: u64,
    /// The key producer id counters are enciphered with (`producer_ids`), chosen at random
    /// before the first id is handed out; absent in files written before it existed.
    #[serde(default)]
    pub producer_id_key: Option<u64>,
    /// Every declared crash not yet retired, oldest first.
    pub crashes: Vec<Crash>,
    /// Recoveries, oldest first (unfinished ones are resumed by a restarted coordinator).
    pub recoveries: Vec<RecoveryRecord>,
    /// The most recently deleted streams, oldest first (at most `DELETED_STREAMS_KEPT`):
    /// heartbeats tell every backup, which drops what it holds of them. Stream ids are never
    /// reused, so a late drop never hits a newer stream.
    #[serde(default)]
    pub deleted_streams: Vec<StreamId>,
    pub next_recovery_id: u64,
    /// The term of the latest coordinator to lead (each takes this plus one, saved, before it
    /// leads): every order it gives names it. Absent (0) in files written before it existed.
    #[serde(default)]
    pub term: CoordinatorTerm,
    /// Users by name, with their credentials; absent in files written before users existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, UserRecord>,
    /// Access control rules, sorted, none twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<acls::StoredAcl>,
    /// The cluster's secret for unknown users' decoy credentials (so every broker, at every
    /// restart and under every leader, answers an unknown name the same) and for the producer
    /// id binding key: chosen at random and saved by the first coordinator to lead.
    #[serde(default)]
    pub decoy_secret: Option<[u8; 32]>,
}

impl Metadata {
    /// Checks metadata read from disk before it is trusted: counters far from their end (so
    /// the increments of a running coordinator cannot overflow), brokers at their own index,
    /// valid stream settings, owners that exist.
    pub fn validate(&self) -> Result<(), String> {
        const HEADROOM: u64 = u64::MAX / 2;
        let counters = [
            ("version", self.version),
            ("next_stream_id", self.next_stream_id),
            ("producer_id_ceiling", self.producer_id_ceiling),
            ("next_recovery_id", self.next_recovery_id),
            ("term", self.term.0),
        ];
        for (name, value) in counters {
            if value > HEADROOM {
                return Err(format!("{name} {value} is implausibly large"));
            }
        }
        if self.producer_id_ceiling > producer_ids::COUNTER_MAX {
            return Err("producer_id_ceiling is past the largest producer id".into());
        }
        for (i, broker) in self.brokers.iter().enumerate() {
            if broker.server_id.index as usize != i || broker.server_id.generation == 0 {
                return Err(format!("broker {i} has server id {}", broker.server_id));
            }
        }
        self.check_acls()?;
        for (name, user) in &self.users {
            if *name != user.name {
                return Err(format!("user {name:?} holds {:?}", user.name));
            }
            user.check()?;
        }
        for (name, stream) in &self.streams {
            tailstream_config::validate_stream_config(&stream.config)
                .map_err(|why| format!("stream {name:?}: {why}"))?;
            if let Some(placement) = stream
                .placements
                .iter()
                .find(|p| self.brokers.get(p.owner.index as usize).is_none())
            {
                return Err(format!(
                    "stream {name:?} is owned by unknown {}",
                    placement.owner
                ));
            }
            if stream
                .placements
                .iter()
                .any(|p| p.epoch > OwnershipEpoch(u32::MAX / 2))
            {
                return Err(format!("stream {name:?} has an implausible epoch"));
            }
        }
        Ok(())
    }

    /// Streams saved before `min_insync_replicas` existed acknowledged only with all R copies:
    /// they keep that (R), rather than quietly taking the newer default.
    pub fn upgrade_streams(&mut self) {
        for stream in self.streams.values_mut() {
            if stream.config.min_insync_replicas == 0 {
                let stream = Arc::make_mut(stream);
                stream.config.min_insync_replicas = stream.config.replicas;
            }
        }
    }

    /// Reserves the block of producer ids from counter `next` on: ids below the ceiling may
    /// be handed out once this change is durable. The first reservation also fixes the key
    /// that ids are enciphered with (`fresh_key`, random, from the caller: this state machine
    /// draws no randomness itself).
    pub fn raise_producer_id_ceiling(&mut self, next: u64, fresh_key: u64) {
        self.producer_id_key.get_or_insert(fresh_key);
        self.producer_id_ceiling = self
            .producer_id_ceiling
            .max(next + PRODUCER_ID_BLOCK)
            .min(producer_ids::COUNTER_MAX);
    }

    /// The keys producer ids are made with: the cipher key (0 before the first reservation,
    /// when no id can be taken anyway: the ceiling is 0), and the binding key, derived from
    /// the cluster's secret (`None` before a coordinator first led and saved it).
    pub fn producer_id_keys(&self) -> Option<producer_ids::IdKeys> {
        Some(producer_ids::IdKeys {
            cipher: self.producer_id_key.unwrap_or(0),
            binding: self.producer_binding_key()?,
        })
    }

    /// The key brokers check producer ids' owners with (`tailstream_auth::producer_binding`).
    pub fn producer_binding_key(&self) -> Option<BindingKey> {
        self.decoy_secret.as_ref().map(BindingKey::derive)
    }
}
