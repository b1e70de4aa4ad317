//! Where a rebuild goes, pure: among the live members, one with room for the streamlet's
//! segments in its segment memory (if any has), then the least loaded (counting what this round already
//! handed out), then the one holding the fewest bytes of the streamlet's closed copies (those
//! are adopted where they are, and a primary is never its own backup, so copies on the new
//! owner must be made again), then the one with the most memory left.

use super::planner::Plan;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use tailstream_wire::ServerId;

/// A member a rebuild can go to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub server: ServerId,
    pub peer_addr: String,
    /// Streamlets it owns or rebuilds.
    pub load: usize,
    /// Segment memory it had left at its last heartbeat (`u64::MAX` when not reported yet).
    pub memory_free_bytes: u64,
}

/// Chooses the target for `plan` and counts the rebuild against it (load and memory).
/// `None` only when there is no candidate.
pub fn choose(candidates: &mut [Candidate], plan: &Plan) -> Option<Candidate> {
    let held = held_closed_bytes(plan);
    let fits = |c: &Candidate| c.memory_free_bytes >= plan.memory_bytes;
    let any_fits = candidates.iter().any(fits);
    let chosen = candidates
        .iter_mut()
        .filter(|c| !any_fits || fits(c))
        .min_by_key(|c| {
            (
                c.load,
                held.get(&c.server).copied().unwrap_or(0),
                Reverse(c.memory_free_bytes),
                c.server,
            )
        })?;
    chosen.load += 1;
    chosen.memory_free_bytes = chosen.memory_free_bytes.saturating_sub(plan.memory_bytes);
    Some(chosen.clone())
}

/// Per backup, the bytes of closed segments of `plan` it holds a copy of.
fn held_closed_bytes(plan: &Plan) -> BTreeMap<ServerId, u64> {
    let mut held = BTreeMap::new();
    for source in plan.logs.iter().flat_map(|l| &l.segments) {
        if source.closed {
            for holder in &source.holders {
                *held.entry(holder.backup).or_insert(0) += u64::from(source.length);
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::messages::{LogRecovery, ReplicaHolder, SegmentSource};
    use tailstream_wire::{GroupId, LogId, ReplicaEpoch, SegmentId};

    fn candidate(index: u32, load: usize, memory_free_bytes: u64) -> Candidate {
        Candidate {
            server: ServerId::new(index, 1),
            peer_addr: format!("127.0.0.1:{index}"),
            load,
            memory_free_bytes,
        }
    }

    /// A plan of `bytes` whose one closed segment is held by `holders`.
    fn plan(bytes: u64, holders: &[u32]) -> Plan {
        Plan {
            logs: vec![LogRecovery {
                log: LogId(0),
                segments: vec![SegmentSource {
                    group: GroupId(0),
                    segment: SegmentId(0),
                    epoch: ReplicaEpoch(1),
                    length: bytes as u32,
                    closed: true,
                    holders: holders
                        .iter()
                        .map(|i| ReplicaHolder {
                            backup: ServerId::new(*i, 1),
                            peer_addr: String::new(),
                            primary: ServerId::new(9, 1),
                        })
                        .collect(),
                }],
            }],
            next_group: GroupId(1),
            next_segment: SegmentId(1),
            bytes,
            empty_open: Vec::new(),
            memory_bytes: bytes,
        }
    }

    fn chosen(candidates: &mut [Candidate], plan: &Plan) -> u32 {
        choose(candidates, plan).map(|c| c.server.index).unwrap()
    }

    #[test]
    fn least_loaded_first_then_fewest_copies_held_then_most_memory() {
        let mut c = vec![
            candidate(0, 1, 100),
            candidate(1, 0, 100),
            candidate(2, 0, 100),
        ];
        assert_eq!(chosen(&mut c, &plan(10, &[1])), 2, "1 holds a copy");
        assert_eq!(chosen(&mut c, &plan(10, &[])), 1, "2 took one already");
        let mut c = vec![candidate(0, 0, 100), candidate(1, 0, 500)];
        assert_eq!(chosen(&mut c, &plan(10, &[])), 1, "more memory left");
    }

    #[test]
    fn a_member_without_room_is_passed_over_unless_none_has_room() {
        let mut c = vec![candidate(0, 0, 50), candidate(1, 3, 1000)];
        assert_eq!(chosen(&mut c, &plan(100, &[])), 1);
        assert_eq!(c[1].memory_free_bytes, 900, "counted against it");
        let mut c = vec![candidate(0, 0, 50), candidate(1, 3, 60)];
        assert_eq!(chosen(&mut c, &plan(100, &[])), 0, "none has room: by load");
        assert!(choose(&mut [], &plan(1, &[])).is_none());
    }
}
