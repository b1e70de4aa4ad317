//! Every metric the coordinator exports, named in one place; `describe` registers them with
//! help text (and zero values) at start-up.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

pub const BROKERS_ALIVE: &str = "tailstream_coordinator_brokers_alive";
pub const BROKERS_REGISTERED: &str = "tailstream_coordinator_brokers_registered";
pub const SUSPICIONS: &str = "tailstream_coordinator_suspicions_total";
pub const CRASHES_DECLARED: &str = "tailstream_coordinator_crashes_declared_total";
pub const RECOVERIES: &str = "tailstream_coordinator_recoveries_total";
pub const STREAMLETS_RECOVERED: &str = "tailstream_coordinator_streamlets_recovered_total";
pub const STREAMLETS_UNAVAILABLE: &str = "tailstream_coordinator_streamlets_unavailable";
pub const STREAMLETS_LOST: &str = "tailstream_coordinator_streamlets_lost";
pub const STREAMLETS_UNDER_REPLICATED: &str = "tailstream_coordinator_streamlets_under_replicated";
pub const STREAMS: &str = "tailstream_coordinator_streams";
pub const STREAMLETS: &str = "tailstream_coordinator_streamlets";
pub const STREAMLETS_OWNED: &str = "tailstream_coordinator_streamlets_owned";
pub const RECOVERY_PHASE: &str = "tailstream_coordinator_recovery_phase_seconds";
pub const PERSIST_LATENCY: &str = "tailstream_coordinator_persist_latency_seconds";
pub const ETCD_REQUEST: &str = "tailstream_coordinator_etcd_request_seconds";
pub const TAKEOVER_LOAD: &str = "tailstream_coordinator_takeover_load_seconds";
pub const RPCS: &str = "tailstream_coordinator_rpcs_total";
/// Per group: rendered by `group_gauges` (not the recorder), so a group's series go away with it.
pub const GROUP_LAG: &str = "tailstream_coordinator_group_lag_records";
pub const GROUP_MEMBERS: &str = "tailstream_coordinator_group_members";

/// A label value as Prometheus's text format needs it (group names are any client's).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The per-group gauges as exposition text: each group's lag per partition (groups with a
/// committed offset) and its members (groups with members), nothing for a group gone.
pub fn group_gauges(
    lag: &[tailstream_wire::messages::PartitionLagInfo],
    members: &[(String, usize, u32)],
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {GROUP_LAG} Records a consumer group has not committed past, by group, stream \
         and partition (streamlet * Q + log), Kafka and native groups alike.\n# TYPE {GROUP_LAG} gauge"
    );
    for row in lag {
        if let Some(records) = row.lag_records {
            let _ = writeln!(
                out,
                "{GROUP_LAG}{{group=\"{}\",stream=\"{}\",partition=\"{}\"}} {records}",
                label(&row.group),
                label(&row.stream),
                row.partition
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP {GROUP_MEMBERS} Members of a consumer group now.\n# TYPE {GROUP_MEMBERS} gauge"
    );
    for (group, count, _) in members {
        let _ = writeln!(out, "{GROUP_MEMBERS}{{group=\"{}\"}} {count}", label(group));
    }
    out
}
pub const LEADER: &str = "tailstream_coordinator_leader";
pub const LEADER_TERM: &str = "tailstream_coordinator_leader_term";
pub const LEADERSHIP_LOST: &str = "tailstream_coordinator_leadership_lost_total";
pub const INVARIANT_VIOLATIONS: &str = "tailstream_coordinator_invariant_violations_total";
pub const ETCD_UNSENT_RETRIES: &str = "tailstream_coordinator_etcd_unsent_retries_total";

/// Registers every coordinator metric with its help text.
pub fn describe() {
    for (name, help) in [
        (
            SUSPICIONS,
            "Brokers reported silent by a peer or by missing heartbeats.",
        ),
        (
            INVARIANT_VIOLATIONS,
            "Broken invariants (a bug): each refused the operation that would have broken it.",
        ),
        (
            CRASHES_DECLARED,
            "Broker incarnations declared crashed (fenced everywhere).",
        ),
        (
            RECOVERIES,
            "Recoveries started (one per crash that owned streamlets).",
        ),
        (
            STREAMLETS_RECOVERED,
            "Streamlets rebuilt on a new owner and serving again.",
        ),
        (
            ETCD_UNSENT_RETRIES,
            "etcd transactions sent again because their connection could not be made (an etcd member down): never sent, so never applied twice.",
        ),
        (
            LEADERSHIP_LOST,
            "Times this coordinator stepped down (lease lost, or a write found it deposed).",
        ),
    ] {
        describe_counter!(name, Unit::Count, help);
        metrics::counter!(name).absolute(0);
    }
    // Labelled by opcode as they come: an unlabelled zero would be a series of its own.
    describe_counter!(RPCS, Unit::Count, "RPCs answered, by opcode.");
    describe_gauge!(
        STREAMLETS_OWNED,
        Unit::Count,
        "Streamlets placed on each broker (by server index; the placement), serving or not."
    );
    for (name, help) in [
        (
            BROKERS_ALIVE,
            "Brokers whose heartbeats arrive and that are not declared crashed.",
        ),
        (BROKERS_REGISTERED, "Registered broker slots."),
        (
            STREAMLETS_UNAVAILABLE,
            "Streamlets not serving: being recovered, or lost.",
        ),
        (
            STREAMLETS_LOST,
            "Streamlets no live backup can rebuild (explicitly not served).",
        ),
        (
            STREAMLETS_UNDER_REPLICATED,
            "Serving streamlets with a log short of R complete copies (per their owners' heartbeats): acknowledging on min_insync_replicas until brokers return.",
        ),
        (STREAMS, "Streams."),
        (
            LEADER,
            "1 while this coordinator leads (always, with the file store), 0 while it stands by.",
        ),
        (
            LEADER_TERM,
            "The term this coordinator leads in (the saved term plus one, taken when it began to lead; every order it gives names it).",
        ),
        (STREAMLETS, "Streamlets over all streams."),
    ] {
        describe_gauge!(name, Unit::Count, help);
        metrics::gauge!(name).set(0.0);
    }
    describe_histogram!(
        RECOVERY_PHASE,
        Unit::Seconds,
        "Recovery phase durations, by phase: detect (first report to declaration), locate (listing and planning), replay (reading and rebuilding), rereplicate (copying what lost a copy), total (declaration to serving)."
    );
    describe_histogram!(
        PERSIST_LATENCY,
        Unit::Seconds,
        "Time to save a metadata change durably."
    );
    describe_histogram!(
        ETCD_REQUEST,
        Unit::Seconds,
        "etcd requests, answered or failed, by op: transaction (a change, fenced; its resends to another member included), range (a page of a load), keepalive (a renewal of the election lease)."
    );
    describe_histogram!(
        TAKEOVER_LOAD,
        Unit::Seconds,
        "From an election won to the state loaded (term taken, offsets read), by source: warm (the watched copy) or etcd (every key read)."
    );
}

/// Records one etcd request of kind `op` that began at `started`.
pub fn etcd_request(op: &'static str, started: std::time::Instant) {
    metrics::histogram!(ETCD_REQUEST, "op" => op).record(started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailstream_wire::messages::PartitionLagInfo;

    #[test]
    fn group_gauges_escape_names_and_show_only_groups_that_exist() {
        let lag = vec![PartitionLagInfo {
            group: "a\"b\\c\nd".into(),
            stream: "s".into(),
            partition: 3,
            streamlet: 0,
            log: 3,
            committed_offset: 1,
            end_offset: Some(8),
            lag_records: Some(7),
        }];
        let text = group_gauges(&lag, &[("g".into(), 2, 1)]);
        assert!(text.contains(
            "tailstream_coordinator_group_lag_records{group=\"a\\\"b\\\\c\\nd\",stream=\"s\",partition=\"3\"} 7"
        ), "{text}");
        assert!(text.contains("tailstream_coordinator_group_members{group=\"g\"} 2"));
        let empty = group_gauges(&[], &[]);
        assert!(!empty.contains("{group="));
    }
}
