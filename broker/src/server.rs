//! A broker process, assembled: client and peer RPC listeners, the software NIC, admin HTTP,
//! retention timer, membership loop.
//!
//! Two runtimes: the process's own (the data path: client listeners, the NIC, replication,
//! admin) and a control runtime on a thread of its own (`tailstream_net::control`) for what
//! other members time this broker by: the peer listener (pings, replica control RPCs,
//! assignments), the membership loop (heartbeats, the lease) and the pinger. A broker whose
//! data path saturates its cores still answers pings and heartbeats on time; the heavy work
//! the peer listener is asked for (recoveries) is handed back to the data runtime.

use crate::backup::nic::{NicLimits, serve_nic};
use crate::backup::{BackupLimits, BackupService, BackupStore};
use crate::cluster::{Advertised, ClusterState, run_membership};
use crate::data_plane::DataPlane;
use crate::metrics as m;
use crate::peer_service::PeerService;
use crate::pinger::{PingConfig, run_pinger};
use crate::recovery::Recovery;
use crate::replication::backups::{Backups, WritePath};
use crate::replication::placements::ReplicaPlacements;
use crate::replication::selector::BackupSelector;
use crate::replication::{ReplicationContext, run_manager};
use crate::service::BrokerService;
use crate::storage::Store;
use axum::Router;
use axum::routing::get;
use futures::future::BoxFuture;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_config::{Config, ReplicationConfig};
use tailstream_identity::{Authorizer, Credentials};
use tailstream_net::Authentication;
use tailstream_net::control::{ControlRuntime, adopt_listener};
use tailstream_net::memory::TrimPolicy;
use tailstream_net::scram_server::ScramAuthenticator;
use tailstream_net::server::{ServerLimits, run_until_shutdown, serve, shutdown_signalled};
use tailstream_net::tls::Facing;
use tailstream_net::{BodyBudget, ConnectionLimits, RpcClientConfig};
use tailstream_stubs::CoordinatorClient;
use tailstream_stubs::coordinator::client_rpc_config;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long a starting broker waits for its first spare replica buffers before it registers.
const SPARES_AT_START_WAIT: Duration = Duration::from_secs(1);

/// What a broker process needs to start.
#[derive(Clone, Debug)]
pub struct BrokerOptions {
    pub config: Config,
    /// The coordinator's peer listener, where brokers register and heartbeat.
    pub coordinator_peer_addr: String,
    /// Where Kafka clients reach this broker, when it runs a Kafka front end (advertised to
    /// the coordinator, which tells every broker's Kafka clients).
    pub kafka_addr: Option<String>,
}

/// What a front end other than the native RPC (the Kafka listener) gets from the broker it
/// runs in: the data plane it serves over, the broker's view of the cluster, and where the
/// coordinator's peer listener is (for stream metadata and the like).
#[derive(Clone, Debug)]
pub struct FrontEndContext {
    pub plane: Arc<DataPlane>,
    pub cluster: Arc<ClusterState>,
    pub config: Config,
    pub coordinator_peer_addr: String,
    pub shutdown: watch::Receiver<bool>,
}

/// A front end, already bound (its address is in `BrokerOptions::kafka_addr`), started once
/// the data plane exists; it serves until the context's shutdown.
pub type FrontEnd = Box<dyn FnOnce(FrontEndContext) -> BoxFuture<'static, ()> + Send>;

/// Addresses a started broker actually listens on (ports may have been 0 in the config).
#[derive(Clone, Copy, Debug)]
pub struct BrokerAddrs {
    pub rpc: SocketAddr,
    pub peer: SocketAddr,
    pub admin: SocketAddr,
}

/// Binds, prints the addresses on one line (`tailstream broker ready rpc=... peer=...
/// admin=...`, which `tailstream dev` reads), and serves until `shutdown` turns true.
pub async fn run(options: BrokerOptions, shutdown: watch::Receiver<bool>) -> Result<(), String> {
    run_with(options, Vec::new(), shutdown).await
}

/// `run`, with front ends served beside the native RPC.
pub async fn run_with(
    options: BrokerOptions,
    front_ends: Vec<FrontEnd>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    tailstream_net::tls::require_member(options.config.tls.enabled)?;
    if let Some(warning) = options.config.authentication_bypass() {
        tracing::warn!("{warning}");
    }
    let config = &options.config.broker;
    let metrics = tailstream_admin::install_metrics()?;
    m::describe(config.segment_memory_bytes_max);
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| format!("creating data dir {}: {e}", config.data_dir.display()))?;
    let rpc_listener = TcpListener::bind(config.rpc_addr)
        .await
        .map_err(|e| format!("binding broker rpc {}: {e}", config.rpc_addr))?;
    let peer_listener = TcpListener::bind(config.peer_addr)
        .await
        .map_err(|e| format!("binding broker peer {}: {e}", config.peer_addr))?;
    let admin_listener = TcpListener::bind(config.admin_addr)
        .await
        .map_err(|e| format!("binding broker admin {}: {e}", config.admin_addr))?;
    let backup_config = &options.config.backup;
    let nic_listener = TcpListener::bind(backup_config.nic_addr)
        .await
        .map_err(|e| format!("binding backup nic {}: {e}", backup_config.nic_addr))?;
    let addrs = BrokerAddrs {
        rpc: rpc_listener.local_addr().map_err(|e| e.to_string())?,
        peer: peer_listener.local_addr().map_err(|e| e.to_string())?,
        admin: admin_listener.local_addr().map_err(|e| e.to_string())?,
    };
    let nic_addr = nic_listener.local_addr().map_err(|e| e.to_string())?;
    let replication = &options.config.replication;
    let write_path = resolve_write_path(replication)?;

    let backup_limits = BackupLimits {
        open_buffers_max: backup_config.open_buffers_max,
        open_buffer_bytes_max: backup_config.open_buffer_bytes_max,
    };
    let backup_store = Arc::new(
        BackupStore::load(&config.data_dir.join("backup"), backup_limits)
            .map_err(|e| e.to_string())?,
    );
    // Under rdma, opens get registered regions, never pool buffers: no spares to keep.
    let spares = if write_path == WritePath::Rdma {
        0
    } else {
        backup_config.spare_buffers
    };
    let spares_made = backup_store
        .keep_spares(spares, options.config.stream_defaults.segment_size_bytes)
        .map_err(|e| format!("starting the spare buffer maker: {e}"))?;
    let store = Arc::new(Store::new(
        config.segment_memory_bytes_max,
        config.producers_per_log_max as usize,
        replication.uncommitted_bytes_per_log_max,
    ));
    let placements = Arc::new(ReplicaPlacements::default());
    let (cluster, created) = ClusterState::new(
        store.clone(),
        backup_store.clone(),
        placements.clone(),
        Duration::from_millis(config.lease_ms),
    );
    let cluster = Arc::new(cluster);
    let context = Arc::new(ReplicationContext {
        cluster: cluster.clone(),
        store: store.clone(),
        backups: Arc::new(Backups::new(
            write_path,
            Duration::from_millis(replication.control_timeout_ms),
            options.config.listeners.idle_timeout(),
        )),
        config: replication.clone(),
        selector: Mutex::new(BackupSelector::new(Duration::from_millis(
            replication.failed_backup_quarantine_ms,
        ))),
        placements,
    });
    tokio::spawn(run_manager(context.clone(), created));
    let backup_service = BackupService::new(backup_store.clone(), nic_addr.to_string());
    let plane = Arc::new(DataPlane::new(
        store.clone(),
        cluster.clone(),
        Duration::from_millis(replication.ack_timeout_ms),
        context.placements.clone(),
    ));
    let service = BrokerService::new(plane.clone(), config.clone());
    let recovery = Arc::new(Recovery {
        ctx: context.clone(),
        backups: context.backups.client(),
        store: store.clone(),
        cluster: cluster.clone(),
        durable_timeout: Duration::from_millis(options.config.coordinator.recovery_timeout_ms),
        rebuilding: Default::default(),
    });
    let control = ControlRuntime::start("broker-control")
        .map_err(|e| format!("starting the control runtime: {e}"))?;
    let peer_service = Arc::new(PeerService::new(
        cluster.clone(),
        backup_service,
        recovery,
        tokio::runtime::Handle::current(),
    ));
    let listeners = &options.config.listeners;
    let limits = |connections_max: u32, budget: &'static str, facing: Facing| ServerLimits {
        connections: ConnectionLimits {
            connections_max: connections_max as usize,
            connections_per_address_max: listeners.connections_per_address_max as usize,
        },
        requests_in_flight_per_connection_max: config.requests_in_flight_per_connection_max
            as usize,
        frame_body_bytes_max: config.frame_body_bytes_max,
        idle_timeout: listeners.idle_timeout(),
        request_read_timeout: listeners.request_read_timeout(),
        // Members and anonymous clients never share a budget.
        body_budget: BodyBudget::new(budget, config.request_body_bytes_max),
        tls: tailstream_net::tls::listener(facing),
        authentication: None,
    };
    let nic_limits = NicLimits {
        connections: ConnectionLimits {
            connections_max: backup_config.nic_connections_max as usize,
            connections_per_address_max: listeners.connections_per_address_max as usize,
        },
        write_timeout: listeners.request_read_timeout(),
        idle_timeout: listeners.idle_timeout(),
    };
    let nic = tokio::spawn(serve_nic(
        nic_listener,
        backup_store.clone(),
        nic_limits,
        shutdown.clone(),
    ));
    let mut client_limits = limits(config.connections_max, "clients", Facing::Clients);
    let service = match client_identity(&options, &shutdown) {
        Some((authentication, authorizer)) => {
            client_limits.authentication = Some(authentication);
            Arc::new(service.with_authorizer(authorizer))
        }
        None => Arc::new(service),
    };
    let rpc = tokio::spawn(serve(
        rpc_listener,
        "rpc",
        service,
        client_limits,
        shutdown.clone(),
    ));
    let peer = {
        let (limits, shutdown) = (
            limits(config.peer_connections_max, "members", Facing::Peers),
            shutdown.clone(),
        );
        control.handle().spawn(async move {
            match adopt_listener(peer_listener) {
                Ok(listener) => serve(listener, "peer", peer_service, limits, shutdown).await,
                Err(error) => tracing::error!(%error, "the peer listener could not move to the control runtime"),
            }
        })
    };
    let admin = tokio::spawn(tailstream_admin::serve(
        admin_listener,
        metrics,
        admin_routes(
            store.clone(),
            cluster.clone(),
            backup_store,
            context.clone(),
        ),
        tailstream_admin::AdminLimits::from_config(listeners),
        tailstream_admin::admin_token(&options.config.security),
        shutdown.clone(),
    ));
    let mut served = vec![rpc, peer, admin, nic];
    for front_end in front_ends {
        served.push(tokio::spawn(front_end(FrontEndContext {
            plane: plane.clone(),
            cluster: cluster.clone(),
            config: options.config.clone(),
            coordinator_peer_addr: options.coordinator_peer_addr.clone(),
            shutdown: shutdown.clone(),
        })));
    }
    let kafka = options
        .kafka_addr
        .as_ref()
        .map_or(String::new(), |addr| format!(" kafka={addr}"));
    // Ready (and then registered, given streamlets) once the first spare buffers are made, so
    // the first logs opened here after start-up find them: a second at most, then without.
    // Before the ready line, not merely before registering: brokers a launcher starts one
    // after another on that line then register in the order started (`dev` names them so).
    let _ = tokio::time::timeout(SPARES_AT_START_WAIT, spares_made).await;
    println!(
        "tailstream broker ready rpc={} peer={} admin=http://{} nic={nic_addr}{kafka} replication={write_path:?}",
        addrs.rpc, addrs.peer, addrs.admin
    );
    tokio::spawn(tailstream_net::memory::trim_loop(
        trim_policy(&options.config.listeners),
        shutdown.clone(),
    ));
    tokio::spawn(retention_loop(
        store.clone(),
        Duration::from_millis(config.retention_check_interval_ms.max(10)),
        shutdown.clone(),
    ));
    let client = &options.config.client;
    let client_config = RpcClientConfig {
        requests_in_flight_max: client.requests_in_flight_max as usize,
        frame_body_bytes_max: client.frame_body_bytes_max,
        connect_timeout_ms: client.connect_timeout_ms,
        request_timeout_ms: options.config.coordinator.assign_timeout_ms.max(1000),
        keepalive_ms: 0,
    };
    control.handle().spawn(run_pinger(
        cluster.clone(),
        options.coordinator_peer_addr.clone(),
        PingConfig {
            interval: Duration::from_millis(config.ping_interval_ms),
            timeout: Duration::from_millis(config.ping_timeout_ms),
            peers: config.ping_peers as usize,
        },
        shutdown.clone(),
    ));
    control.handle().spawn(run_membership(
        cluster,
        options.coordinator_peer_addr.clone(),
        Advertised {
            rpc_addr: addrs.rpc.to_string(),
            peer_addr: addrs.peer.to_string(),
            admin_addr: addrs.admin.to_string(),
            kafka_addr: options.kafka_addr.clone().unwrap_or_default(),
        },
        Duration::from_millis(config.heartbeat_interval_ms.max(10)),
        client_config,
        shutdown.clone(),
    ));
    run_until_shutdown(shutdown, served).await;
    drop(control);
    Ok(())
}

/// When this process gives freed memory back (`listeners.memory_trim_*`).
fn trim_policy(listeners: &tailstream_config::ListenersConfig) -> TrimPolicy {
    TrimPolicy {
        interval: Duration::from_millis(listeners.memory_trim_interval_ms),
        free_bytes_min: listeners.memory_trim_free_bytes_min,
    }
}

/// Where clients must authenticate (`security.client_authentication`): the client listener's
/// SCRAM check, against users' credentials looked up from the coordinator, and the rules its
/// requests are checked against (listed now, then refreshed until `shutdown`). Both use one
/// connection of their own to the coordinator's peer listener, as the Kafka listener's do.
fn client_identity(
    options: &BrokerOptions,
    shutdown: &watch::Receiver<bool>,
) -> Option<(Authentication, Arc<Authorizer>)> {
    let config = &options.config;
    if !config.security.client_authentication {
        return None;
    }
    let coordinator = CoordinatorClient::new(
        &options.coordinator_peer_addr,
        client_rpc_config(&config.client, config.producer.request_timeout_ms),
    );
    let authenticator = ScramAuthenticator::new(Credentials::new(coordinator.clone()));
    let authorizer = Arc::new(Authorizer::new(coordinator, &config.security.super_users));
    tokio::spawn(authorizer.clone().refresh(shutdown.clone()));
    let authentication = Authentication {
        authenticator: Arc::new(authenticator),
        handshake_timeout: config.listeners.handshake_timeout(),
        recheck_every: config.security.session_recheck(),
    };
    Some((authentication, authorizer))
}

/// The write path the config asks for, or a clear reason why it cannot be had.
fn resolve_write_path(replication: &ReplicationConfig) -> Result<WritePath, String> {
    let wanted = WritePath::from_config(replication.mode, replication.transport);
    if wanted != WritePath::Rdma {
        return Ok(wanted);
    }
    match crate::replication::transport::rdma_available() {
        Ok(()) => Ok(WritePath::Rdma),
        Err(reason) if replication.rdma_fallback_to_tcp => {
            tracing::warn!(%reason, "replication.transport = \"rdma\" is unavailable; using tcp");
            Ok(WritePath::Tcp)
        }
        Err(reason) => Err(format!(
            "replication.transport = \"rdma\" cannot start: {reason} (set replication.rdma_fallback_to_tcp = true to use tcp instead)"
        )),
    }
}

async fn retention_loop(
    store: Arc<Store>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown_signalled(&mut shutdown) => return,
        }
        store.enforce_retention(Instant::now());
    }
}

/// `/streamlets`: what this broker owns, per log (appended and committed offsets, and where
/// the segments in flight have their replicas); `/memory`: the segment budget; `/backup`: the
/// replica buffer pool.
fn admin_routes(
    store: Arc<Store>,
    cluster: Arc<ClusterState>,
    backup: Arc<BackupStore>,
    replication: Arc<ReplicationContext>,
) -> Router {
    let memory_store = store.clone();
    Router::new()
        .route(
            "/streamlets",
            get(move || {
                let store = store.clone();
                let cluster = cluster.clone();
                let replication = replication.clone();
                async move {
                    let streamlets: Vec<_> = store
                        .streamlets()
                        .iter()
                        .map(|s| {
                            let logs: Vec<_> = s
                                .logs()
                                .iter()
                                .map(|log| {
                                    let (next, committed) = log.offsets();
                                    let head = log.segments_since(None).pop();
                                    let commit = log.commit_point();
                                    let replicas: Vec<_> = replication
                                        .placements
                                        .of((s.stream(), s.id(), log.id()))
                                        .into_iter()
                                        .map(|r| {
                                            serde_json::json!({
                                                "segment": r.segment.0,
                                                "backups": r.backups.iter()
                                                    .map(ToString::to_string)
                                                    .collect::<Vec<_>>(),
                                            })
                                        })
                                        .collect();
                                    serde_json::json!({
                                        "replicas": replicas,
                                        "log": log.id().0,
                                        "next_offset": next.0,
                                        "committed_offset": committed.0,
                                        "appended_position": head.map(|h| serde_json::json!({
                                            "segment": h.segment.0, "bytes": h.written,
                                        })),
                                        "committed_position": {
                                            "segment": commit.segment.0, "bytes": commit.end,
                                        },
                                        "written_bytes": log.written_bytes(),
                                    })
                                })
                                .collect();
                            serde_json::json!({
                                "stream": s.stream().0,
                                "streamlet": s.id().0,
                                "logs": logs,
                            })
                        })
                        .collect();
                    axum::Json(serde_json::json!({
                        "server_id": cluster.server_id().map(|id| id.to_string()),
                        "assignment_version": cluster.assignment_version(),
                        "streamlets": streamlets,
                    }))
                }
            }),
        )
        .route(
            "/backup",
            get(move || {
                let (open, bytes) = backup.pool_usage();
                let limits = backup.limits();
                let replicas = backup.replicas(None).len();
                std::future::ready(axum::Json(serde_json::json!({
                    "replicas": replicas,
                    "open_buffers": open,
                    "open_buffers_max": limits.open_buffers_max,
                    "open_buffer_bytes": bytes,
                    "open_buffer_bytes_max": limits.open_buffer_bytes_max,
                })))
            }),
        )
        .route(
            "/memory",
            get(move || {
                let memory = memory_store.memory().clone();
                async move {
                    axum::Json(serde_json::json!({
                        "segment_memory_bytes": memory.used_bytes(),
                        "segment_memory_bytes_max": memory.bytes_max(),
                    }))
                }
            }),
        )
}
