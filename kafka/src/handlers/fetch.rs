//! Fetch: the committed record batches of each partition from the one that holds the fetch
//! offset, sent as the segment bytes they are stored in (never decoded or copied), with the
//! partition's high watermark (its committed end) and log start offset (after retention).
//! Waits, up to `max_wait_ms`, until `min_bytes` are there. With a fetch session (KIP-227,
//! `fetch_sessions`), the partitions read are the session's, and an incremental answer carries
//! only those with something new.

use super::Answer;
use crate::errors::{NONE, data_error_code};
use crate::fetch_sessions::{Answered, Ask, FINAL_EPOCH, FetchedPartition, NO_SESSION, Plan};
use crate::leader_epochs::{check, leader_epoch};
use crate::shared::Kafka;
use crate::topics::{Partition, partition};
use futures::FutureExt;
use futures::future::select_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::FetchRequest;
use std::sync::Arc;
use std::time::Duration;
use tailstream_auth::Principal;
use tailstream_identity::Access;
use tailstream_kafka_wire::{FetchHeader, PartitionAnswer, TopicAnswer, encode_fetch_response};
use tailstream_storage::CommitPoint;
use tailstream_wire::RecordOffset;
use tailstream_wire::messages::AclOperation;
use tokio::sync::watch;
use tokio::time::Instant;

/// One partition of the fetch, resolved once.
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
    principal: Principal,
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
        let mut header = FetchHeader {
            throttle_ms,
            error_code: NONE,
            session_id: NO_SESSION,
        };
        let plan = match begin_session(&kafka, &principal, request) {
            Ok(plan) => plan,
            Err(code) => {
                header.error_code = code;
                return Ok(encode_fetch_response(version, &header, &[]));
            }
        };
        header.session_id = plan.session_id;
        let wanted = resolve(&kafka, &access, &plan.partitions).await;
        loop {
            let (answers, bytes, failed, mut commits) = read_once(&kafka, &wanted, max_bytes);
            let now = Instant::now();
            if bytes >= min_bytes || failed || now >= deadline || commits.is_empty() {
                let answers = finish_session(&kafka, &plan, answers);
                return Ok(encode_fetch_response(version, &header, &answers));
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

/// The request as the sessions see it, and what they plan: the partitions to read (the
/// session's, for an incremental fetch) or the fetch's session error.
fn begin_session(kafka: &Kafka, principal: &Principal, request: FetchRequest) -> Result<Plan, i16> {
    let named = request
        .topics
        .into_iter()
        .flat_map(|topic| {
            let name: Arc<str> = Arc::from(topic.topic.as_str());
            topic.partitions.into_iter().map(move |p| FetchedPartition {
                topic: name.clone(),
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                leader_epoch: p.current_leader_epoch,
            })
        })
        .collect();
    let forgotten = request
        .forgotten_topics_data
        .into_iter()
        .flat_map(|topic| {
            let name: Arc<str> = Arc::from(topic.topic.as_str());
            topic.partitions.into_iter().map(move |p| (name.clone(), p))
        })
        .collect();
    if request.session_id == NO_SESSION && request.session_epoch == FINAL_EPOCH {
        // Sessionless (every fetch before v7, and librdkafka's): no lock taken.
        metrics::counter!(crate::metrics::FETCHES, "kind" => "sessionless").increment(1);
        return Ok(Plan {
            session_id: NO_SESSION,
            incremental: false,
            partitions: named,
        });
    }
    let ask = Ask {
        session_id: request.session_id,
        epoch: request.session_epoch,
        named,
        forgotten,
    };
    let mut sessions = kafka
        .fetch_sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let plan = sessions.begin(
        principal,
        ask,
        std::time::Instant::now(),
        rand::random::<i32>,
    );
    let (count, partitions) = sessions.len();
    drop(sessions);
    metrics::gauge!(crate::metrics::FETCH_SESSIONS).set(count as f64);
    metrics::gauge!(crate::metrics::FETCH_SESSION_PARTITIONS).set(partitions as f64);
    let kind = match &plan {
        Ok(plan) if plan.incremental => "incremental",
        Ok(plan) if plan.session_id != NO_SESSION => "full",
        Ok(_) => "sessionless",
        Err(_) => "refused",
    };
    metrics::counter!(crate::metrics::FETCHES, "kind" => kind).increment(1);
    if let Err(code) = plan {
        let reason = if code == ResponseError::InvalidFetchSessionEpoch.code() {
            "epoch"
        } else {
            "not_found"
        };
        metrics::counter!(crate::metrics::FETCH_SESSION_ERRORS, "reason" => reason).increment(1);
    }
    plan
}

/// Tells the session what was answered, and keeps only the partitions it says the answer
/// carries (all of them, unless the fetch is incremental).
fn finish_session(kafka: &Kafka, plan: &Plan, answers: Vec<TopicAnswer>) -> Vec<TopicAnswer> {
    if plan.session_id == NO_SESSION {
        return answers;
    }
    let answered = answers
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| Answered {
            error_code: p.error_code,
            high_watermark: p.high_watermark,
            log_start_offset: p.log_start_offset,
            has_records: !p.batches.is_empty(),
        });
    let carried = kafka
        .fetch_sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .finish(plan, answered);
    let mut carried = carried.into_iter();
    answers
        .into_iter()
        .filter_map(|mut topic| {
            // `carried` has one flag per partition, in this order.
            topic.partitions.retain(|_| carried.next().unwrap_or(true));
            (!topic.partitions.is_empty()).then_some(topic)
        })
        .collect()
}

/// The plan's partitions, each routed once per topic (a run of one topic's partitions).
async fn resolve(
    kafka: &Kafka,
    access: &Access,
    partitions: &[FetchedPartition],
) -> Vec<WantedTopic> {
    let mut wanted = Vec::new();
    for run in partitions.chunk_by(|a, b| a.topic == b.topic) {
        let topic = &*run[0].topic;
        let stream = kafka
            .topics
            .route_if(
                access,
                AclOperation::Read,
                topic,
                crate::topics::highest(run.iter().map(|p| p.partition)),
            )
            .await;
        let partitions = run
            .iter()
            .map(|p| Wanted {
                index: p.partition,
                target: match &stream {
                    Err(error) => Err(error.code),
                    Ok(stream) => partition(stream, p.partition)
                        .ok_or(ResponseError::UnknownTopicOrPartition.code()),
                },
                offset: p.fetch_offset,
                leader_epoch: p.leader_epoch,
                max_bytes: usize::try_from(p.max_bytes).unwrap_or(0).max(1),
            })
            .collect();
        wanted.push(WantedTopic {
            name: topic.to_owned(),
            partitions,
        });
    }
    wanted
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
