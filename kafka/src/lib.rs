//! tailstream-kafka: the Kafka protocol front end of a broker, so that Kafka's own clients
//! (librdkafka, kcat, kafka-python, ...) produce and consume through Tailstream unchanged.
//!
//! - [`protocol`]: bytes in and out, no I/O: the versions served, the request header, the
//!   guard that bounds every length before `kafka-protocol` decodes a request, and the fetch
//!   answer encoded around the stored batches without copying them.
//! - [`front_end`]: binds the listener and serves it through the shared accept loop;
//!   `connection` reads, dispatches and answers one client's requests in order.
//! - `handlers`: one module per API, over the broker's data plane and the coordinator.
//! - `topics`: topic = stream, partition = one log of one streamlet; metadata from the
//!   coordinator. `errors`: Kafka's names for Tailstream's refusals. `metrics`: metric names.
mod connection;
mod errors;
pub mod front_end;
mod handlers;
mod metrics;
pub mod protocol;
mod topics;

pub use front_end::{KafkaListener, bind};
