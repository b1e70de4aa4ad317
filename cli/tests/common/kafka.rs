//! Kafka's own clients as the tests run them: the Python in `target/kafka-venv` (kafka-python
//! and confluent-kafka, installed by `.ci/install-deps.sh`), kcat, a cluster's bootstrap list,
//! and running a client to its end.

use super::TestCluster;
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
pub async fn run(program: &PathBuf, args: &[&str], stdin: &[u8]) -> String {
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
    let output = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .expect("the client finished in time")
        .unwrap();
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
