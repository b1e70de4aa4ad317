//! `tailstream bench produce`: produce throughput and latency against real processes.
//!
//! Starts a local cluster of `--brokers` processes (or joins `--join ADDR`), creates a fresh
//! stream, runs P producers (one task and one producer id each, so with P <= Q they land on
//! distinct logs) that send N records in total, and reports:
//! records/s and MiB/s of acknowledged record data, record latency percentiles (from `send`
//! to the processed ack, queueing included, as Kafka's producer-perf-test measures it), and
//! CPU seconds of all broker processes per GiB acknowledged. Bounded by `--records` and by
//! `--time-limit-s`.

use crate::cpu::total_cpu_seconds;
use clap::Args;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_client::{AckFuture, Cluster, Producer};
use tailstream_config::{Config, ReplicationMode};
use tailstream_launcher::LocalCluster;

#[derive(Args, Debug, Clone)]
pub struct ProduceBenchArgs {
    /// P: concurrent producers.
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
    /// B: bytes per record value.
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// S: producer batch size in bytes.
    #[arg(long, default_value_t = 65536)]
    pub batch_bytes: u32,
    /// Q: logs per streamlet.
    #[arg(long, default_value_t = 4)]
    pub logs: u32,
    /// N: records in total.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Streamlets of the benchmark stream.
    #[arg(long, default_value_t = 1)]
    pub streamlets: u32,
    /// R: backups per segment.
    #[arg(long, default_value_t = 0)]
    pub replicas: u32,
    /// How segments reach their backups: `one-sided` (Tailwind) or `rpc` (the baseline).
    /// Applies to the cluster the benchmark starts.
    #[arg(long, default_value = "one-sided", value_parser = ["one-sided", "rpc"])]
    pub replication: String,
    /// Brokers to start when not joining a cluster (at least R + 1 are started).
    #[arg(long, default_value_t = 1)]
    pub brokers: u32,
    /// Join the cluster whose coordinator is at this address instead of starting one.
    #[arg(long)]
    pub join: Option<String>,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value_t = 8)]
    pub max_in_flight: u32,
    /// Seconds of load before measuring starts (connections, buffer pools, memory settle).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// Stop producing after this long and report what was acknowledged.
    #[arg(long, default_value_t = 300)]
    pub time_limit_s: u64,
    /// Print one JSON object instead of a table row.
    #[arg(long)]
    pub json: bool,
}

/// One benchmark run's result.
#[derive(Debug, Serialize)]
pub struct ProduceBenchReport {
    pub producers: u32,
    pub record_bytes: usize,
    pub batch_bytes: u32,
    pub logs: u32,
    pub streamlets: u32,
    pub replicas: u32,
    pub replication: String,
    pub brokers: u32,
    pub records: u64,
    pub records_acked: u64,
    pub records_failed: u64,
    /// Records acknowledged in the measured interval (after the warm-up).
    pub measured_records: u64,
    pub elapsed_s: f64,
    pub records_per_sec: f64,
    pub mib_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    /// CPU seconds of every broker process per GiB of acknowledged record data (null when
    /// joining a cluster whose processes we cannot see).
    pub cpu_seconds_per_gib: Option<f64>,
}

struct ProducerOutcome {
    failed: u64,
    latency_us: Histogram<u64>,
}

/// What the producer tasks and the measuring task share.
#[derive(Debug, Default)]
struct Progress {
    /// Records acknowledged so far, all producers together.
    acked: AtomicU64,
    /// Set once the warm-up is over: only records sent from then on feed the latency histogram.
    measuring: AtomicBool,
}

/// Unsettled records one producer task tracks before awaiting the oldest.
const PENDING_MAX: usize = 1 << 20;
/// The send clock is read once per this many records (a clock read per 100-byte record costs
/// more than the rest of `send`); latencies are thus up to that many records' send time late.
const CLOCK_EVERY_RECORDS: u64 = 32;

async fn produce(
    producer: Producer,
    records: u64,
    record_bytes: usize,
    deadline: Instant,
    progress: Arc<Progress>,
) -> Result<ProducerOutcome, String> {
    let mut latency_us =
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).map_err(|e| e.to_string())?;
    // (send time, counts for latency, ack)
    let mut pending: VecDeque<(Instant, bool, AckFuture)> = VecDeque::new();
    let mut failed = 0u64;
    let mut value = vec![b'x'; record_bytes];
    let mut settle = |sent: Instant,
                      measured: bool,
                      result: Result<tailstream_client::RecordAck, _>| {
        match result {
            Ok(ack) => {
                progress.acked.fetch_add(1, Ordering::Relaxed);
                if measured {
                    let micros = ack.acked_at.saturating_duration_since(sent).as_micros() as u64;
                    let _ = latency_us.record(micros.max(1));
                }
            }
            Err(_) => failed += 1,
        }
    };
    let mut now = Instant::now();
    let mut measuring = false;
    for i in 0..records {
        if i % CLOCK_EVERY_RECORDS == 0 {
            now = Instant::now();
            measuring = progress.measuring.load(Ordering::Relaxed);
            if now >= deadline {
                break;
            }
        }
        // Vary the value so batches are not trivially identical.
        let stamp = i.to_le_bytes();
        let n = stamp.len().min(value.len());
        value[..n].copy_from_slice(&stamp[..n]);
        let ack = producer
            .send(None, &value)
            .await
            .map_err(|e| e.to_string())?;
        pending.push_back((now, measuring, ack));
        while let Some((sent, measured, front)) = pending.front() {
            match front.try_result() {
                Some(result) => {
                    settle(*sent, *measured, result);
                    pending.pop_front();
                }
                None if pending.len() > PENDING_MAX => {
                    if let Some((sent, measured, ack)) = pending.pop_front() {
                        settle(sent, measured, ack.await);
                    }
                }
                None => break,
            }
        }
    }
    producer.flush().await.map_err(|e| e.to_string())?;
    for (sent, measured, ack) in pending {
        settle(sent, measured, ack.await);
    }
    Ok(ProducerOutcome { failed, latency_us })
}

pub async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    join: Option<String>,
    args: ProduceBenchArgs,
) -> Result<(), String> {
    let report = measure(config, config_path, join, &args).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "R={} {:>9} {:>3} producers {:>2} logs {:>8} B batches: {:>12.0} records/s {:>8.1} MiB/s  latency p50 {:>7} us p99 {:>7} us p999 {:>7} us  cpu {} s/GiB",
            report.replicas,
            report.replication,
            report.producers,
            report.logs,
            report.batch_bytes,
            report.records_per_sec,
            report.mib_per_sec,
            report.p50_us,
            report.p99_us,
            report.p999_us,
            report
                .cpu_seconds_per_gib
                .map_or("n/a".into(), |c| format!("{c:.2}")),
        );
    }
    Ok(())
}

pub async fn measure(
    config: Config,
    _config_path: Option<PathBuf>,
    join: Option<String>,
    args: &ProduceBenchArgs,
) -> Result<ProduceBenchReport, String> {
    if args.producers == 0 || args.records == 0 {
        return Err("--producers and --records must be positive".into());
    }
    let data_dir = crate::harness::BenchDir::new("tailstream-bench-")?;
    let (local, coordinator) = match join {
        Some(addr) => (None, addr),
        None => {
            // The effective config (embedded default + the user's file) with the replication
            // mode asked for, written whole for the children.
            let mut effective = config.clone();
            effective.replication.mode = match args.replication.as_str() {
                "rpc" => ReplicationMode::Rpc,
                _ => ReplicationMode::OneSided,
            };
            let cluster = crate::harness::start_cluster(
                None,
                &effective,
                data_dir.path(),
                brokers_to_start(args),
                &crate::harness::log_filter("warn"),
            )
            .await?;
            let addr = cluster.coordinator_addr().to_string();
            (Some(cluster), addr)
        }
    };
    let result = run_producers(&config, &coordinator, local.as_ref(), args).await;
    if let Some(cluster) = local {
        cluster.stop().await;
    }
    data_dir.finish(result.is_err());
    result
}

async fn run_producers(
    config: &Config,
    coordinator: &str,
    local: Option<&LocalCluster>,
    args: &ProduceBenchArgs,
) -> Result<ProduceBenchReport, String> {
    let cluster = Cluster::new(
        coordinator,
        &config.client,
        config.producer.request_timeout_ms,
    );
    let brokers = if local.is_some() {
        brokers_to_start(args)
    } else {
        args.replicas + 1
    };
    crate::harness::wait_for_brokers(&cluster, brokers).await?;
    let mut stream = config.stream_defaults.clone();
    stream.logs_per_streamlet = args.logs;
    stream.replicas = args.replicas;
    // Small groups and bounded retention keep broker memory flat however long the run.
    stream.segments_per_group = 4;
    stream.retention_bytes = 256 << 20;
    let name = format!("bench-{}", unique_suffix());
    cluster
        .create_stream(&name, args.streamlets.max(1), stream)
        .await
        .map_err(|e| e.to_string())?;

    let mut producer_config = config.producer.clone();
    producer_config.batch_size_bytes = args.batch_bytes;
    producer_config.linger_ms = args.linger_ms;
    producer_config.max_in_flight = args.max_in_flight;
    producer_config.buffer_bytes_max = producer_config
        .buffer_bytes_max
        .max(4 * u64::from(args.batch_bytes) * u64::from(args.max_in_flight));
    let mut producers = Vec::new();
    for _ in 0..args.producers {
        let producer = Producer::new(cluster.clone(), &name, producer_config.clone())
            .await
            .map_err(|e| e.to_string())?;
        producers.push(producer);
    }
    let pids: Vec<u32> = local
        .map(|c| c.brokers().filter_map(|b| b.pid()).collect())
        .unwrap_or_default();
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.time_limit_s);
    let per_producer = args.records / u64::from(args.producers);
    let remainder = args.records % u64::from(args.producers);
    let mut tasks: Vec<_> = producers
        .into_iter()
        .enumerate()
        .map(|(i, producer)| {
            let records = per_producer + u64::from((i as u64) < remainder);
            tokio::spawn(produce(
                producer,
                records,
                args.record_bytes,
                deadline,
                progress.clone(),
            ))
        })
        .collect();
    // Warm-up: connections, buffer pools and segment memory settle before measuring.
    let warmup = Duration::from_secs_f64(args.warmup_s);
    while started.elapsed() < warmup && !tasks.iter().all(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let warmed_up = started.elapsed() >= warmup;
    let (measure_start, acked_before, cpu_before) = if warmed_up {
        progress.measuring.store(true, Ordering::Relaxed);
        (
            Instant::now(),
            progress.acked.load(Ordering::Relaxed),
            total_cpu_seconds(&pids),
        )
    } else {
        // The whole run was shorter than the warm-up: measure all of it.
        progress.measuring.store(true, Ordering::Relaxed);
        (started, 0, 0.0)
    };
    let mut latency_us =
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).map_err(|e| e.to_string())?;
    let mut failed = 0u64;
    for task in tasks.drain(..) {
        let outcome = task.await.map_err(|e| e.to_string())??;
        failed += outcome.failed;
        latency_us
            .add(&outcome.latency_us)
            .map_err(|e| e.to_string())?;
    }
    let elapsed_s = measure_start.elapsed().as_secs_f64();
    let cpu_seconds = total_cpu_seconds(&pids) - cpu_before;
    let acked_total = progress.acked.load(Ordering::Relaxed);
    let acked = acked_total - acked_before;
    let acked_bytes = acked as f64 * args.record_bytes as f64;
    let gib = acked_bytes / f64::from(1u32 << 30);
    Ok(ProduceBenchReport {
        producers: args.producers,
        record_bytes: args.record_bytes,
        batch_bytes: args.batch_bytes,
        logs: args.logs,
        streamlets: args.streamlets,
        replicas: args.replicas,
        replication: args.replication.clone(),
        brokers: local.map_or(0, |c| c.spec().brokers),
        records: args.records,
        records_acked: acked_total,
        records_failed: failed,
        measured_records: acked,
        elapsed_s,
        records_per_sec: acked as f64 / elapsed_s,
        mib_per_sec: acked_bytes / f64::from(1u32 << 20) / elapsed_s,
        p50_us: latency_us.value_at_quantile(0.5),
        p99_us: latency_us.value_at_quantile(0.99),
        p999_us: latency_us.value_at_quantile(0.999),
        cpu_seconds_per_gib: (!pids.is_empty() && gib > 0.0).then(|| cpu_seconds / gib),
    })
}

fn brokers_to_start(args: &ProduceBenchArgs) -> u32 {
    args.brokers.max(args.replicas + 1).max(1)
}

/// Distinct per run, so runs against one joined cluster never collide.
fn unique_suffix() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
}
