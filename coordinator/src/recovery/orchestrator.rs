//! The recovery orchestrator: the async shell that drives every streamlet that is not serving
//! back to serving. Each round it fences the crashed generations on every live backup and
//! asks them what they hold (`ListReplicas`), plans each streamlet (`planner`), hands the
//! recoverable ones to the least loaded live brokers under new epochs (saved before anything
//! else happens) and marks the others lost with what is missing, then orders each new owner
//! to rebuild its streamlet. When a rebuild is done it waits until every crashed broker's lease
//! has surely run out (`lease_wait`), and only then lets the streamlet serve. A failed rebuild leaves the
//! streamlet lost until the next round tries again. Because every step is saved, a restarted
//! coordinator resumes: every streamlet that is not serving is simply planned again.

use super::placement::{self, Candidate};
use super::planner::{Listing, Target, plan};
use super::serve_again::{Ended, Outcome};
use crate::core::{Coordinator, unix_ms};
use crate::leader_lease::LeaderLease;
use crate::metrics as m;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tailstream_stubs::{BackupApi, BrokerPeerApi, RebuildFault};
use tailstream_wire::messages::{
    ListReplicasRequest, LogBounds, RecoverStreamletRequest, StreamletAssignment,
};
use tailstream_wire::{
    CoordinatorTerm, GroupId, LogId, SegmentId, ServerId, StreamId, StreamletId,
};
use tokio::sync::{Notify, watch};

/// How often lost streamlets are planned again (a backup holding what they miss may return).
const LOST_RETRY: Duration = Duration::from_secs(2);
/// Rounds also run this often without being woken.
const ROUND_EVERY: Duration = Duration::from_millis(500);
/// A target whose rebuild failed is not chosen again for this long (it may be dying).
const TARGET_QUARANTINE: Duration = Duration::from_secs(2);

type Key = (StreamId, StreamletId);

#[derive(Clone, Copy, Debug)]
pub struct OrchestratorConfig {
    /// Brokers' lease: a crashed broker's streamlets serve elsewhere only after it ran out.
    pub lease: Duration,
    pub list_timeout: Duration,
    pub recovery_timeout: Duration,
    pub liveness_timeout: Duration,
    /// Brokers' leaderless lease (`broker.leaderless_lease_ms`): see `lease_wait`.
    pub leaderless_lease: Duration,
    /// One probe of a crashed broker's address, to prove its process gone.
    pub probe_timeout: Duration,
}

#[derive(Debug)]
pub struct Orchestrator {
    pub(super) core: Coordinator,
    pub(super) config: OrchestratorConfig,
    /// This coordinator's leadership: its present stretch decides the leaderless wait.
    pub(super) leadership: Arc<LeaderLease>,
    /// Listings (and the fencing they carry) go through it.
    backups: Arc<dyn BackupApi>,
    /// Rebuild orders go through it (its calls may take `recovery_timeout`).
    brokers: Arc<dyn BrokerPeerApi>,
    wake: Notify,
    in_flight: Mutex<HashSet<Key>>,
    lost_tried: Mutex<HashMap<Key, Instant>>,
    /// Targets whose rebuild failed recently: not chosen again for `TARGET_QUARANTINE`.
    failed_targets: Mutex<HashMap<ServerId, Instant>>,
    /// Rebuilds that ended and wait to be saved (`serve_again`).
    ended: Mutex<Vec<Ended>>,
    /// Held while one batch of ended rebuilds is saved.
    pub(super) save_lock: tokio::sync::Mutex<()>,
}

/// One streamlet handed to a new owner this round.
#[derive(Debug)]
pub(super) struct Rebuild {
    pub(super) key: Key,
    pub(super) target: ServerId,
    pub(super) target_addr: String,
    pub(super) request: RecoverStreamletRequest,
}

impl Orchestrator {
    /// `backups` and `brokers` are the stubs it calls through (scripted ones in tests).
    pub fn new(
        core: Coordinator,
        config: OrchestratorConfig,
        leadership: Arc<LeaderLease>,
        backups: Arc<dyn BackupApi>,
        brokers: Arc<dyn BrokerPeerApi>,
    ) -> Arc<Self> {
        Arc::new(Self {
            core,
            config,
            leadership,
            backups,
            brokers,
            wake: Notify::new(),
            in_flight: Mutex::default(),
            lost_tried: Mutex::default(),
            failed_targets: Mutex::default(),
            ended: Mutex::default(),
            save_lock: tokio::sync::Mutex::new(()),
        })
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(ROUND_EVERY) => {}
                _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
            }
            self.round().await;
            self.publish_gauges();
        }
    }

    fn publish_gauges(&self) {
        let state = self.core.lock();
        let now = Instant::now();
        let metadata = &state.metadata;
        let alive = metadata
            .members()
            .filter(|b| state.liveness.is_alive(b.server_id, now))
            .count();
        metrics::gauge!(m::BROKERS_ALIVE).set(alive as f64);
        metrics::gauge!(m::BROKERS_REGISTERED).set(metadata.brokers.len() as f64);
        metrics::gauge!(m::STREAMS).set(metadata.streams.len() as f64);
        let placements = metadata.streams.values().flat_map(|s| s.placements.iter());
        let (mut total, mut unavailable, mut lost) = (0, 0, 0);
        // Every registered slot gets a value, crashed ones included, so a broker that lost all
        // its streamlets (to recovery, say) shows 0, not what it owned before.
        let mut owned: std::collections::BTreeMap<u32, u32> = metadata
            .brokers
            .iter()
            .map(|b| (b.server_id.index, 0))
            .collect();
        for placement in placements {
            total += 1;
            *owned.entry(placement.owner.index).or_default() += 1;
            match placement.state {
                tailstream_wire::messages::PlacementState::Serving => {}
                tailstream_wire::messages::PlacementState::Recovering => unavailable += 1,
                tailstream_wire::messages::PlacementState::Lost => {
                    unavailable += 1;
                    lost += 1;
                }
            }
        }
        metrics::gauge!(m::STREAMLETS).set(f64::from(total));
        metrics::gauge!(m::STREAMLETS_UNAVAILABLE).set(f64::from(unavailable));
        metrics::gauge!(m::STREAMLETS_LOST).set(f64::from(lost));
        metrics::gauge!(m::STREAMLETS_UNDER_REPLICATED)
            .set(state.under_replicated_streamlets() as f64);
        for (server, count) in owned {
            metrics::gauge!(m::STREAMLETS_OWNED, "server" => server.to_string())
                .set(f64::from(count));
        }
    }

    /// Streamlets to plan now: not serving, not being rebuilt by this coordinator, and (for
    /// lost ones) not tried too recently.
    fn candidates(&self) -> Vec<Key> {
        let (unsettled, lost, hopeless) = {
            let state = self.core.lock();
            let unsettled = state.metadata.unsettled();
            // Looked up by id once per round, not by a walk of every stream per candidate (a
            // crash may leave tens of thousands of candidates among thousands of streams).
            let by_id = state.metadata.streams_by_id();
            let mut lost = HashSet::new();
            // A lost unreplicated streamlet stays lost: no backup can ever bring it back, so
            // it is not worth a listing of every backup.
            let mut hopeless = HashSet::new();
            for key in &unsettled {
                let Some(stream) = by_id.get(&key.0) else {
                    continue;
                };
                let is_lost = stream
                    .placements
                    .get(key.1.0 as usize)
                    .is_some_and(|p| p.state == tailstream_wire::messages::PlacementState::Lost);
                if is_lost {
                    lost.insert(*key);
                    if stream.config.replicas == 0 {
                        hopeless.insert(*key);
                    }
                }
            }
            (unsettled, lost, hopeless)
        };
        let in_flight = self.in_flight_lock();
        let lost_tried = self.lost_tried_lock();
        let now = Instant::now();
        unsettled
            .into_iter()
            .filter(|key| !in_flight.contains(key) && !hopeless.contains(key))
            .filter(|key| {
                !lost.contains(key)
                    || lost_tried
                        .get(key)
                        .is_none_or(|at| now.duration_since(*at) >= LOST_RETRY)
            })
            .collect()
    }

    /// One round: plan every candidate, save the decisions, order the rebuilds (which run on
    /// their own tasks).
    pub(crate) async fn round(self: &Arc<Self>) {
        let candidates = self.candidates();
        if candidates.is_empty() {
            return;
        }
        let located_at = Instant::now();
        let (listings, unanswered) = self.locate().await;
        if !unanswered.is_empty() {
            // A backup that did not answer may hold the only current copy of a segment (or a
            // newer epoch than the copies that answered): planning without it could call a
            // streamlet lost, or rebuild it short. Wait for it; a backup that stays silent is
            // declared crashed in time and drops out of the members.
            tracing::info!(
                ?unanswered,
                "recovery planning deferred: not every backup answered its listing"
            );
            return;
        }
        let targets = self.live_targets();
        if targets.is_empty() {
            return;
        }
        let plans = {
            let state = self.core.lock();
            let by_id = state.metadata.streams_by_id();
            let mut plans = Vec::new();
            for key in &candidates {
                let Some(stream) = by_id.get(&key.0) else {
                    continue;
                };
                let heads = state.heads_of(key.0, key.1);
                let kept = stream.kept_segments(key.1);
                let target = Target {
                    stream: key.0,
                    streamlet: key.1,
                    config: &stream.config,
                    reported_heads: &heads,
                    kept: &kept,
                };
                plans.push((*key, plan(&target, &listings)));
            }
            plans
        };
        {
            let now = Instant::now();
            let mut lost_tried = self.lost_tried_lock();
            for (key, _) in &plans {
                lost_tried.insert(*key, now);
            }
        }
        let locate_ms = located_at.elapsed().as_millis() as u64;
        let rebuilds = match self.hand_over(plans, targets, locate_ms).await {
            Some(rebuilds) => rebuilds,
            None => return,
        };
        metrics::histogram!(m::RECOVERY_PHASE, "phase" => "locate")
            .record(located_at.elapsed().as_secs_f64());
        for rebuild in rebuilds {
            self.in_flight_lock().insert(rebuild.key);
            let orchestrator = self.clone();
            tokio::spawn(async move { orchestrator.rebuild(rebuild).await });
        }
    }

    /// Fences every crashed generation on every live member and collects what they hold; also
    /// says which members did not answer.
    async fn locate(&self) -> (Vec<Listing>, Vec<ServerId>) {
        let (members, fence) = {
            let state = self.core.lock();
            let members: Vec<(ServerId, String)> = state
                .metadata
                .members()
                .map(|b| (b.server_id, b.peer_addr.clone()))
                .collect();
            (members, (state.metadata.crashed(), state.metadata.term))
        };
        let (fence, term) = fence;
        let request = ListReplicasRequest {
            term,
            primary: None,
            fence,
        };
        let lists = members.into_iter().map(|(backup, addr)| {
            let request = &request;
            async move {
                let listed = self.backups.list(&addr, request);
                match tokio::time::timeout(self.config.list_timeout, listed).await {
                    Ok(Ok(response)) => Ok(Listing {
                        backup,
                        peer_addr: addr,
                        replicas: response.replicas,
                    }),
                    Ok(Err(error)) => {
                        tracing::warn!(%backup, %error, "listing replicas failed");
                        Err(backup)
                    }
                    Err(_) => {
                        tracing::warn!(%backup, "listing replicas timed out");
                        Err(backup)
                    }
                }
            }
        });
        let mut listings = Vec::new();
        let mut unanswered = Vec::new();
        for answer in futures::future::join_all(lists).await {
            match answer {
                Ok(listing) => listings.push(listing),
                Err(backup) => unanswered.push(backup),
            }
        }
        (listings, unanswered)
    }

    /// Members a rebuild can go to: heard from within a lease (a broker that cannot renew its
    /// lease serves nothing anyway) and not recently failed.
    fn live_targets(&self) -> Vec<Candidate> {
        let state = self.core.lock();
        let now = Instant::now();
        let failed = self.failed_targets_lock();
        state
            .metadata
            .members()
            .filter(|b| state.liveness.silent_for(b.server_id, now) < self.config.lease)
            .filter(|b| {
                failed
                    .get(&b.server_id)
                    .is_none_or(|at| now.duration_since(*at) >= TARGET_QUARANTINE)
            })
            .map(|b| Candidate {
                server: b.server_id,
                peer_addr: b.peer_addr.clone(),
                load: state.metadata.load_of(b.server_id),
                memory_free_bytes: state
                    .memory_free_bytes
                    .get(&b.server_id)
                    .copied()
                    .unwrap_or(u64::MAX),
            })
            .collect()
    }

    /// Saves the round's decisions: each recoverable streamlet to a target under a new epoch,
    /// each unrecoverable one lost with what it misses. Returns the rebuilds to order.
    async fn hand_over(
        &self,
        plans: Vec<(Key, Result<super::planner::Plan, String>)>,
        mut targets: Vec<Candidate>,
        locate_ms: u64,
    ) -> Option<Vec<Rebuild>> {
        let mut chosen = Vec::new();
        for (key, planned) in plans {
            match planned {
                Ok(plan) => {
                    // `round` returns early when there is no target.
                    let Some(target) = placement::choose(&mut targets, &plan) else {
                        continue;
                    };
                    chosen.push((key, Ok((target.server, target.peer_addr, plan))));
                }
                Err(missing) => chosen.push((key, Err(missing))),
            }
        }
        let decided = self
            .core
            .change(move |metadata| {
                // Each step takes every streamlet at once: a crash may leave tens of thousands.
                let mut begun = Vec::new();
                let mut plans = Vec::new();
                let mut lost = Vec::new();
                for (key, decision) in chosen {
                    match decision {
                        Ok((target, target_addr, plan)) => {
                            begun.push((key, target));
                            plans.push((target_addr, plan));
                        }
                        Err(missing) => lost.push((key, missing)),
                    }
                }
                let assignments = metadata.begin_rebuilds(&begun)?;
                // The rebuilt logs serve every planned segment (bytes past the old head that
                // were never acknowledged among them): saved as their heads now, so no later
                // recovery plans them shorter.
                let mut bounds: HashMap<ServerId, Vec<LogBounds>> = HashMap::new();
                for ((key, target), (_, plan)) in begun.iter().zip(&plans) {
                    bounds
                        .entry(*target)
                        .or_default()
                        .extend(planned_bounds(*key, plan));
                }
                for (target, bounds) in &bounds {
                    metadata.record_log_bounds(*target, bounds)?;
                }
                let empty_open: Vec<_> = begun
                    .iter()
                    .zip(&plans)
                    .map(|((key, _), (_, plan))| (*key, plan.empty_open.clone()))
                    .collect();
                metadata.forget_open_segments(&empty_open);
                metadata.mark_lost_all(&lost);
                let records = metadata.recovery_index();
                for (key, _) in &begun {
                    if let Some(record) = records
                        .get(key)
                        .and_then(|at| metadata.recoveries.get_mut(*at))
                    {
                        record.locate_ms = Some(record.locate_ms.unwrap_or(0).max(locate_ms));
                        record.phase = crate::metadata::RecoveryPhase::Rebuilding;
                    }
                }
                for (key, missing) in lost {
                    if let Some(record) = records
                        .get(&key)
                        .and_then(|at| metadata.recoveries.get_mut(*at))
                        && !record.lost.contains(&missing)
                    {
                        record.lost.push(missing);
                    }
                }
                metadata.settle_recoveries(unix_ms());
                let (version, term) = (metadata.version, metadata.term);
                Ok(begun
                    .into_iter()
                    .zip(plans)
                    .zip(assignments)
                    .map(
                        |(((key, target), (target_addr, plan)), assignment)| Rebuild {
                            key,
                            target,
                            target_addr,
                            request: request_for(term, target, version, assignment, plan),
                        },
                    )
                    .collect::<Vec<_>>())
            })
            .await;
        match decided {
            Ok(rebuilds) => {
                for rebuild in &rebuilds {
                    tracing::info!(
                        stream = %rebuild.request.assignment.stream_name,
                        streamlet = rebuild.key.1.0,
                        new_owner = %rebuild.target,
                        epoch = %rebuild.request.assignment.epoch,
                        "rebuilding a crashed broker's streamlet"
                    );
                }
                Some(rebuilds)
            }
            Err(error) => {
                tracing::error!(?error, "saving the recovery plan failed");
                None
            }
        }
    }

    /// Orders one rebuild, and hands the streamlet over once it is done and every crashed
    /// broker's lease has run out (saved with other rebuilds that ended meanwhile).
    async fn rebuild(self: Arc<Self>, rebuild: Rebuild) {
        let started = Instant::now();
        let result = self
            .brokers
            .recover(&rebuild.target_addr, &rebuild.request)
            .await;
        let outcome = match result {
            Ok(done) => {
                // Measured before the hand-over waits out the crashed brokers' leases.
                let elapsed_ms = started.elapsed().as_millis() as u64;
                let waiting = Instant::now();
                self.wait_for_leases(rebuild.key).await;
                Outcome::Rebuilt {
                    done,
                    elapsed_ms,
                    lease_wait_ms: waiting.elapsed().as_millis() as u64,
                }
            }
            // Whom a failure blames decides whether the target is avoided for a while.
            Err(error) => Outcome::Failed {
                error: error.to_string(),
                blame: Some(RebuildFault::of(&error)),
            },
        };
        self.save_when_ended(Ended {
            rebuild,
            started,
            outcome,
        })
        .await;
    }

    pub(super) fn ended_lock(&self) -> MutexGuard<'_, Vec<Ended>> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn in_flight_lock(&self) -> MutexGuard<'_, HashSet<Key>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lost_tried_lock(&self) -> MutexGuard<'_, HashMap<Key, Instant>> {
        self.lost_tried.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn failed_targets_lock(&self) -> MutexGuard<'_, HashMap<ServerId, Instant>> {
        self.failed_targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Records the total of recoveries that just finished.
    pub(super) fn record_totals(&self) {
        let state = self.core.lock();
        for record in state.metadata.recoveries.iter().rev().take(8) {
            if let Some(total) = record.total_ms
                && record.phase == crate::metadata::RecoveryPhase::Done
                && unix_ms().saturating_sub(record.declared_at_ms + total) < 1000
            {
                metrics::histogram!(m::RECOVERY_PHASE, "phase" => "total")
                    .record(total as f64 / 1000.0);
            }
        }
    }
}

fn request_for(
    term: CoordinatorTerm,
    target: ServerId,
    version: u64,
    assignment: StreamletAssignment,
    plan: super::planner::Plan,
) -> RecoverStreamletRequest {
    RecoverStreamletRequest {
        term,
        target,
        version,
        assignment,
        logs: plan.logs,
        next_group: GroupId(plan.next_group.0),
        next_segment: SegmentId(plan.next_segment.0),
    }
}

/// Per planned log, its first and newest planned segments as kept segments.
fn planned_bounds(key: Key, plan: &super::planner::Plan) -> Vec<LogBounds> {
    plan.logs
        .iter()
        .filter_map(|log| {
            let (first, newest) = (log.segments.first()?, log.segments.last()?);
            Some(LogBounds {
                stream: key.0,
                streamlet: key.1,
                log: log.log,
                oldest: first.segment,
                head: newest.segment,
                open: None,
            })
        })
        .collect()
}

/// Log heads per streamlet, as the coordinator state keeps them.
pub type Heads = BTreeMap<LogId, SegmentId>;
