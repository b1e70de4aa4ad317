//! The structure-aware halves of the fuzz targets: the input is a recipe for well-formed,
//! correctly checksummed bytes (possibly damaged afterwards on purpose), and each function
//! asserts the property the system relies on.

use super::Source;
use crate::batch::{
    BATCH_HEADER_BYTES, CRC_START, read_batch_header, stamp_base_offset, validate_batch,
};
use crate::codec::{Decode, Encode};
use crate::entry::EntryType;
use crate::frame::{Frame, FrameDecoder, FrameHeader};
use crate::ids::{
    BatchSequence, ProducerEpoch, ProducerId, RecordOffset, RequestId, StreamId, StreamletId,
};
use crate::messages::*;
use crate::nic::{Completion, Hello, WriteHeader};
use crate::records::{RecordBatchBuilder, RecordIter};
use crate::scan::{EntryIter, scan_segment, verify_closed};
use crate::segment::SegmentImage;
use crate::{Opcode, ServerId};
use bytes::{Bytes, BytesMut};

/// Decodes `body` the way a server (or, for a response, a client) would for `opcode`.
fn decode_body(opcode: Option<Opcode>, is_response: bool, body: Bytes) {
    macro_rules! decode {
        ($ty:ty) => {{
            let _ = <$ty>::decode_exact(body);
        }};
    }
    let Some(opcode) = opcode else {
        return;
    };
    match (opcode, is_response) {
        (Opcode::Ping | Opcode::GoAway, _) | (Opcode::ProducerIdBindingKey, false) => {}
        (Opcode::RegisterBroker, false) => decode!(RegisterBrokerRequest),
        (Opcode::RegisterBroker, true) => decode!(RegisterBrokerResponse),
        (Opcode::BrokerHeartbeat, false) => decode!(BrokerHeartbeatRequest),
        (Opcode::BrokerHeartbeat, true) => decode!(BrokerHeartbeatResponse),
        (Opcode::AllocateProducerId, false) => decode!(AllocateProducerIdRequest),
        (Opcode::AllocateProducerId, true) => decode!(AllocateProducerIdResponse),
        (Opcode::ProducerIdBindingKey, true) => decode!(ProducerIdBindingKeyResponse),
        (Opcode::CreateStream, false) => decode!(CreateStreamRequest),
        (Opcode::AddStreamlets, false) => decode!(AddStreamletsRequest),
        (Opcode::AlterRetention, false) => decode!(AlterRetentionRequest),
        (Opcode::DeleteRecords, false) => decode!(DeleteRecordsRequest),
        (Opcode::DeleteRecords, true) => decode!(Empty),
        (Opcode::DescribeStream, false) => decode!(DescribeStreamRequest),
        (Opcode::DeleteStream, false) => decode!(DeleteStreamRequest),
        (Opcode::DeleteStream, true) => decode!(Empty),
        (Opcode::ListRecoveries, false) => decode!(Empty),
        (Opcode::ListRecoveries, true) => decode!(ListRecoveriesResponse),
        (Opcode::DescribeLeadership, false) => decode!(Empty),
        (Opcode::DescribeLeadership, true) => decode!(DescribeLeadershipResponse),
        (
            Opcode::CreateStream
            | Opcode::AddStreamlets
            | Opcode::AlterRetention
            | Opcode::DescribeStream,
            true,
        ) => {
            decode!(StreamMetadata)
        }
        (Opcode::ListStreams, _) => decode!(ListStreamsResponse),
        (Opcode::ListBrokers, _) => decode!(ListBrokersResponse),
        (Opcode::CreateUser, false) => decode!(CreateUserRequest),
        (Opcode::DeleteUser, false) => decode!(DeleteUserRequest),
        (Opcode::CreateUser | Opcode::DeleteUser, true) => decode!(Empty),
        (Opcode::ListUsers, false) => decode!(SecurityListRequest),
        (Opcode::ListUsers, true) => decode!(ListUsersResponse),
        (Opcode::LookupCredentials, false) => decode!(LookupCredentialsRequest),
        (Opcode::LookupCredentials, true) => decode!(LookupCredentialsResponse),
        (Opcode::Authenticate, false) => decode!(AuthenticateRequest),
        (Opcode::Authenticate, true) => decode!(AuthenticateResponse),
        (Opcode::AddAcl | Opcode::RemoveAcl, false) => decode!(AclChangeRequest),
        (Opcode::AddAcl | Opcode::RemoveAcl, true) => decode!(Empty),
        (Opcode::ListAcls, false) => decode!(SecurityListRequest),
        (Opcode::ListAcls, true) => decode!(ListAclsResponse),
        (Opcode::Produce, false) => {
            if let Ok(request) = ProduceRequest::decode_exact(body) {
                let _ = validate_batch(&request.batch);
            }
        }
        (Opcode::Produce, true) => decode!(ProduceResponse),
        (Opcode::Fetch, false) => decode!(FetchRequest),
        (Opcode::Fetch, true) => decode!(FetchResponse),
        (Opcode::ListGroups, false) => decode!(ListGroupsRequest),
        (Opcode::ListGroups, true) => decode!(ListGroupsResponse),
        (Opcode::LocateOffset, false) => decode!(LocateOffsetRequest),
        (Opcode::LocateOffset, true) => decode!(LocateOffsetResponse),
        (Opcode::AssignStreamlets, _) => decode!(AssignStreamletsRequest),
        (Opcode::ReplicaOpen, false) => decode!(ReplicaOpenRequest),
        (Opcode::ReplicaOpen, true) => decode!(BufferDescriptor),
        (Opcode::ReplicaClose, _) => decode!(ReplicaCloseRequest),
        (Opcode::ReplicaFree, _) => decode!(ReplicaFreeRequest),
        (Opcode::ListReplicas, false) => decode!(ListReplicasRequest),
        (Opcode::ListReplicas, true) => decode!(ListReplicasResponse),
        (Opcode::ReadReplica, false) => decode!(ReadReplicaRequest),
        (Opcode::ReadReplica, true) => decode!(ReadReplicaResponse),
        (Opcode::ReplicaWrite, _) => decode!(ReplicaWriteRequest),
        (Opcode::ReplicaSetEpoch, _) => decode!(ReplicaSetEpochRequest),
        (Opcode::RdmaConnect, false) => decode!(RdmaConnectRequest),
        (Opcode::RdmaConnect, true) => decode!(RdmaConnectResponse),
        (Opcode::ReportSuspect, _) => decode!(ReportSuspectRequest),
        (Opcode::ReportLogBounds, false) => decode!(ReportLogBoundsRequest),
        (Opcode::ReportLogBounds, true) => decode!(ReportLogBoundsResponse),
        (Opcode::RecoverStreamlet, _) => decode!(RecoverStreamletRequest),
        (Opcode::ReplicaAdopt, _) => decode!(ReplicaAdoptRequest),
        (Opcode::GroupJoin, false) => decode!(GroupJoinRequest),
        (Opcode::GroupJoin, true) => decode!(GroupJoinResponse),
        (Opcode::GroupSync, false) => decode!(GroupSyncRequest),
        (Opcode::GroupSync, true) => decode!(GroupSyncResponse),
        (Opcode::GroupHeartbeat, _) => decode!(GroupHeartbeatRequest),
        (Opcode::GroupLeave, _) => decode!(GroupLeaveRequest),
        (Opcode::OffsetCommit, _) => decode!(OffsetCommitRequest),
        (Opcode::OffsetFetch, false) => decode!(OffsetFetchRequest),
        (Opcode::OffsetFetch, true) => decode!(OffsetFetchResponse),
        (Opcode::DescribeConsumerGroups, false) => decode!(Empty),
        (Opcode::DescribeConsumerGroups, true) => decode!(DescribeConsumerGroupsResponse),
        (Opcode::DescribeGroups, false) => decode!(DescribeGroupsRequest),
        (Opcode::DescribeGroups, true) => decode!(DescribeGroupsResponse),
        (Opcode::DeleteGroups, false) => decode!(DeleteGroupsRequest),
        (Opcode::DeleteGroups, true) => decode!(DeleteGroupsResponse),
        (Opcode::OffsetDelete, false) => decode!(OffsetDeleteRequest),
        (Opcode::OffsetDelete, true) => decode!(GroupRemoval),
    }
}

/// Frames with correct header and body checksums (opcode, flags, id and body from the
/// recipe), one of them possibly damaged, fed to the incremental decoder in recipe-sized
/// pieces; every decoded frame's body goes to its message decoder.
pub fn frames_structured(data: &[u8]) {
    let mut source = Source::new(data);
    let mut stream = Vec::new();
    let mut built = Vec::new();
    while !source.is_empty() && built.len() < 16 {
        let opcode_raw = if source.u8() & 1 == 0 {
            Opcode::ALL[source.below(Opcode::ALL.len())] as u16
        } else {
            source.u16()
        };
        let mut header = FrameHeader::request(Opcode::Ping, RequestId(source.u64()));
        header.opcode_raw = opcode_raw;
        header.is_response = source.u8() & 1 == 1;
        let body = source.chunk(4096);
        stream.extend_from_slice(&header.encode_for_body(&[body]));
        stream.extend_from_slice(body);
        built.push((
            header.opcode_raw,
            header.request_id,
            Bytes::copy_from_slice(body),
        ));
    }
    let damage = source.u8() & 1 == 1 && !stream.is_empty();
    if damage {
        let at = source.below(stream.len());
        stream[at] ^= 1 << (source.u8() % 8);
    }
    let decoder = FrameDecoder::new(1 << 16);
    let mut buf = BytesMut::new();
    let mut decoded: Vec<Frame> = Vec::new();
    let mut fed = 0;
    'feed: while fed < stream.len() {
        let piece = 1 + source.below(512);
        let end = (fed + piece).min(stream.len());
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let header = frame.header;
                    decode_body(header.opcode(), header.is_response, frame.body.clone());
                    decoded.push(frame);
                }
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
    if !damage {
        assert_eq!(decoded.len(), built.len(), "every intact frame decodes");
        for (frame, (opcode_raw, request_id, body)) in decoded.iter().zip(&built) {
            assert_eq!(frame.header.opcode_raw, *opcode_raw);
            assert_eq!(frame.header.request_id, *request_id);
            assert_eq!(&frame.body, body);
        }
    }
}

/// Sealed hello, write header and completion from the recipe: each decodes to itself, and a
/// damaged one never decodes to something else.
pub fn nic_structured(data: &[u8]) {
    let mut source = Source::new(data);
    let hello = Hello {
        primary: ServerId::new(source.u32(), source.u32()),
        ticket: source.u64(),
    };
    let write = WriteHeader {
        key: source.u64(),
        offset: source.u32(),
        len: source.u32(),
        write_id: source.u64(),
    };
    let completion = Completion {
        write_id: source.u64(),
        status: source.u32(),
    };
    assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
    assert_eq!(WriteHeader::decode(&write.encode()), Ok(write));
    assert_eq!(Completion::decode(&completion.encode()), Ok(completion));
    if let Some(end) = write.end_within(source.u32()) {
        assert!(end >= write.offset && end - write.offset == write.len);
    }
    let _ = write.is_keepalive();
    let mut raw = write.encode();
    let at = source.below(raw.len());
    raw[at] ^= 1 << (source.u8() % 8);
    assert!(
        WriteHeader::decode(&raw).is_err(),
        "a flipped bit is caught"
    );
}

/// A record batch from the recipe with a correct length and CRC-32C: either built record by
/// record and then altered, or with record bytes straight from the recipe.
fn batch_from(source: &mut Source) -> Vec<u8> {
    let mut bytes = if source.u8() & 1 == 0 {
        let mut builder = RecordBatchBuilder::new(256);
        let base = source.i64() >> (source.u8() % 64);
        for _ in 0..1 + source.below(8) {
            let key = (source.u8() & 1 == 1).then(|| source.chunk(16));
            let value = (source.u8() & 1 == 1).then(|| source.chunk(64));
            let headers: Vec<(&str, Option<&[u8]>)> = (0..source.below(3))
                .map(|_| ("h", (source.u8() & 1 == 1).then(|| source.chunk(8))))
                .collect();
            builder.push(
                base.saturating_add(i64::from(source.u8())),
                key,
                value,
                &headers,
            );
        }
        builder
            .finish(
                ProducerId(source.u64() >> 1),
                ProducerEpoch((source.u32() >> 17) as i16),
                BatchSequence(source.u32() >> 1),
            )
            .to_vec()
    } else {
        let mut bytes = vec![0u8; BATCH_HEADER_BYTES];
        bytes[16] = 2;
        let count = 1 + source.below(8) as i32;
        bytes[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        bytes[27..35].copy_from_slice(&source.i64().to_be_bytes());
        bytes[35..43].copy_from_slice(&source.i64().to_be_bytes());
        bytes[57..61].copy_from_slice(&count.to_be_bytes());
        bytes.extend_from_slice(source.chunk(512));
        bytes
    };
    // Alter a few record bytes, header fields included, before sealing.
    for _ in 0..source.below(4) {
        let at = source.below(bytes.len());
        if at >= CRC_START {
            bytes[at] = source.u8();
        }
    }
    let len = (bytes.len() - 12) as i32;
    bytes[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[CRC_START..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
}

/// The consumer's side of a stored batch: every record, checked arithmetic, or an error.
fn consume(batch: &[u8]) -> Result<u32, String> {
    let info = read_batch_header(batch).map_err(|e| e.to_string())?;
    let mut records = 0u32;
    let mut max = i64::MIN;
    for record in RecordIter::new(Bytes::copy_from_slice(batch), &info) {
        let record = record.map_err(|e| e.to_string())?;
        max = max.max(record.timestamp_ms);
        records += 1;
    }
    if records != info.record_count || max != info.max_timestamp_ms {
        return Err(format!("{records} records, max timestamp {max}"));
    }
    Ok(records)
}

/// The broker's validation (with its short path for plain records) accepts exactly the
/// batches a consumer decodes completely.
pub fn record_batch_structured(data: &[u8]) {
    let mut source = Source::new(data);
    let batch = batch_from(&mut source);
    match validate_batch(&batch) {
        Ok(info) => assert_eq!(
            consume(&batch),
            Ok(info.record_count),
            "accepted, undecodable"
        ),
        Err(error) => assert!(consume(&batch).is_err(), "decodable, refused: {error}"),
    }
}

/// A segment built by the appender from the recipe, then left intact, torn (zeroed from a
/// point on) or with one bit flipped: Algorithm 1 must find exactly the appends that end
/// before the damage.
pub fn segment_structured(data: &[u8]) {
    let mut source = Source::new(data);
    let capacity = 64 + source.below(4096);
    let mut image = SegmentImage::new(capacity);
    let mut ends = vec![0usize];
    for _ in 0..source.below(12) {
        let entry_type = if ends.len() == 1 && source.u8() & 1 == 0 {
            EntryType::LogDigest
        } else {
            EntryType::Batch
        };
        match image.append(entry_type, source.chunk(256)) {
            Ok(appended) => ends.push(appended.end),
            Err(_) => break,
        }
    }
    let written = image.written();
    let mut bytes = image.bytes.clone();
    let damaged_at = match source.u8() % 3 {
        0 => None,
        1 => {
            let at = source.below(capacity);
            bytes[at..].fill(0);
            Some(at)
        }
        _ => {
            let at = source.below(capacity);
            bytes[at] ^= 1 << (source.u8() % 8);
            Some(at)
        }
    };
    // A tear over bytes that were zero anyway changes nothing: the damage starts at the first
    // byte that actually differs.
    let damaged_at =
        damaged_at.and_then(|at| (at..capacity).find(|i| bytes[*i] != image.bytes[*i]));
    let outcome = scan_segment(&bytes);
    let expected = match damaged_at {
        None => written,
        Some(at) => ends
            .iter()
            .copied()
            .filter(|end| *end <= at)
            .max()
            .unwrap_or(0),
    };
    assert_eq!(
        outcome.valid_len, expected,
        "damage at {damaged_at:?} of {ends:?}"
    );
    if damaged_at.is_none() {
        assert!(verify_closed(&bytes, written).is_ok());
        let entries = EntryIter::new(&bytes[..written], true).count();
        assert_eq!(
            entries,
            2 * (ends.len() - 1),
            "an entry and a trailer per append"
        );
    }
}

/// A whole produce request: encoded, framed with checksums, decoded as the broker does,
/// validated, stored as a batch entry with its base offset stamped, fetched and decoded as
/// a consumer does. Accepted means readable, record by record.
pub fn produce(data: &[u8]) {
    let mut source = Source::new(data);
    let request = ProduceRequest {
        stream: StreamId(source.u64()),
        streamlet: StreamletId(source.u32()),
        epoch: crate::ids::OwnershipEpoch(source.u32()),
        batch: Bytes::from(batch_from(&mut source)),
    };
    let mut framed = BytesMut::new();
    crate::frame::encode_frame(
        FrameHeader::request(Opcode::Produce, RequestId(1)),
        &request.to_bytes(),
        &mut framed,
    );
    let frame = FrameDecoder::new(16 << 20)
        .decode(&mut framed)
        .expect("a sealed frame decodes")
        .expect("a whole frame is there");
    let decoded = ProduceRequest::decode_exact(frame.body).expect("an encoded request decodes");
    assert_eq!(decoded, request);
    let Ok(info) = validate_batch(&decoded.batch) else {
        return;
    };
    let mut image = SegmentImage::new(decoded.batch.len() + 64);
    let mut stored = decoded.batch.to_vec();
    stamp_base_offset(&mut stored, RecordOffset(source.u64() >> 1));
    image
        .append(EntryType::Batch, &stored)
        .expect("the image was sized for the batch");
    let fetched = &image.bytes[..image.written()];
    let mut batches = 0;
    for entry in EntryIter::new(fetched, true) {
        let entry = entry.expect("what the broker wrote reads back");
        if entry.header.entry_type == EntryType::Batch {
            assert_eq!(consume(entry.payload), Ok(info.record_count));
            let base = crate::batch::base_offset(entry.payload).expect("stamped");
            assert!(base.checked_advance(info.record_count).is_some());
            batches += 1;
        }
    }
    assert_eq!(batches, 1);
}
