//! The failure detector's async shell: feeds the `Detector` with brokers' reports and with
//! brokers whose heartbeats stopped, probes suspects itself (a fresh connection and a ping,
//! each attempt bounded by `probe_timeout_ms`, telling a refused connection from a silent
//! one), hands it each suspect's heartbeat silence, and declares the ones it says are gone
//! crashed: the declaration is saved, their streamlets go to recovery, and the orchestrator is
//! woken.

use crate::core::Coordinator;
use crate::detector::{Action, Detector, DetectorConfig, ProbeOutcome};
use crate::metrics as m;
use crate::recovery::orchestrator::Orchestrator;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_net::{RpcClient, RpcClientConfig};
use tailstream_wire::ServerId;
use tokio::sync::{mpsc, watch};

/// What the watchdog is told.
#[derive(Debug)]
pub enum Event {
    /// A broker (or the heartbeat backstop) says `suspect` is silent.
    Reported { suspect: ServerId },
    Probed {
        suspect: ServerId,
        outcome: ProbeOutcome,
    },
}

#[derive(Clone, Debug)]
pub struct WatchdogHandle {
    events: mpsc::UnboundedSender<Event>,
}

impl WatchdogHandle {
    pub fn report(&self, suspect: ServerId) {
        metrics::counter!(m::SUSPICIONS).increment(1);
        let _ = self.events.send(Event::Reported { suspect });
    }
}

#[derive(Clone, Copy, Debug)]
pub struct WatchdogConfig {
    pub probe_timeout: Duration,
    pub probe_attempts: u32,
    /// Brokers silent for this long are suspected (the backstop behind the pings).
    pub heartbeat_timeout: Duration,
}

/// Starts the watchdog; events go through the returned handle.
pub fn spawn(
    core: Coordinator,
    orchestrator: Arc<Orchestrator>,
    config: WatchdogConfig,
    shutdown: watch::Receiver<bool>,
) -> WatchdogHandle {
    let (events, receiver) = mpsc::unbounded_channel();
    let handle = WatchdogHandle { events };
    tokio::spawn(run(
        core,
        orchestrator,
        config,
        handle.clone(),
        receiver,
        shutdown,
    ));
    handle
}

async fn run(
    core: Coordinator,
    orchestrator: Arc<Orchestrator>,
    config: WatchdogConfig,
    handle: WatchdogHandle,
    mut events: mpsc::UnboundedReceiver<Event>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut detector = Detector::new(DetectorConfig {
        probe_attempts: config.probe_attempts,
        silence_declare: config.heartbeat_timeout,
    });
    let mut backstop =
        tokio::time::interval((config.heartbeat_timeout / 4).max(Duration::from_millis(50)));
    loop {
        let action = tokio::select! {
            event = events.recv() => match event {
                Some(Event::Reported { suspect }) => {
                    if core.lock().metadata.check_server(suspect).is_err() {
                        None
                    } else {
                        detector.reported(suspect, Instant::now())
                    }
                }
                Some(Event::Probed { suspect, outcome }) => {
                    let now = Instant::now();
                    let silence = core.lock().liveness.silent_for(suspect, now);
                    if outcome != ProbeOutcome::Answered {
                        tracing::debug!(%suspect, ?outcome, ?silence, "probe of a suspect");
                    }
                    detector.probed(suspect, outcome, silence, now)
                }
                None => return,
            },
            _ = backstop.tick() => {
                for silent in silent_members(&core, config.heartbeat_timeout) {
                    if !detector.is_suspected(silent) {
                        handle.report(silent);
                    }
                }
                None
            }
            _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
        };
        match action {
            None => {}
            Some(Action::Probe(suspect)) => {
                let addr = core
                    .lock()
                    .metadata
                    .check_server(suspect)
                    .map(|b| b.peer_addr.clone());
                let Ok(addr) = addr else {
                    detector.forget(suspect);
                    continue;
                };
                let handle = handle.clone();
                let timeout = config.probe_timeout;
                tokio::spawn(async move {
                    let outcome = probe(&addr, timeout).await;
                    let _ = handle.events.send(Event::Probed { suspect, outcome });
                });
            }
            Some(Action::Declare {
                server,
                suspected_for,
                proven_gone,
            }) => {
                declare(&core, server, suspected_for, proven_gone).await;
                orchestrator.wake();
            }
        }
    }
}

/// Members whose last heartbeat is older than `timeout` (or that never sent one since this
/// coordinator started, once `timeout` has passed since then).
fn silent_members(core: &Coordinator, timeout: Duration) -> Vec<ServerId> {
    let state = core.lock();
    let now = Instant::now();
    state
        .metadata
        .members()
        .map(|b| b.server_id)
        .filter(|id| state.liveness.silent_for(*id, now) >= timeout)
        .collect()
}

/// One probe: a fresh connection and a ping, bounded by `timeout`. A refused connection is
/// told apart (nothing listens there); every other failure is silence, and a silent probe
/// takes its whole `timeout`, so probing a silent suspect never spins.
pub(crate) async fn probe(addr: &str, timeout: Duration) -> ProbeOutcome {
    let started = tokio::time::Instant::now();
    let ms = timeout.as_millis() as u64;
    let config = RpcClientConfig {
        requests_in_flight_max: 4,
        frame_body_bytes_max: 1 << 16,
        connect_timeout_ms: ms,
        request_timeout_ms: ms,
        keepalive_ms: 0,
    };
    let attempt = async {
        let stream = match tailstream_net::tls::connect(addr).await {
            Ok(stream) => stream,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                return ProbeOutcome::Refused;
            }
            Err(_) => return ProbeOutcome::Silent,
        };
        let client = RpcClient::over(stream, addr, config);
        match tailstream_stubs::broker_peer::ping(&client).await {
            Ok(_) => ProbeOutcome::Answered,
            Err(_) => ProbeOutcome::Silent,
        }
    };
    let outcome = tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or(ProbeOutcome::Silent);
    if outcome == ProbeOutcome::Silent {
        tokio::time::sleep_until(started + timeout).await;
    }
    outcome
}

/// Declares `server` crashed: saved, its streamlets put into recovery.
async fn declare(core: &Coordinator, server: ServerId, suspected_for: Duration, proven_gone: bool) {
    let now_ms = crate::core::unix_ms();
    let detect_ms = suspected_for.as_millis() as u64;
    let declared = core
        .change(move |m| {
            let moved = m.declare_crashed(server)?;
            let streamlets = moved.len();
            m.open_recovery(server, moved, now_ms, detect_ms);
            Ok(streamlets)
        })
        .await;
    match declared {
        Ok(streamlets) => {
            if proven_gone {
                core.lock().proven_gone.insert(server);
            }
            metrics::counter!(m::CRASHES_DECLARED).increment(1);
            metrics::histogram!(m::RECOVERY_PHASE, "phase" => "detect")
                .record(suspected_for.as_secs_f64());
            if streamlets > 0 {
                metrics::counter!(m::RECOVERIES).increment(1);
            }
            tracing::warn!(
                %server,
                streamlets,
                detect_ms,
                proven_gone,
                "broker declared crashed: fenced; its streamlets go to recovery"
            );
        }
        Err(error) => tracing::error!(%server, ?error, "declaring a broker crashed failed"),
    }
}
