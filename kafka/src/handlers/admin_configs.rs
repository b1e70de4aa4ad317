//! IncrementalAlterConfigs and AlterConfigs: a topic's retention changes (`topic_alter` says
//! what each request asks, the coordinator makes it durable and sends it to the owners, which
//! free by it at their next retention pass). Everything else a topic has is fixed at creation
//! and may only be "set" to the value it has.
//!
//! Needs Alter on the topic (Kafka's AlterConfigs operation: Tailstream's rules have one
//! Alter for a topic's partitions and its config). A broker's settings live in its config
//! file: a broker resource is refused with a message saying so.

use super::admin_topics::{TOPICS_PER_REQUEST_MAX, refusal, stream_refusal};
use super::{Answer, encode, str_bytes};
use crate::shared::Kafka;
use crate::topic_alter::{Incremental, RetentionChange, incremental, whole};
use crate::topic_configs::Refusal;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as WholeResourceResponse;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;
use tailstream_identity::Access;
use tailstream_wire::messages::{AclOperation, StreamConfig};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// One resource's asked changes, in either API's form.
enum Asked<'a> {
    Incremental(Vec<Incremental<'a>>),
    Whole(Vec<(&'a str, Option<&'a str>)>),
}

impl Asked<'_> {
    fn change(
        &self,
        current: &StreamConfig,
        defaults: &StreamConfig,
    ) -> Result<RetentionChange, Refusal> {
        match self {
            Asked::Incremental(changes) => incremental(current, defaults, changes),
            Asked::Whole(configs) => whole(current, defaults, configs),
        }
    }
}

pub(crate) fn incremental_alter(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: IncrementalAlterConfigsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let resources = request.resources.iter().map(|resource| {
            let changes = resource.configs.iter().map(|c| {
                let value = c.value.as_ref().map(|v| v.as_str());
                (c.name.as_str(), c.config_operation, value)
            });
            let asked = Asked::Incremental(changes.collect());
            (resource.resource_type, &resource.resource_name, asked)
        });
        let responses = alter_all(&kafka, &access, request.validate_only, resources).await;
        encode(
            &IncrementalAlterConfigsResponse::default().with_responses(responses),
            version,
        )
    }))
}

pub(crate) fn alter(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: AlterConfigsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let resources = request.resources.iter().map(|resource| {
            let configs = resource.configs.iter();
            let asked = Asked::Whole(
                configs
                    .map(|c| (c.name.as_str(), c.value.as_ref().map(|v| v.as_str())))
                    .collect(),
            );
            (resource.resource_type, &resource.resource_name, asked)
        });
        let responses = alter_all(&kafka, &access, request.validate_only, resources).await;
        // The two APIs' per-resource answers have the same fields.
        let responses = responses.into_iter().map(|answer| {
            WholeResourceResponse::default()
                .with_error_code(answer.error_code)
                .with_error_message(answer.error_message)
                .with_resource_type(answer.resource_type)
                .with_resource_name(answer.resource_name)
        });
        encode(
            &AlterConfigsResponse::default().with_responses(responses.collect()),
            version,
        )
    }))
}

/// Each resource's changes, in request order, answered in IncrementalAlterConfigs' form.
async fn alter_all<'a>(
    kafka: &Kafka,
    access: &Access,
    validate_only: bool,
    resources: impl ExactSizeIterator<Item = (i8, &'a StrBytes, Asked<'a>)>,
) -> Vec<AlterConfigsResourceResponse> {
    let too_many = resources.len() > TOPICS_PER_REQUEST_MAX;
    let mut responses = Vec::with_capacity(resources.len());
    for (resource_type, name, asked) in resources {
        let target = Target {
            resource_type,
            name: name.as_str(),
            validate_only,
            too_many,
        };
        let outcome = alter_one(kafka, access, target, &asked).await;
        responses.push(answered(resource_type, name, outcome));
    }
    responses
}

/// The resource a change is for, and how the request asked.
struct Target<'a> {
    resource_type: i8,
    name: &'a str,
    validate_only: bool,
    too_many: bool,
}

async fn alter_one(
    kafka: &Kafka,
    access: &Access,
    target: Target<'_>,
    asked: &Asked<'_>,
) -> Result<(), Refusal> {
    let name = target.name;
    match target.resource_type {
        _ if target.too_many => {
            return Err(refusal(
                ResponseError::PolicyViolation,
                format!("at most {TOPICS_PER_REQUEST_MAX} resources per request"),
            ));
        }
        RESOURCE_TOPIC => {}
        RESOURCE_BROKER => {
            return Err(refusal(
                ResponseError::PolicyViolation,
                "a broker's settings live in its config file; only topics' retention changes here",
            ));
        }
        other => {
            return Err(refusal(
                ResponseError::InvalidRequest,
                format!("resource type {other} has no settings here (topics do)"),
            ));
        }
    }
    if !access.topic(AclOperation::Alter, name) {
        return Err(refusal(
            ResponseError::try_from_code(crate::errors::topic_denied(access))
                .unwrap_or(ResponseError::TopicAuthorizationFailed),
            "",
        ));
    }
    let stream = kafka
        .coordinator
        .refresh_stream(name)
        .await
        .map_err(|e| stream_refusal(&e))?;
    let (defaults, _) = kafka.topics.defaults();
    let change = asked.change(&stream.config, defaults)?;
    if target.validate_only || change.is_empty() {
        return Ok(());
    }
    let altered = kafka
        .coordinator
        .alter_retention(name, change.retention_ms, change.retention_bytes)
        .await;
    kafka.topics.forget(name);
    let altered = altered.map_err(|e| stream_refusal(&e))?;
    tracing::info!(
        topic = name,
        retention_ms = altered.config.retention_ms,
        retention_bytes = altered.config.retention_bytes,
        "topic retention changed"
    );
    Ok(())
}

fn answered(
    resource_type: i8,
    name: &StrBytes,
    outcome: Result<(), Refusal>,
) -> AlterConfigsResourceResponse {
    let response = AlterConfigsResourceResponse::default()
        .with_resource_type(resource_type)
        .with_resource_name(name.clone());
    match outcome {
        Ok(()) => response,
        Err(refused) => {
            tracing::info!(resource = %name.as_str(), error = %refused.message, "config change refused");
            response
                .with_error_code(refused.code.code())
                .with_error_message(
                    (!refused.message.is_empty()).then(|| str_bytes(&refused.message)),
                )
        }
    }
}
