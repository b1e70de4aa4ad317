//! The Kafka listener's metric names (the connection metrics are the shared accept loop's,
//! labelled `listener="kafka"`).

/// Requests served, by API.
pub const REQUESTS: &str = "tailstream_kafka_requests_total";
/// Requests refused before decoding (malformed, hostile, unserved): each closed its
/// connection.
pub const REQUESTS_REFUSED: &str = "tailstream_kafka_requests_refused_total";
/// Record batches produced through the Kafka listener.
pub const PRODUCED_BATCHES: &str = "tailstream_kafka_produced_batches_total";
