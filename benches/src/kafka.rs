//! `tailstream bench kafka`: the same closed-loop load through the native protocol and through
//! the Kafka listener, side by side on one cluster, and their ratio.
//!
//! Each round runs `bench produce` twice on one cluster, `--protocol native` and `--protocol
//! kafka` (alternating which goes first, so neither always meets a warmer cluster), each on a
//! fresh stream of the same shape with the same record size, batch size and requests in
//! flight. Every run prints what `bench produce` prints (a table row, or its JSON object); the
//! summary is the median over rounds of Kafka's figure over native's, for throughput and for
//! the CPU per GiB of the streamlets' owners (where the Kafka front end's cost shows).
//!
//! The two clients differ: the native producer is the Tailstream client library (per-record
//! accumulation, routing, per-record acks), the Kafka one a lean loop that builds whole
//! batches. Throughput therefore compares two clients as much as two front ends on a 2-core
//! machine; the primary's CPU per GiB compares the front ends alone.

use crate::produce::{
    self, BOUNDED_RETENTION_BYTES, ProduceBenchArgs, ProduceBenchReport, Protocol,
};
use clap::Args;
use serde::Serialize;
use tailstream_config::Config;

#[derive(Args, Debug, Clone)]
pub struct KafkaBenchArgs {
    /// Rounds: each runs the native and the Kafka load once, alternating which goes first.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    #[command(flatten)]
    pub produce: ProduceBenchArgs,
}

/// Kafka over native, from the runs of every round (medians of the per-round ratios).
#[derive(Debug, Serialize)]
pub struct KafkaBenchSummary {
    pub rounds: u32,
    pub producers: u32,
    pub record_bytes: usize,
    pub batch_bytes: u32,
    pub replicas: u32,
    pub replication: String,
    pub kafka_over_native_throughput: Option<f64>,
    pub kafka_over_native_primary_cpu_per_gib: Option<f64>,
}

pub async fn run(config: Config, args: KafkaBenchArgs) -> Result<(), String> {
    let load = &args.produce;
    if args.rounds == 0 || load.producers == 0 || load.records == 0 {
        return Err("--rounds, --producers and --records must be positive".into());
    }
    if load.rate.is_some() {
        return Err("bench kafka runs closed loop only (no --rate)".into());
    }
    let retention_bytes = retention_per_run(&config, &args)?;
    let cluster = crate::harness::BenchCluster::start_or_join(
        &config,
        load.join.clone(),
        &load.replication,
        load.brokers.max(load.replicas + 1).max(1),
    )
    .await?;
    let result = rounds(&config, &cluster, &args, retention_bytes).await;
    cluster.finish(result.is_err()).await;
    let runs = result?;
    let summary = summarize(&args, &runs);
    if load.json {
        println!(
            "{}",
            serde_json::to_string(&summary).map_err(|e| e.to_string())?
        );
    } else {
        let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}x"));
        println!(
            "kafka / native (median of {} rounds): throughput {}, primary cpu per GiB {}",
            summary.rounds,
            ratio(summary.kafka_over_native_throughput),
            ratio(summary.kafka_over_native_primary_cpu_per_gib),
        );
    }
    Ok(())
}

/// Every round's two runs, each printed as it completes.
async fn rounds(
    config: &Config,
    cluster: &crate::harness::BenchCluster,
    args: &KafkaBenchArgs,
    retention_bytes: u64,
) -> Result<Vec<(u32, ProduceBenchReport)>, String> {
    let local = cluster.local.as_ref();
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [Protocol::Native, Protocol::Kafka]
        } else {
            [Protocol::Kafka, Protocol::Native]
        };
        for protocol in order {
            let mut run_args = args.produce.clone();
            run_args.protocol = protocol;
            let prepared = produce::prepare(
                config,
                &cluster.coordinator,
                local,
                &run_args,
                retention_bytes,
            )
            .await?;
            let report = produce::drive(prepared, local, &run_args).await?;
            if args.produce.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).map_err(|e| e.to_string())?
                );
            } else {
                println!("{}", report.table_row());
            }
            runs.push((round, report));
        }
    }
    Ok(runs)
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
            "{runs} runs of {streamlets} streamlet(s) x {} logs do not fit a broker's \
             segment_memory_bytes_max ({} MiB): use fewer --rounds, --streamlets or --logs",
            load.logs,
            config.broker.segment_memory_bytes_max >> 20
        ));
    }
    Ok(retention)
}

fn summarize(args: &KafkaBenchArgs, runs: &[(u32, ProduceBenchReport)]) -> KafkaBenchSummary {
    let ratio = |figure: &dyn Fn(&ProduceBenchReport) -> Option<f64>| -> Option<f64> {
        let ratios = (0..args.rounds).filter_map(|round| {
            let of = |protocol| {
                runs.iter()
                    .find(|(r, report)| *r == round && report.protocol == protocol)
                    .and_then(|(_, report)| figure(report))
            };
            Some(of(Protocol::Kafka)? / of(Protocol::Native)?)
        });
        median(ratios.filter(|r| r.is_finite()).collect())
    };
    KafkaBenchSummary {
        rounds: args.rounds,
        producers: args.produce.producers,
        record_bytes: args.produce.record_bytes,
        batch_bytes: args.produce.batch_bytes,
        replicas: args.produce.replicas,
        replication: args.produce.replication.clone(),
        kafka_over_native_throughput: ratio(&|r| Some(r.records_per_sec)),
        kafka_over_native_primary_cpu_per_gib: ratio(&|r| r.primary_cpu_seconds_per_gib),
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[middle]),
        _ => Some((values[middle - 1] + values[middle]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0]), Some(3.0));
        assert_eq!(median(vec![4.0, 1.0]), Some(2.5));
        assert_eq!(median(vec![5.0, 1.0, 2.0]), Some(2.0));
    }
}
