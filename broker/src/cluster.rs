//! The broker's side of membership: register with the coordinator, heartbeat, hold a lease,
//! and own exactly the streamlets the coordinator assigns.
//!
//! Assignments arrive two ways: pushed by the coordinator (stream creation, recovery), and in
//! a heartbeat answer whenever the broker's known version is behind. Both go through
//! `apply_assignments`, which ignores anything older than what it already applied, so the two
//! paths cannot undo each other. An assignment is the full set, or only what was added since
//! a version (a new stream's streamlets), which counts only on exactly that version.
//!
//! Each answered heartbeat renews the broker's *lease*: it serves only until `lease_ms` after
//! it sent the last heartbeat the coordinator answered. The coordinator hands a crashed
//! broker's streamlets to new owners only once that broker's lease has surely run out, so a
//! broker that was only paused (a "zombie") never serves a streamlet that moved. When the
//! coordinator answers `StaleGeneration` (this incarnation was declared crashed) or
//! `UnknownServer`, the broker drops every streamlet at once and registers again as a new,
//! empty generation.
//!
//! Heartbeat answers also carry the membership: crashed generations are fenced on this
//! broker's backup, and retired ones (crashed, every streamlet recovered) have what is left
//! of them dropped. Heartbeats report each owned log's newest committed segment when it
//! changes, so recovery can tell a whole log from one whose newest segments are lost, and each
//! replicated log's replica set when it changes (under-replication shows cluster-wide).

use crate::backup::BackupStore;
use crate::heartbeat_reports::Reports;
use crate::lease::{BootInstant, Lease};
use crate::log_bounds::LogBoundsBook;
use crate::replication::placements::{LogKey, Publisher, ReplicaPlacements};
use crate::storage::{Store, Streamlet};
use crate::term_fence::{TermFence, stale};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_config::COORDINATOR_FRAME_BODY_BYTES_MAX;
use tailstream_net::RpcClientConfig;
use tailstream_stubs::{CoordinatorAddresses, CoordinatorPeerClient, StubError};
use tailstream_wire::field::{WireField, encoded_len};
use tailstream_wire::messages::{
    AssignStreamletsRequest, BrokerHeartbeatRequest, BrokerInfo, LogBounds, LogEnd, LogHead,
    LogReplicaSet, LogReplication, OpenSegment, RegisterBrokerRequest, ReportLogBoundsRequest,
};
use tailstream_wire::{CoordinatorTerm, RecordOffset, SegmentId, ServerId, Status, StreamId};
use tokio::sync::{mpsc, watch};

#[derive(Debug, Default)]
struct Membership {
    server_id: Option<ServerId>,
    version: u64,
    /// Log heads, committed ends and replica sets: what the coordinator acknowledged and what
    /// the coming heartbeats look at again (the replication one also says which replicator
    /// published each set: a log replicated here again, after another broker owned it, say, is
    /// reported afresh even when its set looks the same, since the coordinator holds the
    /// other broker's meanwhile).
    heads: Reports<LogKey, SegmentId>,
    ends: Reports<LogKey, RecordOffset>,
    replication: Reports<LogKey, (Publisher, LogReplicaSet)>,
    /// Whether the next heartbeat must look at every log again (the coordinator knows none).
    rescan: bool,
    /// Retired generations whose replicas this backup already dropped.
    dropped: std::collections::HashSet<ServerId>,
    /// Deleted streams whose replicas this backup already dropped (those the coordinator still
    /// lists: bounded by what it sends).
    dropped_streams: std::collections::HashSet<StreamId>,
}

impl Membership {
    fn forget_reported(&mut self) {
        self.heads.forget();
        self.ends.forget();
        self.replication.forget();
        self.rescan = true;
    }
}

#[derive(Debug)]
pub struct ClusterState {
    store: Arc<Store>,
    backup: Arc<BackupStore>,
    /// The replicators' published replica sets (reported in heartbeats).
    placements: Arc<ReplicaPlacements>,
    membership: Mutex<Membership>,
    /// Every broker the coordinator knows, with liveness (from each heartbeat).
    brokers: watch::Sender<Vec<BrokerInfo>>,
    /// Streamlets created by an assignment, for the replication layer to start replicating.
    created: mpsc::UnboundedSender<Arc<Streamlet>>,
    /// Renewed by answered heartbeats; checked by the data plane on admission and on ack.
    lease: Arc<Lease>,
    /// Logs' heads and oldest kept segments: what replicators need saved at the coordinator
    /// before they commit into a new head or free old replicas.
    log_bounds: Arc<LogBoundsBook>,
    /// The newest coordinator term seen: orders and answers of older ones are refused.
    term: TermFence,
    /// The address and term of the coordinator whose answer renewed the lease last: only its
    /// word that it leads no more (naming that term), or a refused connection at that
    /// address, extends the lease (another's says nothing of it).
    renewed_by: Mutex<(String, CoordinatorTerm)>,
    /// Woken when pushed additions could not be applied (this broker was behind the version
    /// they build on): the next heartbeat, which brings what it missed, goes at once rather
    /// than at its tick, so a stream created meanwhile is served in a round trip.
    catch_up: tokio::sync::Notify,
}

impl ClusterState {
    /// Also returns the receiver of newly created streamlets.
    pub fn new(
        store: Arc<Store>,
        backup: Arc<BackupStore>,
        placements: Arc<ReplicaPlacements>,
        lease: Duration,
    ) -> (Self, mpsc::UnboundedReceiver<Arc<Streamlet>>) {
        let (created, created_rx) = mpsc::unbounded_channel();
        let state = Self {
            store,
            backup,
            placements,
            membership: Mutex::new(Membership::default()),
            brokers: watch::Sender::new(Vec::new()),
            created,
            lease: Arc::new(Lease::new(lease)),
            log_bounds: Arc::default(),
            term: TermFence::default(),
            renewed_by: Mutex::new((String::new(), CoordinatorTerm(0))),
            catch_up: tokio::sync::Notify::new(),
        };
        (state, created_rx)
    }

    /// The lease, for whoever must check it when an answer leaves.
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// What the coordinator durably knows of each replicated log's kept segments.
    pub fn log_bounds(&self) -> &Arc<LogBoundsBook> {
        &self.log_bounds
    }

    /// The newest coordinator term seen.
    pub fn term(&self) -> &TermFence {
        &self.term
    }

    /// The coordinator at `coordinator_addr`, leading in `term`, answered a heartbeat (or
    /// registration) sent at `sent_at`: the lease runs on from it.
    fn lease_renewed(&self, coordinator_addr: &str, term: CoordinatorTerm, sent_at: BootInstant) {
        self.lease.renew(sent_at);
        let mut renewed_by = self.renewed_by.lock().unwrap_or_else(|p| p.into_inner());
        if renewed_by.0 != coordinator_addr {
            renewed_by.0 = coordinator_addr.to_string();
        }
        renewed_by.1 = term;
    }

    /// The coordinator at `coordinator_addr` answered `NotLeader` with `message`: if that
    /// message names the term that renewed the lease last, from the address that renewed it,
    /// the coordinator of that term says it leads no more (see [`Self::leader_gone`]). Any
    /// other coordinator's word (a standby's, one behind a shared address) counts for nothing.
    fn leader_said_gone(&self, coordinator_addr: &str, message: &str) {
        let said = tailstream_wire::messages::led_term_named_in(message);
        let renewer = self.renewed_by.lock().unwrap_or_else(|p| p.into_inner()).1;
        if said == Some(renewer) {
            self.leader_gone(
                coordinator_addr,
                "it answered NotLeader for the term that renewed this lease",
            );
        }
    }

    /// The coordinator at `coordinator_addr` leads no more (`why`): if it renewed the lease
    /// last, no leader renews anything now and none hands anything over until a new one has
    /// waited out the leaderless lease, so the lease runs on for that long after its last
    /// renewal (see `lease`).
    fn leader_gone(&self, coordinator_addr: &str, why: &str) {
        if !self.may_extend_on_word_of(coordinator_addr) {
            return;
        }
        if let Some(left) = self.lease.extend_leaderless() {
            metrics::counter!(crate::metrics::LEADERLESS_EXTENSIONS).increment(1);
            self.log_bounds.leaderless_began();
            tracing::warn!(
                coordinator = %coordinator_addr,
                %why,
                left_ms = left.as_millis() as u64,
                "the coordinator that renewed this broker's lease leads no more: serving on without a leader"
            );
        }
    }

    /// Whether `coordinator_addr` renewed the lease last, and its short lease still holds (an
    /// extension is taken only then, once per renewal).
    fn may_extend_on_word_of(&self, coordinator_addr: &str) -> bool {
        let renewed_by = self.renewed_by.lock().unwrap_or_else(|p| p.into_inner());
        renewed_by.0 == coordinator_addr && !self.lease.has_extension() && self.lease.is_valid()
    }

    /// What a heartbeat to `coordinator_addr` says of the lease: extended, or possibly so
    /// before that coordinator's next answer (another renewed it last, whose word could
    /// still extend it), so the coordinator counts on the short lease only once it renewed it.
    fn lease_may_be_extended(&self, coordinator_addr: &str) -> bool {
        let renewed_by = self.renewed_by.lock().unwrap_or_else(|p| p.into_inner());
        self.lease.has_extension() || renewed_by.0 != coordinator_addr
    }

    /// Whether this broker may serve now.
    pub fn lease_valid(&self) -> bool {
        self.lease.is_valid()
    }

    /// The membership as of the latest heartbeat.
    pub fn brokers(&self) -> watch::Receiver<Vec<BrokerInfo>> {
        self.brokers.subscribe()
    }

    /// Drops what this backup holds of streams the coordinator deleted (each once), and forgets
    /// what it reported of their logs.
    fn drop_deleted_streams(&self, deleted: &[StreamId]) {
        let fresh: Vec<StreamId> = {
            let mut membership = self.lock();
            membership.dropped_streams.retain(|s| deleted.contains(s));
            let fresh: Vec<StreamId> = deleted
                .iter()
                .copied()
                .filter(|s| membership.dropped_streams.insert(*s))
                .collect();
            let gone = |(stream, _, _): &LogKey| fresh.contains(stream);
            membership.heads.forget_where(gone);
            membership.ends.forget_where(gone);
            membership.replication.forget_where(gone);
            fresh
        };
        if fresh.is_empty() {
            return;
        }
        self.log_bounds.forget_streams(&fresh);
        // Dropping replicas removes files and waits for buffer locks: off the async workers.
        let backup = self.backup.clone();
        tokio::task::spawn_blocking(move || {
            for stream in fresh {
                let dropped = backup.drop_stream(stream);
                if dropped > 0 {
                    tracing::info!(
                        stream = stream.0,
                        dropped,
                        "dropped the replicas of a deleted stream"
                    );
                }
            }
        });
    }

    /// Records the coordinator's membership: newer generations fence older ones, crashed
    /// generations are fenced, retired ones are dropped from this broker's backup.
    fn update_brokers(&self, brokers: Vec<BrokerInfo>, retired: &[ServerId]) {
        let retired: Vec<ServerId> = {
            let mut membership = self.lock();
            retired
                .iter()
                .copied()
                .filter(|gone| membership.dropped.insert(*gone))
                .collect()
        };
        for gone in &retired {
            self.backup.fence(*gone);
        }
        if !retired.is_empty() {
            // Dropping replicas removes files and waits for buffer locks: off the async
            // workers.
            let backup = self.backup.clone();
            tokio::task::spawn_blocking(move || {
                for gone in retired {
                    let dropped = backup.drop_generation(gone);
                    if dropped > 0 {
                        tracing::info!(server = %gone, dropped, "dropped the replicas left of a recovered crashed broker");
                    }
                }
            });
        }
        self.note_membership(brokers);
    }

    /// The membership view replicators choose backups from (takes no `Membership` lock).
    fn note_membership(&self, brokers: Vec<BrokerInfo>) {
        for broker in &brokers {
            self.backup.note_generation(broker.server_id);
            if broker.crashed {
                self.backup.fence(broker.server_id);
            }
        }
        self.brokers.send_if_modified(|current| {
            let changed = *current != brokers;
            if changed {
                *current = brokers;
            }
            changed
        });
    }

    pub fn server_id(&self) -> Option<ServerId> {
        self.lock().server_id
    }

    pub fn assignment_version(&self) -> u64 {
        self.lock().version
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Membership> {
        self.membership.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn registered(&self, server_id: ServerId) {
        let mut membership = self.lock();
        membership.server_id = Some(server_id);
        // A new incarnation starts from the coordinator's full assignment.
        membership.version = 0;
        membership.forget_reported();
    }

    /// The next heartbeat reports every head, end and replica set again, changed or not.
    fn report_everything_again(&self) {
        self.lock().forget_reported();
    }

    /// Segment memory this broker has left, for the coordinator's placement of rebuilds.
    pub fn segment_memory_free_bytes(&self) -> u64 {
        self.store.segment_memory_free_bytes()
    }

    /// This incarnation was declared crashed: serve nothing more, hold nothing, and let the
    /// membership loop register a new generation.
    fn declared_crashed(&self, why: &str) {
        self.lease.revoke();
        let dropped = self.store.clear();
        self.log_bounds.retain_wanted(|_| false);
        let mut membership = self.lock();
        let old = membership.server_id.take();
        membership.forget_reported();
        tracing::warn!(
            server = ?old,
            dropped,
            %why,
            "this incarnation is no longer a member: dropped its streamlets; registering again"
        );
    }

    /// Applies an assignment addressed to this incarnation, unless a newer one was applied.
    pub fn apply_assignments(
        &self,
        request: &AssignStreamletsRequest,
    ) -> Result<(), (Status, String)> {
        if let Err(newest) = self.term.admit(request.term) {
            return Err((
                Status::StaleTerm,
                stale("an assignment", request.term, newest),
            ));
        }
        let mut membership = self.lock();
        match membership.server_id {
            Some(me) if me == request.target => {}
            Some(me) => {
                return Err((
                    Status::StaleGeneration,
                    format!("assignment for {} reached {me}", request.target),
                ));
            }
            None => return Err((Status::UnknownServer, "broker not registered yet".into())),
        }
        if request.version < membership.version {
            return Ok(());
        }
        // Additions count only on top of exactly the version they were computed from: on any
        // other, something they do not say may have changed (the heartbeat catches up).
        if request
            .added_since
            .is_some_and(|base| base != membership.version)
        {
            self.catch_up.notify_one();
            return Ok(());
        }
        // Settings decide allocations (logs, replica slots): never trust them unchecked.
        for assignment in &request.assignments {
            tailstream_config::validate_stream_config(&assignment.config).map_err(|why| {
                (
                    Status::InvalidArgument,
                    format!(
                        "assignment of {} streamlet {}: {why}",
                        assignment.stream_name, assignment.streamlet.0
                    ),
                )
            })?;
        }
        // The streamlets created here choose their backups at once: from the membership as
        // of this assignment, not from a view that may predate this broker's first heartbeat.
        if !request.brokers.is_empty() {
            self.note_membership(request.brokers.clone());
        }
        let (created, dropped) = match request.added_since {
            Some(_) => (self.store.add_assignments(&request.assignments), 0),
            None => self
                .store
                .apply_assignments(request.version, &request.assignments),
        };
        membership.version = request.version;
        if !created.is_empty() || dropped > 0 {
            let created = created.len();
            tracing::info!(
                version = request.version,
                created,
                dropped,
                "assignment applied"
            );
        }
        for streamlet in created {
            // The receiver lives as long as the broker: a failed send means shutdown.
            let _ = self.created.send(streamlet);
        }
        Ok(())
    }

    /// What the next heartbeat reports: log heads (the newest segment with committed bytes:
    /// a segment rolled in memory whose bytes reached no backup yet is no loss if it
    /// disappears with this broker), committed ends (what the coordinator computes consumer
    /// group lag from) and replica sets, each where it differs from what the coordinator
    /// acknowledged. Costs what changed, not what is owned (see `heartbeat_reports`), and
    /// stays within `HEARTBEAT_REPORT_BYTES_MAX`: the rest goes in the next heartbeats.
    fn heartbeat_reports(&self) -> (Vec<LogHead>, Vec<LogEnd>, Vec<LogReplication>) {
        let moved = self.store.take_moved_logs();
        let health_changed = self.placements.take_changed();
        let rescan = std::mem::take(&mut self.lock().rescan);
        let everything = rescan.then(|| {
            let logs: Vec<LogKey> = self
                .store
                .streamlets()
                .iter()
                .flat_map(|s| s.logs().iter().map(|log| (s.stream(), s.id(), log.id())))
                .collect();
            (logs, self.placements.keys_with_health())
        });
        let mut membership = self.lock();
        let membership = &mut *membership;
        for key in moved {
            membership.heads.mark(key);
            membership.ends.mark(key);
        }
        for key in health_changed {
            membership.replication.mark(key);
        }
        if let Some((logs, replicated)) = everything {
            for key in logs {
                membership.heads.mark(key);
                membership.ends.mark(key);
            }
            for key in replicated {
                membership.replication.mark(key);
            }
        }
        let mut budget = HEARTBEAT_REPORT_BYTES_MAX;
        let log = |key: &LogKey| {
            let streamlet = self.store.get(key.0, key.1).ok()?;
            let log = streamlet.log(key.2).ok()?;
            let (_, committed) = log.offsets();
            Some((log.committed_segment(), committed))
        };
        let heads = membership
            .heads
            .take(&mut budget, |key| log(key)?.0, |_, _| LogHead::MIN_BYTES)
            .into_iter()
            .map(|(key, segment)| LogHead {
                stream: key.0,
                streamlet: key.1,
                log: key.2,
                segment,
            })
            .collect();
        let replication = membership
            .replication
            .take(
                &mut budget,
                |key| self.placements.health_of(*key),
                |key, (_, replicas)| {
                    encoded_len(&LogReplication {
                        stream: key.0,
                        streamlet: key.1,
                        replicas: replicas.clone(),
                    })
                },
            )
            .into_iter()
            .map(|(key, (_, replicas))| LogReplication {
                stream: key.0,
                streamlet: key.1,
                replicas,
            })
            .collect();
        let ends = membership
            .ends
            .take(
                &mut budget,
                |key| Some(log(key)?.1),
                |_, _| LogEnd::MIN_BYTES,
            )
            .into_iter()
            .map(|(key, committed_offset)| LogEnd {
                stream: key.0,
                streamlet: key.1,
                log: key.2,
                committed_offset,
            })
            .collect();
        (heads, ends, replication)
    }

    /// The heartbeat carrying the last `heartbeat_reports` was answered.
    fn reports_acknowledged(&self) {
        let mut membership = self.lock();
        membership.heads.acknowledged();
        membership.ends.acknowledged();
        membership.replication.acknowledged();
    }
}

/// Most log bounds in one report: half a frame the coordinator accepts, at their largest
/// (with an open segment). The rest go in the next report, sent at once after a full one.
const LOG_BOUNDS_REPORT_MAX: usize =
    COORDINATOR_FRAME_BODY_BYTES_MAX as usize / 2 / (LogBounds::MIN_BYTES + OpenSegment::MIN_BYTES);

/// Bytes a heartbeat spends on log reports at most: half the frame the coordinator accepts,
/// so the rest of the request always fits.
const HEARTBEAT_REPORT_BYTES_MAX: usize = COORDINATOR_FRAME_BODY_BYTES_MAX as usize / 2;

/// How long a coordinator may leave a heartbeat or report unanswered before the next one is
/// tried: a lease, at least a second; none with a single coordinator (nowhere else to go).
fn answer_deadline(
    cluster: &ClusterState,
    coordinators: &CoordinatorAddresses,
) -> Option<Duration> {
    (coordinators.len() > 1).then(|| cluster.lease.duration().max(Duration::from_secs(1)))
}

/// The lease lengths a broker accepts from the coordinator (a bug or a hostile peer could
/// otherwise set one that never ends, or ends at once).
const LEASE_MS_MIN: u64 = 10;
const LEASE_MS_MAX: u64 = 600_000;

/// Sends the log bounds replicators wait on, at once when one is wanted and at least every
/// `retry_every` while any is pending, on a connection of its own: a slow save at the
/// coordinator delays no heartbeat, and a failed report costs no lease. Runs until `shutdown`.
async fn run_log_bounds_reporter(
    cluster: Arc<ClusterState>,
    coordinators: CoordinatorAddresses,
    retry_every: Duration,
    client_config: RpcClientConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut client: Option<(String, CoordinatorPeerClient)> = None;
    // A report that was full leaves more to send: the next one goes at once.
    let mut more = false;
    loop {
        if !std::mem::take(&mut more) {
            tokio::select! {
                _ = cluster.log_bounds.something_wanted() => {}
                _ = tokio::time::sleep(retry_every) => {}
                _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
            }
        }
        let Some(server_id) = cluster.server_id() else {
            continue;
        };
        if client.is_none() {
            let addr = coordinators.current();
            match CoordinatorPeerClient::connect(&addr, client_config).await {
                Ok(connected) => client = Some((addr, connected)),
                Err(error) => {
                    tracing::debug!(%error, "log bounds: connecting to the coordinator failed");
                    coordinators.unanswered(&addr);
                    continue;
                }
            }
        }
        let Some((addr, connected)) = &client else {
            continue;
        };
        // As heartbeats do: with several coordinators, one that leaves a report unanswered
        // for a lease is passed over (acknowledgements in new segments wait on this report).
        // Its answer may come after a heartbeat's: a `NotLeader` counts only if nothing
        // renewed the lease since this report was sent (a lapse the leader has since left
        // says nothing of the renewal after it).
        let renewal_at_send = cluster.lease.last_renewal();
        let reported = report_log_bounds(&cluster, connected, server_id);
        let reported = if let Some(deadline) = answer_deadline(&cluster, &coordinators) {
            tokio::time::timeout(deadline, reported)
                .await
                .unwrap_or_else(|_| {
                    Err(StubError::Retry {
                        addr: addr.clone(),
                        reason: format!("no answer within {} ms", deadline.as_millis()),
                    })
                })
        } else {
            reported.await
        };
        match reported {
            Ok(full) => more = full,
            Err(error) => {
                // The membership session handles registration; this only retries. A
                // `NotLeader` naming the term that renewed the lease is the same word as a
                // heartbeat's: whichever hears it first extends the lease.
                if let StubError::Refused {
                    status: Status::NotLeader,
                    message,
                } = &error
                    && cluster.lease.last_renewal() == renewal_at_send
                {
                    cluster.leader_said_gone(addr, message);
                }
                tracing::warn!(%error, "reporting log bounds failed; retrying");
                coordinators.after_error(addr, &error);
                client = None;
            }
        }
    }
}

/// Sends the log bounds replicators wait on (if any) and records what the coordinator saved;
/// answers whether the report was full (more may wait).
async fn report_log_bounds(
    cluster: &ClusterState,
    client: &CoordinatorPeerClient,
    server_id: ServerId,
) -> Result<bool, StubError> {
    // Only what is wanted is looked up: this runs every `retry_every`, and a broker may own
    // tens of thousands of streamlets.
    cluster
        .log_bounds
        .retain_wanted(|key| cluster.store.get(key.0, key.1).is_ok());
    let bounds = cluster.log_bounds.pending(LOG_BOUNDS_REPORT_MAX);
    if bounds.is_empty() {
        return Ok(false);
    }
    let full = bounds.len() == LOG_BOUNDS_REPORT_MAX;
    let request = ReportLogBoundsRequest { server_id, bounds };
    let started = std::time::Instant::now();
    let response = client.report_log_bounds(&request).await?;
    metrics::histogram!(crate::metrics::LOG_BOUNDS_REPORT_LATENCY)
        .record(started.elapsed().as_secs_f64());
    cluster.log_bounds.made_durable(&response.durable);
    Ok(full)
}

/// Where this broker can be reached, as it tells the coordinator.
#[derive(Clone, Debug)]
pub struct Advertised {
    pub rpc_addr: String,
    pub peer_addr: String,
    pub admin_addr: String,
    /// Empty when the broker runs no Kafka listener.
    pub kafka_addr: String,
}

/// Registers and heartbeats until `shutdown`; reconnects and re-registers as needed.
pub async fn run_membership(
    cluster: Arc<ClusterState>,
    coordinator_addrs: String,
    advertised: Advertised,
    heartbeat_interval: Duration,
    client_config: RpcClientConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    // With several coordinators (etcd), only the leader listens: a call that gets no answer
    // moves on to the next address.
    let coordinators = CoordinatorAddresses::parse(&coordinator_addrs);
    tokio::spawn(run_log_bounds_reporter(
        cluster.clone(),
        coordinators.clone(),
        heartbeat_interval,
        client_config,
        shutdown.clone(),
    ));
    let backoff = Duration::from_millis(100);
    let mut redirected = false;
    // Whether the coordinator that renewed the lease last was just asked again at once.
    let mut asked_renewer_again = false;
    // The address asked again (the shared rotation may have moved on meanwhile: the log bounds
    // reporter turns it too).
    let mut ask_again: Option<String> = None;
    loop {
        let coordinator_addr = ask_again.take().unwrap_or_else(|| coordinators.current());
        // With several coordinators, a heartbeat the current one leaves unanswered for a
        // lease (at least a second) moves on: a paused leader must not hold brokers until the
        // new one counts them dead. With one, there is nowhere else to go.
        let heartbeat_deadline = answer_deadline(&cluster, &coordinators);
        let renewal_before = cluster.lease.last_renewal();
        let session = membership_session(
            &cluster,
            &coordinator_addr,
            &advertised,
            heartbeat_interval,
            heartbeat_deadline,
            client_config,
        );
        tokio::select! {
            (reason, next) = session => {
                tracing::warn!(%reason, coordinator = %coordinator_addr, "coordinator session ended; retrying");
                if !matches!(next, Next::Leader(_)) {
                    redirected = false;
                }
                // Once per word of a broken connection: a session that renewed the lease
                // since earns the next one its own retry.
                if next != Next::Another || cluster.lease.last_renewal() != renewal_before {
                    asked_renewer_again = false;
                }
                match next {
                    Next::Same => {}
                    Next::Another => {
                        if cluster.may_extend_on_word_of(&coordinator_addr) {
                            if nothing_listens_at(&coordinator_addr).await {
                                cluster.leader_gone(&coordinator_addr, "nothing listens at its address");
                            } else if !std::mem::replace(&mut asked_renewer_again, true) {
                                // It broke the connection (or did not answer) but does not
                                // refuse: a leader that stepped down stands by on the same
                                // ports and names the term it led. Asked again at once
                                // (once): going round the others first could outlast the short
                                // lease, and with it any extension.
                                ask_again = Some(coordinator_addr);
                                continue;
                            }
                        }
                        asked_renewer_again = false;
                        coordinators.unanswered(&coordinator_addr);
                    }
                    Next::Silent => {
                        if cluster.may_extend_on_word_of(&coordinator_addr)
                            && nothing_listens_at(&coordinator_addr).await
                        {
                            cluster.leader_gone(&coordinator_addr, "nothing listens at its address");
                        }
                        coordinators.unanswered(&coordinator_addr);
                    }
                    // A standby named the leader: straight there, without the pause (once
                    // in a row: two standbys naming each other make no loop without pauses).
                    Next::Leader(leader) => {
                        coordinators.redirected(&coordinator_addr, &leader);
                        if !std::mem::replace(&mut redirected, true) {
                            continue;
                        }
                    }
                }
            }
            _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
        }
    }
}

/// Whom the next membership session asks.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// The same coordinator (it answered, with an error that a new session may clear).
    Same,
    /// The next address: this one broke the connection (or a call to it failed or timed
    /// out), or does not lead.
    Another,
    /// The next address: this one left a heartbeat unanswered for its deadline (paused, or
    /// cut off): nothing it says could extend the lease by the time it answered.
    Silent,
    /// The leader a standby named.
    Leader(String),
}

impl Next {
    fn after(error: &StubError) -> Self {
        match error.leader_named() {
            Some(leader) => Next::Leader(leader.to_string()),
            None if error.wants_another_coordinator() => Next::Another,
            None => Next::Same,
        }
    }
}

/// One connection's worth of membership: register (if not yet), then heartbeat until an error
/// that needs a new connection or a new registration. Returns why it ended, and whom the next
/// session asks.
async fn membership_session(
    cluster: &ClusterState,
    coordinator_addr: &str,
    advertised: &Advertised,
    heartbeat_interval: Duration,
    heartbeat_deadline: Option<Duration>,
    client_config: RpcClientConfig,
) -> (String, Next) {
    let client = match CoordinatorPeerClient::connect(coordinator_addr, client_config).await {
        Ok(client) => client,
        Err(error) => return (error.to_string(), Next::after(&error)),
    };
    // A new connection may be to a coordinator that restarted and knows none of what was
    // reported (heads are memory only there): without this, an idle log's head would stay
    // unknown to it, and a recovery could not tell that log's newest segment missing.
    cluster.report_everything_again();
    if cluster.server_id().is_none() {
        let request = RegisterBrokerRequest {
            rpc_addr: advertised.rpc_addr.clone(),
            peer_addr: advertised.peer_addr.clone(),
            admin_addr: advertised.admin_addr.clone(),
            kafka_addr: advertised.kafka_addr.clone(),
        };
        let sent_at = BootInstant::now();
        let response = match client.register(&request).await {
            Ok(response) => response,
            Err(StubError::Fatal(why)) => {
                return (
                    format!(
                        "{coordinator_addr} is not the coordinator's peer listener, or speaks another protocol ({why})"
                    ),
                    Next::Same,
                );
            }
            Err(error) => {
                return (format!("register: {error}"), Next::after(&error));
            }
        };
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&response.lease_ms) {
            return (
                format!(
                    "the coordinator gave a lease of {} ms, outside {LEASE_MS_MIN}..={LEASE_MS_MAX}",
                    response.lease_ms
                ),
                Next::Same,
            );
        }
        if !(response.lease_ms..=LEASE_MS_MAX).contains(&response.leaderless_lease_ms) {
            return (
                format!(
                    "the coordinator gave a leaderless lease of {} ms, outside {}..={LEASE_MS_MAX}",
                    response.leaderless_lease_ms, response.lease_ms
                ),
                Next::Same,
            );
        }
        // One lease length in the cluster: the coordinator's, which recovery waits out.
        cluster.lease.set_durations(
            Duration::from_millis(response.lease_ms),
            Duration::from_millis(response.leaderless_lease_ms),
        );
        cluster.registered(response.server_id);
        // The registering leader's term is the current one, even if an earlier
        // incarnation saw a higher one (see `TermFence::reset_to`).
        cluster.term.reset_to(response.assignments.term);
        cluster.lease_renewed(coordinator_addr, response.assignments.term, sent_at);
        tracing::info!(server_id = %response.server_id, "registered with the coordinator");
        if let Err((_, message)) = cluster.apply_assignments(&response.assignments) {
            return (format!("initial assignment: {message}"), Next::Same);
        }
    }
    let mut tick = tokio::time::interval(heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A catch-up heartbeat goes at once, but never closer than a quarter interval to the one
    // before: a broker that somehow stays behind under a flood of creates heartbeats at four
    // times its pace at most, not back to back.
    let catch_up_spacing = heartbeat_interval / 4;
    let mut last_sent: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = cluster.catch_up.notified() => {
                let since = last_sent.map_or(catch_up_spacing, |at| at.elapsed());
                if since < catch_up_spacing {
                    tokio::time::sleep(catch_up_spacing - since).await;
                }
                // The regular tick counts from this heartbeat.
                tick.reset();
            }
        }
        last_sent = Some(std::time::Instant::now());
        let Some(server_id) = cluster.server_id() else {
            return ("lost registration".into(), Next::Same);
        };
        let (heads, log_ends, replication) = cluster.heartbeat_reports();
        let request = BrokerHeartbeatRequest {
            server_id,
            known_version: cluster.assignment_version(),
            heads,
            segment_memory_free_bytes: cluster.segment_memory_free_bytes(),
            log_ends,
            replication,
            lease_extended: cluster.lease_may_be_extended(coordinator_addr),
        };
        let sent_at = BootInstant::now();
        let answered = match heartbeat_deadline {
            Some(deadline) => {
                match tokio::time::timeout(deadline, client.heartbeat(&request)).await {
                    Ok(answered) => answered,
                    Err(_) => {
                        return (
                            format!("heartbeat: no answer within {} ms", deadline.as_millis()),
                            Next::Silent,
                        );
                    }
                }
            }
            None => client.heartbeat(&request).await,
        };
        match answered {
            Ok(response) => {
                // A deposed leader's answer renews nothing and changes nothing: the leader
                // is elsewhere.
                if let Err(newest) = cluster.term.admit(response.term) {
                    return (
                        stale("a heartbeat answer", response.term, newest),
                        Next::Another,
                    );
                }
                cluster.lease_renewed(coordinator_addr, response.term, sent_at);
                cluster.reports_acknowledged();
                cluster.update_brokers(response.brokers, &response.retired);
                cluster.drop_deleted_streams(&response.deleted_streams);
                if let Some(assignments) = response.assignments
                    && let Err((_, message)) = cluster.apply_assignments(&assignments)
                {
                    tracing::warn!(%message, "heartbeat assignment refused");
                }
            }
            Err(StubError::Refused {
                status: status @ (Status::UnknownServer | Status::StaleGeneration),
                ..
            }) => {
                cluster.declared_crashed(&format!("the coordinator answered {status}"));
                return (
                    format!("coordinator answered {status}: registering again"),
                    Next::Same,
                );
            }
            Err(error) => {
                if let StubError::Refused {
                    status: Status::NotLeader,
                    message,
                } = &error
                {
                    cluster.leader_said_gone(coordinator_addr, message);
                }
                return (format!("heartbeat: {error}"), Next::after(&error));
            }
        }
    }
}

/// Whether nothing listens at `coordinator_addr` (its process is gone, or it is a standby
/// that could not bind its port): a refused connection, told apart from silence, which
/// proves nothing.
async fn nothing_listens_at(coordinator_addr: &str) -> bool {
    let connect = tailstream_net::source::connect(coordinator_addr);
    matches!(
        tokio::time::timeout(REFUSAL_CHECK_TIMEOUT, connect).await,
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// How long the check for a refused connection waits (a refusal comes back within a round
/// trip; anything slower is silence).
const REFUSAL_CHECK_TIMEOUT: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::messages::not_leader_message;

    fn cluster(dir: &std::path::Path) -> ClusterState {
        let limits = tailstream_backup::BackupLimits {
            open_buffers_max: 1,
            open_buffer_bytes_max: 1 << 20,
        };
        let backup = BackupStore::load(dir, limits).unwrap();
        ClusterState::new(
            Arc::new(Store::new(1 << 20, 4, 1 << 20)),
            Arc::new(backup),
            Arc::default(),
            Duration::from_secs(5),
        )
        .0
    }

    /// At 10,000 streams of 16 streamlets, a broker registering with a new leader reported
    /// every log's replica set in one 1.6 MB heartbeat, which the coordinator refused as too
    /// large, again and again: the broker's lease ran out and the cluster stopped. Now each
    /// heartbeat carries what fits, and the rest follows.
    #[test]
    fn a_registration_reports_every_log_over_heartbeats_the_coordinator_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = cluster(dir.path());
        let backups: Vec<ServerId> = (0..7)
            .map(|index| ServerId {
                index,
                generation: u32::MAX,
            })
            .collect();
        let logs = 40_000u32;
        for i in 0..logs {
            let key = (
                StreamId(u64::from(i)),
                tailstream_wire::StreamletId(i),
                tailstream_wire::LogId(0),
            );
            let set = LogReplicaSet {
                log: key.2,
                backups: backups.clone(),
                in_sync: backups.clone(),
                in_sync_replicas: 7,
            };
            cluster.placements.publish_health(key, 1, set, 7, 1);
        }
        cluster.registered(ServerId {
            index: 9,
            generation: 1,
        });
        let (mut reported, mut heartbeats) = (0, 0);
        loop {
            let (heads, log_ends, replication) = cluster.heartbeat_reports();
            if replication.is_empty() {
                break;
            }
            reported += replication.len();
            heartbeats += 1;
            let request = BrokerHeartbeatRequest {
                server_id: ServerId {
                    index: 9,
                    generation: 1,
                },
                known_version: u64::MAX,
                heads,
                segment_memory_free_bytes: u64::MAX,
                log_ends,
                replication,
                lease_extended: true,
            };
            let mut encoded = bytes::BytesMut::new();
            tailstream_wire::Encode::encode(&request, &mut encoded);
            assert!(encoded.len() <= COORDINATOR_FRAME_BODY_BYTES_MAX as usize);
            // Every other heartbeat goes unanswered: its reports come again.
            if heartbeats % 2 == 0 {
                cluster.reports_acknowledged();
            } else {
                reported -= request.replication.len();
            }
        }
        assert_eq!(reported, logs as usize);
        assert!(heartbeats > 4, "{heartbeats} heartbeats");
        // Nothing changed since: nothing to say.
        assert_eq!(cluster.heartbeat_reports().2.len(), 0);
    }

    /// A new stream's streamlets arrive as additions on top of the version they were
    /// computed from; on any other version they are ignored (something they do not say may
    /// have changed) and a full assignment still drops what it leaves out.
    #[test]
    fn additions_apply_only_on_their_base_version_and_never_drop() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = cluster(dir.path());
        let me = ServerId {
            index: 0,
            generation: 1,
        };
        cluster.registered(me);
        let assignment = |stream: u64| tailstream_wire::messages::StreamletAssignment {
            stream: StreamId(stream),
            stream_name: format!("s{stream}"),
            streamlet: tailstream_wire::StreamletId(0),
            config: tailstream_config::Config::embedded().stream_defaults,
            epoch: tailstream_wire::OwnershipEpoch(1),
            recovering: false,
            log_starts: Vec::new(),
        };
        let request = |version, added_since, streams: &[u64]| AssignStreamletsRequest {
            term: CoordinatorTerm::default(),
            target: me,
            version,
            added_since,
            assignments: streams.iter().map(|s| assignment(*s)).collect(),
            brokers: Vec::new(),
        };
        let held = || {
            let mut held: Vec<u64> = cluster
                .store
                .streamlets()
                .iter()
                .map(|s| s.stream().0)
                .collect();
            held.sort();
            held
        };
        cluster.apply_assignments(&request(5, None, &[1])).unwrap();
        // Computed from version 6, which this broker never saw: ignored.
        cluster
            .apply_assignments(&request(7, Some(6), &[3]))
            .unwrap();
        assert_eq!((held(), cluster.assignment_version()), (vec![1], 5));
        cluster
            .apply_assignments(&request(6, Some(5), &[2]))
            .unwrap();
        assert_eq!((held(), cluster.assignment_version()), (vec![1, 2], 6));
        cluster
            .apply_assignments(&request(7, Some(6), &[3]))
            .unwrap();
        assert_eq!((held(), cluster.assignment_version()), (vec![1, 2, 3], 7));
        // A full assignment is the whole set.
        cluster
            .apply_assignments(&request(8, None, &[1, 3]))
            .unwrap();
        assert_eq!((held(), cluster.assignment_version()), (vec![1, 3], 8));
    }

    /// A full log bounds report, every entry at its largest, fits the coordinator's frame.
    #[test]
    fn a_full_log_bounds_report_fits_the_coordinators_frame() {
        let bounds = LogBounds {
            stream: StreamId(u64::MAX),
            streamlet: tailstream_wire::StreamletId(u32::MAX),
            log: tailstream_wire::LogId(u32::MAX),
            oldest: SegmentId(u64::MAX),
            head: SegmentId(u64::MAX),
            open: Some(OpenSegment {
                segment: SegmentId(u64::MAX),
                epoch: tailstream_wire::ReplicaEpoch(u32::MAX),
            }),
        };
        let request = ReportLogBoundsRequest {
            server_id: ServerId {
                index: u32::MAX,
                generation: u32::MAX,
            },
            bounds: vec![bounds; LOG_BOUNDS_REPORT_MAX],
        };
        let mut encoded = bytes::BytesMut::new();
        tailstream_wire::Encode::encode(&request, &mut encoded);
        assert!(encoded.len() <= COORDINATOR_FRAME_BODY_BYTES_MAX as usize);
        assert!(encoded.len() > COORDINATOR_FRAME_BODY_BYTES_MAX as usize / 4);
    }

    #[test]
    fn only_the_renewing_terms_own_not_leader_extends_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = cluster(dir.path());
        cluster
            .lease
            .set_durations(Duration::from_secs(5), Duration::from_secs(60));
        cluster.lease_renewed("c:1", CoordinatorTerm(5), BootInstant::now());
        let said = |addr: &str, term: Option<u64>| {
            let message = not_leader_message("no", term.map(CoordinatorTerm), Some("c:9"));
            cluster.leader_said_gone(addr, &message);
        };
        // A standby that never led, one that led an older term, and the right term from
        // another address (a shared address reaching another coordinator): no extension.
        said("c:1", None);
        said("c:1", Some(4));
        said("c:2", Some(5));
        assert!(!cluster.lease.has_extension());
        said("c:1", Some(5));
        assert!(cluster.lease.has_extension());
    }
}
