//! Cluster-level messages: stream settings and metadata, membership, streams, producer ids,
//! assignments.

#[cfg(test)]
use super::small_vec;
use crate::ids::{ProducerId, ServerId, StreamId, StreamletId};
use crate::wire_message;

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
        /// Where clients reach the broker (produce, fetch).
        pub rpc_addr: String,
        /// Where other brokers and the coordinator reach it (replica RPCs, assignments).
        pub peer_addr: String,
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
        /// Where clients reach the broker.
        pub rpc_addr: String,
        /// Where other brokers and the coordinator reach it.
        pub peer_addr: String,
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
