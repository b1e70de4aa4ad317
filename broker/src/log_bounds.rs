//! What the coordinator durably knows of each owned replicated log: its head (a segment whose
//! log digest is on its replicas), its open segment (the one acknowledgements may go into past
//! the head, at replica epochs up to a bound) and its oldest kept segment.
//!
//! A replicated log commits (acknowledges, shows consumers) a record only in a segment the
//! coordinator has saved as at most its head, or as its open segment at the segment's current
//! replica epoch; it frees a retired segment's replicas only once the coordinator has saved an
//! oldest kept segment past it. So whatever crashes (the owner, its backups, the coordinator),
//! recovery knows exactly which segments it must find (the open one may instead be proven
//! empty by a current copy), and a log missing one is declared lost, never served shorter.
//! One exception: while no coordinator leads (the lease's leaderless extension), a segment at
//! its first replica epoch on all R backups commits before it is saved, since nothing could
//! save it then and recovery finds it whole on any backup that holds it; it is saved once a
//! leader answers. Until then, a loss beyond what R copies survive (the owner and every copy
//! of that segment) would go unnamed: recovery would serve the log without the segment.
//!
//! The next segment's replicas are opened while the head fills, and saved as the open segment
//! as soon as they are (with the head moved up to the segment before it, once that one's digest
//! is on its replicas), so a roll normally finds its new segment already saved and waits for
//! nothing. Replicators say what they need ([`LogBoundsBook::want`]); a reporter task of the
//! membership, on a connection of its own, sends it at once and records what the coordinator
//! saved ([`LogBoundsBook::made_durable`]), which wakes the replicators waiting on it. Logs no
//! longer owned here are no longer asked for.

use crate::replication::placements::LogKey;
use std::collections::HashMap;
use std::sync::Mutex;
use tailstream_wire::messages::{LogBounds, OpenSegment};
use tailstream_wire::{ReplicaEpoch, SegmentId};
use tokio::sync::{Notify, watch};

/// A log's oldest kept segment, head and open segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    pub oldest: SegmentId,
    pub head: SegmentId,
    pub open: Option<OpenSegment>,
}

impl Kept {
    fn raise(&mut self, to: Kept) {
        self.oldest = self.oldest.max(to.oldest);
        self.head = self.head.max(to.head);
        self.open = self.open.max(to.open);
    }

    /// Whether having saved `self` allows all that saving `other` would.
    pub fn covers(&self, other: &Kept) -> bool {
        self.oldest >= other.oldest
            && self.head >= other.head
            && other
                .open
                .is_none_or(|o| o.segment < self.head || self.open >= Some(o))
    }

    /// Whether a record may be acknowledged in `segment` at replica epoch `epoch`: the
    /// segment is older than the head (sealed; recovery must find it), or the head itself when
    /// it is not the open segment, or the open segment at an epoch it was saved with.
    pub fn allows_commit(&self, segment: SegmentId, epoch: ReplicaEpoch) -> bool {
        match self.open {
            Some(open) if open.segment == segment && segment >= self.head => open.epoch >= epoch,
            _ => segment <= self.head,
        }
    }

    fn from_wire(bounds: &LogBounds) -> Self {
        Self {
            oldest: bounds.oldest,
            head: bounds.head,
            open: bounds.open,
        }
    }
}

#[derive(Debug, Default)]
struct Book {
    /// What replicators asked for and the coordinator did not save yet.
    wanted: HashMap<LogKey, Kept>,
    /// What the coordinator answered it saved (it only grows there too).
    durable: HashMap<LogKey, Kept>,
}

#[derive(Debug)]
pub struct LogBoundsBook {
    book: Mutex<Book>,
    /// Signalled when something new is wanted (a permit is kept if nobody waits).
    wanted: Notify,
    /// Bumped whenever a commit may go further than before: something became durable, or
    /// no coordinator leads any more (see `Replicator::commit_unsaved_leaderless`).
    durable: watch::Sender<u64>,
}

impl Default for LogBoundsBook {
    fn default() -> Self {
        Self {
            book: Mutex::default(),
            wanted: Notify::new(),
            durable: watch::Sender::new(0),
        }
    }
}

impl LogBoundsBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the coordinator saved for `key`, if anything.
    pub fn durable(&self, key: LogKey) -> Option<Kept> {
        self.lock().durable.get(&key).copied()
    }

    /// Asks for `kept` to be made durable for `key` (no-op when it already is or was asked).
    pub fn want(&self, key: LogKey, kept: Kept) {
        let mut book = self.lock();
        if book.durable.get(&key).is_some_and(|d| d.covers(&kept)) {
            return;
        }
        let raised = match book.wanted.get_mut(&key) {
            None => {
                book.wanted.insert(key, kept);
                true
            }
            Some(wanted) if !wanted.covers(&kept) => {
                wanted.raise(kept);
                true
            }
            Some(_) => false,
        };
        drop(book);
        if raised {
            self.wanted.notify_one();
        }
    }

    /// Stops asking for the logs `keep` rejects (streamlets no longer owned here: the
    /// coordinator would refuse them, and a stale head must never be saved if the streamlet
    /// comes back). What was saved stays known: saved bounds only grow.
    pub fn retain_wanted(&self, keep: impl Fn(&LogKey) -> bool) {
        self.lock().wanted.retain(|key, _| keep(key));
    }

    /// Waits until something new is wanted.
    pub async fn something_wanted(&self) {
        self.wanted.notified().await;
    }

    /// What is wanted and not yet durable, to send: at most `most` of it.
    pub fn pending(&self, most: usize) -> Vec<LogBounds> {
        self.lock()
            .wanted
            .iter()
            .take(most)
            .map(|(key, kept)| LogBounds {
                stream: key.0,
                streamlet: key.1,
                log: key.2,
                oldest: kept.oldest,
                head: kept.head,
                open: kept.open,
            })
            .collect()
    }

    /// The coordinator saved `saved`: wakes whoever waits for it.
    pub fn made_durable(&self, saved: &[LogBounds]) {
        if saved.is_empty() {
            return;
        }
        {
            let mut book = self.lock();
            for bounds in saved {
                let key = (bounds.stream, bounds.streamlet, bounds.log);
                let kept = Kept::from_wire(bounds);
                let durable = *book
                    .durable
                    .entry(key)
                    .and_modify(|d| d.raise(kept))
                    .or_insert(kept);
                if book.wanted.get(&key).is_some_and(|w| durable.covers(w)) {
                    book.wanted.remove(&key);
                }
            }
        }
        self.durable.send_modify(|version| *version += 1);
    }

    /// No coordinator leads (the lease took its leaderless extension): replicators holding a
    /// commit for want of saved bounds look again, as some may now commit without them.
    pub fn leaderless_began(&self) {
        self.durable.send_modify(|version| *version += 1);
    }

    /// Changes whenever something became durable, or no coordinator leads any more.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.durable.subscribe()
    }

    /// Forgets the logs of deleted streams.
    pub fn forget_streams(&self, deleted: &[tailstream_wire::StreamId]) {
        let mut book = self.lock();
        book.wanted.retain(|key, _| !deleted.contains(&key.0));
        book.durable.retain(|key, _| !deleted.contains(&key.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::{LogId, StreamId, StreamletId};

    const KEY: LogKey = (StreamId(1), StreamletId(0), LogId(0));

    fn kept(oldest: u64, head: u64) -> Kept {
        Kept {
            oldest: SegmentId(oldest),
            head: SegmentId(head),
            open: None,
        }
    }

    fn open(segment: u64, epoch: ReplicaEpoch) -> Option<OpenSegment> {
        Some(OpenSegment {
            segment: SegmentId(segment),
            epoch,
        })
    }

    fn saved(oldest: u64, head: u64) -> LogBounds {
        LogBounds {
            stream: KEY.0,
            streamlet: KEY.1,
            log: KEY.2,
            oldest: SegmentId(oldest),
            head: SegmentId(head),
            open: None,
        }
    }

    #[test]
    fn commits_go_up_to_the_head_and_into_the_open_segment_at_its_saved_epoch() {
        let saved = Kept {
            open: open(5, ReplicaEpoch(1)),
            ..kept(0, 3)
        };
        assert!(saved.allows_commit(SegmentId(2), ReplicaEpoch(9)));
        assert!(saved.allows_commit(SegmentId(3), ReplicaEpoch(9)));
        assert!(!saved.allows_commit(SegmentId(4), ReplicaEpoch(0)));
        assert!(saved.allows_commit(SegmentId(5), ReplicaEpoch(0)));
        assert!(saved.allows_commit(SegmentId(5), ReplicaEpoch(1)));
        // A replacement raised the segment's epoch: its copies at epoch 1 may be stale.
        assert!(!saved.allows_commit(SegmentId(5), ReplicaEpoch(2)));
        assert!(!saved.allows_commit(SegmentId(6), ReplicaEpoch(0)));
        // The head as the open segment keeps its epoch bound; an open segment the head
        // passed binds nothing.
        let head_open = Kept {
            open: open(3, ReplicaEpoch(0)),
            ..kept(0, 3)
        };
        assert!(!head_open.allows_commit(SegmentId(3), ReplicaEpoch(1)));
        let passed = Kept {
            open: open(2, ReplicaEpoch(0)),
            ..kept(0, 3)
        };
        assert!(passed.allows_commit(SegmentId(2), ReplicaEpoch(4)));
        // Covering: a higher open segment, or a higher epoch of it, is new; one below the
        // head is not.
        assert!(!saved.covers(&Kept {
            open: open(5, ReplicaEpoch(2)),
            ..kept(0, 3)
        }));
        assert!(saved.covers(&Kept {
            open: open(5, ReplicaEpoch(0)),
            ..kept(0, 3)
        }));
        assert!(saved.covers(&Kept {
            open: open(2, ReplicaEpoch(7)),
            ..kept(0, 3)
        }));
        assert!(!saved.covers(&Kept {
            open: open(6, ReplicaEpoch(0)),
            ..kept(0, 3)
        }));
    }

    #[test]
    fn wanted_bounds_are_pending_until_saved_and_only_grow() {
        let book = LogBoundsBook::default();
        let mut changes = book.subscribe();
        assert_eq!(book.durable(KEY), None);
        book.want(KEY, kept(0, 2));
        book.want(KEY, kept(1, 1));
        assert_eq!(book.pending(usize::MAX), vec![saved(1, 2)]);
        // Saved for less than wanted: still pending.
        book.made_durable(&[saved(0, 2)]);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(book.durable(KEY), Some(kept(0, 2)));
        assert_eq!(book.pending(usize::MAX), vec![saved(1, 2)]);
        book.made_durable(&[saved(1, 2)]);
        assert!(book.pending(usize::MAX).is_empty());
        // A streamlet no longer owned here is no longer asked for.
        book.want(KEY, kept(1, 5));
        book.retain_wanted(|key| *key != KEY);
        assert!(book.pending(usize::MAX).is_empty());
        // Already durable: nothing to send.
        book.want(KEY, kept(0, 1));
        assert!(book.pending(usize::MAX).is_empty());
        book.forget_streams(&[KEY.0]);
        assert_eq!(book.durable(KEY), None);
    }
}
