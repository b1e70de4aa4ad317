//! Metadata: the brokers (this cluster's live members with a Kafka listener; node id = the
//! broker's server index) and each topic's partitions with their leader, the owner of the
//! partition's streamlet. Asked of the coordinator afresh every time: after a crash the
//! leaders moved, and this is how clients learn where.

use super::{Answer, encode, str_bytes};
use crate::leader_epochs::leader_epoch;
use crate::shared::{Advertised, Kafka};
use crate::topics::TopicError;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use std::collections::HashMap;
use std::sync::Arc;
use tailstream_auth::Principal;
use tailstream_identity::Access;
use tailstream_wire::LogId;
use tailstream_wire::messages::{AclOperation, PlacementState, StreamMetadata, StreamletPlacement};

/// What Tailstream calls its cluster, for clients that want a cluster id.
pub(super) const CLUSTER_ID: &str = "tailstream";

pub(crate) fn answer(
    kafka: Arc<Kafka>,
    access: Access,
    principal: &Principal,
    version: i16,
    request: MetadataRequest,
) -> Answer {
    let principal = principal.clone();
    Answer::Later(Box::pin(async move {
        let brokers = brokers(&kafka);
        let own = kafka.cluster.server_id().map_or(-1, |id| id.index as i32);
        // v0 names no topic to mean all; from v1 that is a null list (and empty is none).
        let all = match &request.topics {
            None => true,
            Some(topics) => version == 0 && topics.is_empty(),
        };
        let create = version < 4 || request.allow_auto_topic_creation;
        let mut topics = Vec::new();
        // A topic the client may not describe is left out of a listing, and refused by name.
        let denied = TopicError {
            code: crate::errors::topic_denied(&access),
            message: String::new(),
        };
        let describes = |name: &str| access.topic(AclOperation::Describe, name);
        if all {
            match kafka.topics.all().await {
                Ok(streams) => topics.extend(
                    streams
                        .iter()
                        .filter(|s| describes(&s.name))
                        .map(|s| topic(s, version)),
                ),
                Err(error) => return Err(format!("listing streams: {}", error.message)),
            }
        } else if request.topics.as_ref().map_or(0, Vec::len) > kafka.topics.names_per_request_max {
            // Each named topic costs a question to the coordinator (and maybe a create). A
            // request naming more than the cap (a mirror, a connector with thousands of
            // topics, or a flood) is answered from one listing instead, and creates nothing.
            metrics::counter!(crate::metrics::METADATA_TOO_MANY_TOPICS).increment(1);
            let streams = match kafka.topics.all().await {
                Ok(streams) => streams,
                Err(error) => return Err(format!("listing streams: {}", error.message)),
            };
            let by_name: HashMap<&str, &StreamMetadata> = streams
                .iter()
                .map(|s| (s.name.as_str(), s.as_ref()))
                .collect();
            let unknown = TopicError {
                code: ResponseError::UnknownTopicOrPartition.code(),
                message: String::new(),
            };
            for wanted in request.topics.iter().flatten() {
                let Some(name) = wanted.name.as_ref() else {
                    // Only v12 may name a topic by id alone (and carry a null name back).
                    if version >= 12 {
                        topics.push(unknown_id(wanted));
                    }
                    continue;
                };
                topics.push(match by_name.get(name.as_str()) {
                    _ if !describes(name.as_str()) => failed_topic(name.as_str(), &denied),
                    Some(stream) => topic(stream, version),
                    None => failed_topic(name.as_str(), &unknown),
                });
            }
        } else {
            for wanted in request.topics.iter().flatten() {
                let Some(name) = wanted.name.as_ref() else {
                    // Only v12 may name a topic by id alone (and carry a null name back).
                    if version >= 12 {
                        topics.push(unknown_id(wanted));
                    }
                    continue;
                };
                if !describes(name.as_str()) {
                    topics.push(failed_topic(name.as_str(), &denied));
                    continue;
                }
                // Auto-creation also needs Create (on the topic or the cluster); without it a
                // missing topic is just unknown, as Kafka answers.
                let create =
                    (create && access.may_create_topic(name.as_str())).then_some(&principal);
                let entry = match kafka.topics.fresh(name.as_str(), create).await {
                    Ok(stream) => topic(&stream, version),
                    Err(error) => failed_topic(name.as_str(), &error),
                };
                topics.push(entry);
            }
        }
        let mut response = MetadataResponse::default()
            .with_brokers(brokers)
            .with_topics(topics);
        if version >= 1 {
            response = response.with_controller_id(BrokerId(own));
        }
        if version >= 2 {
            response = response.with_cluster_id(Some(str_bytes(CLUSTER_ID)));
        }
        encode(&response, version)
    }))
}

/// A topic asked for by id alone (v12): streams have no topic ids (Metadata answers the zero
/// id), so none is known.
fn unknown_id(wanted: &MetadataRequestTopic) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_topic_id(wanted.topic_id)
        .with_error_code(ResponseError::UnknownTopicId.code())
}

/// Live brokers that run a Kafka listener.
pub(super) fn brokers(kafka: &Kafka) -> Vec<MetadataResponseBroker> {
    let members = kafka.cluster.brokers();
    let members = members.borrow();
    members
        .iter()
        .filter(|b| b.alive && !b.crashed)
        .filter_map(|b| {
            let addr = Advertised::parse(&b.kafka_addr)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.server_id.index as i32))
                    .with_host(str_bytes(&addr.host))
                    .with_port(addr.port),
            )
        })
        .collect()
}

fn topic(stream: &StreamMetadata, version: i16) -> MetadataResponseTopic {
    let logs = stream.config.logs_per_streamlet;
    let mut partitions = Vec::new();
    for placement in &stream.streamlets {
        let serving = placement.state == PlacementState::Serving;
        let leader = if serving {
            placement.owner.index as i32
        } else {
            -1
        };
        let error = if serving {
            0
        } else {
            ResponseError::LeaderNotAvailable.code()
        };
        for log in 0..logs {
            let index = placement.streamlet.0 * logs + log;
            let (replicas, isr) = if serving {
                replica_nodes(placement, LogId(log), leader)
            } else {
                (Vec::new(), Vec::new())
            };
            let mut answer = MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(i32::try_from(index).unwrap_or(i32::MAX))
                .with_leader_id(BrokerId(leader))
                .with_replica_nodes(replicas)
                .with_isr_nodes(isr);
            if version >= 7 {
                // KIP-320: the streamlet's ownership epoch, which every change of owner moves.
                answer = answer.with_leader_epoch(leader_epoch(placement.epoch));
            }
            partitions.push(answer);
        }
    }
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&stream.name))))
        .with_partitions(partitions)
}

/// A partition's replicas and ISR: its leader, then its log's backups (with those lost and not
/// replaced yet) and the ones of them holding a complete copy, as the owner last reported.
/// A log short of R complete copies shows an ISR shorter than its replica list, which is how
/// Kafka's tools see under-replication.
fn replica_nodes(
    placement: &StreamletPlacement,
    log: LogId,
    leader: i32,
) -> (Vec<BrokerId>, Vec<BrokerId>) {
    let mut replicas = vec![BrokerId(leader)];
    let mut isr = vec![BrokerId(leader)];
    if let Some(set) = placement.replication.iter().find(|s| s.log == log) {
        let node = |id: &tailstream_wire::ServerId| BrokerId(id.index as i32);
        replicas.extend(set.backups.iter().map(node));
        // The newest segment's copies in sync, but never more than the fewest complete
        // copies an older segment still has.
        isr.extend(
            set.in_sync
                .iter()
                .take(set.in_sync_replicas as usize)
                .map(node),
        );
    }
    (replicas, isr)
}

fn failed_topic(name: &str, error: &TopicError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code)
        .with_name(Some(TopicName(str_bytes(name))))
}
