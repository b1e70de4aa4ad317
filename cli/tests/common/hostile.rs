//! Helpers for the attack tests: connections from another loopback address, a legitimate
//! round trip, process RSS and metric values.

use super::TestCluster;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tailstream_client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A connection from 127.0.0.2: an anonymous peer on another host, as the server sees it.
pub async fn connect_from_elsewhere(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Produces `records` records to `stream` (which must exist) and reads them all back, from the
/// legitimate client's address.
pub async fn produce_and_consume(cluster: Client, stream: &str, records: usize) {
    let config = tailstream_config::Config::embedded();
    let producer = cluster
        .clone()
        .producer(stream)
        .config(config.producer.clone())
        .build()
        .await
        .unwrap();
    let mut acks = Vec::new();
    for i in 0..records {
        acks.push(
            producer
                .send(None, format!("r-{i}").as_bytes())
                .await
                .unwrap(),
        );
    }
    producer.flush().await.unwrap();
    for ack in acks {
        ack.await.unwrap();
    }
    let mut consumer = cluster
        .consumer(stream)
        .config(config.consumer.clone())
        .from_beginning()
        .build()
        .await
        .unwrap();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen < records {
        assert!(Instant::now() < deadline, "read {seen} of {records}");
        seen += consumer
            .poll(Duration::from_millis(200))
            .await
            .unwrap()
            .len();
    }
    assert_eq!(seen, records);
}

/// Creates `stream` (one streamlet, unreplicated) and round-trips `records` records through it.
pub async fn round_trip(test: &TestCluster, stream: &str, records: usize) {
    let cluster = test.client();
    let mut config = test.stream_config();
    config.replicas = 0;
    cluster.create_stream(stream, 1, config).await.unwrap();
    if records > 0 {
        produce_and_consume(cluster, stream, records).await;
    }
}

/// Sends `bytes` to `addr` one byte per `every` until the server closes the connection (or
/// everything was sent and it answered); returns how long the connection lasted.
pub async fn trickle_until_closed(addr: SocketAddr, bytes: &[u8], every: Duration) -> Duration {
    let started = Instant::now();
    let mut stream = connect_from_elsewhere(addr).await;
    for byte in bytes {
        if stream.write_all(&[*byte]).await.is_err() {
            return started.elapsed();
        }
        let mut probe = [0u8; 256];
        match tokio::time::timeout(every, stream.read(&mut probe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            _ => {}
        }
    }
    // Everything arrived: whatever the answer, wait for the close (bounded).
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    started.elapsed()
}

/// Resident set size of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// The value of `name` with exactly these `labels` on the admin endpoint's `/metrics` (0 when
/// absent).
pub async fn metric(admin: SocketAddr, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric_at(admin, "/metrics", name, labels).await
}

/// `metric` read from `path` (`/metrics?token=T` where the admin token is set).
pub async fn metric_at(admin: SocketAddr, path: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let body = TestCluster::http_get(admin, path).await;
    for line in body.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_part, value) = match rest.strip_prefix('{') {
            Some(rest) => match rest.split_once("} ") {
                Some(split) => split,
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(value) => ("", value),
                None => continue,
            },
        };
        let matches = labels.len() == label_part.split(',').filter(|l| !l.is_empty()).count()
            && labels
                .iter()
                .all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\"")));
        if matches {
            return value.trim().parse().unwrap_or(0.0);
        }
    }
    0.0
}
