//! Issue 20, case 2: a busy machine must not get a live broker declared crashed. Four brokers
//! (one runtime thread each, as `tailstream dev` gives them on two cores), a closed-loop
//! benchmark with four producers on a replicated stream, two busy loops, and 64 connections
//! each to broker 0's client RPC and Kafka listeners that announce a 16 MiB body and send all
//! but its last byte (the listeners' body budgets fill, and those connections are closed only
//! at their read deadline, then opened again). For the whole run the coordinator must declare
//! no crash, start no recovery and keep every broker at its generation; every streamlet
//! serves at the end and the benchmark finishes.
//!
//! `TAILSTREAM_SATURATION_S` sets the load's length (default 90 s).

#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

mod common;

use common::TestCluster;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailstream_wire::frame::FrameHeader;
use tailstream_wire::messages::PlacementState;
use tailstream_wire::{Opcode, RequestId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BODY_BYTES: usize = 16 << 20;
const ATTACK_CONNECTIONS: usize = 64;

fn saturation() -> Duration {
    let seconds = std::env::var("TAILSTREAM_SATURATION_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90);
    Duration::from_secs(seconds)
}

/// A native frame header announcing a `BODY_BYTES` body.
fn native_header() -> Vec<u8> {
    let mut header = FrameHeader::request(Opcode::Produce, RequestId(1)).encode_for_body(&[]);
    header[8..12].copy_from_slice(&(BODY_BYTES as u32).to_le_bytes());
    let crc = crc32fast::hash(&header[8..]);
    header[4..8].copy_from_slice(&crc.to_le_bytes());
    header.to_vec()
}

/// A Kafka length prefix announcing a `BODY_BYTES` request.
fn kafka_header() -> Vec<u8> {
    (BODY_BYTES as i32).to_be_bytes().to_vec()
}

/// One attacking connection, again and again until `stop`: the header, all but the last byte
/// of the body, then wait for the listener to close it. Counts the connections made.
async fn attack(addr: SocketAddr, header: Vec<u8>, stop: Arc<AtomicBool>, made: Arc<AtomicU64>) {
    let body = vec![0x5a; BODY_BYTES - 1];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        made.fetch_add(1, Ordering::Relaxed);
        let sent = async {
            stream.write_all(&header).await?;
            stream.write_all(&body).await?;
            // Held open until the broker gives up on it (its read deadline).
            let mut sink = [0u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        };
        tokio::select! {
            _ = sent => {}
            _ = async { while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            } } => return,
        }
    }
}

/// Crashes declared so far, from the coordinator's `/metrics`.
async fn crashes_declared(test: &TestCluster) -> f64 {
    common::hostile::metric(
        test.cluster.coordinator.admin_addr,
        "tailstream_coordinator_crashes_declared_total",
        &[],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_machine_gets_no_live_broker_declared_crashed() {
    let load_for = saturation();
    tokio::time::timeout(load_for + Duration::from_secs(180), async {
        let test = TestCluster::start(4, "").await;
        let client = test.client();
        let brokers_before = client.list_brokers().await.unwrap();
        assert_eq!(brokers_before.len(), 4);

        // The load: a closed-loop benchmark on a stream with R = 2 ...
        let seconds = load_for.as_secs().to_string();
        let mut bench = test
            .cli_command(&[
                "bench",
                "produce",
                "--join",
                &test.coordinator(),
                "--producers",
                "4",
                "--streamlets",
                "4",
                "--replicas",
                "2",
                "--records",
                "1000000000",
                "--time-limit-s",
                &seconds,
                "--warmup-s",
                "1",
                "--no-floor",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // ... two busy loops ...
        let mut spinners: Vec<_> = (0..2)
            .map(|_| {
                tokio::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap()
            })
            .collect();
        // ... and the attack on broker 0's client listeners.
        let victim = test.cluster.broker(0).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicU64::new(0));
        let mut attackers = Vec::new();
        for (addr, header) in [
            (victim.rpc_addr, native_header()),
            (victim.kafka_addr.unwrap(), kafka_header()),
        ] {
            for _ in 0..ATTACK_CONNECTIONS {
                attackers.push(tokio::spawn(attack(
                    addr,
                    header.clone(),
                    stop.clone(),
                    made.clone(),
                )));
            }
        }

        let started = Instant::now();
        while started.elapsed() < load_for {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(
                crashes_declared(&test).await,
                0.0,
                "a live broker was declared crashed {:?} into the load",
                started.elapsed()
            );
        }
        stop.store(true, Ordering::Relaxed);
        for spinner in &mut spinners {
            let _ = spinner.kill().await;
        }
        for attacker in attackers {
            let _ = tokio::time::timeout(Duration::from_secs(15), attacker).await;
        }
        let bench = tokio::time::timeout(Duration::from_secs(120), async {
            let mut out = String::new();
            let mut err = String::new();
            bench
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .await
                .unwrap();
            bench
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .await
                .unwrap();
            (bench.wait().await.unwrap(), out, err)
        })
        .await
        .expect("the benchmark ends after its time limit");
        assert!(bench.0.success(), "the benchmark failed: {}", bench.2);
        assert!(
            made.load(Ordering::Relaxed) >= 2 * ATTACK_CONNECTIONS as u64,
            "the attack ran"
        );

        assert_eq!(crashes_declared(&test).await, 0.0);
        let brokers_after = client.list_brokers().await.unwrap();
        for (before, after) in brokers_before.iter().zip(&brokers_after) {
            assert_eq!(
                (after.server_id, after.crashed),
                (before.server_id, false),
                "every broker keeps its generation"
            );
        }
        assert!(
            client.list_recoveries().await.unwrap().is_empty(),
            "no recovery was started"
        );
        for stream in client.list_streams().await.unwrap() {
            for placement in &stream.streamlets {
                assert_eq!(placement.state, PlacementState::Serving, "{}", stream.name);
            }
        }
        eprintln!(
            "{} attack connections over {load_for:?}; benchmark: {}",
            made.load(Ordering::Relaxed),
            bench.1.trim()
        );
        test.stop().await;
    })
    .await
    .unwrap();
}
