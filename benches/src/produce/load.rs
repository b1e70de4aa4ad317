//! The producers at work, closed or open loop, and joining them.

use super::{ProduceBenchArgs, ProducerOutcome, Progress, closed, kafka_producer, open};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_client::Producer;

/// The producers at work, in either mode.
pub(super) enum Load {
    /// Closed loop, native or Kafka producers.
    Closed(Vec<tokio::task::JoinHandle<Result<ProducerOutcome, String>>>),
    Open(Vec<std::thread::JoinHandle<Result<ProducerOutcome, String>>>),
}

impl Load {
    pub fn closed(
        producers: Vec<Producer>,
        args: &ProduceBenchArgs,
        deadline: Instant,
        progress: &Arc<Progress>,
    ) -> Self {
        let count = producers.len() as u64;
        let (per_producer, remainder) = (args.records / count, args.records % count);
        Load::Closed(
            producers
                .into_iter()
                .enumerate()
                .map(|(i, producer)| {
                    let records = per_producer + u64::from((i as u64) < remainder);
                    tokio::spawn(closed::produce(
                        producer,
                        records,
                        args.record_bytes,
                        deadline,
                        progress.clone(),
                    ))
                })
                .collect(),
        )
    }

    /// Closed loop through the Kafka listener: producer i writes partition i (mod the
    /// partition count), each its share of the records.
    pub fn kafka(
        stream: &str,
        leaders: &[(i32, String)],
        args: &ProduceBenchArgs,
        deadline: Instant,
        progress: &Arc<Progress>,
    ) -> Self {
        let count = u64::from(args.producers.max(1));
        Load::Closed(
            (0..count)
                .map(|i| {
                    // `partition_leaders` never returns an empty list.
                    let (partition, leader) = leaders[i as usize % leaders.len()].clone();
                    let plan = kafka_producer::Plan {
                        leader,
                        topic: stream.to_owned(),
                        partition,
                        records: args.records / count + u64::from(i < args.records % count),
                        record_bytes: args.record_bytes,
                        batch_bytes: args.batch_bytes as usize,
                        max_in_flight: args.max_in_flight as usize,
                        deadline,
                    };
                    tokio::spawn(kafka_producer::produce(plan, progress.clone()))
                })
                .collect(),
        )
    }

    pub fn open(
        producers: Vec<Producer>,
        args: &ProduceBenchArgs,
        rate: u64,
        start: Instant,
        warmup: Duration,
        deadline: Instant,
        progress: &Arc<Progress>,
    ) -> Self {
        let count = producers.len() as u32;
        Load::Open(
            producers
                .into_iter()
                .zip(0u32..)
                .map(|(producer, index)| {
                    // Producer i starts i records' time after the first, so that together
                    // they offer evenly spaced records, not bursts of P.
                    let offset = Duration::from_secs_f64(f64::from(index) / rate as f64);
                    let schedule = open::Schedule {
                        start: start + offset,
                        records_per_sec: rate as f64 / f64::from(count),
                        warmup,
                        duration: Duration::from_secs_f64(args.duration_s),
                        deadline,
                    };
                    open::spawn(
                        producer,
                        schedule,
                        args.record_bytes,
                        tokio::runtime::Handle::current(),
                        progress.clone(),
                    )
                })
                .collect(),
        )
    }

    pub fn finished(&self) -> bool {
        match self {
            Load::Closed(tasks) => tasks.iter().all(|t| t.is_finished()),
            Load::Open(threads) => threads.iter().all(|t| t.is_finished()),
        }
    }

    pub async fn join(self) -> Result<ProducerOutcome, String> {
        let mut total = ProducerOutcome::new();
        match self {
            Load::Closed(tasks) => {
                for task in tasks {
                    total.merge(task.await.map_err(|e| e.to_string())??)?;
                }
            }
            Load::Open(threads) => {
                for thread in threads {
                    let outcome = tokio::task::spawn_blocking(move || thread.join())
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|_| "an open-loop producer thread panicked".to_string())??;
                    total.merge(outcome)?;
                }
            }
        }
        Ok(total)
    }
}
