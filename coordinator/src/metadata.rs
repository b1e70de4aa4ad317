//! The coordinator's state as a pure state machine: every change is a method that checks its
//! arguments, changes the state, and bumps `version` when brokers' assignments change. The
//! service persists the state after each change and before answering.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tailstream_config::{STREAMLETS_MAX, validate_stream_config};
use tailstream_wire::messages::{
    AssignStreamletsRequest, BrokerInfo, StreamConfig, StreamMetadata, StreamletAssignment,
    StreamletPlacement,
};
use tailstream_wire::{ProducerId, ServerId, Status, StreamId, StreamletId};
use thiserror::Error;

/// Producer ids are persisted in blocks of this many, so allocating one is not a disk write.
pub const PRODUCER_ID_BLOCK: u64 = 1024;
/// Longest stream name.
pub const STREAM_NAME_BYTES_MAX: usize = 255;

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
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub server_id: ServerId,
    pub rpc_addr: String,
    /// Where the coordinator and other brokers call it (empty in metadata written before peer
    /// listeners existed; the broker's next registration fills it in).
    #[serde(default)]
    pub peer_addr: String,
    pub admin_addr: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    pub id: StreamId,
    pub name: String,
    pub config: StreamConfig,
    /// `owners[i]` owns streamlet i.
    pub owners: Vec<ServerId>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Bumped whenever any broker's assignment changes.
    pub version: u64,
    /// Indexed by `ServerId::index`.
    pub brokers: Vec<BrokerRecord>,
    pub streams: BTreeMap<String, StreamRecord>,
    pub next_stream_id: u64,
    /// Every producer id below this may have been handed out; a restarted coordinator starts
    /// allocating here, so ids are never reused.
    pub producer_id_ceiling: u64,
}

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
    /// Registers a broker process. A process at an address we already know is a new
    /// incarnation of that server: same index, next generation, and it inherits the old
    /// incarnation's streamlets (whose old generation is fenced from now on).
    pub fn register_broker(
        &mut self,
        rpc_addr: &str,
        peer_addr: &str,
        admin_addr: &str,
    ) -> Result<ServerId, MetadataError> {
        let existing = self.brokers.iter_mut().find(|b| b.rpc_addr == rpc_addr);
        let (old, new) = match existing {
            Some(record) => {
                let old = record.server_id;
                let generation = old
                    .generation
                    .checked_add(1)
                    .ok_or(MetadataError::Exhausted("the broker's generation"))?;
                record.server_id = ServerId::new(old.index, generation);
                record.peer_addr = peer_addr.to_string();
                record.admin_addr = admin_addr.to_string();
                (Some(old), record.server_id)
            }
            None => {
                // At most u32::MAX brokers: far beyond any connection limit.
                let index = u32::try_from(self.brokers.len()).unwrap_or(u32::MAX);
                let server_id = ServerId::new(index, 1);
                self.brokers.push(BrokerRecord {
                    server_id,
                    rpc_addr: rpc_addr.to_string(),
                    peer_addr: peer_addr.to_string(),
                    admin_addr: admin_addr.to_string(),
                });
                (None, server_id)
            }
        };
        if let Some(old) = old {
            for stream in self.streams.values_mut() {
                for owner in stream.owners.iter_mut().filter(|o| **o == old) {
                    *owner = new;
                }
            }
        }
        self.version += 1;
        Ok(new)
    }

    /// Checks metadata read from disk before it is trusted: counters far from their end (so
    /// the increments of a running coordinator cannot overflow), brokers at their own index,
    /// valid stream settings, owners that exist.
    pub fn validate(&self) -> Result<(), String> {
        const HEADROOM: u64 = u64::MAX / 2;
        let counters = [
            ("version", self.version),
            ("next_stream_id", self.next_stream_id),
            ("producer_id_ceiling", self.producer_id_ceiling),
        ];
        for (name, value) in counters {
            if value > HEADROOM {
                return Err(format!("{name} {value} is implausibly large"));
            }
        }
        for (i, broker) in self.brokers.iter().enumerate() {
            if broker.server_id.index as usize != i || broker.server_id.generation == 0 {
                return Err(format!("broker {i} has server id {}", broker.server_id));
            }
        }
        for (name, stream) in &self.streams {
            tailstream_config::validate_stream_config(&stream.config)
                .map_err(|why| format!("stream {name:?}: {why}"))?;
            if let Some(owner) = stream
                .owners
                .iter()
                .find(|o| self.brokers.get(o.index as usize).is_none())
            {
                return Err(format!("stream {name:?} is owned by unknown {owner}"));
            }
        }
        Ok(())
    }

    /// The current incarnation of `server`'s slot, or why `server` is not it.
    pub fn check_server(&self, server: ServerId) -> Result<&BrokerRecord, MetadataError> {
        let record = self
            .brokers
            .get(server.index as usize)
            .ok_or(MetadataError::UnknownServer(server))?;
        if server.is_fenced_by(&record.server_id) {
            return Err(MetadataError::StaleGeneration(server));
        }
        if record.server_id != server {
            return Err(MetadataError::UnknownServer(server));
        }
        Ok(record)
    }

    /// Creates a stream, placing its streamlets round-robin over `live` brokers (starting at a
    /// different broker for each stream, so small streams spread out too).
    pub fn create_stream(
        &mut self,
        name: &str,
        streamlets: u32,
        config: StreamConfig,
        live: &[ServerId],
    ) -> Result<&StreamRecord, MetadataError> {
        validate_name(name)?;
        if !(1..=STREAMLETS_MAX).contains(&streamlets) {
            return Err(MetadataError::InvalidArgument(format!(
                "streamlets must be in 1..={STREAMLETS_MAX}"
            )));
        }
        validate_stream_config(&config).map_err(MetadataError::InvalidArgument)?;
        if self.streams.contains_key(name) {
            return Err(MetadataError::StreamExists(name.to_string()));
        }
        let mut live: Vec<ServerId> = live.to_vec();
        live.sort();
        live.dedup();
        if live.is_empty() {
            return Err(MetadataError::NoBrokers);
        }
        // Each segment needs R backups other than its primary.
        if config.replicas as usize > live.len() - 1 {
            return Err(MetadataError::InvalidArgument(format!(
                "{} replicas need {} live brokers; {} are alive",
                config.replicas,
                config.replicas + 1,
                live.len()
            )));
        }
        let id = StreamId(self.next_stream_id);
        self.next_stream_id += 1;
        let start = (id.0 % live.len() as u64) as usize;
        let owners = (0..streamlets as usize)
            .map(|i| live[(start + i) % live.len()])
            .collect();
        let record = StreamRecord {
            id,
            name: name.to_string(),
            config,
            owners,
        };
        self.version += 1;
        Ok(self.streams.entry(name.to_string()).or_insert(record))
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
            .owners
            .iter()
            .enumerate()
            .map(|(i, owner)| StreamletPlacement {
                streamlet: StreamletId(i as u32),
                owner: *owner,
                owner_addr: self
                    .brokers
                    .get(owner.index as usize)
                    .map(|b| b.rpc_addr.clone())
                    .unwrap_or_default(),
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

    /// The full set of streamlets `server` must own, as of the current version.
    pub fn assignments_for(&self, server: ServerId) -> AssignStreamletsRequest {
        let mut assignments = Vec::new();
        for stream in self.streams.values() {
            for (i, owner) in stream.owners.iter().enumerate() {
                if *owner == server {
                    assignments.push(StreamletAssignment {
                        stream: stream.id,
                        stream_name: stream.name.clone(),
                        streamlet: StreamletId(i as u32),
                        config: stream.config.clone(),
                    });
                }
            }
        }
        AssignStreamletsRequest {
            target: server,
            version: self.version,
            assignments,
        }
    }

    /// The brokers that own at least one streamlet of `stream`.
    pub fn owners_of(&self, stream: &str) -> Vec<BrokerRecord> {
        let Some(stream) = self.streams.get(stream) else {
            return Vec::new();
        };
        let mut owners: Vec<ServerId> = stream.owners.clone();
        owners.sort();
        owners.dedup();
        owners
            .into_iter()
            .filter_map(|id| {
                self.brokers
                    .get(id.index as usize)
                    .filter(|b| b.server_id == id)
            })
            .cloned()
            .collect()
    }

    pub fn broker_infos(&self, is_alive: impl Fn(ServerId) -> bool) -> Vec<BrokerInfo> {
        self.brokers
            .iter()
            .map(|b| BrokerInfo {
                server_id: b.server_id,
                rpc_addr: b.rpc_addr.clone(),
                peer_addr: b.peer_addr.clone(),
                admin_addr: b.admin_addr.clone(),
                alive: is_alive(b.server_id),
            })
            .collect()
    }

    /// Reserves the block of producer ids from `next` on: ids below the ceiling may be handed
    /// out once this change is durable.
    pub fn raise_producer_id_ceiling(&mut self, next: u64) {
        self.producer_id_ceiling = self.producer_id_ceiling.max(next + PRODUCER_ID_BLOCK);
    }
}

/// Hands out producer ids below the persisted ceiling, in memory; a restart starts at the
/// ceiling, so an id is never handed out twice.
#[derive(Debug, Default)]
pub struct ProducerIds {
    next: Option<u64>,
}

impl ProducerIds {
    /// The next id, if it lies below `ceiling`; `Err(next)` when the ceiling must first be
    /// raised (durably) past `next`.
    pub fn take(&mut self, ceiling: u64) -> Result<ProducerId, u64> {
        let next = *self.next.get_or_insert(ceiling.max(1));
        if next >= ceiling {
            return Err(next);
        }
        self.next = Some(next + 1);
        Ok(ProducerId(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> StreamConfig {
        tailstream_config::Config::embedded().stream_defaults
    }

    #[test]
    fn streamlets_are_placed_round_robin_over_live_brokers() {
        let mut m = Metadata::default();
        let a = m
            .register_broker("127.0.0.1:1", "peer-127.0.0.1:1", "a")
            .unwrap();
        let b = m
            .register_broker("127.0.0.1:2", "peer-127.0.0.1:2", "b")
            .unwrap();
        let c = m
            .register_broker("127.0.0.1:3", "peer-127.0.0.1:3", "c")
            .unwrap();
        let stream = m
            .create_stream("s", 6, config(), &[c, a, b])
            .unwrap()
            .clone();
        assert_eq!(stream.owners, vec![a, b, c, a, b, c]);
        let second = m
            .create_stream("t", 1, config(), &[a, b, c])
            .unwrap()
            .clone();
        assert_eq!(
            second.owners,
            vec![b],
            "each stream starts one broker further"
        );
        assert_eq!(m.assignments_for(a).assignments.len(), 2);
        assert_eq!(
            m.stream_metadata("s").unwrap().streamlets[1].owner_addr,
            "127.0.0.1:2"
        );
    }

    #[test]
    fn replicas_need_as_many_other_live_brokers() {
        let mut m = Metadata::default();
        let a = m.register_broker("x:1", "peer-x:1", "a").unwrap();
        let b = m.register_broker("x:2", "peer-x:2", "b").unwrap();
        let mut replicated = config();
        replicated.replicas = 2;
        assert!(matches!(
            m.create_stream("s", 1, replicated.clone(), &[a, b]),
            Err(MetadataError::InvalidArgument(_))
        ));
        let c = m.register_broker("x:3", "peer-x:3", "c").unwrap();
        assert!(m.create_stream("s", 1, replicated, &[a, b, c]).is_ok());
    }

    #[test]
    fn bad_requests_are_refused_with_their_reason() {
        let mut m = Metadata::default();
        assert_eq!(
            m.create_stream("s", 1, config(), &[]),
            Err(MetadataError::NoBrokers)
        );
        let a = m.register_broker("x:1", "peer-x:1", "a").unwrap();
        assert!(matches!(
            m.create_stream("bad name", 1, config(), &[a]),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert!(matches!(
            m.create_stream("s", 0, config(), &[a]),
            Err(MetadataError::InvalidArgument(_))
        ));
        m.create_stream("s", 1, config(), &[a]).unwrap();
        assert!(matches!(
            m.create_stream("s", 1, config(), &[a]),
            Err(MetadataError::StreamExists(_))
        ));
        assert!(matches!(
            m.stream_metadata("nope"),
            Err(MetadataError::UnknownStream(_))
        ));
    }

    #[test]
    fn a_reregistered_broker_is_a_new_generation_that_keeps_its_streamlets() {
        let mut m = Metadata::default();
        let old = m.register_broker("x:1", "peer-x:1", "a").unwrap();
        m.create_stream("s", 2, config(), &[old]).unwrap();
        let new = m.register_broker("x:1", "peer-x:1", "a2").unwrap();
        assert_eq!((new.index, new.generation), (old.index, old.generation + 1));
        assert_eq!(
            m.check_server(old),
            Err(MetadataError::StaleGeneration(old))
        );
        assert!(m.check_server(new).is_ok());
        assert_eq!(m.assignments_for(new).assignments.len(), 2);
        assert!(m.assignments_for(old).assignments.is_empty());
        assert!(matches!(
            m.check_server(ServerId::new(9, 1)),
            Err(MetadataError::UnknownServer(_))
        ));
    }

    #[test]
    fn producer_ids_are_never_reused_across_restarts() {
        let mut m = Metadata::default();
        let mut ids = ProducerIds::default();
        let next = ids.take(m.producer_id_ceiling).unwrap_err();
        m.raise_producer_id_ceiling(next);
        let first = ids.take(m.producer_id_ceiling).unwrap();
        let second = ids.take(m.producer_id_ceiling).unwrap();
        assert!(second > first);
        // A restart loses everything not persisted: the ceiling is what counts.
        let json = serde_json::to_string(&m).unwrap();
        let restarted: Metadata = serde_json::from_str(&json).unwrap();
        let mut ids = ProducerIds::default();
        let next = ids.take(restarted.producer_id_ceiling).unwrap_err();
        assert!(next > second.0);
    }

    #[test]
    fn counters_refuse_to_wrap_and_implausible_files_are_refused() {
        let mut m = Metadata::default();
        let id = m.register_broker("x:1", "peer-x:1", "a").unwrap();
        m.brokers[id.index as usize].server_id = ServerId::new(id.index, u32::MAX);
        assert_eq!(
            m.register_broker("x:1", "peer-x:1", "a"),
            Err(MetadataError::Exhausted("the broker's generation"))
        );
        assert_eq!(m.brokers[0].server_id.generation, u32::MAX, "unchanged");
        assert!(m.validate().is_ok());
        let mut bad = m.clone();
        bad.version = u64::MAX;
        assert!(bad.validate().unwrap_err().contains("version"));
        let mut bad = m.clone();
        bad.brokers[0].server_id = ServerId::new(5, 1);
        assert!(bad.validate().is_err());
        let mut bad = m.clone();
        m.create_stream("s", 1, config(), &[m.brokers[0].server_id])
            .unwrap();
        bad.streams = m.streams.clone();
        bad.streams.get_mut("s").unwrap().config.logs_per_streamlet = u32::MAX;
        assert!(bad.validate().unwrap_err().contains("logs per streamlet"));
    }
}
