//! The coordinator's live state and the one way to change it.
//!
//! Reads take a short lock on the in-memory state. A change is applied to a copy of the
//! metadata, saved through the [`MetadataStore`] on the blocking pool, and only then installed
//! and answered: a change anyone saw acknowledged survives a coordinator crash, a failed save
//! changes nothing, and no connection's reader task ever waits for a disk. Changes run one at a
//! time (an async lock held across the save), so each builds on the last.

use crate::additions::Additions;
use crate::liveness::Liveness;
use crate::metadata::{Metadata, MetadataError};
use crate::persist::MetadataStore;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tailstream_net::Response;
use tailstream_stubs::BrokerPeerApi;
use tailstream_wire::messages::{
    AssignStreamletsRequest, BrokerInfo, LogEnd, LogHead, LogReplicaSet, LogReplication,
    PlacementState, StreamMetadata, StreamletAssignment,
};
use tailstream_wire::{LogId, RecordOffset, SegmentId, ServerId, Status, StreamId, StreamletId};

/// Slack for the wall clock when judging how long ago a crash was declared.
const DECLARED_AGO_MARGIN_MS: u64 = 2_000;

/// What the coordinator holds in memory.
#[derive(Debug)]
pub struct State {
    pub metadata: Metadata,
    pub liveness: Liveness,
    /// Each log's newest segment, as its owner last reported it (memory only: after a
    /// coordinator restart, recovery cannot tell a lost newest segment from a missing one
    /// until the owners report again).
    /// Ordered, so one streamlet's logs are a range (recovery plans look them up per streamlet).
    pub heads: BTreeMap<(StreamId, StreamletId, LogId), SegmentId>,
    /// Segment memory each broker had left at its last heartbeat (memory only).
    pub memory_free_bytes: HashMap<ServerId, u64>,
    /// Each log's committed end, as its owner last reported it (memory only; for consumer
    /// group lag).
    pub log_ends: HashMap<(StreamId, StreamletId, LogId), RecordOffset>,
    /// Each replicated log's replica set, and who reported it (memory only: shown for a
    /// streamlet only while the reporter is still its owner).
    pub replication: HashMap<(StreamId, StreamletId, LogId), (ServerId, LogReplicaSet)>,
    /// Crashed incarnations this coordinator's own probes found nothing listening for (memory
    /// only): their process is gone, so no lease of theirs needs waiting out.
    pub proven_gone: HashSet<ServerId>,
    /// Recent changes that only added streamlets (memory only: a new leader starts without,
    /// and sends full assignments until it has some).
    pub additions: Additions,
}

impl State {
    /// The registered brokers heard from recently enough to be alive: where new streamlets
    /// may go.
    pub fn live_brokers(&self, now: Instant) -> Vec<ServerId> {
        self.metadata
            .brokers
            .iter()
            .map(|b| b.server_id)
            .filter(|id| self.liveness.is_alive(*id, now))
            .collect()
    }

    /// `server` registered (a new broker, or a new incarnation of one back at its address).
    /// What was last heard of an incarnation it replaces is kept while that one is listed as
    /// crashed: its lease ran from that last heartbeat, and recovery must wait it out before
    /// handing its streamlets over (forgetting it made the lease look over at once).
    pub fn broker_registered(&mut self, server: ServerId, now: Instant) {
        self.liveness.heard(server, now);
        // A new incarnation holds no lease yet, let alone an extension.
        self.liveness.heard_clean(server, now);
        let crashed = self.metadata.crashed();
        let metadata = &self.metadata;
        self.liveness
            .retain(|id| crashed.contains(&id) || metadata.check_server(id).is_ok());
        self.proven_gone.retain(|id| crashed.contains(id));
    }

    /// When every crashed generation's lease has surely run out, given leases of `lease`:
    /// each was renewed at the latest by the last heartbeat this coordinator answered (or,
    /// for one never heard since this coordinator started, at the start). With
    /// `leaderless = (since, length)`: a generation not heard from since `since` (the start of
    /// this coordinator's present stretch of leadership) may have heard "not leading" and
    /// served on for `length` after its last renewal, which came before `since`. Generations
    /// proven gone wait for nothing.
    pub fn leases_end(
        &self,
        lease: Duration,
        leaderless: Option<(Instant, Duration)>,
    ) -> Option<Instant> {
        self.lease_waits(lease, leaderless, None)
            .into_iter()
            .map(|(_, end, _)| end)
            .max()
    }

    /// Per crashed generation: when its lease surely ended, and whether that end is the
    /// leaderless one (see [`Self::leases_end`]). A generation proven gone (this coordinator's
    /// probes found nothing listening at its address) waits only for its short lease: a
    /// refusal is strong evidence, not proof (a firewall can refuse for a live process), and
    /// the short wait overlaps the rebuild anyway; so does one declared longer ago than the
    /// leaderless lease. With `of`, only the generations that owned that streamlet (its recoveries'
    /// crashed brokers) and were not waited for already: no other can serve it.
    pub fn lease_waits(
        &self,
        lease: Duration,
        leaderless: Option<(Instant, Duration)>,
        of: Option<(StreamId, StreamletId)>,
    ) -> Vec<(ServerId, Instant, bool)> {
        let owners: Option<HashSet<ServerId>> = of
            .map(|key| {
                self.metadata
                    .recoveries
                    .iter()
                    .filter(|r| r.streamlets.contains(&key))
                    // A recovery done with nothing lost handed its streamlets over, after
                    // waiting out its crashed owner's lease; one that lost some did not.
                    .filter(|r| {
                        r.phase != crate::metadata::RecoveryPhase::Done || !r.lost.is_empty()
                    })
                    .map(|r| r.crashed)
                    .collect::<HashSet<_>>()
            })
            // No record names it (none should be missing): every crashed generation.
            .filter(|owners| !owners.is_empty());
        self.metadata
            .crashed()
            .into_iter()
            .filter(|server| owners.as_ref().is_none_or(|o| o.contains(server)))
            .map(|server| {
                let end = self.liveness.last_heard(server) + lease;
                let heard_clean = self.liveness.clean_heartbeat_at(server);
                match leaderless {
                    Some((since, length))
                        if !self.proven_gone.contains(&server)
                            && !self.declared_before(server, length)
                            && heard_clean.is_none_or(|at| at <= since)
                            && since + length > end =>
                    {
                        (server, since + length, true)
                    }
                    _ => (server, end, false),
                }
            })
            .collect()
    }

    /// Whether `server` was declared crashed more than `length` (plus a margin for the wall
    /// clock) ago: no renewal reached it since, so no extension of its can still run (an
    /// extension ends `length` after the last renewal).
    fn declared_before(&self, server: ServerId, length: Duration) -> bool {
        let ago_ms_min = length.as_millis() as u64 + DECLARED_AGO_MARGIN_MS;
        let now_ms = unix_ms();
        self.metadata
            .recoveries
            .iter()
            .filter(|r| r.crashed == server)
            .any(|r| now_ms.saturating_sub(r.declared_at_ms) > ago_ms_min)
    }

    /// The membership as this coordinator sees it now (heartbeat answers and assignments
    /// carry it).
    pub fn broker_infos(&self) -> Vec<BrokerInfo> {
        let now = Instant::now();
        self.metadata
            .broker_infos(|id| self.liveness.is_alive(id, now))
    }

    /// What `server` must own now, with the membership to choose its backups from.
    pub fn assignments_for(&self, server: ServerId) -> AssignStreamletsRequest {
        self.metadata.assignments_for(server, self.broker_infos())
    }

    /// What takes `server` from the assignment version it `known`s to the current one: only
    /// what was added, when every change in between only added streamlets (and its last full
    /// set is recent); else its full assignment.
    pub fn assignments_since(&mut self, server: ServerId, known: u64) -> AssignStreamletsRequest {
        let version = self.metadata.version;
        let now = Instant::now();
        match self.additions.since(server, known, version, now) {
            Some(assignments) => AssignStreamletsRequest {
                term: self.metadata.term,
                target: server,
                version,
                added_since: Some(known),
                assignments,
                brokers: self.broker_infos(),
            },
            None => {
                self.additions.sent_full(server, now);
                self.assignments_for(server)
            }
        }
    }

    /// `metadata` with each serving streamlet's replica sets, as its current owner last
    /// reported them.
    pub fn with_replication(&self, mut metadata: StreamMetadata) -> StreamMetadata {
        if metadata.config.replicas == 0 {
            return metadata;
        }
        for placement in &mut metadata.streamlets {
            if placement.state != PlacementState::Serving {
                continue;
            }
            placement.replication = (0..metadata.config.logs_per_streamlet)
                .filter_map(|log| {
                    let key = (metadata.id, placement.streamlet, LogId(log));
                    self.replication
                        .get(&key)
                        .filter(|(reporter, _)| *reporter == placement.owner)
                        .map(|(_, set)| set.clone())
                })
                .collect();
        }
        metadata
    }

    /// Streamlets serving with a log short of R copies, per their owners' last reports (as
    /// `with_replication` shows them, without copying every stream: the gauges ask for this
    /// every half second, and a cluster may hold 160,000 streamlets).
    pub fn under_replicated_streamlets(&self) -> usize {
        let mut under = 0;
        for stream in self.metadata.streams.values() {
            let replicas = stream.config.replicas;
            if replicas == 0 {
                continue;
            }
            for (streamlet, placement) in stream.streamlet_ids() {
                if placement.state != PlacementState::Serving {
                    continue;
                }
                let short = (0..stream.config.logs_per_streamlet).any(|log| {
                    self.replication
                        .get(&(stream.id, streamlet, LogId(log)))
                        .is_some_and(|(reporter, set)| {
                            *reporter == placement.owner && set.in_sync_replicas < replicas
                        })
                });
                under += usize::from(short);
            }
        }
        under
    }

    /// Takes what a broker's heartbeat reports of its logs: heads, committed ends, replica
    /// sets. Only a streamlet's current owner speaks for its logs. Another broker may still
    /// hold a rebuild of it for a while (a target whose order a restarted coordinator planned
    /// again elsewhere): its reports would overwrite the owner's, and the owner re-sends only
    /// what changes, so an idle log would show the stale broker's report, or none, for good.
    pub fn take_reports(
        &mut self,
        reporter: ServerId,
        heads: &[LogHead],
        ends: &[LogEnd],
        replication: Vec<LogReplication>,
    ) {
        if heads.is_empty() && ends.is_empty() && replication.is_empty() {
            return;
        }
        // One index per heartbeat, not a walk of every stream per entry: after a failover a
        // broker's heartbeats carry thousands of entries each, under this lock.
        let by_id = self.metadata.streams_by_id();
        let owns = |stream: StreamId, streamlet: StreamletId| {
            by_id
                .get(&stream)
                .and_then(|s| s.placements.get(streamlet.0 as usize))
                .is_some_and(|p| p.owner == reporter)
        };
        for head in heads {
            if owns(head.stream, head.streamlet) {
                self.heads
                    .insert((head.stream, head.streamlet, head.log), head.segment);
            }
        }
        for end in ends {
            if owns(end.stream, end.streamlet) {
                self.log_ends
                    .insert((end.stream, end.streamlet, end.log), end.committed_offset);
            }
        }
        for set in replication {
            if owns(set.stream, set.streamlet) {
                let key = (set.stream, set.streamlet, set.replicas.log);
                self.replication.insert(key, (reporter, set.replicas));
            }
        }
    }

    /// Whether `server` is the current owner (serving, or the target of its rebuild) of one
    /// streamlet: only it reports that streamlet's logs.
    pub fn is_owner(&self, server: ServerId, stream: StreamId, streamlet: StreamletId) -> bool {
        self.metadata
            .stream_by_id(stream)
            .and_then(|s| s.placements.get(streamlet.0 as usize))
            .is_some_and(|p| p.owner == server)
    }

    /// The reported heads of one streamlet's logs.
    pub fn heads_of(&self, stream: StreamId, streamlet: StreamletId) -> BTreeMap<LogId, SegmentId> {
        self.heads
            .range((stream, streamlet, LogId(0))..=(stream, streamlet, LogId(u32::MAX)))
            .map(|((_, _, log), segment)| (*log, *segment))
            .collect()
    }
}

/// Why a change did not happen.
#[derive(Debug)]
pub enum ChangeError {
    Refused(MetadataError),
    Persist(String),
}

impl ChangeError {
    pub fn response(&self) -> Response {
        match self {
            ChangeError::Refused(error) => Response::error(error.status(), error.to_string()),
            ChangeError::Persist(error) => {
                Response::error(Status::Internal, format!("saving metadata: {error}"))
            }
        }
    }
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changes: tokio::sync::Mutex<()>,
    store: Arc<dyn MetadataStore>,
    /// Brokers' peer listeners: assignments are pushed through it.
    brokers: Arc<dyn BrokerPeerApi>,
    assign_timeout: Duration,
}

/// Cheap to clone; every task of the coordinator shares one.
#[derive(Clone, Debug)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

impl Coordinator {
    pub fn new(
        metadata: Metadata,
        store: Arc<dyn MetadataStore>,
        brokers: Arc<dyn BrokerPeerApi>,
        liveness: Liveness,
        assign_timeout: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    metadata,
                    liveness,
                    heads: BTreeMap::new(),
                    log_ends: HashMap::new(),
                    replication: HashMap::new(),
                    memory_free_bytes: HashMap::new(),
                    proven_gone: HashSet::new(),
                    additions: Additions::default(),
                }),
                changes: tokio::sync::Mutex::new(()),
                store,
                brokers,
                assign_timeout,
            }),
        }
    }

    /// The in-memory state, briefly. Never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `change` to a copy of the metadata, saves it durably, installs it and returns
    /// what `change` returned.
    pub async fn change<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut Metadata) -> Result<T, MetadataError>,
    ) -> Result<T, ChangeError> {
        let _one_at_a_time = self.inner.changes.lock().await;
        let previous = self.lock().metadata.clone();
        let mut next = previous.clone();
        let value = change(&mut next).map_err(ChangeError::Refused)?;
        if next == previous {
            // Nothing changed (a report already covered, a request refused per item): no
            // disk write.
            return Ok(value);
        }
        if let Err(what) = crate::metadata::invariants::check_transition(&previous, &next) {
            return Err(ChangeError::Persist(crate::invariant::broken(&what)));
        }
        let store = self.inner.store.clone();
        let started = std::time::Instant::now();
        let saved =
            tokio::task::spawn_blocking(move || store.save(&previous, &next).map(|()| next))
                .await
                .map_err(|e| ChangeError::Persist(e.to_string()))
                .and_then(|saved| saved.map_err(ChangeError::Persist));
        let next = match saved {
            Ok(next) => next,
            Err(error) => {
                tracing::error!(?error, "saving coordinator metadata failed");
                return Err(error);
            }
        };
        metrics::histogram!(crate::metrics::PERSIST_LATENCY)
            .record(started.elapsed().as_secs_f64());
        self.lock().metadata = next;
        Ok(value)
    }

    /// Pushes each of `servers` its current assignment (bounded in time); a broker that
    /// misses it catches up through its next heartbeat.
    pub async fn push_assignments(&self, servers: Vec<ServerId>) {
        let pushes: Vec<_> = {
            let mut state = self.lock();
            let now = Instant::now();
            let mut pushes = Vec::new();
            for server in servers {
                let Ok(record) = state.metadata.check_server(server) else {
                    continue;
                };
                let addr = record.peer_addr.clone();
                let request = state.assignments_for(server);
                state.additions.holds(server, request.version);
                pushes.push((addr, request));
                state.additions.sent_full(server, now);
            }
            pushes
        };
        self.push(pushes).await;
    }

    /// Records that the change from version `base` to `version` only added `added` (per
    /// owner), and pushes each owner what it gained since the version it holds (bounded in
    /// time, like `push_assignments`), or its full set when no chain of additions leads there
    /// or its last one is not recent. Counted from the version it holds, not from `base`: an
    /// owner a step behind (another broker's registration, a change elsewhere) would ignore
    /// additions from `base` and wait for a catch-up heartbeat, and a create would answer
    /// before its owners could serve it.
    pub async fn push_additions(
        &self,
        base: u64,
        version: u64,
        added: HashMap<ServerId, Vec<StreamletAssignment>>,
    ) {
        let pushes: Vec<_> = {
            let mut state = self.lock();
            let owners: Vec<ServerId> = added.keys().copied().collect();
            state.additions.record(base, version, added);
            let mut pushes = Vec::new();
            for server in owners {
                let Ok(record) = state.metadata.check_server(server) else {
                    continue;
                };
                let addr = record.peer_addr.clone();
                let held = state.additions.held(server).unwrap_or(base);
                let request = state.assignments_since(server, held);
                state.additions.holds(server, request.version);
                pushes.push((addr, request));
            }
            pushes
        };
        self.push(pushes).await;
    }

    async fn push(&self, pushes: Vec<(String, AssignStreamletsRequest)>) {
        let pushed = pushes.into_iter().map(|(addr, assignment)| {
            let brokers = &self.inner.brokers;
            async move { brokers.assign(&addr, &assignment).await }
        });
        let timeout = self.inner.assign_timeout;
        match tokio::time::timeout(timeout, futures::future::join_all(pushed)).await {
            Ok(results) => {
                for error in results.into_iter().filter_map(Result::err) {
                    tracing::warn!(%error, "assignment push failed; the broker's heartbeat will catch up");
                }
            }
            Err(_) => tracing::warn!("assignment push timed out; heartbeats will catch up"),
        }
    }

    /// Brokers' peer listeners (the orchestrator orders rebuilds through it too).
    pub fn brokers(&self) -> &Arc<dyn BrokerPeerApi> {
        &self.inner.brokers
    }

    pub fn store_description(&self) -> String {
        self.inner.store.describe()
    }
}

/// Wall-clock milliseconds since the Unix epoch (for recovery records shown to people).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::messages::StreamConfig;

    /// A coordinator's state with no streams and no brokers.
    fn empty_state() -> State {
        State {
            metadata: Metadata::default(),
            liveness: Liveness::new(Duration::from_secs(3)),
            heads: BTreeMap::new(),
            memory_free_bytes: HashMap::new(),
            log_ends: HashMap::new(),
            replication: HashMap::new(),
            proven_gone: HashSet::new(),
            additions: Additions::default(),
        }
    }

    /// The count the gauge shows equals what `with_replication` shows streamlet by streamlet:
    /// only the owner's report counts, and only a log short of R.
    #[test]
    fn under_replicated_streamlets_count_the_owners_short_reports() {
        let mut state = empty_state();
        let a = state
            .metadata
            .register_broker("127.0.0.1:1", "peer-1", "admin", "")
            .unwrap()
            .server_id;
        let b = state
            .metadata
            .register_broker("127.0.0.1:2", "peer-2", "admin", "")
            .unwrap()
            .server_id;
        let mut config = tailstream_config::Config::embedded().stream_defaults;
        config.replicas = 1;
        config.logs_per_streamlet = 2;
        let stream = state
            .metadata
            .create_stream("s", 2, config, &[a, b])
            .unwrap()
            .clone();
        let set = |log, in_sync_replicas| LogReplicaSet {
            log: LogId(log),
            backups: Vec::new(),
            in_sync: Vec::new(),
            in_sync_replicas,
        };
        let owner = |i: usize| stream.placements[i].owner;
        let key = |streamlet, log| (stream.id, StreamletId(streamlet), LogId(log));
        // Streamlet 0: one log short, reported by its owner.
        state.replication.insert(key(0, 0), (owner(0), set(0, 1)));
        state.replication.insert(key(0, 1), (owner(0), set(1, 0)));
        // Streamlet 1: short, but reported by a broker that is not its owner.
        state.replication.insert(key(1, 0), (owner(0), set(0, 0)));
        let by_description: usize = state
            .metadata
            .all_streams()
            .into_iter()
            .map(|s| state.with_replication(s))
            .map(|s| {
                s.streamlets
                    .iter()
                    .filter(|p| p.under_replicated_logs(1) > 0)
                    .count()
            })
            .sum();
        assert_eq!(by_description, 1);
        assert_eq!(state.under_replicated_streamlets(), 1);
    }

    /// Issue 21, finding 3: a broker back at its address made the coordinator forget when it
    /// last heard the old incarnation, so recovery waited out no lease at all for it.
    #[test]
    fn a_broker_back_at_its_address_leaves_its_old_lease_to_be_waited_out() {
        let mut state = empty_state();
        let lease = Duration::from_secs(5);
        let start = Instant::now();
        let old = state
            .metadata
            .register_broker("x:1", "peer-x:1", "a", "")
            .unwrap()
            .server_id;
        state.broker_registered(old, start);
        // Its last heartbeat, well after this coordinator started.
        let last_heartbeat = start + Duration::from_secs(10);
        state.liveness.heard(old, last_heartbeat);
        state.liveness.heard_clean(old, last_heartbeat);
        let back = state
            .metadata
            .register_broker("x:1", "peer-x:1", "a", "")
            .unwrap();
        assert_eq!(back.declared, Some(old));
        state.broker_registered(back.server_id, last_heartbeat + Duration::from_secs(1));
        assert_eq!(state.leases_end(lease, None), Some(last_heartbeat + lease));

        // Led since before that heartbeat: the short lease. Led only since after it (a new
        // term, or a lapse of this coordinator's own lease): the old incarnation may have
        // heard "not leading" and served on for the leaderless lease after its last renewal.
        let leaderless = Duration::from_secs(20);
        let before = Some((last_heartbeat - Duration::from_secs(1), leaderless));
        assert_eq!(
            state.leases_end(lease, before),
            Some(last_heartbeat + lease)
        );
        let after = last_heartbeat + Duration::from_secs(2);
        assert_eq!(
            state.leases_end(lease, Some((after, leaderless))),
            Some(after + leaderless)
        );
        // Proven gone (nothing listens at its address): only the short lease.
        state.proven_gone.insert(old);
        assert_eq!(
            state.leases_end(lease, Some((after, leaderless))),
            Some(last_heartbeat + lease)
        );
    }

    /// A chaos run (coordinator killed mid-recovery) left an idle log with no replica set for
    /// good: the broker whose rebuild order the restarted coordinator planned again elsewhere
    /// reported the log after its owner did, and the owner, seeing no change, never re-sent.
    #[test]
    fn only_the_owner_of_a_streamlet_reports_its_logs() {
        let mut state = empty_state();
        let brokers: Vec<ServerId> = (0..2)
            .map(|i| {
                let addr = format!("b{i}:1");
                state
                    .metadata
                    .register_broker(&addr, &addr, &addr, "")
                    .unwrap()
                    .server_id
            })
            .collect();
        let config = StreamConfig {
            logs_per_streamlet: 1,
            replicas: 1,
            segment_size_bytes: 1 << 20,
            segments_per_group: 4,
            retention_bytes: 0,
            retention_ms: 0,
            min_insync_replicas: 0,
        };
        let stream = state
            .metadata
            .create_stream("s", 1, config, &brokers)
            .unwrap();
        let (id, owner) = (stream.id, stream.placements[0].owner);
        let other = *brokers.iter().find(|b| **b != owner).unwrap();
        let report = |in_sync_replicas, log_segment| {
            (
                vec![LogHead {
                    stream: id,
                    streamlet: StreamletId(0),
                    log: LogId(0),
                    segment: SegmentId(log_segment),
                }],
                vec![LogReplication {
                    stream: id,
                    streamlet: StreamletId(0),
                    replicas: LogReplicaSet {
                        log: LogId(0),
                        backups: Vec::new(),
                        in_sync: Vec::new(),
                        in_sync_replicas,
                    },
                }],
            )
        };
        let (heads, sets) = report(1, 9);
        state.take_reports(owner, &heads, &[], sets);
        let (heads, sets) = report(0, 2);
        state.take_reports(other, &heads, &[], sets);
        let key = (id, StreamletId(0), LogId(0));
        assert_eq!(state.heads.get(&key), Some(&SegmentId(9)));
        let (reporter, set) = state.replication.get(&key).expect("the owner's report");
        assert_eq!((*reporter, set.in_sync_replicas), (owner, 1));
    }
}
