//! Recent metadata changes that only added streamlets (a stream created), per broker: what lets
//! the coordinator send a broker what changed since the version it knows instead of its whole
//! assignment. At 20,000 streamlets a broker, a full assignment is megabytes to build, encode
//! and apply, and every create used to send one to each owner, and again in each owner's
//! next heartbeat answer.
//!
//! Only steps this coordinator saved itself are recorded, keyed by the version they start
//! from, so a chain from a broker's version to the current one exists only when every step in
//! between is a recorded addition; anything else (a deletion, a recovery, a change of another
//! leader) breaks the chain and the broker gets its full assignment, as before.
//!
//! Additions never take anything away, and a full set is what drops a streamlet a broker holds
//! but should not (a rebuild that finished after it was planned elsewhere): so a broker whose
//! assignment changes gets its full set at least every `FULL_SET_EVERY` all the same.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tailstream_wire::ServerId;
use tailstream_wire::messages::StreamletAssignment;

/// Steps remembered: a broker further behind than this gets its full assignment.
pub const STEPS_KEPT: usize = 256;
/// A broker whose assignment changes is sent its full set at least this often.
pub const FULL_SET_EVERY: Duration = Duration::from_secs(30);

/// One change that only added streamlets.
#[derive(Debug)]
struct Step {
    /// The version it produced.
    version: u64,
    added: HashMap<ServerId, Vec<StreamletAssignment>>,
}

#[derive(Debug, Default)]
pub struct Additions {
    /// By the version each step starts from.
    steps: BTreeMap<u64, Step>,
    /// When each broker was last sent its full assignment.
    full_sent: HashMap<ServerId, Instant>,
    /// The newest assignment version each broker is known to hold: heard in its heartbeats,
    /// and assumed from each assignment sent to it. One that failed leaves it too high: the
    /// broker then ignores additions counted from it and catches up through its heartbeat.
    held: HashMap<ServerId, u64>,
}

impl Additions {
    /// Records that the change from `base` to `version` only added `added` (per owner).
    pub fn record(
        &mut self,
        base: u64,
        version: u64,
        added: HashMap<ServerId, Vec<StreamletAssignment>>,
    ) {
        if version <= base {
            return;
        }
        self.steps.insert(base, Step { version, added });
        while self.steps.len() > STEPS_KEPT {
            self.steps.pop_first();
        }
    }

    /// `server` holds `version` (heard, or sent to it): versions held only go up.
    pub fn holds(&mut self, server: ServerId, version: u64) {
        let held = self.held.entry(server).or_insert(version);
        *held = (*held).max(version);
    }

    /// The newest version `server` is known to hold.
    pub fn held(&self, server: ServerId) -> Option<u64> {
        self.held.get(&server).copied()
    }

    /// `server` was sent its full assignment at `now`.
    pub fn sent_full(&mut self, server: ServerId, now: Instant) {
        self.full_sent.insert(server, now);
    }

    /// Whether `server` had its full assignment within `FULL_SET_EVERY` of `now` (if not, it
    /// gets it again rather than additions).
    pub fn full_is_recent(&self, server: ServerId, now: Instant) -> bool {
        self.full_sent
            .get(&server)
            .is_some_and(|at| now.saturating_duration_since(*at) < FULL_SET_EVERY)
    }

    /// What `server` gains from `known` to `current`, in order, if every step in between is a
    /// recorded addition and its last full set is recent; `None` when it needs its full
    /// assignment.
    pub fn since(
        &self,
        server: ServerId,
        known: u64,
        current: u64,
        now: Instant,
    ) -> Option<Vec<StreamletAssignment>> {
        if !self.full_is_recent(server, now) {
            return None;
        }
        let mut at = known;
        let mut gained = Vec::new();
        while at < current {
            let step = self.steps.get(&at)?;
            gained.extend(step.added.get(&server).into_iter().flatten().cloned());
            at = step.version;
        }
        (at == current).then_some(gained)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::{OwnershipEpoch, StreamId, StreamletId};

    fn server(index: u32) -> ServerId {
        ServerId {
            index,
            generation: 1,
        }
    }

    fn assignment(stream: u64, streamlet: u32) -> StreamletAssignment {
        StreamletAssignment {
            stream: StreamId(stream),
            stream_name: format!("s{stream}"),
            streamlet: StreamletId(streamlet),
            config: tailstream_config::Config::embedded().stream_defaults,
            epoch: OwnershipEpoch(1),
            recovering: false,
            log_starts: Vec::new(),
        }
    }

    fn step(pairs: &[(u32, u64, u32)]) -> HashMap<ServerId, Vec<StreamletAssignment>> {
        let mut added: HashMap<ServerId, Vec<StreamletAssignment>> = HashMap::new();
        for (owner, stream, streamlet) in pairs {
            added
                .entry(server(*owner))
                .or_default()
                .push(assignment(*stream, *streamlet));
        }
        added
    }

    /// Every broker of the tests had its full set just now.
    fn fresh() -> Additions {
        let mut additions = Additions::default();
        for index in 0..3 {
            additions.sent_full(server(index), Instant::now());
        }
        additions
    }

    #[test]
    fn a_chain_of_recorded_additions_composes_per_broker_in_order() {
        let mut additions = fresh();
        additions.record(10, 11, step(&[(0, 1, 0), (1, 1, 1)]));
        additions.record(11, 12, step(&[(1, 2, 0)]));
        additions.record(12, 14, step(&[(0, 3, 0), (0, 3, 1)]));
        let keys = |v: Vec<StreamletAssignment>| -> Vec<(u64, u32)> {
            v.iter().map(|a| (a.stream.0, a.streamlet.0)).collect()
        };
        assert_eq!(
            keys(additions.since(server(0), 10, 14, Instant::now()).unwrap()),
            [(1, 0), (3, 0), (3, 1)]
        );
        assert_eq!(
            keys(additions.since(server(1), 11, 14, Instant::now()).unwrap()),
            [(2, 0)]
        );
        assert_eq!(
            keys(additions.since(server(2), 10, 14, Instant::now()).unwrap()),
            []
        );
        assert_eq!(
            additions.since(server(0), 14, 14, Instant::now()).unwrap(),
            []
        );
    }

    #[test]
    fn an_unrecorded_step_or_a_version_inside_a_step_needs_the_full_assignment() {
        let mut additions = fresh();
        additions.record(10, 11, step(&[(0, 1, 0)]));
        // 11 -> 12 was a deletion: not recorded.
        additions.record(12, 13, step(&[(0, 2, 0)]));
        assert_eq!(additions.since(server(0), 10, 13, Instant::now()), None);
        assert_eq!(
            additions.since(server(0), 9, 11, Instant::now()),
            None,
            "before the first step"
        );
        additions.record(13, 16, step(&[(0, 3, 0)]));
        assert_eq!(
            additions.since(server(0), 14, 16, Instant::now()),
            None,
            "inside a step"
        );
        assert_eq!(
            additions.since(server(0), 13, 15, Instant::now()),
            None,
            "past the current version"
        );
    }

    /// The version a broker holds only goes up (a heartbeat sent before a push, answered
    /// after it, does not set it back), and what it is pushed counts from there: a broker a
    /// step behind a create's base gets that step's streamlets too, not additions it would
    /// ignore.
    #[test]
    fn what_a_broker_holds_only_goes_up_and_pushes_count_from_it() {
        let mut additions = fresh();
        assert_eq!(additions.held(server(0)), None);
        additions.holds(server(0), 10);
        additions.holds(server(0), 12);
        additions.holds(server(0), 11);
        assert_eq!(additions.held(server(0)), Some(12));
        additions.holds(server(1), 10);
        additions.record(10, 11, step(&[(1, 1, 0)]));
        additions.record(11, 12, step(&[(0, 2, 0), (1, 2, 1)]));
        // Broker 1 holds 10, a step behind the second create's base (11): it is sent both.
        let held = additions.held(server(1)).unwrap();
        let gained: Vec<(u64, u32)> = additions
            .since(server(1), held, 12, Instant::now())
            .unwrap()
            .iter()
            .map(|a| (a.stream.0, a.streamlet.0))
            .collect();
        assert_eq!(gained, [(1, 0), (2, 1)]);
    }

    #[test]
    fn only_the_newest_steps_are_kept() {
        let mut additions = fresh();
        for base in 0..(STEPS_KEPT as u64 + 10) {
            additions.record(base, base + 1, step(&[(0, base, 0)]));
        }
        let newest = STEPS_KEPT as u64 + 10;
        assert_eq!(additions.since(server(0), 0, newest, Instant::now()), None);
        let kept = additions
            .since(server(0), 10, newest, Instant::now())
            .unwrap();
        assert_eq!(kept.len(), STEPS_KEPT);
    }

    #[test]
    fn a_broker_without_a_recent_full_set_gets_one_instead_of_additions() {
        let server = ServerId::new(0, 1);
        let mut additions = Additions::default();
        additions.record(1, 2, HashMap::new());
        let now = Instant::now();
        assert_eq!(additions.since(server, 1, 2, now), None, "never had one");
        additions.sent_full(server, now);
        assert_eq!(additions.since(server, 1, 2, now), Some(Vec::new()));
        let later = now + FULL_SET_EVERY;
        assert_eq!(additions.since(server, 1, 2, later), None, "too long ago");
    }
}
