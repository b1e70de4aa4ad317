//! Kafka's topic settings as a stream's (pure): how CreateTopics' partition count, replication
//! factor and configs become a stream's streamlets and `StreamConfig`, and how DescribeConfigs
//! shows a stream's config in Kafka's names.
//!
//! - A partition is one log of one streamlet (`streamlet * Q + log`), so N partitions are
//!   `N / Q` streamlets of Q logs. Q is `tailstream.logs.per.streamlet` when the request sets
//!   it (N must then be a multiple of it), else the largest divisor of N not above the
//!   broker's default Q: 12 partitions with Q = 4 are 3 streamlets of 4 logs, 6 are 2 of 3,
//!   7 are 7 streamlets of one log each.
//! - Kafka's replication factor counts the leader; a stream's R counts backups: R = factor - 1.
//! - `min.insync.replicas` counts the leader too: the stream's (in backup copies) is one less,
//!   and at least one for a replicated stream (an ack always waits for a backup copy).
//! - `retention.bytes` is per partition in Kafka and per streamlet here: Q times it. Retention
//!   frees a streamlet's oldest whole groups, so a partition that receives less than its
//!   share keeps less than `retention.bytes`: the bound is the streamlet's, not each log's.
//! - Kafka's -1 ("unlimited") is the stream's 0.

use kafka_protocol::ResponseError;
use tailstream_config::{REPLICAS_MAX, STREAMLETS_MAX};
use tailstream_wire::messages::StreamConfig;

/// Q set explicitly in CreateTopics' configs.
pub(crate) const LOGS_PER_STREAMLET: &str = "tailstream.logs.per.streamlet";

/// Why a topic's settings cannot be a stream: Kafka's error and a message naming the setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub code: kafka_protocol::ResponseError,
    pub message: String,
}

fn refused(code: kafka_protocol::ResponseError, message: String) -> Refusal {
    Refusal { code, message }
}

/// A stream to create: its streamlet count and config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StreamShape {
    pub streamlets: u32,
    pub config: StreamConfig,
}

/// The largest divisor of `partitions` that is at most `q_max` (at least 1).
fn logs_for(partitions: u32, q_max: u32) -> u32 {
    (1..=q_max.max(1))
        .rev()
        .find(|q| partitions.is_multiple_of(*q))
        .unwrap_or(1)
}

/// A Kafka "-1 is unlimited" value as a stream's "0 is unlimited" one.
fn unlimited_as_zero(name: &str, value: &str) -> Result<u64, Refusal> {
    let parsed: i64 = value.trim().parse().map_err(|_| invalid(name, value))?;
    match parsed {
        -1 => Ok(0),
        v if v > 0 => Ok(v as u64),
        _ => Err(invalid(name, value)),
    }
}

fn invalid(name: &str, value: &str) -> Refusal {
    refused(
        kafka_protocol::ResponseError::InvalidConfig,
        format!("{name}={value:?} is not a valid value"),
    )
}

/// The stream CreateTopics asks for: `partitions` (-1: the broker's default streamlets × Q),
/// `replication_factor` (-1: `default_replicas` + 1) and `configs`, over `defaults`.
pub(crate) fn stream_shape(
    partitions: i32,
    replication_factor: i16,
    configs: &[(String, Option<String>)],
    defaults: &StreamConfig,
    default_streamlets: u32,
    default_replicas: u32,
) -> Result<StreamShape, Refusal> {
    use kafka_protocol::ResponseError::{
        InvalidConfig, InvalidPartitions, InvalidReplicationFactor,
    };
    let mut config = defaults.clone();
    config.replicas = match replication_factor {
        -1 => default_replicas,
        factor if (1..=REPLICAS_MAX as i16 + 1).contains(&factor) => {
            u32::from(factor.unsigned_abs()) - 1
        }
        factor => {
            return Err(refused(
                InvalidReplicationFactor,
                format!(
                    "replication factor {factor} (1 to {}: the leader and up to {REPLICAS_MAX} backups, or -1 for the default)",
                    REPLICAS_MAX + 1
                ),
            ));
        }
    };
    config.min_insync_replicas = 0;
    let mut explicit_q = None;
    let mut retention_bytes_per_partition = None;
    let mut min_insync = None;
    for (name, value) in configs {
        let Some(value) = value.as_deref() else {
            continue; // Kafka: a null value leaves the default
        };
        match name.as_str() {
            "retention.ms" => config.retention_ms = unlimited_as_zero(name, value)?,
            "retention.bytes" => {
                retention_bytes_per_partition = Some(unlimited_as_zero(name, value)?)
            }
            "segment.bytes" => {
                config.segment_size_bytes =
                    value.trim().parse().map_err(|_| invalid(name, value))?
            }
            "min.insync.replicas" => {
                let replicas: u32 = value.trim().parse().map_err(|_| invalid(name, value))?;
                if replicas == 0 {
                    return Err(invalid(name, value));
                }
                min_insync = Some(replicas);
            }
            "cleanup.policy" if value == "delete" => {}
            "cleanup.policy" => {
                return Err(refused(
                    InvalidConfig,
                    format!(
                        "cleanup.policy={value:?}: only \"delete\" (compaction is not supported)"
                    ),
                ));
            }
            LOGS_PER_STREAMLET => {
                let q: u32 = value.trim().parse().map_err(|_| invalid(name, value))?;
                explicit_q = Some(q);
            }
            other => {
                return Err(refused(
                    InvalidConfig,
                    format!(
                        "unknown or unsupported topic config {other:?} (served: retention.ms, retention.bytes, segment.bytes, min.insync.replicas, cleanup.policy=delete, {LOGS_PER_STREAMLET})"
                    ),
                ));
            }
        }
    }
    let streamlets = match (u32::try_from(partitions), explicit_q) {
        (Err(_), q) if partitions == -1 => {
            if let Some(q) = q {
                config.logs_per_streamlet = q;
            }
            default_streamlets
        }
        (Ok(n), Some(q)) if n > 0 => {
            if q == 0 || !n.is_multiple_of(q) {
                return Err(refused(
                    InvalidPartitions,
                    format!(
                        "{n} partitions are not a whole number of streamlets of {LOGS_PER_STREAMLET}={q} logs"
                    ),
                ));
            }
            config.logs_per_streamlet = q;
            n / q
        }
        (Ok(n), None) if n > 0 => {
            let q = logs_for(n, defaults.logs_per_streamlet);
            config.logs_per_streamlet = q;
            n / q
        }
        _ => {
            return Err(refused(
                InvalidPartitions,
                format!("{partitions} partitions (at least 1, or -1 for the default)"),
            ));
        }
    };
    if streamlets > STREAMLETS_MAX {
        return Err(refused(
            InvalidPartitions,
            format!(
                "{partitions} partitions would be {streamlets} streamlets of {} logs; at most {STREAMLETS_MAX} streamlets",
                config.logs_per_streamlet
            ),
        ));
    }
    // Counting the leader: one fewer backup copies, and at least one for a replicated stream
    // (an unreplicated one takes 1, Kafka's default, as its only value).
    if let Some(replicas) = min_insync {
        config.min_insync_replicas = match config.replicas {
            0 => 0,
            _ => replicas.saturating_sub(1).max(1),
        };
        if replicas > config.replicas + 1 {
            return Err(refused(
                InvalidConfig,
                format!(
                    "min.insync.replicas={replicas} is more than the replication factor {}",
                    config.replicas + 1
                ),
            ));
        }
    }
    if let Some(per_partition) = retention_bytes_per_partition {
        config.retention_bytes = per_partition.saturating_mul(u64::from(config.logs_per_streamlet));
    }
    tailstream_config::validate_stream_config(&config)
        .map_err(|why| refused(InvalidConfig, why))?;
    Ok(StreamShape { streamlets, config })
}

/// A stream's config as DescribeConfigs shows it: (Kafka name, value, read-only). Only
/// retention changes after creation (`topic_alter`).
pub(crate) fn described(config: &StreamConfig) -> Vec<(&'static str, String, bool)> {
    let or_unlimited = |value: u64| {
        if value == 0 {
            "-1".to_owned()
        } else {
            value.to_string()
        }
    };
    let q = u64::from(config.logs_per_streamlet.max(1));
    let min_insync = match config.replicas {
        0 => 1,
        _ => config.min_insync() + 1,
    };
    vec![
        ("retention.ms", or_unlimited(config.retention_ms), false),
        // Rounded up: a limit below Q bytes per streamlet is still a limit (not -1), and
        // a value written back as read keeps at least the limit there is.
        (
            "retention.bytes",
            or_unlimited(config.retention_bytes.div_ceil(q)),
            false,
        ),
        ("segment.bytes", config.segment_size_bytes.to_string(), true),
        ("min.insync.replicas", min_insync.to_string(), true),
        ("cleanup.policy", "delete".to_owned(), true),
        (
            LOGS_PER_STREAMLET,
            config.logs_per_streamlet.to_string(),
            true,
        ),
        ("tailstream.replicas", config.replicas.to_string(), true),
    ]
}

/// The streamlet count a CreatePartitions for `count` partitions grows a stream of
/// `streamlets` streamlets of `logs` logs to: partitions come in streamlets (a new streamlet
/// brings Q new partitions, numbered after the existing ones), so `count` must be a multiple
/// of Q above the current count.
pub(crate) fn grown_streamlets(streamlets: u32, logs: u32, count: i32) -> Result<u32, Refusal> {
    let logs = logs.max(1);
    let current = u64::from(streamlets) * u64::from(logs);
    let invalid = |message: String| refused(ResponseError::InvalidPartitions, message);
    let count = u64::try_from(count).unwrap_or(0);
    if count == current {
        return Err(invalid(format!(
            "the topic already has {current} partitions"
        )));
    }
    if count < current {
        return Err(invalid(format!(
            "the topic has {current} partitions, more than the {count} asked for: a topic never shrinks"
        )));
    }
    if count % u64::from(logs) != 0 {
        return Err(invalid(format!(
            "partitions come in streamlets of {logs} logs ({LOGS_PER_STREAMLET}): ask for a multiple of {logs}, such as {}",
            current + u64::from(logs)
        )));
    }
    let grown = count / u64::from(logs);
    if grown > u64::from(STREAMLETS_MAX) {
        return Err(invalid(format!(
            "{count} partitions would be {grown} streamlets of {logs} logs; at most {STREAMLETS_MAX} streamlets"
        )));
    }
    // At most STREAMLETS_MAX, just checked.
    Ok(grown as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::ResponseError;

    fn defaults() -> StreamConfig {
        StreamConfig {
            logs_per_streamlet: 4,
            replicas: 2,
            segment_size_bytes: 1 << 20,
            segments_per_group: 4,
            retention_bytes: 0,
            retention_ms: 0,
            min_insync_replicas: 0,
        }
    }

    fn shape(
        partitions: i32,
        factor: i16,
        configs: &[(&str, &str)],
    ) -> Result<StreamShape, Refusal> {
        let configs: Vec<(String, Option<String>)> = configs
            .iter()
            .map(|(n, v)| (n.to_string(), Some(v.to_string())))
            .collect();
        stream_shape(partitions, factor, &configs, &defaults(), 2, 1)
    }

    #[test]
    fn partitions_become_streamlets_of_the_largest_q_that_divides_them() {
        let s = |n| {
            let shape = shape(n, -1, &[]).unwrap();
            (shape.streamlets, shape.config.logs_per_streamlet)
        };
        assert_eq!(s(12), (3, 4));
        assert_eq!(s(6), (2, 3));
        assert_eq!(s(7), (7, 1));
        assert_eq!(s(1), (1, 1));
        let default = shape(-1, -1, &[]).unwrap();
        assert_eq!(
            (default.streamlets, default.config.logs_per_streamlet),
            (2, 4)
        );
        let explicit = shape(8, -1, &[(LOGS_PER_STREAMLET, "2")]).unwrap();
        assert_eq!(
            (explicit.streamlets, explicit.config.logs_per_streamlet),
            (4, 2)
        );
        let refusal = shape(9, -1, &[(LOGS_PER_STREAMLET, "2")]).unwrap_err();
        assert_eq!(refusal.code, ResponseError::InvalidPartitions);
        assert_eq!(
            shape(0, -1, &[]).unwrap_err().code,
            ResponseError::InvalidPartitions
        );
        assert_eq!(
            shape(5000 * 4 + 1, -1, &[]).unwrap_err().code,
            ResponseError::InvalidPartitions,
            "more than STREAMLETS_MAX streamlets"
        );
    }

    #[test]
    fn settings_map_to_the_stream_and_back() {
        let shape = shape(
            8,
            3,
            &[
                ("retention.ms", "60000"),
                ("retention.bytes", "1000000"),
                ("min.insync.replicas", "2"),
                ("cleanup.policy", "delete"),
            ],
        )
        .unwrap();
        let config = &shape.config;
        assert_eq!(config.replicas, 2);
        assert_eq!(config.retention_ms, 60_000);
        assert_eq!(
            config.retention_bytes, 4_000_000,
            "Q times the per-partition bytes"
        );
        assert_eq!(config.min_insync_replicas, 1);
        let shown: std::collections::HashMap<_, _> = described(config)
            .into_iter()
            .map(|(name, value, _)| (name, value))
            .collect();
        assert_eq!(shown["retention.ms"], "60000");
        assert_eq!(shown["retention.bytes"], "1000000");
        assert_eq!(shown["min.insync.replicas"], "2");
        let unlimited = shape_unlimited();
        let shown: std::collections::HashMap<_, _> = described(&unlimited)
            .into_iter()
            .map(|(name, value, _)| (name, value))
            .collect();
        assert_eq!(shown["retention.ms"], "-1");
        assert_eq!(shown["retention.bytes"], "-1");
    }

    fn shape_unlimited() -> StreamConfig {
        shape(4, 1, &[("retention.ms", "-1"), ("retention.bytes", "-1")])
            .unwrap()
            .config
    }

    #[test]
    fn what_cannot_map_is_refused_naming_the_setting() {
        let refusal = shape(4, -1, &[("cleanup.policy", "compact")]).unwrap_err();
        assert_eq!(refusal.code, ResponseError::InvalidConfig);
        assert!(refusal.message.contains("compact"));
        let refusal = shape(4, -1, &[("max.message.bytes", "1")]).unwrap_err();
        assert!(refusal.message.contains("max.message.bytes"), "{refusal:?}");
        assert_eq!(
            shape(4, 0, &[]).unwrap_err().code,
            ResponseError::InvalidReplicationFactor
        );
        assert_eq!(
            shape(4, 9, &[]).unwrap_err().code,
            ResponseError::InvalidReplicationFactor,
            "more backups than REPLICAS_MAX"
        );
        assert_eq!(
            shape(4, -1, &[("retention.ms", "soon")]).unwrap_err().code,
            ResponseError::InvalidConfig
        );
        assert_eq!(shape(4, 1, &[]).unwrap().config.replicas, 0);
        // Kafka's default, set explicitly on an unreplicated topic.
        let single = shape(4, 1, &[("min.insync.replicas", "1")]).unwrap();
        assert_eq!(single.config.min_insync_replicas, 0);
        assert_eq!(
            shape(4, 2, &[("min.insync.replicas", "3")])
                .unwrap_err()
                .code,
            ResponseError::InvalidConfig
        );
    }

    #[test]
    fn partitions_grow_by_whole_streamlets_and_never_shrink() {
        assert_eq!(grown_streamlets(3, 4, 20).ok(), Some(5));
        assert_eq!(grown_streamlets(1, 1, 7).ok(), Some(7));
        let refused = |streamlets, logs, count| {
            let refusal = grown_streamlets(streamlets, logs, count).unwrap_err();
            assert_eq!(refusal.code, ResponseError::InvalidPartitions);
            refusal.message
        };
        assert!(refused(3, 4, 12).contains("already has 12"));
        assert!(refused(3, 4, 8).contains("never shrinks"));
        assert!(refused(3, 4, -1).contains("never shrinks"));
        assert!(refused(3, 4, 14).contains("such as 16"));
        assert!(refused(1, 1, i32::MAX).contains("at most"));
    }
}
