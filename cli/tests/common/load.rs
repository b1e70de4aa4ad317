//! A load of producers and a consumer against a stream while a test injects faults, and the
//! exactly-once check at the end.

use super::TestCluster;
use super::ledger::{Ledger, value};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tailstream_client::ConsumedRecord;

/// Producers and a consumer running against `stream` while `during` runs; returns the ledger
/// of acks and everything consumed.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub acked: Arc<AtomicU64>,
    producers: Vec<tokio::task::JoinHandle<Ledger>>,
    consumer: tokio::task::JoinHandle<Vec<ConsumedRecord>>,
    consumer_stop: Arc<AtomicBool>,
}

/// Bounds each producer; the pacing below spreads them over several seconds, so the faults
/// injected while they run land in the middle of the load.
pub const RECORDS_PER_PRODUCER_MAX: u64 = 100_000;
const PACE_EVERY_RECORDS: u64 = 16;

impl Load {
    pub fn start(test: &TestCluster, stream: &str, producers: u32) -> Load {
        let cluster = test.client();
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let producers = (0..producers)
            .map(|p| {
                let (cluster, stop, acked) = (cluster.clone(), stop.clone(), acked.clone());
                let config = test.config.producer.clone();
                let stream = stream.to_string();
                tokio::spawn(async move {
                    let producer = cluster
                        .producer(&stream)
                        .config(config)
                        .build()
                        .await
                        .unwrap();
                    let mut ledger = Ledger::default();
                    let mut pending = std::collections::VecDeque::new();
                    let mut settle =
                        |v: String, result: Result<tailstream_client::RecordAck, _>| match result {
                            Ok(ack) => {
                                acked.fetch_add(1, Ordering::Relaxed);
                                ledger.acked(v, ack);
                            }
                            Err(_) => ledger.unacked(v),
                        };
                    // Bounded by count as well as by the stop flag.
                    for i in 0..RECORDS_PER_PRODUCER_MAX {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let v = value(p, i);
                        let key = format!("k{}", i % 5);
                        let key = (p % 2 == 1).then_some(key.as_bytes());
                        pending.push_back((
                            v.clone(),
                            producer.send(key, v.as_bytes()).await.unwrap(),
                        ));
                        // Count acks as they arrive, so the test can act mid-load.
                        while let Some(result) = pending.front().and_then(
                            |(_, ack): &(String, tailstream_client::AckFuture)| ack.try_result(),
                        ) {
                            let (v, _) = pending.pop_front().unwrap();
                            settle(v, result);
                        }
                        if i % PACE_EVERY_RECORDS == 0 {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    producer.flush().await.unwrap();
                    for (v, ack) in pending {
                        settle(v, ack.await);
                    }
                    ledger
                })
            })
            .collect();
        let consumer_stop = Arc::new(AtomicBool::new(false));
        let consumer = {
            let (cluster, consumer_stop) = (cluster.clone(), consumer_stop.clone());
            let config = test.config.consumer.clone();
            let stream = stream.to_string();
            tokio::spawn(async move {
                let mut consumer = cluster
                    .consumer(&stream)
                    .config(config)
                    .from_beginning()
                    .build()
                    .await
                    .unwrap();
                let mut got = Vec::new();
                let mut idle = 0;
                while idle < 30 {
                    let records = consumer.poll(Duration::from_millis(100)).await.unwrap();
                    if records.is_empty() && consumer_stop.load(Ordering::Relaxed) {
                        idle += 1;
                    } else if !records.is_empty() {
                        idle = 0;
                        got.extend(records);
                    }
                }
                got
            })
        };
        Load {
            stop,
            acked,
            producers,
            consumer,
            consumer_stop,
        }
    }

    pub async fn wait_for_acks(&self, at_least: u64) {
        for _ in 0..600 {
            if self.acked.load(Ordering::Relaxed) >= at_least {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("fewer than {at_least} records acked in 30 s");
    }

    /// Stops the producers, waits for every ack, lets the consumer drain, checks exactly-once.
    pub async fn finish_and_check(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let mut ledger = Ledger::default();
        for producer in self.producers {
            ledger.merge(producer.await.unwrap());
        }
        self.consumer_stop.store(true, Ordering::Relaxed);
        let consumed = self.consumer.await.unwrap();
        ledger.check(&consumed);
        ledger.acked_count()
    }
}
