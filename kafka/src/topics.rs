//! Topics as Kafka clients see them: a topic is a stream; partition `streamlet * Q + log` is
//! one log of one streamlet (only a log has its own record offsets), and its leader is the
//! streamlet's owner. Stream metadata comes from the coordinator. What routing needs (its id,
//! Q, its streamlet count) is cached: the id and Q never change, and the count only grows
//! (CreatePartitions), so a request for a partition past the cached count asks the
//! coordinator again, at most once per `GROWTH_CHECK_INTERVAL` per topic. A Metadata request
//! asks afresh every time (owners move when a broker crashes).

use crate::budget::BucketsByPrincipal;
use crate::errors::cluster_error_code;
use kafka_protocol::ResponseError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_auth::Principal;
use tailstream_config::KafkaConfig;
use tailstream_identity::Access;
use tailstream_stubs::{CoordinatorClient, StubError};
use tailstream_wire::messages::{AclOperation, StreamConfig, StreamMetadata};
use tailstream_wire::{LogId, Status, StreamId, StreamletId};

/// Topics cached at most: beyond it, the cache starts afresh (a bound, not a policy).
const CACHED_TOPICS_MAX: usize = 4096;

/// How often a request naming a partition past a topic's cached count makes the broker ask
/// the coordinator whether the topic grew: clients that name partitions that do not exist
/// cost the coordinator one question per topic per interval, whatever their rate.
const GROWTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Where a Kafka partition lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Partition {
    pub stream: StreamId,
    pub streamlet: StreamletId,
    pub log: LogId,
}

/// A partition index of a stream, if the stream has it.
pub(crate) fn partition(metadata: &StreamMetadata, index: i32) -> Option<Partition> {
    let logs = metadata.config.logs_per_streamlet.max(1);
    let index = u32::try_from(index).ok()?;
    let streamlet = index / logs;
    if streamlet as usize >= metadata.streamlets.len() {
        return None;
    }
    Some(Partition {
        stream: metadata.id,
        streamlet: StreamletId(streamlet),
        log: LogId(index % logs),
    })
}

/// The highest of the partitions a request names for one topic (-1 for none): what
/// `Topics::route` checks the cached count against.
pub(crate) fn highest(partitions: impl Iterator<Item = i32>) -> i32 {
    partitions.max().unwrap_or(-1)
}

/// The partition count of a stream: its streamlets times Q.
pub(crate) fn partition_count(metadata: &StreamMetadata) -> i32 {
    let count = metadata.streamlets.len() as u64 * u64::from(metadata.config.logs_per_streamlet);
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// Topic metadata, from the coordinator.
#[derive(Debug)]
pub(crate) struct Topics {
    coordinator: Arc<CoordinatorClient>,
    /// Each topic's metadata and when it was fetched.
    cache: Mutex<HashMap<String, (Arc<StreamMetadata>, Instant)>>,
    auto_create: bool,
    auto_create_streamlets: u32,
    /// This broker's auto-creations, per principal: a client that names new topics without
    /// end creates them at this pace at most, not at the coordinator's, and spends only its
    /// own user's budget (clients without a user share one).
    auto_creates: Mutex<BucketsByPrincipal>,
    /// Topics one Metadata request may name (`kafka.metadata_topics_max`).
    pub names_per_request_max: usize,
    defaults: StreamConfig,
}

/// Why a topic could not be had, as a Kafka error code and a message.
#[derive(Clone, Debug)]
pub(crate) struct TopicError {
    pub code: i16,
    pub message: String,
}

impl From<StubError> for TopicError {
    fn from(error: StubError) -> Self {
        TopicError {
            code: cluster_error_code(&error),
            message: error.to_string(),
        }
    }
}

impl Topics {
    pub fn new(
        coordinator: Arc<CoordinatorClient>,
        config: &KafkaConfig,
        defaults: StreamConfig,
    ) -> Self {
        Self {
            coordinator,
            cache: Mutex::new(HashMap::new()),
            auto_create: config.auto_create_topics,
            auto_create_streamlets: config.auto_create_streamlets,
            auto_creates: Mutex::new(BucketsByPrincipal::new(
                config.auto_creates_per_second,
                config.auto_create_burst,
            )),
            names_per_request_max: config.metadata_topics_max as usize,
            defaults,
        }
    }

    fn cached(&self, name: &str) -> Option<(Arc<StreamMetadata>, Instant)> {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    fn remember(&self, metadata: Arc<StreamMetadata>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHED_TOPICS_MAX {
            cache.clear();
        }
        cache.insert(metadata.name.clone(), (metadata, Instant::now()));
    }

    /// What routing needs of `name` (cached), creating the topic if it does not exist and
    /// `create` names who may (with auto-creation on; charged to their budget). `highest` is
    /// the highest partition the request names: past the cached count, the topic may have
    /// grown since it was cached (see the module's note).
    pub async fn route(
        &self,
        name: &str,
        create: Option<&Principal>,
        highest: i32,
    ) -> Result<Arc<StreamMetadata>, TopicError> {
        let Some((metadata, fetched)) = self.cached(name) else {
            return self.fresh(name, create).await;
        };
        if highest < partition_count(&metadata) || fetched.elapsed() < GROWTH_CHECK_INTERVAL {
            return Ok(metadata);
        }
        // A growth check: it never creates, and one that fails keeps the cached copy for
        // another interval (so a coordinator that cannot answer is asked once a second per
        // topic, not once per request), unless the topic is gone.
        match self.fresh(name, None).await {
            Ok(fresh) => Ok(fresh),
            Err(error) if error.code == ResponseError::UnknownTopicOrPartition.code() => {
                self.forget(name);
                Err(error)
            }
            Err(_) => {
                self.remember(metadata.clone());
                Ok(metadata)
            }
        }
    }

    /// What routing needs of `name` (cached, never creating it) if `access` allows
    /// `operation` on it; else the refusal the client is owed (see `errors::topic_denied`).
    pub async fn route_if(
        &self,
        access: &Access,
        operation: AclOperation,
        name: &str,
        highest: i32,
    ) -> Result<Arc<StreamMetadata>, TopicError> {
        if !access.topic(operation, name) {
            return Err(TopicError {
                code: crate::errors::topic_denied(access),
                message: String::new(),
            });
        }
        self.route(name, None, highest).await
    }

    /// `name` as the coordinator has it now (owners and their states too), creating it if it
    /// does not exist and `create` names who may.
    pub async fn fresh(
        &self,
        name: &str,
        create: Option<&Principal>,
    ) -> Result<Arc<StreamMetadata>, TopicError> {
        match self.coordinator.refresh_stream(name).await {
            Ok(metadata) => {
                self.remember(metadata.clone());
                Ok(metadata)
            }
            Err(error) if error.status() == Some(Status::UnknownStream) && self.auto_create => {
                let Some(creator) = create else {
                    return Err(error.into());
                };
                if !self.charge_creation(creator) {
                    metrics::counter!(crate::metrics::AUTO_CREATES_REFUSED, "reason" => "rate")
                        .increment(1);
                    // What Kafka answers for a topic being created: every client retries it
                    // quietly, and the topic is created once the budget refills.
                    return Err(TopicError {
                        code: ResponseError::LeaderNotAvailable.code(),
                        message: format!(
                            "{creator}'s topic auto-creation budget on this broker is spent (kafka.auto_creates_per_second)"
                        ),
                    });
                }
                self.create(name).await
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Charges one topic creation (auto-created or asked for with CreateTopics) to
    /// `creator`'s budget on this broker; false when it is spent.
    pub fn charge_creation(&self, creator: &Principal) -> bool {
        self.auto_creates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(creator, Instant::now())
    }

    /// The stream settings a topic gets where its creator names none, and the streamlets
    /// of a topic created without a partition count.
    pub fn defaults(&self) -> (&StreamConfig, u32) {
        (&self.defaults, self.auto_create_streamlets)
    }

    /// Creates `name` as `tailstream stream create` would without flags: the configured stream
    /// defaults, replicated as the cluster allows (`default_replicas` of the live brokers,
    /// min_insync_replicas at its default), so an acks=all producer to a topic it never
    /// created does not lose it with one broker.
    async fn create(&self, name: &str) -> Result<Arc<StreamMetadata>, TopicError> {
        let brokers = self.coordinator.list_brokers().await?;
        let live = brokers.iter().filter(|b| b.alive && !b.crashed).count();
        let mut config = self.defaults.clone();
        config.replicas = tailstream_config::default_replicas(live as u32);
        config.min_insync_replicas = 0;
        let created = self
            .coordinator
            .create_stream(name, self.auto_create_streamlets, config)
            .await;
        let metadata = match created {
            Ok(metadata) => metadata,
            // Another broker created it first.
            Err(error) if error.status() == Some(Status::StreamExists) => {
                self.coordinator.refresh_stream(name).await?
            }
            Err(error) if error.status() == Some(Status::QuotaExceeded) => {
                metrics::counter!(crate::metrics::AUTO_CREATES_REFUSED, "reason" => "limit")
                    .increment(1);
                return Err(TopicError {
                    code: ResponseError::UnknownTopicOrPartition.code(),
                    message: error.to_string(),
                });
            }
            Err(error) => return Err(error.into()),
        };
        tracing::info!(
            topic = name,
            partitions = partition_count(&metadata),
            "topic auto-created"
        );
        self.remember(metadata.clone());
        Ok(metadata)
    }

    /// Every stream, as the coordinator has it now.
    pub async fn all(&self) -> Result<Vec<Arc<StreamMetadata>>, TopicError> {
        let streams = self.coordinator.list_streams().await?;
        let streams: Vec<_> = streams.into_iter().map(Arc::new).collect();
        for stream in &streams {
            self.remember(stream.clone());
        }
        Ok(streams)
    }

    /// Forgets what is cached of `name` (its streamlets' owners changed).
    pub fn forget(&self, name: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::ServerId;
    use tailstream_wire::messages::{PlacementState, StreamletPlacement};

    fn stream(streamlets: u32, logs: u32) -> StreamMetadata {
        StreamMetadata {
            id: StreamId(7),
            name: "t".into(),
            config: StreamConfig {
                logs_per_streamlet: logs,
                replicas: 0,
                segment_size_bytes: 1 << 20,
                segments_per_group: 4,
                retention_bytes: 0,
                retention_ms: 0,
                min_insync_replicas: 0,
            },
            streamlets: (0..streamlets)
                .map(|s| StreamletPlacement {
                    streamlet: StreamletId(s),
                    owner: ServerId::new(s, 1),
                    owner_addr: String::new(),
                    epoch: tailstream_wire::OwnershipEpoch(1),
                    state: PlacementState::Serving,
                    detail: String::new(),
                    replication: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn partitions_are_streamlet_times_q_plus_log() {
        let metadata = stream(3, 4);
        assert_eq!(partition_count(&metadata), 12);
        let p = partition(&metadata, 9).unwrap();
        assert_eq!((p.streamlet, p.log), (StreamletId(2), LogId(1)));
        assert_eq!(partition(&metadata, 12), None);
        assert_eq!(partition(&metadata, -1), None);
        let every: Vec<_> = (0..12).map(|i| partition(&metadata, i).unwrap()).collect();
        for (i, p) in every.iter().enumerate() {
            assert_eq!(p.streamlet.0 * 4 + p.log.0, i as u32);
        }
    }
}
