//! The coordinator's RPC handlers, as clients see them (`ClientFacing`: streams, brokers,
//! producer ids) and as brokers see them (`PeerFacing`: registration, heartbeats).
//!
//! Reads answer at once from memory. Changes go through `Coordinator::change` (saved before
//! they are answered) and answer later, so no connection's reader task waits for a disk. After
//! creating a stream the coordinator pushes each owning broker its new assignment and waits
//! (bounded) for them, so a client that produces right after `create stream` finds its
//! streamlets in place; a broker it could not reach catches up through its next heartbeat.

use crate::core::{Coordinator, unix_ms};
use crate::groups::lag::{StreamShape, lag};
use crate::groups::{Caller, GroupCoordinator};
use crate::leader_lease::LeaderLease;
use crate::leadership_view::LeadershipView;
use crate::metadata::{ProducerIds, producer_ids};
use crate::recovery::orchestrator::Orchestrator;
use crate::watchdog::WatchdogHandle;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tailstream_auth::acl::Access;
use tailstream_net::{Reply, Request, Response, Service};
use tailstream_wire::messages::{
    AllocateProducerIdRequest, AllocateProducerIdRequestBeforeOwner, AllocateProducerIdResponse,
    BrokerHeartbeatRequest, BrokerHeartbeatResponse, ConsumerGroupSummary, CreateStreamRequest,
    DeleteStreamRequest, DescribeConsumerGroupsResponse, DescribeLeadershipResponse,
    DescribeStreamRequest, ListBrokersResponse, ListRecoveriesResponse, ListStreamsResponse,
    PartitionLagInfo, ProducerIdBindingKeyResponse, RecoverySummary, RegisterBrokerRequest,
    RegisterBrokerResponse, ReportLogBoundsRequest, ReportLogBoundsResponse, ReportSuspectRequest,
    not_leader_message,
};
use tailstream_wire::{Decode, Opcode, ProducerEpoch, Status};

/// The answer of a coordinator whose leadership may have lapsed: `NotLeader`, naming the term
/// it led, so that a broker whose lease it renewed last (and only such a broker) may take it as
/// the word that nobody renews leases now.
fn not_leading(core: &Coordinator) -> Response {
    let term = core.lock().metadata.term;
    Response::error(
        Status::NotLeader,
        not_leader_message(
            "this coordinator does not lead now: ask another",
            Some(term),
            None,
        ),
    )
}

/// Recoveries `ListRecoveries` answers with, the most recent.
const RECOVERIES_LISTED: usize = 32;

#[derive(Clone, Debug)]
pub struct CoordinatorService {
    core: Coordinator,
    producer_ids: Arc<Mutex<ProducerIds>>,
    watchdog: WatchdogHandle,
    orchestrator: Arc<Orchestrator>,
    groups: Arc<GroupCoordinator>,
    /// Whether this coordinator surely still leads: nothing but a ping is answered otherwise.
    leadership: Arc<LeaderLease>,
    /// Who leads (this one), and who stands by.
    view: LeadershipView,
    /// Lease lengths (told to every broker at registration: one lease length in the
    /// cluster) and the cluster's limits.
    settings: ServiceSettings,
    /// The stretch of leadership (`LeaderLease::valid_since`, boot-clock nanoseconds) the
    /// brokers' liveness counts from: a new one restarts it.
    liveness_stretch: Arc<AtomicU64>,
    /// Derives unknown users' decoy credentials until the cluster has a saved secret.
    decoy_secret: users::DecoySecret,
}

/// The coordinator's settings the service applies.
#[derive(Clone, Debug)]
pub struct ServiceSettings {
    /// The brokers' lease lengths (told to each at registration).
    pub lease_ms: u64,
    pub leaderless_lease_ms: u64,
    /// Streams the cluster holds at most (`coordinator.streams_max`): a create past it is
    /// refused with `QuotaExceeded`, so that no client (an auto-creating Kafka client
    /// among them) grows the metadata without end.
    pub streams_max: usize,
    /// Fresh producer ids handed out per second at most (`coordinator.producer_ids_per_second`).
    pub producer_ids_per_second: u32,
    /// Users kept at most (`coordinator.users_max`).
    pub users_max: usize,
    /// Access control rules kept at most (`coordinator.acls_max`).
    pub acls_max: usize,
    /// What user and access control operations on the client listener require.
    pub admin_token: AdminToken,
    /// Whether clients on the client listener must authenticate and are held to the rules
    /// (`security.client_authentication`), and who is held to none (`security.super_users`).
    pub client_authentication: bool,
    pub super_users: Vec<String>,
}

#[path = "service_access.rs"]
mod access;
#[path = "service_offsets.rs"]
mod offsets;
#[path = "service_streams.rs"]
mod streams;
#[path = "service_users.rs"]
mod users;

pub use access::MetadataCredentials;
pub use users::AdminToken;

fn decode<T: Decode>(body: Bytes) -> Result<T, Response> {
    T::decode_exact(body).map_err(|e| Response::error(Status::Malformed, e.to_string()))
}

/// Whom a group call arriving on `facing` counts against.
fn group_caller(facing: Facing, request: &Request) -> Caller {
    match facing {
        Facing::Clients => Caller::Connection(request.session.user().map(Arc::from)),
        Facing::Peers => Caller::Member,
    }
}

fn later(answer: impl Future<Output = Response> + Send + 'static) -> Reply {
    Reply::Later(Box::pin(answer))
}

impl CoordinatorService {
    pub fn new(
        core: Coordinator,
        watchdog: WatchdogHandle,
        orchestrator: Arc<Orchestrator>,
        groups: Arc<GroupCoordinator>,
        leadership: Arc<LeaderLease>,
        view: LeadershipView,
        settings: ServiceSettings,
    ) -> Self {
        Self {
            core,
            producer_ids: Arc::new(Mutex::new(ProducerIds::paced(
                settings.producer_ids_per_second,
            ))),
            watchdog,
            orchestrator,
            groups,
            leadership,
            view,
            settings,
            liveness_stretch: Arc::default(),
            decoy_secret: users::DecoySecret(rand::random()),
        }
    }

    /// A new stretch of leadership (the first, or one after a lapse of the etcd lease, when
    /// no heartbeat was answered) restarts the brokers' liveness clock.
    fn follow_leadership_stretch(&self) {
        let Some(since) = self.leadership.valid_since() else {
            return;
        };
        if self.liveness_stretch.swap(since.nanos(), Ordering::AcqRel) != since.nanos() {
            self.core.lock().liveness.restart(Instant::now());
        }
    }

    /// This leader, its term, and the coordinators standing by.
    pub async fn describe_leadership(&self) -> DescribeLeadershipResponse {
        let term = self.core.lock().metadata.term;
        self.view.describe(term).await
    }

    /// Lag of every group's committed partitions, and the groups with members now.
    pub fn group_lag(&self) -> (Vec<PartitionLagInfo>, Vec<(String, usize, u32)>) {
        let committed = self.groups.committed();
        let state = self.core.lock();
        let streams: HashMap<String, StreamShape> = state
            .metadata
            .streams
            .values()
            .map(|s| {
                let shape = StreamShape {
                    id: s.id,
                    logs_per_streamlet: s.config.logs_per_streamlet,
                    streamlets: u32::try_from(s.placements.len()).unwrap_or(u32::MAX),
                };
                (s.name.clone(), shape)
            })
            .collect();
        let rows = lag(&committed, &streams, &state.log_ends);
        drop(state);
        (rows, self.groups.members())
    }

    /// `group_lag` as the `DescribeConsumerGroups` answer (what `tailstream group list` shows).
    pub fn describe_consumer_groups(&self) -> DescribeConsumerGroupsResponse {
        let (lag, members) = self.group_lag();
        DescribeConsumerGroupsResponse {
            groups: members
                .into_iter()
                .map(|(group, members, generation)| ConsumerGroupSummary {
                    group,
                    members: u32::try_from(members).unwrap_or(u32::MAX),
                    generation,
                })
                .collect(),
            lag,
        }
    }

    pub fn core(&self) -> &Coordinator {
        &self.core
    }

    /// Snapshot for the admin endpoint: brokers with liveness, and every stream.
    pub fn snapshot(&self) -> (ListBrokersResponse, ListStreamsResponse) {
        let state = self.core.lock();
        let now = Instant::now();
        let brokers = state
            .metadata
            .broker_infos(|id| state.liveness.is_alive(id, now));
        let streams = state
            .metadata
            .all_streams()
            .into_iter()
            .map(|s| state.with_replication(s))
            .collect();
        (
            ListBrokersResponse { brokers },
            ListStreamsResponse { streams },
        )
    }

    fn register(&self, body: Bytes) -> Reply {
        let request: RegisterBrokerRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let core = self.core.clone();
        let orchestrator = self.orchestrator.clone();
        let (leadership, leases) = (self.leadership.clone(), self.settings.clone());
        later(async move {
            let now_ms = unix_ms();
            let changed = core
                .change(move |m| {
                    let registered = m.register_broker(
                        &request.rpc_addr,
                        &request.peer_addr,
                        &request.admin_addr,
                        &request.kafka_addr,
                    )?;
                    // A process back at a known address lost its memory: its previous
                    // incarnation crashed, and its streamlets are recovered elsewhere.
                    if let Some(crashed) = registered.declared {
                        m.open_recovery(crashed, registered.to_recover.clone(), now_ms, 0);
                    }
                    Ok((registered, request.rpc_addr))
                })
                .await;
            let (registered, rpc_addr) = match changed {
                Ok(changed) => changed,
                Err(error) => return error.response(),
            };
            let server_id = registered.server_id;
            if let Some(crashed) = registered.declared {
                tracing::warn!(
                    %crashed,
                    streamlets = registered.to_recover.len(),
                    "a broker came back as a new incarnation: the previous one is declared crashed"
                );
                metrics::counter!(crate::metrics::CRASHES_DECLARED).increment(1);
            }
            // New members (and the backups they bring) can make lost streamlets whole.
            orchestrator.wake();
            if !leadership.is_valid() {
                // Saved, but this answer would start a lease a newer leader does not know
                // of: the broker registers again, with whoever leads.
                return not_leading(&core);
            }
            let mut state = core.lock();
            state.broker_registered(server_id, Instant::now());
            tracing::info!(%server_id, rpc = %rpc_addr, "broker registered");
            let assignments = state.assignments_for(server_id);
            state.additions.sent_full(server_id, Instant::now());
            state.additions.holds(server_id, assignments.version);
            Response::ok(&RegisterBrokerResponse {
                server_id,
                assignments,
                lease_ms: leases.lease_ms,
                leaderless_lease_ms: leases.leaderless_lease_ms,
            })
        })
    }

    fn heartbeat(&self, body: Bytes) -> Result<Response, Response> {
        let request: BrokerHeartbeatRequest = decode(body)?;
        let mut state = self.core.lock();
        state
            .metadata
            .check_server(request.server_id)
            .map_err(|e| Response::error(e.status(), e.to_string()))?;
        let now = Instant::now();
        state.liveness.heard(request.server_id, now);
        if !request.lease_extended {
            state.liveness.heard_clean(request.server_id, now);
        }
        state
            .memory_free_bytes
            .insert(request.server_id, request.segment_memory_free_bytes);
        state.take_reports(
            request.server_id,
            &request.heads,
            &request.log_ends,
            request.replication,
        );
        // Clamped: a version from the future (a broker's bug) must not pin full sets.
        let known = request.known_version.min(state.metadata.version);
        state.additions.holds(request.server_id, known);
        let assignments = (request.known_version < state.metadata.version)
            .then(|| state.assignments_since(request.server_id, request.known_version));
        if let Some(sent) = &assignments {
            state.additions.holds(request.server_id, sent.version);
        }
        let brokers = state.broker_infos();
        Ok(Response::ok(&BrokerHeartbeatResponse {
            term: state.metadata.term,
            assignments,
            brokers,
            retired: state.metadata.retired(),
            deleted_streams: state.metadata.deleted_streams.clone(),
        }))
    }

    /// An owner makes logs' kept segments durable before it acknowledges a record in a new
    /// head (or frees older replicas); answered once saved. Bounds already covered cost no
    /// disk write, so reports repeated after a reconnect are cheap.
    fn report_log_bounds(&self, body: Bytes) -> Reply {
        let request: ReportLogBoundsRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        {
            let state = self.core.lock();
            if let Err(error) = state.metadata.check_server(request.server_id) {
                return Reply::Ready(Response::error(error.status(), error.to_string()));
            }
            if state.metadata.log_bounds_covered(&request.bounds) {
                return Reply::Ready(Response::ok(&ReportLogBoundsResponse {
                    durable: request.bounds,
                }));
            }
        }
        let core = self.core.clone();
        later(async move {
            let server = request.server_id;
            let bounds = request.bounds;
            match core
                .change(move |metadata| metadata.record_log_bounds(server, &bounds))
                .await
            {
                Ok(durable) => Response::ok(&ReportLogBoundsResponse { durable }),
                Err(error) => error.response(),
            }
        })
    }

    /// A producer session: the next epoch of `previous` when it names an id this
    /// coordinator issued to the same owner (Kafka's InitProducerId with a producer id), else
    /// a fresh id. The owner is the connection's user on the client listener, the user a
    /// broker names for its Kafka client on the peer listener.
    fn allocate_producer_id(&self, facing: Facing, request: &Request) -> Reply {
        // An empty body (older clients) asks for a fresh id.
        let asked = if request.body.is_empty() {
            AllocateProducerIdRequest {
                previous: None,
                owner: None,
            }
        } else {
            let body = request.body.clone();
            match decode::<AllocateProducerIdRequest>(body.clone()) {
                Ok(asked) => asked,
                Err(response) => match decode::<AllocateProducerIdRequestBeforeOwner>(body) {
                    Ok(older) => AllocateProducerIdRequest {
                        previous: older.previous,
                        owner: None,
                    },
                    Err(_) => return Reply::Ready(response),
                },
            }
        };
        let owner: Option<Arc<str>> = match facing {
            Facing::Clients => request.session.user().map(Arc::from),
            Facing::Peers => asked.owner.as_deref().map(Arc::from),
        };
        let not_yet = || {
            Response::error(
                Status::Busy,
                "the cluster's secret is not saved yet (no coordinator has led): retry",
            )
        };
        // Most ids come from the block already persisted: no disk write.
        let taken = {
            let state = self.core.lock();
            let ceiling = state.metadata.producer_id_ceiling;
            let Some(keys) = state.metadata.producer_id_keys() else {
                return Reply::Ready(not_yet());
            };
            let bumped = asked.previous.and_then(|p| {
                producer_ids::bumped(
                    (p.producer_id, p.producer_epoch),
                    ceiling,
                    &keys,
                    owner.as_deref(),
                )
            });
            match bumped {
                Some(session) => Ok(session),
                None => {
                    let mut ids = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
                    if !ids.admit(std::time::Instant::now()) {
                        return Reply::Ready(Response::error(
                            Status::Busy,
                            format!(
                                "fresh producer ids are handed out at most {} a second (coordinator.producer_ids_per_second): retry",
                                self.settings.producer_ids_per_second
                            ),
                        ));
                    }
                    ids.take(ceiling, &keys, owner.as_deref())
                        .map(|id| (id, ProducerEpoch(0)))
                }
            }
        };
        let next = match taken {
            Ok((producer_id, producer_epoch)) => {
                return Reply::Ready(Response::ok(&AllocateProducerIdResponse {
                    producer_id,
                    producer_epoch,
                }));
            }
            Err(next) => next,
        };
        let service = self.clone();
        later(async move {
            // Raise the ceiling durably before any id of the new block is handed out (the
            // first time, with the key ids are enciphered with).
            let fresh_key: u64 = rand::random();
            if let Err(error) = service
                .core
                .change(move |m| {
                    m.raise_producer_id_ceiling(next, fresh_key);
                    Ok(())
                })
                .await
            {
                return error.response();
            }
            let state = service.core.lock();
            let ceiling = state.metadata.producer_id_ceiling;
            let Some(keys) = state.metadata.producer_id_keys() else {
                return not_yet();
            };
            let mut ids = service
                .producer_ids
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match ids.take(ceiling, &keys, owner.as_deref()) {
                Ok(producer_id) => Response::ok(&AllocateProducerIdResponse {
                    producer_id,
                    producer_epoch: ProducerEpoch(0),
                }),
                Err(_) => Response::error(Status::Busy, "producer ids are being reserved; retry"),
            }
        })
    }

    /// The producer id binding key, for a broker (peer listener only).
    fn producer_id_binding_key(&self) -> Response {
        match self.core.lock().metadata.producer_binding_key() {
            Some(key) => Response::ok(&ProducerIdBindingKeyResponse {
                key: Bytes::copy_from_slice(key.as_bytes()),
            }),
            None => Response::error(
                Status::Busy,
                "the cluster's secret is not saved yet (no coordinator has led): retry",
            ),
        }
    }

    fn create_stream(&self, body: Bytes) -> Reply {
        let request: CreateStreamRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let (core, streams_max) = (self.core.clone(), self.settings.streams_max);
        later(async move {
            let live = core.lock().live_brokers(Instant::now());
            let name = request.name.clone();
            let created = core
                .change(move |m| {
                    let base = m.version;
                    let record = m
                        .create_stream(&request.name, request.streamlets, request.config, &live)?
                        .clone();
                    // Counted after the create's own checks (a bad name or an existing
                    // stream says so first); refused, the change is not kept.
                    if m.streams.len() > streams_max {
                        return Err(crate::metadata::MetadataError::LimitReached(format!(
                            "the cluster holds {} streams, its limit (coordinator.streams_max)",
                            m.streams.len() - 1
                        )));
                    }
                    Ok((
                        m.describe(&record),
                        base,
                        m.version,
                        record.assignments_by_owner(),
                    ))
                })
                .await;
            let (metadata, base, version, added) = match created {
                Ok(created) => created,
                Err(error) => return error.response(),
            };
            tracing::info!(stream = %name, streamlets = metadata.streamlets.len(), "stream created");
            // Its owners gain its streamlets and nothing else changed: they are sent those
            // alone, not their whole assignment.
            core.push_additions(base, version, added).await;
            Response::ok(&metadata)
        })
    }

    /// The most recent recoveries (what `cluster status` shows).
    pub fn list_recoveries(&self) -> ListRecoveriesResponse {
        let state = self.core.lock();
        let recoveries = &state.metadata.recoveries;
        let recent = &recoveries[recoveries.len().saturating_sub(RECOVERIES_LISTED)..];
        ListRecoveriesResponse {
            recoveries: recent
                .iter()
                .map(|r| RecoverySummary {
                    id: r.id,
                    crashed: r.crashed,
                    phase: format!("{:?}", r.phase),
                    streamlets: u32::try_from(r.streamlets.len()).unwrap_or(u32::MAX),
                    declared_at_ms: r.declared_at_ms,
                    detect_ms: r.detect_ms,
                    locate_ms: r.locate_ms,
                    replay_ms: r.replay_ms,
                    rereplicate_ms: r.rereplicate_ms,
                    lease_wait_ms: r.lease_wait_ms,
                    total_ms: r.total_ms,
                    bytes: r.bytes,
                    segments_adopted: r.segments_adopted,
                    segments_copied: r.segments_copied,
                    lost: r.lost.clone(),
                })
                .collect(),
        }
    }

    fn delete_stream(&self, body: Bytes) -> Reply {
        let request: DeleteStreamRequest = match decode(body) {
            Ok(request) => request,
            Err(response) => return Reply::Ready(response),
        };
        let core = self.core.clone();
        later(async move {
            let name = request.name.clone();
            let deleted = core.change(move |m| m.delete_stream(&request.name)).await;
            let (id, owners) = match deleted {
                Ok(deleted) => deleted,
                Err(error) => return error.response(),
            };
            {
                let mut state = core.lock();
                state.heads.retain(|(stream, _, _), _| *stream != id);
                state.log_ends.retain(|(stream, _, _), _| *stream != id);
                state.replication.retain(|(stream, _, _), _| *stream != id);
            }
            tracing::info!(stream = %name, id = id.0, "stream deleted");
            // Its owners drop its streamlets now; its backups hear of it in their heartbeats.
            core.push_assignments(owners).await;
            Response::empty()
        })
    }

    /// A broker says a peer missed its pings: the watchdog checks it itself.
    fn report_suspect(&self, body: Bytes) -> Result<Response, Response> {
        let request: ReportSuspectRequest = decode(body)?;
        self.core
            .lock()
            .metadata
            .check_server(request.reporter)
            .map_err(|e| Response::error(e.status(), e.to_string()))?;
        tracing::info!(reporter = %request.reporter, suspect = %request.suspect, "broker reported silent");
        self.watchdog.report(request.suspect);
        Ok(Response::empty())
    }

    fn describe_stream(&self, body: Bytes) -> Result<Response, Response> {
        let request: DescribeStreamRequest = decode(body)?;
        let state = self.core.lock();
        let metadata = state
            .metadata
            .stream_metadata(&request.name)
            .map_err(|e| Response::error(e.status(), e.to_string()))?;
        Ok(Response::ok(&state.with_replication(metadata)))
    }

    /// Answers `request` if `facing` serves its opcode.
    fn dispatch_as(&self, facing: Facing, request: Request) -> Reply {
        metrics::counter!(crate::metrics::RPCS, "opcode" => format!("{:?}", request.opcode))
            .increment(1);
        let ready = |result: Result<Response, Response>| Reply::Ready(result.unwrap_or_else(|e| e));
        if request.opcode != Opcode::Ping {
            self.follow_leadership_stretch();
        }
        if request.opcode != Opcode::Ping && !self.leadership.is_valid() {
            // Checked as the request is answered (a heartbeat's answer is made here, at once):
            // a coordinator that may have been replaced renews no broker's lease and tells no
            // one a state a newer leader may have changed.
            return Reply::Ready(not_leading(&self.core));
        }
        let access = match facing {
            Facing::Clients => self.client_access(&request),
            Facing::Peers => Access::Everything,
        };
        if let Err(refused) = self.authorize_client(&access, &request) {
            return Reply::Ready(refused);
        }
        match (facing, request.opcode) {
            (_, Opcode::Ping) => Reply::Ready(Response::empty()),
            (Facing::Peers, Opcode::RegisterBroker) => self.register(request.body),
            (Facing::Peers, Opcode::BrokerHeartbeat) => ready(self.heartbeat(request.body)),
            (Facing::Peers, Opcode::ReportSuspect) => ready(self.report_suspect(request.body)),
            (Facing::Peers, Opcode::ReportLogBounds) => self.report_log_bounds(request.body),
            (_, Opcode::AllocateProducerId) => self.allocate_producer_id(facing, &request),
            (Facing::Peers, Opcode::ProducerIdBindingKey) => {
                Reply::Ready(self.producer_id_binding_key())
            }
            (_, Opcode::CreateStream) => self.create_stream(request.body),
            (_, Opcode::AddStreamlets) => self.add_streamlets(request.body),
            (_, Opcode::AlterRetention) => self.alter_retention(request.body),
            (_, Opcode::DeleteRecords) => self.delete_records(request.body),
            (_, Opcode::DescribeStream) => ready(self.describe_stream(request.body)),
            (_, Opcode::DeleteStream) => self.delete_stream(request.body),
            (_, Opcode::DescribeLeadership) => {
                let service = self.clone();
                later(async move { Response::ok(&service.describe_leadership().await) })
            }
            (_, Opcode::ListRecoveries) => Reply::Ready(Response::ok(&self.list_recoveries())),
            // Users and rules change only through the client listener, with the admin token:
            // no member needs to, so a peer port (open to anyone who reaches it without TLS)
            // cannot change them. Brokers list the rules on it (and learn the producer id
            // binding key, and name their Kafka clients' users as producer id owners: what a
            // peer port grants is a member's trust).
            (Facing::Clients, Opcode::CreateUser) => self.create_user(request.body, true),
            (Facing::Clients, Opcode::DeleteUser) => self.delete_user(request.body, true),
            (Facing::Clients, Opcode::ListUsers) => ready(self.list_users(request.body, true)),
            (Facing::Clients, Opcode::AddAcl) => self.change_acl(request.body, true, true),
            (Facing::Clients, Opcode::RemoveAcl) => self.change_acl(request.body, false, true),
            (_, Opcode::ListAcls) => ready(self.list_acls(request.body, facing == Facing::Clients)),
            (Facing::Peers, Opcode::LookupCredentials) => {
                ready(self.lookup_credentials(request.body))
            }
            (_, Opcode::ListStreams) => {
                let streams = self.visible_streams(&access, self.snapshot().1);
                Reply::Ready(Response::ok(&streams))
            }
            (_, Opcode::ListBrokers) => Reply::Ready(Response::ok(&self.snapshot().0)),
            (_, Opcode::GroupJoin) => {
                let caller = group_caller(facing, &request);
                self.groups.join(request.body, &caller)
            }
            (_, Opcode::GroupSync) => self.groups.sync(request.body),
            (_, Opcode::GroupHeartbeat) => Reply::Ready(self.groups.heartbeat(request.body)),
            (_, Opcode::GroupLeave) => Reply::Ready(self.groups.leave(request.body)),
            (_, Opcode::OffsetCommit) => {
                let caller = group_caller(facing, &request);
                self.commit_offsets(request.body, &caller)
            }
            (_, Opcode::OffsetFetch) => {
                let offsets = self.groups.fetch(request.body);
                Reply::Ready(self.visible_offsets(&access, offsets))
            }
            (_, Opcode::DescribeConsumerGroups) => {
                Reply::Ready(Response::ok(&self.describe_consumer_groups()))
            }
            (_, Opcode::DescribeGroups) => Reply::Ready(self.groups.describe(request.body)),
            (_, Opcode::DeleteGroups) => self.groups.delete_groups(request.body),
            (_, Opcode::OffsetDelete) => self.groups.delete_offsets(request.body),
            (
                Facing::Peers,
                Opcode::CreateUser
                | Opcode::DeleteUser
                | Opcode::ListUsers
                | Opcode::AddAcl
                | Opcode::RemoveAcl,
            ) => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!(
                    "{:?} is served on the coordinator's client listener (coordinator.rpc_addr), with the admin token",
                    request.opcode
                ),
            )),
            (
                Facing::Clients,
                Opcode::RegisterBroker
                | Opcode::BrokerHeartbeat
                | Opcode::ReportLogBounds
                | Opcode::LookupCredentials
                | Opcode::ProducerIdBindingKey,
            ) => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!(
                    "{:?} is served on the coordinator's peer listener (coordinator.peer_addr), not its client listener",
                    request.opcode
                ),
            )),
            (_, other) => Reply::Ready(Response::error(
                Status::UnknownOpcode,
                format!("{other:?} is not a coordinator operation on this listener"),
            )),
        }
    }
}

/// Which listener a request arrived on: each serves only its own operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Facing {
    Clients,
    Peers,
}

/// The coordinator as clients see it (`coordinator.rpc_addr`): streams, brokers, producer ids.
#[derive(Clone, Debug)]
pub struct ClientFacing(pub CoordinatorService);

/// The coordinator as brokers see it (`coordinator.peer_addr`): registration and heartbeats,
/// and the clients' operations too, which a broker's front end (the Kafka listener) calls for
/// its own clients.
#[derive(Clone, Debug)]
pub struct PeerFacing(pub CoordinatorService);

impl Service for ClientFacing {
    fn dispatch(&self, request: Request) -> Reply {
        self.0.dispatch_as(Facing::Clients, request)
    }

    fn open_before_authentication(&self, opcode: Opcode) -> bool {
        access::carries_its_own_credential(opcode)
    }
}

impl Service for PeerFacing {
    fn dispatch(&self, request: Request) -> Reply {
        self.0.dispatch_as(Facing::Peers, request)
    }
}
