//! tailstream-kafka: the Kafka protocol front end of a broker, so that Kafka's own clients
//! (librdkafka, kcat, kafka-python, ...) produce and consume through Tailstream unchanged.
//!
//! The protocol itself (versions served, the guard that bounds every length before
//! `kafka-protocol` decodes a request, the zero-copy fetch answer) is `tailstream-kafka-wire`.
//! - [`front_end`]: binds the listener and serves it through the shared accept loop;
//!   `connection` reads, dispatches and answers one client's requests in order, after
//!   `authenticate` (SASL PLAIN and SCRAM, where the listener requires it, with what
//!   `authenticator` holds) against the broker's credentials (`tailstream-identity`, looked
//!   up from the coordinator, kept briefly); each request is checked against the
//!   coordinator's access control rules (`tailstream_identity::Authorizer`); `frames` reads a
//!   request and writes an answer for both phases.
//! - `handlers`: one module per API, over the broker's data plane and the coordinator.
//! - `shared`: what they all use: the broker's state every connection shares, a
//!   connection's limits.
//! - `topics`: topic = stream, partition = one log of one streamlet; metadata from the
//!   coordinator; auto-creation within a `budget` (a token bucket); `topic_configs` (pure):
//!   how CreateTopics' partition count, replication factor and configs become a stream's
//!   streamlets × Q and config, and how DescribeConfigs shows them; `topic_alter` (pure):
//!   what IncrementalAlterConfigs and AlterConfigs ask of a topic, as a retention change;
//!   `leader_epochs` (pure): a streamlet's ownership epoch as Kafka's leader epoch, and the
//!   check of a request's. `fetch_sessions` (pure): KIP-227 fetch sessions, so a fetch names
//!   only what moved and its answer carries only what changed. `errors`: Kafka's names
//!   for Tailstream's refusals. `quotas`: produce and fetch byte rates per principal, with
//!   Kafka's throttle_time_ms. `metrics`: metric names.
mod authenticate;
mod authenticator;
mod budget;
mod connection;
mod errors;
mod fetch_sessions;
mod frames;
pub mod front_end;
mod handlers;
mod leader_epochs;
mod metrics;
mod quotas;
mod shared;
mod topic_alter;
mod topic_configs;
mod topics;

pub use front_end::{KafkaListener, bind};
