//! Where the replicas of each replicated log's segments in flight are: what the admin port
//! (and the console) shows as replica placement. Each log's replicator publishes its list
//! when it changes (a segment opened its replicas, a backup was replaced, a segment closed
//! on all of them), not on every append.

use std::collections::HashMap;
use std::sync::Mutex;
pub use tailstream_wire::messages::SegmentReplicas;
use tailstream_wire::{LogId, StreamId, StreamletId};

type LogKey = (StreamId, StreamletId, LogId);

/// Every replicated log's segments in flight, by log.
#[derive(Debug, Default)]
pub struct ReplicaPlacements {
    logs: Mutex<HashMap<LogKey, Vec<SegmentReplicas>>>,
}

impl ReplicaPlacements {
    /// Replaces one log's list.
    pub fn publish(&self, log: LogKey, segments: Vec<SegmentReplicas>) {
        self.lock().insert(log, segments);
    }

    /// Forgets a log that is no longer replicated here.
    pub fn remove(&self, log: LogKey) {
        self.lock().remove(&log);
    }

    /// One log's list (empty if it has none).
    pub fn of(&self, log: LogKey) -> Vec<SegmentReplicas> {
        self.lock().get(&log).cloned().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LogKey, Vec<SegmentReplicas>>> {
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
