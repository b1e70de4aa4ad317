//! Fetch sessions (KIP-227), as a pure state machine: a consumer names its partitions once, in
//! a full fetch with epoch 0, and the broker keeps them under a session id; every later fetch
//! (epoch 1, 2, ...) names only the partitions whose fetch position moved or that it stops
//! reading, and its answer carries only the partitions with something new: records, an error,
//! or a high watermark or log start the client has not been told. A consumer of many quiet
//! partitions then sends and receives a few bytes per fetch instead of all of them.
//!
//! A session belongs to the principal that made it: anyone else naming its id is told it does
//! not exist. Sessions are bounded in number and in partitions kept over all of them; past
//! either, a full fetch gets no session (session id 0, and the client fetches sessionless,
//! which always works), and an incremental fetch that would grow its session past the bound
//! ends the session (FETCH_SESSION_ID_NOT_FOUND: the client starts over with a full fetch).

use kafka_protocol::ResponseError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_auth::Principal;

/// A fetch that opens a new session (and ends the one it names, if any).
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// A fetch that ends the session it names, and fetches sessionless.
pub(crate) const FINAL_EPOCH: i32 = -1;
/// No session.
pub(crate) const NO_SESSION: i32 = 0;

/// A session idle this long may be evicted to make room for a new one (Kafka's
/// `min.incremental.fetch.session.eviction.ms`): a consumer that fetches every few seconds
/// never loses its session to a flood of new ones.
pub(crate) const EVICTABLE_AFTER: Duration = Duration::from_secs(120);

/// Kafka's longest topic name (streams are created within it): a fetch naming a longer one
/// names no topic, and no session keeps it.
pub(crate) const TOPIC_NAME_BYTES_MAX: usize = 249;

/// One partition a fetch reads, as the client last named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FetchedPartition {
    /// Shared by the partitions of one topic: a name is copied once per request, not per
    /// partition.
    pub topic: Arc<str>,
    pub partition: i32,
    pub fetch_offset: i64,
    pub max_bytes: i32,
    /// The leader epoch the client believes current (-1: none).
    pub leader_epoch: i32,
}

/// What a fetch answered for one partition: what decides whether an incremental answer
/// carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answered {
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub has_records: bool,
}

/// What a fetch asks of the sessions.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ask {
    pub session_id: i32,
    pub epoch: i32,
    /// The partitions it names (all of them in a full fetch; those whose position moved, or
    /// new, in an incremental one).
    pub named: Vec<FetchedPartition>,
    /// The partitions it stops reading (incremental only).
    pub forgotten: Vec<(Arc<str>, i32)>,
}

/// How to answer a fetch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The session id the answer carries (`NO_SESSION`: none kept).
    pub session_id: i32,
    /// Incremental: the answer carries only the partitions `finish` keeps. Full: all of them.
    pub incremental: bool,
    /// The partitions to read, in the order the answer lists them.
    pub partitions: Vec<FetchedPartition>,
}

#[derive(Debug)]
struct Kept {
    wanted: FetchedPartition,
    /// What the client was last told of it; `None`: nothing yet (a new partition is always
    /// answered).
    told: Option<(i64, i64)>,
    /// Its place in the session's order: partitions that returned records move to the end, so
    /// the next fetch's byte budget goes to the others first (as Kafka does).
    order: u64,
}

#[derive(Debug)]
struct Session {
    owner: Principal,
    /// The epoch the next incremental fetch must carry.
    epoch: i32,
    partitions: HashMap<(Arc<str>, i32), Kept>,
    next_order: u64,
    last_used: Instant,
}

impl Session {
    fn upsert(&mut self, wanted: FetchedPartition) {
        let key = (wanted.topic.clone(), wanted.partition);
        match self.partitions.get_mut(&key) {
            Some(kept) => kept.wanted = wanted,
            None => {
                let order = self.next_order;
                self.next_order += 1;
                let kept = Kept {
                    wanted,
                    told: None,
                    order,
                };
                self.partitions.insert(key, kept);
            }
        }
    }

    fn in_order(&self) -> Vec<FetchedPartition> {
        let mut kept: Vec<&Kept> = self.partitions.values().collect();
        kept.sort_unstable_by_key(|k| k.order);
        kept.into_iter().map(|k| k.wanted.clone()).collect()
    }
}

/// A broker's fetch sessions.
#[derive(Debug)]
pub(crate) struct FetchSessions {
    sessions: HashMap<i32, Session>,
    sessions_max: usize,
    /// Partitions kept over every session.
    partitions_max: usize,
    partitions: usize,
}

/// Kafka's rule for the epoch after `epoch`: it wraps to 1, never to 0 or below.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

impl FetchSessions {
    pub fn new(sessions_max: usize, partitions_max: usize) -> Self {
        Self {
            sessions: HashMap::new(),
            sessions_max,
            partitions_max,
            partitions: 0,
        }
    }

    /// How many sessions are kept, and how many partitions over all of them.
    pub fn len(&self) -> (usize, usize) {
        (self.sessions.len(), self.partitions)
    }

    /// Starts answering a fetch of `owner`; `Err` is the fetch's top-level error code. `new_id`
    /// draws a candidate id for a new session (random in service, fixed in tests).
    pub fn begin(
        &mut self,
        owner: &Principal,
        ask: Ask,
        now: Instant,
        new_id: impl FnMut() -> i32,
    ) -> Result<Plan, i16> {
        let Ask {
            session_id,
            epoch,
            named,
            forgotten,
        } = ask;
        let keepable = named.iter().all(|p| p.topic.len() <= TOPIC_NAME_BYTES_MAX);
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            // A full fetch ends the session it names (the client is starting over or leaving).
            if session_id != NO_SESSION {
                self.remove_owned(owner, session_id);
            }
            // An empty fetch opens nothing (a session of nothing is only a slot taken).
            let session_id = if epoch == INITIAL_EPOCH && keepable && !named.is_empty() {
                self.open(owner, &named, now, new_id)
            } else {
                NO_SESSION
            };
            return Ok(Plan {
                session_id,
                incremental: false,
                partitions: named,
            });
        }
        let Some(session) = self
            .sessions
            .get_mut(&session_id)
            .filter(|s| s.owner == *owner)
        else {
            return Err(ResponseError::FetchSessionIdNotFound.code());
        };
        if session.epoch != epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch.code());
        }
        let before = session.partitions.len();
        // Named, then forgotten, as Kafka applies them: a partition both named and forgotten
        // leaves.
        for wanted in named {
            session.upsert(wanted);
        }
        for key in &forgotten {
            session.partitions.remove(key);
        }
        let after = session.partitions.len();
        let partitions = self.partitions - before + after;
        if partitions > self.partitions_max || !keepable {
            // Kept as it was would break the bound; the client starts over, and its full
            // fetch is answered sessionless if it is still too big.
            self.sessions.remove(&session_id);
            self.partitions -= before;
            return Err(ResponseError::FetchSessionIdNotFound.code());
        }
        self.partitions = partitions;
        session.epoch = next_epoch(epoch);
        session.last_used = now;
        Ok(Plan {
            session_id,
            incremental: true,
            partitions: session.in_order(),
        })
    }

    /// Records what a fetch answered, partition by partition in the plan's order; returns
    /// which of them the answer carries (all of them for a full fetch).
    pub fn finish(
        &mut self,
        plan: &Plan,
        answered: impl IntoIterator<Item = Answered>,
    ) -> Vec<bool> {
        let answered: Vec<Answered> = answered.into_iter().collect();
        let session = self
            .sessions
            .get_mut(&plan.session_id)
            .filter(|_| plan.session_id != NO_SESSION);
        let Some(session) = session else {
            // No session (or it ended meanwhile, and nothing is remembered): every partition
            // read is carried.
            return vec![true; answered.len()];
        };
        let mut carried = Vec::with_capacity(answered.len());
        for (wanted, answer) in plan.partitions.iter().zip(&answered) {
            let key = (wanted.topic.clone(), wanted.partition);
            let Some(kept) = session.partitions.get_mut(&key) else {
                // Forgotten by a later fetch meanwhile: nothing to remember.
                carried.push(!plan.incremental);
                continue;
            };
            let now_told = (answer.high_watermark, answer.log_start_offset);
            let carry = !plan.incremental
                || answer.error_code != 0
                || answer.has_records
                || kept.told != Some(now_told);
            if carry {
                // After an error the partition is carried again once it clears, as in Kafka.
                kept.told = (answer.error_code == 0).then_some(now_told);
            }
            if answer.has_records {
                kept.order = session.next_order;
                session.next_order += 1;
            }
            carried.push(carry);
        }
        carried
    }

    /// Opens a session for a full fetch of `named`, if there is room (evicting the longest
    /// idle session past `EVICTABLE_AFTER` if that makes room); its id, or `NO_SESSION`.
    fn open(
        &mut self,
        owner: &Principal,
        named: &[FetchedPartition],
        now: Instant,
        mut new_id: impl FnMut() -> i32,
    ) -> i32 {
        if named.len() > self.partitions_max {
            return NO_SESSION;
        }
        while self.sessions.len() >= self.sessions_max
            || self.partitions + named.len() > self.partitions_max
        {
            let idlest = self
                .sessions
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(s.last_used) >= EVICTABLE_AFTER)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| *id);
            let Some(idlest) = idlest else {
                return NO_SESSION;
            };
            self.remove(idlest);
        }
        // Ids are positive and unused; a few draws find one (at most `sessions_max` are used
        // out of 2^31), and a run of bad luck only means this fetch gets no session.
        let Some(id) = (0..16)
            .map(|_| new_id())
            .find(|id| *id > NO_SESSION && !self.sessions.contains_key(id))
        else {
            return NO_SESSION;
        };
        let mut session = Session {
            owner: owner.clone(),
            epoch: 1,
            partitions: HashMap::with_capacity(named.len()),
            next_order: 0,
            last_used: now,
        };
        for wanted in named {
            session.upsert(wanted.clone());
        }
        self.partitions += session.partitions.len();
        self.sessions.insert(id, session);
        id
    }

    fn remove_owned(&mut self, owner: &Principal, session_id: i32) {
        if self
            .sessions
            .get(&session_id)
            .is_some_and(|s| s.owner == *owner)
        {
            self.remove(session_id);
        }
    }

    fn remove(&mut self, session_id: i32) {
        if let Some(session) = self.sessions.remove(&session_id) {
            self.partitions -= session.partitions.len();
        }
    }
}

#[cfg(test)]
#[path = "fetch_sessions_tests.rs"]
mod tests;
