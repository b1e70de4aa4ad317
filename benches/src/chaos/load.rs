//! A load to inject faults under: producers (half keyless, half keyed) sending paced,
//! numbered records, and one consumer reading the stream from the beginning, all feeding one
//! [`Ledger`]; at the end, the exactly-once [`Verdict`].

use super::ledger::{Ledger, Verdict, value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_client::{AckFuture, Client};
use tailstream_config::{ConsumerConfig, ProducerConfig};
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub producers: u32,
    /// Each producer stops after this many records (or when the load is finished).
    pub records_per_producer_max: u64,
    /// Each producer's sending rate.
    pub records_per_second_per_producer: u64,
    pub producer: ProducerConfig,
    pub consumer: ConsumerConfig,
    /// After the producers finish, how long the consumer may take to read what is left
    /// (while a streamlet does not serve it waits; past this it gives up and the verdict
    /// counts what it did not read as lost).
    pub drain_timeout: Duration,
}

/// A running load.
#[derive(Debug)]
pub struct Load {
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    producers: Vec<tokio::task::JoinHandle<Result<(), String>>>,
    consumer_stop: Arc<AtomicBool>,
    consumer: tokio::task::JoinHandle<Result<u64, String>>,
}

/// The records sent between two pacing checks.
const PACE_EVERY_RECORDS: u64 = 16;
/// Consecutive empty polls, with every streamlet reachable, that mean "read everything".
const DRAINED_EMPTY_POLLS: u32 = 20;
const POLL: Duration = Duration::from_millis(100);

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|p| p.into_inner())
}

impl Load {
    pub fn start(cluster: Client, stream: &str, config: LoadConfig) -> Load {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let producers = (0..config.producers)
            .map(|producer| {
                tokio::spawn(produce(
                    cluster.clone(),
                    stream.to_string(),
                    producer,
                    config.clone(),
                    Shared {
                        ledger: ledger.clone(),
                        stop: stop.clone(),
                        acked: acked.clone(),
                    },
                ))
            })
            .collect();
        let consumer_stop = Arc::new(AtomicBool::new(false));
        let consumer = tokio::spawn(consume(
            cluster,
            stream.to_string(),
            config,
            ledger.clone(),
            consumer_stop.clone(),
        ));
        Load {
            ledger,
            stop,
            acked,
            producers,
            consumer_stop,
            consumer,
        }
    }

    /// Records acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until at least `records` are acknowledged, for at most `timeout`.
    pub async fn wait_for_acks(&self, records: u64, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while self.acked() < records {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} of {records} records acked in {timeout:?}",
                    self.acked()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stops the producers, waits for every ack, lets the consumer read the rest, and checks.
    pub async fn finish(self) -> Result<Verdict, String> {
        self.stop.store(true, Ordering::Relaxed);
        for producer in self.producers {
            producer.await.map_err(|e| e.to_string())??;
        }
        self.consumer_stop.store(true, Ordering::Relaxed);
        let skipped = self.consumer.await.map_err(|e| e.to_string())??;
        let ledger = std::mem::take(&mut *lock(&self.ledger));
        let mut verdict = ledger.verdict();
        verdict.skipped_by_retention = skipped;
        Ok(verdict)
    }
}

struct Shared {
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
}

async fn produce(
    cluster: Client,
    stream: String,
    producer_index: u32,
    config: LoadConfig,
    shared: Shared,
) -> Result<(), String> {
    let producer = cluster
        .producer(&stream)
        .config(config.producer.clone())
        .build()
        .await
        .map_err(|e| format!("producer {producer_index}: {e}"))?;
    let settle = |sequence: u64, result: Result<tailstream_client::RecordAck, _>| {
        let mut ledger = lock(&shared.ledger);
        match result {
            Ok(ack) => {
                shared.acked.fetch_add(1, Ordering::Relaxed);
                ledger.acked(producer_index, sequence, &ack);
            }
            Err(_) => ledger.unacked(producer_index, sequence),
        }
    };
    let mut pending: VecDeque<(u64, AckFuture)> = VecDeque::new();
    let started = Instant::now();
    let rate = config.records_per_second_per_producer.max(1);
    // Odd producers key their records (5 keys), even ones let them go round-robin.
    let keyed = producer_index % 2 == 1;
    for sequence in 0..config.records_per_producer_max {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let record = value(producer_index, sequence);
        let key = format!("k{}", sequence % 5);
        let key = keyed.then_some(key.as_bytes());
        match producer.send(key, record.as_bytes()).await {
            Ok(ack) => pending.push_back((sequence, ack)),
            Err(error) => return Err(format!("producer {producer_index}: send: {error}")),
        }
        while let Some(result) = pending.front().and_then(|(_, ack)| ack.try_result()) {
            if let Some((sequence, _)) = pending.pop_front() {
                settle(sequence, result);
            }
        }
        if sequence % PACE_EVERY_RECORDS == 0 {
            let due = started + Duration::from_secs_f64(sequence as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
    }
    // A flush that fails leaves its records unacked (their acks say so below).
    let _ = producer.flush().await;
    for (sequence, ack) in pending {
        settle(sequence, ack.await);
    }
    Ok(())
}

/// Reads until stopped and drained; returns the records it skipped because retention freed
/// them before it read them.
async fn consume(
    cluster: Client,
    stream: String,
    config: LoadConfig,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) -> Result<u64, String> {
    let mut consumer = cluster
        .consumer(&stream)
        .config(config.consumer.clone())
        .from_beginning()
        .build()
        .await
        .map_err(|e| format!("consumer: {e}"))?;
    let mut drained_polls = 0;
    let mut stopped_at: Option<Instant> = None;
    loop {
        let records = match consumer.poll(POLL).await {
            Ok(records) => records,
            Err(error) => {
                tracing::debug!(%error, "consumer poll failed; polling again");
                tokio::time::sleep(POLL).await;
                Vec::new()
            }
        };
        if !records.is_empty() {
            drained_polls = 0;
            let mut ledger = lock(&ledger);
            for record in &records {
                ledger.consumed(record);
            }
            continue;
        }
        if !stop.load(Ordering::Relaxed) {
            continue;
        }
        let stopped_at = *stopped_at.get_or_insert_with(Instant::now);
        // Only time with every streamlet reachable counts as "nothing left".
        if consumer.unavailable().is_empty() {
            drained_polls += 1;
        } else {
            drained_polls = 0;
        }
        if drained_polls >= DRAINED_EMPTY_POLLS || stopped_at.elapsed() > config.drain_timeout {
            return Ok(consumer.records_lost_to_retention());
        }
    }
}
