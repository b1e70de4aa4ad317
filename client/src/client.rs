//! [`Client`]: the entry point. One client per cluster, shared by every producer and consumer
//! made from it (one connection per broker, one metadata cache).

use crate::cluster::Cluster;
use crate::consumer::ConsumerBuilder;
use crate::error::ClientError;
use crate::producer::ProducerBuilder;
use std::sync::Arc;
use tailstream_config::{ClientConfig, ConsumerConfig, ProducerConfig};
use tailstream_stubs::CoordinatorClient;
use tailstream_wire::StreamletId;
use tailstream_wire::messages::{
    BrokerInfo, DescribeConsumerGroupsResponse, ListGroupsResponse, LogStart, RecoverySummary,
    StreamConfig, StreamMetadata,
};

/// A connection to a Tailstream cluster, by its coordinator's address. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> Result<(), tailstream_client::ClientError> {
/// use tailstream_client::{Client, Status};
/// let client = Client::connect("127.0.0.1:7400").await?;
/// match client.create_stream("clicks", 4, client.stream_defaults()).await {
///     Ok(_) => {}
///     Err(error) if error.status() == Some(Status::StreamExists) => {}
///     Err(error) => return Err(error),
/// }
/// let producer = client.producer("clicks").linger_ms(5).build().await?;
/// producer.send(None, b"hello").await?.await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    cluster: Arc<Cluster>,
    settings: Arc<Settings>,
}

#[derive(Debug)]
struct Settings {
    client: ClientConfig,
    producer: ProducerConfig,
    consumer: ConsumerConfig,
    stream_defaults: StreamConfig,
}

impl Client {
    /// Connects to the cluster whose coordinator listens at `coordinator_addr`, with default
    /// settings. Fails if the coordinator cannot be reached.
    pub async fn connect(coordinator_addr: &str) -> Result<Client, ClientError> {
        Client::builder(coordinator_addr).connect().await
    }

    /// A client with settings of one's own; see [`ClientBuilder`].
    pub fn builder(coordinator_addr: &str) -> ClientBuilder {
        ClientBuilder {
            coordinator_addr: coordinator_addr.to_owned(),
            client: ClientConfig::default(),
            producer: ProducerConfig::default(),
            consumer: ConsumerConfig::default(),
            stream_defaults: tailstream_config::Config::embedded().stream_defaults,
            request_timeout_ms: None,
        }
    }

    /// A producer of `stream`; set it up and `build()` it.
    pub fn producer(&self, stream: &str) -> ProducerBuilder {
        ProducerBuilder::new(self.cluster.clone(), stream, self.settings.producer.clone())
    }

    /// A consumer of `stream`; set it up and `build()` it.
    pub fn consumer(&self, stream: &str) -> ConsumerBuilder {
        ConsumerBuilder::new(
            self.cluster.clone(),
            self.settings.client.clone(),
            stream,
            self.settings.consumer.clone(),
        )
    }

    /// The settings [`create_stream`](Self::create_stream) starts from (the embedded
    /// default config's `[stream_defaults]`, unless the builder was given others): change
    /// the fields that matter and pass it.
    pub fn stream_defaults(&self) -> StreamConfig {
        self.settings.stream_defaults.clone()
    }

    /// Creates stream `name` with `streamlets` streamlets. Fails with
    /// [`Status::StreamExists`](crate::Status::StreamExists) if it exists.
    pub async fn create_stream(
        &self,
        name: &str,
        streamlets: u32,
        settings: StreamConfig,
    ) -> Result<Arc<StreamMetadata>, ClientError> {
        Ok(self
            .cluster
            .coordinator()
            .create_stream(name, streamlets, settings)
            .await?)
    }

    /// Grows stream `name` to `streamlets` streamlets (Kafka's CreatePartitions): the new
    /// ones are placed like a creation's and existing records stay where they are. Producers
    /// and consumers made after it see them (those running keep the count they started with,
    /// and a group member picks them up when its group rebalances). Asking for the count the
    /// stream has changes nothing; fewer is refused.
    pub async fn add_streamlets(
        &self,
        name: &str,
        streamlets: u32,
    ) -> Result<Arc<StreamMetadata>, ClientError> {
        Ok(self
            .cluster
            .coordinator()
            .add_streamlets(name, streamlets)
            .await?)
    }

    /// Sets stream `name`'s retention limits, the settings that change after creation:
    /// `None` leaves one as it is, 0 is none, and `retention_bytes` is per streamlet. Its
    /// owners free by them from their next assignment (at once, or at their next heartbeat).
    pub async fn alter_retention(
        &self,
        name: &str,
        retention_ms: Option<u64>,
        retention_bytes: Option<u64>,
    ) -> Result<Arc<StreamMetadata>, ClientError> {
        Ok(self
            .cluster
            .coordinator()
            .alter_retention(name, retention_ms, retention_bytes)
            .await?)
    }

    /// Deletes the records of `streamlet`'s logs before the offsets of `starts` (Kafka's
    /// DeleteRecords): each log then starts there, on its owner and every later one. An
    /// offset past a log's committed end is refused (`OffsetOutOfRange`); one at or before its
    /// start changes nothing. Consumers that read by offset start there; a native consumer
    /// reading by position still reads retained records before it until retention frees them.
    pub async fn delete_records(
        &self,
        name: &str,
        streamlet: StreamletId,
        starts: Vec<LogStart>,
    ) -> Result<(), ClientError> {
        let stream = self.describe_stream(name).await?;
        let epoch = stream
            .streamlets
            .get(streamlet.0 as usize)
            .map(|p| p.epoch)
            .ok_or_else(|| {
                ClientError::OffsetOutOfRange(format!("stream {name:?} has no {streamlet}"))
            })?;
        // The coordinator does not know a log's end: its owner does. The coordinator refuses
        // the starts if the streamlet moved since `epoch`, so they land on the logs checked.
        let logs = self.describe_logs(&stream, streamlet).await?;
        for start in &starts {
            let end = logs
                .logs
                .iter()
                .find(|l| l.log == start.log)
                .map(|l| l.committed_offset);
            match end {
                Some(end) if start.offset <= end => {}
                Some(end) => {
                    return Err(ClientError::OffsetOutOfRange(format!(
                        "{streamlet} {} ends at offset {}, before {}",
                        start.log, end.0, start.offset.0
                    )));
                }
                None => {
                    return Err(ClientError::OffsetOutOfRange(format!(
                        "stream {name:?} {streamlet} has no {}",
                        start.log
                    )));
                }
            }
        }
        Ok(self
            .cluster
            .coordinator()
            .delete_records(&stream, streamlet, epoch, starts)
            .await?)
    }

    /// Stream `name`'s settings and where its streamlets are (fresh from the coordinator).
    pub async fn describe_stream(&self, name: &str) -> Result<Arc<StreamMetadata>, ClientError> {
        self.cluster.refresh_stream(name).await
    }

    /// Deletes stream `name`: its owners drop its streamlets and its backups its replicas.
    /// Producers and consumers of it fail from then on (`UnknownStream`).
    pub async fn delete_stream(&self, name: &str) -> Result<(), ClientError> {
        Ok(self.cluster.coordinator().delete_stream(name).await?)
    }

    /// The most recent broker crashes and their recoveries, with each phase's time.
    pub async fn list_recoveries(&self) -> Result<Vec<RecoverySummary>, ClientError> {
        Ok(self.cluster.coordinator().list_recoveries().await?)
    }

    /// Who leads the coordinators, in which term, and who stands by.
    pub async fn describe_leadership(
        &self,
    ) -> Result<tailstream_wire::messages::DescribeLeadershipResponse, ClientError> {
        Ok(self.cluster.coordinator().describe_leadership().await?)
    }

    /// Every stream.
    pub async fn list_streams(&self) -> Result<Vec<StreamMetadata>, ClientError> {
        Ok(self.cluster.coordinator().list_streams().await?)
    }

    /// Every broker the coordinator knows, alive or not.
    pub async fn list_brokers(&self) -> Result<Vec<BrokerInfo>, ClientError> {
        Ok(self.cluster.coordinator().list_brokers().await?)
    }

    /// The logs of one streamlet as its owner sees them: groups, segments, committed ends.
    pub async fn describe_logs(
        &self,
        stream: &StreamMetadata,
        streamlet: StreamletId,
    ) -> Result<ListGroupsResponse, ClientError> {
        self.cluster.describe_logs(stream, streamlet).await
    }

    /// Every consumer group (Kafka's and native) with its members, and how far it trails each
    /// partition it committed (`streamlet * Q + log`): consumer lag.
    pub async fn consumer_groups(&self) -> Result<DescribeConsumerGroupsResponse, ClientError> {
        Ok(self
            .cluster
            .coordinator()
            .describe_consumer_groups()
            .await?)
    }

    /// The coordinator stub underneath, for tools: one call per coordinator RPC, with typed
    /// errors. Applications want the methods above.
    pub fn coordinator(&self) -> &Arc<CoordinatorClient> {
        self.cluster.coordinator()
    }
}

/// Settings for a [`Client`] and the defaults of the producers and consumers made from it.
///
/// ```
/// use tailstream_client::{Client, ProducerConfig};
/// let client = Client::builder("127.0.0.1:7400")
///     .request_timeout_ms(2_000)
///     .producer_defaults(ProducerConfig { linger_ms: 1, ..ProducerConfig::default() })
///     .build();
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` or `connect`"]
pub struct ClientBuilder {
    coordinator_addr: String,
    client: ClientConfig,
    producer: ProducerConfig,
    consumer: ConsumerConfig,
    stream_defaults: StreamConfig,
    request_timeout_ms: Option<u64>,
}

impl ClientBuilder {
    /// Connection settings: in-flight requests, largest frame, connect timeout.
    pub fn config(mut self, client: ClientConfig) -> Self {
        self.client = client;
        self
    }

    /// How long a request may wait for its answer (default: the producer defaults'
    /// `request_timeout_ms`).
    pub fn request_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.request_timeout_ms = Some(timeout_ms);
        self
    }

    /// What [`Client::producer`] starts from.
    pub fn producer_defaults(mut self, producer: ProducerConfig) -> Self {
        self.producer = producer;
        self
    }

    /// What [`Client::consumer`] starts from.
    pub fn consumer_defaults(mut self, consumer: ConsumerConfig) -> Self {
        self.consumer = consumer;
        self
    }

    /// What [`Client::stream_defaults`] returns.
    pub fn stream_defaults(mut self, stream: StreamConfig) -> Self {
        self.stream_defaults = stream;
        self
    }

    /// Takes every client-side table of a whole configuration (`[client]`, `[producer]`,
    /// `[consumer]`, `[stream_defaults]`), as the `tailstream` CLI does with its config file.
    pub fn from_config(self, config: &tailstream_config::Config) -> Self {
        self.config(config.client.clone())
            .producer_defaults(config.producer.clone())
            .consumer_defaults(config.consumer.clone())
            .stream_defaults(config.stream_defaults.clone())
    }

    /// The client, connecting lazily: the first call reports an unreachable coordinator.
    pub fn build(self) -> Client {
        let request_timeout_ms = self
            .request_timeout_ms
            .unwrap_or(self.producer.request_timeout_ms);
        Client {
            cluster: Cluster::new(&self.coordinator_addr, &self.client, request_timeout_ms),
            settings: Arc::new(Settings {
                client: self.client,
                producer: self.producer,
                consumer: self.consumer,
                stream_defaults: self.stream_defaults,
            }),
        }
    }

    /// The client, connected to the coordinator now.
    pub async fn connect(self) -> Result<Client, ClientError> {
        let client = self.build();
        client.cluster.coordinator().connect().await?;
        Ok(client)
    }
}
