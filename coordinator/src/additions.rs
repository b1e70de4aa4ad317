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

use std::collections::{BTreeMap, HashMap};
use tailstream_wire::ServerId;
use tailstream_wire::messages::StreamletAssignment;

/// Steps remembered: a broker further behind than this gets its full assignment.
pub const STEPS_KEPT: usize = 256;

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

    /// What `server` gains from `known` to `current`, in order, if every step in between is a
    /// recorded addition; `None` when it needs its full assignment.
    pub fn since(
        &self,
        server: ServerId,
        known: u64,
        current: u64,
    ) -> Option<Vec<StreamletAssignment>> {
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

    #[test]
    fn a_chain_of_recorded_additions_composes_per_broker_in_order() {
        let mut additions = Additions::default();
        additions.record(10, 11, step(&[(0, 1, 0), (1, 1, 1)]));
        additions.record(11, 12, step(&[(1, 2, 0)]));
        additions.record(12, 14, step(&[(0, 3, 0), (0, 3, 1)]));
        let keys = |v: Vec<StreamletAssignment>| -> Vec<(u64, u32)> {
            v.iter().map(|a| (a.stream.0, a.streamlet.0)).collect()
        };
        assert_eq!(
            keys(additions.since(server(0), 10, 14).unwrap()),
            [(1, 0), (3, 0), (3, 1)]
        );
        assert_eq!(keys(additions.since(server(1), 11, 14).unwrap()), [(2, 0)]);
        assert_eq!(keys(additions.since(server(2), 10, 14).unwrap()), []);
        assert_eq!(additions.since(server(0), 14, 14).unwrap(), []);
    }

    #[test]
    fn an_unrecorded_step_or_a_version_inside_a_step_needs_the_full_assignment() {
        let mut additions = Additions::default();
        additions.record(10, 11, step(&[(0, 1, 0)]));
        // 11 -> 12 was a deletion: not recorded.
        additions.record(12, 13, step(&[(0, 2, 0)]));
        assert_eq!(additions.since(server(0), 10, 13), None);
        assert_eq!(
            additions.since(server(0), 9, 11),
            None,
            "before the first step"
        );
        additions.record(13, 16, step(&[(0, 3, 0)]));
        assert_eq!(additions.since(server(0), 14, 16), None, "inside a step");
        assert_eq!(
            additions.since(server(0), 13, 15),
            None,
            "past the current version"
        );
    }

    #[test]
    fn only_the_newest_steps_are_kept() {
        let mut additions = Additions::default();
        for base in 0..(STEPS_KEPT as u64 + 10) {
            additions.record(base, base + 1, step(&[(0, base, 0)]));
        }
        let newest = STEPS_KEPT as u64 + 10;
        assert_eq!(additions.since(server(0), 0, newest), None);
        let kept = additions.since(server(0), 10, newest).unwrap();
        assert_eq!(kept.len(), STEPS_KEPT);
    }
}
