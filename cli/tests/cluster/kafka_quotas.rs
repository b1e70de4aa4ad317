//! Issue 23's byte-rate quotas: a Kafka producer over its principal's produce quota is
//! throttled as Kafka throttles (throttle_time_ms in its answers, its connection not read
//! meanwhile), loses nothing, and reads back every record.

use crate::common;

use common::hostile::metric;
use common::kafka::{bootstrap, kcat, required, run};
use common::{TEST_TIMEOUT, TestCluster};
use std::time::{Duration, Instant};

/// 1 MiB/s per principal per broker.
const OVERRIDES: &str = "[kafka]\nquota_produce_bytes_per_second = 1048576\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_over_its_quota_is_throttled_and_loses_nothing() {
    let Some(kcat) = required(kcat(), "kcat") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, OVERRIDES).await;
        let bootstrap = bootstrap(&test);
        let admin = test.cluster.broker(0).unwrap().admin_addr;
        // 4 MiB: one second of burst, then about three seconds at the quota.
        let records = 4096;
        let value = "x".repeat(1000);
        let lines: String = (0..records).map(|i| format!("{i:06}-{value}\n")).collect();
        let started = Instant::now();
        let produce = [
            "-P",
            "-b",
            &bootstrap,
            "-t",
            "quota",
            "-X",
            "acks=all",
            "-X",
            "client.id=greedy",
        ];
        run(&kcat, &produce, lines.as_bytes()).await;
        let took = started.elapsed();
        let throttled = metric(
            admin,
            "tailstream_kafka_throttled_milliseconds_total",
            &[("kind", "produce")],
        )
        .await;
        assert!(throttled > 0.0, "no throttling recorded");
        // A lower bound only (a slow machine takes longer anyway): the quota held it back.
        assert!(
            took >= Duration::from_millis(1500),
            "4 MiB at 1 MiB/s took {took:?}"
        );
        let consume = [
            "-C",
            "-b",
            &bootstrap,
            "-t",
            "quota",
            "-o",
            "beginning",
            "-e",
            "-q",
        ];
        let read = run(&kcat, &consume, b"").await;
        let mut seen: Vec<&str> = read.lines().map(|l| &l[..6]).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), records, "every record once");
        test.stop().await;
    })
    .await
    .expect("the quota test finished in time");
}
