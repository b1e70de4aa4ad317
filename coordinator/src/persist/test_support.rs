//! What the stores' tests share: a stream's settings and a few registered brokers.

use crate::metadata::Metadata;
use tailstream_wire::ServerId;
use tailstream_wire::messages::StreamConfig;

/// One log per streamlet, R = 1, small segments.
pub(crate) fn config() -> StreamConfig {
    StreamConfig {
        logs_per_streamlet: 1,
        replicas: 1,
        segment_size_bytes: 1 << 20,
        segments_per_group: 4,
        retention_bytes: 0,
        retention_ms: 0,
        min_insync_replicas: 1,
    }
}

/// Registers `count` brokers (b0:1, b1:1, ...) in `m`; their ids.
pub(crate) fn brokers(m: &mut Metadata, count: usize) -> Vec<ServerId> {
    (0..count)
        .map(|i| {
            let addr = format!("b{i}:1");
            m.register_broker(&addr, &addr, &addr, "")
                .unwrap()
                .server_id
        })
        .collect()
}
