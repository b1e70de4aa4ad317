//! One Kafka request in, its answer out: each API's handler, and the shapes they share.
//!
//! A handler answers now, later (a future the connection's writer drives, in order), or not
//! at all (a Produce with acks = 0). Only Produce does work while the reader waits (it appends
//! before the next request is read, so a producer's pipelined batches land in order); every
//! other handler returns at once with a future.

mod admin_configs;
mod admin_groups;
mod admin_partitions;
mod admin_records;
mod admin_topics;
pub(crate) mod api_versions;
mod coordinator;
mod describe_cluster;
mod fetch;
mod groups;
mod leader_epochs;
mod list_offsets;
mod metadata;
mod produce;
pub(crate) mod sasl;

use crate::quotas::Pacing;
use crate::shared::ConnectionLimits;
use crate::shared::Kafka;
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use kafka_protocol::protocol::{Encodable, StrBytes};
use std::sync::Arc;
use tailstream_auth::Principal;
use tailstream_identity::Access;
use tailstream_kafka_wire::{Api, RequestBody, RequestHeader};

/// An encoded answer body (without its length and header), or why it could not be encoded
/// (a bug: the connection is closed).
pub(crate) type Body = Result<Vec<Bytes>, String>;

pub(crate) enum Answer {
    Ready(Body),
    Later(BoxFuture<'static, Body>),
    /// No answer at all (a Produce with acks = 0).
    Silent,
}

/// Encodes `response` at `version` with `kafka-protocol`.
pub(crate) fn encode<R: Encodable>(response: &R, version: i16) -> Body {
    let size = response.compute_size(version).map_err(|e| e.to_string())?;
    let mut out = BytesMut::with_capacity(size);
    response
        .encode(&mut out, version)
        .map_err(|e| format!("encoding v{version}: {e}"))?;
    Ok(vec![out.freeze()])
}

pub(crate) fn str_bytes(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// Answers one decoded request; a Produce or Fetch answer carries `pacing.throttle_ms` (a
/// quota's), and a Produce pays the connection's decompression budget batch by batch.
pub(crate) async fn dispatch(
    kafka: &Arc<Kafka>,
    limits: &ConnectionLimits,
    principal: &Principal,
    header: RequestHeader,
    api: Api,
    body: RequestBody,
    pacing: Pacing<'_>,
) -> Answer {
    metrics::counter!(crate::metrics::REQUESTS, "api" => api.name()).increment(1);
    let version = header.api_version;
    // What this request may do (everything where authentication is off). Waits on the
    // coordinator only before the broker's first listing of the rules.
    let access = match &kafka.authorizer {
        Some(authorizer) => authorizer.access(principal).await,
        None => Access::Everything,
    };
    let k = || kafka.clone();
    let throttle_ms = pacing.throttle_ms;
    let answer = match body {
        RequestBody::ApiVersions(_) => api_versions::answer(version),
        RequestBody::Metadata(request) => {
            metadata::answer(k(), access, principal, version, request)
        }
        RequestBody::Produce(request) => {
            produce::answer(kafka, &access, version, request, principal, pacing).await
        }
        RequestBody::Fetch(request) => {
            let wait_max = limits.fetch_wait_max;
            let principal = principal.clone();
            fetch::answer(
                k(),
                access,
                principal,
                wait_max,
                version,
                request,
                throttle_ms,
            )
        }
        RequestBody::ListOffsets(request) => list_offsets::answer(k(), access, version, request),
        RequestBody::FindCoordinator(request) => {
            coordinator::find(kafka, &access, version, request)
        }
        RequestBody::InitProducerId(request) => {
            coordinator::init_producer_id(k(), &access, principal, version, request)
        }
        RequestBody::JoinGroup(request) => {
            groups::join(k(), &access, principal, version, header.client_id, request)
        }
        RequestBody::SyncGroup(request) => groups::sync(k(), &access, version, request),
        RequestBody::Heartbeat(request) => groups::heartbeat(k(), &access, version, request),
        RequestBody::LeaveGroup(request) => groups::leave(k(), &access, version, request),
        RequestBody::OffsetCommit(request) => {
            groups::commit(k(), access, principal, version, request)
        }
        RequestBody::OffsetFetch(request) => groups::fetch(k(), access, version, request),
        RequestBody::ListGroups(request) => admin_groups::list(k(), access, version, request),
        RequestBody::DescribeGroups(request) => {
            admin_groups::describe(k(), access, version, request)
        }
        RequestBody::CreateTopics(request) => {
            admin_topics::create(k(), access, principal, version, request)
        }
        RequestBody::DeleteGroups(request) => admin_groups::delete(k(), access, version, request),
        RequestBody::CreatePartitions(request) => {
            admin_partitions::create(k(), access, principal, version, request)
        }
        RequestBody::DeleteRecords(request) => {
            admin_records::delete_records(k(), access, version, request)
        }
        RequestBody::OffsetDelete(request) => {
            admin_groups::delete_offsets(k(), access, version, request)
        }
        RequestBody::OffsetForLeaderEpoch(request) => {
            leader_epochs::answer(k(), access, version, request)
        }
        RequestBody::DescribeCluster(request) => describe_cluster::answer(kafka, version, request),
        RequestBody::DeleteTopics(request) => admin_topics::delete(k(), access, version, request),
        RequestBody::DescribeConfigs(request) => {
            admin_topics::describe_configs(k(), access, version, request)
        }
        RequestBody::IncrementalAlterConfigs(request) => {
            admin_configs::incremental_alter(k(), access, version, request)
        }
        RequestBody::AlterConfigs(request) => admin_configs::alter(k(), access, version, request),
        // The exchange happens before the first request reaches here (`authenticate`):
        // now it is out of turn, or authentication is off.
        RequestBody::SaslHandshake(_) => {
            let names = kafka
                .authenticator
                .as_ref()
                .map(|a| a.names.clone())
                .unwrap_or_default();
            sasl::handshake_refused(
                version,
                &names,
                kafka_protocol::ResponseError::IllegalSaslState,
            )
        }
        RequestBody::SaslAuthenticate(_) => sasl::authenticate_refused(
            version,
            kafka_protocol::ResponseError::IllegalSaslState,
            "this connection is not in an authentication exchange",
        ),
    };
    headed(api, version, answer)
}

/// `answer` with what its response header needs beyond the correlation id (which the
/// connection's writer writes): for a flexible version (header v1), its tagged fields.
pub(crate) fn headed(api: Api, version: i16, answer: Answer) -> Answer {
    if api.response_header_version(version) >= 1 {
        with_tagged_header(answer)
    } else {
        answer
    }
}

/// A flexible version's response header (v1) ends with tagged fields after the correlation
/// id: none, one zero byte, ahead of the body.
fn with_tagged_header(answer: Answer) -> Answer {
    fn prepend(body: Body) -> Body {
        body.map(|mut parts| {
            parts.insert(0, Bytes::from_static(&[0]));
            parts
        })
    }
    match answer {
        Answer::Ready(body) => Answer::Ready(prepend(body)),
        Answer::Later(later) => Answer::Later(Box::pin(async move { prepend(later.await) })),
        Answer::Silent => Answer::Silent,
    }
}
