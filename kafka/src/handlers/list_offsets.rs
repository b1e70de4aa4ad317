//! ListOffsets: a partition's earliest offset (-2: its log start, after retention), latest
//! (-1: its high watermark, the committed end), the record with the largest timestamp (-3,
//! the first such), or the first record at or after a timestamp (offset -1 when every record
//! is older).

use super::{Answer, encode};
use crate::errors::{NONE, data_error_code};
use crate::leader_epochs::{check, leader_epoch};
use crate::shared::Kafka;
use crate::topics::partition;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use std::sync::Arc;
use tailstream_identity::Access;
use tailstream_wire::RecordOffset;
use tailstream_wire::messages::AclOperation;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;

pub(crate) fn answer(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: ListOffsetsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let stream = kafka
                .topics
                .route_if(
                    &access,
                    AclOperation::Describe,
                    topic.name.as_str(),
                    crate::topics::highest(topic.partitions.iter().map(|p| p.partition_index)),
                )
                .await;
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let answer = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    let stream = match &stream {
                        Ok(stream) => stream,
                        Err(error) => return answer.with_error_code(error.code),
                    };
                    let Some(target) = partition(stream, p.partition_index) else {
                        return answer
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let looked_up = kafka
                        .plane
                        .admit_current(target.stream, target.streamlet)
                        .and_then(|streamlet| {
                            let log = streamlet.log(target.log)?;
                            let (first, committed) = log.bounds();
                            let epoch = leader_epoch(streamlet.epoch());
                            Ok((
                                epoch,
                                match p.timestamp {
                                    LATEST => Some((committed, -1)),
                                    EARLIEST => Some((first, -1)),
                                    MAX_TIMESTAMP => log.offset_of_max_timestamp(),
                                    at => log.offset_for_timestamp(at),
                                },
                            ))
                        });
                    match looked_up {
                        Err(error) => answer.with_error_code(data_error_code(&error)),
                        Ok((epoch, found)) => match check(p.current_leader_epoch, epoch) {
                            Some(code) => answer.with_error_code(code),
                            None => {
                                let answer = if version >= 4 {
                                    answer.with_leader_epoch(epoch)
                                } else {
                                    answer
                                };
                                let (offset, timestamp) =
                                    found.map_or((-1, -1), |(o, t)| (as_i64(o), t));
                                answer
                                    .with_error_code(NONE)
                                    .with_offset(offset)
                                    .with_timestamp(timestamp)
                            }
                        },
                    }
                })
                .collect();
            topics.push(
                ListOffsetsTopicResponse::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
        }
        encode(&ListOffsetsResponse::default().with_topics(topics), version)
    }))
}

fn as_i64(offset: RecordOffset) -> i64 {
    i64::try_from(offset.0).unwrap_or(i64::MAX)
}
