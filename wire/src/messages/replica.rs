//! The backup's replica RPCs (open, close, free, set-epoch, list, read, RPC-mode write) and
//! the rdma backend's queue-pair handshake.

#[cfg(test)]
use super::{small_bytes, small_vec};
use crate::codec::{Decode, DecodeError, Encode, WireReader};
use crate::field::WireField;
use crate::ids::{
    CoordinatorTerm, GroupId, LogId, ReplicaEpoch, SegmentId, ServerId, StreamId, StreamletId,
};
use crate::wire_message;
use bytes::{Bytes, BytesMut};

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
        pub epoch: ReplicaEpoch,
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
        /// What a connection to `nic_addr` must present in its hello to be believed (the
        /// backup grants it per primary; it reaches the primary over the peer RPC only).
        pub nic_ticket: u64,
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
        pub epoch: ReplicaEpoch,
    }
}

wire_message! {
    /// All replicas (None), or those of one primary server (any generation of its index).
    /// The backup first fences every generation in `fence` (declared crashed) and only then
    /// lists: nothing a crashed primary writes lands after the listing.
    pub struct ListReplicasRequest {
        /// With a non-empty `fence`, the ordering coordinator's term: a backup that has seen a
        /// newer one refuses the whole request. A listing that fences nothing is a read, and
        /// names no term (0).
        pub term: CoordinatorTerm,
        pub primary: Option<ServerId>,
        #[cfg_attr(test, proptest(strategy = "small_vec::<ServerId>()"))]
        pub fence: Vec<ServerId>,
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
        pub epoch: ReplicaEpoch,
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
    /// Bytes of one replica (at exactly this epoch) of `primary`'s segment. Anyone may read:
    /// recovery reads the replicas of a crashed, fenced primary.
    pub struct ReadReplicaRequest {
        pub primary: ServerId,
        pub replica: ReplicaId,
        pub epoch: ReplicaEpoch,
        pub offset: u32,
        pub max_bytes: u32,
    }
}

wire_message! {
    /// A closed replica of `from`'s segment (a crashed primary) becomes `new_primary`'s at
    /// `new_epoch`: recovery adopts the copies that survived instead of writing new ones.
    pub struct ReplicaAdoptRequest {
        pub from: ServerId,
        pub new_primary: ServerId,
        pub replica: ReplicaId,
        pub epoch: ReplicaEpoch,
        pub new_epoch: ReplicaEpoch,
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
