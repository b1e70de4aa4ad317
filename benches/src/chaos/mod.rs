//! `tailstream bench chaos`: crash brokers over and over under a running load and check that
//! every acknowledged record is read back exactly once, in per-log order.
//!
//! Starts a local cluster (5 brokers, R = 2 by default), a stream with small segments (so
//! recoveries meet closed segments, open heads and several groups), and a [`Load`]. Each cycle
//! draws a fault ([`faults::FaultKind`]), a streamlet and a moment (from `--seed`), injects the
//! fault against that streamlet's owner, waits until every streamlet serves again, heals the
//! cluster (killed brokers restart as new incarnations) and waits until records flow again.
//! Faults come from a shuffled bag, so every `--faults` kind appears once per that many cycles.
//! Then the load finishes and the [`ledger`] checks everything; the summary line says cycles,
//! records acked, lost, duplicated and out of order.
//!
//! - [`ledger`]: the exactly-once checker.
//! - [`load`]: producers and a consumer feeding it.
//! - [`faults`]: the faults.
//! - [`partition`]: network partitions between the cluster's processes (nftables rules in the
//!   run's own network namespace; each process has a loopback address of its own).

pub mod faults;
pub mod ledger;
pub mod load;
pub mod partition;

use crate::harness;
use clap::Args;
use faults::FaultKind;
use load::{Load, LoadConfig};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use std::time::{Duration, Instant};
use tailstream_config::Config;

#[derive(Args, Debug, Clone)]
pub struct ChaosBenchArgs {
    /// Faults to inject, one per cycle.
    #[arg(long, default_value_t = 20)]
    pub cycles: u32,
    /// Seeds the choice of fault, streamlet and moment of every cycle.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value_t = 5)]
    pub brokers: u32,
    /// R: backups per segment (the faults kill up to two brokers at once: R >= 2 survives
    /// them all).
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    #[arg(long, default_value_t = 4)]
    pub streamlets: u32,
    #[arg(long, default_value_t = 4)]
    pub producers: u32,
    /// Each producer's sending rate.
    #[arg(long, default_value_t = 2000)]
    pub records_per_second: u64,
    /// Retention per streamlet (0: keep everything). Without it a long run outgrows what a
    /// broker holds: every segment opens with a digest naming each live segment of its log,
    /// so with the run's 64 KiB segments a log stops taking batches near 130 MB, and each
    /// broker's segment memory fills too. Retention also puts recoveries beside freed groups.
    #[arg(long, default_value_t = 32 << 20)]
    pub retention_bytes: u64,
    /// The faults to draw from.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "owner,owner-and-another,during-recovery,coordinator,zombie"
    )]
    pub faults: Vec<FaultKind>,
    /// Each fault comes at a random moment up to this long into its cycle.
    #[arg(long, default_value_t = 1000)]
    pub max_delay_ms: u64,
    /// A cycle whose streamlets do not all serve again within this long fails the run.
    #[arg(long, default_value_t = 60_000)]
    pub recovery_timeout_ms: u64,
    /// Print one JSON object instead of the summary line.
    #[arg(long)]
    pub json: bool,
    /// The `tailstream` executable the cluster runs (tests set it; the CLI runs itself).
    #[arg(skip)]
    pub binary: Option<std::path::PathBuf>,
}

impl ChaosBenchArgs {
    /// The defaults the CLI has, for callers that do not parse a command line.
    pub fn defaults() -> Self {
        #[derive(clap::Parser)]
        struct Parse {
            #[command(flatten)]
            args: ChaosBenchArgs,
        }
        // Invariant: every field has a default, so an empty command line parses.
        <Parse as clap::Parser>::try_parse_from(["chaos"])
            .expect("every chaos option has a default")
            .args
    }
}

/// One cycle, for the report.
#[derive(Debug, serde::Serialize)]
pub struct CycleReport {
    pub cycle: u32,
    pub fault: FaultKind,
    pub streamlet: u32,
    /// From the first victim's fault to every streamlet serving again.
    pub fault_to_serving_ms: u64,
    /// From the first victim's fault to every log having R copies again (the victims were
    /// healed or restarted meanwhile).
    pub fault_to_replicated_ms: u64,
    /// From the kill to the coordinator's declaration of the first victim (when it was
    /// declared; a coordinator killed meanwhile declares later).
    pub detect_ms: Option<u64>,
}

#[derive(Debug, serde::Serialize)]
pub struct ChaosReport {
    pub cycles: u32,
    pub seed: u64,
    pub verdict: ledger::Verdict,
    pub cycle_reports: Vec<CycleReport>,
    pub elapsed_s: f64,
}

pub async fn run(config: Config, args: ChaosBenchArgs) -> Result<(), String> {
    if args.faults.iter().any(|f| f.is_partition()) && !partition::in_own_netns() {
        // Partitions are firewall rules: made in a network namespace of the run's own, never
        // on the machine's network. The re-run there prints everything.
        let status = tokio::task::spawn_blocking(partition::rerun_in_own_netns)
            .await
            .map_err(|e| e.to_string())??;
        return if status.success() {
            Ok(())
        } else {
            Err(format!(
                "the run in its own network namespace ended with {status}"
            ))
        };
    }
    let report = measure(config, &args).await?;
    let verdict = &report.verdict;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        let detect: Vec<u64> = report
            .cycle_reports
            .iter()
            .filter(|c| c.fault == FaultKind::Owner)
            .filter_map(|c| c.detect_ms)
            .collect();
        let serving: Vec<u64> = report
            .cycle_reports
            .iter()
            .map(|c| c.fault_to_serving_ms)
            .collect();
        let replicated: Vec<u64> = report
            .cycle_reports
            .iter()
            .map(|c| c.fault_to_replicated_ms)
            .collect();
        println!(
            "chaos: {} cycles (seed {}) in {:.0} s: records acked {}, lost {} (skipped by the consumer because retention freed them first: {}), duplicated {}, out of order {}, misplaced {}, unknown {} (unacked but stored: {}); fault to serving {}; fault to R copies again {}; detection after kill -9 of the owner alone {}",
            report.cycles,
            report.seed,
            report.elapsed_s,
            verdict.acked,
            verdict.lost,
            verdict.skipped_by_retention,
            verdict.duplicated,
            verdict.out_of_order,
            verdict.misplaced,
            verdict.unknown,
            verdict.unacked_stored,
            median_max(&serving),
            median_max(&replicated),
            median_max(&detect),
        );
        for example in &verdict.examples {
            println!("  problem: {example}");
        }
    }
    if verdict.is_clean() {
        Ok(())
    } else {
        Err("the exactly-once check failed".into())
    }
}

/// "median X ms, p90 Y ms, max Z ms over N", or "no samples".
pub fn median_max(samples: &[u64]) -> String {
    if samples.is_empty() {
        return "no samples".into();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    format!(
        "median {} ms, p90 {} ms, max {} ms over {}",
        sorted[sorted.len() / 2],
        sorted[sorted.len() * 9 / 10],
        sorted[sorted.len() - 1],
        sorted.len()
    )
}

pub async fn measure(config: Config, args: &ChaosBenchArgs) -> Result<ChaosReport, String> {
    if args.faults.is_empty() || args.brokers < args.replicas + 3 {
        return Err("need at least one fault and --brokers >= --replicas + 3 (two brokers may be down at once, and a rebuilt streamlet needs R backups)".into());
    }
    let partitions = args.faults.iter().any(|f| f.is_partition());
    let firewall = if partitions {
        Some(partition::Firewall::prepare().await?)
    } else {
        None
    };
    let data_dir = harness::BenchDir::new("tailstream-chaos-")?;
    let mut local = harness::start_cluster_with(
        args.binary.as_deref(),
        &config,
        data_dir.path(),
        args.brokers,
        &harness::log_filter("warn"),
        partitions,
    )
    .await?;
    let result = cycles(&config, &mut local, args, firewall.as_ref()).await;
    if let Some(firewall) = &firewall {
        let _ = firewall.heal().await;
    }
    local.stop().await;
    let failed = !matches!(&result, Ok(report) if report.verdict.is_clean());
    data_dir.finish(failed);
    result
}

async fn cycles(
    config: &Config,
    local: &mut tailstream_launcher::LocalCluster,
    args: &ChaosBenchArgs,
    firewall: Option<&partition::Firewall>,
) -> Result<ChaosReport, String> {
    let started = Instant::now();
    let client = harness::client(config, &local.coordinator_addr().to_string());
    let cluster = client.coordinator().clone();
    harness::wait_for_brokers(&cluster, args.brokers).await?;
    let mut stream = config.stream_defaults.clone();
    stream.replicas = args.replicas;
    stream.logs_per_streamlet = 2;
    stream.segment_size_bytes = 64 * 1024;
    stream.segments_per_group = 2;
    stream.retention_bytes = args.retention_bytes;
    let name = "chaos";
    cluster
        .create_stream(name, args.streamlets, stream)
        .await
        .map_err(|e| e.to_string())?;
    let load = Load::start(
        client.clone(),
        name,
        LoadConfig {
            producers: args.producers,
            // Bounded by count too: far more than the cycles can use.
            records_per_producer_max: args.records_per_second * 60 * u64::from(args.cycles.max(1)),
            records_per_second_per_producer: args.records_per_second,
            producer: config.producer.clone(),
            consumer: config.consumer.clone(),
            drain_timeout: Duration::from_millis(args.recovery_timeout_ms),
        },
    );
    load.wait_for_acks(1000, Duration::from_secs(30)).await?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut reports = Vec::new();
    // Faults are drawn from a shuffled bag: every kind comes once per len(faults) cycles, in a
    // random order, so a short run still meets each of them.
    let mut bag: Vec<FaultKind> = Vec::new();
    for cycle in 0..args.cycles {
        if bag.is_empty() {
            bag = args.faults.clone();
            bag.shuffle(&mut rng);
        }
        let fault = bag.pop().ok_or("no faults")?;
        let streamlet = rng.random_range(0..args.streamlets);
        let delay = rng.random_range(0..=args.max_delay_ms);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let report = one_cycle(
            &cluster, local, &load, &mut rng, args, cycle, fault, streamlet, firewall, config,
        )
        .await
        .map_err(|e| format!("cycle {cycle} ({fault:?} on streamlet {streamlet}): {e}"))?;
        if !args.json {
            println!(
                "cycle {:>3}: {:<17} streamlet {} serving again after {:>5} ms, R copies after {:>5} ms{}",
                cycle,
                format!("{fault:?}"),
                streamlet,
                report.fault_to_serving_ms,
                report.fault_to_replicated_ms,
                report.detect_ms.map_or(String::new(), |d| format!(
                    " (declared {d} ms after the fault)"
                )),
            );
        }
        reports.push(report);
    }
    let verdict = load.finish().await?;
    Ok(ChaosReport {
        cycles: args.cycles,
        seed: args.seed,
        verdict,
        cycle_reports: reports,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

#[allow(clippy::too_many_arguments)]
async fn one_cycle(
    cluster: &tailstream_client::CoordinatorClient,
    local: &mut tailstream_launcher::LocalCluster,
    load: &Load,
    rng: &mut StdRng,
    args: &ChaosBenchArgs,
    cycle: u32,
    fault: FaultKind,
    streamlet: u32,
    firewall: Option<&partition::Firewall>,
    config: &Config,
) -> Result<CycleReport, String> {
    let timeout = Duration::from_millis(args.recovery_timeout_ms);
    let injected = faults::inject(
        fault,
        rng,
        cluster,
        local,
        "chaos",
        streamlet as usize,
        firewall,
        Duration::from_millis(config.replication.write_timeout_ms),
    )
    .await?;
    harness::wait_until_serving(
        cluster,
        "chaos",
        &injected.gone,
        Duration::from_millis(5),
        timeout,
    )
    .await?;
    let fault_to_serving_ms = harness::unix_ms().saturating_sub(injected.first_hit_ms);
    // A fault that declares nobody (a partition between brokers) has no recovery to time.
    let detect_ms = if injected.gone.is_empty() {
        None
    } else {
        harness::recovery_of(cluster, injected.victim, timeout)
            .await
            .ok()
            .map(|r| r.declared_at_ms.saturating_sub(injected.first_hit_ms))
    };
    if let Some(hold) = injected.hold {
        tokio::time::sleep(hold).await;
    }
    faults::heal(local, &injected, firewall).await?;
    harness::wait_for_brokers(cluster, args.brokers).await?;
    // Records flow again before the next fault.
    let acked = load.acked();
    load.wait_for_acks(acked + 100, timeout).await?;
    // And every segment has R copies again: R = 2 promises to survive one failure at a time,
    // not a second one while the first one's copies are still being made.
    harness::wait_until_replicated(cluster, "chaos", Duration::from_millis(20), timeout).await?;
    let fault_to_replicated_ms = harness::unix_ms().saturating_sub(injected.first_hit_ms);
    Ok(CycleReport {
        cycle,
        fault,
        streamlet,
        fault_to_serving_ms,
        fault_to_replicated_ms,
        detect_ms,
    })
}
