//! The broker's side of membership: register with the coordinator, heartbeat, and own exactly
//! the streamlets the coordinator assigns.
//!
//! Assignments arrive two ways: pushed by the coordinator when a stream is created, and in a
//! heartbeat answer whenever the broker's known version is behind. Both go through
//! `apply_assignments`, which ignores anything older than what it already applied, so the
//! two paths cannot undo each other. A coordinator that no longer knows this broker (its data
//! was wiped, or it declared this incarnation dead) answers `UnknownServer` or
//! `StaleGeneration`, and the broker registers again as a new generation.

use crate::backup::BackupStore;
use crate::storage::{Store, Streamlet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_net::{RpcClient, RpcClientConfig, RpcError};
use tailstream_wire::messages::{
    AssignStreamletsRequest, BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerInfo,
    RegisterBrokerRequest, RegisterBrokerResponse,
};
use tailstream_wire::{Opcode, ServerId, Status};
use tokio::sync::{mpsc, watch};

#[derive(Debug, Default)]
struct Membership {
    server_id: Option<ServerId>,
    version: u64,
}

#[derive(Debug)]
pub struct ClusterState {
    store: Arc<Store>,
    backup: Arc<BackupStore>,
    membership: Mutex<Membership>,
    /// Every broker the coordinator knows, with liveness (from each heartbeat).
    brokers: watch::Sender<Vec<BrokerInfo>>,
    /// Streamlets created by an assignment, for the replication layer to start replicating.
    created: mpsc::UnboundedSender<Arc<Streamlet>>,
}

impl ClusterState {
    /// Also returns the receiver of newly created streamlets.
    pub fn new(
        store: Arc<Store>,
        backup: Arc<BackupStore>,
    ) -> (Self, mpsc::UnboundedReceiver<Arc<Streamlet>>) {
        let (created, created_rx) = mpsc::unbounded_channel();
        let state = Self {
            store,
            backup,
            membership: Mutex::new(Membership::default()),
            brokers: watch::Sender::new(Vec::new()),
            created,
        };
        (state, created_rx)
    }

    /// The membership as of the latest heartbeat.
    pub fn brokers(&self) -> watch::Receiver<Vec<BrokerInfo>> {
        self.brokers.subscribe()
    }

    /// Records the coordinator's membership; newer generations fence older ones here too.
    fn update_brokers(&self, brokers: Vec<BrokerInfo>) {
        for broker in &brokers {
            self.backup.note_generation(broker.server_id);
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
    }

    /// Applies an assignment addressed to this incarnation, unless a newer one was applied.
    pub fn apply_assignments(
        &self,
        request: &AssignStreamletsRequest,
    ) -> Result<(), (Status, String)> {
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
        let (created, dropped) = self.store.apply_assignments(&request.assignments);
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
}

/// Where this broker can be reached, as it tells the coordinator.
#[derive(Clone, Debug)]
pub struct Advertised {
    pub rpc_addr: String,
    pub peer_addr: String,
    pub admin_addr: String,
}

/// Registers and heartbeats until `shutdown`; reconnects and re-registers as needed.
pub async fn run_membership(
    cluster: Arc<ClusterState>,
    coordinator_addr: String,
    advertised: Advertised,
    heartbeat_interval: Duration,
    client_config: RpcClientConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let backoff = Duration::from_millis(200);
    loop {
        let session = membership_session(
            &cluster,
            &coordinator_addr,
            &advertised,
            heartbeat_interval,
            client_config,
        );
        tokio::select! {
            reason = session => {
                tracing::warn!(%reason, coordinator = %coordinator_addr, "coordinator session ended; retrying");
            }
            _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
        }
    }
}

/// One connection's worth of membership: register (if not yet), then heartbeat until an error
/// that needs a new connection or a new registration. Returns why it ended.
async fn membership_session(
    cluster: &ClusterState,
    coordinator_addr: &str,
    advertised: &Advertised,
    heartbeat_interval: Duration,
    client_config: RpcClientConfig,
) -> String {
    let client = match RpcClient::connect(coordinator_addr, client_config).await {
        Ok(client) => client,
        Err(error) => return error.to_string(),
    };
    if cluster.server_id().is_none() {
        let request = RegisterBrokerRequest {
            rpc_addr: advertised.rpc_addr.clone(),
            peer_addr: advertised.peer_addr.clone(),
            admin_addr: advertised.admin_addr.clone(),
        };
        let response: RegisterBrokerResponse =
            match client.call(Opcode::RegisterBroker, &request).await {
                Ok(response) => response,
                Err(error) => return format!("register: {error}"),
            };
        cluster.registered(response.server_id);
        tracing::info!(server_id = %response.server_id, "registered with the coordinator");
        if let Err((_, message)) = cluster.apply_assignments(&response.assignments) {
            return format!("initial assignment: {message}");
        }
    }
    let mut tick = tokio::time::interval(heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(server_id) = cluster.server_id() else {
            return "lost registration".into();
        };
        let request = BrokerHeartbeatRequest {
            server_id,
            known_version: cluster.assignment_version(),
        };
        let result: Result<BrokerHeartbeatResponse, RpcError> =
            client.call(Opcode::BrokerHeartbeat, &request).await;
        match result {
            Ok(response) => {
                cluster.update_brokers(response.brokers);
                if let Some(assignments) = response.assignments
                    && let Err((_, message)) = cluster.apply_assignments(&assignments)
                {
                    tracing::warn!(%message, "heartbeat assignment refused");
                }
            }
            Err(RpcError::Status {
                status: status @ (Status::UnknownServer | Status::StaleGeneration),
                ..
            }) => {
                cluster.lock().server_id = None;
                return format!("coordinator answered {status}: registering again");
            }
            Err(error) => return format!("heartbeat: {error}"),
        }
    }
}
