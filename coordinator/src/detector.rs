//! Failure detection, the coordinator's part, as a pure state machine: reports and probe
//! results in, what to do out. Brokers report peers that missed their pings; heartbeats that
//! stop are the backstop. A suspect is never declared on someone else's word: the coordinator
//! probes it itself, and only `probe_attempts` failed probes in a row declare it crashed. Any
//! answer clears it.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use tailstream_wire::ServerId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ping the suspect (one attempt).
    Probe(ServerId),
    /// It failed every probe: declare it crashed. `suspected_for` is how long it took from
    /// the first report.
    Declare {
        server: ServerId,
        suspected_for: Duration,
    },
}

#[derive(Clone, Copy, Debug)]
struct Suspicion {
    since: Instant,
    failed_probes: u32,
}

#[derive(Debug)]
pub struct Detector {
    probe_attempts: u32,
    suspects: HashMap<ServerId, Suspicion>,
}

impl Detector {
    pub fn new(probe_attempts: u32) -> Self {
        Self {
            probe_attempts: probe_attempts.max(1),
            suspects: HashMap::new(),
        }
    }

    /// Someone reports `suspect` silent (a broker's ping, or its heartbeats stopped). Starts
    /// probing it unless that is under way.
    pub fn reported(&mut self, suspect: ServerId, now: Instant) -> Option<Action> {
        if self.suspects.contains_key(&suspect) {
            return None;
        }
        self.suspects.insert(
            suspect,
            Suspicion {
                since: now,
                failed_probes: 0,
            },
        );
        Some(Action::Probe(suspect))
    }

    /// A probe of `suspect` ended.
    pub fn probed(&mut self, suspect: ServerId, answered: bool, now: Instant) -> Option<Action> {
        let suspicion = self.suspects.get_mut(&suspect)?;
        if answered {
            self.suspects.remove(&suspect);
            return None;
        }
        suspicion.failed_probes += 1;
        if suspicion.failed_probes < self.probe_attempts {
            return Some(Action::Probe(suspect));
        }
        let since = suspicion.since;
        self.suspects.remove(&suspect);
        Some(Action::Declare {
            server: suspect,
            suspected_for: now.saturating_duration_since(since),
        })
    }

    /// `server` is no longer a member (declared, or re-registered): forget it.
    pub fn forget(&mut self, server: ServerId) {
        self.suspects.remove(&server);
    }

    pub fn is_suspected(&self, server: ServerId) -> bool {
        self.suspects.contains_key(&server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ServerId = ServerId::new(1, 1);

    #[test]
    fn a_suspect_is_declared_only_after_every_probe_failed() {
        let t0 = Instant::now();
        let mut detector = Detector::new(2);
        assert_eq!(detector.reported(A, t0), Some(Action::Probe(A)));
        assert_eq!(detector.reported(A, t0), None, "one probing at a time");
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(detector.probed(A, false, t1), Some(Action::Probe(A)));
        let t2 = t0 + Duration::from_millis(250);
        assert_eq!(
            detector.probed(A, false, t2),
            Some(Action::Declare {
                server: A,
                suspected_for: Duration::from_millis(250)
            })
        );
        assert!(!detector.is_suspected(A));
    }

    #[test]
    fn any_answer_clears_a_suspect_whatever_others_reported() {
        let t0 = Instant::now();
        let mut detector = Detector::new(2);
        detector.reported(A, t0);
        assert_eq!(detector.probed(A, false, t0), Some(Action::Probe(A)));
        assert_eq!(
            detector.probed(A, true, t0),
            None,
            "a slow peer, not a dead one"
        );
        assert!(!detector.is_suspected(A));
        // A later report starts over.
        assert_eq!(detector.reported(A, t0), Some(Action::Probe(A)));
        detector.forget(A);
        assert_eq!(
            detector.probed(A, false, t0),
            None,
            "forgotten: nothing to do"
        );
    }
}
