//! Where the replicas of each replicated log's segments in flight are, and how healthy each
//! log's copies are: what the admin port (and the console) shows as replica placement, and
//! what heartbeats tell the coordinator (which shows it in `stream describe`, `cluster
//! status`, the console and Kafka's ISR). Each log's replicator publishes when something
//! changed (a segment opened its replicas, a backup was lost or replaced, a segment closed on
//! all of them), not on every append.

use std::collections::HashMap;
use std::sync::Mutex;
pub use tailstream_wire::messages::{LogReplicaSet, SegmentReplicas};
use tailstream_wire::{LogId, StreamId, StreamletId};

pub type LogKey = (StreamId, StreamletId, LogId);

/// Which replicator published a log's entry. A broker may replicate the same log twice in a
/// row (a streamlet rebuilt again here replaces the first rebuild): the one that stops must
/// not remove what its successor published, or an idle log would be reported by nobody.
pub type Publisher = u64;

/// A publisher id never used before in this process.
pub fn new_publisher() -> Publisher {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[derive(Debug, Default)]
struct Published {
    by: Publisher,
    segments: Vec<SegmentReplicas>,
    /// With the stream's R and min_insync_replicas, for the gauges.
    health: Option<(LogReplicaSet, u32, u32)>,
}

/// Every replicated log's segments in flight and replica set, by log.
#[derive(Debug, Default)]
pub struct ReplicaPlacements {
    logs: Mutex<HashMap<LogKey, Published>>,
}

impl ReplicaPlacements {
    /// Replaces one log's list.
    pub fn publish(&self, log: LogKey, by: Publisher, segments: Vec<SegmentReplicas>) {
        Self::entry(&mut self.lock(), log, by).segments = segments;
    }

    /// Replaces one log's replica set (R and min_insync_replicas are its stream's).
    pub fn publish_health(
        &self,
        log: LogKey,
        by: Publisher,
        set: LogReplicaSet,
        replicas: u32,
        min_insync: u32,
    ) {
        Self::entry(&mut self.lock(), log, by).health = Some((set, replicas, min_insync));
        self.export_gauges();
    }

    /// Forgets a log that `by` no longer replicates here (unless another publisher took it
    /// over meanwhile).
    pub fn remove(&self, log: LogKey, by: Publisher) {
        {
            let mut logs = self.lock();
            if logs.get(&log).is_some_and(|p| p.by == by) {
                logs.remove(&log);
            }
        }
        self.export_gauges();
    }

    /// `log`'s entry for `by`: a new publisher starts from nothing.
    fn entry(logs: &mut HashMap<LogKey, Published>, log: LogKey, by: Publisher) -> &mut Published {
        let entry = logs.entry(log).or_default();
        if entry.by != by {
            *entry = Published {
                by,
                ..Published::default()
            };
        }
        entry
    }

    /// One log's list (empty if it has none).
    pub fn of(&self, log: LogKey) -> Vec<SegmentReplicas> {
        self.lock()
            .get(&log)
            .map(|p| p.segments.clone())
            .unwrap_or_default()
    }

    /// Every log's replica set, as last published, and by whom.
    pub fn health(&self) -> Vec<(LogKey, Publisher, LogReplicaSet)> {
        self.lock()
            .iter()
            .filter_map(|(key, p)| p.health.as_ref().map(|(set, ..)| (*key, p.by, set.clone())))
            .collect()
    }

    /// Logs short of R complete copies, and short of min_insync_replicas.
    fn export_gauges(&self) {
        let (mut under, mut below) = (0u32, 0u32);
        for (set, replicas, min_insync) in self.lock().values().filter_map(|p| p.health.as_ref()) {
            under += u32::from(set.in_sync_replicas < *replicas);
            below += u32::from(set.in_sync_replicas < *min_insync);
        }
        metrics::gauge!(crate::metrics::LOGS_UNDER_REPLICATED).set(f64::from(under));
        metrics::gauge!(crate::metrics::LOGS_BELOW_MIN_INSYNC).set(f64::from(below));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LogKey, Published>> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::{SegmentId, ServerId};

    #[test]
    fn a_log_shows_what_was_last_published_until_removed() {
        let placements = ReplicaPlacements::default();
        let key = (StreamId(1), StreamletId(0), LogId(2));
        assert!(placements.of(key).is_empty());
        let first = vec![SegmentReplicas {
            segment: SegmentId(3),
            backups: vec![
                ServerId {
                    index: 1,
                    generation: 0,
                },
                ServerId {
                    index: 2,
                    generation: 0,
                },
            ],
        }];
        let by = new_publisher();
        placements.publish(key, by, first.clone());
        assert_eq!(placements.of(key), first);
        placements.publish(key, by, Vec::new());
        assert!(placements.of(key).is_empty());
        placements.publish(key, by, first);
        placements.remove(key, by);
        assert!(placements.of(key).is_empty());
    }

    /// A chaos run: a streamlet rebuilt here again replaced the first rebuild, whose
    /// replicators, stopping after the new ones had published, removed their entries; the
    /// idle log then had no replica set to report, and the coordinator showed it short.
    #[test]
    fn a_stopping_replicator_leaves_its_successors_entry() {
        let placements = ReplicaPlacements::default();
        let key = (StreamId(1), StreamletId(0), LogId(0));
        let (first, second) = (new_publisher(), new_publisher());
        let set = LogReplicaSet {
            log: LogId(0),
            backups: Vec::new(),
            in_sync: Vec::new(),
            in_sync_replicas: 2,
        };
        placements.publish_health(key, first, set.clone(), 2, 1);
        placements.publish_health(key, second, set.clone(), 2, 1);
        placements.remove(key, first);
        assert_eq!(placements.health(), vec![(key, second, set)]);
        placements.remove(key, second);
        assert!(placements.health().is_empty());
    }
}
