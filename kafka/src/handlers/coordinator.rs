//! The coordinator's side of Kafka: FindCoordinator (every broker answers for every group: its
//! group requests go on to the Tailstream coordinator, which keeps groups and their offsets),
//! and InitProducerId (a producer session from the coordinator, for an idempotent producer: a
//! fresh id, or with v3's producer id and epoch, the same id at the next epoch).
//!
//! Transactions are not served. A transactional producer asks FindCoordinator for its
//! transaction coordinator first, then InitProducerId with its transactional id: both answer
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the one refusal that librdkafka and the Java client
//! both treat as final at once (any other code has librdkafka retry until its timeout).

use super::{Answer, encode, str_bytes};
use crate::errors::cluster_error_code;
use crate::shared::Kafka;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId,
};
use std::sync::Arc;
use tailstream_auth::Principal;
use tailstream_identity::Access;
use tailstream_wire::messages::AclOperation;
use tailstream_wire::messages::ProducerSession;
use tailstream_wire::{ProducerEpoch, ProducerId as TailstreamProducerId};

/// FindCoordinator's key type for a transaction coordinator (0 is a group's).
const KEY_TYPE_TRANSACTION: i8 = 1;
const NO_TRANSACTIONS: &str = "transactions are not supported by Tailstream";

pub(crate) fn find(
    kafka: &Arc<Kafka>,
    access: &Access,
    version: i16,
    request: FindCoordinatorRequest,
) -> Answer {
    if request.key_type == KEY_TYPE_TRANSACTION {
        let response = FindCoordinatorResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(NO_TRANSACTIONS)))
            .with_node_id(BrokerId(-1));
        return Answer::Ready(encode(&response, version));
    }
    if !access.group(AclOperation::Describe, request.key.as_str()) {
        let message = format!(
            "not authorized to describe group {:?}",
            request.key.as_str()
        );
        let response = FindCoordinatorResponse::default()
            .with_error_code(crate::errors::group_denied(access))
            .with_error_message(Some(str_bytes(&message)))
            .with_node_id(BrokerId(-1));
        return Answer::Ready(encode(&response, version));
    }
    let Some(own) = kafka.cluster.server_id() else {
        let response = FindCoordinatorResponse::default()
            .with_error_code(ResponseError::CoordinatorNotAvailable.code())
            .with_node_id(BrokerId(-1));
        return Answer::Ready(encode(&response, version));
    };
    let response = FindCoordinatorResponse::default()
        .with_node_id(BrokerId(own.index as i32))
        .with_host(str_bytes(&kafka.advertised.host))
        .with_port(kafka.advertised.port);
    Answer::Ready(encode(&response, version))
}

/// The session an InitProducerId names (v3 on): a producer id and epoch, both non-negative.
fn previous_session(request: &InitProducerIdRequest) -> Option<ProducerSession> {
    let id = u64::try_from(request.producer_id.0).ok()?;
    (request.producer_epoch >= 0).then_some(ProducerSession {
        producer_id: TailstreamProducerId(id),
        producer_epoch: ProducerEpoch(request.producer_epoch),
    })
}

pub(crate) fn init_producer_id(
    kafka: Arc<Kafka>,
    access: &Access,
    principal: &Principal,
    version: i16,
    request: InitProducerIdRequest,
) -> Answer {
    let may = access.may_write_idempotently();
    let cluster_refusal = crate::errors::cluster_denied(access);
    // The id is bound to the client's user: the coordinator marks it so, and gives a new
    // epoch of `previous` only if it is that user's.
    let owner = principal.user().map(str::to_owned);
    Answer::Later(Box::pin(async move {
        let refused = |code: i16| {
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        let response = if request.transactional_id.is_some() {
            refused(ResponseError::TransactionalIdAuthorizationFailed.code())
        } else if !may {
            // Kafka 3's rule: IdempotentWrite on the cluster, or Write on some topic.
            refused(cluster_refusal)
        } else {
            match kafka
                .coordinator
                .init_producer(previous_session(&request), owner)
                .await
            {
                Ok(session) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(
                        i64::try_from(session.producer_id.0).unwrap_or(i64::MAX),
                    ))
                    .with_producer_epoch(session.producer_epoch.0),
                Err(error) => InitProducerIdResponse::default()
                    .with_error_code(cluster_error_code(&error))
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            }
        };
        encode(&response, version)
    }))
}
