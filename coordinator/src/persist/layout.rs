//! The metadata as one key per object, for a key-value store (etcd): what a change writes, and
//! how a full listing reads back. Pure: no I/O.
//!
//! Under a cluster's prefix `P`:
//!
//! | key | value (JSON) |
//! |---|---|
//! | `P/m/counters` | [`Counters`]: version, id counters, the producer id key |
//! | `P/m/brokers/{index}` | one [`BrokerRecord`] |
//! | `P/m/streams/{stream id}` | one [`StreamHeader`]: name, config, streamlet count |
//! | `P/m/placements/{stream id}/{streamlet}` | one [`Placement`] (owner, epoch, log bounds) |
//! | `P/m/recoveries/{recovery id}` | one [`RecoveryRecord`] |
//! | `P/m/crashes` | the crashes not yet retired (a short list, bounded by the brokers) |
//! | `P/m/deleted-streams` | the last deleted stream ids (bounded) |
//! | `P/m/users/{name}` | one [`UserRecord`] (a name is `A-Z a-z 0-9 . _ - @ +`) |
//! | `P/m/acls` | every access control rule (few: at most `coordinator.acls_max`) |
//!
//! Numbers in keys are zero-padded, so a prefix listing comes back in numeric order. A change
//! writes only the keys whose objects differ: a head report rewrites one placement, never the
//! cluster.

use crate::metadata::{
    BrokerRecord, Crash, Metadata, Placement, RecoveryRecord, StreamRecord, UserRecord,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tailstream_wire::messages::StreamConfig;
use tailstream_wire::{CoordinatorTerm, StreamId};

/// Everything the metadata keys live under, below the cluster's prefix.
pub const METADATA_DIR: &str = "m/";

/// One write of a change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Put { key: String, value: Vec<u8> },
    Delete { key: String },
}

impl Op {
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }

    /// Bytes this op sends (key and value).
    pub fn size_bytes(&self) -> usize {
        match self {
            Op::Put { key, value } => key.len() + value.len(),
            Op::Delete { key } => key.len(),
        }
    }
}

/// The metadata's scalars: small, and changed together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub version: u64,
    pub next_stream_id: u64,
    pub producer_id_ceiling: u64,
    pub producer_id_key: Option<u64>,
    pub next_recovery_id: u64,
    #[serde(default)]
    pub term: CoordinatorTerm,
    #[serde(default)]
    pub decoy_secret: Option<[u8; 32]>,
}

/// A stream without its placements (each has a key of its own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamHeader {
    pub id: StreamId,
    pub name: String,
    pub config: StreamConfig,
    pub streamlets: u32,
}

fn counters(m: &Metadata) -> Counters {
    Counters {
        version: m.version,
        next_stream_id: m.next_stream_id,
        producer_id_ceiling: m.producer_id_ceiling,
        producer_id_key: m.producer_id_key,
        next_recovery_id: m.next_recovery_id,
        term: m.term,
        decoy_secret: m.decoy_secret,
    }
}

fn header(stream: &StreamRecord) -> StreamHeader {
    StreamHeader {
        id: stream.id,
        name: stream.name.clone(),
        config: stream.config.clone(),
        streamlets: stream.placements.len() as u32,
    }
}

/// The keys, relative to the cluster's prefix.
pub mod keys {
    use super::METADATA_DIR;
    use tailstream_wire::StreamId;

    pub fn counters() -> String {
        format!("{METADATA_DIR}counters")
    }
    pub fn crashes() -> String {
        format!("{METADATA_DIR}crashes")
    }
    pub fn deleted_streams() -> String {
        format!("{METADATA_DIR}deleted-streams")
    }
    pub fn broker(index: u32) -> String {
        format!("{METADATA_DIR}brokers/{index:010}")
    }
    pub fn stream(id: StreamId) -> String {
        format!("{METADATA_DIR}streams/{:020}", id.0)
    }
    pub fn placement(id: StreamId, streamlet: usize) -> String {
        format!("{METADATA_DIR}placements/{:020}/{streamlet:010}", id.0)
    }
    pub fn recovery(id: u64) -> String {
        format!("{METADATA_DIR}recoveries/{id:020}")
    }
    pub fn acls() -> String {
        format!("{METADATA_DIR}acls")
    }
    pub fn user(name: &str) -> String {
        format!("{METADATA_DIR}users/{name}")
    }
}

fn put<T: Serialize>(ops: &mut Vec<Op>, key: String, value: &T) -> Result<(), String> {
    let value = serde_json::to_vec(value).map_err(|e| format!("encoding {key}: {e}"))?;
    ops.push(Op::Put { key, value });
    Ok(())
}

/// The writes that turn the stored `previous` into `next`: a put for every object that differs
/// or is new, a delete for every object gone. From [`Metadata::default`], every key of `next`.
pub fn changes(previous: &Metadata, next: &Metadata) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    if counters(previous) != counters(next) {
        put(&mut ops, keys::counters(), &counters(next))?;
    }
    if previous.crashes != next.crashes {
        put(&mut ops, keys::crashes(), &next.crashes)?;
    }
    if previous.deleted_streams != next.deleted_streams {
        put(&mut ops, keys::deleted_streams(), &next.deleted_streams)?;
    }
    if previous.acls != next.acls {
        put(&mut ops, keys::acls(), &next.acls)?;
    }
    for (index, broker) in next.brokers.iter().enumerate() {
        if previous.brokers.get(index) != Some(broker) {
            put(&mut ops, keys::broker(index as u32), broker)?;
        }
    }
    for index in next.brokers.len()..previous.brokers.len() {
        ops.push(Op::Delete {
            key: keys::broker(index as u32),
        });
    }
    stream_changes(previous, next, &mut ops)?;
    for (name, user) in &next.users {
        if previous.users.get(name) != Some(user) {
            put(&mut ops, keys::user(name), user)?;
        }
    }
    for name in previous.users.keys() {
        if !next.users.contains_key(name) {
            ops.push(Op::Delete {
                key: keys::user(name),
            });
        }
    }
    let before: HashMap<u64, &RecoveryRecord> =
        previous.recoveries.iter().map(|r| (r.id, r)).collect();
    let after: HashMap<u64, &RecoveryRecord> = next.recoveries.iter().map(|r| (r.id, r)).collect();
    for record in &next.recoveries {
        if before.get(&record.id) != Some(&record) {
            put(&mut ops, keys::recovery(record.id), record)?;
        }
    }
    for record in &previous.recoveries {
        if !after.contains_key(&record.id) {
            ops.push(Op::Delete {
                key: keys::recovery(record.id),
            });
        }
    }
    Ok(ops)
}

fn stream_changes(previous: &Metadata, next: &Metadata, ops: &mut Vec<Op>) -> Result<(), String> {
    // Both copies are sorted by name: one merge walk pairs each stream with its previous copy,
    // with no index built (a change at 10,000 streams touches a handful). A name deleted and
    // created again is a different stream, with other keys: paired only with the same id.
    let mut before = previous.streams.iter().peekable();
    for (name, stream) in &next.streams {
        while let Some((_, gone)) = before.next_if(|(old_name, _)| *old_name < name) {
            delete_stream(gone, ops);
        }
        let old = match before.next_if(|(old_name, _)| *old_name == name) {
            Some((_, old)) if old.id == stream.id => Some(old),
            Some((_, replaced)) => {
                delete_stream(replaced, ops);
                None
            }
            None => None,
        };
        // Most streams are untouched by a change: still shared with the previous copy, so
        // one pointer comparison, no header built.
        if old.is_some_and(|old| Arc::ptr_eq(old, stream) || old == stream) {
            continue;
        }
        if old.map(|old| header(old)) != Some(header(stream)) {
            put(ops, keys::stream(stream.id), &header(stream))?;
        }
        for (i, placement) in stream.placements.iter().enumerate() {
            if old.and_then(|old| old.placements.get(i)) != Some(placement) {
                put(ops, keys::placement(stream.id, i), placement)?;
            }
        }
        let old_count = old.map_or(0, |old| old.placements.len());
        for i in stream.placements.len()..old_count {
            ops.push(Op::Delete {
                key: keys::placement(stream.id, i),
            });
        }
    }
    for (_, gone) in before {
        delete_stream(gone, ops);
    }
    Ok(())
}

/// The deletes of every key of a stream that is gone.
fn delete_stream(stream: &StreamRecord, ops: &mut Vec<Op>) {
    ops.push(Op::Delete {
        key: keys::stream(stream.id),
    });
    for i in 0..stream.placements.len() {
        ops.push(Op::Delete {
            key: keys::placement(stream.id, i),
        });
    }
}

/// Applies `ops` to a listing (key → value), as the store does.
pub fn apply(listing: &mut BTreeMap<String, Vec<u8>>, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put { key, value } => {
                listing.insert(key.clone(), value.clone());
            }
            Op::Delete { key } => {
                listing.remove(key);
            }
        }
    }
}

fn decode<T: for<'de> Deserialize<'de>>(key: &str, value: &[u8]) -> Result<T, String> {
    serde_json::from_slice(value).map_err(|e| format!("{key} is not valid: {e}"))
}

/// Zero-padded number `text`, checked.
fn number(key: &str, text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{key}: {text:?} is not a number"))
}

/// The metadata a listing of the metadata keys (relative to the cluster's prefix) holds,
/// checked as [`Metadata::validate`] checks a file. An empty listing is an empty cluster.
pub fn read(listing: &BTreeMap<String, Vec<u8>>) -> Result<Metadata, String> {
    let mut metadata = Metadata::default();
    let mut headers: BTreeMap<StreamId, StreamHeader> = BTreeMap::new();
    let mut placements: BTreeMap<StreamId, BTreeMap<u64, Placement>> = BTreeMap::new();
    for (key, value) in listing {
        let Some(rest) = key.strip_prefix(METADATA_DIR) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            ["counters"] => {
                let c: Counters = decode(key, value)?;
                metadata.version = c.version;
                metadata.next_stream_id = c.next_stream_id;
                metadata.producer_id_ceiling = c.producer_id_ceiling;
                metadata.producer_id_key = c.producer_id_key;
                metadata.next_recovery_id = c.next_recovery_id;
                metadata.term = c.term;
                metadata.decoy_secret = c.decoy_secret;
            }
            ["crashes"] => metadata.crashes = decode::<Vec<Crash>>(key, value)?,
            ["deleted-streams"] => metadata.deleted_streams = decode(key, value)?,
            ["acls"] => metadata.acls = decode(key, value)?,
            ["brokers", index] => {
                let index = number(key, index)?;
                if index != metadata.brokers.len() as u64 {
                    return Err(format!("{key}: brokers are not numbered 0, 1, 2, ..."));
                }
                metadata.brokers.push(decode::<BrokerRecord>(key, value)?);
            }
            ["streams", id] => {
                let id = StreamId(number(key, id)?);
                let header: StreamHeader = decode(key, value)?;
                if header.id != id {
                    return Err(format!("{key} holds stream {}", header.id.0));
                }
                headers.insert(id, header);
            }
            ["placements", id, streamlet] => {
                let id = StreamId(number(key, id)?);
                let streamlet = number(key, streamlet)?;
                placements
                    .entry(id)
                    .or_default()
                    .insert(streamlet, decode(key, value)?);
            }
            ["users", name] => {
                let user: UserRecord = decode(key, value)?;
                if user.name != *name {
                    return Err(format!("{key} holds user {:?}", user.name));
                }
                metadata.users.insert(user.name.clone(), user);
            }
            ["recoveries", id] => {
                let record: RecoveryRecord = decode(key, value)?;
                if record.id != number(key, id)? {
                    return Err(format!("{key} holds recovery {}", record.id));
                }
                metadata.recoveries.push(record);
            }
            _ => {
                return Err(format!(
                    "{key} is not a metadata key this coordinator knows"
                ));
            }
        }
    }
    for (id, header) in headers {
        let found = placements.remove(&id).unwrap_or_default();
        let complete = found.len() == header.streamlets as usize
            && found.keys().copied().eq(0..header.streamlets as u64);
        if !complete {
            return Err(format!(
                "stream {:?} has {} streamlets but {} placements",
                header.name,
                header.streamlets,
                found.len()
            ));
        }
        let record = StreamRecord {
            id,
            name: header.name.clone(),
            config: header.config,
            placements: found.into_values().collect(),
        };
        if metadata
            .streams
            .insert(Arc::from(header.name.as_str()), Arc::new(record))
            .is_some()
        {
            return Err(format!("two streams are named {:?}", header.name));
        }
    }
    if let Some(id) = placements.keys().next() {
        return Err(format!("placements of stream {} that does not exist", id.0));
    }
    metadata.validate()?;
    metadata.upgrade_streams();
    Ok(metadata)
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
