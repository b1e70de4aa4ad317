//! The Kafka listener's metric names (the connection metrics are the shared accept loop's,
//! labelled `listener="kafka"`).

/// Requests served, by API.
pub const REQUESTS: &str = "tailstream_kafka_requests_total";
/// Requests refused before decoding (malformed, hostile, unserved): each closed its
/// connection.
pub const REQUESTS_REFUSED: &str = "tailstream_kafka_requests_refused_total";
/// Topics not auto-created, by reason (`rate`: this broker's auto-creation budget was spent;
/// `limit`: the cluster holds `coordinator.streams_max` streams).
pub const AUTO_CREATES_REFUSED: &str = "tailstream_kafka_auto_creates_refused_total";
/// Metadata requests that named more than `kafka.metadata_topics_max` topics: answered from
/// one listing of the streams, nothing auto-created.
pub const METADATA_TOO_MANY_TOPICS: &str = "tailstream_kafka_metadata_too_many_topics_total";
/// Record batches produced through the Kafka listener.
pub const PRODUCED_BATCHES: &str = "tailstream_kafka_produced_batches_total";
/// SASL authentications, by mechanism and outcome (`ok`, `failed`: wrong password, unknown
/// user or a broken exchange; `error`: the credentials could not be looked up).
pub const AUTHENTICATIONS: &str = "tailstream_kafka_authentications_total";
/// Authenticated connections closed because their user was deleted or its password changed
/// (`kafka.session_recheck_ms`).
pub const SESSIONS_REVOKED: &str = "tailstream_kafka_sessions_revoked_total";
/// Milliseconds connections were throttled (not read) for exceeding a byte-rate quota, by
/// kind (`produce`, `fetch`; `decompress`: a connection past
/// `kafka.decompressed_bytes_per_second_per_connection`).
pub const THROTTLED_MS: &str = "tailstream_kafka_throttled_milliseconds_total";
/// Batches refused because their producer id was not issued to the connection's user.
pub const PRODUCER_IDS_REFUSED: &str = "tailstream_kafka_producer_ids_refused_total";
/// Fetch sessions (KIP-227) this broker keeps, and partitions kept over all of them.
pub const FETCH_SESSIONS: &str = "tailstream_kafka_fetch_sessions";
pub const FETCH_SESSION_PARTITIONS: &str = "tailstream_kafka_fetch_session_partitions";
/// Fetches refused for their session, by reason (`not_found`: an unknown id, one of another
/// user's, or a session grown past the bound; `epoch`: out of order).
pub const FETCH_SESSION_ERRORS: &str = "tailstream_kafka_fetch_session_errors_total";
/// Fetches answered, by kind (`sessionless`; `full`: one that opened a session;
/// `incremental`: one within a session; `refused`: a session error).
pub const FETCHES: &str = "tailstream_kafka_fetches_total";
