//! The orchestrator driven through its stubs by scripted peers, no processes: backups that
//! answer a listing late, never, or without the newest segment, and rebuild targets whose
//! failures blame the replicas or themselves. Each test is one loss path of recovery: nothing
//! is handed over on a partial view, nothing is served shorter than its saved head, and only a
//! target at fault is avoided.

use super::orchestrator::{Orchestrator, OrchestratorConfig};
use crate::core::Coordinator;
use crate::liveness::Liveness;
use crate::metadata::Metadata;
use crate::persist::MetadataStore;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_stubs::{BackupApi, BrokerPeerApi, RebuildFault, StubError};
use tailstream_wire::codec::Encode;
use tailstream_wire::entry::{DigestSegment, LogDigest};
use tailstream_wire::messages::{
    AssignStreamletsRequest, ListReplicasRequest, ListReplicasResponse, LogBounds, PlacementState,
    ReadReplicaRequest, ReadReplicaResponse, RecoverStreamletRequest, RecoverStreamletResponse,
    ReplicaAdoptRequest, ReplicaId, ReplicaInfo, ReplicaState,
};
use tailstream_wire::{
    GroupId, LogId, RecordOffset, ReplicaEpoch, SegmentId, ServerId, Status, StreamId, StreamletId,
};

/// Saves nowhere: the orchestrator's decisions are read back from the core's state. Counts
/// its saves, each of which takes `save_time` (as a store's round trip does).
#[derive(Debug, Default)]
struct MemoryStore {
    saves: AtomicUsize,
    save_time: Mutex<Duration>,
}

impl MetadataStore for MemoryStore {
    fn load(&self) -> Result<Metadata, String> {
        Ok(Metadata::default())
    }
    fn save(&self, _: &Metadata, _: &Metadata) -> Result<(), String> {
        self.saves.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(*self.save_time.lock().unwrap());
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}

/// How a scripted backup answers its listing.
#[derive(Clone, Debug)]
enum Listed {
    Now(Vec<ReplicaInfo>),
    After(Duration, Vec<ReplicaInfo>),
    Never,
}

#[derive(Debug, Default)]
struct ScriptedBackups {
    by_addr: Mutex<HashMap<String, Listed>>,
}

impl ScriptedBackups {
    fn script(&self, addr: &str, listed: Listed) {
        self.by_addr
            .lock()
            .unwrap()
            .insert(addr.to_string(), listed);
    }
}

#[async_trait]
impl BackupApi for ScriptedBackups {
    async fn list(
        &self,
        addr: &str,
        _: &ListReplicasRequest,
    ) -> Result<ListReplicasResponse, StubError> {
        let listed = self.by_addr.lock().unwrap().get(addr).cloned();
        match listed {
            Some(Listed::Now(replicas)) => Ok(ListReplicasResponse { replicas }),
            Some(Listed::After(delay, replicas)) => {
                tokio::time::sleep(delay).await;
                Ok(ListReplicasResponse { replicas })
            }
            Some(Listed::Never) => std::future::pending().await,
            None => Err(StubError::Retry {
                addr: addr.into(),
                reason: "not scripted".into(),
            }),
        }
    }

    async fn read(
        &self,
        _: &str,
        _: &ReadReplicaRequest,
    ) -> Result<ReadReplicaResponse, StubError> {
        Err(StubError::Fatal("the orchestrator never reads".into()))
    }

    async fn adopt(&self, _: &str, _: &ReplicaAdoptRequest) -> Result<(), StubError> {
        Err(StubError::Fatal("the orchestrator never adopts".into()))
    }
}

/// Rebuild targets that answer as scripted (in order; the last answer repeats) and record
/// what they were asked.
#[derive(Debug, Default)]
struct ScriptedBrokers {
    answers: Mutex<Vec<Result<RecoverStreamletResponse, StubError>>>,
    orders: Mutex<Vec<(String, Instant)>>,
    assigned: Mutex<Vec<String>>,
    /// How long each rebuild takes.
    rebuild_time: Mutex<Duration>,
}

impl ScriptedBrokers {
    fn orders(&self) -> Vec<String> {
        self.orders
            .lock()
            .unwrap()
            .iter()
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// The time between the first two orders.
    fn retried_after(&self) -> Duration {
        let orders = self.orders.lock().unwrap();
        orders[1].1.duration_since(orders[0].1)
    }
}

#[async_trait]
impl BrokerPeerApi for ScriptedBrokers {
    async fn assign(&self, addr: &str, _: &AssignStreamletsRequest) -> Result<(), StubError> {
        self.assigned.lock().unwrap().push(addr.to_string());
        Ok(())
    }

    async fn recover(
        &self,
        addr: &str,
        _: &RecoverStreamletRequest,
    ) -> Result<RecoverStreamletResponse, StubError> {
        self.orders
            .lock()
            .unwrap()
            .push((addr.to_string(), Instant::now()));
        let rebuild_time = *self.rebuild_time.lock().unwrap();
        tokio::time::sleep(rebuild_time).await;
        let mut answers = self.answers.lock().unwrap();
        if answers.len() > 1 {
            answers.remove(0)
        } else {
            answers.first().cloned().unwrap_or_else(|| Ok(done()))
        }
    }
}

fn done() -> RecoverStreamletResponse {
    RecoverStreamletResponse {
        bytes: 100,
        segments_adopted: 1,
        segments_copied: 0,
        read_ms: 1,
        rereplicate_ms: 1,
    }
}

const LEASE: Duration = Duration::from_millis(200);
const LIST_TIMEOUT: Duration = Duration::from_millis(100);

/// Three brokers, one stream of one streamlet replicated once, whose owner crashed after
/// saving its log's kept segments as `0..=head`.
struct Scene {
    core: Coordinator,
    store: Arc<MemoryStore>,
    orchestrator: Arc<Orchestrator>,
    backups: Arc<ScriptedBackups>,
    brokers: Arc<ScriptedBrokers>,
    stream: StreamId,
    crashed: ServerId,
    /// The two survivors' peer addresses.
    survivors: Vec<String>,
    survivor_ids: Vec<ServerId>,
}

fn scene(head: u64) -> Scene {
    scene_of(head, 1)
}

/// Like `scene`, with `streamlets` streamlets placed round-robin on the three brokers; only
/// streamlet 0 has kept segments.
fn scene_of(head: u64, streamlets: u32) -> Scene {
    let mut metadata = Metadata::default();
    let servers: Vec<ServerId> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            metadata
                .register_broker(&format!("{name}:1"), &format!("peer-{name}"), "", "")
                .unwrap()
                .server_id
        })
        .collect();
    let mut config = tailstream_config::Config::embedded().stream_defaults;
    config.logs_per_streamlet = 1;
    config.replicas = 1;
    config.retention_bytes = 0;
    let record = metadata
        .create_stream("s", streamlets, config, &servers)
        .unwrap()
        .clone();
    let stream = record.id;
    let crashed = record.placements[0].owner;
    metadata
        .record_log_bounds(
            crashed,
            &[LogBounds {
                stream,
                streamlet: StreamletId(0),
                log: LogId(0),
                oldest: SegmentId(0),
                head: SegmentId(head),
                open: None,
            }],
        )
        .unwrap();
    let moved = metadata.declare_crashed(crashed).unwrap();
    assert_eq!(moved.len(), streamlets.div_ceil(3) as usize);
    let survivors: Vec<ServerId> = servers.into_iter().filter(|s| *s != crashed).collect();
    let brokers = Arc::new(ScriptedBrokers::default());
    let backups = Arc::new(ScriptedBackups::default());
    let mut liveness = Liveness::new(Duration::from_secs(60));
    let now = Instant::now();
    for server in &survivors {
        liveness.heard(*server, now);
    }
    let store = Arc::new(MemoryStore::default());
    let core = Coordinator::new(
        metadata,
        store.clone(),
        brokers.clone(),
        liveness,
        Duration::from_secs(1),
    );
    let survivor_ids = survivors.clone();
    let survivors = {
        let state = core.lock();
        survivors
            .iter()
            .map(|s| state.metadata.check_server(*s).unwrap().peer_addr.clone())
            .collect()
    };
    let orchestrator = Orchestrator::new(
        core.clone(),
        OrchestratorConfig {
            lease: LEASE,
            list_timeout: LIST_TIMEOUT,
            recovery_timeout: Duration::from_secs(5),
            liveness_timeout: Duration::from_secs(60),
            // A single coordinator leading throughout: as long as a lease.
            leaderless_lease: LEASE,
            probe_timeout: Duration::from_millis(100),
        },
        Arc::new(crate::leader_lease::LeaderLease::forever()),
        backups.clone(),
        brokers.clone(),
    );
    Scene {
        core,
        store,
        orchestrator,
        backups,
        brokers,
        stream,
        crashed,
        survivors,
        survivor_ids,
    }
}

impl Scene {
    /// A closed copy of `segment` of the crashed owner's log 0, whose digest names every
    /// segment from 0 up to it.
    fn copy(&self, segment: u64) -> ReplicaInfo {
        let digest = LogDigest {
            stream: self.stream,
            streamlet: StreamletId(0),
            log: LogId(0),
            group: GroupId(0),
            segment: SegmentId(segment),
            base_offset: RecordOffset(0),
            segments: (0..=segment)
                .map(|s| DigestSegment {
                    group: GroupId(0),
                    segment: SegmentId(s),
                })
                .collect(),
        };
        ReplicaInfo {
            primary: self.crashed,
            replica: ReplicaId {
                stream: self.stream,
                streamlet: StreamletId(0),
                log: LogId(0),
                group: GroupId(0),
                segment: SegmentId(segment),
            },
            epoch: ReplicaEpoch(1),
            state: ReplicaState::Closed,
            filling: false,
            valid_bytes: 4096,
            digest: digest.to_bytes(),
        }
    }

    fn placement(&self) -> (PlacementState, ServerId, String) {
        let state = self.core.lock();
        let placement = &state.metadata.stream_by_id(self.stream).unwrap().placements[0];
        (placement.state, placement.owner, placement.detail.clone())
    }

    /// The survivors heartbeat: they stay eligible targets.
    fn heartbeats(&self) {
        let mut state = self.core.lock();
        let now = Instant::now();
        for server in &self.survivor_ids {
            state.liveness.heard(*server, now);
        }
    }

    async fn round(&self) {
        self.heartbeats();
        self.orchestrator.round().await;
    }

    /// Runs rounds until the streamlet is in `want` (the rebuilds run on tasks of their own).
    async fn settle(&self, want: PlacementState) -> (PlacementState, ServerId, String) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.round().await;
            let placement = self.placement();
            if placement.0 == want || Instant::now() > deadline {
                return placement;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn a_backup_that_never_answers_its_listing_defers_every_hand_over() {
    let scene = scene(1);
    let copies = vec![scene.copy(0), scene.copy(1)];
    scene
        .backups
        .script(&scene.survivors[0], Listed::Now(copies.clone()));
    scene.backups.script(&scene.survivors[1], Listed::Never);
    for _ in 0..3 {
        scene.round().await;
    }
    assert!(
        scene.brokers.orders().is_empty(),
        "no rebuild may be ordered while a backup has not answered: it may hold a newer copy"
    );
    let (state, owner, _) = scene.placement();
    assert_eq!((state, owner), (PlacementState::Recovering, scene.crashed));
    // It answers at last: the streamlet is rebuilt and serves on a survivor.
    scene
        .backups
        .script(&scene.survivors[1], Listed::Now(Vec::new()));
    let (state, owner, _) = scene.settle(PlacementState::Serving).await;
    assert_eq!(state, PlacementState::Serving);
    assert_ne!(owner, scene.crashed);
    assert_eq!(scene.brokers.orders().len(), 1);
}

#[tokio::test]
async fn a_listing_answered_after_the_timeout_counts_as_no_answer() {
    let scene = scene(0);
    scene
        .backups
        .script(&scene.survivors[0], Listed::Now(vec![scene.copy(0)]));
    scene.backups.script(
        &scene.survivors[1],
        Listed::After(LIST_TIMEOUT * 3, Vec::new()),
    );
    scene.round().await;
    // A rebuild would be ordered on a task of its own: give it the time to run.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(scene.brokers.orders().is_empty());
    assert_eq!(scene.placement().0, PlacementState::Recovering);
}

#[tokio::test]
async fn listings_without_the_saved_head_make_the_streamlet_lost_never_served_short() {
    // Segment 1 is the saved head; every backup answers, and none holds it.
    let scene = scene(1);
    scene
        .backups
        .script(&scene.survivors[0], Listed::Now(vec![scene.copy(0)]));
    scene
        .backups
        .script(&scene.survivors[1], Listed::Now(Vec::new()));
    let (state, owner, detail) = scene.settle(PlacementState::Lost).await;
    assert_eq!(state, PlacementState::Lost, "{detail}");
    assert_eq!(owner, scene.crashed, "nothing was handed over");
    assert!(
        scene.brokers.orders().is_empty(),
        "a rebuild from segment 0 alone would serve the log short of its head"
    );
    assert!(
        detail.contains(&format!("reported {}", SegmentId(1))),
        "the reason names the missing head: {detail}"
    );
}

/// Orders a rebuild that fails as `failure`, and returns whether its target is still chosen
/// by the next round (the scripted answers succeed from then on), and how long after the
/// first order the second came.
async fn target_still_eligible_after(failure: StubError) -> (bool, Duration) {
    let scene = scene(0);
    scene
        .backups
        .script(&scene.survivors[0], Listed::Now(vec![scene.copy(0)]));
    scene
        .backups
        .script(&scene.survivors[1], Listed::Now(vec![scene.copy(0)]));
    *scene.brokers.answers.lock().unwrap() = vec![Err(failure), Ok(done())];
    let (state, _, detail) = scene.settle(PlacementState::Serving).await;
    assert_eq!(state, PlacementState::Serving, "{detail}");
    let orders = scene.brokers.orders();
    assert_eq!(orders.len(), 2, "{orders:?}");
    (orders[0] == orders[1], scene.brokers.retried_after())
}

#[tokio::test]
async fn a_rebuild_that_blames_the_replicas_leaves_its_target_eligible() {
    let corrupt = StubError::refused(Status::ReplicaCorrupt, "segment 0: no holder served it");
    assert_eq!(RebuildFault::of(&corrupt), RebuildFault::Replicas);
    // Both survivors hold a copy, so placement prefers the same target again (it holds one
    // itself): only quarantine would move the order elsewhere. The same listing would give the
    // same plan, so the next try waits for `LOST_RETRY` (2 s) and fresh listings.
    let (same_target, retried_after) = target_still_eligible_after(corrupt).await;
    assert!(same_target);
    assert!(retried_after >= Duration::from_secs(2), "{retried_after:?}");
}

#[tokio::test]
async fn a_rebuild_whose_target_fails_or_goes_silent_moves_to_another_target() {
    let not_durable = StubError::refused(Status::Internal, "no copies in time");
    let (same_target, retried_after) = target_still_eligible_after(not_durable).await;
    assert!(!same_target);
    assert!(
        retried_after < Duration::from_secs(2),
        "at once, elsewhere: {retried_after:?}"
    );
    let silent = StubError::timed_out("peer-b", 5000);
    assert!(!target_still_eligible_after(silent).await.0);
}

#[tokio::test]
async fn rebuilds_that_end_together_are_saved_and_pushed_in_batches() {
    // 48 streamlets: the crashed broker owned 16 of them. Each save takes 20 ms, as a round
    // trip to the store does, so rebuilds that end while one batch is saved join the next.
    let scene = scene_of(0, 48);
    for survivor in &scene.survivors {
        scene
            .backups
            .script(survivor, Listed::Now(vec![scene.copy(0)]));
    }
    *scene.store.save_time.lock().unwrap() = Duration::from_millis(20);
    *scene.brokers.rebuild_time.lock().unwrap() = Duration::from_millis(50);
    let moved = 16;
    {
        let mut state = scene.core.lock();
        let orphans = state.metadata.orphans();
        assert_eq!(orphans.len(), moved);
        state
            .metadata
            .open_recovery(scene.crashed, orphans, crate::core::unix_ms(), 0);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        scene.round().await;
        let serving = {
            let state = scene.core.lock();
            let stream = state.metadata.stream_by_id(scene.stream).unwrap();
            stream
                .placements
                .iter()
                .filter(|p| p.state == PlacementState::Serving)
                .count()
        };
        if serving == 48 || Instant::now() > deadline {
            assert_eq!(serving, 48, "every rebuilt streamlet serves again");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(scene.brokers.orders().len(), moved, "one rebuild each");
    // One save hands all 16 over; the ends take far fewer than one save each.
    let saves = scene.store.saves.load(Ordering::SeqCst);
    assert!(saves <= 1 + moved / 4, "{saves} saves for {moved} rebuilds");
    // Each batch pushes each new owner its assignment once.
    let pushes = scene.brokers.assigned.lock().unwrap().len();
    assert!(
        pushes <= 2 * (saves - 1),
        "{pushes} pushes for {} batches",
        saves - 1
    );
    let state = scene.core.lock();
    let record = state.metadata.recoveries.last().unwrap();
    assert_eq!(record.phase, crate::metadata::RecoveryPhase::Done);
    assert_eq!(
        record.bytes,
        100 * moved as u64,
        "every rebuild's bytes are counted"
    );
}
