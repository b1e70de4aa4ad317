//! The hand-over's wait for crashed brokers' leases. A crashed generation may still serve
//! until its lease ends: `broker.lease_ms` after the last heartbeat this coordinator answered
//! or, when this coordinator has led only since after that (a new term, or a lapse of its own
//! etcd lease, during which it answered "not leading"), `broker.leaderless_lease_ms` after it,
//! because a broker that hears "not leading" from the coordinator that renewed it serves on for
//! that long (`broker::lease`). The long wait is skipped for a generation this coordinator
//! proves gone: two probes in a row refused at its peer address mean no process listens there
//! (a killed broker, the usual crash), and a process that is gone serves nothing; its short
//! lease is still waited out (a firewall can refuse for a live process), which a rebuild
//! outlasts anyway.

use super::orchestrator::Orchestrator;
use crate::detector::ProbeOutcome;
use crate::watchdog::probe;
use std::time::{Duration, Instant};
use tailstream_net::clock::BootInstant;
use tailstream_wire::{ServerId, StreamId, StreamletId};

/// Margin past a lease's computed end (the two clocks are read at slightly different times).
const LEASE_END_MARGIN: Duration = Duration::from_millis(20);
/// How often a wait looks again at this coordinator's leadership and what it waits for.
const RECHECK_EVERY: Duration = Duration::from_millis(500);
/// Refused probes in a row that prove a process gone (as the failure detector counts them).
const REFUSALS_TO_PROVE_GONE: u32 = 2;

impl Orchestrator {
    /// Until the lease of every crashed generation that owned `of` has surely run out
    /// (`State::lease_waits`), this coordinator leading at the end, or lapsed for a whole
    /// leaderless lease.
    pub(super) async fn wait_for_leases(&self, of: (StreamId, StreamletId)) {
        let mut probed = false;
        let mut lapsed_at: Option<Instant> = None;
        loop {
            let Some(since) = self.leadership.valid_since() else {
                // Not leading now. Every lease this coordinator renewed was renewed before the
                // lapse began, so a leaderless lease after it has surely ended them all (and
                // a deposed coordinator's save is refused: this task must not outlive it).
                let lapsed_at = *lapsed_at.get_or_insert_with(Instant::now);
                if lapsed_at.elapsed() >= self.config.leaderless_lease {
                    return;
                }
                tokio::time::sleep(RECHECK_EVERY).await;
                continue;
            };
            lapsed_at = None;
            let leaderless = Some((instant_of(since), self.config.leaderless_lease));
            let waits = self
                .core
                .lock()
                .lease_waits(self.config.lease, leaderless, Some(of));
            if !probed && waits.iter().any(|(_, _, long)| *long) {
                probed = true;
                let long: Vec<ServerId> = waits
                    .iter()
                    .filter(|(_, _, long)| *long)
                    .map(|(server, _, _)| *server)
                    .collect();
                if self.prove_gone(&long).await {
                    continue;
                }
            }
            let Some(end) = waits.iter().map(|(_, end, _)| *end).max() else {
                return;
            };
            let deadline = end + LEASE_END_MARGIN;
            let now = Instant::now();
            if deadline <= now {
                return;
            }
            tokio::time::sleep_until(deadline.min(now + RECHECK_EVERY).into()).await;
        }
    }

    /// Probes each of `servers` at its peer address; records those proven gone. Returns
    /// whether any was.
    async fn prove_gone(&self, servers: &[ServerId]) -> bool {
        let addresses: Vec<(ServerId, String)> = {
            let state = self.core.lock();
            servers
                .iter()
                .filter_map(|s| Some((*s, state.metadata.peer_addr_of(*s)?.to_string())))
                .collect()
        };
        let timeout = self.config.probe_timeout;
        let probes = addresses.into_iter().map(|(server, addr)| async move {
            for _ in 0..REFUSALS_TO_PROVE_GONE {
                if probe(&addr, timeout).await != ProbeOutcome::Refused {
                    return None;
                }
            }
            Some(server)
        });
        let gone: Vec<ServerId> = futures::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect();
        if gone.is_empty() {
            return false;
        }
        tracing::info!(
            ?gone,
            "crashed brokers proven gone (nothing listens at their addresses): no lease to wait out"
        );
        self.core.lock().proven_gone.extend(gone);
        true
    }
}

/// `at` on the monotonic clock (a point too early for it counts as now: a later start only
/// makes a wait longer).
fn instant_of(at: BootInstant) -> Instant {
    let ago = Duration::from_nanos(BootInstant::now().nanos().saturating_sub(at.nanos()));
    Instant::now().checked_sub(ago).unwrap_or_else(Instant::now)
}
