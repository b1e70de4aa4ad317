//! Produce: each partition's record batch is validated and appended to its log by the data
//! plane, as it is (the broker rewrites only the base offset), before the connection reads its
//! next request. acks = -1 ("all") answers once every backup holds the batch, which is what
//! Tailstream's ack always means; acks = 1 answers once the owner appended it (its consumers
//! still see it only once replicated); acks = 0 gets no answer at all.
//!
//! A producer with idempotence (a producer id from InitProducerId) has its batches checked
//! against the log's producer table, per partition as Kafka does: a retried batch is answered
//! with where it first landed and is not appended again.

use super::{Answer, encode};
use crate::errors::{NONE, data_error_code};
use crate::quotas::{Pacing, QuotaKind};
use crate::shared::Kafka;
use crate::topics::{Partition, TopicError, partition};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use std::sync::Arc;
use std::time::Instant;
use tailstream_auth::Principal;
use tailstream_broker::data_plane::{CommitWaiter, Produced, StreamletRef};
use tailstream_identity::Access;
use tailstream_identity::ProducerIdCheck;
use tailstream_storage::ProducerOwner;
use tailstream_wire::compression::decompressed_on_this_thread;
use tailstream_wire::messages::AclOperation;

/// One partition's outcome before the answer: appended (maybe waiting for its replicas), or
/// refused with a Kafka error code.
enum Outcome {
    Appended {
        base_offset: i64,
        log_start_offset: i64,
        commit: Option<CommitWaiter>,
    },
    Refused(i16),
}

impl Outcome {
    fn is_refused(&self) -> bool {
        matches!(self, Outcome::Refused(_))
    }
}

struct PartitionOutcome {
    index: i32,
    outcome: Outcome,
}

/// The Kafka error a batch under a producer id not issued to `user` is refused with; `None`
/// where it may be written (or nothing is checked: authentication is off).
fn producer_refused(kafka: &Kafka, user: Option<&str>, batch: &[u8]) -> Option<i16> {
    let authorizer = kafka.authorizer.as_ref()?;
    match authorizer.check_producer(user, batch) {
        ProducerIdCheck::Allowed => None,
        // Learnt with the rules' first listing: missing only while the coordinator is away.
        ProducerIdCheck::KeyUnknown => Some(ResponseError::LeaderNotAvailable.code()),
        ProducerIdCheck::Refused(_) => {
            metrics::counter!(crate::metrics::PRODUCER_IDS_REFUSED).increment(1);
            Some(ResponseError::ClusterAuthorizationFailed.code())
        }
    }
}

/// Appends one partition's batch; its outcome, and what validating it decompressed (the
/// append runs on this thread without a pause, so the thread's meter's difference is its).
fn append(
    kafka: &Kafka,
    target: &Partition,
    batch: &[u8],
    owner: ProducerOwner,
    started: Instant,
) -> (Outcome, u64) {
    let meter = decompressed_on_this_thread();
    let appended = kafka
        .plane
        .admit_current(target.stream, target.streamlet)
        .and_then(|streamlet| {
            let at = StreamletRef {
                stream: target.stream,
                streamlet: target.streamlet,
                epoch: streamlet.epoch(),
            };
            let produced = kafka
                .plane
                .produce_to_log(at, target.log, batch, owner, started)?;
            let (first, _) = streamlet.log(target.log)?.bounds();
            Ok((produced, first))
        });
    let decompressed = decompressed_on_this_thread().saturating_sub(meter);
    let outcome = match appended {
        Ok((produced, first)) => appended_outcome(produced, first),
        Err(error) => Outcome::Refused(data_error_code(&error)),
    };
    (outcome, decompressed)
}

struct TopicOutcome {
    name: kafka_protocol::messages::TopicName,
    partitions: Vec<PartitionOutcome>,
}

pub(crate) async fn answer(
    kafka: &Arc<Kafka>,
    access: &Access,
    version: i16,
    request: ProduceRequest,
    principal: &Principal,
    pacing: Pacing<'_>,
) -> Answer {
    let Pacing {
        throttle_ms,
        decompression,
    } = pacing;
    let user = match principal {
        Principal::User(user) => Some(user.as_str()),
        Principal::Anonymous => None,
    };
    // A producer id is bound to the user it was issued to (checked with the binding key), and
    // in each log to the user who first writes under it.
    let owner = user.map_or(ProducerOwner::ANYONE, ProducerOwner::user);
    let acks = request.acks;
    let ack_timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
    let refuse_all = if request.transactional_id.is_some() {
        // Transactions are not served (ApiVersions does not offer them): refused for good, as
        // FindCoordinator and InitProducerId refuse a transactional producer.
        Some(ResponseError::TransactionalIdAuthorizationFailed.code())
    } else if !matches!(acks, -1..=1) {
        Some(ResponseError::InvalidRequiredAcks.code())
    } else {
        None
    };
    let started = Instant::now();
    let mut topics = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let resolved = match refuse_all {
            Some(code) => Err(TopicError {
                code,
                message: String::new(),
            }),
            None if !access.topic(AclOperation::Write, topic.name.as_str()) => Err(TopicError {
                code: crate::errors::topic_denied(access),
                message: String::new(),
            }),
            None => {
                let create = access
                    .may_create_topic(topic.name.as_str())
                    .then_some(principal);
                let highest = crate::topics::highest(topic.partition_data.iter().map(|p| p.index));
                kafka
                    .topics
                    .route(topic.name.as_str(), create, highest)
                    .await
            }
        };
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let outcome = match &resolved {
                Err(error) => Outcome::Refused(error.code),
                Ok(stream) => match (partition(stream, data.index), data.records) {
                    (None, _) => Outcome::Refused(ResponseError::UnknownTopicOrPartition.code()),
                    (Some(_), None) => Outcome::Refused(ResponseError::CorruptMessage.code()),
                    (Some(target), Some(batch)) => match producer_refused(kafka, user, &batch) {
                        Some(code) => Outcome::Refused(code),
                        None => {
                            // While the connection owes decompression, the next batch waits:
                            // however many batches one request carries, the broker
                            // decompresses at the connection's rate.
                            let owed = decompression.charge(0, tokio::time::Instant::now());
                            if !owed.is_zero() {
                                let kind = QuotaKind::Decompress.name();
                                metrics::counter!(crate::metrics::THROTTLED_MS, "kind" => kind)
                                    .increment(owed.as_millis() as u64);
                                tokio::time::sleep(owed).await;
                            }
                            let (outcome, work) = append(kafka, &target, &batch, owner, started);
                            decompression.charge(work, tokio::time::Instant::now());
                            if outcome.is_refused() {
                                // The cached routing may be stale (the streamlet moved).
                                kafka.topics.forget(topic.name.as_str());
                            }
                            outcome
                        }
                    },
                },
            };
            partitions.push(PartitionOutcome {
                index: data.index,
                outcome,
            });
        }
        metrics::counter!(crate::metrics::PRODUCED_BATCHES).increment(partitions.len() as u64);
        topics.push(TopicOutcome {
            name: topic.name,
            partitions,
        });
    }
    match acks {
        0 => Answer::Silent,
        1 => Answer::Ready(encode(&response(topics, version, throttle_ms), version)),
        _ => Answer::Later(Box::pin(async move {
            // The request's timeout covers all its partitions, not each.
            let deadline = started + ack_timeout;
            for topic in &mut topics {
                for partition in &mut topic.partitions {
                    if let Outcome::Appended { commit, .. } = &mut partition.outcome
                        && let Some(waiter) = commit.take()
                        && let Err(error) = waiter
                            .within(deadline.saturating_duration_since(Instant::now()))
                            .wait()
                            .await
                    {
                        partition.outcome = Outcome::Refused(data_error_code(&error));
                    }
                }
            }
            encode(&response(topics, version, throttle_ms), version)
        })),
    }
}

fn appended_outcome(produced: Produced, first: tailstream_wire::RecordOffset) -> Outcome {
    Outcome::Appended {
        base_offset: i64::try_from(produced.location.base_offset.0).unwrap_or(i64::MAX),
        log_start_offset: i64::try_from(first.0).unwrap_or(i64::MAX),
        commit: Some(produced.commit),
    }
}

fn response(topics: Vec<TopicOutcome>, version: i16, throttle_ms: i32) -> ProduceResponse {
    let responses = topics
        .into_iter()
        .map(|topic| {
            let partition_responses = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let answer = PartitionProduceResponse::default().with_index(p.index);
                    match p.outcome {
                        Outcome::Refused(code) => answer.with_error_code(code),
                        Outcome::Appended {
                            base_offset,
                            log_start_offset,
                            ..
                        } => {
                            let answer = answer.with_error_code(NONE).with_base_offset(base_offset);
                            if version >= 5 {
                                answer.with_log_start_offset(log_start_offset)
                            } else {
                                answer
                            }
                        }
                    }
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_partition_responses(partition_responses)
        })
        .collect();
    ProduceResponse::default()
        .with_responses(responses)
        .with_throttle_time_ms(throttle_ms)
}
