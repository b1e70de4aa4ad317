//! tailstream-client: produce to and consume from a Tailstream cluster.
//!
//! Start with [`Client::connect`]; make producers with [`Client::producer`] and consumers
//! with [`Client::consumer`]. Everything a program needs is re-exported here: ids, settings,
//! the server's [`Status`] codes.
//!
//! ```no_run
//! use std::time::Duration;
//! use tailstream_client::{Client, ClientError};
//!
//! # async fn demo() -> Result<(), ClientError> {
//! let client = Client::connect("127.0.0.1:7400").await?;
//! let producer = client.producer("clicks").linger_ms(5).build().await?;
//! let ack = producer.send(Some(b"user-1"), b"clicked").await?;
//! println!("stored at {:?}", ack.await?.location);
//!
//! let mut consumer = client.consumer("clicks").group("billing").from_beginning().build().await?;
//! for record in consumer.poll(Duration::from_secs(1)).await? {
//!     println!("{:?} {:?}", record.offset, record.value);
//! }
//! consumer.close().await?;
//! # Ok(()) }
//! ```
//!
//! Modules (private; their public types are re-exported at the root):
//! - `client`: [`Client`] and [`ClientBuilder`], the entry point and its settings.
//! - `cluster`: the handle underneath (crate-private): the coordinator stub
//!   ([`CoordinatorClient`], from `tailstream-stubs`, with its stream metadata cache) and the
//!   broker connection pool.
//! - `producer`: [`Producer`] and [`ProducerBuilder`]: batches per streamlet (size or
//!   linger), pipelines up to `max_in_flight` requests per streamlet, routes by key hash or
//!   round-robin, acks each record, retries idempotently (producer id + batch sequence).
//! - `consumer`: [`Consumer`] and [`ConsumerBuilder`]: pulls each log in order, verifies
//!   every checksum, tracks resumable positions, or shares a stream with the other members
//!   of a consumer group and resumes from its committed offsets.
//! - `routing`: which streamlet a record goes to.
//! - `error`: [`ClientError`], what any of it can fail with.

#![deny(missing_docs)]

mod client;
mod cluster;
mod consumer;
mod error;
mod producer;
mod routing;

pub use client::{Client, ClientBuilder};
pub use consumer::{ConsumedRecord, Consumer, ConsumerBuilder, LogPosition, StartFrom};
pub use error::ClientError;
pub use producer::{AckFuture, Producer, ProducerBuilder, RecordAck, RecordLocation};
pub use tailstream_config::{ClientConfig, ConsumerConfig, ProducerConfig};
/// Where the cluster requires authentication: `log_in_as(Some(Login::new(user, password,
/// ScramMechanism::Sha256)))` makes every connection this process's clients open from then on
/// authenticate as that user.
pub use tailstream_net::login::{Login, set_outgoing as log_in_as};
pub use tailstream_stubs::{CoordinatorClient, StubError};
pub use tailstream_wire::messages::{
    BrokerInfo, ConsumerGroupSummary, DescribeConsumerGroupsResponse, ListGroupsResponse,
    LogGroups, LogReplicaSet, LogStart, PartitionLagInfo, PlacementState, ProducerSession,
    RecoverySummary, ScramMechanism, SegmentReplicas, StreamConfig, StreamMetadata,
    StreamletPlacement,
};
pub use tailstream_wire::{
    GroupId, LogId, ProducerEpoch, ProducerId, RecordOffset, SegmentId, SegmentPosition, Status,
    StreamId, StreamletId,
};
