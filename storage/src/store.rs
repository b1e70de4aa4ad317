//! Every streamlet this broker owns, keyed by (stream, streamlet), and what they share: the
//! segment memory budget.

use super::commit_feed::{CommitFeed, LogKey};
use super::error::StorageError;
use super::log::Appended;
use super::memory::SegmentMemory;
use super::producers::ProducerOwner;
use super::streamlet::Streamlet;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tailstream_wire::batch::BatchInfo;
use tailstream_wire::messages::StreamletAssignment;
use tailstream_wire::{LogId, StreamId, StreamletId};

type Key = (StreamId, StreamletId);

#[derive(Debug)]
pub struct Store {
    memory: SegmentMemory,
    producers_per_log_max: usize,
    replication_backlog_bytes_max: u64,
    streamlets: RwLock<HashMap<Key, Arc<Streamlet>>>,
    /// The names of the streams assigned here (access control rules name streams), as the
    /// assignments gave them; a stream id is never reused for another name.
    names: RwLock<HashMap<StreamId, Arc<str>>>,
    /// Logs whose commit point moved (what heartbeats report, without a scan of every log).
    commit_feed: Arc<CommitFeed>,
}

impl Store {
    pub fn new(
        segment_memory_bytes_max: u64,
        producers_per_log_max: usize,
        replication_backlog_bytes_max: u64,
    ) -> Self {
        Self {
            memory: SegmentMemory::new(segment_memory_bytes_max),
            producers_per_log_max,
            replication_backlog_bytes_max,
            streamlets: RwLock::new(HashMap::new()),
            names: RwLock::new(HashMap::new()),
            commit_feed: Arc::default(),
        }
    }

    pub fn memory(&self) -> &SegmentMemory {
        &self.memory
    }

    pub fn get(
        &self,
        stream: StreamId,
        streamlet: StreamletId,
    ) -> Result<Arc<Streamlet>, StorageError> {
        let streamlets = self.streamlets.read().unwrap_or_else(|p| p.into_inner());
        streamlets
            .get(&(stream, streamlet))
            .cloned()
            .ok_or(StorageError::NotOwner)
    }

    /// The name of stream `stream`, if one of its streamlets was assigned here.
    pub fn stream_name(&self, stream: StreamId) -> Option<Arc<str>> {
        let names = self.names.read().unwrap_or_else(|p| p.into_inner());
        names.get(&stream).cloned()
    }

    /// Learns the names of the streams of `assignments`; with `held` (the streamlets held
    /// after a whole assignment), forgets those of streams neither assigned nor held.
    fn learn_names(
        &self,
        assignments: &[StreamletAssignment],
        held: Option<&HashMap<Key, Arc<Streamlet>>>,
    ) {
        let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = held {
            let mut kept: HashSet<StreamId> = held.keys().map(|(stream, _)| *stream).collect();
            kept.extend(assignments.iter().map(|a| a.stream));
            names.retain(|stream, _| kept.contains(stream));
        }
        for assignment in assignments {
            if names.get(&assignment.stream).map(|n| &**n) != Some(&assignment.stream_name) {
                names.insert(
                    assignment.stream,
                    Arc::from(assignment.stream_name.as_str()),
                );
            }
        }
    }

    /// Makes the owned set `assignments` (as of coordinator metadata `version`): creates the
    /// streamlets that are new (not those being recovered: a `RecoverStreamlet` brings them),
    /// gives every owned one its epoch and whether it serves, and drops those no longer
    /// assigned here (unless created for a newer version than this assignment). Returns (the
    /// created streamlets, how many were dropped).
    pub fn apply_assignments(
        &self,
        version: u64,
        assignments: &[StreamletAssignment],
    ) -> (Vec<Arc<Streamlet>>, usize) {
        let mut streamlets = self.streamlets.write().unwrap_or_else(|p| p.into_inner());
        let wanted: HashMap<Key, &StreamletAssignment> = assignments
            .iter()
            .map(|a| ((a.stream, a.streamlet), a))
            .collect();
        let before = streamlets.len();
        streamlets.retain(|key, streamlet| {
            let keep = wanted.contains_key(key) || streamlet.created_version() > version;
            if !keep {
                streamlet.retire();
            }
            keep
        });
        let dropped = before - streamlets.len();
        let created = wanted
            .into_values()
            .filter_map(|assignment| self.take_on(&mut streamlets, assignment))
            .collect();
        self.learn_names(assignments, Some(&streamlets));
        (created, dropped)
    }

    /// Applies assignments that only add to what this store holds (`apply_assignments`
    /// without dropping anything). Returns the streamlets created.
    pub fn add_assignments(&self, assignments: &[StreamletAssignment]) -> Vec<Arc<Streamlet>> {
        self.learn_names(assignments, None);
        let mut streamlets = self.streamlets.write().unwrap_or_else(|p| p.into_inner());
        assignments
            .iter()
            .filter_map(|assignment| self.take_on(&mut streamlets, assignment))
            .collect()
    }

    /// One assignment: a held streamlet takes its epoch and state; a new one serving from
    /// the start is created (one being rebuilt arrives through `insert_recovered`).
    fn take_on(
        &self,
        streamlets: &mut HashMap<Key, Arc<Streamlet>>,
        assignment: &StreamletAssignment,
    ) -> Option<Arc<Streamlet>> {
        let key = (assignment.stream, assignment.streamlet);
        if let Some(existing) = streamlets.get(&key) {
            // Starts first: a streamlet that becomes servable here never serves a record the
            // assignment says is deleted.
            existing.set_log_starts(&assignment.log_starts);
            existing.set_ownership(assignment.epoch, !assignment.recovering);
            let config = &assignment.config;
            if existing.set_retention(config.retention_ms, config.retention_bytes) {
                tracing::info!(
                    stream = %assignment.stream_name,
                    streamlet = assignment.streamlet.0,
                    retention_ms = config.retention_ms,
                    retention_bytes = config.retention_bytes,
                    "retention changed"
                );
            }
            return None;
        }
        if assignment.recovering {
            return None;
        }
        let streamlet = Arc::new(Streamlet::new(
            assignment.stream,
            assignment.streamlet,
            assignment.config.clone(),
            self.memory.clone(),
            self.producers_per_log_max,
            self.replication_backlog_bytes_max,
        ));
        streamlet.set_log_starts(&assignment.log_starts);
        streamlet.set_ownership(assignment.epoch, true);
        streamlet.link_commit_feed(&self.commit_feed);
        streamlets.insert(key, streamlet.clone());
        Some(streamlet)
    }

    /// Adds a streamlet recovery rebuilt; an existing one at the same or a newer epoch stays
    /// (a retried recovery finds its first rebuild). Returns the streamlet now held, and
    /// whether it is the one given.
    pub fn insert_recovered(&self, rebuilt: Arc<Streamlet>) -> (Arc<Streamlet>, bool) {
        let mut streamlets = self.streamlets.write().unwrap_or_else(|p| p.into_inner());
        let key = (rebuilt.stream(), rebuilt.id());
        match streamlets.get(&key) {
            Some(existing) if existing.epoch() >= rebuilt.epoch() => (existing.clone(), false),
            _ => {
                rebuilt.link_commit_feed(&self.commit_feed);
                if let Some(replaced) = streamlets.insert(key, rebuilt.clone()) {
                    replaced.retire();
                }
                (rebuilt, true)
            }
        }
    }

    /// Drops every streamlet (this incarnation was declared crashed: it serves nothing more).
    pub fn clear(&self) -> usize {
        let mut streamlets = self.streamlets.write().unwrap_or_else(|p| p.into_inner());
        let dropped = streamlets.len();
        for streamlet in streamlets.values() {
            streamlet.retire();
        }
        streamlets.clear();
        dropped
    }

    /// The logs whose commit point moved since the last call (each once; a log created or
    /// rebuilt here counts as moved). Keys of logs no longer held may be among them.
    pub fn take_moved_logs(&self) -> Vec<LogKey> {
        self.commit_feed.take()
    }

    /// Segment memory not yet reserved.
    pub fn segment_memory_free_bytes(&self) -> u64 {
        self.memory
            .bytes_max()
            .saturating_sub(self.memory.used_bytes())
    }

    /// The memory budget and limits a rebuilt streamlet is made with.
    pub fn rebuild_limits(&self) -> (SegmentMemory, usize, u64) {
        (
            self.memory.clone(),
            self.producers_per_log_max,
            self.replication_backlog_bytes_max,
        )
    }

    /// Whether `streamlet` is still owned here (not dropped by a newer assignment).
    pub fn owns(&self, streamlet: &Arc<Streamlet>) -> bool {
        self.get(streamlet.stream(), streamlet.id())
            .is_ok_and(|s| Arc::ptr_eq(&s, streamlet))
    }

    pub fn streamlets(&self) -> Vec<Arc<Streamlet>> {
        let streamlets = self.streamlets.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = streamlets.values().cloned().collect();
        all.sort_by_key(|s| (s.stream(), s.id()));
        all
    }

    /// One retention pass over every streamlet; returns the bytes freed.
    pub fn enforce_retention(&self, now: Instant) -> u64 {
        self.streamlets()
            .iter()
            .map(|s| s.enforce_retention(now))
            .sum()
    }

    /// Appends to `streamlet`. When segment memory is full, runs a retention pass first and
    /// tries once more, so producers see backpressure only when retention cannot free anything
    /// (not merely because the periodic pass has not run yet).
    pub fn append(
        &self,
        streamlet: &Streamlet,
        log: LogId,
        batch: &[u8],
        info: &BatchInfo,
        owner: ProducerOwner,
        now: Instant,
    ) -> Result<Appended, StorageError> {
        match streamlet.append(log, batch, info, owner, now) {
            Err(StorageError::Backpressure { .. }) if self.enforce_retention(now) > 0 => {
                streamlet.append(log, batch, info, owner, now)
            }
            outcome => outcome,
        }
    }
}
