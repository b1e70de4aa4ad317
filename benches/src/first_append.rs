//! `tailstream bench first-append`: how long a fresh log's first record waits for its
//! acknowledgement, beside the next record on the same log (the steady cost of one append).
//!
//! A fresh log has no head segment yet: its first append opens one on each of its R backups
//! (an RPC per backup, each handing out a zeroed buffer), and the coordinator must save that
//! segment's bounds before the record is acknowledged. Each of `--streams` fresh streams (one
//! streamlet, one log, R replicas) is created, a producer is built for it, and then timed:
//! - `first`: `send` of the first record to its acknowledgement;
//! - `second`: the same for the record after it, on the log now open.
//!
//! The first stream is created right after the cluster has started (the case of a cluster
//! that just came up); the rest follow `--pause-ms` apart (0: back to back, a burst). Every figure covers only the interval
//! it names: stream creation and the producer's metadata lookup are reported apart.

use clap::Args;
use serde::Serialize;
use std::time::{Duration, Instant};
use tailstream_config::Config;

#[derive(Args, Debug, Clone)]
pub struct FirstAppendBenchArgs {
    /// Fresh streams, each timed once.
    #[arg(long, default_value_t = 20)]
    pub streams: u32,
    /// Replicas per log (R).
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Brokers to start (default R + 1); ignored with --join.
    #[arg(long)]
    pub brokers: Option<u32>,
    /// "one-sided" or "rpc".
    #[arg(long, default_value = "one-sided")]
    pub replication: String,
    /// Bytes per record value.
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// Pause before each stream, so that each fresh log meets a settled cluster (0: streams
    /// back to back, a burst of opens that outruns the backups' spare buffers).
    #[arg(long, default_value_t = 500)]
    pub pause_ms: u64,
    /// Join the coordinator at this address instead of starting a cluster.
    #[arg(long)]
    pub join: Option<String>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One fresh stream's timings, in microseconds.
#[derive(Debug, Serialize, Clone, Copy)]
pub struct FreshLogTiming {
    pub create_us: u64,
    pub producer_build_us: u64,
    pub first_ack_us: u64,
    pub second_ack_us: u64,
}

#[derive(Debug, Serialize)]
pub struct FirstAppendReport {
    pub streams: u32,
    pub replicas: u32,
    pub replication: String,
    pub record_bytes: usize,
    pub pause_ms: u64,
    /// The first stream's, created right after start-up.
    pub after_start_up: FreshLogTiming,
    pub first_ack_p50_us: u64,
    pub first_ack_max_us: u64,
    pub second_ack_p50_us: u64,
    /// The first append's median over the second's: what opening a log costs, as a multiple
    /// of an append.
    pub first_over_second: f64,
    pub runs: Vec<FreshLogTiming>,
}

pub async fn run(config: Config, args: FirstAppendBenchArgs) -> Result<(), String> {
    if args.streams == 0 {
        return Err("--streams must be positive".into());
    }
    if args.replicas > tailstream_config::REPLICAS_MAX {
        return Err(format!(
            "--replicas must be at most {}",
            tailstream_config::REPLICAS_MAX
        ));
    }
    let brokers = args
        .brokers
        .unwrap_or(args.replicas + 1)
        .max(args.replicas + 1);
    let cluster = crate::harness::BenchCluster::start_or_join(
        &config,
        args.join.clone(),
        &args.replication,
        brokers,
    )
    .await?;
    let result = measure(&config, &cluster.coordinator, &args, brokers).await;
    cluster.finish(result.is_err()).await;
    let runs = result?;
    let report = summarize(&args, runs);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        print_table(&report);
    }
    Ok(())
}

async fn measure(
    config: &Config,
    coordinator: &str,
    args: &FirstAppendBenchArgs,
    brokers: u32,
) -> Result<Vec<FreshLogTiming>, String> {
    let client = crate::harness::client(config, coordinator);
    let cluster = client.coordinator().clone();
    let expected = if args.join.is_some() {
        args.replicas + 1
    } else {
        brokers
    };
    crate::harness::wait_for_brokers(&cluster, expected).await?;
    let value = vec![0x5a_u8; args.record_bytes];
    let suffix = crate::produce::unique_suffix();
    let mut runs = Vec::with_capacity(args.streams as usize);
    for index in 0..args.streams {
        // The first stream comes right after start-up, unpaused.
        if index > 0 {
            tokio::time::sleep(Duration::from_millis(args.pause_ms)).await;
        }
        let mut stream = config.stream_defaults.clone();
        stream.logs_per_streamlet = 1;
        stream.replicas = args.replicas;
        let name = format!("first-append-{suffix}-{index}");
        let started = Instant::now();
        cluster
            .create_stream(&name, 1, stream)
            .await
            .map_err(|e| format!("creating {name}: {e}"))?;
        let create = started.elapsed();
        let started = Instant::now();
        let producer = client
            .producer(&name)
            .linger_ms(0)
            .build()
            .await
            .map_err(|e| format!("a producer for {name}: {e}"))?;
        let producer_build = started.elapsed();
        let first = timed_send(&producer, &value).await?;
        let second = timed_send(&producer, &value).await?;
        drop(producer);
        runs.push(FreshLogTiming {
            create_us: micros(create),
            producer_build_us: micros(producer_build),
            first_ack_us: micros(first),
            second_ack_us: micros(second),
        });
    }
    Ok(runs)
}

/// One record from `send` to its acknowledgement (bounded: a stalled cluster is an error).
async fn timed_send(
    producer: &tailstream_client::Producer,
    value: &[u8],
) -> Result<Duration, String> {
    let started = Instant::now();
    let acked = async {
        let ack = producer.send(None, value).await?;
        ack.await
    };
    match tokio::time::timeout(Duration::from_secs(30), acked).await {
        Ok(Ok(_)) => Ok(started.elapsed()),
        Ok(Err(error)) => Err(format!("a record was not acknowledged: {error}")),
        Err(_) => Err("a record was not acknowledged within 30 s".into()),
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

fn summarize(args: &FirstAppendBenchArgs, runs: Vec<FreshLogTiming>) -> FirstAppendReport {
    let first: Vec<u64> = runs.iter().map(|r| r.first_ack_us).collect();
    let second: Vec<u64> = runs.iter().map(|r| r.second_ack_us).collect();
    let first_max = first.iter().copied().max().unwrap_or(0);
    let (first_p50, second_p50) = (median(first), median(second));
    FirstAppendReport {
        streams: args.streams,
        replicas: args.replicas,
        replication: args.replication.clone(),
        record_bytes: args.record_bytes,
        pause_ms: args.pause_ms,
        // Invariant: `run` refuses zero streams, and `measure` returns one timing per stream.
        after_start_up: runs[0],
        first_ack_p50_us: first_p50,
        first_ack_max_us: first_max,
        second_ack_p50_us: second_p50,
        first_over_second: first_p50 as f64 / second_p50.max(1) as f64,
        runs,
    }
}

fn print_table(report: &FirstAppendReport) {
    println!(
        "{:>6} {:>10} {:>12} {:>12} {:>12}",
        "stream", "create_ms", "producer_ms", "first_ack_ms", "second_ack_ms"
    );
    let ms = |us: u64| us as f64 / 1000.0;
    for (index, run) in report.runs.iter().enumerate() {
        println!(
            "{:>6} {:>10.2} {:>12.2} {:>12.3} {:>12.3}",
            index,
            ms(run.create_us),
            ms(run.producer_build_us),
            ms(run.first_ack_us),
            ms(run.second_ack_us),
        );
    }
    println!(
        "R={} {}: a fresh log's first ack p50 {:.3} ms (max {:.3} ms; {:.3} ms right after start-up), the next record's p50 {:.3} ms: first / next {:.1}x",
        report.replicas,
        report.replication,
        ms(report.first_ack_p50_us),
        ms(report.first_ack_max_us),
        ms(report.after_start_up.first_ack_us),
        ms(report.second_ack_p50_us),
        report.first_over_second,
    );
}
