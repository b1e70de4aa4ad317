//! Issue 23's TLS: a cluster with TLS on every listener, as `tailstream dev --tls` runs it.
//! Native clients, the CLI, kcat, kafka-python and confluent-kafka (SASL_SSL with SCRAM)
//! produce and consume;
//! a replicated stream survives its owner's `kill -9` (recovery runs over the mutually
//! authenticated peer listeners); the admin endpoint answers HTTPS; and what does not belong
//! is refused: plain text on any TLS port, and a client without a member's certificate on a
//! peer port (it can neither register as a broker nor look credentials up).
//!
//! A test binary of its own: the test process speaks TLS to every server (the connector is
//! set once per process), so it cannot share a binary with tests of plain clusters.

#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

mod common;

use common::hostile::produce_and_consume;
use common::kafka::{CLIENTS_PY, bootstrap, kafka_python, kcat, parse, python_with, required, run};
use common::{TEST_TIMEOUT, TestCluster, recovered_stream, wait_until_serving};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tailstream_net::tls::{self, TlsFiles};
use tailstream_net::{RpcClient, RpcClientConfig};
use tailstream_wire::Opcode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One CA and member certificate for every cluster this binary starts, and this process's
/// connector trusting it (set once: the connector is per process).
fn tls_dir() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, dir) = DIR.get_or_init(|| {
        let temp = tempfile::Builder::new()
            .prefix("tailstream-tls-")
            .tempdir()
            .unwrap();
        let dir =
            tailstream_launcher::tls::make_dev_certificates(&temp.path().join("tls"), &[]).unwrap();
        tls::set_outgoing(Some(tls::client(&ca_only(&dir)).unwrap()));
        (temp, dir)
    });
    dir
}

/// A client of the cluster's CA with no certificate of its own.
fn ca_only(dir: &Path) -> TlsFiles {
    TlsFiles {
        ca_path: dir.join("ca.pem"),
        cert_path: None,
        key_path: None,
    }
}

/// Whether a server at `addr` closes a connection that speaks plain text, without answering.
async fn refuses_plain_text(addr: std::net::SocketAddr) -> bool {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Looks like the start of any of the plain protocols: a length, then garbage.
    let _ = stream
        .write_all(&[0, 0, 0, 12, 0, 18, 0, 0, 0, 0, 0, 1])
        .await;
    let _ = stream.shutdown().await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    matches!(read, Ok(Ok(0)) | Ok(Err(_)))
}

/// A ping over TLS as a client without a certificate: whether the server at `addr` answers.
async fn answers_a_client_without_certificate(addr: &str) -> bool {
    let connector = tls::client(&ca_only(tls_dir())).unwrap();
    let Ok(stream) = tls::connect_with(addr, Some(&connector)).await else {
        return false;
    };
    let config = RpcClientConfig {
        request_timeout_ms: 3000,
        ..RpcClientConfig::default()
    };
    RpcClient::over(stream, addr, config)
        .call_parts(Opcode::Ping, vec![])
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listener_speaks_tls_and_peers_must_prove_membership() {
    let dir = tls_dir();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start_tls(3, "", dir).await;

        // Native clients over TLS, through a replicated stream.
        let client = test.client();
        let config = recovered_stream(&test);
        client.create_stream("secure", 1, config).await.unwrap();
        produce_and_consume(client.clone(), "secure", 2_000).await;

        // The CLI, given the directory ($TAILSTREAM_TLS_DIR, as `dev --tls` prints).
        let lines: String = (0..100).map(|i| format!("cli-{i}\n")).collect();
        let (ok, _, err) = test.cli(&["produce", "secure"], lines.as_bytes()).await;
        assert!(ok && err.contains("acked 100 records"), "{err}");

        // The owner dies; its backups' copies rebuild it over the peer listeners (mutual TLS).
        let owner = test.owner_of("secure", 0).await;
        test.cluster.kill_broker(owner).await;
        wait_until_serving(&test, "secure").await;
        let (ok, out, err) = test
            .cli(
                &[
                    "consume",
                    "secure",
                    "--from-beginning",
                    "--max-records",
                    "2100",
                ],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        let read = String::from_utf8_lossy(&out);
        assert_eq!(read.lines().count(), 2_100, "{err}");
        assert_eq!(read.lines().filter(|l| l.starts_with("cli-")).count(), 100);

        // The admin endpoint answers HTTPS (this process trusts the CA).
        let survivor = test.cluster.brokers().next().unwrap();
        let metrics = tailstream_admin::fetch(
            &survivor.admin_addr.to_string(),
            "/metrics",
            None,
            Duration::from_secs(5),
            1 << 22,
        )
        .await
        .unwrap();
        assert!(String::from_utf8_lossy(&metrics).contains("tailstream_"));

        // Plain text is refused on every port that speaks TLS.
        let coordinator = test.cluster.coordinators().next().unwrap();
        for addr in [
            coordinator.rpc_addr,
            coordinator.peer_addr,
            coordinator.admin_addr,
            survivor.rpc_addr,
            survivor.peer_addr,
            survivor.admin_addr,
            survivor.kafka_addr.unwrap(),
        ] {
            assert!(refuses_plain_text(addr).await, "{addr} answered plain text");
        }

        // The CLI without TLS is told so at once (not left retrying until its deadline).
        let started = std::time::Instant::now();
        let output = tokio::process::Command::new(common::BINARY)
            .args(["stream", "list"])
            .env("TAILSTREAM_COORDINATOR", test.coordinator())
            .env_remove("TAILSTREAM_TLS_DIR")
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && err.contains("TLS only"),
            "{err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        // A client that trusts the CA but holds no member certificate: the client listeners
        // answer it, the peer listeners do not.
        assert!(answers_a_client_without_certificate(&survivor.rpc_addr.to_string()).await);
        assert!(answers_a_client_without_certificate(&coordinator.rpc_addr.to_string()).await);
        assert!(!answers_a_client_without_certificate(&survivor.peer_addr.to_string()).await);
        assert!(!answers_a_client_without_certificate(&coordinator.peer_addr.to_string()).await);
        test.stop().await;
    })
    .await
    .expect("the test finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_use_sasl_ssl() {
    let (Some(kcat), Some(python)) = (
        required(kcat(), "kcat"),
        required(kafka_python(), "kafka-python"),
    ) else {
        return;
    };
    let dir = tls_dir();
    let ca = dir.join("ca.pem").to_string_lossy().into_owned();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let overrides =
            "[kafka]\nsasl_mechanisms = [\"SCRAM-SHA-512\"]\nsuper_users = [\"alice\"]\n";
        let test = TestCluster::start_tls(2, overrides, dir).await;
        let bootstrap = bootstrap(&test);
        let (ok, _, err) = test.cli(&["user", "create", "alice"], b"s3cret\n").await;
        assert!(ok, "{err}");
        let sasl_ssl = [
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            "sasl.mechanisms=SCRAM-SHA-512",
            "-X",
            "sasl.username=alice",
            "-X",
            "sasl.password=s3cret",
            "-X",
        ];
        let ca_setting = format!("ssl.ca.location={ca}");
        let mut produce: Vec<&str> = sasl_ssl.to_vec();
        produce.extend([
            ca_setting.as_str(),
            "-P",
            "-b",
            &bootstrap,
            "-t",
            "over-tls",
        ]);
        let lines: String = (0..50).map(|i| format!("kcat-{i}\n")).collect();
        run(&kcat, &produce, lines.as_bytes()).await;
        let mut consume: Vec<&str> = sasl_ssl.to_vec();
        consume.extend([
            ca_setting.as_str(),
            "-C",
            "-b",
            &bootstrap,
            "-t",
            "over-tls",
            "-o",
            "beginning",
            "-e",
            "-q",
        ]);
        let read = run(&kcat, &consume, b"").await;
        assert_eq!(read.lines().filter(|l| l.starts_with("kcat-")).count(), 50);

        // kafka-python: an idempotent, compressed producer and a group consumer, SASL_SSL.
        let script = CLIENTS_PY;
        let sasl = ["--ssl", &ca, "--sasl", "SCRAM-SHA-512", "alice", "s3cret"];
        let mut args = vec![script];
        args.extend(sasl);
        args.extend(["produce", &bootstrap, "py-tls", "200"]);
        let produced = parse(&run(&python, &args, b"").await);
        assert_eq!(produced.len(), 200);
        let mut args = vec![script];
        args.extend(sasl);
        args.extend(["consume", &bootstrap, "py-tls", "readers", "200", "10"]);
        let consumed = parse(&run(&python, &args, b"").await);
        assert_eq!(consumed.len(), 200);

        // confluent-kafka (a current librdkafka): an idempotent lz4 producer over SASL_SSL.
        if let Some(confluent) = required(python_with("confluent_kafka"), "confluent-kafka") {
            let settings = [
                "security.protocol=SASL_SSL".to_owned(),
                format!("ssl.ca.location={ca}"),
                "sasl.mechanisms=SCRAM-SHA-512".to_owned(),
                "sasl.username=alice".to_owned(),
                "sasl.password=s3cret".to_owned(),
            ];
            let mut args = vec![DELIVERY_PY];
            for setting in &settings {
                args.extend(["--set", setting.as_str()]);
            }
            args.extend(["produce", &bootstrap, "confluent-tls", "300", "0", "30000"]);
            let report = run(&confluent, &args, b"").await;
            let delivered = report.lines().filter(|l| l.starts_with("ok ")).count();
            assert_eq!(delivered, 300, "{report}");
            assert!(report.contains("unsettled 0"), "{report}");
        }

        // A Kafka client that does not speak TLS gets nothing.
        let plain = run_failing(&kcat, &["-L", "-b", &bootstrap, "-m", "3"]).await;
        assert!(!plain, "kcat without TLS listed metadata");
        test.stop().await;
    })
    .await
    .expect("the test finished in time");
}

const DELIVERY_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/delivery.py");

/// Runs `program` to its end (bounded); whether it succeeded.
async fn run_failing(program: &PathBuf, args: &[&str]) -> bool {
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(program)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("finished in time")
    .unwrap();
    output.status.success()
}
