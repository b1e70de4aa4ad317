//! One Kafka request frame in, a decoded request out: header, guard walk, then the
//! `kafka-protocol` decoder, in that order and never otherwise.

use super::guard::{Cursor, GuardError, check_body};
use super::shapes::request_shape;
use super::versions::Api;
use bytes::Bytes;
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest, FindCoordinatorRequest,
    HeartbeatRequest, IncrementalAlterConfigsRequest, InitProducerIdRequest, JoinGroupRequest,
    LeaveGroupRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest,
    SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::Decodable;
use thiserror::Error;

/// The request header fields the listener uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

/// A decoded request body.
#[derive(Debug)]
pub enum RequestBody {
    Produce(ProduceRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    Metadata(MetadataRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    FindCoordinator(FindCoordinatorRequest),
    JoinGroup(JoinGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    SyncGroup(SyncGroupRequest),
    DescribeGroups(DescribeGroupsRequest),
    ListGroups(ListGroupsRequest),
    ApiVersions(ApiVersionsRequest),
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    InitProducerId(InitProducerIdRequest),
    DescribeConfigs(DescribeConfigsRequest),
    AlterConfigs(AlterConfigsRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    CreatePartitions(CreatePartitionsRequest),
    DeleteGroups(DeleteGroupsRequest),
    OffsetDelete(OffsetDeleteRequest),
    DeleteRecords(DeleteRecordsRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    SaslHandshake(SaslHandshakeRequest),
    SaslAuthenticate(SaslAuthenticateRequest),
    DescribeCluster(DescribeClusterRequest),
}

/// What a frame turned out to be.
#[derive(Debug)]
pub enum Decoded {
    /// A request served here, at a version served here.
    Request {
        header: RequestHeader,
        api: Api,
        body: Box<RequestBody>,
    },
    /// ApiVersions at a version not served: answered in v0 with UNSUPPORTED_VERSION and the
    /// versions served, so the client retries with one of them.
    ApiVersionsFallback { header: RequestHeader },
}

/// Why a frame was refused; every case closes the connection (Kafka brokers do the same for
/// requests a client should not have sent after ApiVersions).
#[derive(Debug, Error)]
pub enum DecodeError {
    #[error("bad request header: {0}")]
    Guard(#[from] GuardError),
    #[error("bad {api:?} v{version} request: {error}")]
    Body {
        api: Api,
        version: i16,
        error: GuardError,
    },
    #[error("unknown or unserved API key {key} (correlation id {correlation_id})")]
    UnknownApi { key: i16, correlation_id: i32 },
    #[error("{api:?} v{version} is not served (correlation id {correlation_id})")]
    UnsupportedVersion {
        api: Api,
        version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: Api,
        version: i16,
        reason: String,
    },
}

/// Reads the header: api key, version and correlation id (fixed), the client id, and for a
/// flexible header the tagged fields. Returns the header and where the body starts.
fn read_header(
    frame: &[u8],
    flexible: impl Fn(i16, i16) -> bool,
) -> Result<(RequestHeader, usize), GuardError> {
    let mut cursor = Cursor::new(frame);
    let api_key = cursor.i16()?;
    let api_version = cursor.i16()?;
    let correlation_id = cursor.i32()?;
    let client_id = cursor
        .string()?
        .map(|id| String::from_utf8_lossy(id).into_owned());
    if flexible(api_key, api_version) {
        cursor.tagged_fields()?;
    }
    Ok((
        RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
        },
        cursor.position(),
    ))
}

/// Decodes one request frame (the bytes after its length prefix).
pub fn decode_request(frame: Bytes) -> Result<Decoded, DecodeError> {
    let flexible = |key: i16, version: i16| {
        Api::from_key(key).is_some_and(|api| api.request_header_version(version) >= 2)
    };
    let (header, body_start) = read_header(&frame, flexible)?;
    let Some(api) = Api::from_key(header.api_key) else {
        return Err(DecodeError::UnknownApi {
            key: header.api_key,
            correlation_id: header.correlation_id,
        });
    };
    let version = header.api_version;
    if !api.accepts(version) {
        if api == Api::ApiVersions {
            return Ok(Decoded::ApiVersionsFallback { header });
        }
        return Err(DecodeError::UnsupportedVersion {
            api,
            version,
            correlation_id: header.correlation_id,
        });
    }
    let mut body = frame.slice(body_start..);
    // What follows the last field is left unread, as Kafka leaves it (see `guard`).
    check_body(request_shape(api), version, api.flexible(version), &body).map_err(|error| {
        DecodeError::Body {
            api,
            version,
            error,
        }
    })?;
    let malformed = |error: anyhow::Error| DecodeError::Malformed {
        api,
        version,
        reason: error.to_string(),
    };
    let buf = &mut body;
    // Each API's body type, decoded at the request's version.
    macro_rules! decode_as {
        ($($variant:ident => $message:ident),* $(,)?) => {
            match api {
                $(Api::$variant => {
                    RequestBody::$variant($message::decode(buf, version).map_err(malformed)?)
                })*
            }
        };
    }
    let body = decode_as! {
        Produce => ProduceRequest,
        Fetch => FetchRequest,
        ListOffsets => ListOffsetsRequest,
        Metadata => MetadataRequest,
        OffsetCommit => OffsetCommitRequest,
        OffsetFetch => OffsetFetchRequest,
        FindCoordinator => FindCoordinatorRequest,
        JoinGroup => JoinGroupRequest,
        Heartbeat => HeartbeatRequest,
        LeaveGroup => LeaveGroupRequest,
        SyncGroup => SyncGroupRequest,
        DescribeGroups => DescribeGroupsRequest,
        ListGroups => ListGroupsRequest,
        ApiVersions => ApiVersionsRequest,
        CreateTopics => CreateTopicsRequest,
        DeleteTopics => DeleteTopicsRequest,
        InitProducerId => InitProducerIdRequest,
        DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
        CreatePartitions => CreatePartitionsRequest,
        DeleteGroups => DeleteGroupsRequest,
        OffsetDelete => OffsetDeleteRequest,
        DeleteRecords => DeleteRecordsRequest,
        OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
        SaslHandshake => SaslHandshakeRequest,
        SaslAuthenticate => SaslAuthenticateRequest,
        DescribeCluster => DescribeClusterRequest,
    };
    Ok(Decoded::Request {
        header,
        api,
        body: Box::new(body),
    })
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
