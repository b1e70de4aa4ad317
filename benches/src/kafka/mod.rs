//! `tailstream bench kafka`: the same closed-loop load through the native protocol and through
//! the Kafka listener, side by side on one cluster, and their ratio.
//!
//! Each round runs both (alternating which goes first, so neither always meets a warmer
//! cluster) on fresh streams of the same shape: P native producers ([`crate::produce`]), then
//! P Kafka producers ([`producer`]), producer i on partition i (streamlet i / Q, log i % Q),
//! with the same record size, batch size and requests in flight. Each run is measured after
//! its warm-up over one interval: records/s, MiB/s, record latency, and CPU per GiB of the
//! streamlets' owners (where the Kafka front end's cost shows) and of this client.

mod connection;
mod producer;

use crate::produce::{self, BOUNDED_RETENTION_BYTES, CpuSnapshot, ProduceBenchArgs};
use crate::progress::ProgressLine;
use clap::Args;
use connection::KafkaConnection;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_client::Cluster;
use tailstream_config::Config;
use tailstream_launcher::LocalCluster;

#[derive(Args, Debug, Clone)]
pub struct KafkaBenchArgs {
    /// Rounds: each runs the native and the Kafka load once, alternating which goes first.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    #[command(flatten)]
    pub produce: ProduceBenchArgs,
}

/// One run of one protocol. Rates and CPU cover the measured interval (after the warm-up);
/// CPU is `null` when the processes cannot be seen (`--join`).
#[derive(Debug, Serialize)]
pub struct ProtocolRun {
    pub round: u32,
    pub protocol: &'static str,
    pub measured_records: u64,
    pub elapsed_s: f64,
    pub records_per_sec: f64,
    pub mib_per_sec: f64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub primary_cpu_seconds_per_gib: Option<f64>,
    pub primary_user_cpu_seconds_per_gib: Option<f64>,
    pub primary_system_cpu_seconds_per_gib: Option<f64>,
    pub client_cpu_seconds_per_gib: Option<f64>,
}

/// Kafka over native, from the runs of every round (medians of the per-round ratios).
#[derive(Debug, Serialize)]
pub struct KafkaBenchSummary {
    pub rounds: u32,
    pub producers: u32,
    pub record_bytes: usize,
    pub batch_bytes: u32,
    pub replicas: u32,
    pub kafka_over_native_throughput: f64,
    pub kafka_over_native_primary_cpu_per_gib: Option<f64>,
}

/// What the Kafka producers and the measuring task share.
#[derive(Debug, Default)]
struct Progress {
    acked: Arc<AtomicU64>,
    measured: AtomicU64,
    measuring: AtomicBool,
}

pub async fn run(config: Config, args: KafkaBenchArgs) -> Result<(), String> {
    let load = &args.produce;
    if args.rounds == 0 || load.producers == 0 || load.records == 0 {
        return Err("--rounds, --producers and --records must be positive".into());
    }
    if load.rate.is_some() {
        return Err("bench kafka runs closed loop only (no --rate)".into());
    }
    let cluster = crate::harness::BenchCluster::start_or_join(
        &config,
        load.join.clone(),
        &load.replication,
        load.brokers.max(load.replicas + 1).max(1),
    )
    .await?;
    let result = rounds(&config, &cluster, &args).await;
    cluster.finish(result.is_err()).await;
    let runs = result?;
    let summary = summarize(&args, &runs);
    if load.json {
        for run in &runs {
            println!("{}", serde_json::to_string(run).map_err(|e| e.to_string())?);
        }
        println!(
            "{}",
            serde_json::to_string(&summary).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "kafka / native (median of {} rounds): throughput {:.2}x, primary cpu per GiB {}",
            summary.rounds,
            summary.kafka_over_native_throughput,
            summary
                .kafka_over_native_primary_cpu_per_gib
                .map_or("-".into(), |r| format!("{r:.2}x")),
        );
    }
    Ok(())
}

async fn rounds(
    config: &Config,
    cluster: &crate::harness::BenchCluster,
    args: &KafkaBenchArgs,
) -> Result<Vec<ProtocolRun>, String> {
    let local = cluster.local.as_ref();
    let retention_bytes = retention_per_run(config, args)?;
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let kafka_first = round % 2 == 1;
        for kafka in [kafka_first, !kafka_first] {
            let run = if kafka {
                kafka_run(
                    config,
                    &cluster.coordinator,
                    local,
                    &args.produce,
                    round,
                    retention_bytes,
                )
                .await?
            } else {
                native_run(
                    config,
                    &cluster.coordinator,
                    local,
                    &args.produce,
                    round,
                    retention_bytes,
                )
                .await?
            };
            if !args.produce.json {
                eprintln!("{}", table_row(&run));
            }
            runs.push(run);
        }
    }
    Ok(runs)
}

async fn native_run(
    config: &Config,
    coordinator: &str,
    local: Option<&LocalCluster>,
    args: &ProduceBenchArgs,
    round: u32,
    retention_bytes: u64,
) -> Result<ProtocolRun, String> {
    let prepared = produce::prepare(config, coordinator, local, args, retention_bytes).await?;
    let report = produce::drive(prepared, local, args).await?;
    Ok(ProtocolRun {
        round,
        protocol: "native",
        measured_records: report.measured_records,
        elapsed_s: report.elapsed_s,
        records_per_sec: report.records_per_sec,
        mib_per_sec: report.mib_per_sec,
        p50_us: report.p50_us,
        p99_us: report.p99_us,
        primary_cpu_seconds_per_gib: report.primary_cpu_seconds_per_gib,
        primary_user_cpu_seconds_per_gib: report.primary_user_cpu_seconds_per_gib,
        primary_system_cpu_seconds_per_gib: report.primary_system_cpu_seconds_per_gib,
        client_cpu_seconds_per_gib: report.client_cpu_seconds_per_gib,
    })
}

async fn kafka_run(
    config: &Config,
    coordinator: &str,
    local: Option<&LocalCluster>,
    args: &ProduceBenchArgs,
    round: u32,
    retention_bytes: u64,
) -> Result<ProtocolRun, String> {
    // A fresh stream of the same shape, without native producers.
    let mut shape = args.clone();
    shape.producers = 0;
    let prepared = produce::prepare(config, coordinator, local, &shape, retention_bytes).await?;
    let leaders = leaders(&prepared.cluster, &prepared.stream).await?;
    let progress = Arc::new(Progress::default());
    let _line = ProgressLine::start("records", progress.acked.clone());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.time_limit_s);
    let count = u64::from(args.producers);
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let (partition, leader) = leaders[i as usize % leaders.len()].clone();
            let plan = producer::Plan {
                leader,
                topic: prepared.stream.clone(),
                partition,
                records: args.records / count + u64::from(i < args.records % count),
                record_bytes: args.record_bytes,
                batch_bytes: args.batch_bytes as usize,
                max_in_flight: args.max_in_flight as usize,
                deadline,
            };
            tokio::spawn(producer::produce(plan, progress.clone()))
        })
        .collect();
    let warmup = Duration::from_secs_f64(args.warmup_s.max(0.0));
    while started.elapsed() < warmup && !tasks.iter().all(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if started.elapsed() < warmup {
        // A producer that failed says why before the run is called too short.
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        return Err(format!(
            "the kafka run ended within the {:.1} s warm-up: too short to measure (send more \
             --records, or shorten --warmup-s)",
            args.warmup_s
        ));
    }
    progress.measuring.store(true, Ordering::Relaxed);
    let measure_start = Instant::now();
    let cpu_before = CpuSnapshot::take(&prepared.roles);
    let mut latency = crate::latency::histogram();
    let mut last_ack = None;
    for task in tasks {
        let outcome = task.await.map_err(|e| e.to_string())??;
        latency
            .add(&outcome.latency_us)
            .map_err(|e| format!("merging latencies: {e}"))?;
        last_ack = last_ack.max(outcome.last_measured_ack);
    }
    let cpu = CpuSnapshot::take(&prepared.roles).since(cpu_before);
    let records = progress.measured.load(Ordering::Relaxed);
    let elapsed_s = last_ack.map_or(0.0, |at| at.duration_since(measure_start).as_secs_f64());
    if records == 0 || elapsed_s <= 0.0 {
        return Err("no kafka record was acknowledged in the measured interval".into());
    }
    let bytes = records as f64 * args.record_bytes as f64;
    let seen = !prepared.roles.primaries.is_empty();
    let primary = cpu.primaries.per_gib(bytes).filter(|_| seen);
    let summary = crate::latency::LatencySummary::of(&latency);
    Ok(ProtocolRun {
        round,
        protocol: "kafka",
        measured_records: records,
        elapsed_s,
        records_per_sec: records as f64 / elapsed_s,
        mib_per_sec: bytes / f64::from(1u32 << 20) / elapsed_s,
        p50_us: summary.map(|s| s.p50_us),
        p99_us: summary.map(|s| s.p99_us),
        primary_cpu_seconds_per_gib: primary.map(|c| c.total_s()),
        primary_user_cpu_seconds_per_gib: primary.map(|c| c.user_s),
        primary_system_cpu_seconds_per_gib: primary.map(|c| c.system_s),
        client_cpu_seconds_per_gib: cpu.client.per_gib(bytes).map(|c| c.total_s()),
    })
}

/// Every partition of `stream` and its leader's Kafka address, from a Kafka Metadata request
/// to a live broker's Kafka listener (retried briefly while the new stream settles).
async fn leaders(cluster: &Cluster, stream: &str) -> Result<Vec<(i32, String)>, String> {
    let brokers = cluster.list_brokers().await.map_err(|e| e.to_string())?;
    let bootstrap = brokers
        .iter()
        .find(|b| b.alive && !b.kafka_addr.is_empty())
        .map(|b| b.kafka_addr.clone())
        .ok_or("no live broker has a Kafka listener ([kafka] enabled = false?)")?;
    let mut connection = KafkaConnection::connect(&bootstrap).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match connection.leaders(stream).await {
            Ok(leaders) if !leaders.is_empty() => return Ok(leaders),
            Ok(_) if Instant::now() < deadline => {}
            Err(_) if Instant::now() < deadline => {}
            Ok(_) => return Err(format!("topic {stream} has no partitions")),
            Err(error) => return Err(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Retention of each run's stream. Every run leaves its stream behind (a stream cannot be
/// deleted) at up to its retention plus one segment per log, per streamlet; all of them must
/// fit one broker's segment memory (the worst placement), or a late run would only meet
/// backpressure. Three quarters of the budget are shared out; never more than `bench produce`
/// keeps.
fn retention_per_run(config: &Config, args: &KafkaBenchArgs) -> Result<u64, String> {
    let load = &args.produce;
    let runs = 2 * u64::from(args.rounds);
    let streamlets = u64::from(load.streamlets.max(1));
    let segment_bytes = u64::from(config.stream_defaults.segment_size_bytes);
    let budget = config.broker.segment_memory_bytes_max / 4 * 3;
    let per_streamlet = budget / (runs * streamlets);
    let retention = per_streamlet
        .saturating_sub(u64::from(load.logs) * segment_bytes)
        .min(BOUNDED_RETENTION_BYTES);
    if retention < 2 * segment_bytes {
        return Err(format!(
            "{} runs of {streamlets} streamlet(s) x {} logs do not fit a broker's \
             segment_memory_bytes_max ({} MiB): use fewer --rounds, --streamlets or --logs",
            runs,
            load.logs,
            config.broker.segment_memory_bytes_max >> 20
        ));
    }
    Ok(retention)
}

fn summarize(args: &KafkaBenchArgs, runs: &[ProtocolRun]) -> KafkaBenchSummary {
    let ratio = |f: &dyn Fn(&ProtocolRun) -> Option<f64>| -> Option<f64> {
        let mut ratios: Vec<f64> = (0..args.rounds)
            .filter_map(|round| {
                let of = |protocol| {
                    runs.iter()
                        .find(|r| r.round == round && r.protocol == protocol)
                        .and_then(f)
                };
                Some(of("kafka")? / of("native")?)
            })
            .filter(|r| r.is_finite())
            .collect();
        ratios.sort_by(f64::total_cmp);
        let middle = ratios.len() / 2;
        match ratios.len() {
            0 => None,
            n if n % 2 == 1 => Some(ratios[middle]),
            _ => Some((ratios[middle - 1] + ratios[middle]) / 2.0),
        }
    };
    KafkaBenchSummary {
        rounds: args.rounds,
        producers: args.produce.producers,
        record_bytes: args.produce.record_bytes,
        batch_bytes: args.produce.batch_bytes,
        replicas: args.produce.replicas,
        kafka_over_native_throughput: ratio(&|r| Some(r.records_per_sec)).unwrap_or(f64::NAN),
        kafka_over_native_primary_cpu_per_gib: ratio(&|r| r.primary_cpu_seconds_per_gib),
    }
}

fn table_row(run: &ProtocolRun) -> String {
    let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let us = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    format!(
        "round {} {:<6} {:>10.0} records/s {:>7.1} MiB/s  p50 {} us p99 {} us  cpu s/GiB: \
         primary {} (user {} sys {}) client {}  ({} records in {:.2} s)",
        run.round,
        run.protocol,
        run.records_per_sec,
        run.mib_per_sec,
        us(run.p50_us),
        us(run.p99_us),
        opt(run.primary_cpu_seconds_per_gib),
        opt(run.primary_user_cpu_seconds_per_gib),
        opt(run.primary_system_cpu_seconds_per_gib),
        opt(run.client_cpu_seconds_per_gib),
        run.measured_records,
        run.elapsed_s,
    )
}
