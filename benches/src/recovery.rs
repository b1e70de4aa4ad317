//! `tailstream bench recovery`: how long a streamlet is unavailable when its owner dies.
//!
//! Starts a local cluster, fills one streamlet with N records of B bytes (P producers, as
//! fast as the cluster acks them), then, `--runs` times: SIGKILLs the streamlet's current
//! owner, polls the coordinator until the streamlet serves again on another broker, reads the
//! coordinator's record of that recovery (detection, locate, replay, re-replicate, lease
//! wait), and restarts the killed broker as a new incarnation. At the end a consumer reads the
//! whole streamlet back and the record count must equal what was acknowledged.
//!
//! Times: `detect` is from the kill (this process's clock) to the coordinator's declaration
//! (its clock; same machine); `serving` is from the kill until the metadata says the
//! streamlet serves, polled every 2 ms.

use crate::harness;
use clap::Args;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tailstream_client::Client;
use tailstream_config::Config;

#[derive(Args, Debug, Clone)]
pub struct RecoveryBenchArgs {
    /// N: records to fill the streamlet with.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// B: bytes per record value.
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// R: backups per segment.
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// Brokers (at least R + 2: the new owner needs R backups of its own).
    #[arg(long)]
    pub brokers: Option<u32>,
    /// Q: logs of the streamlet.
    #[arg(long, default_value_t = 4)]
    pub logs: u32,
    /// P: producers filling it (one log each while P <= Q).
    #[arg(long, default_value_t = 4)]
    pub producers: u32,
    /// Kill the owner this many times (each new owner in turn), restarting each victim.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Segment size in bytes (small segments: many of them to adopt and copy).
    #[arg(long)]
    pub segment_bytes: Option<u32>,
    /// Also kill this many other brokers with the owner (segments they held as backups must
    /// be copied before the streamlet serves again). Needs --brokers >= R + 2 + this.
    #[arg(long, default_value_t = 0)]
    pub also_kill: u32,
    /// Skip reading everything back at the end.
    #[arg(long)]
    pub no_verify: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One kill and its recovery.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub run: u32,
    pub detect_ms: u64,
    pub locate_ms: Option<u64>,
    pub replay_ms: Option<u64>,
    pub rereplicate_ms: Option<u64>,
    pub lease_wait_ms: Option<u64>,
    /// From the declaration to serving, as the coordinator measured it.
    pub recovery_ms: Option<u64>,
    /// From the kill to the metadata saying "serving" again.
    pub kill_to_serving_ms: u64,
    /// From the kill to every log having R complete copies again (the victims restarted
    /// meanwhile, so this includes their restart).
    pub kill_to_replicated_ms: u64,
    pub bytes: u64,
    pub segments_adopted: u64,
    pub segments_copied: u64,
}

#[derive(Debug, Serialize)]
pub struct RecoveryBenchReport {
    pub records: u64,
    pub record_bytes: usize,
    pub replicas: u32,
    pub brokers: u32,
    pub logs: u32,
    pub fill_records_per_sec: f64,
    pub runs: Vec<RunReport>,
    /// Records read back at the end (None with `--no-verify`).
    pub read_back: Option<u64>,
}

pub async fn run(config: Config, args: RecoveryBenchArgs) -> Result<(), String> {
    let report = measure(config, &args).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        print_table(&report);
    }
    match report.read_back {
        Some(read) if read != report.records => Err(format!(
            "read back {read} records of {} acknowledged",
            report.records
        )),
        _ => Ok(()),
    }
}

fn ms(value: Option<u64>) -> String {
    value.map_or("-".into(), |v| v.to_string())
}

fn print_table(report: &RecoveryBenchReport) {
    println!(
        "recovery of 1 streamlet: {} records x {} B, R={}, {} logs, {} brokers (filled at {:.0} records/s)",
        report.records,
        report.record_bytes,
        report.replicas,
        report.logs,
        report.brokers,
        report.fill_records_per_sec
    );
    println!(
        "{:>3} {:>9} {:>9} {:>9} {:>12} {:>11} {:>12} {:>13} {:>15} {:>8} {:>8} {:>7}",
        "run",
        "detect_ms",
        "locate_ms",
        "replay_ms",
        "rereplic_ms",
        "lease_wait",
        "recovery_ms",
        "kill_to_serve",
        "kill_to_R_copies",
        "MiB",
        "adopted",
        "copied",
    );
    for run in &report.runs {
        println!(
            "{:>3} {:>9} {:>9} {:>9} {:>12} {:>11} {:>12} {:>13} {:>15} {:>8.1} {:>8} {:>7}",
            run.run,
            run.detect_ms,
            ms(run.locate_ms),
            ms(run.replay_ms),
            ms(run.rereplicate_ms),
            ms(run.lease_wait_ms),
            ms(run.recovery_ms),
            run.kill_to_serving_ms,
            run.kill_to_replicated_ms,
            run.bytes as f64 / f64::from(1u32 << 20),
            run.segments_adopted,
            run.segments_copied,
        );
    }
    let detect: Vec<u64> = report.runs.iter().map(|r| r.detect_ms).collect();
    let serving: Vec<u64> = report.runs.iter().map(|r| r.kill_to_serving_ms).collect();
    println!(
        "detection {}; kill to serving {}",
        crate::chaos::median_max(&detect),
        crate::chaos::median_max(&serving)
    );
    if let Some(read) = report.read_back {
        println!("read back {read} of {} records", report.records);
    }
}

pub async fn measure(
    mut config: Config,
    args: &RecoveryBenchArgs,
) -> Result<RecoveryBenchReport, String> {
    if args.records == 0 || args.producers == 0 || args.runs == 0 {
        return Err("--records, --producers and --runs must be positive".into());
    }
    let brokers = args.brokers.unwrap_or(args.replicas + 2 + args.also_kill);
    if brokers < args.replicas + 2 + args.also_kill {
        return Err("--brokers must be at least --replicas + 2 + --also-kill".into());
    }
    // Room for the streamlet twice over on one broker (a new owner may already hold other
    // data), whatever N.
    let data_bytes = args.records * (args.record_bytes as u64 + 64);
    config.broker.segment_memory_bytes_max = config
        .broker
        .segment_memory_bytes_max
        .max(data_bytes.saturating_mul(2));
    let data_dir = harness::BenchDir::new("tailstream-recovery-")?;
    let mut local = harness::start_cluster(
        None,
        &config,
        data_dir.path(),
        brokers,
        &harness::log_filter("warn"),
    )
    .await?;
    let result = fill_and_kill(&config, &mut local, args, brokers).await;
    local.stop().await;
    data_dir.finish(result.is_err());
    result
}

async fn fill_and_kill(
    config: &Config,
    local: &mut tailstream_launcher::LocalCluster,
    args: &RecoveryBenchArgs,
    brokers: u32,
) -> Result<RecoveryBenchReport, String> {
    let client = harness::client(config, &local.coordinator_addr().to_string());
    let cluster = client.coordinator().clone();
    harness::wait_for_brokers(&cluster, brokers).await?;
    let mut stream = config.stream_defaults.clone();
    stream.replicas = args.replicas;
    stream.logs_per_streamlet = args.logs;
    if let Some(bytes) = args.segment_bytes {
        stream.segment_size_bytes = bytes;
    }
    let name = "recovery";
    cluster
        .create_stream(name, 1, stream)
        .await
        .map_err(|e| e.to_string())?;
    let fill_started = Instant::now();
    fill(config, &client, name, args).await?;
    let fill_records_per_sec = args.records as f64 / fill_started.elapsed().as_secs_f64();
    let mut runs = Vec::new();
    for run in 0..args.runs {
        runs.push(kill_owner_once(&cluster, local, run, brokers, args.also_kill).await?);
    }
    let read_back = if args.no_verify {
        None
    } else {
        Some(read_all(config, &client, name, args.records).await?)
    };
    Ok(RecoveryBenchReport {
        records: args.records,
        record_bytes: args.record_bytes,
        replicas: args.replicas,
        brokers,
        logs: args.logs,
        fill_records_per_sec,
        runs,
        read_back,
    })
}

/// Kills the streamlet's owner (and `also_kill` brokers after it), waits for the streamlet
/// to serve elsewhere, restarts the victims.
async fn kill_owner_once(
    cluster: &tailstream_client::CoordinatorClient,
    local: &mut tailstream_launcher::LocalCluster,
    run: u32,
    brokers: u32,
    also_kill: u32,
) -> Result<RunReport, String> {
    let owner = harness::owner_of(cluster, local, "recovery", 0).await?;
    let victims: Vec<usize> = (0..brokers as usize)
        .cycle()
        .skip(owner)
        .take(1 + also_kill as usize)
        .collect();
    let owner_addr = local
        .broker(owner)
        .map(|b| b.rpc_addr.to_string())
        .ok_or("owner not running")?;
    let victim = harness::server_at(cluster, &owner_addr).await?;
    let mut gone = vec![victim];
    for other in &victims[1..] {
        let addr = local
            .broker(*other)
            .map(|b| b.rpc_addr.to_string())
            .ok_or("broker not running")?;
        gone.push(harness::server_at(cluster, &addr).await?);
    }
    let killed_at_ms = harness::unix_ms();
    for index in &victims {
        local.signal_broker(*index, "KILL")?;
    }
    harness::wait_until_serving(
        cluster,
        "recovery",
        &gone,
        Duration::from_millis(2),
        Duration::from_secs(300),
    )
    .await?;
    let kill_to_serving_ms = harness::unix_ms().saturating_sub(killed_at_ms);
    let record = harness::recovery_of(cluster, victim, Duration::from_secs(10)).await?;
    if !record.lost.is_empty() {
        return Err(format!("recovery lost data: {:?}", record.lost));
    }
    for index in victims {
        local.restart_broker(index).await?;
    }
    harness::wait_for_brokers(cluster, brokers).await?;
    // The next kill waits for every segment to have R copies again (see
    // `wait_until_replicated`); the time it took is this run's `replicated_ms`.
    harness::wait_until_replicated(
        cluster,
        "recovery",
        Duration::from_millis(10),
        Duration::from_secs(300),
    )
    .await?;
    let kill_to_replicated_ms = harness::unix_ms().saturating_sub(killed_at_ms);
    Ok(RunReport {
        run,
        detect_ms: record.declared_at_ms.saturating_sub(killed_at_ms),
        locate_ms: record.locate_ms,
        replay_ms: record.replay_ms,
        rereplicate_ms: record.rereplicate_ms,
        lease_wait_ms: record.lease_wait_ms,
        recovery_ms: record.total_ms,
        kill_to_serving_ms,
        kill_to_replicated_ms,
        bytes: record.bytes,
        segments_adopted: record.segments_adopted,
        segments_copied: record.segments_copied,
    })
}

/// Producers send `args.records` records as fast as they are acked; every one must be.
async fn fill(
    config: &Config,
    client: &Client,
    stream: &str,
    args: &RecoveryBenchArgs,
) -> Result<(), String> {
    let mut producer_config = config.producer.clone();
    producer_config.batch_size_bytes = 64 * 1024;
    let mut tasks = Vec::new();
    for index in 0..args.producers {
        let records = args.records / u64::from(args.producers)
            + u64::from(u64::from(index) < args.records % u64::from(args.producers));
        let producer = client
            .producer(stream)
            .config(producer_config.clone())
            .build()
            .await
            .map_err(|e| e.to_string())?;
        let value = vec![b'r'; args.record_bytes];
        tasks.push(tokio::spawn(async move {
            let mut pending = VecDeque::new();
            for _ in 0..records {
                pending.push_back(
                    producer
                        .send(None, &value)
                        .await
                        .map_err(|e| e.to_string())?,
                );
                while let Some(result) = pending
                    .front()
                    .and_then(tailstream_client::AckFuture::try_result)
                {
                    result.map_err(|e| e.to_string())?;
                    pending.pop_front();
                }
            }
            producer.flush().await.map_err(|e| e.to_string())?;
            for ack in pending {
                ack.await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Reads the whole stream from the beginning; the count of records read.
async fn read_all(
    config: &Config,
    client: &Client,
    stream: &str,
    expected: u64,
) -> Result<u64, String> {
    let mut consumer = client
        .consumer(stream)
        .config(config.consumer.clone())
        .from_beginning()
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let mut read = 0u64;
    let mut idle_since = Instant::now();
    // Bounded: stops once everything is read, or after 5 s with nothing new.
    while read < expected && idle_since.elapsed() < Duration::from_secs(5) {
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .map_err(|e| e.to_string())?;
        if !records.is_empty() {
            read += records.len() as u64;
            idle_since = Instant::now();
        }
    }
    Ok(read)
}
