//! Issue 23, item 7: after a flood of connections, a broker gives the memory back. Each
//! connection that sends the start of a request costs the broker buffers; glibc kept them all
//! once the connections closed (a broker stayed at 0.9 GB after the probe's flood). With
//! `listeners.memory_trim_interval_ms`, the broker checks what its allocator holds free and
//! hands it back: resident memory returns near where it started.

use crate::common;

use common::TEST_TIMEOUT;
use common::TestCluster;
use common::hostile::{metric, round_trip, rss_bytes};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpSocket;

/// Connections in the flood (to the Kafka listener, whose connections cost the most): well
/// below the usual 1,024 open files of this process (which runs two tests at a time) and of
/// the broker, spread over source addresses under the per-address cap.
const FLOOD: usize = 500;
const PER_ADDRESS: usize = 100;

const TRIMMING: &str = "[listeners]\nmemory_trim_interval_ms = 500\n\
                        memory_trim_free_bytes_min = 8388608\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_gives_a_floods_memory_back() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, TRIMMING).await;
        let broker = test.cluster.broker(0).unwrap();
        let pid = broker.pid().unwrap();
        let kafka = broker.kafka_addr.unwrap();
        round_trip(&test, "warm-up", 100).await;
        let before = rss_bytes(pid);
        let mut flood = Vec::with_capacity(FLOOD);
        for i in 0..FLOOD {
            let socket = TcpSocket::new_v4().unwrap();
            let source = format!("127.0.0.{}:0", 2 + i / PER_ADDRESS);
            socket.bind(source.parse().unwrap()).unwrap();
            let Ok(mut stream) = socket.connect(kafka).await else {
                continue;
            };
            // The start of a request, then nothing: the broker holds a read buffer for it.
            let _ = stream.write_all(&[0, 1, 0, 0, 0, 18, 0, 3, 0, 0, 0, 0]).await;
            flood.push(stream);
        }
        let opened = flood.len();
        let mut peak = before;
        let watch_until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < watch_until {
            peak = peak.max(rss_bytes(pid));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(flood);
        let grown = peak.saturating_sub(before);
        // Back within a third of what the flood added (and 4 MiB): what it left is free.
        let near = before + (grown / 3).max(4 << 20);
        let given_back_by = Instant::now() + Duration::from_secs(15);
        let settled = loop {
            let now = rss_bytes(pid);
            if now < near || Instant::now() > given_back_by {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let trimmed = metric(broker.admin_addr, "tailstream_memory_trimmed_bytes_total", &[]).await;
        eprintln!(
            "{opened} connections: broker RSS {before} before, {peak} at most, {settled} after; {trimmed} bytes trimmed"
        );
        assert!(
            grown >= 12 << 20,
            "the flood grew the broker by only {grown} bytes: too little to tell a trim"
        );
        assert!(
            settled < near,
            "RSS went from {before} to {peak} and stayed at {settled}"
        );
        assert!(trimmed > 0.0, "no trim counted");
        // Nothing was lost meanwhile: the broker still serves.
        round_trip(&test, "after", 1000).await;
        test.stop().await;
    })
    .await
    .expect("the flood memory test finished in time");
}
