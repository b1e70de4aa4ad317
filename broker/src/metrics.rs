//! Every metric the broker exports, named in one place. `describe` registers them all with help
//! text and zero values at start-up, so the first scrape already shows the full set.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// The backup's own metrics, described here with the rest.
pub use tailstream_backup::metrics::{
    BACKUP_BUFFER_BYTES_USED, BACKUP_BUFFERS_FREE, BACKUP_BUFFERS_MADE_ON_OPEN,
    BACKUP_BUFFERS_USED, BACKUP_CLAIMS_REJECTED, BACKUP_SPARE_BUFFERS_MADE, BACKUP_WRITTEN_BYTES,
};
/// Storage's own metrics, described here with the rest.
pub use tailstream_storage::metrics::{
    APPEND_LOCK_CONTENDED, APPEND_LOCK_WAIT, INVARIANT_VIOLATIONS, RETENTION_FREED,
    SEGMENT_BUFFERS_REUSED, SEGMENT_MEMORY,
};

pub const APPENDED_RECORDS: &str = "tailstream_appended_records_total";
pub const APPENDED_BYTES: &str = "tailstream_appended_bytes_total";
pub const DUPLICATE_BATCHES: &str = "tailstream_duplicate_batches_total";
pub const INVALID_BATCHES: &str = "tailstream_invalid_batches_total";
pub const REQUESTS_FORBIDDEN: &str = "tailstream_requests_forbidden_total";
pub const PRODUCES_PACED: &str = "tailstream_produces_paced_total";
pub const THROTTLED_MILLISECONDS: &str = "tailstream_throttled_milliseconds_total";
pub const PRODUCE_BACKPRESSURE: &str = "tailstream_produce_backpressure_total";
pub const PRODUCE_LATENCY: &str = "tailstream_produce_latency_seconds";
pub const FETCH_REQUESTS: &str = "tailstream_fetch_requests_total";
pub const FETCHED_BYTES: &str = "tailstream_fetched_bytes_total";
pub const SEGMENT_MEMORY_MAX: &str = "tailstream_segment_memory_max_bytes";
pub const REPLICATED_BYTES: &str = "tailstream_replicated_bytes_total";
pub const REPLICATION_WRITE_LATENCY: &str = "tailstream_replication_write_latency_seconds";
pub const REPLICATION_WRITES_IN_FLIGHT: &str = "tailstream_replication_writes_in_flight";
pub const LOG_BOUNDS_REPORT_LATENCY: &str = "tailstream_log_bounds_report_seconds";
pub const REPLICA_RECREATIONS: &str = "tailstream_replica_recreations_total";
pub const LOGS_UNDER_REPLICATED: &str = "tailstream_logs_under_replicated";
pub const LOGS_BELOW_MIN_INSYNC: &str = "tailstream_logs_below_min_insync";
pub const PRODUCE_NOT_ENOUGH_REPLICAS: &str = "tailstream_produce_not_enough_replicas_total";
pub const ACKS_WITHHELD_LEASE_EXPIRED: &str = "tailstream_acks_withheld_lease_expired_total";
pub const LEADERLESS_EXTENSIONS: &str = "tailstream_lease_leaderless_extensions_total";
pub const COMMITS_UNSAVED_LEADERLESS: &str = "tailstream_commits_unsaved_leaderless_total";
pub const COORDINATOR_TERM: &str = "tailstream_coordinator_term_seen";

const COUNTERS: &[(&str, Unit, &str)] = &[
    (
        APPENDED_RECORDS,
        Unit::Count,
        "Records appended (retries not counted twice).",
    ),
    (APPENDED_BYTES, Unit::Bytes, "Record batch bytes appended."),
    (
        DUPLICATE_BATCHES,
        Unit::Count,
        "Retried batches answered with their earlier location.",
    ),
    (
        INVALID_BATCHES,
        Unit::Count,
        "Batches refused by validation (magic, length, CRC-32C, count, every record), by `reason`.",
    ),
    (
        REQUESTS_FORBIDDEN,
        Unit::Count,
        "Native client requests refused because no access control rule allows them.",
    ),
    (
        THROTTLED_MILLISECONDS,
        Unit::Count,
        "Milliseconds native client connections were not read because their user passed a byte-rate quota (broker.quota_*_bytes_per_second), by kind.",
    ),
    (
        PRODUCES_PACED,
        Unit::Count,
        "Native produces answered Busy because their connection owed decompression (broker.decompressed_bytes_per_second_per_connection).",
    ),
    (
        BACKUP_BUFFERS_MADE_ON_OPEN,
        Unit::Count,
        "Replica opens that found no free buffer of their size and waited for one to be written through (backup.spare_buffers keeps some made ahead).",
    ),
    (
        BACKUP_SPARE_BUFFERS_MADE,
        Unit::Count,
        "Replica buffers made ahead of need in the background (backup.spare_buffers).",
    ),
    (
        BACKUP_CLAIMS_REJECTED,
        Unit::Count,
        "Replica buffer claims found corrupt at start-up (logged; the buffer is zeroed, never trusted).",
    ),
    (
        INVARIANT_VIOLATIONS,
        Unit::Count,
        "Impossible states met (a bug): answered with Internal, never retried by clients.",
    ),
    (
        PRODUCE_BACKPRESSURE,
        Unit::Count,
        "Produce requests refused because segment memory was full.",
    ),
    (
        APPEND_LOCK_CONTENDED,
        Unit::Count,
        "Appends that found their log's lock held (producers sharing a log; more logs per streamlet spread them).",
    ),
    (
        SEGMENT_BUFFERS_REUSED,
        Unit::Count,
        "New segments that reused a freed segment's buffer instead of fresh memory.",
    ),
    (
        PRODUCE_NOT_ENOUGH_REPLICAS,
        Unit::Count,
        "Produce requests refused because fewer than min_insync_replicas backups could hold a copy.",
    ),
    (
        ACKS_WITHHELD_LEASE_EXPIRED,
        Unit::Count,
        "Committed produce requests answered LeaseExpired instead of an ack: this broker's lease ran out while they waited.",
    ),
    (
        LEADERLESS_EXTENSIONS,
        Unit::Count,
        "Times the coordinator that renewed this broker's lease was found leading no more (it said so, or nothing listened at its address): the lease ran on for broker.leaderless_lease_ms after its last renewal.",
    ),
    (
        COMMITS_UNSAVED_LEADERLESS,
        Unit::Count,
        "Segments committed into before the coordinator saved them, while no coordinator leads (the lease's leaderless extension): the segment was at its first replica epoch on all R backups, where recovery finds it whole; its bounds are saved once a leader answers.",
    ),
    (FETCH_REQUESTS, Unit::Count, "Fetch requests received."),
    (FETCHED_BYTES, Unit::Bytes, "Entry bytes sent to consumers."),
    (
        RETENTION_FREED,
        Unit::Bytes,
        "Bytes of sealed groups freed by retention.",
    ),
];

/// Registers every broker metric with its help text, at zero.
pub fn describe(segment_memory_bytes_max: u64) {
    for (name, unit, help) in COUNTERS {
        describe_counter!(*name, *unit, *help);
        metrics::counter!(*name).absolute(0);
    }
    describe_gauge!(
        SEGMENT_MEMORY,
        Unit::Bytes,
        "Segment memory reserved by live segments."
    );
    metrics::gauge!(SEGMENT_MEMORY).set(0.0);
    describe_gauge!(
        SEGMENT_MEMORY_MAX,
        Unit::Bytes,
        "The segment memory budget."
    );
    metrics::gauge!(SEGMENT_MEMORY_MAX).set(segment_memory_bytes_max as f64);
    describe_gauge!(
        BACKUP_BUFFERS_USED,
        Unit::Count,
        "Open replica buffers on this backup."
    );
    metrics::gauge!(BACKUP_BUFFERS_USED).set(0.0);
    describe_gauge!(
        BACKUP_BUFFERS_FREE,
        Unit::Count,
        "Replica buffers this backup can still open."
    );
    describe_gauge!(
        BACKUP_BUFFER_BYTES_USED,
        Unit::Bytes,
        "Bytes of open replica buffers."
    );
    metrics::gauge!(BACKUP_BUFFER_BYTES_USED).set(0.0);
    describe_gauge!(
        REPLICATION_WRITES_IN_FLIGHT,
        Unit::Count,
        "Replica writes awaiting completion."
    );
    metrics::gauge!(REPLICATION_WRITES_IN_FLIGHT).set(0.0);
    describe_gauge!(
        LOGS_UNDER_REPLICATED,
        Unit::Count,
        "Owned logs with a segment short of R complete copies (brokers gone and none to replace them, or a copy being re-made)."
    );
    metrics::gauge!(LOGS_UNDER_REPLICATED).set(0.0);
    describe_gauge!(
        LOGS_BELOW_MIN_INSYNC,
        Unit::Count,
        "Owned logs with a segment short of min_insync_replicas complete copies (they refuse produce)."
    );
    metrics::gauge!(LOGS_BELOW_MIN_INSYNC).set(0.0);
    describe_gauge!(
        COORDINATOR_TERM,
        Unit::Count,
        "The newest coordinator term this broker has seen (orders of older ones are refused); 0 before any."
    );
    metrics::gauge!(COORDINATOR_TERM).set(0.0);
    describe_histogram!(
        REPLICATION_WRITE_LATENCY,
        Unit::Seconds,
        "Time from issuing a replica write to its completion."
    );
    let _ = metrics::histogram!(REPLICATION_WRITE_LATENCY);
    describe_histogram!(
        LOG_BOUNDS_REPORT_LATENCY,
        Unit::Seconds,
        "Time for the coordinator to save new log heads (commits into a new segment wait for it)."
    );
    let _ = metrics::histogram!(LOG_BOUNDS_REPORT_LATENCY);
    describe_histogram!(
        APPEND_LOCK_WAIT,
        Unit::Seconds,
        "Time a contended append waited for its log's lock (uncontended appends are not recorded)."
    );
    let _ = metrics::histogram!(APPEND_LOCK_WAIT);
    describe_histogram!(
        PRODUCE_LATENCY,
        Unit::Seconds,
        "Time from a produce request's arrival to its answer (appended and committed)."
    );
    // Registering the histogram makes it appear, with empty buckets, before the first produce.
    let _ = metrics::histogram!(PRODUCE_LATENCY);
}
