//! `tailstream bench failover`: how long a cluster is without a coordinator when its leader
//! dies, on a local three-member etcd with three coordinators (one leads, two stand by), B
//! brokers and native producers running throughout.
//!
//! Each run kills the leader twice with SIGKILL, restarting it (as a standby) after each:
//! - **leader alone**: from the kill until a coordinator answers at a newer term and every
//!   broker has heard from it (`kill_to_leader_ms`; each broker's
//!   `tailstream_coordinator_term_seen`);
//! - **leader and a broker at once** (the owner of streamlet 0): from the kill until that
//!   streamlet serves on another broker (`kill_to_serving_ms`): the crash is detected and
//!   recovered by a leader that did not exist when it happened.
//!
//! After the runs, two faults of etcd itself: one member killed for `--etcd-down-s` (nothing
//! should change: the same term leads throughout), then two of the three (quorum lost: no
//! coordinator can renew its leadership, so none leads) for as long, both restarted after; it
//! reports the longest time without an acknowledgement during each, and the time from the
//! restart to a leader serving with every broker.
//!
//! Between runs it waits until every log has R copies again. It also reports, per run, the
//! longest time no producer was acknowledged while the leader alone was down
//! (`ack_gap_ms`): producers need no coordinator while their streamlets stay where they are.
//! Times are on this process's clock, polled every 10 ms, so each is late by at most one
//! poll.

use crate::harness;
use clap::Args;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_client::CoordinatorClient;
use tailstream_config::Config;
use tailstream_launcher::etcd::{EtcdCluster, etcd_installed};
use tailstream_launcher::{ClusterSpec, EtcdSpec, LocalCluster, Ports};
use tailstream_wire::CoordinatorTerm;

const STREAM: &str = "failover";
const POLL: Duration = Duration::from_millis(10);
/// Longer than any failover the cluster should need: past it the run fails.
const WAIT_MAX: Duration = Duration::from_secs(60);

#[derive(Args, Debug, Clone)]
pub struct FailoverBenchArgs {
    /// Runs (each kills the leader twice: alone, then with a broker).
    #[arg(long, default_value_t = 20)]
    pub runs: u32,
    /// Brokers.
    #[arg(long, default_value_t = 5)]
    pub brokers: u32,
    /// R: copies of every segment.
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// Coordinators (one leads, the others stand by).
    #[arg(long, default_value_t = 3)]
    pub coordinators: usize,
    /// Native producers writing throughout, each as fast as it is acknowledged.
    #[arg(long, default_value_t = 2)]
    pub producers: u32,
    /// How long each etcd fault (one member down, then quorum lost) lasts; 0 skips them.
    #[arg(long, default_value_t = 5)]
    pub etcd_down_s: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One fault of etcd.
#[derive(Debug, Serialize)]
pub struct EtcdFault {
    /// Members killed (of 3).
    pub members_down: usize,
    pub down_ms: u64,
    pub term_before: u64,
    /// The term leading once the members were back and every broker heartbeated to it.
    pub term_after: u64,
    /// The longest time without an acknowledgement from the kill until the members were back.
    pub ack_gap_ms: u64,
    /// From the members' restart until a coordinator leads with every broker.
    pub restart_to_leader_ms: u64,
}

/// One run's two leader kills.
#[derive(Debug, Serialize)]
pub struct FailoverRun {
    pub run: u32,
    pub term_before: u64,
    pub term_after: u64,
    pub kill_to_leader_ms: u64,
    pub kill_to_serving_ms: u64,
    /// The longest time without an acknowledgement from the leader's kill until a new one
    /// led (and a little after: until the killed one was back as a standby).
    pub ack_gap_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct FailoverReport {
    pub brokers: u32,
    pub replicas: u32,
    pub coordinators: usize,
    pub election_lease_ms: u64,
    pub runs: Vec<FailoverRun>,
    pub etcd_faults: Vec<EtcdFault>,
    pub records_acked: u64,
}

pub async fn run(config: Config, args: FailoverBenchArgs) -> Result<(), String> {
    let report = measure(config, &args).await?;
    if args.json {
        let text = serde_json::to_string(&report).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(report: &FailoverReport) {
    println!(
        "coordinator failover: {} coordinators on a 3-member etcd (election lease {} ms), {} brokers, R={}",
        report.coordinators, report.election_lease_ms, report.brokers, report.replicas
    );
    println!(
        "{:>3} {:>6} {:>6} {:>14} {:>10} {:>22}",
        "run", "term", "term'", "kill_to_leader", "ack_gap", "kill+broker_to_serving"
    );
    for run in &report.runs {
        println!(
            "{:>3} {:>6} {:>6} {:>11} ms {:>7} ms {:>19} ms",
            run.run,
            run.term_before,
            run.term_after,
            run.kill_to_leader_ms,
            run.ack_gap_ms,
            run.kill_to_serving_ms
        );
    }
    let gaps: Vec<u64> = report.runs.iter().map(|r| r.ack_gap_ms).collect();
    let leader: Vec<u64> = report.runs.iter().map(|r| r.kill_to_leader_ms).collect();
    let serving: Vec<u64> = report.runs.iter().map(|r| r.kill_to_serving_ms).collect();
    println!(
        "leader killed -> new leader serving: {}",
        crate::chaos::median_max(&leader)
    );
    println!(
        "leader and a broker killed -> streamlet serving again: {}",
        crate::chaos::median_max(&serving)
    );
    for fault in &report.etcd_faults {
        println!(
            "etcd: {} of 3 members down for {} ms: term {} -> {}, longest time without an ack {} ms, restart to leader {} ms",
            fault.members_down,
            fault.down_ms,
            fault.term_before,
            fault.term_after,
            fault.ack_gap_ms,
            fault.restart_to_leader_ms
        );
    }
    println!(
        "no producer acknowledged while the leader alone was down: {}; {} records acknowledged in all",
        crate::chaos::median_max(&gaps),
        report.records_acked
    );
}

pub async fn measure(config: Config, args: &FailoverBenchArgs) -> Result<FailoverReport, String> {
    if !etcd_installed() {
        return Err("etcd is not installed (.ci/install-deps.sh installs etcd-server)".into());
    }
    if args.runs == 0 || args.coordinators < 2 || args.replicas == 0 {
        return Err("--runs and --replicas must be positive, --coordinators at least 2".into());
    }
    if args.brokers < args.replicas + 2 {
        return Err("--brokers must be at least --replicas + 2".into());
    }
    let data_dir = harness::BenchDir::new("tailstream-failover-")?;
    let mut etcd = EtcdCluster::start(3, &data_dir.path().join("etcd")).await?;
    let started = start(&config, args, data_dir.path(), etcd.endpoints()).await;
    let result = match started {
        Ok(mut local) => {
            let result = kill_leaders(&config, &mut local, &mut etcd, args).await;
            local.stop().await;
            result
        }
        Err(error) => Err(error),
    };
    etcd.stop().await;
    data_dir.finish(result.is_err());
    result
}

async fn start(
    config: &Config,
    args: &FailoverBenchArgs,
    dir: &std::path::Path,
    endpoints: Vec<String>,
) -> Result<LocalCluster, String> {
    let config_file = dir.join("bench.toml");
    let text = toml::to_string(config).map_err(|e| e.to_string())?;
    std::fs::write(&config_file, text).map_err(|e| e.to_string())?;
    LocalCluster::start(ClusterSpec {
        binary: std::env::current_exe().map_err(|e| e.to_string())?,
        data_dir: dir.to_path_buf(),
        brokers: args.brokers,
        ports: Ports::Ephemeral,
        config_file: Some(config_file),
        log_filter: harness::log_filter("warn"),
        own_addresses: false,
        etcd: Some(EtcdSpec {
            endpoints,
            prefix: "/tailstream/bench-failover".into(),
            coordinators: args.coordinators,
        }),
        tls_dir: None,
    })
    .await
}

async fn kill_leaders(
    config: &Config,
    local: &mut LocalCluster,
    etcd: &mut EtcdCluster,
    args: &FailoverBenchArgs,
) -> Result<FailoverReport, String> {
    // Polls answer within a second or move on to the next coordinator.
    let poll = CoordinatorClient::new(
        &local.coordinator_addrs(),
        tailstream_stubs::coordinator::client_rpc_config(&config.client, 1_000),
    );
    harness::wait_for_brokers(&poll, args.brokers).await?;
    let mut stream = config.stream_defaults.clone();
    stream.replicas = args.replicas;
    poll.create_stream(STREAM, args.brokers, stream)
        .await
        .map_err(|e| e.to_string())?;
    let load = Load::start(config, &local.coordinator_addrs(), args.producers).await?;
    let mut runs = Vec::new();
    for run in 0..args.runs {
        let measured = once(&poll, local, &load, args.brokers, run).await;
        match measured {
            Ok(measured) => runs.push(measured),
            Err(error) => {
                load.stop().await;
                return Err(format!("run {run}: {error}"));
            }
        }
    }
    let mut etcd_faults = Vec::new();
    if args.etcd_down_s > 0 {
        for members_down in [1, 2] {
            let down = Duration::from_secs(args.etcd_down_s);
            let fault = etcd_fault(&poll, etcd, &load, args.brokers, members_down, down).await;
            match fault {
                Ok(fault) => etcd_faults.push(fault),
                Err(error) => {
                    load.stop().await;
                    return Err(format!("{members_down} etcd members down: {error}"));
                }
            }
        }
    }
    let records_acked = load.stop().await;
    Ok(FailoverReport {
        brokers: args.brokers,
        replicas: args.replicas,
        coordinators: args.coordinators,
        election_lease_ms: config.coordinator.election_lease_ms,
        runs,
        etcd_faults,
        records_acked,
    })
}

/// The leader's client address and term.
async fn leader(
    poll: &CoordinatorClient,
) -> Result<(std::net::SocketAddr, CoordinatorTerm), String> {
    let started = Instant::now();
    loop {
        if let Ok(leadership) = poll.describe_leadership().await {
            let addr = leadership
                .leader
                .rpc_addr
                .parse()
                .map_err(|e| format!("the leader's address: {e}"))?;
            return Ok((addr, leadership.term));
        }
        if started.elapsed() > WAIT_MAX {
            return Err(format!("no coordinator led within {WAIT_MAX:?}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Until a coordinator leads at a term after `term` with `brokers` brokers alive, each of
/// which has heard from it (a new leader counts every broker alive from its start, before
/// any heartbeat: each broker's `tailstream_coordinator_term_seen` says when it has).
async fn wait_for_new_leader(
    poll: &CoordinatorClient,
    term: CoordinatorTerm,
    brokers: u32,
) -> Result<CoordinatorTerm, String> {
    let started = Instant::now();
    loop {
        if let Ok(leadership) = poll.describe_leadership().await
            && leadership.term > term
            && let Ok(members) = poll.list_brokers().await
            && members.iter().filter(|b| b.alive && !b.crashed).count() >= brokers as usize
            && every_broker_follows(&members, leadership.term).await
        {
            return Ok(leadership.term);
        }
        if started.elapsed() > WAIT_MAX {
            return Err(format!(
                "no new leader with every broker within {WAIT_MAX:?}"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether every live broker in `members` has seen `term` (or a newer one).
async fn every_broker_follows(
    members: &[tailstream_wire::messages::BrokerInfo],
    term: CoordinatorTerm,
) -> bool {
    for broker in members.iter().filter(|b| b.alive && !b.crashed) {
        if term_seen(&broker.admin_addr)
            .await
            .is_none_or(|seen| seen < term.0)
        {
            return false;
        }
    }
    true
}

/// The newest coordinator term the broker whose admin endpoint is `admin_addr` has seen.
async fn term_seen(admin_addr: &str) -> Option<u64> {
    let metrics =
        tailstream_launcher::http::get(admin_addr, "/metrics", Duration::from_secs(1)).await?;
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix("tailstream_coordinator_term_seen ")?;
        value.trim().parse::<f64>().ok().map(|v| v as u64)
    })
}

async fn once(
    poll: &CoordinatorClient,
    local: &mut LocalCluster,
    load: &Load,
    brokers: u32,
    run: u32,
) -> Result<FailoverRun, String> {
    // The leader alone. Every producer must be acknowledged first: one still waiting for the
    // previous run's recovery (its streamlet moved, and it learns where from the coordinator)
    // would be counted as this kill's gap.
    load.wait_until_every_producer_acked().await?;
    let (leading, term_before) = leader(poll).await?;
    load.take_gap();
    let killed = Instant::now();
    local.kill_coordinator_at(leading).await?;
    let term_after = wait_for_new_leader(poll, term_before, brokers).await?;
    let kill_to_leader_ms = killed.elapsed().as_millis() as u64;
    local.restart_coordinator_at(leading).await?;
    let ack_gap_ms = load.take_gap();

    // The leader and the owner of streamlet 0 at once.
    let (leading, term) = leader(poll).await?;
    let owner = harness::owner_of(poll, local, STREAM, 0).await?;
    let owner_addr = local
        .broker(owner)
        .map(|b| b.rpc_addr.to_string())
        .ok_or("the owner is not running")?;
    let victim = harness::server_at(poll, &owner_addr).await?;
    let killed = Instant::now();
    local.kill_coordinator_at(leading).await?;
    local.signal_broker(owner, "KILL")?;
    harness::wait_until_serving(poll, STREAM, &[victim], POLL, WAIT_MAX).await?;
    let kill_to_serving_ms = killed.elapsed().as_millis() as u64;
    let (_, term_now) = leader(poll).await?;
    if term_now <= term {
        return Err(format!(
            "the crash was recovered at {term_now}, not after {term}"
        ));
    }
    local.restart_coordinator_at(leading).await?;
    local.restart_broker(owner).await?;
    harness::wait_for_brokers(poll, brokers).await?;
    // The next kill must find R copies of everything (R = 2 survives one failure at a time).
    harness::wait_until_replicated(poll, STREAM, POLL, WAIT_MAX).await?;
    Ok(FailoverRun {
        run,
        term_before: term_before.0,
        term_after: term_after.0,
        kill_to_leader_ms,
        kill_to_serving_ms,
        ack_gap_ms,
    })
}

/// Kills `members_down` etcd members for `down`, then restarts them.
async fn etcd_fault(
    poll: &CoordinatorClient,
    etcd: &mut EtcdCluster,
    load: &Load,
    brokers: u32,
    members_down: usize,
    down: Duration,
) -> Result<EtcdFault, String> {
    // As before a leader kill: a producer still waiting for an earlier recovery is not this
    // fault's gap.
    load.wait_until_every_producer_acked().await?;
    let (_, term_before) = leader(poll).await?;
    load.take_gap();
    let killed = Instant::now();
    for member in 0..members_down {
        etcd.kill(member).await;
    }
    tokio::time::sleep(down).await;
    let ack_gap_ms = load.take_gap();
    let down_ms = killed.elapsed().as_millis() as u64;
    let restarted = Instant::now();
    for member in 0..members_down {
        etcd.restart(member).await?;
    }
    etcd.wait_healthy(WAIT_MAX).await?;
    let term_after = wait_for_leader_with(poll, brokers).await?;
    Ok(EtcdFault {
        members_down,
        down_ms,
        term_before: term_before.0,
        term_after: term_after.0,
        ack_gap_ms,
        restart_to_leader_ms: restarted.elapsed().as_millis() as u64,
    })
}

/// Until a coordinator leads (at any term) with `brokers` brokers alive.
async fn wait_for_leader_with(
    poll: &CoordinatorClient,
    brokers: u32,
) -> Result<CoordinatorTerm, String> {
    wait_for_new_leader(poll, CoordinatorTerm(0), brokers).await
}

/// Producers writing as fast as they are acknowledged, counting acknowledgements and timing
/// the longest gap between two since the last [`Load::take_gap`].
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    /// Per producer.
    acked_each: Vec<Arc<AtomicU64>>,
    gap_max_ms: Arc<AtomicU64>,
    /// Set by `take_gap`: the ticker counts a gap under way from then, not from before.
    restart_gap: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Load {
    async fn start(config: &Config, coordinators: &str, producers: u32) -> Result<Self, String> {
        let client = harness::client(config, coordinators);
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        let mut acked_each = Vec::new();
        for _ in 0..producers {
            let producer = client
                .producer(STREAM)
                .build()
                .await
                .map_err(|e| format!("producer: {e}"))?;
            let (stop, acked, mine) = (stop.clone(), acked.clone(), Arc::new(AtomicU64::new(0)));
            acked_each.push(mine.clone());
            tasks.push(tokio::spawn(async move {
                let value = [7u8; 100];
                while !stop.load(Ordering::Relaxed) {
                    // Errors (a broker gone, a streamlet recovering) are retried by sending on.
                    if let Ok(ack) = producer.send(None, &value).await
                        && ack.await.is_ok()
                    {
                        acked.fetch_add(1, Ordering::Relaxed);
                        mine.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tokio::time::sleep(POLL).await;
                    }
                }
            }));
        }
        // Samples the ack count every poll: a gap is the time the count did not move.
        let gap_max_ms = Arc::new(AtomicU64::new(0));
        let restart_gap = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (stop, acked, gap_max_ms) = (stop.clone(), acked.clone(), gap_max_ms.clone());
            let restart_gap = restart_gap.clone();
            tokio::spawn(async move {
                let (mut last, mut moved_at) = (acked.load(Ordering::Relaxed), Instant::now());
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(POLL).await;
                    let now = acked.load(Ordering::Relaxed);
                    if now != last || restart_gap.swap(false, Ordering::Relaxed) {
                        (last, moved_at) = (now, Instant::now());
                    }
                    gap_max_ms.fetch_max(moved_at.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            })
        };
        Ok(Self {
            stop,
            acked,
            acked_each,
            gap_max_ms,
            restart_gap,
            tasks,
            ticker,
        })
    }

    /// Waits until every producer has been acknowledged again from now on (bounded).
    async fn wait_until_every_producer_acked(&self) -> Result<(), String> {
        let before: Vec<u64> = self
            .acked_each
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let started = Instant::now();
        while self
            .acked_each
            .iter()
            .zip(&before)
            .any(|(now, before)| now.load(Ordering::Relaxed) == *before)
        {
            if started.elapsed() > WAIT_MAX {
                return Err(format!(
                    "a producer went unacknowledged for {WAIT_MAX:?} with a leader serving"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    /// The longest gap since the last call (a gap under way counts up to now); a gap under
    /// way now counts from the next poll on, not from its start (a stall before a fault is
    /// not the fault's).
    fn take_gap(&self) -> u64 {
        self.restart_gap.store(true, Ordering::Relaxed);
        self.gap_max_ms.swap(0, Ordering::Relaxed)
    }

    /// Stops the producers; the records acknowledged.
    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        let _ = self.ticker.await;
        self.acked.load(Ordering::Relaxed)
    }
}
