//! The data path: produce, fetch, group listings.

#[cfg(test)]
use super::{small_bytes, small_vec};
use crate::codec::{Decode, DecodeError, Encode, WireReader};
use crate::field::WireField;
use crate::ids::{
    GroupId, LogId, OwnershipEpoch, RecordOffset, SegmentId, SegmentPosition, ServerId, StreamId,
    StreamletId,
};
use crate::wire_message;
use bytes::{Bytes, BytesMut};

// ---- broker: data ------------------------------------------------------------------------

/// Append one record batch to a streamlet. The broker picks the log from the batch's producer
/// id; the batch is the rest of the body, sent and stored as is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceRequest {
    pub stream: StreamId,
    pub streamlet: StreamletId,
    /// The ownership epoch the client routed by: a broker holding another epoch refuses.
    pub epoch: OwnershipEpoch,
    pub batch: Bytes,
}

impl ProduceRequest {
    pub const PREFIX_BYTES: usize = 16;

    /// The fixed-size prefix; the batch follows it on the wire as a separate part.
    pub fn encode_prefix(&self) -> [u8; Self::PREFIX_BYTES] {
        let mut out = [0u8; Self::PREFIX_BYTES];
        out[0..8].copy_from_slice(&self.stream.0.to_le_bytes());
        out[8..12].copy_from_slice(&self.streamlet.0.to_le_bytes());
        out[12..16].copy_from_slice(&self.epoch.0.to_le_bytes());
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
            epoch: OwnershipEpoch::get(r, "ProduceRequest.epoch")?,
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
        /// The ownership epoch the client routed by.
        pub epoch: OwnershipEpoch,
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
    #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
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
    /// Where record `offset` of a log is: the entry that holds it, or the log's committed end
    /// when `offset` is that end (what a consumer resuming from a committed offset fetches
    /// from). Below the log's first live record, or past its end: `OffsetOutOfRange`.
    pub struct LocateOffsetRequest {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        /// The ownership epoch the client routed by.
        pub epoch: OwnershipEpoch,
        pub log: LogId,
        pub offset: RecordOffset,
    }
}

wire_message! {
    pub struct LocateOffsetResponse {
        pub group: GroupId,
        pub segment: SegmentId,
        pub position: SegmentPosition,
    }
}

wire_message! {
    pub struct ListGroupsRequest {
        pub stream: StreamId,
        pub streamlet: StreamletId,
        /// The ownership epoch the client routed by.
        pub epoch: OwnershipEpoch,
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
    /// One segment being written or closed and the backups holding (or receiving) its
    /// replicas.
    pub struct SegmentReplicas {
        pub segment: SegmentId,
        #[cfg_attr(test, proptest(strategy = "small_vec::<ServerId>()"))]
        pub backups: Vec<ServerId>,
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
        /// Where the log's segments in flight have their replicas (empty when unreplicated).
        #[cfg_attr(test, proptest(strategy = "small_vec::<SegmentReplicas>()"))]
        pub replicas: Vec<SegmentReplicas>,
    }
}

wire_message! {
    pub struct ListGroupsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<LogGroups>()"))]
        pub logs: Vec<LogGroups>,
    }
}
