//! [`ProducerBuilder`]: how a producer batches, pipelines and retries.

use super::Producer;
use crate::cluster::Cluster;
use crate::error::ClientError;
use std::sync::Arc;
use tailstream_config::ProducerConfig;

/// Configures a [`Producer`]; made by [`crate::Client::producer`]. Unset settings come from
/// the client's producer defaults ([`ProducerConfig::default`] unless the client was given
/// others).
///
/// ```no_run
/// # async fn demo() -> Result<(), tailstream_client::ClientError> {
/// let client = tailstream_client::Client::connect("127.0.0.1:7400").await?;
/// // Low latency: send a batch as soon as a request slot is free.
/// let fast = client.producer("clicks").linger_ms(0).build().await?;
/// // High throughput: wait up to 5 ms for 256 KiB batches.
/// let bulk = client
///     .producer("clicks")
///     .linger_ms(5)
///     .batch_size_bytes(256 << 10)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ProducerBuilder {
    cluster: Arc<Cluster>,
    stream: String,
    config: ProducerConfig,
}

impl ProducerBuilder {
    pub(crate) fn new(cluster: Arc<Cluster>, stream: &str, config: ProducerConfig) -> Self {
        Self {
            cluster,
            stream: stream.to_owned(),
            config,
        }
    }

    /// How long a batch that is not full waits for more records before it is sent (0: as
    /// soon as its streamlet has a free request slot, as Kafka's `linger.ms = 0`).
    pub fn linger_ms(mut self, linger_ms: u64) -> Self {
        self.config.linger_ms = linger_ms;
        self
    }

    /// A batch is sent once it holds this many bytes (capped at what a segment takes).
    pub fn batch_size_bytes(mut self, bytes: u32) -> Self {
        self.config.batch_size_bytes = bytes;
        self
    }

    /// Requests per streamlet in flight at once (pipelining; retries keep their order).
    pub fn max_in_flight(mut self, requests: u32) -> Self {
        self.config.max_in_flight = requests;
        self
    }

    /// Bytes of records buffered before `send` waits for acks (back-pressure).
    pub fn buffer_bytes_max(mut self, bytes: u64) -> Self {
        self.config.buffer_bytes_max = bytes;
        self
    }

    /// A record not acknowledged this long after `send` fails with
    /// [`ClientError::DeliveryTimeout`]; until then failed requests are retried.
    pub fn delivery_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.config.delivery_timeout_ms = timeout_ms;
        self
    }

    /// Replaces every producer setting at once (e.g. the `[producer]` table of a config file).
    pub fn config(mut self, config: ProducerConfig) -> Self {
        self.config = config;
        self
    }

    /// Checks the settings, learns the stream's metadata and a producer id, and starts the
    /// producer's sender task.
    pub async fn build(self) -> Result<Producer, ClientError> {
        Producer::new(self.cluster, &self.stream, self.config).await
    }
}
