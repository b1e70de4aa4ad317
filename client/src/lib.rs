//! tailstream-client: talk to a Tailstream cluster.
//!
//! - [`cluster`]: [`Cluster`], the coordinator connection, stream metadata cache and broker
//!   connection pool every producer and consumer shares.
//! - [`producer`]: [`Producer`]: batches per streamlet (size or linger), pipelines up to
//!   `max_in_flight` requests per broker, routes by key hash or round-robin, acks each record,
//!   retries idempotently (producer id + batch sequence).
//! - [`consumer`]: [`Consumer`]: discovers groups, pulls each log in order, verifies every
//!   checksum, tracks resumable positions; [`GroupConsumer`]: a member of a consumer group
//!   that shares a stream with the other members and resumes from committed offsets.
//! - [`routing`]: which streamlet a record goes to.
//! - [`error`]: `ClientError`, what any of it can fail with.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tailstream_client::ClientError> {
//! use tailstream_client::{Cluster, Producer, Consumer, StartFrom, Membership};
//! let config = tailstream_config::Config::embedded();
//! let cluster = Cluster::new("127.0.0.1:7400", &config.client, config.producer.request_timeout_ms);
//! let producer = Producer::new(cluster.clone(), "events", config.producer.clone()).await?;
//! let ack = producer.send(Some(b"user-1"), b"clicked").await?;
//! println!("stored at {:?}", ack.await?.location);
//! let mut consumer = Consumer::new(
//!     cluster, "events", config.consumer.clone(), StartFrom::Beginning, Membership::default(), &[],
//! ).await?;
//! for record in consumer.poll(std::time::Duration::from_secs(1)).await? {
//!     println!("{:?} {:?}", record.offset, record.value);
//! }
//! # Ok(()) }
//! ```

pub mod cluster;
pub mod consumer;
pub mod error;
pub mod producer;
pub mod routing;

pub use cluster::Cluster;
pub use consumer::group::GroupConsumer;
pub use consumer::{ConsumedRecord, Consumer, LogPosition, Membership, StartFrom};
pub use error::ClientError;
pub use producer::{AckFuture, Producer, RecordAck, RecordLocation};
