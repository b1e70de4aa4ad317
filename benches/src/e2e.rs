//! `tailstream bench e2e`: produce-to-consume latency. An open-loop load (as `bench produce
//! --rate`) writes each record's scheduled send time, and whether it falls in the measured
//! interval, into its value; C consumers long-poll the stream from its beginning and count,
//! for every measured record, the time from that scheduled send to the moment a consumer has
//! it. Consumers only see
//! committed records, so this includes replication to every backup.

use crate::latency::{self, LatencySummary};
use crate::produce::{self, ProduceBenchArgs, ProduceBenchReport, STAMP_BYTES, measured_send_time};
use clap::Args;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_client::{Consumer, CoordinatorClient};
use tailstream_config::Config;

#[derive(Args, Debug, Clone)]
pub struct E2eBenchArgs {
    /// C: consumers sharing the stream (each reads every C-th log).
    #[arg(long, default_value_t = 1)]
    pub consumers: u32,
    #[command(flatten)]
    pub produce: ProduceBenchArgs,
}

/// One run: the end-to-end latency, and everything `bench produce` reports of the load.
#[derive(Debug, Serialize)]
pub struct E2eBenchReport {
    pub consumers: u32,
    pub records_consumed: u64,
    /// From the scheduled send to a consumer holding the record.
    pub e2e_p50_us: Option<u64>,
    pub e2e_p99_us: Option<u64>,
    pub e2e_p999_us: Option<u64>,
    pub e2e_max_us: Option<u64>,
    #[serde(flatten)]
    pub produce: ProduceBenchReport,
}

/// How long consumers may take, after the last ack, to read what is left.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

pub async fn run(config: Config, args: E2eBenchArgs) -> Result<(), String> {
    let produce_args = &args.produce;
    if produce_args.rate.is_none() {
        return Err("bench e2e needs --rate (records/s, sent on a fixed schedule)".into());
    }
    produce_args.check_protocol()?;
    if produce_args.record_bytes < STAMP_BYTES || args.consumers == 0 {
        return Err(format!(
            "bench e2e needs --record-bytes >= {STAMP_BYTES} and at least one consumer"
        ));
    }
    let cluster = crate::harness::BenchCluster::start_or_join(
        &config,
        produce_args.join.clone(),
        &produce_args.replication,
        produce_args.brokers.max(produce_args.replicas + 1).max(1),
    )
    .await?;
    let result = measure(&config, &cluster, &args).await;
    cluster.finish(result.is_err()).await;
    let report = result?;
    if produce_args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        let us = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        println!(
            "end to end, {} consumers: p50 {} p99 {} p999 {} max {} us ({} records read)\nack: {}",
            report.consumers,
            us(report.e2e_p50_us),
            us(report.e2e_p99_us),
            us(report.e2e_p999_us),
            us(report.e2e_max_us),
            report.records_consumed,
            report.produce.table_row(),
        );
    }
    Ok(())
}

async fn measure(
    config: &Config,
    cluster: &crate::harness::BenchCluster,
    args: &E2eBenchArgs,
) -> Result<E2eBenchReport, String> {
    let produce_args = &args.produce;
    let local = cluster.local.as_ref();
    let prepared = produce::prepare(config, &cluster.coordinator, local, produce_args, 0).await?;
    let consumed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> =
        crate::harness::consumers(&prepared.client, &prepared.stream, args.consumers)
            .await?
            .into_iter()
            .map(|consumer| tokio::spawn(read(consumer, consumed.clone(), stop.clone())))
            .collect();
    let client: Arc<CoordinatorClient> = prepared.cluster.clone();
    let produced = produce::drive(prepared, local, produce_args).await;
    // Whatever happened to the load, the consumers stop once they have read what was acked.
    let acked = produced.as_ref().map_or(0, |r| r.records_acked);
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while consumed.load(Ordering::Relaxed) < acked && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut histogram = latency::histogram();
    for reader in readers {
        let part = reader.await.map_err(|e| e.to_string())??;
        histogram.add(&part).map_err(|e| e.to_string())?;
    }
    drop(client);
    let produce = produced?;
    let records_consumed = consumed.load(Ordering::Relaxed);
    if records_consumed < acked {
        return Err(format!(
            "consumers read {records_consumed} of {acked} acknowledged records in {DRAIN_TIMEOUT:?}"
        ));
    }
    let e2e = LatencySummary::of(&histogram);
    Ok(E2eBenchReport {
        consumers: args.consumers,
        records_consumed,
        e2e_p50_us: e2e.map(|l| l.p50_us),
        e2e_p99_us: e2e.map(|l| l.p99_us),
        e2e_p999_us: e2e.map(|l| l.p999_us),
        e2e_max_us: e2e.map(|l| l.max_us),
        produce,
    })
}

/// One consumer: reads until told to stop, timing every record the load marked as measured.
async fn read(
    mut consumer: Consumer,
    consumed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Result<Histogram<u64>, String> {
    let mut histogram = latency::histogram();
    while !stop.load(Ordering::Relaxed) {
        let records = consumer.poll(POLL).await.map_err(|e| e.to_string())?;
        let now = Instant::now();
        for record in &records {
            let scheduled = record.value.as_deref().and_then(measured_send_time);
            if let Some(scheduled) = scheduled {
                let micros = now.saturating_duration_since(scheduled).as_micros();
                latency::record(&mut histogram, micros as u64);
            }
        }
        consumed.fetch_add(records.len() as u64, Ordering::Relaxed);
    }
    Ok(histogram)
}
