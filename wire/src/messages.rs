//! Request and response bodies of every RPC, by opcode.
//!
//! Control-plane messages are declared with `wire_message!`. The two data-plane messages whose
//! last field is a large payload (`ProduceRequest`'s record batch, `FetchResponse`'s entries)
//! are written by hand so the payload travels as its own zero-copy part.

use crate::codec::{Decode, DecodeError, Encode, WireReader};
use crate::field::WireField;
use crate::ids::{
    GroupId, LogId, ProducerId, RecordOffset, SegmentId, SegmentPosition, ServerId, StreamId,
    StreamletId,
};
use crate::wire_message;
use bytes::{Bytes, BytesMut};
#[cfg(test)]
use proptest::strategy::Strategy;

/// Byte fields in generated messages.
#[cfg(test)]
fn small_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..64).prop_map(Bytes::from)
}

/// Nested lists in generated messages stay short, so a three-level message is not a million
/// elements (the decoders' bounds are exercised by the fuzzing tests instead).
#[cfg(test)]
fn small_vec<T: proptest::arbitrary::Arbitrary>() -> impl Strategy<Value = Vec<T>> {
    proptest::collection::vec(proptest::arbitrary::any::<T>(), 0..6)
}

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
    }
}

wire_message! {
    /// Where one streamlet lives.
    pub struct StreamletPlacement {
        pub streamlet: StreamletId,
        pub owner: ServerId,
        pub owner_addr: String,
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

wire_message! {
    pub struct Empty {}
}

// ---- coordinator: membership -------------------------------------------------------------

wire_message! {
    pub struct RegisterBrokerRequest {
        pub rpc_addr: String,
        pub admin_addr: String,
    }
}

wire_message! {
    /// A streamlet a broker must own, with what it needs to create it.
    pub struct StreamletAssignment {
        pub stream: StreamId,
        pub stream_name: String,
        pub streamlet: StreamletId,
        pub config: StreamConfig,
    }
}

wire_message! {
    /// The full set of streamlets a broker owns, as of a coordinator metadata version.
    pub struct AssignStreamletsRequest {
        pub target: ServerId,
        pub version: u64,
        #[cfg_attr(test, proptest(strategy = "small_vec::<StreamletAssignment>()"))]
        pub assignments: Vec<StreamletAssignment>,
    }
}

wire_message! {
    pub struct RegisterBrokerResponse {
        pub server_id: ServerId,
        pub assignments: AssignStreamletsRequest,
    }
}

wire_message! {
    pub struct BrokerHeartbeatRequest {
        pub server_id: ServerId,
        /// Metadata version of the assignments the broker holds.
        pub known_version: u64,
    }
}

wire_message! {
    /// Carries the broker's assignments only when they changed since `known_version`, and
    /// always the membership: which brokers exist, at which generation, and which are alive
    /// (what primaries choose backups from, and what backups fence old generations with).
    pub struct BrokerHeartbeatResponse {
        pub assignments: Option<AssignStreamletsRequest>,
        #[cfg_attr(test, proptest(strategy = "small_vec::<BrokerInfo>()"))]
        pub brokers: Vec<BrokerInfo>,
    }
}

wire_message! {
    pub struct AllocateProducerIdResponse {
        pub producer_id: ProducerId,
    }
}

wire_message! {
    /// A registered broker as the coordinator sees it.
    pub struct BrokerInfo {
        pub server_id: ServerId,
        pub rpc_addr: String,
        pub admin_addr: String,
        /// A heartbeat arrived within the coordinator's liveness timeout.
        pub alive: bool,
    }
}

wire_message! {
    pub struct ListBrokersResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<BrokerInfo>()"))]
        pub brokers: Vec<BrokerInfo>,
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
    pub struct DescribeStreamRequest {
        pub name: String,
    }
}

wire_message! {
    pub struct ListStreamsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<StreamMetadata>()"))]
        pub streams: Vec<StreamMetadata>,
    }
}

// ---- broker: data ------------------------------------------------------------------------

/// Append one record batch to a streamlet. The broker picks the log from the batch's producer
/// id; the batch is the rest of the body, sent and stored as is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceRequest {
    pub stream: StreamId,
    pub streamlet: StreamletId,
    pub batch: Bytes,
}

impl ProduceRequest {
    pub const PREFIX_BYTES: usize = 12;

    /// The fixed-size prefix; the batch follows it on the wire as a separate part.
    pub fn encode_prefix(&self) -> [u8; Self::PREFIX_BYTES] {
        let mut out = [0u8; Self::PREFIX_BYTES];
        out[0..8].copy_from_slice(&self.stream.0.to_le_bytes());
        out[8..12].copy_from_slice(&self.streamlet.0.to_le_bytes());
        out
    }
}

impl Encode for ProduceRequest {
    fn encode(&self, out: &mut BytesMut) {
        out.extend_from_slice(&self.encode_prefix());
        out.extend_from_slice(&self.batch);
    }
}

impl Decode for ProduceRequest {
    fn decode(r: &mut WireReader) -> Result<Self, DecodeError> {
        Ok(Self {
            stream: StreamId::get(r, "ProduceRequest.stream")?,
            streamlet: StreamletId::get(r, "ProduceRequest.streamlet")?,
            batch: r.rest(),
        })
    }
}

wire_message! {
    /// Where the batch was appended (or, for a duplicate, where it had been appended).
    pub struct ProduceResponse {
        pub log: LogId,
        pub group: GroupId,
        pub segment: SegmentId,
        pub position: SegmentPosition,
        pub base_offset: RecordOffset,
        pub duplicate: bool,
    }
}

wire_message! {
    /// Read committed entries of one segment, starting at an entry boundary. Position 0 means
    /// the first entry after the segment's log digest.
    pub struct FetchRequest {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        pub log: LogId,
        pub group: GroupId,
        pub segment: SegmentId,
        pub position: SegmentPosition,
        pub max_bytes: u32,
        /// Long poll: wait up to this long for committed data when there is none yet.
        pub max_wait_ms: u32,
    }
}

/// Committed entries (whole entries: headers, payloads and trailers) of one segment, and
/// where to read next.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FetchResponse {
    pub segment: SegmentId,
    /// Position of the first returned entry within `segment`.
    pub position: SegmentPosition,
    /// Where the next fetch should start (may be the start of the group's next segment).
    pub next_segment: SegmentId,
    pub next_position: SegmentPosition,
    /// The group is sealed and every committed byte of it has been returned.
    pub end_of_group: bool,
    /// With `end_of_group`: the log's next group, when it exists yet.
    pub next_group: Option<GroupId>,
    #[cfg_attr(
        test,
        proptest(strategy = "proptest::collection::vec(0u8.., 0..64).prop_map(Bytes::from)")
    )]
    pub entries: Bytes,
}

impl FetchResponse {
    /// Everything but the entries, which follow as a separate (zero-copy) part.
    pub fn encode_prefix(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(48);
        self.segment.put(&mut out);
        self.position.put(&mut out);
        self.next_segment.put(&mut out);
        self.next_position.put(&mut out);
        self.end_of_group.put(&mut out);
        self.next_group.put(&mut out);
        out
    }
}

impl Encode for FetchResponse {
    fn encode(&self, out: &mut BytesMut) {
        out.extend_from_slice(&self.encode_prefix());
        out.extend_from_slice(&self.entries);
    }
}

impl Decode for FetchResponse {
    fn decode(r: &mut WireReader) -> Result<Self, DecodeError> {
        Ok(Self {
            segment: SegmentId::get(r, "FetchResponse.segment")?,
            position: SegmentPosition::get(r, "FetchResponse.position")?,
            next_segment: SegmentId::get(r, "FetchResponse.next_segment")?,
            next_position: SegmentPosition::get(r, "FetchResponse.next_position")?,
            end_of_group: bool::get(r, "FetchResponse.end_of_group")?,
            next_group: Option::<GroupId>::get(r, "FetchResponse.next_group")?,
            entries: r.rest(),
        })
    }
}

wire_message! {
    pub struct ListGroupsRequest {
        pub stream: StreamId,
        pub streamlet: StreamletId,
    }
}

wire_message! {
    pub struct SegmentSummary {
        pub segment: SegmentId,
        /// Bytes of the segment consumers may read.
        pub committed_bytes: u32,
        /// No more appends will go to this segment.
        pub sealed: bool,
    }
}

wire_message! {
    pub struct GroupSummary {
        pub group: GroupId,
        /// No more segments will be added to this group.
        pub sealed: bool,
        /// Offset of the group's first record.
        pub first_offset: RecordOffset,
        #[cfg_attr(test, proptest(strategy = "small_vec::<SegmentSummary>()"))]
        pub segments: Vec<SegmentSummary>,
    }
}

wire_message! {
    /// The live groups of one log, oldest first.
    pub struct LogGroups {
        pub log: LogId,
        /// Offset the next appended record will get.
        pub next_offset: RecordOffset,
        /// Offset one past the last committed record.
        pub committed_offset: RecordOffset,
        #[cfg_attr(test, proptest(strategy = "small_vec::<GroupSummary>()"))]
        pub groups: Vec<GroupSummary>,
    }
}

wire_message! {
    pub struct ListGroupsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogGroups>()"))]
        pub logs: Vec<LogGroups>,
    }
}

// ---- backup: replicas ------------------------------------------------------------------

wire_message! {
    /// One segment replica's identity: the segment, fully qualified.
    #[derive(Copy, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
    pub struct ReplicaId {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        pub log: LogId,
        pub group: GroupId,
        pub segment: SegmentId,
    }
}

wire_message! {
    pub struct ReplicaOpenRequest {
        pub primary: ServerId,
        pub replica: ReplicaId,
        /// Bumped whenever the segment's replica set changes; the highest complete epoch wins.
        pub epoch: u32,
        pub capacity_bytes: u32,
        /// A replacement being filled with the segment's current content: not complete (and
        /// never to be used for recovery) until a `ReplicaSetEpoch` says so.
        pub filling: bool,
    }
}

wire_message! {
    /// What a primary needs to write into an opened replica buffer.
    pub struct BufferDescriptor {
        /// Names the buffer in one-sided writes; unique per open on this backup.
        pub key: u64,
        pub capacity_bytes: u32,
        /// The backup's one-sided endpoint (tcp backend).
        pub nic_addr: String,
        /// Backend-specific registration (rdma: remote address, length and rkey); empty for tcp.
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub rdma_token: Bytes,
    }
}

wire_message! {
    pub struct ReplicaCloseRequest {
        pub primary: ServerId,
        pub replica: ReplicaId,
        pub key: u64,
        /// The segment's final length: the replica's valid prefix must be exactly this long.
        pub length: u32,
    }
}

wire_message! {
    pub struct ReplicaFreeRequest {
        pub primary: ServerId,
        pub replica: ReplicaId,
    }
}

wire_message! {
    pub struct ReplicaSetEpochRequest {
        pub primary: ServerId,
        pub replica: ReplicaId,
        pub epoch: u32,
    }
}

wire_message! {
    /// All replicas (None), or those of one primary server (any generation of its index).
    pub struct ListReplicasRequest {
        pub primary: Option<ServerId>,
    }
}

/// Where a replica stands on its backup. Discriminants are wire values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[repr(u8)]
pub enum ReplicaState {
    /// Being written; its valid length comes from Algorithm 1.
    Open = 1,
    /// Flushed to its segment file with a verified length.
    Closed = 2,
    /// Fails its checksums: never served.
    Corrupt = 3,
}

impl WireField for ReplicaState {
    const MIN_BYTES: usize = 1;
    fn put(&self, out: &mut BytesMut) {
        (*self as u8).put(out);
    }
    fn get(reader: &mut WireReader, what: &'static str) -> Result<Self, DecodeError> {
        match reader.u8(what)? {
            1 => Ok(ReplicaState::Open),
            2 => Ok(ReplicaState::Closed),
            3 => Ok(ReplicaState::Corrupt),
            other => Err(DecodeError::InvalidValue {
                what,
                value: u64::from(other),
            }),
        }
    }
}

wire_message! {
    pub struct ReplicaInfo {
        pub primary: ServerId,
        pub replica: ReplicaId,
        pub epoch: u32,
        pub state: ReplicaState,
        pub filling: bool,
        /// Closed: the verified length. Open: the valid prefix Algorithm 1 finds now.
        pub valid_bytes: u32,
        /// The log digest payload that opens the replica (empty if none is valid yet).
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub digest: Bytes,
    }
}

wire_message! {
    pub struct ListReplicasResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<ReplicaInfo>()"))]
        pub replicas: Vec<ReplicaInfo>,
    }
}

wire_message! {
    pub struct ReadReplicaRequest {
        pub primary: ServerId,
        pub replica: ReplicaId,
        pub offset: u32,
        pub max_bytes: u32,
    }
}

wire_message! {
    /// Bytes of the valid prefix from the requested offset, and the prefix's length.
    pub struct ReadReplicaResponse {
        pub valid_bytes: u32,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub bytes: Bytes,
    }
}

wire_message! {
    /// The rdma backend's queue-pair handshake: each side's endpoint (opaque to us: the
    /// verbs library's serialization of queue pair number, LID and GID).
    pub struct RdmaConnectRequest {
        pub primary: ServerId,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub endpoint: Bytes,
    }
}

wire_message! {
    pub struct RdmaConnectResponse {
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub endpoint: Bytes,
    }
}

/// RPC replication mode: entries (whole, with trailers) to place at `offset` of a replica,
/// after the backup verified them. The entries are the rest of the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaWriteRequest {
    pub primary: ServerId,
    pub replica: ReplicaId,
    pub key: u64,
    pub offset: u32,
    pub entries: Bytes,
}

impl ReplicaWriteRequest {
    /// Everything but the entries, which follow as separate (zero-copy) parts.
    pub fn encode_prefix(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(64);
        self.primary.put(&mut out);
        self.replica.put(&mut out);
        self.key.put(&mut out);
        self.offset.put(&mut out);
        out
    }
}

impl Encode for ReplicaWriteRequest {
    fn encode(&self, out: &mut BytesMut) {
        out.extend_from_slice(&self.encode_prefix());
        out.extend_from_slice(&self.entries);
    }
}

impl Decode for ReplicaWriteRequest {
    fn decode(r: &mut WireReader) -> Result<Self, DecodeError> {
        Ok(Self {
            primary: ServerId::get(r, "ReplicaWriteRequest.primary")?,
            replica: ReplicaId::get(r, "ReplicaWriteRequest.replica")?,
            key: u64::get(r, "ReplicaWriteRequest.key")?,
            offset: u32::get(r, "ReplicaWriteRequest.offset")?,
            entries: r.rest(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trips<T: Encode + Decode + PartialEq + std::fmt::Debug>(value: T) {
        let bytes = value.to_bytes();
        assert_eq!(T::decode_exact(bytes.clone()).as_ref(), Ok(&value));
        // Strict prefixes are refused (or, for bodies ending in a payload, decode to a shorter
        // payload): never a panic. Large bodies are cut at ~128 points to keep this linear.
        let step = (bytes.len() / 128).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            let _ = T::decode_exact(bytes.slice(..cut));
        }
    }

    macro_rules! round_trip_tests {
        ($($test:ident: $ty:ty),* $(,)?) => {
            proptest! {
                $(
                    #[test]
                    fn $test(value in any::<$ty>()) {
                        round_trips(value);
                    }
                )*
            }
        };
    }

    round_trip_tests! {
        stream_metadata: StreamMetadata,
        error_body: ErrorBody,
        register_broker_request: RegisterBrokerRequest,
        register_broker_response: RegisterBrokerResponse,
        assign_streamlets: AssignStreamletsRequest,
        heartbeat_request: BrokerHeartbeatRequest,
        heartbeat_response: BrokerHeartbeatResponse,
        allocate_producer_id: AllocateProducerIdResponse,
        create_stream: CreateStreamRequest,
        describe_stream: DescribeStreamRequest,
        list_streams: ListStreamsResponse,
        list_brokers: ListBrokersResponse,
        produce_response: ProduceResponse,
        fetch_request: FetchRequest,
        fetch_response: FetchResponse,
        list_groups_request: ListGroupsRequest,
        list_groups_response: ListGroupsResponse,
        replica_open: ReplicaOpenRequest,
        buffer_descriptor: BufferDescriptor,
        replica_close: ReplicaCloseRequest,
        replica_free: ReplicaFreeRequest,
        replica_set_epoch: ReplicaSetEpochRequest,
        list_replicas_request: ListReplicasRequest,
        list_replicas_response: ListReplicasResponse,
        read_replica_request: ReadReplicaRequest,
        read_replica_response: ReadReplicaResponse,
        rdma_connect_request: RdmaConnectRequest,
        rdma_connect_response: RdmaConnectResponse,
    }

    proptest! {
        #[test]
        fn replica_write_request(primary in any::<ServerId>(), replica in any::<ReplicaId>(),
                                 key in any::<u64>(), offset in any::<u32>(),
                                 entries in proptest::collection::vec(any::<u8>(), 0..256)) {
            round_trips(ReplicaWriteRequest { primary, replica, key, offset, entries: Bytes::from(entries) });
        }

        #[test]
        fn produce_request(stream in any::<u64>(), streamlet in any::<u32>(),
                           batch in proptest::collection::vec(any::<u8>(), 0..256)) {
            round_trips(ProduceRequest {
                stream: StreamId(stream),
                streamlet: StreamletId(streamlet),
                batch: Bytes::from(batch),
            });
        }
    }
}
