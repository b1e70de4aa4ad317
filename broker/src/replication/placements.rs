//! Where the replicas of each replicated log's segments in flight are, and how healthy each
//! log's copies are: what the admin port (and the console) shows as replica placement, and
//! what heartbeats tell the coordinator (which shows it in `stream describe`, `cluster
//! status`, the console and Kafka's ISR). Each log's replicator publishes when something
//! changed (a segment opened its replicas, a backup was lost or replaced, a segment closed on
//! all of them), not on every append.

use std::collections::{HashMap, HashSet};
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
    logs: Mutex<Logs>,
}

#[derive(Debug, Default)]
struct Logs {
    by_key: HashMap<LogKey, Published>,
    /// Logs whose replica set was published since `take_changed` (what heartbeats report).
    changed: HashSet<LogKey>,
    /// Logs short of R complete copies, and short of min_insync_replicas: kept as sets are
    /// published, so a publication costs the same with one log as with fifty thousand.
    under_replicated: u32,
    below_min_insync: u32,
}

impl Logs {
    /// `log`'s entry for `by`: a new publisher starts from nothing.
    fn entry(&mut self, log: LogKey, by: Publisher) -> &mut Published {
        if self.by_key.get(&log).is_some_and(|p| p.by != by) {
            self.remove(log);
        }
        let entry = self.by_key.entry(log).or_default();
        entry.by = by;
        entry
    }

    fn remove(&mut self, log: LogKey) {
        if let Some(gone) = self.by_key.remove(&log) {
            self.count(gone.health.as_ref(), false);
        }
    }

    /// Adds (or takes away) one log's contribution to the gauges' counts.
    fn count(&mut self, health: Option<&(LogReplicaSet, u32, u32)>, add: bool) {
        let Some((set, replicas, min_insync)) = health else {
            return;
        };
        let under = u32::from(set.in_sync_replicas < *replicas);
        let below = u32::from(set.in_sync_replicas < *min_insync);
        if add {
            self.under_replicated += under;
            self.below_min_insync += below;
        } else {
            self.under_replicated -= under;
            self.below_min_insync -= below;
        }
    }

    fn export_gauges(&self) {
        metrics::gauge!(crate::metrics::LOGS_UNDER_REPLICATED)
            .set(f64::from(self.under_replicated));
        metrics::gauge!(crate::metrics::LOGS_BELOW_MIN_INSYNC)
            .set(f64::from(self.below_min_insync));
    }
}

impl ReplicaPlacements {
    /// Replaces one log's list.
    pub fn publish(&self, log: LogKey, by: Publisher, segments: Vec<SegmentReplicas>) {
        self.lock().entry(log, by).segments = segments;
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
        let mut logs = self.lock();
        let health = Some((set, replicas, min_insync));
        let was = std::mem::replace(&mut logs.entry(log, by).health, health.clone());
        logs.count(was.as_ref(), false);
        logs.count(health.as_ref(), true);
        logs.changed.insert(log);
        logs.export_gauges();
    }

    /// Forgets a log that `by` no longer replicates here (unless another publisher took it
    /// over meanwhile).
    pub fn remove(&self, log: LogKey, by: Publisher) {
        let mut logs = self.lock();
        if logs.by_key.get(&log).is_some_and(|p| p.by == by) {
            logs.remove(log);
        }
        logs.export_gauges();
    }

    /// One log's list (empty if it has none).
    pub fn of(&self, log: LogKey) -> Vec<SegmentReplicas> {
        self.lock()
            .by_key
            .get(&log)
            .map(|p| p.segments.clone())
            .unwrap_or_default()
    }

    /// One log's replica set, as last published, and by whom.
    pub fn health_of(&self, log: LogKey) -> Option<(Publisher, LogReplicaSet)> {
        let logs = self.lock();
        let published = logs.by_key.get(&log)?;
        let (set, ..) = published.health.as_ref()?;
        Some((published.by, set.clone()))
    }

    /// Every log with a published replica set.
    pub fn keys_with_health(&self) -> Vec<LogKey> {
        self.lock()
            .by_key
            .iter()
            .filter(|(_, p)| p.health.is_some())
            .map(|(key, _)| *key)
            .collect()
    }

    /// The logs whose replica set was published since the last call.
    pub fn take_changed(&self) -> Vec<LogKey> {
        self.lock().changed.drain().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Logs> {
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
        assert_eq!(placements.health_of(key), Some((second, set)));
        assert_eq!(placements.keys_with_health(), vec![key]);
        placements.remove(key, second);
        assert!(placements.keys_with_health().is_empty());
    }

    #[test]
    fn gauge_counts_follow_publications_and_changed_logs_are_taken_once() {
        let placements = ReplicaPlacements::default();
        let set = |in_sync_replicas| LogReplicaSet {
            log: LogId(0),
            backups: Vec::new(),
            in_sync: Vec::new(),
            in_sync_replicas,
        };
        let counts = |p: &ReplicaPlacements| {
            let logs = p.lock();
            (logs.under_replicated, logs.below_min_insync)
        };
        let (a, b) = (
            (StreamId(1), StreamletId(0), LogId(0)),
            (StreamId(2), StreamletId(0), LogId(0)),
        );
        let (first, second) = (new_publisher(), new_publisher());
        placements.publish_health(a, first, set(0), 2, 1);
        placements.publish_health(b, first, set(1), 2, 1);
        assert_eq!(counts(&placements), (2, 1));
        placements.publish_health(a, first, set(2), 2, 1);
        assert_eq!(counts(&placements), (1, 0));
        // A new publisher's entry replaces the old one's contribution.
        placements.publish_health(b, second, set(0), 2, 1);
        assert_eq!(counts(&placements), (1, 1));
        placements.remove(b, second);
        assert_eq!(counts(&placements), (0, 0));
        let mut changed = placements.take_changed();
        changed.sort();
        assert_eq!(changed, vec![a, b]);
        assert!(placements.take_changed().is_empty());
        assert_eq!(placements.health_of(a), Some((first, set(2))));
        assert_eq!(placements.keys_with_health(), vec![a]);
    }
}
