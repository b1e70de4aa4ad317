//! tailstream-kafka: the Kafka protocol front end of a broker, so that Kafka's own clients
//! (librdkafka, kcat, kafka-python, ...) produce and consume through Tailstream unchanged.
//!
//! - [`protocol`]: bytes in and out, no I/O: the versions served, the request header, the
//!   guard that bounds every length before `kafka-protocol` decodes a request, and the fetch
//!   answer encoded around the stored batches without copying them.
pub mod protocol;
