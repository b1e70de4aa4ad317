//! Cluster-level messages: stream settings and metadata, membership, streams, producer ids,
//! assignments.

#[cfg(test)]
use super::small_vec;
use crate::ids::{
    CoordinatorTerm, LogId, OwnershipEpoch, ProducerEpoch, ProducerId, RecordOffset, ReplicaEpoch,
    SegmentId, ServerId, StreamId, StreamletId,
};
use crate::wire_message;
use bytes::Bytes;

wire_message! {
    /// Per-stream storage settings, fixed at creation. Also serde, because the coordinator
    /// persists it with the stream.
    #[derive(serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct StreamConfig {
        /// Q: independent logs per streamlet (each with its own append lock and head segment).
        pub logs_per_streamlet: u32,
        /// R: backups per segment (0 = unreplicated).
        pub replicas: u32,
        pub segment_size_bytes: u32,
        pub segments_per_group: u32,
        /// Per streamlet; the oldest sealed groups beyond it are freed. 0 = unlimited.
        pub retention_bytes: u64,
        /// Sealed groups older than this are freed. 0 = unlimited.
        pub retention_ms: u64,
        /// Kafka's `min.insync.replicas`, counted in backup copies as R is: while some of the
        /// R backups are gone and none can replace them, a produce is still acknowledged once
        /// this many complete copies hold it (fewer: refused, `NotEnoughReplicas`). 0 means
        /// the default, max(1, R - 1); with R = 0 it is 0.
        #[serde(default)]
        pub min_insync_replicas: u32,
    }
}

impl StreamConfig {
    /// The `min_insync_replicas` in force: the setting, or max(1, R - 1) when it is 0 (and 0
    /// for an unreplicated stream).
    pub fn min_insync(&self) -> u32 {
        match (self.replicas, self.min_insync_replicas) {
            (0, _) => 0,
            (replicas, 0) => replicas.saturating_sub(1).max(1),
            (replicas, set) => set.min(replicas),
        }
    }
}

crate::wire_enum! {
    /// Whether a streamlet can be used. Discriminants are wire values.
    pub enum PlacementState {
        /// Its owner serves it.
        Serving = 1,
        /// Its owner crashed; it is being rebuilt on `owner` from the backups.
        Recovering = 2,
        /// A segment it needs is on no live backup: it is not served (never with a silent hole)
        /// until a backup holding the missing replicas comes back.
        Lost = 3,
    }
}

wire_message! {
    /// One replicated log's copies, as its owner last reported them.
    pub struct LogReplicaSet {
        pub log: LogId,
        /// The backups of its newest segment, and backups it lost that nothing replaced yet
        /// (Kafka's replica list, less the leader).
        #[cfg_attr(test, proptest(strategy = "small_vec::<ServerId>()"))]
        pub backups: Vec<ServerId>,
        /// Of those, the ones holding a current, complete copy (Kafka's ISR, less the leader).
        #[cfg_attr(test, proptest(strategy = "small_vec::<ServerId>()"))]
        pub in_sync: Vec<ServerId>,
        /// The fewest complete copies any of its segments not yet fully replicated has (R when
        /// none is short): below R the log is under-replicated; below the stream's
        /// `min_insync_replicas` it refuses produce.
        pub in_sync_replicas: u32,
    }
}

wire_message! {
    /// Where one streamlet lives, under which ownership epoch, and whether it is usable.
    pub struct StreamletPlacement {
        pub streamlet: StreamletId,
        pub owner: ServerId,
        pub owner_addr: String,
        /// Bumped at every change of owner; requests name it, and a broker refuses others.
        pub epoch: OwnershipEpoch,
        pub state: PlacementState,
        /// For `Lost`: what is missing; for `Recovering`: from which crashed broker.
        pub detail: String,
        /// Per replicated log, its copies as the owner last reported them (empty when the
        /// stream is unreplicated or nothing was reported yet).
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogReplicaSet>()"))]
        pub replication: Vec<LogReplicaSet>,
    }
}

impl StreamletPlacement {
    /// Logs with fewer complete copies than `replicas` (R), per their owner's last report.
    pub fn under_replicated_logs(&self, replicas: u32) -> usize {
        self.replication
            .iter()
            .filter(|log| log.in_sync_replicas < replicas)
            .count()
    }
}

wire_message! {
    /// Everything a client needs to route to a stream's streamlets.
    pub struct StreamMetadata {
        pub id: StreamId,
        pub name: String,
        pub config: StreamConfig,
        #[cfg_attr(test, proptest(strategy = "small_vec::<StreamletPlacement>()"))]
        pub streamlets: Vec<StreamletPlacement>,
    }
}

wire_message! {
    /// An error response's body: what went wrong, for a human.
    pub struct ErrorBody {
        pub message: String,
    }
}

/// How a `NotLeader` message names the leader: its last part, after this.
const LEADER_IS_AT: &str = "; the leader is at ";
/// How a `NotLeader` message names the term its sender led last.
const LED_TERM: &str = "; it led term ";
/// Longest leader address a message may name (host:port).
const LEADER_ADDR_BYTES_MAX: usize = 255;

/// A `NotLeader` answer's message: `why`; the term the sender led last, if it led one (it
/// renews no lease of that term any more: a broker whose lease that term renewed may take it
/// as evidence that nobody renews it, see the broker's `lease`); then where the leader is, if
/// known, as the address of the same listener (client or peer) on the leader.
/// [`leader_named_in`] and [`led_term_named_in`] read it back.
pub fn not_leader_message(
    why: &str,
    led_term: Option<CoordinatorTerm>,
    leader_addr: Option<&str>,
) -> String {
    let mut message = why.to_string();
    if let Some(term) = led_term {
        message.push_str(&format!("{LED_TERM}{}", term.0));
    }
    if let Some(addr) = leader_addr.filter(|addr| is_plausible_address(addr)) {
        message.push_str(&format!("{LEADER_IS_AT}{addr}"));
    }
    message
}

/// The leader's address a `NotLeader` message names, if it names one that looks like an
/// address (a peer's message is input: anything else is ignored, never trusted).
pub fn leader_named_in(message: &str) -> Option<&str> {
    let (_, addr) = message.rsplit_once(LEADER_IS_AT)?;
    is_plausible_address(addr).then_some(addr)
}

/// The term a `NotLeader` message says its sender led last, if it names one.
pub fn led_term_named_in(message: &str) -> Option<CoordinatorTerm> {
    let (_, rest) = message.rsplit_once(LED_TERM)?;
    let digits = rest.split(';').next()?;
    digits.parse().ok().map(CoordinatorTerm)
}

fn is_plausible_address(addr: &str) -> bool {
    !addr.is_empty()
        && addr.len() <= LEADER_ADDR_BYTES_MAX
        && addr.contains(':')
        && !addr.contains(|c: char| c.is_whitespace() || c.is_control() || c == ',')
}

wire_message! {
    pub struct Empty {}
}

// ---- coordinator: membership -------------------------------------------------------------

wire_message! {
    pub struct RegisterBrokerRequest {
        /// Where clients reach the broker (produce, fetch).
        pub rpc_addr: String,
        /// Where other brokers and the coordinator reach it (replica RPCs, assignments).
        pub peer_addr: String,
        pub admin_addr: String,
        /// Where Kafka clients reach it; empty when its Kafka listener is off.
        pub kafka_addr: String,
    }
}

wire_message! {
    /// A streamlet a broker must own, with what it needs to create it.
    pub struct StreamletAssignment {
        pub stream: StreamId,
        pub stream_name: String,
        pub streamlet: StreamletId,
        pub config: StreamConfig,
        /// The ownership epoch requests must name.
        pub epoch: OwnershipEpoch,
        /// Being rebuilt from backups (a `RecoverStreamlet` brings what to read): not created
        /// empty, not served until rebuilt.
        pub recovering: bool,
        /// Logs whose records before an offset were deleted (Kafka's DeleteRecords): the
        /// owner serves none of them, and retention frees the segments wholly before it.
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogStart>()"))]
        pub log_starts: Vec<LogStart>,
    }
}

wire_message! {
    /// A log's first record still served: every record before `offset` is deleted.
    #[derive(Copy)]
    pub struct LogStart {
        pub log: LogId,
        pub offset: RecordOffset,
    }
}

wire_message! {
    /// The streamlets a broker owns as of a coordinator metadata version: the full set, or
    /// only what was added since an earlier version.
    pub struct AssignStreamletsRequest {
        /// The term of the coordinator that sends it: refused by a broker that has seen a
        /// newer one.
        pub term: CoordinatorTerm,
        pub target: ServerId,
        pub version: u64,
        /// `None`: `assignments` is the full set (any streamlet not in it is dropped).
        /// `Some(base)`: `assignments` is what changed between `base` and `version`, where
        /// nothing was taken away (streamlets of new streams, say); a broker whose
        /// assignment is not exactly at `base` ignores it and catches up through its next
        /// heartbeat. So creating a stream costs its own streamlets, not every broker's
        /// whole list.
        pub added_since: Option<u64>,
        #[cfg_attr(test, proptest(strategy = "small_vec::<StreamletAssignment>()"))]
        pub assignments: Vec<StreamletAssignment>,
        /// The membership as the coordinator sees it when it sends this: a broker chooses
        /// backups for the streamlets it creates from it, so a broker assigned a streamlet
        /// before its first heartbeat answer (just registered) does not take an empty view
        /// for "no backup can be had".
        #[cfg_attr(test, proptest(strategy = "small_vec::<BrokerInfo>()"))]
        pub brokers: Vec<BrokerInfo>,
    }
}

wire_message! {
    pub struct RegisterBrokerResponse {
        pub server_id: ServerId,
        pub assignments: AssignStreamletsRequest,
        /// The broker's lease length: the coordinator's setting (`broker.lease_ms` of its
        /// configuration), which its recoveries wait out, so both sides count the same.
        pub lease_ms: u64,
        /// How long after its last renewal a broker may serve on once the coordinator that
        /// renewed it leads no more (`broker.leaderless_lease_ms`); every leader waits it out
        /// from the start of its term before handing over a broker it has not heard from.
        pub leaderless_lease_ms: u64,
    }
}

wire_message! {
    /// The newest segment of one log a broker owns: what recovery must find on the backups
    /// for that log to be whole.
    pub struct LogHead {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        pub log: LogId,
        pub segment: SegmentId,
    }
}

wire_message! {
    /// The segment of a log that acknowledgements may go into beyond its saved head: the head
    /// itself, or the next segment, whose replicas are opened (empty) before the head fills so
    /// that a roll waits for no save. Records in it are acknowledged only at replica epochs up
    /// to `epoch`, so recovery counts only its copies at `epoch` or above (an older copy may
    /// be a stale prefix), and takes it as empty when such a copy is empty. Ordered by
    /// segment, then epoch: it only grows.
    #[derive(Copy, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
    pub struct OpenSegment {
        pub segment: SegmentId,
        pub epoch: ReplicaEpoch,
    }
}

wire_message! {
    /// The range of segments one log must keep, as its owner makes it durable at the
    /// coordinator: `oldest` before the replicas of older segments are freed; `head` (a
    /// segment whose log digest is on its replicas) and `open` before any record past `head`
    /// is acknowledged. Recovery must find every segment from `oldest` to `head`, and `open`
    /// too unless a current copy of it proves it empty.
    pub struct LogBounds {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        pub log: LogId,
        pub oldest: SegmentId,
        pub head: SegmentId,
        pub open: Option<OpenSegment>,
    }
}

wire_message! {
    /// Owner → coordinator: make these bounds durable (answered once saved).
    pub struct ReportLogBoundsRequest {
        pub server_id: ServerId,
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogBounds>()"))]
        pub bounds: Vec<LogBounds>,
    }
}

wire_message! {
    /// The bounds now durable (each covered by what the coordinator saved); the others were
    /// refused (the reporter does not own that streamlet).
    pub struct ReportLogBoundsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogBounds>()"))]
        pub durable: Vec<LogBounds>,
    }
}

wire_message! {
    /// How far one log a broker owns is committed (the coordinator turns it into consumer
    /// group lag).
    pub struct LogEnd {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        pub log: LogId,
        /// Offset one past the last committed record.
        pub committed_offset: RecordOffset,
    }
}

wire_message! {
    /// One log a broker owns: its replicas' health (sent when it changes).
    pub struct LogReplication {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        pub replicas: LogReplicaSet,
    }
}

wire_message! {
    pub struct BrokerHeartbeatRequest {
        pub server_id: ServerId,
        /// Metadata version of the assignments the broker holds.
        pub known_version: u64,
        /// Log heads that changed since the last heartbeat the coordinator answered.
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogHead>()"))]
        pub heads: Vec<LogHead>,
        /// Segment memory the broker has left (the coordinator places rebuilds by it).
        pub segment_memory_free_bytes: u64,
        /// Committed ends that changed since the last heartbeat the coordinator answered.
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogEnd>()"))]
        pub log_ends: Vec<LogEnd>,
        /// Replica sets of owned replicated logs that changed since the last heartbeat the
        /// coordinator answered.
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogReplication>()"))]
        pub replication: Vec<LogReplication>,
        /// The broker's lease runs on a leaderless extension taken since its last renewal
        /// (its renewing coordinator said it leads no more): until a heartbeat says `false`
        /// again, a leader must count on that extension (`broker::lease`).
        pub lease_extended: bool,
    }
}

wire_message! {
    /// Carries the broker's assignments only when they changed since `known_version`, and
    /// always the membership: which brokers exist, at which generation, and which are alive
    /// (what primaries choose backups from, and what backups fence old generations with).
    pub struct BrokerHeartbeatResponse {
        /// The answering coordinator's term (an answer from an older term than the broker has
        /// seen is ignored whole).
        pub term: CoordinatorTerm,
        pub assignments: Option<AssignStreamletsRequest>,
        #[cfg_attr(test, proptest(strategy = "small_vec::<BrokerInfo>()"))]
        pub brokers: Vec<BrokerInfo>,
        /// Crashed generations whose streamlets are all recovered: backups drop what they
        /// still hold of them (what recovery adopted belongs to the new owners by then).
        #[cfg_attr(test, proptest(strategy = "small_vec::<ServerId>()"))]
        pub retired: Vec<ServerId>,
        /// Recently deleted streams: backups drop their replicas of them.
        #[cfg_attr(test, proptest(strategy = "small_vec::<StreamId>()"))]
        pub deleted_streams: Vec<StreamId>,
    }
}

wire_message! {
    /// A producer session: an id and an epoch.
    pub struct ProducerSession {
        pub producer_id: ProducerId,
        #[cfg_attr(test, proptest(strategy = "super::producer_epoch()"))]
        pub producer_epoch: ProducerEpoch,
    }
}

wire_message! {
    /// Asks for a producer session. With `previous`, a session the coordinator handed out, it
    /// answers the same id at the next epoch (Kafka's InitProducerId with a producer id), or a
    /// fresh id when that id is not one of its own (or not the asker's) or its epochs are
    /// used up. An empty body asks for a fresh id, for the connection's own user.
    pub struct AllocateProducerIdRequest {
        pub previous: Option<ProducerSession>,
        /// The user the id is for, named by a broker asking on behalf of its Kafka client (on
        /// the coordinator's peer listener; `None` for an anonymous one). The client listener
        /// ignores it: an id there is for the connection's authenticated user.
        pub owner: Option<String>,
    }
}

wire_message! {
    /// `AllocateProducerIdRequest` as clients and brokers from before `owner` send it (the
    /// coordinator takes it as naming no owner), so a coordinator can be upgraded first.
    pub struct AllocateProducerIdRequestBeforeOwner {
        pub previous: Option<ProducerSession>,
    }
}

wire_message! {
    /// The cluster's producer id binding key (`tailstream_auth::producer_binding`): answered
    /// on the coordinator's peer listener only.
    pub struct ProducerIdBindingKeyResponse {
        #[cfg_attr(test, proptest(strategy = "super::small_bytes()"))]
        pub key: Bytes,
    }
}

wire_message! {
    pub struct AllocateProducerIdResponse {
        pub producer_id: ProducerId,
        #[cfg_attr(test, proptest(strategy = "super::producer_epoch()"))]
        pub producer_epoch: ProducerEpoch,
    }
}

wire_message! {
    /// A registered broker as the coordinator sees it.
    pub struct BrokerInfo {
        pub server_id: ServerId,
        /// Where clients reach the broker.
        pub rpc_addr: String,
        /// Where other brokers and the coordinator reach it.
        pub peer_addr: String,
        pub admin_addr: String,
        /// Where Kafka clients reach it; empty when its Kafka listener is off.
        pub kafka_addr: String,
        /// A heartbeat arrived within the coordinator's liveness timeout.
        pub alive: bool,
        /// Declared crashed: this generation is fenced everywhere and never comes back.
        pub crashed: bool,
    }
}

wire_message! {
    pub struct ListBrokersResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<BrokerInfo>()"))]
        pub brokers: Vec<BrokerInfo>,
    }
}

wire_message! {
    /// Where one coordinator process is reached.
    pub struct CoordinatorInfo {
        pub rpc_addr: String,
        pub peer_addr: String,
        pub admin_addr: String,
    }
}

wire_message! {
    /// Who leads the coordinators, in which term, and who stands by.
    pub struct DescribeLeadershipResponse {
        pub term: CoordinatorTerm,
        /// Where the metadata is kept: `file` (one coordinator, no standbys) or `etcd`.
        pub store: String,
        pub leader: CoordinatorInfo,
        /// Coordinators waiting to lead, next in line first (empty when the list could not be
        /// read: `standbys_error` says why).
        #[cfg_attr(test, proptest(strategy = "small_vec::<CoordinatorInfo>()"))]
        pub standbys: Vec<CoordinatorInfo>,
        pub standbys_error: String,
    }
}

// ---- coordinator: streams ----------------------------------------------------------------

wire_message! {
    pub struct CreateStreamRequest {
        pub name: String,
        pub streamlets: u32,
        pub config: StreamConfig,
    }
}

wire_message! {
    /// Grows a stream to `streamlets` streamlets (Kafka's CreatePartitions): the new ones are
    /// placed like a creation's, the existing ones stay where they are. Never shrinks; asking
    /// for the count the stream already has changes nothing (so a retry is harmless). Answered
    /// with the stream's metadata.
    pub struct AddStreamletsRequest {
        pub name: String,
        pub streamlets: u32,
    }
}

wire_message! {
    /// Changes a stream's retention limits (Kafka's IncrementalAlterConfigs and AlterConfigs,
    /// `stream alter`), the only settings that change after creation: `None` leaves a limit
    /// as it is, 0 is none. Its owners free by the new limits from the assignment the change
    /// sends them. Setting what the stream has changes nothing (so a retry is harmless).
    /// Answered with the stream's metadata.
    pub struct AlterRetentionRequest {
        pub name: String,
        pub retention_ms: Option<u64>,
        pub retention_bytes: Option<u64>,
    }
}

wire_message! {
    /// Deletes the records of some logs of one streamlet before an offset each (Kafka's
    /// DeleteRecords): a log's start only moves forward, so a retry, or an offset at or
    /// before the start, changes nothing. The owner checks each offset is within its log (the
    /// coordinator does not know a log's end) before asking, under `epoch`: a streamlet that
    /// moved since (or a stream recreated under the name, `stream`) is refused, so an offset
    /// checked against one log never lands on another. Durable before it is answered; the
    /// owner (and any later owner) is told through its assignment. Answered empty.
    pub struct DeleteRecordsRequest {
        pub name: String,
        pub stream: StreamId,
        pub streamlet: StreamletId,
        /// The ownership epoch the offsets were checked under.
        pub epoch: OwnershipEpoch,
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogStart>()"))]
        pub starts: Vec<LogStart>,
    }
}

wire_message! {
    pub struct DescribeStreamRequest {
        pub name: String,
    }
}

wire_message! {
    pub struct DeleteStreamRequest {
        pub name: String,
    }
}

wire_message! {
    /// One crash and its recovery, as `cluster status` shows it (times in milliseconds; a
    /// phase not reached yet has none).
    pub struct RecoverySummary {
        pub id: u64,
        pub crashed: ServerId,
        /// `Locating`, `Rebuilding` or `Done`.
        pub phase: String,
        pub streamlets: u32,
        /// When the crash was declared (Unix ms).
        pub declared_at_ms: u64,
        pub detect_ms: u64,
        pub locate_ms: Option<u64>,
        pub replay_ms: Option<u64>,
        pub rereplicate_ms: Option<u64>,
        pub lease_wait_ms: Option<u64>,
        pub total_ms: Option<u64>,
        pub bytes: u64,
        pub segments_adopted: u64,
        pub segments_copied: u64,
        /// Streamlets that could not be rebuilt, and why.
        #[cfg_attr(test, proptest(strategy = "small_vec::<String>()"))]
        pub lost: Vec<String>,
    }
}

wire_message! {
    /// The most recent recoveries, oldest first.
    pub struct ListRecoveriesResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<RecoverySummary>()"))]
        pub recoveries: Vec<RecoverySummary>,
    }
}

wire_message! {
    pub struct ListStreamsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<StreamMetadata>()"))]
        pub streams: Vec<StreamMetadata>,
    }
}

#[cfg(test)]
mod not_leader_tests {
    use super::*;

    #[test]
    fn a_not_leader_message_names_the_leader_only_when_it_is_an_address() {
        let named = not_leader_message("standing by", None, Some("127.0.0.1:7000"));
        assert_eq!(leader_named_in(&named), Some("127.0.0.1:7000"));
        assert_eq!(led_term_named_in(&named), None);
        assert_eq!(
            leader_named_in(&not_leader_message("lapsed", None, None)),
            None
        );
        assert_eq!(leader_named_in("this coordinator does not lead now"), None);
        for bad in ["", "no-port", "a:1 b:2", "a:1,b:2", "a:1\n"] {
            assert_eq!(not_leader_message("x", None, Some(bad)), "x", "{bad:?}");
            assert_eq!(leader_named_in(&format!("x{LEADER_IS_AT}{bad}")), None);
        }
        let long = format!("h{}:1", "o".repeat(300));
        assert_eq!(leader_named_in(&format!("x{LEADER_IS_AT}{long}")), None);
    }

    #[test]
    fn a_not_leader_message_names_the_term_its_sender_led() {
        let both = not_leader_message("stood down", Some(CoordinatorTerm(42)), Some("h:1"));
        assert_eq!(led_term_named_in(&both), Some(CoordinatorTerm(42)));
        assert_eq!(leader_named_in(&both), Some("h:1"));
        let term_only = not_leader_message("lapsed", Some(CoordinatorTerm(7)), None);
        assert_eq!(led_term_named_in(&term_only), Some(CoordinatorTerm(7)));
        assert_eq!(leader_named_in(&term_only), None);
        assert_eq!(led_term_named_in("x; it led term 12x"), None);
        assert_eq!(led_term_named_in("x; it led term "), None);
        assert_eq!(led_term_named_in("does not lead"), None);
    }
}
