//! A coordinator process, assembled: load metadata, bind, serve RPC and admin HTTP.
//!
//! The peer listener (registrations, heartbeats, suspicion reports) and the failure detector's
//! watchdog run on a control runtime, a thread of their own (`tailstream_net::control`), so a
//! coordinator busy with clients still hears heartbeats and times its probes right.

use crate::core::Coordinator;
use crate::groups::GroupCoordinator;
use crate::groups::membership::GroupLimits;
use crate::groups::offsets::{CommittedOffsets, OffsetLimits, OffsetStore};
use crate::groups::owners::OwnerLimits;
use crate::leader_lease::LeaderLease;
use crate::leadership_view::LeadershipView;
use crate::liveness::Liveness;
use crate::metadata::Metadata;
use crate::metrics as m;
use crate::persist::{MetadataFile, MetadataStore};
use crate::recovery::orchestrator::{Orchestrator, OrchestratorConfig};
use crate::service::{ClientFacing, CoordinatorService, PeerFacing, ServiceSettings};
use crate::watchdog::{self, WatchdogConfig};
use std::sync::Arc;
use std::time::Duration;
use tailstream_admin::PrometheusHandle;
use tailstream_config::COORDINATOR_FRAME_BODY_BYTES_MAX;
use tailstream_config::Config;
use tailstream_config::MetadataStoreKind;
use tailstream_net::Authentication;
use tailstream_net::control::{ControlRuntime, adopt_listener};
use tailstream_net::memory::TrimPolicy;
use tailstream_net::scram_server::ScramAuthenticator;
use tailstream_net::server::{ServerLimits, run_until_shutdown, serve};
use tailstream_net::tls::Facing;
use tailstream_net::{BodyBudget, ConnectionLimits, RpcClientConfig};
use tailstream_stubs::{BackupClient, BrokerPeerClient};
use tailstream_wire::CoordinatorTerm;
use tailstream_wire::messages::CoordinatorInfo;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The bounds on committed offsets, from the configuration.
pub fn offset_limits(config: &Config) -> OffsetLimits {
    OffsetLimits {
        groups_max: config.coordinator.groups_max as usize,
        partitions_per_group_max: config.coordinator.group_committed_partitions_max as usize,
    }
}

/// The metadata a new leader serves: what was saved, with the term after the saved one,
/// saved before anything is served (on etcd, fenced: a leader already deposed saves nothing
/// and does not lead). Every order it gives names that term, and brokers that have seen it
/// refuse the orders of every earlier one.
pub fn take_term(store: &dyn MetadataStore, saved: Metadata) -> Result<Metadata, String> {
    let mut next = saved.clone();
    next.decoy_secret = next.decoy_secret.or_else(|| Some(rand::random()));
    next.term = CoordinatorTerm(
        saved
            .term
            .0
            .checked_add(1)
            .ok_or("the coordinator's terms are used up")?,
    );
    store.save(&saved, &next)?;
    Ok(next)
}

/// The bounds of a coordinator listener of `connections_max` connections whose bodies draw on
/// a budget named `budget`.
pub fn listener_limits(
    config: &Config,
    connections_max: u32,
    budget: &'static str,
    facing: Facing,
) -> ServerLimits {
    let listeners = &config.listeners;
    ServerLimits {
        connections: ConnectionLimits {
            connections_max: connections_max as usize,
            connections_per_address_max: listeners.connections_per_address_max as usize,
        },
        requests_in_flight_per_connection_max: 64,
        frame_body_bytes_max: COORDINATOR_FRAME_BODY_BYTES_MAX,
        idle_timeout: listeners.idle_timeout(),
        request_read_timeout: listeners.request_read_timeout(),
        body_budget: BodyBudget::new(budget, config.coordinator.request_body_bytes_max),
        tls: tailstream_net::tls::listener(facing),
        authentication: None,
    }
}

/// How often group lag is exported.
const GROUP_LAG_EVERY: Duration = Duration::from_secs(1);

/// Runs a coordinator until `shutdown`: with the file store, it leads at once; with etcd, it
/// campaigns and leads while elected (see [`crate::election`]), standing by otherwise.
pub async fn run(config: Config, shutdown: watch::Receiver<bool>) -> Result<(), String> {
    tailstream_net::tls::require_member(config.tls.enabled)?;
    if let Some(warning) = config.authentication_bypass() {
        tracing::warn!("{warning}");
    }
    let metrics = tailstream_admin::install_metrics()?;
    crate::metrics::describe();
    tokio::spawn(tailstream_net::memory::trim_loop(
        TrimPolicy {
            interval: std::time::Duration::from_millis(config.listeners.memory_trim_interval_ms),
            free_bytes_min: config.listeners.memory_trim_free_bytes_min,
        },
        shutdown.clone(),
    ));
    match config.coordinator.store {
        MetadataStoreKind::File => {
            let store = Arc::new(MetadataFile::new(&config.coordinator.data_dir));
            let metadata = {
                let store = store.clone();
                tokio::task::spawn_blocking(move || take_term(store.as_ref(), store.load()?))
                    .await
                    .map_err(|e| e.to_string())??
            };
            let offsets = OffsetStore::open(
                &config.coordinator.data_dir.join("groups"),
                offset_limits(&config),
            )
            .map_err(|e| {
                format!(
                    "opening the committed offsets in {}: {e}",
                    config.coordinator.data_dir.display()
                )
            })?;
            metrics::gauge!(crate::metrics::LEADER).set(1.0);
            Box::pin(lead(
                &config,
                metadata,
                store,
                Arc::new(offsets),
                Term {
                    lease: Arc::new(LeaderLease::forever()),
                    election: None,
                },
                metrics,
                shutdown,
            ))
            .await
        }
        MetadataStoreKind::Etcd => {
            Box::pin(crate::election::run_elected(config, metrics, shutdown)).await
        }
    }
}

/// What a coordinator leads with.
pub struct Term {
    /// Whether it surely still leads: nothing but a ping is answered otherwise.
    pub lease: Arc<LeaderLease>,
    /// The etcd client and cluster prefix it was elected under (the standbys are listed from
    /// there); `None` on the file store.
    pub election: Option<(etcd_client::Client, String)>,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term")
            .field("lease", &self.lease)
            .field(
                "election",
                &self.election.as_ref().map(|(_, prefix)| prefix),
            )
            .finish()
    }
}

/// Binds, prints `tailstream coordinator ready rpc=... peer=... admin=...`, serves `metadata`
/// (saved through `store`) until `shutdown`.
pub async fn lead(
    config: &Config,
    metadata: Metadata,
    store: Arc<dyn MetadataStore>,
    offsets: Arc<dyn CommittedOffsets>,
    term: Term,
    metrics: PrometheusHandle,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let coordinator = &config.coordinator;
    let rpc_listener = TcpListener::bind(coordinator.rpc_addr)
        .await
        .map_err(|e| format!("binding coordinator rpc {}: {e}", coordinator.rpc_addr))?;
    let peer_listener = TcpListener::bind(coordinator.peer_addr)
        .await
        .map_err(|e| format!("binding coordinator peer {}: {e}", coordinator.peer_addr))?;
    let admin_listener = TcpListener::bind(coordinator.admin_addr)
        .await
        .map_err(|e| format!("binding coordinator admin {}: {e}", coordinator.admin_addr))?;
    let rpc_addr = rpc_listener.local_addr().map_err(|e| e.to_string())?;
    let peer_addr = peer_listener.local_addr().map_err(|e| e.to_string())?;
    let admin_addr = admin_listener.local_addr().map_err(|e| e.to_string())?;
    let own = CoordinatorInfo {
        rpc_addr: rpc_addr.to_string(),
        peer_addr: peer_addr.to_string(),
        admin_addr: admin_addr.to_string(),
    };
    let Term {
        lease: leadership,
        election,
    } = term;
    let view = match election {
        Some((client, prefix)) => LeadershipView::elected(own, client, &prefix),
        None => LeadershipView::alone(own),
    };
    metrics::gauge!(crate::metrics::LEADER_TERM).set(metadata.term.0 as f64);
    let term_number = metadata.term.0;
    tracing::info!(
        term = metadata.term.0,
        streams = metadata.streams.len(),
        brokers = metadata.brokers.len(),
        "coordinator metadata loaded from {}",
        store.describe()
    );
    println!(
        "tailstream coordinator ready rpc={rpc_addr} peer={peer_addr} admin=http://{admin_addr}"
    );

    let assigner = Arc::new(BrokerPeerClient::new(RpcClientConfig {
        requests_in_flight_max: 64,
        frame_body_bytes_max: config.client.frame_body_bytes_max,
        connect_timeout_ms: config.client.connect_timeout_ms,
        request_timeout_ms: coordinator.assign_timeout_ms,
        keepalive_ms: 0,
    }));
    let core = Coordinator::new(
        metadata,
        store,
        assigner,
        Liveness::new(Duration::from_millis(
            coordinator.broker_liveness_timeout_ms,
        )),
        Duration::from_millis(coordinator.assign_timeout_ms),
    );
    // Listings are bounded by `list_timeout` in the orchestrator; a rebuild order may take up
    // to `recovery_timeout`.
    let recovery_calls = RpcClientConfig {
        requests_in_flight_max: 256,
        frame_body_bytes_max: 64 << 20,
        connect_timeout_ms: coordinator.assign_timeout_ms,
        request_timeout_ms: coordinator.recovery_timeout_ms,
        keepalive_ms: 0,
    };
    let orchestrator = Orchestrator::new(
        core.clone(),
        OrchestratorConfig {
            lease: Duration::from_millis(config.broker.lease_ms),
            list_timeout: Duration::from_millis(coordinator.assign_timeout_ms),
            recovery_timeout: Duration::from_millis(coordinator.recovery_timeout_ms),
            liveness_timeout: Duration::from_millis(coordinator.broker_liveness_timeout_ms),
            leaderless_lease: Duration::from_millis(config.broker.leaderless_lease_ms),
            probe_timeout: Duration::from_millis(coordinator.probe_timeout_ms),
        },
        leadership.clone(),
        Arc::new(BackupClient::new(recovery_calls)),
        Arc::new(BrokerPeerClient::new(recovery_calls)),
    );
    tokio::spawn(orchestrator.clone().run(shutdown.clone()));
    let control = ControlRuntime::start("coordinator-control")
        .map_err(|e| format!("starting the control runtime: {e}"))?;
    let on_control = control.handle().enter();
    let watchdog = watchdog::spawn(
        core.clone(),
        orchestrator.clone(),
        WatchdogConfig {
            probe_timeout: Duration::from_millis(coordinator.probe_timeout_ms),
            probe_attempts: coordinator.probe_attempts,
            heartbeat_timeout: Duration::from_millis(coordinator.broker_liveness_timeout_ms),
        },
        shutdown.clone(),
    );
    drop(on_control);
    // A restarted coordinator resumes whatever recovery was under way.
    orchestrator.wake();
    let groups = GroupCoordinator::new(
        GroupLimits {
            session_timeout_min: Duration::from_millis(coordinator.group_session_timeout_ms_min),
            session_timeout_max: Duration::from_millis(coordinator.group_session_timeout_ms_max),
            rebalance_timeout_max: Duration::from_millis(
                coordinator.group_rebalance_timeout_ms_max,
            ),
            initial_rebalance_delay: Duration::from_millis(
                coordinator.group_initial_rebalance_delay_ms,
            ),
            groups_max: coordinator.groups_max as usize,
            members_max: coordinator.group_members_max as usize,
        },
        OwnerLimits {
            groups_per_user_max: coordinator.groups_per_user_max as usize,
            committed_partitions_per_user_max: coordinator.group_committed_partitions_per_user_max
                as usize,
        },
        term_number,
        offsets,
    );
    tokio::spawn(groups.clone().run_ticker(shutdown.clone()));
    let service = CoordinatorService::new(
        core,
        watchdog,
        orchestrator,
        groups,
        leadership,
        view,
        ServiceSettings {
            lease_ms: config.broker.lease_ms,
            leaderless_lease_ms: config.broker.leaderless_lease_ms,
            streams_max: coordinator.streams_max as usize,
            producer_ids_per_second: coordinator.producer_ids_per_second,
            users_max: coordinator.users_max as usize,
            acls_max: coordinator.acls_max as usize,
            admin_token: crate::service::AdminToken::from_config(&config.security.admin_token),
            client_authentication: config.security.client_authentication,
            super_users: config.security.super_users.clone(),
        },
    );
    let group_gauges = Arc::new(std::sync::Mutex::new(String::new()));
    tokio::spawn(publish_group_lag(
        service.clone(),
        group_gauges.clone(),
        shutdown.clone(),
    ));
    let limits =
        |connections_max, budget, facing| listener_limits(config, connections_max, budget, facing);
    let mut client_limits = limits(coordinator.connections_max, "clients", Facing::Clients);
    if config.security.client_authentication {
        let source = crate::service::MetadataCredentials(service.clone());
        client_limits.authentication = Some(Authentication {
            authenticator: Arc::new(ScramAuthenticator::new(source)),
            handshake_timeout: config.listeners.handshake_timeout(),
            recheck_every: config.security.session_recheck(),
        });
    }
    let rpc = tokio::spawn(serve(
        rpc_listener,
        "rpc",
        Arc::new(ClientFacing(service.clone())),
        client_limits,
        shutdown.clone(),
    ));
    let peer = {
        let facing = Arc::new(PeerFacing(service.clone()));
        let (limits, shutdown) = (
            limits(coordinator.peer_connections_max, "members", Facing::Peers),
            shutdown.clone(),
        );
        control.handle().spawn(async move {
            match adopt_listener(peer_listener) {
                Ok(listener) => serve(listener, "peer", facing, limits, shutdown).await,
                Err(error) => tracing::error!(
                    %error,
                    "the peer listener could not move to the control runtime"
                ),
            }
        })
    };
    let extra: tailstream_admin::ExtraMetrics = Arc::new(move || {
        group_gauges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    });
    let admin = tokio::spawn(tailstream_admin::serve_with(
        admin_listener,
        metrics,
        Some(extra),
        crate::admin::routes(Arc::new(service)),
        tailstream_admin::AdminLimits::from_config(&config.listeners),
        tailstream_admin::admin_token(&config.security),
        shutdown.clone(),
    ));
    run_until_shutdown(shutdown, vec![rpc, peer, admin]).await;
    drop(control);
    Ok(())
}

/// Renders each group's lag per partition, and its members, into `gauges` (appended to
/// `/metrics`) every second until `shutdown`: a group gone is gone from the next scrape.
async fn publish_group_lag(
    service: CoordinatorService,
    gauges: Arc<std::sync::Mutex<String>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(GROUP_LAG_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
        }
        let (lag, members) = service.group_lag();
        let text = m::group_gauges(&lag, &members);
        *gauges.lock().unwrap_or_else(|p| p.into_inner()) = text;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_leader_takes_a_term_above_the_saved_one_and_saves_it_first() {
        let dir = tempfile::tempdir().unwrap();
        let file = MetadataFile::new(&dir.path().join("coordinator"));
        let first = take_term(&file, file.load().unwrap()).unwrap();
        assert_eq!(first.term, CoordinatorTerm(1));
        assert_eq!(file.load().unwrap().term, CoordinatorTerm(1), "saved");
        let second = take_term(&file, file.load().unwrap()).unwrap();
        assert_eq!(second.term, CoordinatorTerm(2), "terms only grow");
        let mut exhausted = second.clone();
        exhausted.term = CoordinatorTerm(u64::MAX);
        assert!(take_term(&file, exhausted).is_err());
        assert_eq!(
            file.load().unwrap().term,
            CoordinatorTerm(2),
            "nothing saved"
        );
    }
}
