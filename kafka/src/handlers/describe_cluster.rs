//! DescribeCluster: the live brokers with a Kafka listener, as Metadata lists them, the
//! cluster's id, and this broker as the controller (any broker takes the admin calls Kafka
//! sends its controller: they go to the coordinator).

use super::metadata::{CLUSTER_ID, brokers};
use super::{Answer, encode, str_bytes};
use crate::shared::Kafka;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

/// DescribeCluster's endpoint type for brokers (v1; 2 asks for controllers, which clients
/// never reach here: Tailstream's controller is the coordinator).
const ENDPOINT_BROKERS: i8 = 1;

pub(crate) fn answer(kafka: &Kafka, version: i16, request: DescribeClusterRequest) -> Answer {
    let own = kafka.cluster.server_id().map_or(-1, |id| id.index as i32);
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(CLUSTER_ID))
        .with_controller_id(BrokerId(own));
    if version >= 1 {
        response = response.with_endpoint_type(request.endpoint_type);
    }
    if version >= 1 && request.endpoint_type != ENDPOINT_BROKERS {
        response = response
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes(
                "only broker endpoints are described (the coordinator is Tailstream's controller)",
            )));
    } else {
        response = response.with_brokers(
            brokers(kafka)
                .into_iter()
                .map(|b| {
                    DescribeClusterBroker::default()
                        .with_broker_id(b.node_id)
                        .with_host(b.host)
                        .with_port(b.port)
                })
                .collect(),
        );
    }
    Answer::Ready(encode(&response, version))
}
