//! `tailstream bench produce`: produce throughput, latency and CPU against real processes.
//!
//! Starts a local cluster of `--brokers` processes (or joins `--join ADDR`), creates a fresh
//! stream and runs P producers (one producer id each, so with P <= Q they land on distinct
//! logs), in one of two modes:
//! - closed loop ([`closed`], the default): N records as fast as they are taken; measures
//!   saturated throughput (latencies are then mostly queueing in the producer's buffer);
//! - open loop ([`open`], `--rate R --duration-s D`): records on a fixed schedule, latency
//!   counted from each record's scheduled send time.
//!
//! With `--protocol kafka` the closed loop runs through the Kafka listener instead:
//! [`kafka_producer`] (one lean idempotent Kafka producer per partition) over
//! [`kafka_connection`], settling into the same outcome and report.
//!
//! After a warm-up it measures, over one interval: records/s and MiB/s acknowledged, record
//! latency percentiles, CPU per GiB of each role (the primary, each backup, this client),
//! user and system apart, and, for R > 0, the kernel's floor for the same bytes
//! ([`crate::floor`]) and the brokers' CPU as a multiple of it.

mod authenticated;
mod closed;
mod kafka_connection;
mod kafka_producer;
mod load;
mod open;
mod outcome;
mod report;
mod roles;

use load::Load;
pub(crate) use open::{STAMP_BYTES, measured_send_time};
use outcome::ProducerOutcome;
use roles::{CpuSnapshot, Roles, roles};

use crate::progress::ProgressLine;
use clap::Args;
pub use report::ProduceBenchReport;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_client::{Client, CoordinatorClient, Producer};
use tailstream_config::Config;
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
    /// N: records in total (closed loop).
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Open loop: send this many records per second in total, on a fixed schedule, and count
    /// latency from each record's scheduled send time.
    #[arg(long)]
    pub rate: Option<u64>,
    /// Open loop: seconds measured after the warm-up.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
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
    /// The producer's linger time; default 5 in closed loop, 0 in open loop (a batch goes out
    /// as soon as a request slot is free).
    #[arg(long)]
    pub linger_ms: Option<u64>,
    #[arg(long, default_value_t = 8)]
    pub max_in_flight: u32,
    /// Seconds of load before measuring starts (connections, buffer pools, memory settle).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// Stop producing after this long and report what was acknowledged.
    #[arg(long, default_value_t = 300)]
    pub time_limit_s: u64,
    /// Skip measuring the kernel's floor (R > 0).
    #[arg(long)]
    pub no_floor: bool,
    /// Print one JSON object instead of a table row.
    #[arg(long)]
    pub json: bool,
    /// What the producers speak: `native` (the Tailstream client) or `kafka` (a lean
    /// idempotent Kafka producer per partition, Produce v7 with acks = all, to the partition's
    /// leader's Kafka listener; producer i writes partition i). Kafka runs closed loop only.
    #[arg(long, value_enum, default_value_t = Protocol::Native)]
    pub protocol: Protocol,
    /// TLS on every listener of the cluster it starts (a fresh local CA), and on this
    /// process's connections to them: what TLS costs (native protocol only; not with --join).
    #[arg(long)]
    pub tls: bool,
    /// Client authentication on the cluster it starts: every connection authenticates with
    /// SCRAM as a user that is no super user, and every produce is checked against the rule
    /// that allows it: what that costs (native protocol only; not with --join).
    #[arg(long)]
    pub authenticate: bool,
}

/// The protocol the benchmark's producers speak.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Native,
    Kafka,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::Kafka => "kafka",
        }
    }
}

impl ProduceBenchArgs {
    /// Kafka producers run closed loop only (checked before a cluster is started).
    pub fn check_protocol(&self) -> Result<(), String> {
        if self.rate.is_some() && self.protocol == Protocol::Kafka {
            return Err("--protocol kafka runs closed loop only (no --rate)".into());
        }
        Ok(())
    }

    fn linger_ms(&self) -> u64 {
        self.linger_ms
            .unwrap_or(if self.rate.is_some() { 0 } else { 5 })
    }
}

/// What the producer tasks and the measuring task share.
#[derive(Debug, Default)]
struct Progress {
    /// Records acknowledged so far, all producers together.
    acked: Arc<AtomicU64>,
    /// Of those, records that count (sent once measuring started).
    measured: AtomicU64,
    /// Closed loop: set once the warm-up is over; records sent from then on are measured.
    measuring: AtomicBool,
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
        println!("{}", report.table_row());
    }
    Ok(())
}

pub async fn measure(
    mut config: Config,
    _config_path: Option<PathBuf>,
    join: Option<String>,
    args: &ProduceBenchArgs,
) -> Result<ProduceBenchReport, String> {
    // Kept until the run ends: the cluster's processes read their certificate from it.
    let _tls_dir = if args.tls {
        if join.is_some() || args.protocol != Protocol::Native {
            return Err("--tls starts its own cluster and speaks the native protocol only".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("tailstream-bench-tls-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let certificates = tailstream_launcher::tls::make_dev_certificates(dir.path(), &[])?;
        config.tls = tailstream_config::TlsConfig::from_dir(&certificates);
        let files = tailstream_net::tls::TlsFiles {
            ca_path: config.tls.ca_path.clone(),
            cert_path: None,
            key_path: None,
        };
        tailstream_net::tls::set_outgoing(Some(tailstream_net::tls::client(&files)?));
        Some(dir)
    } else {
        None
    };
    if args.authenticate {
        if join.is_some() || args.protocol != Protocol::Native {
            return Err(
                "--authenticate starts its own cluster and speaks the native protocol only".into(),
            );
        }
        authenticated::require(&mut config);
    }
    if args.producers == 0 {
        return Err("--producers must be positive".into());
    }
    match args.rate {
        Some(0) => return Err("--rate must be positive".into()),
        None if args.records == 0 => return Err("--records must be positive".into()),
        _ => {}
    }
    if args.rate.is_some() && args.duration_s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        return Err("--duration-s must be positive".into());
    }
    args.check_protocol()?;
    let cluster = crate::harness::BenchCluster::start_or_join(
        &config,
        join,
        &args.replication,
        brokers_to_start(args),
    )
    .await?;
    let result = match args.authenticate {
        true => authenticated::log_in(&config, &cluster.coordinator).await,
        false => Ok(()),
    };
    let result = match result {
        Ok(()) => run_producers(&config, &cluster.coordinator, cluster.local.as_ref(), args).await,
        Err(error) => Err(error),
    };
    cluster.finish(result.is_err()).await;
    let mut report = result?;
    if report.replicas > 0 && !args.no_floor && report.measured_records > 0 {
        report.add_floor(args)?;
    }
    if report.rate.is_some() && !args.no_floor {
        report.add_round_trip_floor()?;
    }
    Ok(report)
}

async fn run_producers(
    config: &Config,
    coordinator: &str,
    local: Option<&LocalCluster>,
    args: &ProduceBenchArgs,
) -> Result<ProduceBenchReport, String> {
    let prepared = prepare(config, coordinator, local, args, BOUNDED_RETENTION_BYTES).await?;
    drive(prepared, local, args).await
}

/// Retention of the produce benchmark's stream: small, so broker memory stays flat however
/// long the run.
pub(crate) const BOUNDED_RETENTION_BYTES: u64 = 256 << 20;

/// A fresh benchmark stream and its producers.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub client: Client,
    pub cluster: Arc<CoordinatorClient>,
    pub stream: String,
    roles: Roles,
    pub producers: Producers,
}

/// The producers of a run, by protocol.
#[derive(Debug)]
pub(crate) enum Producers {
    Native(Vec<Producer>),
    /// Every partition of the stream with its leader's Kafka address.
    Kafka(Vec<(i32, String)>),
}

/// Waits for the brokers, creates a fresh stream as `args` say (with `retention_bytes`, 0 for
/// none) and P producers for it.
pub(crate) async fn prepare(
    config: &Config,
    coordinator: &str,
    local: Option<&LocalCluster>,
    args: &ProduceBenchArgs,
    retention_bytes: u64,
) -> Result<Prepared, String> {
    args.check_protocol()?;
    let client = crate::harness::client(config, coordinator);
    let cluster = client.coordinator().clone();
    let brokers = if local.is_some() {
        brokers_to_start(args)
    } else {
        args.replicas + 1
    };
    crate::harness::wait_for_brokers(&cluster, brokers).await?;
    let mut stream = config.stream_defaults.clone();
    stream.logs_per_streamlet = args.logs;
    stream.replicas = args.replicas;
    stream.segments_per_group = 4;
    stream.retention_bytes = retention_bytes;
    let name = format!("bench-{}", unique_suffix());
    cluster
        .create_stream(&name, args.streamlets.max(1), stream)
        .await
        .map_err(|e| e.to_string())?;
    let roles = roles(&cluster, local, &name, args.streamlets.max(1)).await?;

    if args.protocol == Protocol::Kafka {
        let leaders = kafka_connection::partition_leaders(&cluster, &name).await?;
        return Ok(Prepared {
            client,
            cluster,
            stream: name,
            roles,
            producers: Producers::Kafka(leaders),
        });
    }
    let mut producer_config = config.producer.clone();
    producer_config.batch_size_bytes = args.batch_bytes;
    producer_config.linger_ms = args.linger_ms();
    producer_config.max_in_flight = args.max_in_flight;
    producer_config.buffer_bytes_max = producer_config
        .buffer_bytes_max
        .max(4 * u64::from(args.batch_bytes) * u64::from(args.max_in_flight));
    let mut producers = Vec::new();
    for _ in 0..args.producers {
        let producer = client
            .producer(&name)
            .config(producer_config.clone())
            .build()
            .await
            .map_err(|e| e.to_string())?;
        producers.push(producer);
    }
    Ok(Prepared {
        client,
        cluster,
        stream: name,
        roles,
        producers: Producers::Native(producers),
    })
}

/// Runs the load `args` describe on a prepared stream and measures it.
pub(crate) async fn drive(
    prepared: Prepared,
    local: Option<&LocalCluster>,
    args: &ProduceBenchArgs,
) -> Result<ProduceBenchReport, String> {
    let Prepared {
        mut roles,
        producers,
        stream,
        cluster,
        ..
    } = prepared;
    let progress = Arc::new(Progress::default());
    let _line = ProgressLine::start("records", progress.acked.clone());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.time_limit_s);
    let warmup = Duration::from_secs_f64(args.warmup_s.max(0.0));
    let load = match (producers, args.rate) {
        (Producers::Native(producers), None) => Load::closed(producers, args, deadline, &progress),
        (Producers::Native(producers), Some(rate)) => {
            Load::open(producers, args, rate, started, warmup, deadline, &progress)
        }
        (Producers::Kafka(leaders), _) => Load::kafka(&stream, &leaders, args, deadline, &progress),
    };
    // Warm-up: connections, buffer pools and segment memory settle before measuring.
    while started.elapsed() < warmup && !load.finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if started.elapsed() < warmup {
        // A producer that failed says why before the run is called too short.
        load.join().await?;
        return Err(format!(
            "the run ended within the {:.1} s warm-up: too short to measure (send more \
             --records, or shorten --warmup-s)",
            args.warmup_s
        ));
    }
    // Past the warm-up every log has written, so its owner has reported its replica set:
    // the backups measured are the brokers holding those copies (a failed lookup leaves the
    // backup figure out, never wrong).
    if args.replicas > 0 {
        roles.backups = roles::replica_holders(&cluster, local, &stream)
            .await
            .unwrap_or(None);
    }
    progress.measuring.store(true, Ordering::Relaxed);
    let measure_start = Instant::now();
    let cpu_before = CpuSnapshot::take(&roles);
    let outcome = load.join().await?;
    let cpu = CpuSnapshot::take(&roles).since(cpu_before);
    let acked_total = progress.acked.load(Ordering::Relaxed);
    let interval = Interval {
        // Closed loop: every record acknowledged in the interval counts. Open loop: the
        // records scheduled in it, until the last of them was acknowledged.
        // The records sent after measuring started, until the last of them was acknowledged
        // (open loop: at least the scheduled duration). Counting records sent, not acks
        // received, keeps warm-up records out whatever the producers' bookkeeping lags.
        records: progress.measured.load(Ordering::Relaxed),
        elapsed_s: {
            let acked_until = outcome
                .last_measured_ack
                .map_or(0.0, |at| at.duration_since(measure_start).as_secs_f64());
            match args.rate {
                None => acked_until,
                Some(_) => acked_until.max(args.duration_s),
            }
        },
    };
    if interval.records == 0 {
        return Err("no record was acknowledged in the measured interval".into());
    }
    Ok(ProduceBenchReport::new(
        args,
        local.map_or(0, |c| c.spec().brokers),
        acked_total,
        &outcome,
        interval,
        &roles,
        cpu,
    ))
}

/// The measured interval: its length and the records acknowledged in it.
#[derive(Clone, Copy, Debug)]
struct Interval {
    records: u64,
    elapsed_s: f64,
}

fn brokers_to_start(args: &ProduceBenchArgs) -> u32 {
    args.brokers.max(args.replicas + 1).max(1)
}

/// Distinct per run, so runs against one joined cluster never collide.
pub(crate) fn unique_suffix() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
}
