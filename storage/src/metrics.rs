//! The metrics storage records, named in one place (the broker describes them with the rest).

pub const SEGMENT_MEMORY: &str = "tailstream_segment_memory_bytes";
pub const SEGMENT_BUFFERS_REUSED: &str = "tailstream_segment_buffers_reused_total";
pub const RETENTION_FREED: &str = "tailstream_retention_freed_bytes_total";
pub const INVARIANT_VIOLATIONS: &str = "tailstream_invariant_violations_total";
pub const APPEND_LOCK_CONTENDED: &str = "tailstream_append_lock_contended_total";
pub const APPEND_LOCK_WAIT: &str = "tailstream_append_lock_wait_seconds";
