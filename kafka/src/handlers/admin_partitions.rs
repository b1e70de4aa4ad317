//! CreatePartitions: a topic grows by whole streamlets (Q partitions each, numbered after the
//! existing ones), which the coordinator places like a creation's; records already written
//! stay where they are. Producers and consumers see the new partitions at their next metadata
//! refresh, and every broker's cached count catches up the first time a request names a
//! partition past it (`topics`).
//!
//! Needs Alter on the topic, as in Kafka, and spends the same per-principal budget on this
//! broker as a creation (`kafka.auto_creates_per_second`).

use super::admin_topics::{TOPICS_PER_REQUEST_MAX, refusal, stream_refusal};
use super::{Answer, encode, str_bytes};
use crate::shared::Kafka;
use crate::topic_configs::{Refusal, grown_streamlets};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use std::sync::Arc;
use tailstream_auth::Principal;
use tailstream_identity::Access;
use tailstream_wire::Status;
use tailstream_wire::messages::AclOperation;

pub(crate) fn create(
    kafka: Arc<Kafka>,
    access: Access,
    principal: &Principal,
    version: i16,
    request: CreatePartitionsRequest,
) -> Answer {
    let principal = principal.clone();
    Answer::Later(Box::pin(async move {
        let too_many = request.topics.len() > TOPICS_PER_REQUEST_MAX;
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let name = topic.name.as_str();
            let outcome = if too_many {
                Err(refusal(
                    ResponseError::PolicyViolation,
                    format!("at most {TOPICS_PER_REQUEST_MAX} topics per CreatePartitions request"),
                ))
            } else if !access.topic(AclOperation::Alter, name) {
                Err(refusal(
                    ResponseError::try_from_code(crate::errors::topic_denied(&access))
                        .unwrap_or(ResponseError::TopicAuthorizationFailed),
                    "",
                ))
            } else {
                let asked = Growth {
                    version,
                    validate_only: request.validate_only,
                };
                grow(&kafka, &principal, asked, topic).await
            };
            let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
            results.push(match outcome {
                Ok(()) => result,
                Err(refused) => {
                    tracing::info!(topic = name, error = %refused.message, "CreatePartitions refused");
                    result
                        .with_error_code(refused.code.code())
                        .with_error_message(
                            (!refused.message.is_empty()).then(|| str_bytes(&refused.message)),
                        )
                }
            });
        }
        encode(
            &CreatePartitionsResponse::default().with_results(results),
            version,
        )
    }))
}

/// How a CreatePartitions asked.
#[derive(Clone, Copy)]
struct Growth {
    version: i16,
    validate_only: bool,
}

async fn grow(
    kafka: &Kafka,
    principal: &Principal,
    asked: Growth,
    topic: &CreatePartitionsTopic,
) -> Result<(), Refusal> {
    let name = topic.name.as_str();
    if topic.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err(refusal(
            ResponseError::InvalidReplicaAssignment,
            "manual replica assignment is not supported: the coordinator places streamlets",
        ));
    }
    let stream = kafka
        .coordinator
        .refresh_stream(name)
        .await
        .map_err(|e| stream_refusal(&e))?;
    let streamlets = u32::try_from(stream.streamlets.len()).unwrap_or(u32::MAX);
    let grown = grown_streamlets(streamlets, stream.config.logs_per_streamlet, topic.count)?;
    if asked.validate_only {
        return Ok(());
    }
    if !kafka.topics.charge_creation(principal) {
        // THROTTLING_QUOTA_EXCEEDED came with v3 (clients retry it); before, a policy refusal.
        let code = if asked.version >= 3 {
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
    let result = kafka.coordinator.add_streamlets(name, grown).await;
    // Whatever happened, this broker's copy may be stale now.
    kafka.topics.forget(name);
    match result {
        Ok(metadata) => {
            tracing::info!(
                topic = name,
                streamlets_before = streamlets,
                streamlets = metadata.streamlets.len(),
                user = %principal,
                "topic grown (CreatePartitions)"
            );
            Ok(())
        }
        // The coordinator's own checks (another request grew it meanwhile, or too few live
        // brokers for its replicas) are about the partitions asked for.
        Err(error) if error.status() == Some(Status::InvalidArgument) => {
            Err(refusal(ResponseError::InvalidPartitions, error.to_string()))
        }
        Err(error) => Err(stream_refusal(&error)),
    }
}
