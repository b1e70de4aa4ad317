//! Failure detection, the brokers' part: every `ping_interval_ms`, ping a few random live
//! peers on their peer listeners; a peer that does not answer within `ping_timeout_ms` is
//! reported to the coordinator, which checks it itself before declaring anything (one slow
//! peer's report never condemns a healthy broker). A killed process answers at once with a
//! refused or reset connection, so a crash is usually reported within one interval.

use crate::cluster::ClusterState;
use rand::seq::IndexedRandom;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_net::{RpcClientConfig, RpcPool};
use tailstream_stubs::{BrokerPeerClient, CoordinatorAddresses, CoordinatorPeerClient, StubError};
use tailstream_wire::ServerId;
use tailstream_wire::messages::ReportSuspectRequest;
use tokio::sync::watch;

#[derive(Clone, Copy, Debug)]
pub struct PingConfig {
    pub interval: Duration,
    pub timeout: Duration,
    pub peers: usize,
}

/// Pings until `shutdown`, reporting silent peers to the coordinator (whichever of
/// `coordinator_addrs`, "a,b,c", answers).
pub async fn run_pinger(
    cluster: Arc<ClusterState>,
    coordinator_addrs: String,
    config: PingConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let timeout_ms = config.timeout.as_millis() as u64;
    let peers = BrokerPeerClient::new(RpcClientConfig {
        requests_in_flight_max: 16,
        frame_body_bytes_max: 1 << 16,
        connect_timeout_ms: timeout_ms,
        request_timeout_ms: timeout_ms,
        keepalive_ms: 0,
    });
    let coordinator = RpcPool::new(RpcClientConfig {
        requests_in_flight_max: 16,
        frame_body_bytes_max: 1 << 16,
        connect_timeout_ms: 1000,
        request_timeout_ms: 1000,
        keepalive_ms: 0,
    });
    let peers = Arc::new(peers);
    let coordinator = Arc::new(coordinator);
    let coordinators = CoordinatorAddresses::parse(&coordinator_addrs);
    let reported: Arc<std::sync::Mutex<HashMap<ServerId, Instant>>> = Arc::default();
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
        }
        let Some(me) = cluster.server_id() else {
            continue;
        };
        let candidates: Vec<(ServerId, String)> = cluster
            .brokers()
            .borrow()
            .iter()
            .filter(|b| b.alive && !b.crashed && b.server_id.index != me.index)
            .map(|b| (b.server_id, b.peer_addr.clone()))
            .collect();
        let chosen: Vec<(ServerId, String)> = candidates
            .sample(&mut rand::rng(), config.peers)
            .cloned()
            .collect();
        for (peer, addr) in chosen {
            let peers = peers.clone();
            let coordinator = coordinator.clone();
            let coordinators = coordinators.clone();
            let reported = reported.clone();
            let interval = config.interval;
            tokio::spawn(async move {
                if peers.ping(&addr).await {
                    return;
                }
                peers.forget(&addr);
                // One report per suspect per two intervals: the coordinator is probing anyway.
                {
                    let mut reported = reported.lock().unwrap_or_else(|p| p.into_inner());
                    let now = Instant::now();
                    if reported
                        .get(&peer)
                        .is_some_and(|at| now.duration_since(*at) < interval * 2)
                    {
                        return;
                    }
                    reported.insert(peer, now);
                    reported.retain(|_, at| now.duration_since(*at) < interval * 10);
                }
                tracing::info!(%peer, %addr, "peer missed a ping; reporting it to the coordinator");
                let request = ReportSuspectRequest {
                    reporter: me,
                    suspect: peer,
                };
                let coordinator_addr = coordinators.current();
                let report = async {
                    let client = coordinator.get(&coordinator_addr).await?;
                    CoordinatorPeerClient::over(client)
                        .report_suspect(&request)
                        .await?;
                    Ok::<(), StubError>(())
                };
                if let Err(error) = report.await {
                    tracing::warn!(%error, "reporting a silent peer failed");
                    coordinator.forget(&coordinator_addr);
                    coordinators.after_error(&coordinator_addr, &error);
                }
            });
        }
    }
}
