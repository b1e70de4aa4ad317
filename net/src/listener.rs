//! The accept loop every Tailstream listener shares: native RPC, peer RPC, the software NIC,
//! admin HTTP and Kafka.
//!
//! A connection is admitted only while its listener holds fewer than `connections_max`
//! connections and fewer than `connections_per_address_max` from the same remote IP address;
//! otherwise it is accepted and closed at once. Closing instead of leaving it in the kernel's
//! backlog means a flood can never fill the accept queue: a legitimate client from another
//! address still gets in, and a refused one learns it at once instead of timing out.
//! Each admitted connection runs in its own task, ends at shutdown, and its way of ending is
//! counted (`connections_closed_total{listener, reason}`).
//!
//! On a listener that requires authentication (`accept_loop_authenticating`), a connection is
//! *unproven* until its handler says it authenticated; when the listener is full, a new
//! connection closes an unproven one and takes its place: the oldest of those from the
//! address that holds the most. A flood from a few addresses closes its own connections, not
//! a client's that is authenticating from elsewhere; to close that one a flood must hold more
//! unproven connections than any other address from each of many addresses.

use crate::metrics as m;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// How many connections one listener admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub connections_max: usize,
    pub connections_per_address_max: usize,
}

/// How a connection ended; the label of `connections_closed_total`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The peer closed it.
    ByPeer,
    /// Nothing in flight and nothing received for the idle timeout.
    Idle,
    /// A request (frame, write, HTTP request) started and did not arrive whole in time.
    RequestTimeout,
    /// The peer sent something we refuse (bad frame, bad header, fenced primary, ...).
    BadInput(String),
    /// A socket error.
    Io(String),
    /// The process is shutting down.
    Shutdown,
    /// Authentication was required, and failed or did not finish within the handshake
    /// timeout.
    Unauthenticated(String),
    /// Closed, not yet authenticated, to make room for a newer connection on a full listener.
    Evicted,
    /// The TLS handshake failed (no certificate where one is required, one the CA did not
    /// sign, a plain-text client on a TLS listener) or did not finish in time.
    Tls(String),
}

impl Closed {
    pub fn label(&self) -> &'static str {
        match self {
            Closed::ByPeer => "peer",
            Closed::Idle => "idle",
            Closed::RequestTimeout => "request_timeout",
            Closed::BadInput(_) => "bad_input",
            Closed::Io(_) => "io",
            Closed::Shutdown => "shutdown",
            Closed::Unauthenticated(_) => "unauthenticated",
            Closed::Evicted => "evicted",
            Closed::Tls(_) => "tls",
        }
    }
}

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Closed::BadInput(why) => write!(f, "bad input: {why}"),
            Closed::Io(why) => write!(f, "i/o error: {why}"),
            Closed::Unauthenticated(why) => write!(f, "not authenticated: {why}"),
            Closed::Tls(why) => write!(f, "tls: {why}"),
            other => f.write_str(other.label()),
        }
    }
}

/// Counts open connections, in total and per remote address.
#[derive(Debug)]
struct Gate {
    listener: &'static str,
    limits: ConnectionLimits,
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    open: usize,
    per_address: HashMap<IpAddr, usize>,
    /// Connections that have not authenticated, oldest first (by admission number), each
    /// with its address and the signal that closes it.
    unproven: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    unproven_per_address: HashMap<IpAddr, usize>,
    /// Connections told to close to make room, until they have.
    evicted: HashSet<u64>,
    admitted: u64,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    ConnectionsMax,
    PerAddress,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Refused::ConnectionsMax => "connections_max",
            Refused::PerAddress => "per_address",
        }
    }
}

/// An admitted connection's place; released when dropped.
#[derive(Debug)]
struct Admitted {
    gate: Arc<Gate>,
    address: IpAddr,
    number: u64,
}

/// A connection's standing on a listener that requires authentication: until
/// [`Standing::proven`], a newer connection may close it to take its place.
#[derive(Debug)]
pub struct Standing {
    gate: Arc<Gate>,
    number: u64,
}

impl Standing {
    /// The connection authenticated: it is never closed to make room from now on. False if
    /// it was already chosen to make room (it is being closed: tell the client nothing more).
    pub fn proven(&self) -> bool {
        let mut state = self.gate.lock();
        match state.take_unproven(self.number) {
            Some(_) => true,
            // Not unproven: proven before, or on a listener where none is (both fine), or
            // evicted (its number was taken out when its signal was sent).
            None => !state.evicted.contains(&self.number),
        }
    }
}

impl GateState {
    /// Takes connection `number` out of the unproven ones; its signal, if it was one.
    fn take_unproven(&mut self, number: u64) -> Option<oneshot::Sender<()>> {
        let (address, evict) = self.unproven.remove(&number)?;
        if let Some(count) = self.unproven_per_address.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                self.unproven_per_address.remove(&address);
            }
        }
        Some(evict)
    }

    /// The unproven connection to close for room: the oldest from the address with the most.
    fn eviction_candidate(&self) -> Option<u64> {
        let (address, _) = self
            .unproven_per_address
            .iter()
            .max_by_key(|(_, count)| **count)?;
        self.unproven
            .iter()
            .find(|(_, (from, _))| from == address)
            .map(|(number, _)| *number)
    }
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `address`; an `unproven` one can be closed to make room until
    /// it is proven (the receiver fires then).
    fn admit(
        self: &Arc<Self>,
        address: IpAddr,
        unproven: bool,
    ) -> Result<(Admitted, Option<oneshot::Receiver<()>>), Refused> {
        let mut state = self.lock();
        let from_address = state.per_address.get(&address).copied().unwrap_or(0);
        if from_address >= self.limits.connections_per_address_max {
            return Err(Refused::PerAddress);
        }
        if state.open >= self.limits.connections_max {
            // Full: a connection that has not authenticated makes room (its task closes it at
            // once; until then the listener holds one more than its maximum).
            let Some(number) = state.eviction_candidate() else {
                return Err(Refused::ConnectionsMax);
            };
            if let Some(evict) = state.take_unproven(number) {
                let _ = evict.send(());
            }
            state.evicted.insert(number);
            metrics::counter!(m::CONNECTIONS_EVICTED, "listener" => self.listener).increment(1);
        }
        *state.per_address.entry(address).or_insert(0) += 1;
        state.open += 1;
        state.admitted += 1;
        let number = state.admitted;
        let evicted = unproven.then(|| {
            let (evict, evicted) = oneshot::channel();
            state.unproven.insert(number, (address, evict));
            *state.unproven_per_address.entry(address).or_insert(0) += 1;
            evicted
        });
        metrics::gauge!(m::CONNECTIONS_OPEN, "listener" => self.listener).set(state.open as f64);
        Ok((
            Admitted {
                gate: self.clone(),
                address,
                number,
            },
            evicted,
        ))
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.take_unproven(self.number);
        state.evicted.remove(&self.number);
        state.open = state.open.saturating_sub(1);
        if let Some(count) = state.per_address.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                state.per_address.remove(&self.address);
            }
        }
        metrics::gauge!(m::CONNECTIONS_OPEN, "listener" => self.gate.listener)
            .set(state.open as f64);
    }
}

/// Resolves once `shutdown` holds `true` (or its sender is gone).
pub async fn shutdown_signalled(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Accepts on `listener` until `shutdown`, admitting connections within `limits` and running
/// `handle` for each in its own task. `name` labels the listener's metrics and log lines.
pub async fn accept_loop<H, F>(
    listener: TcpListener,
    name: &'static str,
    limits: ConnectionLimits,
    shutdown: watch::Receiver<bool>,
    handle: H,
) where
    H: Fn(TcpStream, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Closed> + Send + 'static,
{
    serve_accepts(
        listener,
        name,
        limits,
        shutdown,
        false,
        move |stream, peer, _| handle(stream, peer),
    )
    .await
}

/// [`accept_loop`] for a listener that may require authentication (`authenticating`): then
/// each connection is unproven until its handler calls [`Standing::proven`], and a full
/// listener closes an unproven connection to admit a new one. Without it, every connection
/// is proven from the start (`Standing::proven` is always true) and none is ever closed for
/// room.
pub async fn accept_loop_authenticating<H, F>(
    listener: TcpListener,
    name: &'static str,
    limits: ConnectionLimits,
    shutdown: watch::Receiver<bool>,
    authenticating: bool,
    handle: H,
) where
    H: Fn(TcpStream, SocketAddr, Standing) -> F + Send + Sync + 'static,
    F: Future<Output = Closed> + Send + 'static,
{
    serve_accepts(listener, name, limits, shutdown, authenticating, handle).await
}

async fn serve_accepts<H, F>(
    listener: TcpListener,
    name: &'static str,
    limits: ConnectionLimits,
    mut shutdown: watch::Receiver<bool>,
    unproven: bool,
    handle: H,
) where
    H: Fn(TcpStream, SocketAddr, Standing) -> F + Send + Sync + 'static,
    F: Future<Output = Closed> + Send + 'static,
{
    let gate = Arc::new(Gate {
        listener: name,
        limits,
        state: Mutex::new(GateState::default()),
    });
    metrics::gauge!(m::CONNECTIONS_OPEN, "listener" => name).set(0.0);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = name, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown_signalled(&mut shutdown) => return,
        };
        let (admitted, evicted) = match gate.admit(peer.ip(), unproven) {
            Ok(admitted) => admitted,
            Err(refused) => {
                metrics::counter!(m::CONNECTIONS_REFUSED, "listener" => name, "reason" => refused.label())
                    .increment(1);
                tracing::debug!(listener = name, %peer, reason = refused.label(), "connection refused");
                // Dropping the stream closes it: the peer sees a clean end at once.
                drop(stream);
                continue;
            }
        };
        let standing = Standing {
            gate: gate.clone(),
            number: admitted.number,
        };
        let connection = handle(stream, peer, standing);
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _admitted = admitted;
            let evicted = async {
                // A proven connection's signal is dropped, never sent: it waits forever.
                let sent = match evicted {
                    Some(evicted) => evicted.await.is_ok(),
                    None => false,
                };
                if !sent {
                    std::future::pending::<()>().await;
                }
            };
            let closed = tokio::select! {
                closed = connection => closed,
                _ = evicted => Closed::Evicted,
                _ = shutdown_signalled(&mut shutdown) => Closed::Shutdown,
            };
            metrics::counter!(m::CONNECTIONS_CLOSED, "listener" => name, "reason" => closed.label())
                .increment(1);
            match &closed {
                // A refused handshake names its cause (no certificate, another CA, plain text).
                Closed::BadInput(_) | Closed::RequestTimeout | Closed::Tls(_) => {
                    tracing::info!(listener = name, %peer, %closed, "connection closed")
                }
                _ => tracing::debug!(listener = name, %peer, %closed, "connection closed"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_bounds_connections_in_total_and_per_address() {
        let gate = Arc::new(Gate {
            listener: "test",
            limits: ConnectionLimits {
                connections_max: 3,
                connections_per_address_max: 2,
            },
            state: Mutex::new(GateState::default()),
        });
        let a: IpAddr = [127, 0, 0, 2].into();
        let b: IpAddr = [127, 0, 0, 3].into();
        let first = gate.admit(a, false).unwrap();
        let _second = gate.admit(a, false).unwrap();
        assert_eq!(gate.admit(a, false).unwrap_err(), Refused::PerAddress);
        let _third = gate.admit(b, false).unwrap();
        assert_eq!(gate.admit(b, false).unwrap_err(), Refused::ConnectionsMax);
        drop(first);
        let _again = gate.admit(a, false).unwrap();
        assert_eq!(gate.lock().per_address[&a], 2);
    }

    fn gate(connections_max: usize) -> Arc<Gate> {
        Arc::new(Gate {
            listener: "test",
            limits: ConnectionLimits {
                connections_max,
                connections_per_address_max: 10,
            },
            state: Mutex::new(GateState::default()),
        })
    }

    fn standing(gate: &Arc<Gate>, admitted: &Admitted) -> Standing {
        Standing {
            gate: gate.clone(),
            number: admitted.number,
        }
    }

    #[test]
    fn a_full_gate_closes_an_unproven_connection_of_the_address_with_most() {
        let gate = gate(4);
        let (a, b): (IpAddr, IpAddr) = ([127, 0, 0, 2].into(), [127, 0, 0, 3].into());
        // One client from b, authenticating; three from a.
        let (client, mut client_evicted) = gate.admit(b, true).unwrap();
        let (a1, mut a1_evicted) = gate.admit(a, true).unwrap();
        let (_a2, _) = gate.admit(a, true).unwrap();
        let (_a3, _) = gate.admit(a, true).unwrap();
        // Full: a fourth from a closes a's oldest, not the client's older connection.
        let (_a4, _) = gate.admit(a, true).unwrap();
        assert_eq!(a1_evicted.as_mut().unwrap().try_recv(), Ok(()));
        assert!(client_evicted.as_mut().unwrap().try_recv().is_err());
        assert!(
            !standing(&gate, &a1).proven(),
            "an evicted connection is not proven"
        );
        drop(a1);
        assert!(standing(&gate, &client).proven());
        assert!(
            standing(&gate, &client).proven(),
            "proven twice is still proven"
        );
        // The client is never chosen now, even when a's are gone.
        let state = gate.lock();
        assert_eq!(state.unproven_per_address.get(&b), None);
        assert_eq!(state.unproven.len(), 3);
    }

    #[test]
    fn a_gate_of_proven_connections_refuses_as_before() {
        let gate = gate(2);
        let a: IpAddr = [127, 0, 0, 2].into();
        let (first, _) = gate.admit(a, true).unwrap();
        let (second, _) = gate.admit(a, true).unwrap();
        assert!(standing(&gate, &first).proven());
        assert!(standing(&gate, &second).proven());
        assert_eq!(gate.admit(a, true).unwrap_err(), Refused::ConnectionsMax);
        drop(first);
        let (_third, _) = gate.admit(a, false).unwrap();
        let state = gate.lock();
        assert!(state.evicted.is_empty() && state.unproven.is_empty());
    }
}
