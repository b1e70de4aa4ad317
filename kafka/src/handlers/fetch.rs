//! Fetch: the committed record batches of each partition from the one that holds the fetch
//! offset, sent as the segment bytes they are stored in (never decoded or copied), with the
//! partition's high watermark (its committed end) and log start offset (after retention).
//! Waits, up to `max_wait_ms`, until `min_bytes` are there. No fetch sessions: every fetch
//! names its partitions, and the answer's session id is 0.

use super::Answer;
use crate::errors::{NONE, data_error_code};
use crate::leader_epochs::{check, leader_epoch};
use crate::shared::Kafka;
use crate::topics::{Partition, partition};
use futures::FutureExt;
use futures::future::select_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::FetchRequest;
use std::sync::Arc;
use std::time::Duration;
use tailstream_identity::Access;
use tailstream_kafka_wire::{PartitionAnswer, TopicAnswer, encode_fetch_response};
use tailstream_storage::CommitPoint;
use tailstream_wire::RecordOffset;
use tailstream_wire::messages::AclOperation;
use tokio::sync::watch;
use tokio::time::Instant;

/// One partition of the request, resolved once.
struct Wanted {
    index: i32,
    target: Result<Partition, i16>,
    offset: i64,
    max_bytes: usize,
    /// The leader epoch the client believes current (v9; -1: none, not checked).
    leader_epoch: i32,
}

struct WantedTopic {
    name: String,
    partitions: Vec<Wanted>,
}

pub(crate) fn answer(
    kafka: Arc<Kafka>,
    access: Access,
    wait_max: Duration,
    version: i16,
    request: FetchRequest,
    throttle_ms: i32,
) -> Answer {
    Answer::Later(Box::pin(async move {
        let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0));
        let deadline = Instant::now() + wait.min(wait_max);
        let max_bytes = usize::try_from(request.max_bytes)
            .unwrap_or(0)
            .min(kafka.broker.fetch_bytes_max as usize)
            .max(1);
        let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
        let mut wanted = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let stream = kafka
                .topics
                .route_if(
                    &access,
                    AclOperation::Read,
                    topic.topic.as_str(),
                    crate::topics::highest(topic.partitions.iter().map(|p| p.partition)),
                )
                .await;
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| Wanted {
                    index: p.partition,
                    target: match &stream {
                        Err(error) => Err(error.code),
                        Ok(stream) => partition(stream, p.partition)
                            .ok_or(ResponseError::UnknownTopicOrPartition.code()),
                    },
                    offset: p.fetch_offset,
                    leader_epoch: p.current_leader_epoch,
                    max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0).max(1),
                })
                .collect();
            wanted.push(WantedTopic {
                name: topic.topic.as_str().to_owned(),
                partitions,
            });
        }
        loop {
            let (answers, bytes, failed, mut commits) = read_once(&kafka, &wanted, max_bytes);
            let now = Instant::now();
            if bytes >= min_bytes || failed || now >= deadline || commits.is_empty() {
                return Ok(encode_fetch_response(version, &answers, throttle_ms));
            }
            // Long poll: until any of the partitions commits more, or the deadline.
            let changed = select_all(commits.iter_mut().map(|c| c.changed().boxed()));
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }))
}

/// One pass over every wanted partition: the answers, the bytes they carry, whether any
/// partition failed (answered at once), and the commit watches to long-poll on.
fn read_once(
    kafka: &Kafka,
    wanted: &[WantedTopic],
    max_bytes: usize,
) -> (
    Vec<TopicAnswer>,
    usize,
    bool,
    Vec<watch::Receiver<CommitPoint>>,
) {
    let mut total = 0usize;
    let mut failed = false;
    let mut commits = Vec::new();
    let answers = wanted
        .iter()
        .map(|topic| TopicAnswer {
            topic: topic.name.clone(),
            partitions: topic
                .partitions
                .iter()
                .map(|p| {
                    let budget = p.max_bytes.min(max_bytes.saturating_sub(total));
                    let answer = read_partition(kafka, p, budget, &mut commits);
                    total += answer.batches.iter().map(|b| b.len()).sum::<usize>();
                    failed |= answer.error_code != NONE;
                    answer
                })
                .collect(),
        })
        .collect();
    (answers, total, failed, commits)
}

fn read_partition(
    kafka: &Kafka,
    wanted: &Wanted,
    budget: usize,
    commits: &mut Vec<watch::Receiver<CommitPoint>>,
) -> PartitionAnswer {
    let failed = |code: i16| PartitionAnswer {
        partition: wanted.index,
        error_code: code,
        high_watermark: -1,
        log_start_offset: -1,
        batches: Vec::new(),
    };
    let target = match wanted.target {
        Ok(target) => target,
        Err(code) => return failed(code),
    };
    let streamlet = match kafka.plane.admit_current(target.stream, target.streamlet) {
        Ok(streamlet) => streamlet,
        Err(error) => return failed(data_error_code(&error)),
    };
    if let Some(code) = check(wanted.leader_epoch, leader_epoch(streamlet.epoch())) {
        return failed(code);
    }
    let log = match streamlet.log(target.log) {
        Ok(log) => log,
        Err(_) => return failed(ResponseError::UnknownTopicOrPartition.code()),
    };
    // Watched before reading, so a commit between the read and a long poll is not missed.
    let watch = log.subscribe_commits();
    let (first, committed) = log.bounds();
    let as_i64 = |offset: RecordOffset| i64::try_from(offset.0).unwrap_or(i64::MAX);
    let mut answer = PartitionAnswer {
        partition: wanted.index,
        error_code: NONE,
        high_watermark: as_i64(committed),
        log_start_offset: as_i64(first),
        batches: Vec::new(),
    };
    let in_range = u64::try_from(wanted.offset)
        .ok()
        .map(RecordOffset)
        .filter(|offset| *offset >= first && *offset <= committed);
    let Some(offset) = in_range else {
        answer.error_code = ResponseError::OffsetOutOfRange.code();
        return answer;
    };
    if offset == committed || budget == 0 {
        if budget > 0 {
            commits.push(watch);
        }
        return answer;
    }
    match kafka
        .plane
        .read_batches(&streamlet, target.log, offset, budget)
    {
        Ok(batches) => answer.batches = batches,
        Err(error) => answer.error_code = data_error_code(&error),
    }
    answer
}
