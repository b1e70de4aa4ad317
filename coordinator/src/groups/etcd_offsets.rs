//! [`EtcdOffsets`]: committed offsets on etcd, one key per group and partition, written by the
//! leader (fenced like every metadata write) before a commit is answered, and read back whole
//! when a coordinator starts leading.
//!
//! A commit is one transaction (etcd's operation bound cuts one of more than 100 partitions
//! into several: each partition's offset is then committed or not on its own, as a consumer
//! may commit partitions one by one anyway). What it costs: one etcd transaction, i.e. one
//! raft round and an fsync on a majority of etcd's members.

use super::offsets::{
    Committed, CommittedOffsets, OffsetError, OffsetLimits, apply, check_commit, fetch_from,
    removal_of, snapshot_of,
};
use crate::persist::EtcdStore;
use crate::persist::layout::Op;
use crate::persist::mirror::WarmCopy;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tailstream_wire::Status;
use tailstream_wire::messages::{CommittedOffset, OffsetsRecord, TopicPartition};

/// Where offsets live, below the cluster's prefix.
const OFFSETS_DIR: &str = "g/";

#[derive(Serialize, Deserialize)]
struct Value {
    offset: u64,
    metadata: String,
}

/// `text` safe as one segment of a key: '/' and '%' (and nothing else) are percent-encoded,
/// so group and topic names, which are client input, cannot reach into another key.
fn escape(text: &str) -> String {
    text.replace('%', "%25").replace('/', "%2F")
}

fn unescape(text: &str) -> String {
    text.replace("%2F", "/").replace("%25", "%")
}

/// The key of one group's partition.
pub fn key(group: &str, topic: &str, partition: u32) -> String {
    format!(
        "{OFFSETS_DIR}{}/{}/{partition:010}",
        escape(group),
        escape(topic)
    )
}

/// The writes that commit `offsets` of `group`.
pub fn commit_ops(group: &str, offsets: &[CommittedOffset]) -> Result<Vec<Op>, String> {
    // A partition named twice is committed at its last offset, as the file store applies
    // it: etcd refuses a transaction that puts one key twice.
    let mut last: std::collections::BTreeMap<(&str, u32), &CommittedOffset> = Default::default();
    for offset in offsets {
        last.insert((offset.topic.as_str(), offset.partition), offset);
    }
    last.into_values()
        .map(|o| {
            let value = serde_json::to_vec(&Value {
                offset: o.offset,
                metadata: o.metadata.clone(),
            })
            .map_err(|e| e.to_string())?;
            Ok(Op::Put {
                key: key(group, &o.topic, o.partition),
                value,
            })
        })
        .collect()
}

/// A listing of the offsets keys read back as groups.
fn read(listing: Vec<(String, Vec<u8>)>) -> Result<HashMap<String, Committed>, String> {
    let mut groups: HashMap<String, Committed> = HashMap::new();
    for (key, value) in listing {
        let parts: Vec<&str> = key
            .strip_prefix(OFFSETS_DIR)
            .unwrap_or(&key)
            .split('/')
            .collect();
        let [group, topic, partition] = parts.as_slice() else {
            return Err(format!("{key} is not an offsets key"));
        };
        let partition: u32 = partition
            .parse()
            .map_err(|_| format!("{key}: the partition is not a number"))?;
        let value: Value =
            serde_json::from_slice(&value).map_err(|e| format!("{key} is not valid: {e}"))?;
        groups
            .entry(unescape(group))
            .or_default()
            .insert((unescape(topic), partition), (value.offset, value.metadata));
    }
    Ok(groups)
}

#[derive(Debug)]
pub struct EtcdOffsets {
    store: Arc<EtcdStore>,
    limits: OffsetLimits,
    /// What etcd holds, as this leader wrote or read it. Held only for moments, never across
    /// an etcd call: async tasks read it on the runtime's workers (fetches, lag, metrics), and
    /// the write they would wait on is driven by those same workers; with every worker
    /// waiting, the write never ends and the leader stops (its lease keep-alive with it).
    groups: Mutex<HashMap<String, Committed>>,
    /// Held across a commit's write, so commits check, write and apply one at a time, in the
    /// order etcd took them. Only commits (on the blocking pool) take it.
    writing: Mutex<()>,
}

impl EtcdOffsets {
    /// Reads every committed offset of the cluster. Blocking.
    pub fn load(store: Arc<EtcdStore>, limits: OffsetLimits) -> Result<Self, String> {
        let groups = read(store.read_dir(OFFSETS_DIR)?)?;
        Ok(Self {
            store,
            limits,
            groups: Mutex::new(groups),
            writing: Mutex::new(()),
        })
    }

    /// The committed offsets a warm copy holds (see [`crate::persist::mirror`]).
    pub fn from_copy(
        store: Arc<EtcdStore>,
        copy: &WarmCopy,
        limits: OffsetLimits,
    ) -> Result<Self, String> {
        let listing = copy
            .under(OFFSETS_DIR)
            .into_iter()
            .map(|(key, value, _)| (key, value))
            .collect();
        Ok(Self {
            store,
            limits,
            groups: Mutex::new(read(listing)?),
            writing: Mutex::new(()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Committed>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl CommittedOffsets for EtcdOffsets {
    fn commit(&self, group: &str, offsets: Vec<CommittedOffset>) -> Result<(), OffsetError> {
        // Commits are the only writers of `groups`: checked before the write, still true after.
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        check_commit(&self.lock(), &self.limits, group, &offsets)?;
        let ops = commit_ops(group, &offsets)
            .map_err(|why| OffsetError::Refused(why, Status::Internal))?;
        self.store
            .write(&ops)
            .map_err(|why| OffsetError::Io(std::io::Error::other(why)))?;
        apply(
            &mut self.lock(),
            OffsetsRecord {
                group: group.to_owned(),
                offsets,
                removed: Default::default(),
            },
        );
        Ok(())
    }

    fn fetch(&self, group: &str, partitions: Option<&[TopicPartition]>) -> Vec<CommittedOffset> {
        fetch_from(&self.lock(), group, partitions)
    }

    fn snapshot(&self) -> Vec<(String, Vec<CommittedOffset>)> {
        snapshot_of(&self.lock())
    }

    fn group_count(&self) -> usize {
        self.lock().len()
    }
    fn has_group(&self, group: &str) -> bool {
        self.lock().contains_key(group)
    }
    fn group_names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
    fn remove(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<usize, OffsetError> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let removed = removal_of(&self.lock(), group, partitions);
        if removed.is_empty() {
            return Ok(0);
        }
        let ops: Vec<Op> = removed
            .iter()
            .map(|p| Op::Delete {
                key: key(group, &p.topic, p.partition),
            })
            .collect();
        self.store
            .write(&ops)
            .map_err(|why| OffsetError::Io(std::io::Error::other(why)))?;
        let count = removed.len();
        apply(
            &mut self.lock(),
            OffsetsRecord {
                group: group.to_owned(),
                offsets: Vec::new(),
                removed: tailstream_wire::Appended(Some(removed)),
            },
        );
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_slashes_and_percents_stay_inside_their_key_and_read_back() {
        let k = key("a/b%2F", "t/%", 7);
        assert_eq!(k.matches('/').count(), 3, "{k}");
        let groups = read(vec![(
            k,
            serde_json::to_vec(&Value {
                offset: 9,
                metadata: "m".into(),
            })
            .unwrap(),
        )])
        .unwrap();
        assert_eq!(
            groups["a/b%2F"][&("t/%".to_string(), 7)],
            (9, "m".to_string())
        );
    }

    #[test]
    fn a_partition_named_twice_in_a_commit_is_written_once_at_its_last_offset() {
        let offset = |o| CommittedOffset {
            topic: "t".into(),
            partition: 1,
            offset: o,
            metadata: String::new(),
        };
        let ops = commit_ops("g", &[offset(5), offset(9)]).unwrap();
        assert_eq!(ops.len(), 1);
        let Op::Put { value, .. } = &ops[0] else {
            panic!("a put")
        };
        assert_eq!(serde_json::from_slice::<Value>(value).unwrap().offset, 9);
    }

    #[test]
    fn a_key_of_another_shape_is_refused() {
        assert!(read(vec![("g/x/y".into(), b"{}".to_vec())]).is_err());
    }
}
