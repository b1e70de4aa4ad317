//! `tailstream stream create|alter|list|describe|delete`.

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use tailstream_cli::human::{human_bytes, human_count};
use tailstream_client::{
    Client, LogGroups, LogId, LogReplicaSet, LogStart, PartitionLagInfo, PlacementState,
    RecordOffset, StreamMetadata, StreamletId,
};
use tailstream_config::Config;

#[derive(Subcommand, Debug)]
pub enum StreamCommand {
    /// Create a stream.
    Create(CreateArgs),
    /// Grow a stream to more streamlets (existing records stay where they are), change its
    /// retention, or delete a log's records before an offset; its other settings are fixed
    /// at creation.
    Alter {
        name: String,
        /// The stream's new streamlet count: more than it has (the same count changes
        /// nothing).
        #[arg(long)]
        streamlets: Option<u32>,
        /// Per streamlet; 0 = unlimited.
        #[arg(long)]
        retention_bytes: Option<u64>,
        /// 0 = unlimited.
        #[arg(long)]
        retention_ms: Option<u64>,
        /// `STREAMLET/LOG:OFFSET`: delete that log's records before OFFSET (Kafka's
        /// DeleteRecords); repeatable. OFFSET may not be past the log's committed end.
        #[arg(long, value_parser = parse_log_start)]
        delete_before: Vec<(StreamletId, LogStart)>,
    },
    /// List streams.
    List {
        /// One JSON object per stream.
        #[arg(long)]
        json: bool,
    },
    /// Show a stream's settings, where its streamlets live, and each log's records, groups,
    /// segments, committed bytes and replicas; then consumer groups' lag on it.
    Describe {
        name: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a stream and every record in it: its owners and backups drop its data.
    Delete { name: String },
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    name: String,
    /// M: streamlets (like Kafka partitions), spread round-robin over brokers.
    #[arg(long)]
    streamlets: u32,
    /// Q: logs per streamlet (default from the config's stream_defaults).
    #[arg(long)]
    logs: Option<u32>,
    /// R: backups per segment (default: min(3, live brokers - 2), 1 with two brokers: one
    /// broker stays spare to replace a copy lost in a crash).
    #[arg(long)]
    replicas: Option<u32>,
    /// While brokers are gone and none can replace their copies, acknowledge with this many
    /// complete backup copies (Kafka's min.insync.replicas; default max(1, R - 1)).
    #[arg(long)]
    min_insync_replicas: Option<u32>,
    #[arg(long)]
    segment_size_bytes: Option<u32>,
    #[arg(long)]
    segments_per_group: Option<u32>,
    /// Per streamlet; 0 = unlimited.
    #[arg(long)]
    retention_bytes: Option<u64>,
    /// 0 = unlimited.
    #[arg(long)]
    retention_ms: Option<u64>,
}

/// `STREAMLET/LOG:OFFSET`, as `--delete-before` takes it.
fn parse_log_start(value: &str) -> Result<(StreamletId, LogStart), String> {
    let shape = || format!("{value:?}: expected STREAMLET/LOG:OFFSET, such as 0/2:1000");
    let (streamlet, rest) = value.split_once('/').ok_or_else(shape)?;
    let (log, offset) = rest.split_once(':').ok_or_else(shape)?;
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| shape());
    let streamlet = u32::try_from(number(streamlet)?).map_err(|_| shape())?;
    let log = u32::try_from(number(log)?).map_err(|_| shape())?;
    Ok((
        StreamletId(streamlet),
        LogStart {
            log: LogId(log),
            offset: RecordOffset(number(offset)?),
        },
    ))
}

fn print_stream(stream: &StreamMetadata) {
    let c = &stream.config;
    println!(
        "stream {} (id {}): streamlets={} logs={} replicas={} min_insync_replicas={} segment_size_bytes={} segments_per_group={} retention_bytes={} retention_ms={}",
        stream.name,
        stream.id.0,
        stream.streamlets.len(),
        c.logs_per_streamlet,
        c.replicas,
        c.min_insync(),
        c.segment_size_bytes,
        c.segments_per_group,
        c.retention_bytes,
        c.retention_ms
    );
}

pub async fn run(config: Config, coordinator: &str, command: StreamCommand) -> Result<(), String> {
    let cluster = super::client(&config, coordinator);
    match command {
        StreamCommand::Create(args) => {
            let mut stream = config.stream_defaults.clone();
            stream.logs_per_streamlet = args.logs.unwrap_or(stream.logs_per_streamlet);
            stream.replicas = match args.replicas {
                Some(replicas) => replicas,
                None => {
                    let brokers = cluster.list_brokers().await.map_err(|e| e.to_string())?;
                    let alive = brokers.iter().filter(|b| b.alive && !b.crashed).count();
                    tailstream_config::default_replicas(alive as u32)
                }
            };
            stream.min_insync_replicas = args
                .min_insync_replicas
                .unwrap_or(stream.min_insync_replicas);
            stream.segment_size_bytes =
                args.segment_size_bytes.unwrap_or(stream.segment_size_bytes);
            stream.segments_per_group =
                args.segments_per_group.unwrap_or(stream.segments_per_group);
            stream.retention_bytes = args.retention_bytes.unwrap_or(stream.retention_bytes);
            stream.retention_ms = args.retention_ms.unwrap_or(stream.retention_ms);
            let created = cluster
                .create_stream(&args.name, args.streamlets, stream)
                .await
                .map_err(|e| e.to_string())?;
            print_stream(&created);
        }
        StreamCommand::Alter {
            name,
            streamlets,
            retention_bytes,
            retention_ms,
            delete_before,
        } => {
            let retention = retention_bytes.is_some() || retention_ms.is_some();
            if streamlets.is_none() && !retention && delete_before.is_empty() {
                return Err("say what to change: --streamlets, --retention-bytes, \
                            --retention-ms or --delete-before"
                    .into());
            }
            let mut by_streamlet: std::collections::BTreeMap<StreamletId, Vec<LogStart>> =
                std::collections::BTreeMap::new();
            for (streamlet, start) in delete_before {
                by_streamlet.entry(streamlet).or_default().push(start);
            }
            for (streamlet, starts) in by_streamlet {
                cluster
                    .delete_records(&name, streamlet, starts.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                for start in starts {
                    println!(
                        "{name} {streamlet} {}: records before offset {} deleted",
                        start.log, start.offset.0
                    );
                }
            }
            let mut altered = None;
            if let Some(streamlets) = streamlets {
                altered = Some(
                    cluster
                        .add_streamlets(&name, streamlets)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            if retention {
                altered = Some(
                    cluster
                        .alter_retention(&name, retention_ms, retention_bytes)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            if let Some(altered) = altered {
                print_stream(&altered);
            }
        }
        StreamCommand::List { json } => {
            for stream in cluster.list_streams().await.map_err(|e| e.to_string())? {
                if json {
                    println!("{}", stream_json(&stream));
                } else {
                    print_stream(&stream);
                }
            }
        }
        StreamCommand::Delete { name } => {
            cluster
                .delete_stream(&name)
                .await
                .map_err(|e| e.to_string())?;
            println!("deleted stream {name}");
        }
        StreamCommand::Describe { name, json } => {
            let stream = cluster
                .describe_stream(&name)
                .await
                .map_err(|e| e.to_string())?;
            describe(&cluster, &stream, json).await;
        }
    }
    Ok(())
}

fn stream_json(stream: &StreamMetadata) -> Value {
    let c = &stream.config;
    json!({
        "name": stream.name,
        "id": stream.id.0,
        "streamlets": stream.streamlets.len(),
        "logs_per_streamlet": c.logs_per_streamlet,
        "replicas": c.replicas,
        "min_insync_replicas": c.min_insync(),
        "segment_size_bytes": c.segment_size_bytes,
        "segments_per_group": c.segments_per_group,
        "retention_bytes": c.retention_bytes,
        "retention_ms": c.retention_ms,
    })
}

/// Settings, then per streamlet its owner and state and per log its records (first live
/// offset to committed end), appended end, groups, segments, committed bytes and where its
/// segments in flight have their replicas, asked of each owner; then every consumer group's
/// lag on this stream. A streamlet whose owner does not answer says why and the rest goes on.
async fn describe(cluster: &Client, stream: &StreamMetadata, json: bool) {
    let mut streamlets = Vec::new();
    for placement in &stream.streamlets {
        let state = match placement.state {
            PlacementState::Serving => "serving",
            PlacementState::Recovering => "recovering",
            PlacementState::Lost => "lost",
        };
        let logs = if placement.state == PlacementState::Serving {
            cluster
                .describe_logs(stream, StreamletId(placement.streamlet.0))
                .await
                .map(|answer| answer.logs)
                .map_err(|e| e.to_string())
        } else {
            Err(placement.detail.clone())
        };
        streamlets.push((placement, state, logs));
    }
    let lag: Result<Vec<PartitionLagInfo>, String> = cluster
        .consumer_groups()
        .await
        .map(|groups| {
            groups
                .lag
                .into_iter()
                .filter(|row| row.stream == stream.name)
                .collect()
        })
        .map_err(|e| e.to_string());
    if json {
        let streamlets: Vec<Value> = streamlets
            .iter()
            .map(|(placement, state, logs)| {
                json!({
                    "streamlet": placement.streamlet.0,
                    "owner": placement.owner.to_string(),
                    "owner_addr": placement.owner_addr,
                    "epoch": placement.epoch,
                    "state": state,
                    "detail": placement.detail,
                    "under_replicated_logs": placement.under_replicated_logs(stream.config.replicas),
                    "replication": placement.replication.iter().map(replica_set_json).collect::<Vec<_>>(),
                    "logs": logs.as_ref().ok().map(|logs| {
                        logs.iter().map(log_json).collect::<Vec<_>>()
                    }),
                    "error": logs.as_ref().err(),
                })
            })
            .collect();
        let mut value = stream_json(stream);
        value["streamlets"] = Value::Array(streamlets);
        value["consumer_groups"] = match &lag {
            Ok(rows) => super::group::lag_json(rows),
            Err(error) => json!({ "error": error }),
        };
        println!("{value}");
        return;
    }
    print_stream(stream);
    for (placement, state, logs) in &streamlets {
        let short = placement.under_replicated_logs(stream.config.replicas);
        println!(
            "  streamlet {} owner {} at {} {} {state}{}{}",
            placement.streamlet.0,
            placement.owner,
            placement.owner_addr,
            placement.epoch,
            if short > 0 {
                format!(
                    ", UNDER-REPLICATED ({short} of its logs short of {} copies)",
                    stream.config.replicas
                )
            } else {
                String::new()
            },
            if placement.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", placement.detail)
            },
        );
        match logs {
            Ok(logs) => {
                for log in logs {
                    let summary = LogSummary::of(log);
                    println!(
                        "    log {} records {}..{} ({}) appended to {}  groups {} segments {} \
                         committed {}",
                        log.log.0,
                        summary.first_offset,
                        log.committed_offset.0,
                        human_count(summary.records),
                        log.next_offset.0,
                        log.groups.len(),
                        summary.segments,
                        human_bytes(summary.committed_bytes),
                    );
                    if !log.replicas.is_empty() {
                        println!("      replicas {}", replicas_line(log));
                    }
                    if let Some(set) = placement.replication.iter().find(|s| s.log == log.log) {
                        println!(
                            "      in sync {}/{} (min {}): {}",
                            set.in_sync_replicas,
                            stream.config.replicas,
                            stream.config.min_insync(),
                            in_sync_line(set),
                        );
                    }
                }
            }
            Err(why) if placement.state == PlacementState::Serving => {
                println!("    logs unknown: {why}");
            }
            Err(_) => {}
        }
    }
    match lag {
        Ok(rows) => super::group::print_lag(&rows),
        Err(error) => println!("  consumer groups unknown: {error}"),
    }
}

/// `segment 3 on server-1.0, server-2.0; segment 4 on server-2.0, server-3.0`.
fn replicas_line(log: &LogGroups) -> String {
    log.replicas
        .iter()
        .map(|r| {
            let backups: Vec<String> = r.backups.iter().map(ToString::to_string).collect();
            format!("segment {} on {}", r.segment.0, backups.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `server-1.0, server-2.0 (server-3.0 lost)`: a log's backups, those not in sync marked.
fn in_sync_line(set: &LogReplicaSet) -> String {
    set.backups
        .iter()
        .map(|b| {
            if set.in_sync.contains(b) {
                b.to_string()
            } else {
                format!("{b} (not in sync)")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn replica_set_json(set: &LogReplicaSet) -> Value {
    json!({
        "log": set.log.0,
        "backups": set.backups.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "in_sync": set.in_sync.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "in_sync_replicas": set.in_sync_replicas,
    })
}

/// What one log holds now.
struct LogSummary {
    /// Offset of the oldest record retention kept.
    first_offset: u64,
    records: u64,
    segments: usize,
    committed_bytes: u64,
}

impl LogSummary {
    fn of(log: &LogGroups) -> Self {
        let first_offset = log
            .groups
            .first()
            .map_or(log.committed_offset.0, |g| g.first_offset.0);
        Self {
            first_offset,
            records: log.committed_offset.0.saturating_sub(first_offset),
            segments: log.groups.iter().map(|g| g.segments.len()).sum(),
            committed_bytes: log
                .groups
                .iter()
                .flat_map(|g| &g.segments)
                .map(|s| u64::from(s.committed_bytes))
                .sum(),
        }
    }
}

fn log_json(log: &LogGroups) -> Value {
    let summary = LogSummary::of(log);
    json!({
        "log": log.log.0,
        "first_offset": summary.first_offset,
        "committed_offset": log.committed_offset.0,
        "next_offset": log.next_offset.0,
        "records": summary.records,
        "groups": log.groups.len(),
        "segments": summary.segments,
        "committed_bytes": summary.committed_bytes,
        "replicas": log.replicas.iter().map(|r| json!({
            "segment": r.segment.0,
            "backups": r.backups.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
