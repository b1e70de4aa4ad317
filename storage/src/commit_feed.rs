//! Which logs' commit points moved since someone last asked: what lets the broker tell the
//! coordinator its logs' heads and committed ends in time proportional to what changed, not
//! to how many logs it owns (a broker may own tens of thousands, and it reports every tenth
//! of a second).
//!
//! Each log the store holds carries a link to the store's feed and a flag: the first commit
//! after a `take` queues the log's key, later ones only find the flag set. So a commit pays
//! one atomic swap, and the feed's lock is taken at most once per log between two takes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tailstream_wire::{LogId, StreamId, StreamletId};

/// A log, as the broker names it.
pub type LogKey = (StreamId, StreamletId, LogId);

/// The logs whose commit point moved since the last `take` (each once).
#[derive(Debug, Default)]
pub struct CommitFeed {
    moved: Mutex<Vec<(LogKey, Arc<AtomicBool>)>>,
}

impl CommitFeed {
    /// The logs queued since the last call, each once. Their flags are cleared here, before
    /// the caller reads any log: a commit after that queues its log again, so the caller
    /// misses no move, though it may read a value it is then told about once more.
    pub fn take(&self) -> Vec<LogKey> {
        let moved = std::mem::take(&mut *self.lock());
        moved
            .into_iter()
            .map(|(key, queued)| {
                // Acquire: whatever the commit published before it set the flag is seen by
                // the caller's reads after this.
                queued.swap(false, Ordering::AcqRel);
                key
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(LogKey, Arc<AtomicBool>)>> {
        self.moved.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One log's link to its store's feed.
#[derive(Debug)]
pub(crate) struct FeedLink {
    key: LogKey,
    feed: Arc<CommitFeed>,
    queued: Arc<AtomicBool>,
}

impl FeedLink {
    pub(crate) fn new(key: LogKey, feed: Arc<CommitFeed>) -> Self {
        Self {
            key,
            feed,
            queued: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The log's commit point moved (called after it is published).
    pub(crate) fn moved(&self) {
        // Release: pairs with `take`'s acquire, so the new commit point is visible to
        // whoever takes this key.
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.feed.lock().push((self.key, self.queued.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> LogKey {
        (StreamId(n), StreamletId(0), LogId(0))
    }

    #[test]
    fn a_log_is_queued_once_between_takes_and_again_after_one() {
        let feed = Arc::new(CommitFeed::default());
        let a = FeedLink::new(key(1), feed.clone());
        let b = FeedLink::new(key(2), feed.clone());
        assert!(feed.take().is_empty());
        a.moved();
        a.moved();
        b.moved();
        a.moved();
        assert_eq!(feed.take(), vec![key(1), key(2)]);
        assert!(feed.take().is_empty());
        b.moved();
        assert_eq!(feed.take(), vec![key(2)]);
    }
}
