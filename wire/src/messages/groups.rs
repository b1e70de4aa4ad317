//! Consumer groups, as the coordinator serves them: membership (join, sync, heartbeat, leave,
//! Kafka's classic group protocol: members send opaque protocol metadata, the elected leader
//! computes the assignments, the coordinator hands each member its own) and committed offsets.
//!
//! A committed offset names its partition as Kafka does, (topic, partition index), where a
//! topic is a stream and partition `streamlet * Q + log` is one log: Kafka's groups and
//! Tailstream's own share one offsets store.

#[cfg(test)]
use super::{small_bytes, small_vec};
use crate::wire_message;
use bytes::Bytes;

wire_message! {
    /// One assignment strategy a member can follow, with its metadata for it.
    pub struct GroupProtocol {
        pub name: String,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub metadata: Bytes,
    }
}

wire_message! {
    /// Join (or rejoin) a group; answered once the group's rebalance completes.
    pub struct GroupJoinRequest {
        pub group: String,
        /// Empty for a member joining for the first time: the coordinator gives it an id.
        pub member_id: String,
        pub client_id: String,
        /// Without a heartbeat for this long, the member is removed.
        pub session_timeout_ms: u32,
        /// How long a rebalance waits for this member to rejoin.
        pub rebalance_timeout_ms: u32,
        pub protocol_type: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<GroupProtocol>()"))]
        pub protocols: Vec<GroupProtocol>,
        /// The user a broker names for its Kafka client, on the coordinator's peer listener (a
        /// new group is counted against that user's limits). On the client listener the
        /// connection's user counts, and this is ignored.
        pub owner: crate::Appended<String>,
    }
}

wire_message! {
    /// A member and its metadata for the protocol chosen.
    pub struct GroupMember {
        pub member_id: String,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub metadata: Bytes,
    }
}

wire_message! {
    pub struct GroupJoinResponse {
        pub generation: u32,
        /// The protocol every member supports that the group follows.
        pub protocol: String,
        pub leader: String,
        pub member_id: String,
        /// Every member with its metadata: sent to the leader only, which assigns.
        #[cfg_attr(test, proptest(strategy = "small_vec::<GroupMember>()"))]
        pub members: Vec<GroupMember>,
    }
}

wire_message! {
    /// The leader's assignment for one member.
    pub struct GroupAssignment {
        pub member_id: String,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub assignment: Bytes,
    }
}

wire_message! {
    /// After a join: the leader brings every member's assignment, and each member gets its own.
    pub struct GroupSyncRequest {
        pub group: String,
        pub generation: u32,
        pub member_id: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<GroupAssignment>()"))]
        pub assignments: Vec<GroupAssignment>,
    }
}

wire_message! {
    pub struct GroupSyncResponse {
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub assignment: Bytes,
    }
}

wire_message! {
    /// A member is alive, at this generation (answered `RebalanceInProgress` when it must
    /// rejoin).
    pub struct GroupHeartbeatRequest {
        pub group: String,
        pub generation: u32,
        pub member_id: String,
    }
}

wire_message! {
    pub struct GroupLeaveRequest {
        pub group: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<String>()"))]
        pub member_ids: Vec<String>,
    }
}

wire_message! {
    /// A partition, as Kafka names it.
    pub struct TopicPartition {
        pub topic: String,
        pub partition: u32,
    }
}

wire_message! {
    /// Where a group goes on reading a partition: the next record offset.
    pub struct CommittedOffset {
        pub topic: String,
        pub partition: u32,
        pub offset: u64,
        /// Opaque to Tailstream; given back as it was committed.
        pub metadata: String,
    }
}

wire_message! {
    /// A member committing at a generation (offsets of a group's own members are refused from
    /// anyone else while the group has members).
    pub struct GroupMemberRef {
        pub member_id: String,
        pub generation: u32,
    }
}

wire_message! {
    /// Commits offsets durably: answered only once they are on disk.
    pub struct OffsetCommitRequest {
        pub group: String,
        /// `None`: a commit from outside the group's membership (a consumer that assigns its
        /// partitions itself), allowed only while the group has no members.
        pub member: Option<GroupMemberRef>,
        #[cfg_attr(test, proptest(strategy = "small_vec::<CommittedOffset>()"))]
        pub offsets: Vec<CommittedOffset>,
        /// As `GroupJoinRequest::owner`: whose limits a new group and new partitions count
        /// against, named by a broker on the peer listener.
        pub owner: crate::Appended<String>,
    }
}

wire_message! {
    pub struct OffsetFetchRequest {
        pub group: String,
        /// `None`: every partition the group committed.
        #[cfg_attr(test, proptest(strategy = "proptest::option::of(small_vec::<TopicPartition>())"))]
        pub partitions: Option<Vec<TopicPartition>>,
    }
}

wire_message! {
    /// The committed offsets asked for; a partition never committed is not listed.
    pub struct OffsetFetchResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<CommittedOffset>()"))]
        pub offsets: Vec<CommittedOffset>,
    }
}

wire_message! {
    /// A consumer group now: how many members, in which generation.
    pub struct ConsumerGroupSummary {
        pub group: String,
        pub members: u32,
        pub generation: u32,
    }
}

wire_message! {
    /// How far one group trails one partition (`streamlet * Q + log`) of a stream (also the
    /// rows of the coordinator's `/groups`).
    #[derive(serde::Serialize)]
    pub struct PartitionLagInfo {
        pub group: String,
        pub stream: String,
        pub partition: u32,
        pub streamlet: u32,
        pub log: u32,
        pub committed_offset: u64,
        /// The log's committed end, when its owner has reported it.
        pub end_offset: Option<u64>,
        /// Records committed to the log past the group's offset (when the end is known).
        pub lag_records: Option<u64>,
    }
}

wire_message! {
    /// Every consumer group with members, and the lag of every partition a group committed.
    pub struct DescribeConsumerGroupsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<ConsumerGroupSummary>()"))]
        pub groups: Vec<ConsumerGroupSummary>,
        #[cfg_attr(test, proptest(strategy = "small_vec::<PartitionLagInfo>()"))]
        pub lag: Vec<PartitionLagInfo>,
    }
}

wire_message! {
    /// One record of the coordinator's offsets file: a commit of one group (see
    /// `offsets_file`), or a removal of some of its offsets.
    pub struct OffsetsRecord {
        pub group: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<CommittedOffset>()"))]
        pub offsets: Vec<CommittedOffset>,
        /// Partitions whose offsets this record removes (DeleteGroups, OffsetDelete); a group
        /// left with none is gone. Added after the file format shipped: older records end
        /// before it, and a coordinator older than it stops reading the file at the first
        /// removal (downgrade only after compaction, or lose later commits).
        #[cfg_attr(test, proptest(strategy = "appended_partitions()"))]
        pub removed: crate::Appended<Vec<TopicPartition>>,
    }
}

wire_message! {
    /// What a native consumer group's leader hands each member (the opaque assignment bytes
    /// of a `GroupAssignment`, protocol type `tailstream`): the partitions it reads, as Kafka
    /// numbers them (`streamlet * Q + log`), of the one stream the group consumes.
    pub struct ConsumerAssignment {
        pub stream: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<u32>()"))]
        pub partitions: Vec<u32>,
    }
}

crate::wire_enum! {
    /// Where a consumer group is in Kafka's classic protocol. Discriminants are wire values.
    pub enum GroupPhase {
        /// No members (it may have committed offsets).
        Empty = 1,
        /// Members are (re)joining.
        PreparingRebalance = 2,
        /// The new generation is out; the leader brings the assignments.
        CompletingRebalance = 3,
        /// Every member has its assignment.
        Stable = 4,
        /// Unknown to the coordinator: neither members nor committed offsets.
        Dead = 5,
    }
}

impl GroupPhase {
    /// The state's name as Kafka's DescribeGroups and ListGroups spell it.
    pub fn kafka_name(self) -> &'static str {
        match self {
            GroupPhase::Empty => "Empty",
            GroupPhase::PreparingRebalance => "PreparingRebalance",
            GroupPhase::CompletingRebalance => "CompletingRebalance",
            GroupPhase::Stable => "Stable",
            GroupPhase::Dead => "Dead",
        }
    }
}

wire_message! {
    /// Which consumer groups to describe: the named ones with their members, or (none named)
    /// every group the coordinator knows, without members.
    pub struct DescribeGroupsRequest {
        #[cfg_attr(test, proptest(strategy = "small_vec::<String>()"))]
        pub groups: Vec<String>,
    }
}

wire_message! {
    /// A member as Kafka's DescribeGroups shows it.
    pub struct GroupMemberDescription {
        pub member_id: String,
        pub client_id: String,
        /// Its metadata for the group's protocol.
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub metadata: Bytes,
        /// What the leader assigned it in the current generation (empty before).
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub assignment: Bytes,
    }
}

wire_message! {
    /// One group: its phase, protocol and members.
    pub struct GroupDescription {
        pub group: String,
        pub phase: GroupPhase,
        /// "consumer" for Kafka consumers, "tailstream" for native ones; empty for a group
        /// that only has committed offsets.
        pub protocol_type: String,
        /// The assignment strategy of the current generation (empty while none).
        pub protocol: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<GroupMemberDescription>()"))]
        pub members: Vec<GroupMemberDescription>,
    }
}

wire_message! {
    pub struct DescribeGroupsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<GroupDescription>()"))]
        pub groups: Vec<GroupDescription>,
    }
}

#[cfg(test)]
fn appended_partitions()
-> impl proptest::strategy::Strategy<Value = crate::Appended<Vec<TopicPartition>>> {
    use proptest::strategy::Strategy;
    proptest::option::of(small_vec::<TopicPartition>()).prop_map(crate::Appended)
}

crate::wire_enum! {
    /// What removing a group's offsets came to. Discriminants are wire values.
    pub enum OffsetsRemoval {
        /// Removed (the group is gone when no offsets are left).
        Removed = 1,
        /// The group has members: their offsets are in use.
        GroupNotEmpty = 2,
        /// The coordinator knows no such group.
        UnknownGroup = 3,
    }
}

wire_message! {
    /// Removes the named groups' committed offsets (Kafka's DeleteGroups): each must have no
    /// members.
    pub struct DeleteGroupsRequest {
        #[cfg_attr(test, proptest(strategy = "small_vec::<String>()"))]
        pub groups: Vec<String>,
    }
}

wire_message! {
    pub struct GroupRemoval {
        pub group: String,
        pub outcome: OffsetsRemoval,
    }
}

wire_message! {
    pub struct DeleteGroupsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<GroupRemoval>()"))]
        pub groups: Vec<GroupRemoval>,
    }
}

wire_message! {
    /// Removes some committed offsets of a group without members (Kafka's OffsetDelete).
    pub struct OffsetDeleteRequest {
        pub group: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<TopicPartition>()"))]
        pub partitions: Vec<TopicPartition>,
    }
}
