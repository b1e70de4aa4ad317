//! DeleteRecords: moves partitions' log starts forward, as Kafka's admin clients'
//! `delete_records` asks. Each partition is checked here, on its owner, against its log: an
//! offset past the committed end (the high watermark) is OFFSET_OUT_OF_RANGE, -1 means the
//! high watermark, and an offset at or before the start changes nothing. The new starts of a
//! streamlet's logs are made durable by the coordinator (which keeps them with the streamlet's
//! placement, so every later owner, after a crash too, starts there) before this owner takes
//! them and answers the new low watermark. Needs Delete on the topic.

use super::{Answer, encode};
use crate::errors::{NONE, data_error_code};
use crate::shared::Kafka;
use crate::topics::{Partition, highest, partition};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_records_request::DeleteRecordsPartition;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tailstream_identity::Access;
use tailstream_storage::Streamlet;
use tailstream_stubs::StubError;
use tailstream_wire::messages::{AclOperation, LogStart, StreamMetadata};
use tailstream_wire::{RecordOffset, Status, StreamletId};
use tokio::time::Instant;

pub(crate) fn delete_records(
    kafka: Arc<Kafka>,
    access: Access,
    version: i16,
    request: DeleteRecordsRequest,
) -> Answer {
    Answer::Later(Box::pin(async move {
        // What is not durable by `timeout_ms` is answered REQUEST_TIMED_OUT, as in Kafka (it
        // may still land: a retry is harmless).
        let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0));
        let deadline = Instant::now() + timeout.min(TIMEOUT_MAX);
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.name.as_str();
            let stream = kafka
                .topics
                .route_if(
                    &access,
                    AclOperation::Delete,
                    name,
                    highest(topic.partitions.iter().map(|p| p.partition_index)),
                )
                .await;
            let results = match stream {
                Ok(stream) => delete_in(&kafka, &stream, &topic.partitions, deadline).await,
                Err(error) => topic
                    .partitions
                    .iter()
                    .map(|p| result(p.partition_index, error.code, -1))
                    .collect(),
            };
            topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(topic.name)
                    .with_partitions(results),
            );
        }
        encode(
            &DeleteRecordsResponse::default().with_topics(topics),
            version,
        )
    }))
}

fn result(partition: i32, error_code: i16, low_watermark: i64) -> DeleteRecordsPartitionResult {
    DeleteRecordsPartitionResult::default()
        .with_partition_index(partition)
        .with_error_code(error_code)
        .with_low_watermark(low_watermark)
}

fn as_i64(offset: RecordOffset) -> i64 {
    i64::try_from(offset.0).unwrap_or(i64::MAX)
}

/// One topic's partitions: each checked against its log; the starts that move, one
/// coordinator call per streamlet.
async fn delete_in(
    kafka: &Kafka,
    stream: &StreamMetadata,
    partitions: &[DeleteRecordsPartition],
    deadline: Instant,
) -> Vec<DeleteRecordsPartitionResult> {
    let mut results = Vec::with_capacity(partitions.len());
    let mut moving: BTreeMap<StreamletId, Moving> = BTreeMap::new();
    for wanted in partitions {
        let index = wanted.partition_index;
        let checked = check(kafka, stream, index, wanted.offset);
        match checked {
            Err(code) => results.push(result(index, code, -1)),
            Ok(Checked::AlreadyThere(first)) => results.push(result(index, NONE, as_i64(first))),
            Ok(Checked::Moves(streamlet, target, start)) => {
                let entry = moving.entry(target.streamlet).or_insert_with(|| Moving {
                    streamlet,
                    starts: Vec::new(),
                    answers: Vec::new(),
                });
                entry.starts.push(start);
                entry.answers.push(results.len());
                results.push(result(index, NONE, -1));
            }
        }
    }
    for (id, moved) in moving {
        let Moving {
            streamlet,
            starts,
            answers: answered,
        } = moved;
        let call = kafka
            .coordinator
            .delete_records(stream, id, streamlet.epoch(), starts.clone());
        let saved = match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::warn!(stream = %stream.name, streamlet = %id, %error, "records not deleted");
                Err(refusal_code(&error))
            }
            Err(_) => Err(ResponseError::RequestTimedOut.code()),
        };
        if saved.is_ok() {
            // Durable: this owner serves from the new starts at once (its assignment, pushed
            // by the coordinator, says the same).
            streamlet.set_log_starts(&starts);
        }
        for (slot, start) in answered.into_iter().zip(&starts) {
            let answer = &mut results[slot];
            match &saved {
                Ok(()) => {
                    answer.low_watermark = streamlet
                        .log(start.log)
                        .map_or(as_i64(start.offset), |log| as_i64(log.bounds().0));
                }
                Err(code) => answer.error_code = *code,
            }
        }
    }
    results
}

/// Longest a DeleteRecords waits for the coordinator, whatever its `timeout_ms`.
const TIMEOUT_MAX: Duration = Duration::from_secs(30);

/// Kafka's code for a coordinator's refusal: the stream was deleted (or recreated), or the
/// streamlet moved since its offsets were checked here (the client retries on the new
/// leader); anything else is retriable as a timeout.
fn refusal_code(error: &StubError) -> i16 {
    match error.status() {
        Some(Status::UnknownStream) => ResponseError::UnknownTopicOrPartition.code(),
        Some(Status::InvalidArgument) => ResponseError::NotLeaderOrFollower.code(),
        _ => ResponseError::RequestTimedOut.code(),
    }
}

/// One streamlet's starts to make durable, and which results they answer.
struct Moving {
    streamlet: Arc<Streamlet>,
    starts: Vec<LogStart>,
    answers: Vec<usize>,
}

enum Checked {
    /// The log starts at or past the offset already: its first offset.
    AlreadyThere(RecordOffset),
    /// The log's start moves to the offset.
    Moves(Arc<Streamlet>, Partition, LogStart),
}

/// Whether `index` is a partition this broker leads and `offset` (-1: the high watermark) is
/// within its log.
fn check(kafka: &Kafka, stream: &StreamMetadata, index: i32, offset: i64) -> Result<Checked, i16> {
    let target = partition(stream, index).ok_or(ResponseError::UnknownTopicOrPartition.code())?;
    let streamlet = kafka
        .plane
        .admit_current(target.stream, target.streamlet)
        .map_err(|e| data_error_code(&e))?;
    let log = streamlet
        .log(target.log)
        .map_err(|_| ResponseError::UnknownTopicOrPartition.code())?;
    let (first, committed) = log.bounds();
    let wanted = match offset {
        -1 => committed,
        offset => u64::try_from(offset)
            .ok()
            .map(RecordOffset)
            .filter(|o| *o <= committed)
            .ok_or(ResponseError::OffsetOutOfRange.code())?,
    };
    if wanted <= first {
        return Ok(Checked::AlreadyThere(first));
    }
    let start = LogStart {
        log: target.log,
        offset: wanted,
    };
    Ok(Checked::Moves(streamlet, target, start))
}
