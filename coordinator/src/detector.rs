//! Failure detection, the coordinator's part, as a pure state machine: reports and probe
//! results in, what to do out. Brokers report peers that missed their pings; heartbeats that
//! stop are the backstop. A suspect is never declared on someone else's word: the coordinator
//! probes it itself, and what a probe says decides how sure it can be:
//! - **answered**: the suspect is alive (slow, maybe): cleared;
//! - **refused**: nothing listens at its address any more (a killed process's port answers a
//!   connect with a reset at once): `probe_attempts` refusals in a row declare it, within
//!   milliseconds;
//! - **silent**: no answer in time. On a busy machine a live broker can be silent for a while,
//!   so silence alone declares only once the suspect's heartbeats, too, have been missing for
//!   `silence_declare` (the liveness timeout); a heartbeat that arrives after the suspicion
//!   began clears it. A paused (SIGSTOP) or unreachable broker is declared that way.
//!
//! A false declaration costs availability, never data (a declared broker comes back as a new,
//! empty incarnation; no copy anyone holds is dropped while a streamlet needs it), but it costs
//! a recovery: this is why silence is given time.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use tailstream_wire::ServerId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ping the suspect (one attempt).
    Probe(ServerId),
    /// It is gone: declare it crashed. `suspected_for` is how long it took from the first
    /// report.
    Declare {
        server: ServerId,
        suspected_for: Duration,
        /// Declared on refusals: nothing listens at its address, its process is gone (no
        /// lease of its needs waiting out). Silence proves nothing of the kind.
        proven_gone: bool,
    },
}

/// What one probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// It answered the ping.
    Answered,
    /// The connection was refused: no process listens at its address.
    Refused,
    /// No answer within the probe's timeout (or the connection broke without one).
    Silent,
}

#[derive(Clone, Copy, Debug)]
struct Suspicion {
    since: Instant,
    refused_in_a_row: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct DetectorConfig {
    /// Refused probes in a row that declare a suspect.
    pub probe_attempts: u32,
    /// How long a silent suspect's heartbeats must have been missing before it is declared.
    pub silence_declare: Duration,
}

#[derive(Debug)]
pub struct Detector {
    config: DetectorConfig,
    suspects: HashMap<ServerId, Suspicion>,
}

impl Detector {
    pub fn new(config: DetectorConfig) -> Self {
        Self {
            config: DetectorConfig {
                probe_attempts: config.probe_attempts.max(1),
                ..config
            },
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
                refused_in_a_row: 0,
            },
        );
        Some(Action::Probe(suspect))
    }

    /// A probe of `suspect` ended with `outcome`; its last heartbeat reached the coordinator
    /// `heartbeat_silence` ago.
    pub fn probed(
        &mut self,
        suspect: ServerId,
        outcome: ProbeOutcome,
        heartbeat_silence: Duration,
        now: Instant,
    ) -> Option<Action> {
        let suspicion = self.suspects.get_mut(&suspect)?;
        let suspected_for = now.saturating_duration_since(suspicion.since);
        let heard_since_suspected = heartbeat_silence < suspected_for;
        if outcome == ProbeOutcome::Answered || heard_since_suspected {
            self.suspects.remove(&suspect);
            return None;
        }
        let refused = outcome == ProbeOutcome::Refused;
        let gone = match outcome {
            ProbeOutcome::Refused => {
                suspicion.refused_in_a_row += 1;
                suspicion.refused_in_a_row >= self.config.probe_attempts
            }
            ProbeOutcome::Silent => {
                suspicion.refused_in_a_row = 0;
                heartbeat_silence >= self.config.silence_declare
            }
            ProbeOutcome::Answered => false,
        };
        if !gone {
            return Some(Action::Probe(suspect));
        }
        self.suspects.remove(&suspect);
        Some(Action::Declare {
            server: suspect,
            suspected_for,
            proven_gone: refused,
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
    const CONFIG: DetectorConfig = DetectorConfig {
        probe_attempts: 2,
        silence_declare: Duration::from_secs(3),
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_killed_broker_refuses_connections_and_is_declared_at_once() {
        let t0 = Instant::now();
        let mut detector = Detector::new(CONFIG);
        assert_eq!(detector.reported(A, t0), Some(Action::Probe(A)));
        assert_eq!(detector.reported(A, t0), None, "one probing at a time");
        let last_heartbeat = ms(150);
        assert_eq!(
            detector.probed(A, ProbeOutcome::Refused, last_heartbeat, t0 + ms(1)),
            Some(Action::Probe(A))
        );
        assert_eq!(
            detector.probed(A, ProbeOutcome::Refused, last_heartbeat, t0 + ms(3)),
            Some(Action::Declare {
                server: A,
                suspected_for: ms(3),
                proven_gone: true,
            })
        );
        assert!(!detector.is_suspected(A));
    }

    /// Issue 20, case 2: on a saturated machine probes time out. A broker is not declared for
    /// that while its heartbeats still arrive, nor while they have been missing less than the
    /// liveness timeout.
    #[test]
    fn a_silent_broker_is_declared_only_once_its_heartbeats_stopped_too() {
        let t0 = Instant::now();
        let mut detector = Detector::new(CONFIG);
        detector.reported(A, t0);
        // Silent for many probes, heartbeats a little late but older than the suspicion.
        let mut now = t0;
        for _ in 0..10 {
            now += ms(250);
            let silence = ms(200) + now.duration_since(t0);
            assert_eq!(
                detector.probed(A, ProbeOutcome::Silent, silence.min(ms(2900)), now),
                Some(Action::Probe(A)),
                "silence below the liveness timeout never declares"
            );
        }
        // Silent, and no heartbeat for the liveness timeout: gone (a paused process).
        assert_eq!(
            detector.probed(A, ProbeOutcome::Silent, ms(3000), now + ms(250)),
            Some(Action::Declare {
                server: A,
                suspected_for: now + ms(250) - t0,
                proven_gone: false,
            })
        );
    }

    #[test]
    fn an_answer_or_a_heartbeat_after_the_report_clears_a_suspect() {
        let t0 = Instant::now();
        let mut detector = Detector::new(CONFIG);
        detector.reported(A, t0);
        assert_eq!(
            detector.probed(A, ProbeOutcome::Refused, ms(500), t0 + ms(10)),
            Some(Action::Probe(A))
        );
        assert_eq!(
            detector.probed(A, ProbeOutcome::Answered, ms(500), t0 + ms(20)),
            None,
            "a slow peer, not a dead one"
        );
        assert!(!detector.is_suspected(A));
        // A heartbeat heard 100 ms ago, after a report 400 ms ago: alive, whatever the probe.
        detector.reported(A, t0);
        assert_eq!(
            detector.probed(A, ProbeOutcome::Silent, ms(100), t0 + ms(400)),
            None
        );
        assert_eq!(
            detector.probed(A, ProbeOutcome::Refused, ms(100), t0 + ms(400)),
            None,
            "forgotten: nothing to do"
        );
        // A later report starts over; forgetting ends it.
        assert_eq!(detector.reported(A, t0), Some(Action::Probe(A)));
        detector.forget(A);
        assert!(!detector.is_suspected(A));
    }

    #[test]
    fn a_silence_between_refusals_starts_the_count_again() {
        let t0 = Instant::now();
        let mut detector = Detector::new(CONFIG);
        detector.reported(A, t0);
        let silence = ms(1000);
        let now = t0 + ms(1);
        assert!(matches!(
            detector.probed(A, ProbeOutcome::Refused, silence, now),
            Some(Action::Probe(_))
        ));
        assert!(matches!(
            detector.probed(A, ProbeOutcome::Silent, silence, now),
            Some(Action::Probe(_))
        ));
        assert!(matches!(
            detector.probed(A, ProbeOutcome::Refused, silence, now),
            Some(Action::Probe(_))
        ));
    }
}
