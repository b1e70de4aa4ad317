//! Brokers: registration (a process at a known address is a new generation of that server),
//! crash declarations, and the views the service answers with.

use super::{BrokerRecord, Metadata, MetadataError};
use tailstream_wire::messages::{BrokerInfo, PlacementState};
use tailstream_wire::{ServerId, StreamId, StreamletId};

/// What a registration did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    pub server_id: ServerId,
    /// The previous incarnation at that address, when it had not been declared crashed yet:
    /// a restarted process lost its memory, so that incarnation is declared crashed now and
    /// its streamlets recovered from their backups.
    pub declared: Option<ServerId>,
    pub to_recover: Vec<(StreamId, StreamletId)>,
}

impl Metadata {
    /// Registers a broker process. A process at an address we already know is a new
    /// incarnation of that server: same index, next generation, and no streamlets (it gets new
    /// ones by placement only); the old incarnation is crashed (declared now if it was not).
    pub fn register_broker(
        &mut self,
        rpc_addr: &str,
        peer_addr: &str,
        admin_addr: &str,
        kafka_addr: &str,
    ) -> Result<Registered, MetadataError> {
        let existing = self.brokers.iter().position(|b| b.rpc_addr == rpc_addr);
        let Some(slot) = existing else {
            // At most u32::MAX brokers: far beyond any connection limit.
            let index = u32::try_from(self.brokers.len()).unwrap_or(u32::MAX);
            let server_id = ServerId::new(index, 1);
            self.brokers.push(BrokerRecord {
                server_id,
                rpc_addr: rpc_addr.to_string(),
                peer_addr: peer_addr.to_string(),
                admin_addr: admin_addr.to_string(),
                kafka_addr: kafka_addr.to_string(),
                crashed: false,
            });
            self.version += 1;
            return Ok(Registered {
                server_id,
                declared: None,
                to_recover: Vec::new(),
            });
        };
        let old = self.brokers[slot].server_id;
        let generation = old
            .generation
            .checked_add(1)
            .ok_or(MetadataError::Exhausted("the broker's generation"))?;
        let (declared, to_recover) = if self.brokers[slot].crashed {
            (None, Vec::new())
        } else {
            (Some(old), self.declare_crashed(old)?)
        };
        let record = &mut self.brokers[slot];
        record.server_id = ServerId::new(old.index, generation);
        record.peer_addr = peer_addr.to_string();
        record.admin_addr = admin_addr.to_string();
        record.kafka_addr = kafka_addr.to_string();
        record.crashed = false;
        self.version += 1;
        Ok(Registered {
            server_id: record.server_id,
            declared,
            to_recover,
        })
    }

    /// Declares `server` (its current incarnation) crashed: it is fenced from now on, and
    /// every streamlet it owns goes to recovery. Returns those streamlets.
    pub fn declare_crashed(
        &mut self,
        server: ServerId,
    ) -> Result<Vec<(StreamId, StreamletId)>, MetadataError> {
        if self
            .brokers
            .get(server.index as usize)
            .is_some_and(|b| b.server_id == server && b.crashed)
        {
            return Ok(Vec::new());
        }
        self.check_server(server)?;
        self.brokers[server.index as usize].crashed = true;
        self.crashes.push(super::Crash {
            server_id: server,
            recovered: false,
        });
        let mut moved = Vec::new();
        let owned = |p: &super::Placement| p.owner == server && p.state != PlacementState::Lost;
        for stream in self.streams.values_mut() {
            // Only the streams the crashed broker owned a streamlet of are copied.
            if !stream.placements.iter().any(owned) {
                continue;
            }
            let stream = std::sync::Arc::make_mut(stream);
            for (i, placement) in stream.placements.iter_mut().enumerate() {
                if owned(placement) {
                    placement.state = PlacementState::Recovering;
                    placement.detail = format!("owner {server} crashed");
                    moved.push((stream.id, StreamletId(i as u32)));
                }
            }
        }
        self.version += 1;
        Ok(moved)
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
        if record.crashed {
            return Err(MetadataError::StaleGeneration(server));
        }
        Ok(record)
    }

    /// Where `server`'s peer listener was, while its record is still that incarnation's
    /// (crashed or not; a newer incarnation at the same slot replaces it).
    pub fn peer_addr_of(&self, server: ServerId) -> Option<&str> {
        self.brokers
            .get(server.index as usize)
            .filter(|record| record.server_id == server)
            .map(|record| record.peer_addr.as_str())
    }

    /// Registered incarnations that are not declared crashed.
    pub fn members(&self) -> impl Iterator<Item = &BrokerRecord> {
        self.brokers.iter().filter(|b| !b.crashed)
    }

    /// Every crashed incarnation not yet retired (backups keep what they hold of them).
    pub fn crashed(&self) -> Vec<ServerId> {
        self.crashes.iter().map(|c| c.server_id).collect()
    }

    /// Crashed incarnations whose streamlets are all recovered: backups drop their replicas.
    pub fn retired(&self) -> Vec<ServerId> {
        self.crashes
            .iter()
            .filter(|c| c.recovered)
            .map(|c| c.server_id)
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
                kafka_addr: b.kafka_addr.clone(),
                alive: !b.crashed && is_alive(b.server_id),
                crashed: b.crashed,
            })
            .collect()
    }

    /// Streamlets owned (in any state) by each member, for placement by load.
    pub fn load_of(&self, server: ServerId) -> usize {
        self.streams
            .values()
            .flat_map(|s| s.placements.iter())
            .filter(|p| p.owner == server && p.state != PlacementState::Lost)
            .count()
    }
}
