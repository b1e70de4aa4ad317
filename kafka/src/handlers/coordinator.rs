//! The coordinator's side of Kafka: FindCoordinator (every broker answers for every group: its
//! group requests go on to the Tailstream coordinator, which keeps groups and their offsets),
//! and InitProducerId (a fresh producer id from the coordinator, for an idempotent producer).

use super::{Answer, encode, str_bytes};
use crate::errors::cluster_error_code;
use crate::shared::Kafka;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId,
};
use std::sync::Arc;

pub(crate) fn find(kafka: &Arc<Kafka>, version: i16, _request: FindCoordinatorRequest) -> Answer {
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

pub(crate) fn init_producer_id(
    kafka: Arc<Kafka>,
    version: i16,
    request: InitProducerIdRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let response = if request.transactional_id.is_some() {
            // Transactions are not served: refused, not retried.
            InitProducerIdResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_producer_id(ProducerId(-1))
        } else {
            match kafka.coordinator.allocate_producer_id().await {
                Ok(id) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(i64::try_from(id.0).unwrap_or(i64::MAX)))
                    .with_producer_epoch(0),
                Err(error) => InitProducerIdResponse::default()
                    .with_error_code(cluster_error_code(&error))
                    .with_producer_id(ProducerId(-1)),
            }
        };
        encode(&response, version)
    }))
}
