//! `tailstream stream create|list|describe`.

use clap::{Args, Subcommand};
use tailstream_config::Config;
use tailstream_wire::messages::PlacementState;
use tailstream_wire::messages::StreamMetadata;

#[derive(Subcommand, Debug)]
pub enum StreamCommand {
    /// Create a stream.
    Create(CreateArgs),
    /// List streams.
    List,
    /// Show a stream's settings and where its streamlets live.
    Describe { name: String },
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
    /// R: backups per segment (default: min(3, live brokers - 1)).
    #[arg(long)]
    replicas: Option<u32>,
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

fn print_stream(stream: &StreamMetadata) {
    let c = &stream.config;
    println!(
        "stream {} (id {}): streamlets={} logs={} replicas={} segment_size_bytes={} segments_per_group={} retention_bytes={} retention_ms={}",
        stream.name,
        stream.id.0,
        stream.streamlets.len(),
        c.logs_per_streamlet,
        c.replicas,
        c.segment_size_bytes,
        c.segments_per_group,
        c.retention_bytes,
        c.retention_ms
    );
}

pub async fn run(config: Config, coordinator: &str, command: StreamCommand) -> Result<(), String> {
    let cluster = super::cluster(&config, coordinator);
    match command {
        StreamCommand::Create(args) => {
            let mut stream = config.stream_defaults.clone();
            stream.logs_per_streamlet = args.logs.unwrap_or(stream.logs_per_streamlet);
            stream.replicas = match args.replicas {
                Some(replicas) => replicas,
                None => {
                    let brokers = cluster.list_brokers().await.map_err(|e| e.to_string())?;
                    let alive = brokers.iter().filter(|b| b.alive).count() as u32;
                    alive.saturating_sub(1).min(3)
                }
            };
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
        StreamCommand::List => {
            for stream in cluster.list_streams().await.map_err(|e| e.to_string())? {
                print_stream(&stream);
            }
        }
        StreamCommand::Describe { name } => {
            let stream = cluster
                .refresh_stream(&name)
                .await
                .map_err(|e| e.to_string())?;
            print_stream(&stream);
            for placement in &stream.streamlets {
                let state = match placement.state {
                    PlacementState::Serving => String::from("serving"),
                    PlacementState::Recovering => format!("RECOVERING ({})", placement.detail),
                    PlacementState::Lost => format!("LOST: {}", placement.detail),
                };
                println!(
                    "  streamlet {} owner {} at {} epoch {} {state}",
                    placement.streamlet.0, placement.owner, placement.owner_addr, placement.epoch
                );
            }
        }
    }
    Ok(())
}
