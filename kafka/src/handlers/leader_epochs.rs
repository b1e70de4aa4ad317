//! OffsetForLeaderEpoch (KIP-320): where a leader epoch ends, for a consumer validating its
//! position after a leader change. The answer is the log's committed end (see
//! `crate::leader_epochs`: nothing acknowledged is ever truncated), under the epoch asked for,
//! or the current one when asked for a newer one.

use super::{Answer, encode};
use crate::errors::data_error_code;
use crate::leader_epochs::{check, leader_epoch};
use crate::shared::Kafka;
use crate::topics::partition;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use std::sync::Arc;
use tailstream_identity::Access;
use tailstream_wire::messages::AclOperation;

pub(crate) fn answer(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: OffsetForLeaderEpochRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let stream = kafka
                .topics
                .route_if(
                    &access,
                    AclOperation::Describe,
                    topic.topic.as_str(),
                    crate::topics::highest(topic.partitions.iter().map(|p| p.partition)),
                )
                .await;
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let answer = EpochEndOffset::default().with_partition(p.partition);
                    let target = match &stream {
                        Err(error) => return answer.with_error_code(error.code),
                        Ok(stream) => match partition(stream, p.partition) {
                            Some(target) => target,
                            None => {
                                return answer.with_error_code(
                                    ResponseError::UnknownTopicOrPartition.code(),
                                );
                            }
                        },
                    };
                    let looked_up = kafka
                        .plane
                        .admit_current(target.stream, target.streamlet)
                        .and_then(|streamlet| {
                            let (_, committed) = streamlet.log(target.log)?.bounds();
                            Ok((leader_epoch(streamlet.epoch()), committed))
                        });
                    match looked_up {
                        Err(error) => answer.with_error_code(data_error_code(&error)),
                        Ok((current, committed)) => {
                            if let Some(code) = check(p.current_leader_epoch, current) {
                                return answer.with_error_code(code);
                            }
                            answer
                                .with_leader_epoch(p.leader_epoch.min(current))
                                .with_end_offset(i64::try_from(committed.0).unwrap_or(i64::MAX))
                        }
                    }
                })
                .collect();
            topics.push(
                OffsetForLeaderTopicResult::default()
                    .with_topic(topic.topic)
                    .with_partitions(partitions),
            );
        }
        encode(
            &OffsetForLeaderEpochResponse::default().with_topics(topics),
            version,
        )
    }))
}
