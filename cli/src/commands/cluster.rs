//! `tailstream cluster status`: brokers and their liveness, streams and the state of their
//! streamlets (serving, under-replicated, being recovered, lost), and the recent recoveries
//! with their phase times, from the coordinator.

use clap::Subcommand;
use serde_json::{Value, json};
use tailstream_client::{BrokerInfo, PlacementState, RecoverySummary, StreamMetadata};
use tailstream_config::Config;
use tailstream_wire::messages::{CoordinatorInfo, DescribeLeadershipResponse};

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Brokers (alive, crashed, addresses), streams (streamlets serving, recovering, lost) and
    /// recent recoveries (phase times).
    Status {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(config: Config, coordinator: &str, command: ClusterCommand) -> Result<(), String> {
    let cluster = super::client(&config, coordinator);
    let ClusterCommand::Status { json } = command;
    let brokers = cluster.list_brokers().await.map_err(|e| e.to_string())?;
    let streams = cluster.list_streams().await.map_err(|e| e.to_string())?;
    let recoveries = cluster.list_recoveries().await.map_err(|e| e.to_string())?;
    let leadership = cluster
        .describe_leadership()
        .await
        .map_err(|e| e.to_string())?;
    if json {
        let value = json!({
            "coordinator": coordinator,
            "leadership": leadership_json(&leadership),
            "brokers": brokers.iter().map(broker_json).collect::<Vec<_>>(),
            "streams": streams.iter().map(stream_json).collect::<Vec<_>>(),
            "recoveries": recoveries.iter().map(recovery_json).collect::<Vec<_>>(),
        });
        println!("{value}");
        return Ok(());
    }
    print_leadership(&leadership);
    let alive = brokers.iter().filter(|b| b.alive && !b.crashed).count();
    println!(
        "coordinator {coordinator}: {} brokers, {alive} alive",
        brokers.len()
    );
    for broker in &brokers {
        println!(
            "  {:<12} {:<8} rpc {}  kafka {}  admin http://{}",
            broker.server_id.to_string(),
            liveness(broker),
            broker.rpc_addr,
            if broker.kafka_addr.is_empty() {
                "-"
            } else {
                &broker.kafka_addr
            },
            broker.admin_addr,
        );
    }
    let counts = streams
        .iter()
        .map(StateCounts::of)
        .fold(StateCounts::default(), |total, c| StateCounts {
            serving: total.serving + c.serving,
            under_replicated: total.under_replicated + c.under_replicated,
            recovering: total.recovering + c.recovering,
            lost: total.lost + c.lost,
        });
    println!(
        "{} streams: {} streamlets serving ({} under-replicated), {} recovering, {} lost",
        streams.len(),
        counts.serving,
        counts.under_replicated,
        counts.recovering,
        counts.lost
    );
    for stream in &streams {
        let c = StateCounts::of(stream);
        println!(
            "  {:<16} {} streamlets x {} logs, R={} (min in sync {}): {} serving{}{}{}",
            stream.name,
            stream.streamlets.len(),
            stream.config.logs_per_streamlet,
            stream.config.replicas,
            stream.config.min_insync(),
            c.serving,
            if c.under_replicated > 0 {
                format!(", {} UNDER-REPLICATED", c.under_replicated)
            } else {
                String::new()
            },
            if c.recovering > 0 {
                format!(", {} RECOVERING", c.recovering)
            } else {
                String::new()
            },
            if c.lost > 0 {
                format!(", {} LOST", c.lost)
            } else {
                String::new()
            },
        );
        for placement in &stream.streamlets {
            if placement.state != PlacementState::Serving {
                println!(
                    "    streamlet {} {:?}: {}",
                    placement.streamlet.0, placement.state, placement.detail
                );
            }
            for set in &placement.replication {
                if set.in_sync_replicas < stream.config.replicas {
                    println!(
                        "    streamlet {} log {}: {} of {} copies in sync{}",
                        placement.streamlet.0,
                        set.log.0,
                        set.in_sync_replicas,
                        stream.config.replicas,
                        if set.in_sync_replicas < stream.config.min_insync() {
                            ", BELOW min_insync_replicas: produce refused"
                        } else {
                            ""
                        }
                    );
                }
            }
        }
    }
    if !recoveries.is_empty() {
        println!("{} recent recoveries:", recoveries.len());
    }
    for r in &recoveries {
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
        println!(
            "  #{} {} {}: {} streamlets; detect {} ms, locate {}, replay {}, re-replicate {}, \
             lease wait {}, total {}; {} read, {} segments adopted, {} copied{}",
            r.id,
            r.crashed,
            r.phase,
            r.streamlets,
            r.detect_ms,
            ms(r.locate_ms),
            ms(r.replay_ms),
            ms(r.rereplicate_ms),
            ms(r.lease_wait_ms),
            ms(r.total_ms),
            tailstream_cli::human::human_bytes(r.bytes),
            r.segments_adopted,
            r.segments_copied,
            if r.lost.is_empty() {
                String::new()
            } else {
                format!("; LOST: {}", r.lost.join("; "))
            },
        );
    }
    Ok(())
}

fn recovery_json(r: &RecoverySummary) -> Value {
    json!({
        "id": r.id,
        "crashed": r.crashed.to_string(),
        "phase": r.phase,
        "streamlets": r.streamlets,
        "declared_at_ms": r.declared_at_ms,
        "detect_ms": r.detect_ms,
        "locate_ms": r.locate_ms,
        "replay_ms": r.replay_ms,
        "rereplicate_ms": r.rereplicate_ms,
        "lease_wait_ms": r.lease_wait_ms,
        "total_ms": r.total_ms,
        "bytes": r.bytes,
        "segments_adopted": r.segments_adopted,
        "segments_copied": r.segments_copied,
        "lost": r.lost,
    })
}

fn liveness(broker: &BrokerInfo) -> &'static str {
    match (broker.crashed, broker.alive) {
        (true, _) => "CRASHED",
        (false, true) => "alive",
        (false, false) => "SILENT",
    }
}

fn broker_json(broker: &BrokerInfo) -> Value {
    json!({
        "server_id": broker.server_id.to_string(),
        "state": liveness(broker).to_lowercase(),
        "rpc_addr": broker.rpc_addr,
        "peer_addr": broker.peer_addr,
        "admin_addr": broker.admin_addr,
        "kafka_addr": broker.kafka_addr,
    })
}

fn stream_json(stream: &StreamMetadata) -> Value {
    let c = StateCounts::of(stream);
    json!({
        "name": stream.name,
        "streamlets": stream.streamlets.len(),
        "logs_per_streamlet": stream.config.logs_per_streamlet,
        "replicas": stream.config.replicas,
        "min_insync_replicas": stream.config.min_insync(),
        "serving": c.serving,
        "under_replicated": c.under_replicated,
        "recovering": c.recovering,
        "lost": c.lost,
    })
}

/// Streamlets of a stream by state.
#[derive(Clone, Copy, Debug, Default)]
struct StateCounts {
    serving: usize,
    /// Serving with a log short of R complete copies.
    under_replicated: usize,
    recovering: usize,
    lost: usize,
}

impl StateCounts {
    fn of(stream: &StreamMetadata) -> Self {
        let count = |state| {
            stream
                .streamlets
                .iter()
                .filter(|p| p.state == state)
                .count()
        };
        Self {
            serving: count(PlacementState::Serving),
            under_replicated: stream
                .streamlets
                .iter()
                .filter(|p| p.under_replicated_logs(stream.config.replicas) > 0)
                .count(),
            recovering: count(PlacementState::Recovering),
            lost: count(PlacementState::Lost),
        }
    }
}

fn leadership_json(leadership: &DescribeLeadershipResponse) -> Value {
    let info = |c: &CoordinatorInfo| json!({ "rpc_addr": c.rpc_addr, "peer_addr": c.peer_addr, "admin_addr": c.admin_addr });
    json!({
        "term": leadership.term.0,
        "store": leadership.store,
        "leader": info(&leadership.leader),
        "standbys": leadership.standbys.iter().map(info).collect::<Vec<_>>(),
        "standbys_error": (!leadership.standbys_error.is_empty())
            .then_some(&leadership.standbys_error),
    })
}

fn print_leadership(leadership: &DescribeLeadershipResponse) {
    let standbys = if !leadership.standbys_error.is_empty() {
        format!("standbys unknown ({})", leadership.standbys_error)
    } else if leadership.standbys.is_empty() {
        "no standbys".to_string()
    } else {
        let rpc: Vec<&str> = leadership
            .standbys
            .iter()
            .map(|s| s.rpc_addr.as_str())
            .collect();
        format!("standbys {}", rpc.join(", "))
    };
    println!(
        "leader {} (term {}, {} store), {standbys}",
        leadership.leader.rpc_addr, leadership.term.0, leadership.store
    );
}
