//! Topic administration: CreateTopics, DeleteTopics and DescribeConfigs, mapped onto the
//! coordinator's streams (`topic_configs` says how Kafka's settings become a stream's).
//!
//! Creating is Create on the topic or the cluster, as auto-creation is, and spends the same
//! per-principal budget on this broker (`kafka.auto_creates_per_second`); deleting is Delete
//! on the topic; describing is Describe on it.

use super::{Answer, encode, str_bytes};
use crate::shared::Kafka;
use crate::topic_configs::{Refusal, described, stream_shape};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse,
};
use std::sync::Arc;
use tailstream_auth::Principal;
use tailstream_identity::Access;
use tailstream_stubs::StubError;
use tailstream_wire::Status;
use tailstream_wire::messages::AclOperation;

/// DescribeConfigs' resource types (Kafka's `ConfigResource.Type`).
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs' config sources: a topic's own setting, and a default.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_DEFAULT: i8 = 5;

/// Topics one CreateTopics, CreatePartitions, DeleteTopics or DescribeConfigs request may name: each costs the
/// coordinator a call.
pub(super) const TOPICS_PER_REQUEST_MAX: usize = 1000;

pub(super) fn refusal(code: ResponseError, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

/// A coordinator refusal of a create or delete, in Kafka's terms.
pub(super) fn stream_refusal(error: &StubError) -> Refusal {
    let code = match error.status() {
        Some(Status::StreamExists) => ResponseError::TopicAlreadyExists,
        Some(Status::UnknownStream) => ResponseError::UnknownTopicOrPartition,
        Some(Status::InvalidArgument) => ResponseError::InvalidTopicException,
        Some(Status::QuotaExceeded) => ResponseError::PolicyViolation,
        Some(Status::NoBrokers) => ResponseError::InvalidReplicationFactor,
        _ => ResponseError::RequestTimedOut,
    };
    refusal(code, error.to_string())
}

pub(crate) fn create(
    kafka: Arc<Kafka>,
    access: Access,
    principal: &Principal,
    version: i16,
    request: CreateTopicsRequest,
) -> Answer {
    let principal = principal.clone();
    Answer::Later(Box::pin(async move {
        let too_many = request.topics.len() > TOPICS_PER_REQUEST_MAX;
        // Past the cap every topic is answered, refused: nothing is created.
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.name.as_str().to_owned();
            let outcome = if too_many {
                Err(refusal(
                    ResponseError::PolicyViolation,
                    format!("at most {TOPICS_PER_REQUEST_MAX} topics per CreateTopics request"),
                ))
            } else if !access.may_create_topic(&name) {
                Err(refusal(
                    ResponseError::try_from_code(crate::errors::topic_denied(&access))
                        .unwrap_or(ResponseError::TopicAuthorizationFailed),
                    "",
                ))
            } else if !topic.assignments.is_empty() {
                Err(refusal(
                    ResponseError::InvalidReplicaAssignment,
                    "manual replica assignment is not supported: the coordinator places streamlets",
                ))
            } else {
                let asked = Creation {
                    version,
                    validate_only: request.validate_only,
                };
                create_one(&kafka, &principal, asked, &topic).await
            };
            let result = CreatableTopicResult::default().with_name(topic.name);
            results.push(match outcome {
                // v5 on tell what was made (without its configs, which DescribeConfigs lists).
                Ok(made) => result
                    .with_num_partitions(made.partitions)
                    .with_replication_factor(made.replication_factor),
                Err(refused) => {
                    tracing::info!(topic = name, error = %refused.message, "CreateTopics refused");
                    result
                        .with_error_code(refused.code.code())
                        .with_error_message(
                            (!refused.message.is_empty()).then(|| str_bytes(&refused.message)),
                        )
                }
            });
        }
        encode(
            &CreateTopicsResponse::default().with_topics(results),
            version,
        )
    }))
}

/// How a CreateTopics asked.
#[derive(Clone, Copy)]
struct Creation {
    version: i16,
    validate_only: bool,
}

/// What a CreateTopics made (or would make, validating only), in Kafka's terms.
struct Made {
    partitions: i32,
    replication_factor: i16,
}

async fn create_one(
    kafka: &Kafka,
    principal: &Principal,
    asked: Creation,
    topic: &CreatableTopic,
) -> Result<Made, Refusal> {
    let name = topic.name.as_str();
    let configs: Vec<(String, Option<String>)> = topic
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
        .collect();
    let brokers = kafka
        .coordinator
        .list_brokers()
        .await
        .map_err(|e| stream_refusal(&e))?;
    let live = brokers.iter().filter(|b| b.alive && !b.crashed).count() as u32;
    let (defaults, default_streamlets) = kafka.topics.defaults();
    let default_replicas = tailstream_config::default_replicas(live);
    let shape = stream_shape(
        topic.num_partitions,
        topic.replication_factor,
        &configs,
        defaults,
        default_streamlets,
        default_replicas,
    )?;
    if shape.config.replicas + 1 > live.max(1) {
        return Err(refusal(
            ResponseError::InvalidReplicationFactor,
            format!(
                "replication factor {} needs {} live brokers; {live} are live",
                shape.config.replicas + 1,
                shape.config.replicas + 1
            ),
        ));
    }
    let made = Made {
        partitions: i32::try_from(
            shape
                .streamlets
                .saturating_mul(shape.config.logs_per_streamlet),
        )
        .unwrap_or(i32::MAX),
        replication_factor: i16::try_from(shape.config.replicas + 1).unwrap_or(i16::MAX),
    };
    if asked.validate_only {
        // What a create would also be refused for: the name taken.
        return match kafka.coordinator.refresh_stream(name).await {
            Ok(_) => Err(refusal(
                ResponseError::TopicAlreadyExists,
                format!("topic {name:?} already exists"),
            )),
            Err(error) if error.status() == Some(Status::UnknownStream) => Ok(made),
            Err(error) => Err(stream_refusal(&error)),
        };
    }
    if !kafka.topics.charge_creation(principal) {
        // THROTTLING_QUOTA_EXCEEDED came with v6 (clients retry it); before, a policy refusal
        // with its reason.
        let code = if asked.version >= 6 {
            ResponseError::ThrottlingQuotaExceeded
        } else {
            ResponseError::PolicyViolation
        };
        return Err(refusal(
            code,
            format!(
                "{principal}'s topic creation budget on this broker is spent (kafka.auto_creates_per_second)"
            ),
        ));
    }
    let created = kafka
        .coordinator
        .create_stream(name, shape.streamlets, shape.config.clone())
        .await
        .map_err(|e| stream_refusal(&e))?;
    tracing::info!(
        topic = name,
        streamlets = shape.streamlets,
        logs_per_streamlet = shape.config.logs_per_streamlet,
        replicas = shape.config.replicas,
        user = %principal,
        "topic created (CreateTopics)"
    );
    kafka.topics.forget(&created.name);
    Ok(made)
}

pub(crate) fn delete(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: DeleteTopicsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let too_many = request.topic_names.len() > TOPICS_PER_REQUEST_MAX;
        let mut responses = Vec::with_capacity(request.topic_names.len());
        for name in request.topic_names {
            let code = if too_many {
                ResponseError::PolicyViolation.code()
            } else if !access.topic(AclOperation::Delete, name.as_str()) {
                crate::errors::topic_denied(&access)
            } else {
                match kafka.coordinator.delete_stream(name.as_str()).await {
                    Ok(()) => {
                        tracing::info!(topic = name.as_str(), "topic deleted (DeleteTopics)");
                        0
                    }
                    Err(error) => stream_refusal(&error).code.code(),
                }
            };
            if !too_many {
                kafka.topics.forget(name.as_str());
            }
            responses.push(
                DeletableTopicResult::default()
                    .with_name(Some(name))
                    .with_error_code(code),
            );
        }
        encode(
            &DeleteTopicsResponse::default().with_responses(responses),
            version,
        )
    }))
}

pub(crate) fn describe_configs(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: DescribeConfigsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let too_many = request.resources.len() > TOPICS_PER_REQUEST_MAX;
        let (defaults, _) = kafka.topics.defaults();
        let default_values = described(defaults);
        let mut results = Vec::with_capacity(request.resources.len());
        for resource in request.resources {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let name = resource.resource_name.as_str();
            let wanted = |key: &str| {
                resource
                    .configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == key))
            };
            let outcome: Result<Vec<DescribeConfigsResourceResult>, Refusal> = match resource
                .resource_type
            {
                _ if too_many => Err(refusal(
                    ResponseError::PolicyViolation,
                    format!("at most {TOPICS_PER_REQUEST_MAX} resources per request"),
                )),
                RESOURCE_TOPIC if !access.topic(AclOperation::Describe, name) => Err(refusal(
                    ResponseError::try_from_code(crate::errors::topic_denied(&access))
                        .unwrap_or(ResponseError::TopicAuthorizationFailed),
                    "",
                )),
                RESOURCE_TOPIC => match kafka.coordinator.refresh_stream(name).await {
                    Ok(stream) => Ok(described(&stream.config)
                        .into_iter()
                        .filter(|(key, ..)| wanted(key))
                        .map(|(key, value, read_only)| {
                            // A value the broker's defaults would give is shown as a default.
                            let default = default_values
                                .iter()
                                .any(|(k, v, _)| *k == key && *v == value);
                            DescribeConfigsResourceResult::default()
                                .with_name(str_bytes(key))
                                .with_value(Some(str_bytes(&value)))
                                .with_read_only(read_only)
                                .with_config_source(if default {
                                    SOURCE_DEFAULT
                                } else {
                                    SOURCE_TOPIC
                                })
                        })
                        .collect()),
                    Err(error) => Err(stream_refusal(&error)),
                },
                // A broker's settings live in its config file, not behind this API.
                RESOURCE_BROKER => Ok(Vec::new()),
                other => Err(refusal(
                    ResponseError::InvalidRequest,
                    format!("resource type {other} is not described here (topics and brokers are)"),
                )),
            };
            results.push(match outcome {
                Ok(configs) => result.with_configs(configs),
                Err(refused) => result
                    .with_error_code(refused.code.code())
                    .with_error_message(
                        (!refused.message.is_empty()).then(|| str_bytes(&refused.message)),
                    ),
            });
        }
        encode(
            &DescribeConfigsResponse::default().with_results(results),
            version,
        )
    }))
}
