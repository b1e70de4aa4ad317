//! Kafka's own clients as the tests run them: the Python in `target/kafka-venv` (kafka-python
//! and confluent-kafka, installed by `.ci/install-deps.sh`), kcat, a cluster's bootstrap list,
//! and running a client to its end.

use super::TestCluster;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// The Python of the Kafka test venv if it can import `module`, else `None`.
pub fn python_with(module: &str) -> Option<PathBuf> {
    let python = std::env::var_os("TAILSTREAM_KAFKA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/kafka-venv/bin/python")
        });
    let works = std::process::Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    works.then_some(python)
}

pub fn kcat() -> Option<PathBuf> {
    let works = std::process::Command::new("kcat")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    works.then(|| PathBuf::from("kcat"))
}

/// The client, or the reason this test cannot run: it says so and is skipped, unless
/// `TAILSTREAM_REQUIRE_KAFKA_CLIENTS` is set (as `.ci/run` does), when a missing client fails.
pub fn required(client: Option<PathBuf>, name: &str) -> Option<PathBuf> {
    if client.is_none() {
        assert!(
            std::env::var_os("TAILSTREAM_REQUIRE_KAFKA_CLIENTS").is_none(),
            "{name} is required (TAILSTREAM_REQUIRE_KAFKA_CLIENTS) but not installed: run .ci/install-deps.sh"
        );
        eprintln!("skipped: {name} is not installed (run .ci/install-deps.sh)");
    }
    client
}

/// Every broker's Kafka listener, comma-separated.
pub fn bootstrap(test: &TestCluster) -> String {
    test.cluster
        .brokers()
        .filter_map(|b| b.kafka_addr.map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs a command to its end (bounded), returning its stdout; fails the test on an error.
/// The client's stderr goes to the test's output line by line as it comes, stamped with the
/// time since start, so a test that fails or times out shows what each client was doing.
pub async fn run(program: &PathBuf, args: &[&str], stdin: &[u8]) -> String {
    use tokio::io::AsyncBufReadExt;
    let started = std::time::Instant::now();
    let label: Vec<&str> = args.iter().skip(1).take(4).copied().collect();
    let label = label.join(" ");
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = input.write_all(&data).await;
    });
    let stderr = child.stderr.take().unwrap();
    let stderr_label = label.clone();
    let (errors_tx, errors_rx) = tokio::sync::oneshot::channel::<String>();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let mut all = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!(
                "[{stderr_label} +{:.1}s] {line}",
                started.elapsed().as_secs_f64()
            );
            all.push_str(&line);
            all.push('\n');
        }
        let _ = errors_tx.send(all);
    });
    let output = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{label}: the client did not finish in 150 s"))
        .unwrap();
    let errors = errors_rx.await.unwrap_or_default();
    eprintln!(
        "[{label}] finished in {:.1}s: {}",
        started.elapsed().as_secs_f64(),
        output.status
    );
    assert!(
        output.status.success(),
        "{} {args:?} failed: {errors}",
        program.display(),
    );
    String::from_utf8(output.stdout).unwrap()
}

pub fn kafka_python() -> Option<PathBuf> {
    python_with("kafka")
}

pub const CLIENTS_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");

/// A record as a client reports it: partition, offset, value.
pub type Seen = (i32, u64, String);

pub fn parse(lines: &str) -> Vec<Seen> {
    lines
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let partition = parts.next().unwrap().parse().unwrap();
            let offset = parts.next().unwrap().parse().unwrap();
            (partition, offset, parts.next().unwrap_or("").to_owned())
        })
        .collect()
}

/// Every acknowledged record is read exactly once; per partition, offsets increase and the
/// values of each key come in the order they were produced ("KEY:SEQUENCE").
pub fn check_exactly_once_in_order(acked: &[Seen], read: &[Seen]) {
    let acked_set: HashSet<&Seen> = acked.iter().collect();
    assert_eq!(acked_set.len(), acked.len(), "an offset acknowledged twice");
    let mut counts: HashMap<&Seen, usize> = HashMap::new();
    for record in read {
        *counts.entry(record).or_default() += 1;
    }
    let missing = acked.iter().filter(|r| !counts.contains_key(r)).count();
    let duplicated = counts.values().filter(|c| **c > 1).count();
    let unknown = counts.keys().filter(|r| !acked_set.contains(*r)).count();
    assert_eq!(
        (missing, duplicated, unknown),
        (0, 0, 0),
        "(missing, duplicated, unknown) of {} acknowledged",
        acked.len()
    );
    let mut by_partition: BTreeMap<i32, Vec<&Seen>> = BTreeMap::new();
    for record in acked {
        by_partition.entry(record.0).or_default().push(record);
    }
    for (partition, mut records) in by_partition {
        records.sort_by_key(|r| r.1);
        let mut last: HashMap<&str, u64> = HashMap::new();
        for (_, _, value) in records {
            let (key, sequence) = value.split_once(':').unwrap();
            let sequence: u64 = sequence.parse().unwrap();
            if let Some(previous) = last.insert(key, sequence) {
                assert!(
                    previous < sequence,
                    "partition {partition}: key {key} out of order ({previous} then {sequence})"
                );
            }
        }
    }
}
