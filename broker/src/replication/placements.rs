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

#[derive(Debug, Default)]
struct Published {
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
    pub fn publish(&self, log: LogKey, segments: Vec<SegmentReplicas>) {
        self.lock().entry(log).or_default().segments = segments;
    }

    /// Replaces one log's replica set (R and min_insync_replicas are its stream's).
    pub fn publish_health(&self, log: LogKey, set: LogReplicaSet, replicas: u32, min_insync: u32) {
        self.lock().entry(log).or_default().health = Some((set, replicas, min_insync));
        self.export_gauges();
    }

    /// Forgets a log that is no longer replicated here.
    pub fn remove(&self, log: LogKey) {
        self.lock().remove(&log);
        self.export_gauges();
    }

    /// One log's list (empty if it has none).
    pub fn of(&self, log: LogKey) -> Vec<SegmentReplicas> {
        self.lock()
            .get(&log)
            .map(|p| p.segments.clone())
            .unwrap_or_default()
    }

    /// Every log's replica set, as last published.
    pub fn health(&self) -> Vec<(LogKey, LogReplicaSet)> {
        self.lock()
            .iter()
            .filter_map(|(key, p)| p.health.as_ref().map(|(set, ..)| (*key, set.clone())))
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
        placements.publish(key, first.clone());
        assert_eq!(placements.of(key), first);
        placements.publish(key, Vec::new());
        assert!(placements.of(key).is_empty());
        placements.publish(key, first);
        placements.remove(key);
        assert!(placements.of(key).is_empty());
    }
}
