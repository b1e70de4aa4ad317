//! `tailstream bench consume`: read throughput of a filled stream. Fills a fresh stream with N
//! records (closed loop, as `bench produce`), then C consumers read it from the beginning at
//! once, each every C-th log, until every record is read; reports records/s and MiB/s read
//! and CPU per GiB read of the brokers and of this client.

use crate::cpu::{own_cpu_time, total_cpu_time};
use crate::produce::{self, ProduceBenchArgs};
use clap::Args;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_config::Config;

#[derive(Args, Debug, Clone)]
pub struct ConsumeBenchArgs {
    /// C: consumers reading at once (each reads every C-th log).
    #[arg(long, default_value_t = 1)]
    pub consumers: u32,
    /// Give up reading after this long.
    #[arg(long, default_value_t = 120)]
    pub read_time_limit_s: u64,
    #[command(flatten)]
    pub produce: ProduceBenchArgs,
}

#[derive(Debug, Serialize)]
pub struct ConsumeBenchReport {
    pub consumers: u32,
    pub logs: u32,
    pub streamlets: u32,
    pub record_bytes: usize,
    pub replicas: u32,
    pub records: u64,
    pub elapsed_s: f64,
    pub records_per_sec: f64,
    pub mib_per_sec: f64,
    /// Every broker process, per GiB of record data read (null when joining a cluster).
    pub broker_cpu_seconds_per_gib: Option<f64>,
    pub client_cpu_seconds_per_gib: Option<f64>,
    /// The fill's own throughput.
    pub fill_records_per_sec: f64,
}

const POLL: Duration = Duration::from_millis(100);

pub async fn run(config: Config, mut args: ConsumeBenchArgs) -> Result<(), String> {
    if args.consumers == 0 {
        return Err("--consumers must be positive".into());
    }
    // The fill is measured whole: nothing to warm up.
    args.produce.warmup_s = 0.0;
    args.produce.rate = None;
    let cluster = crate::harness::BenchCluster::start_or_join(
        &config,
        args.produce.join.clone(),
        &args.produce.replication,
        args.produce.brokers.max(args.produce.replicas + 1).max(1),
    )
    .await?;
    let result = measure(&config, &cluster, &args).await;
    cluster.finish(result.is_err()).await;
    let report = result?;
    if args.produce.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "{} consumers, {} logs: {:.0} records/s {:.1} MiB/s read ({} records in {:.2} s); \
             cpu s/GiB: brokers {} client {}",
            report.consumers,
            report.logs,
            report.records_per_sec,
            report.mib_per_sec,
            report.records,
            report.elapsed_s,
            report
                .broker_cpu_seconds_per_gib
                .map_or("-".into(), |c| format!("{c:.2}")),
            report
                .client_cpu_seconds_per_gib
                .map_or("-".into(), |c| format!("{c:.2}")),
        );
    }
    Ok(())
}

async fn measure(
    config: &Config,
    cluster: &crate::harness::BenchCluster,
    args: &ConsumeBenchArgs,
) -> Result<ConsumeBenchReport, String> {
    let local = cluster.local.as_ref();
    let fill_args = &args.produce;
    // No retention: every record must still be there to be read.
    let prepared = produce::prepare(config, &cluster.coordinator, local, fill_args, 0).await?;
    let client = prepared.client.clone();
    let stream = prepared.stream.clone();
    let fill = produce::drive(prepared, local, fill_args).await?;
    let records = fill.records_acked;
    let pids: Vec<u32> = local
        .map(|c| c.brokers().filter_map(|b| b.pid()).collect())
        .unwrap_or_default();
    let consumers = crate::harness::consumers(&client, &stream, args.consumers).await?;
    let read = Arc::new(AtomicU64::new(0));
    let _line = crate::progress::ProgressLine::start("records read", read.clone());
    let deadline = Instant::now() + Duration::from_secs(args.read_time_limit_s);
    let (brokers_before, client_before) = (total_cpu_time(&pids), own_cpu_time());
    let started = Instant::now();
    let tasks: Vec<_> = consumers
        .into_iter()
        .map(|mut consumer| {
            let read = read.clone();
            tokio::spawn(async move {
                // The instant this consumer read the last record of all, if it did.
                let mut finished_at = None;
                while read.load(Ordering::Relaxed) < records && Instant::now() < deadline {
                    let got = consumer.poll(POLL).await.map_err(|e| e.to_string())?;
                    let count = got.len() as u64;
                    let before = read.fetch_add(count, Ordering::Relaxed);
                    if count > 0 && before < records && before + count >= records {
                        finished_at = Some(Instant::now());
                    }
                }
                Ok::<_, String>(finished_at)
            })
        })
        .collect();
    let mut finished_at = None;
    for task in tasks {
        finished_at = finished_at.or(task.await.map_err(|e| e.to_string())??);
    }
    // Until the last record was read, not until the other consumers' idle polls returned.
    let elapsed_s = finished_at
        .unwrap_or_else(Instant::now)
        .duration_since(started)
        .as_secs_f64();
    let brokers_cpu = total_cpu_time(&pids) - brokers_before;
    let client_cpu = own_cpu_time() - client_before;
    let total = read.load(Ordering::Relaxed);
    if total < records {
        return Err(format!(
            "read {total} of {records} records in {} s",
            args.read_time_limit_s
        ));
    }
    let bytes = total as f64 * fill_args.record_bytes as f64;
    Ok(ConsumeBenchReport {
        consumers: args.consumers,
        logs: fill_args.logs,
        streamlets: fill_args.streamlets,
        record_bytes: fill_args.record_bytes,
        replicas: fill_args.replicas,
        records: total,
        elapsed_s,
        records_per_sec: total as f64 / elapsed_s,
        mib_per_sec: bytes / f64::from(1u32 << 20) / elapsed_s,
        broker_cpu_seconds_per_gib: brokers_cpu
            .per_gib(bytes)
            .filter(|_| !pids.is_empty())
            .map(|c| c.total_s()),
        client_cpu_seconds_per_gib: client_cpu.per_gib(bytes).map(|c| c.total_s()),
        fill_records_per_sec: fill.records_per_sec,
    })
}
