//! What a backup answers `ListReplicas` with, kept linear in what it holds.
//!
//! Every segment opens with a log digest naming every live segment of its log up to itself,
//! so sending every replica's digest makes a listing quadratic in a log's length: a backup
//! holding a few thousand segments of one long log answered with more than the 64 MiB a frame
//! may carry, and every recovery waited on it for good (bench chaos, cycle 246 of a 300-cycle
//! run). Recovery reads only the newest usable digest of each log (it names the whole log), so
//! a listing carries the digests of the usable copies (complete, not corrupt, with bytes: what
//! recovery would read) of each log's newest [`DIGESTS_PER_LOG`] such segments on this backup,
//! and an empty digest elsewhere. The spare ones stand in when the newest copies cannot be
//! used for a reason only the coordinator knows (below the epoch it saved for the open
//! segment); were they all unusable, recovery would find no digest new enough, and a log it
//! cannot prove whole is declared lost, never served short.

use std::collections::{BTreeSet, HashMap};
use tailstream_wire::messages::{ReplicaInfo, ReplicaState};
use tailstream_wire::{LogId, SegmentId, StreamId, StreamletId};

/// Per log, how many of its newest segments keep their digest in a listing.
pub const DIGESTS_PER_LOG: usize = 4;

/// Whether recovery could read this copy (the planner's own test, as the backup can see it):
/// only such a copy's digest is ever used.
fn readable(info: &ReplicaInfo) -> bool {
    !info.filling
        && info.state != ReplicaState::Corrupt
        && info.valid_bytes > 0
        && !info.digest.is_empty()
}

/// Clears the digests of every replica but the readable copies of each log's newest
/// [`DIGESTS_PER_LOG`] segments with a readable copy.
pub fn trim_digests(replicas: &mut [ReplicaInfo]) {
    let mut newest: HashMap<(StreamId, StreamletId, LogId), BTreeSet<SegmentId>> = HashMap::new();
    for info in replicas.iter().filter(|i| readable(i)) {
        let id = &info.replica;
        let kept = newest.entry((id.stream, id.streamlet, id.log)).or_default();
        kept.insert(id.segment);
        if kept.len() > DIGESTS_PER_LOG {
            kept.pop_first();
        }
    }
    for info in replicas.iter_mut() {
        let id = &info.replica;
        let keep = readable(info)
            && newest
                .get(&(id.stream, id.streamlet, id.log))
                .is_some_and(|kept| kept.contains(&id.segment));
        if !keep {
            info.digest = bytes::Bytes::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tailstream_wire::messages::{ReplicaId, ReplicaState};
    use tailstream_wire::{GroupId, ReplicaEpoch, ServerId};

    fn info(log: u32, segment: u64, epoch: u32, digest: &'static [u8]) -> ReplicaInfo {
        ReplicaInfo {
            primary: ServerId::new(0, 1),
            replica: ReplicaId {
                stream: StreamId(1),
                streamlet: StreamletId(0),
                log: LogId(log),
                group: GroupId(0),
                segment: SegmentId(segment),
            },
            epoch: ReplicaEpoch(epoch),
            state: ReplicaState::Closed,
            filling: false,
            valid_bytes: 100,
            digest: Bytes::from_static(digest),
        }
    }

    #[test]
    fn each_log_keeps_the_digests_of_its_newest_segments_only() {
        let mut listing: Vec<ReplicaInfo> = (0..20).map(|s| info(0, s, 1, b"d")).collect();
        // Log 1: a second copy (another epoch) of its newest segment, and a newest segment
        // with no digest yet (opened ahead, empty).
        listing.extend((0..6).map(|s| info(1, 100 + s, 1, b"d")));
        listing.push(info(1, 105, 2, b"d"));
        listing.push(info(1, 106, 1, b""));
        // Log 2: its four newest segments are a replacement still filling, a corrupt copy
        // and two copies without bytes: the spare digests go to the newest readable ones.
        listing.extend((0..10).map(|s| info(2, 200 + s, 1, b"d")));
        let n = listing.len();
        listing[n - 1].filling = true;
        listing[n - 2].state = ReplicaState::Corrupt;
        listing[n - 3].valid_bytes = 0;
        listing[n - 4].valid_bytes = 0;
        trim_digests(&mut listing);
        let with_digest = |log: u32| -> Vec<(u64, u32)> {
            listing
                .iter()
                .filter(|i| i.replica.log == LogId(log) && !i.digest.is_empty())
                .map(|i| (i.replica.segment.0, i.epoch.0))
                .collect()
        };
        assert_eq!(with_digest(0), vec![(16, 1), (17, 1), (18, 1), (19, 1)]);
        assert_eq!(
            with_digest(1),
            vec![(102, 1), (103, 1), (104, 1), (105, 1), (105, 2)]
        );
        assert_eq!(with_digest(2), vec![(202, 1), (203, 1), (204, 1), (205, 1)]);
        assert_eq!(listing.len(), 38, "every replica is still listed");
    }
}
