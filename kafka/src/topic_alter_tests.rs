//! Config changes against the stream settings they map to, and the refusals named.

use super::*;
use kafka_protocol::ResponseError;

/// A topic of 8 partitions as 2 streamlets of 4 logs, replicated twice, 1 MiB segments.
fn current() -> StreamConfig {
    StreamConfig {
        logs_per_streamlet: 4,
        replicas: 2,
        segment_size_bytes: 1 << 20,
        segments_per_group: 4,
        retention_bytes: 0,
        retention_ms: 3_600_000,
        min_insync_replicas: 1,
    }
}

fn defaults() -> StreamConfig {
    StreamConfig {
        retention_ms: 0,
        retention_bytes: 1 << 30,
        ..current()
    }
}

fn code(result: Result<RetentionChange, Refusal>) -> ResponseError {
    result.unwrap_err().code
}

#[test]
fn set_changes_retention_per_streamlet_and_minus_one_lifts_it() {
    let change = incremental(
        &current(),
        &defaults(),
        &[
            ("retention.ms", SET, Some("60000")),
            ("retention.bytes", SET, Some("1000")),
        ],
    )
    .unwrap();
    assert_eq!(change.retention_ms, Some(60_000));
    assert_eq!(change.retention_bytes, Some(4_000), "Q times per partition");
    let lifted = incremental(
        &current(),
        &defaults(),
        &[("retention.ms", SET, Some("-1"))],
    )
    .unwrap();
    assert_eq!(
        lifted,
        RetentionChange {
            retention_ms: Some(0),
            retention_bytes: None
        }
    );
    assert!(
        incremental(&current(), &defaults(), &[])
            .unwrap()
            .is_empty()
    );
}

#[test]
fn delete_puts_the_brokers_default_back() {
    let change = incremental(
        &current(),
        &defaults(),
        &[
            ("retention.ms", DELETE, None),
            ("retention.bytes", DELETE, None),
        ],
    )
    .unwrap();
    assert_eq!(change.retention_ms, Some(0));
    assert_eq!(change.retention_bytes, Some(1 << 30));
    // A fixed setting already at the default: nothing to do.
    incremental(&current(), &defaults(), &[("segment.bytes", DELETE, None)]).unwrap();
    let bigger = StreamConfig {
        segment_size_bytes: 2 << 20,
        ..current()
    };
    assert_eq!(
        code(incremental(
            &bigger,
            &defaults(),
            &[("segment.bytes", DELETE, None)]
        )),
        ResponseError::InvalidConfig
    );
}

#[test]
fn fixed_settings_take_only_the_value_they_have() {
    for (name, same) in [
        ("segment.bytes", "1048576"),
        ("min.insync.replicas", "2"),
        ("cleanup.policy", "delete"),
        ("tailstream.logs.per.streamlet", "4"),
        ("tailstream.replicas", "2"),
    ] {
        incremental(&current(), &defaults(), &[(name, SET, Some(same))])
            .unwrap_or_else(|e| panic!("{name}={same}: {e:?}"));
    }
    let refusal = incremental(
        &current(),
        &defaults(),
        &[("segment.bytes", SET, Some("2"))],
    )
    .unwrap_err();
    assert_eq!(refusal.code, ResponseError::InvalidConfig);
    assert!(refusal.message.contains("fixed"), "{}", refusal.message);
    assert!(refusal.message.contains("1048576"), "{}", refusal.message);
    let refusal = incremental(
        &current(),
        &defaults(),
        &[("max.message.bytes", SET, Some("1"))],
    )
    .unwrap_err();
    assert!(refusal.message.contains("max.message.bytes"));
}

#[test]
fn malformed_changes_are_refused_naming_why() {
    let refuse = |changes: &[Incremental<'_>]| code(incremental(&current(), &defaults(), changes));
    assert_eq!(
        refuse(&[("retention.ms", SET, Some("soon"))]),
        ResponseError::InvalidConfig
    );
    assert_eq!(
        refuse(&[("retention.ms", SET, Some("0"))]),
        ResponseError::InvalidConfig,
        "0 would be 'unlimited' here, not Kafka's 'at once'"
    );
    assert_eq!(
        refuse(&[("retention.ms", SET, None)]),
        ResponseError::InvalidRequest
    );
    assert_eq!(
        refuse(&[
            ("retention.ms", SET, Some("1")),
            ("retention.ms", SET, Some("2"))
        ]),
        ResponseError::InvalidRequest
    );
    assert_eq!(
        refuse(&[("retention.ms", 9, Some("1"))]),
        ResponseError::InvalidRequest
    );
    assert_eq!(
        refuse(&[("retention.ms", APPEND, Some("1"))]),
        ResponseError::InvalidConfig
    );
    assert_eq!(
        refuse(&[("cleanup.policy", APPEND, Some("compact"))]),
        ResponseError::InvalidConfig
    );
    assert_eq!(
        refuse(&[("cleanup.policy", SUBTRACT, Some("delete"))]),
        ResponseError::InvalidConfig
    );
    incremental(
        &current(),
        &defaults(),
        &[("cleanup.policy", APPEND, Some("delete"))],
    )
    .unwrap();
}

#[test]
fn a_whole_config_resets_the_retention_it_does_not_name() {
    let change = whole(&current(), &defaults(), &[("retention.ms", Some("5000"))]).unwrap();
    assert_eq!(change.retention_ms, Some(5_000));
    assert_eq!(change.retention_bytes, Some(1 << 30), "the default");
    let change = whole(
        &current(),
        &defaults(),
        &[
            ("retention.bytes", None),
            ("segment.bytes", Some("1048576")),
        ],
    )
    .unwrap();
    assert_eq!(change.retention_ms, Some(0));
    assert_eq!(change.retention_bytes, Some(1 << 30));
    assert_eq!(
        code(whole(
            &current(),
            &defaults(),
            &[("segment.bytes", Some("7"))]
        )),
        ResponseError::InvalidConfig
    );
    assert_eq!(
        code(whole(
            &current(),
            &defaults(),
            &[("retention.ms", Some("1")), ("retention.ms", None)]
        )),
        ResponseError::InvalidRequest
    );
}

#[test]
fn a_described_retention_written_back_keeps_a_limit() {
    // 6 bytes over Q = 4 logs: described as 2 per partition (rounded up), never -1.
    let tiny = StreamConfig {
        retention_bytes: 6,
        ..current()
    };
    let shown = described(&tiny)
        .into_iter()
        .find(|(name, ..)| *name == "retention.bytes")
        .unwrap()
        .1;
    assert_eq!(shown, "2");
    let change = incremental(
        &tiny,
        &defaults(),
        &[("retention.bytes", SET, Some(&shown))],
    )
    .unwrap();
    assert_eq!(change.retention_bytes, Some(8));
}
