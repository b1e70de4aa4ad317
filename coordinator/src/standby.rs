//! What a coordinator on etcd answers while another leads: its client and peer listeners are
//! bound, and every request but a ping is refused `NotLeader`, naming the same listener of the
//! leader as its warm copy knows it ([`EtcdMirror::leader`]). Brokers, clients and tools given
//! any one coordinator's address thus go straight to the leader
//! (`tailstream_stubs::CoordinatorAddresses`). The admin listener stays unbound: operators
//! read leadership from whichever coordinator leads.
//!
//! A coordinator that led and stepped down names the term it led: brokers whose lease that
//! term renewed last take it, as they took the lapsed leader's own `NotLeader`, for the word
//! that nobody renews leases now; any other broker ignores it.
//!
//! A standby holds nothing a leader needs: when it is elected its listeners are closed (every
//! connection with them) before the leader's are bound on the same ports.

use crate::persist::EtcdMirror;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tailstream_config::Config;
use tailstream_net::server::serve;
use tailstream_net::tls::Facing;
use tailstream_net::{Reply, Request, Response, Service};
use tailstream_wire::messages::not_leader_message;
use tailstream_wire::{CoordinatorTerm, Opcode, Status};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Which listener a request came in on: the leader named is that listener of the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listener {
    Clients,
    Peers,
}

/// The standby's answer to everything.
#[derive(Debug)]
struct StandbyFacing {
    mirror: Arc<EtcdMirror>,
    listener: Listener,
    /// This coordinator's own address on that listener: never named as the leader (it is
    /// about to lead, or its copy is behind).
    own: SocketAddr,
    /// The term this process led last, if it led: it renews nothing of it any more.
    led: Option<CoordinatorTerm>,
}

impl StandbyFacing {
    /// The leader's address on this listener, if the copy knows a leader other than itself.
    fn leader(&self) -> Option<String> {
        let leader = self.mirror.leader()?;
        let addr = match self.listener {
            Listener::Clients => leader.rpc_addr,
            Listener::Peers => leader.peer_addr,
        };
        // A leader bound to every interface cannot be reached at its bind address.
        let reachable = addr
            .parse::<SocketAddr>()
            .map_or(true, |parsed| !parsed.ip().is_unspecified());
        (reachable && addr != self.own.to_string()).then_some(addr)
    }
}

impl Service for StandbyFacing {
    fn dispatch(&self, request: Request) -> Reply {
        if request.opcode == Opcode::Ping {
            return Reply::Ready(Response::empty());
        }
        let leader = self.leader();
        Reply::Ready(Response::error(
            Status::NotLeader,
            not_leader_message("this coordinator stands by", self.led, leader.as_deref()),
        ))
    }
}

/// A standby's listeners, serving until [`Self::stop`].
#[derive(Debug)]
pub struct StandbyListeners {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long a standby's listeners get to close before the leader's are bound.
const STOP_TIMEOUT: Duration = Duration::from_secs(1);

impl StandbyListeners {
    /// Binds the client and peer listeners and answers on them. A port that cannot be bound
    /// (taken by another process meanwhile) is left unbound: clients then find the leader by
    /// trying the next address, as they do a dead coordinator's.
    pub async fn start(
        config: &Config,
        mirror: Arc<EtcdMirror>,
        led: Option<CoordinatorTerm>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let settings = &config.coordinator;
        let mut tasks = Vec::new();
        for (listener, addr, connections_max, name) in [
            (
                Listener::Clients,
                settings.rpc_addr,
                settings.connections_max,
                "standby-rpc",
            ),
            (
                Listener::Peers,
                settings.peer_addr,
                settings.peer_connections_max,
                "standby-peer",
            ),
        ] {
            let bound = match TcpListener::bind(addr).await {
                Ok(bound) => bound,
                Err(error) => {
                    tracing::warn!(%addr, %error, "a standby listener could not be bound; serving without it");
                    continue;
                }
            };
            let own = bound.local_addr().unwrap_or(addr);
            let facing = Arc::new(StandbyFacing {
                mirror: mirror.clone(),
                listener,
                own,
                led,
            });
            let facing_tls = match listener {
                Listener::Clients => Facing::Clients,
                Listener::Peers => Facing::Peers,
            };
            let limits = crate::server::listener_limits(config, connections_max, name, facing_tls);
            tasks.push(tokio::spawn(serve(
                bound,
                name,
                facing,
                limits,
                stopped.clone(),
            )));
        }
        Self { stop, tasks }
    }

    /// Closes the listeners and their connections (bounded wait).
    pub async fn stop(&mut self) {
        let _ = self.stop.send(true);
        let drained = futures::future::join_all(std::mem::take(&mut self.tasks));
        if tokio::time::timeout(STOP_TIMEOUT, drained).await.is_err() {
            tracing::warn!("a standby listener did not close in time");
        }
    }
}
