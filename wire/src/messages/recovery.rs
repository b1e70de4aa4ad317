//! Failure detection and recovery: a broker's report of a silent peer, and the coordinator's
//! order to rebuild a crashed broker's streamlet from its backups.

#[cfg(test)]
use super::small_vec;
use super::{ReplicaId, StreamletAssignment};
use crate::ids::{CoordinatorTerm, GroupId, LogId, ReplicaEpoch, SegmentId, ServerId};
use crate::wire_message;

wire_message! {
    /// Broker → coordinator: `suspect` missed `reporter`'s pings.
    pub struct ReportSuspectRequest {
        pub reporter: ServerId,
        pub suspect: ServerId,
    }
}

wire_message! {
    /// A backup holding a usable copy of a segment.
    pub struct ReplicaHolder {
        pub backup: ServerId,
        /// The backup's peer listener.
        pub peer_addr: String,
        /// The primary the copy belongs to on that backup (the crashed owner, or an owner
        /// that adopted it in an earlier, interrupted recovery).
        pub primary: ServerId,
    }
}

wire_message! {
    /// One segment a recovered log must have, and where to read it.
    pub struct SegmentSource {
        pub group: GroupId,
        pub segment: SegmentId,
        /// The replica epoch to read (the highest complete one).
        pub epoch: ReplicaEpoch,
        /// Bytes to recover: the closed length, or for the open head the longest valid prefix.
        pub length: u32,
        /// Closed on every holder (adopted as is); else the open head (closed at `length` and
        /// replicated afresh).
        pub closed: bool,
        #[cfg_attr(test, proptest(strategy = "small_vec::<ReplicaHolder>()"))]
        pub holders: Vec<ReplicaHolder>,
    }
}

wire_message! {
    /// One log to rebuild: its segments in log order, as its newest log digest names them.
    pub struct LogRecovery {
        pub log: LogId,
        #[cfg_attr(test, proptest(strategy = "small_vec::<SegmentSource>()"))]
        pub segments: Vec<SegmentSource>,
    }
}

wire_message! {
    /// Coordinator → new owner: rebuild `assignment`'s streamlet (whose owner crashed) from
    /// these replicas, keeping every id, position and offset, and make it durable again (adopt
    /// the closed copies, replicate the recovered head afresh). It is served once an
    /// assignment says it is no longer recovering.
    pub struct RecoverStreamletRequest {
        /// The ordering coordinator's term: refused by a broker that has seen a newer one.
        pub term: CoordinatorTerm,
        pub target: ServerId,
        /// The coordinator's metadata version when it gave the order: an older assignment
        /// never drops what this order rebuilds.
        pub version: u64,
        pub assignment: StreamletAssignment,
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogRecovery>()"))]
        pub logs: Vec<LogRecovery>,
        /// Group and segment ids the streamlet hands out from now on start above these.
        pub next_group: GroupId,
        pub next_segment: SegmentId,
    }
}

impl SegmentSource {
    /// The replica this source names, in `crashed`'s streamlet `log`.
    pub fn replica_id(&self, streamlet: &StreamletAssignment, log: LogId) -> ReplicaId {
        ReplicaId {
            stream: streamlet.stream,
            streamlet: streamlet.streamlet,
            log,
            group: self.group,
            segment: self.segment,
        }
    }
}

wire_message! {
    /// What a rebuild took, for the coordinator's recovery record.
    pub struct RecoverStreamletResponse {
        pub bytes: u64,
        pub segments_adopted: u32,
        pub segments_copied: u32,
        pub read_ms: u32,
        pub rereplicate_ms: u32,
    }
}
