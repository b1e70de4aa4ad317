//! When each broker was last heard from. Kept in memory only: after a coordinator restart a
//! broker counts as alive again once its next heartbeat arrives.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use tailstream_wire::ServerId;

#[derive(Debug)]
pub struct Liveness {
    timeout: Duration,
    last_heard: HashMap<ServerId, Instant>,
    /// The last heartbeat that said its sender's lease ran on no leaderless extension.
    clean_heartbeats: HashMap<ServerId, Instant>,
    /// When this coordinator started: a broker never heard from counts as heard then.
    started: Instant,
}

impl Liveness {
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            last_heard: HashMap::new(),
            clean_heartbeats: HashMap::new(),
            started: Instant::now(),
        }
    }

    /// When `server` was last heard from (or this coordinator started, if never since).
    pub fn last_heard(&self, server: ServerId) -> Instant {
        self.last_heard
            .get(&server)
            .copied()
            .unwrap_or(self.started)
            .max(self.started)
    }

    /// When the last heartbeat of `server` arrived that said its lease ran on no leaderless
    /// extension (no floor): only after such a one is its lease known to be the short one
    /// again (a heartbeat whose answer was lost leaves the broker extended).
    pub fn clean_heartbeat_at(&self, server: ServerId) -> Option<Instant> {
        self.clean_heartbeats.get(&server).copied()
    }

    pub fn heard_clean(&mut self, server: ServerId, now: Instant) {
        self.clean_heartbeats.insert(server, now);
    }

    /// This coordinator leads again after a stretch of not leading (its etcd lease lapsed),
    /// during which it heard no heartbeat (it answered none): as after a restart, every broker
    /// counts as heard now, so none is taken for dead for the silence it was not let break.
    pub fn restart(&mut self, now: Instant) {
        self.started = self.started.max(now);
    }

    pub fn silent_for(&self, server: ServerId, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_heard(server))
    }

    pub fn heard(&mut self, server: ServerId, now: Instant) {
        self.last_heard.insert(server, now);
    }

    pub fn forget(&mut self, server: ServerId) {
        self.last_heard.remove(&server);
        self.clean_heartbeats.remove(&server);
    }

    /// Keeps only what is known of the servers `keep` says to.
    pub fn retain(&mut self, keep: impl Fn(ServerId) -> bool) {
        self.last_heard.retain(|server, _| keep(*server));
        self.clean_heartbeats.retain(|server, _| keep(*server));
    }

    /// Heard from within the timeout. A restarted coordinator counts every broker as heard at
    /// its start, so members are not taken for dead before they had a chance to heartbeat.
    pub fn is_alive(&self, server: ServerId, now: Instant) -> bool {
        self.silent_for(server, now) < self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_is_alive_only_within_the_timeout_of_its_last_heartbeat() {
        let mut liveness = Liveness::new(Duration::from_secs(3));
        let id = ServerId::new(1, 1);
        let t0 = Instant::now();
        assert!(
            liveness.is_alive(id, t0),
            "a grace period after the coordinator starts"
        );
        assert!(!liveness.is_alive(id, t0 + Duration::from_secs(4)));
        liveness.heard(id, t0);
        assert!(liveness.is_alive(id, t0 + Duration::from_secs(2)));
        assert!(!liveness.is_alive(id, t0 + Duration::from_secs(3)));
        assert!(!liveness.is_alive(ServerId::new(1, 2), t0 + Duration::from_secs(3)));
    }
}
