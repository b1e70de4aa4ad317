//! Operating a cluster: the coordinator's metadata survives a kill -9, memory stays within its
//! budget (retention frees it; without retention producers get backpressure), and the admin
//! endpoints serve health, metrics and state.

use crate::common;

use common::{TEST_TIMEOUT, TestCluster, wait_until_serving};
use std::time::Duration;
use tailstream_client::ClientError;
use tailstream_wire::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_metadata_survives_a_kill_and_restart() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(2, "").await;
        let cluster = test.client();
        let created = cluster
            .create_stream("durable", 4, test.stream_config())
            .await
            .unwrap();
        let mut before = std::collections::HashSet::new();
        for _ in 0..8 {
            before.insert(cluster.coordinator().allocate_producer_id().await.unwrap());
        }
        test.cluster.restart_coordinator().await.unwrap();
        test.wait_for_brokers(2).await;
        let fresh = test.client();
        let described = fresh.describe_stream("durable").await.unwrap();
        assert_eq!(*described, *created);
        for _ in 0..8 {
            let id = fresh.coordinator().allocate_producer_id().await.unwrap();
            assert!(before.insert(id), "producer ids are never reused: {id}");
        }
        // The brokers still own their streamlets: producing works.
        let producer = fresh
            .producer("durable")
            .config(test.config.producer.clone())
            .build()
            .await
            .unwrap();
        let ack = producer.send(None, b"after restart").await.unwrap();
        ack.await.unwrap();
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_stream_keeps_its_records_retention_and_new_streamlets_after_a_restart() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(2, "").await;
        let (ok, _, err) = test
            .cli(&["stream", "create", "growing", "--streamlets", "1"], b"")
            .await;
        assert!(ok, "{err}");
        let before: String = (0..100).map(|i| format!("{i}\n")).collect();
        let (ok, _, err) = test.cli(&["produce", "growing"], before.as_bytes()).await;
        assert!(ok, "{err}");

        let alter =
            |streamlets: &'static str| ["stream", "alter", "growing", "--streamlets", streamlets];
        let (ok, out, err) = test.cli(&alter("3"), b"").await;
        assert!(ok, "{err}");
        assert!(String::from_utf8_lossy(&out).contains("streamlets=3"));
        let (ok, _, err) = test.cli(&alter("3"), b"").await;
        assert!(ok, "the same count again changes nothing: {err}");
        let (ok, _, err) = test.cli(&alter("2"), b"").await;
        assert!(!ok && err.contains("never shrinks"), "{err}");
        let (ok, _, err) = test
            .cli(
                &["stream", "alter", "growing", "--retention-ms", "86400000"],
                b"",
            )
            .await;
        assert!(ok, "{err}");

        // The growth and the retention are durable: a restarted coordinator has them, and
        // every streamlet serves.
        test.cluster.restart_coordinator().await.unwrap();
        test.wait_for_brokers(2).await;
        wait_until_serving(&test, "growing").await;
        let described = test.client().describe_stream("growing").await.unwrap();
        assert_eq!(described.streamlets.len(), 3);
        assert_eq!(described.config.retention_ms, 86_400_000);

        // A producer made now routes keys over the three; every record is read back once.
        let after: String = (100..400).map(|i| format!("{i}:{i}\n")).collect();
        let (ok, _, err) = test
            .cli(&["produce", "growing", "--key-sep", ":"], after.as_bytes())
            .await;
        assert!(ok, "{err}");
        let (ok, out, err) = test
            .cli(
                &[
                    "consume",
                    "growing",
                    "--from-beginning",
                    "--max-records",
                    "400",
                ],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        let mut read: Vec<u32> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        read.sort_unstable();
        assert!(read.iter().copied().eq(0..400), "each record once");
        let (ok, out, err) = test
            .cli(&["stream", "describe", "growing", "--json"], b"")
            .await;
        assert!(ok, "{err}");
        let described: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let streamlets = described["streamlets"].as_array().unwrap();
        let holding = streamlets
            .iter()
            .filter(|s| {
                s["logs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|log| log["records"].as_u64().unwrap_or(0) > 0)
            })
            .count();
        assert_eq!(holding, 3, "the new streamlets took records: {described:#}");
        test.stop().await;
    })
    .await
    .unwrap();
}

const SMALL_MEMORY: &str = "[broker]\nsegment_memory_bytes_max = 4194304\n";
const SMALL_MEMORY_SHORT_DELIVERY: &str = "[broker]\nsegment_memory_bytes_max = 4194304\n\
    [producer]\ndelivery_timeout_ms = 3000\nretry_backoff_ms_max = 200\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_memory_within_budget_while_producers_write_far_more() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, SMALL_MEMORY).await;
        let cluster = test.client();
        let mut stream = test.stream_config();
        stream.logs_per_streamlet = 2;
        stream.segment_size_bytes = 256 * 1024;
        stream.segments_per_group = 2;
        stream.retention_bytes = 1024 * 1024;
        cluster.create_stream("rolling", 1, stream).await.unwrap();
        let producer = cluster
            .producer("rolling")
            .config(test.config.producer.clone())
            .build()
            .await
            .unwrap();
        let value = vec![b'r'; 1000];
        let mut acks = Vec::new();
        // 20 MB through a 4 MiB budget.
        for _ in 0..20_000 {
            acks.push(producer.send(None, &value).await.unwrap());
        }
        for ack in acks {
            ack.await.unwrap();
        }
        let broker = test.cluster.broker(0).unwrap().admin_addr;
        let memory = TestCluster::http_get(broker, "/memory").await;
        let json: serde_json::Value =
            serde_json::from_str(memory.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert!(
            json["segment_memory_bytes"].as_u64().unwrap()
                <= json["segment_memory_bytes_max"].as_u64().unwrap()
        );
        let metrics = TestCluster::http_get(broker, "/metrics").await;
        assert!(
            metrics.contains("tailstream_retention_freed_bytes_total"),
            "{metrics}"
        );
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_retention_a_full_budget_answers_backpressure_until_retention_is_set() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, SMALL_MEMORY_SHORT_DELIVERY).await;
        let cluster = test.client();
        let mut stream = test.stream_config();
        stream.logs_per_streamlet = 1;
        stream.segment_size_bytes = 256 * 1024;
        // Groups of 512 KiB: retention frees whole sealed groups, so the budget must hold
        // several.
        stream.segments_per_group = 2;
        cluster.create_stream("full", 1, stream).await.unwrap();
        let producer = cluster
            .producer("full")
            .config(test.config.producer.clone())
            .build()
            .await
            .unwrap();
        let value = vec![b'f'; 1000];
        let mut acks = Vec::new();
        for _ in 0..8_000 {
            acks.push(producer.send(None, &value).await.unwrap());
        }
        let (mut acked, mut refused) = (0, 0);
        for ack in acks {
            match ack.await {
                Ok(_) => acked += 1,
                Err(ClientError::DeliveryTimeout { last_error, .. }) => {
                    assert!(
                        last_error.contains(&Status::Backpressure.to_string()),
                        "{last_error}"
                    );
                    refused += 1;
                }
                Err(other) => panic!("unexpected error {other}"),
            }
        }
        // About 4 MiB fit; the rest was refused with backpressure until its delivery timeout.
        assert!(
            acked > 2_000 && refused > 2_000,
            "acked {acked}, refused {refused}"
        );
        let metrics =
            TestCluster::http_get(test.cluster.broker(0).unwrap().admin_addr, "/metrics").await;
        assert!(
            metrics.contains("tailstream_produce_backpressure_total"),
            "{metrics}"
        );

        // Retention set now (as Kafka's IncrementalAlterConfigs sets it) reaches the owner:
        // the oldest groups are freed and the stream takes records again.
        let (ok, out, err) = test
            .cli(
                &["stream", "alter", "full", "--retention-bytes", "1048576"],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        assert!(
            String::from_utf8_lossy(&out).contains("retention_bytes=1048576"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        let described = cluster.describe_stream("full").await.unwrap();
        assert_eq!(described.config.retention_bytes, 1_048_576);
        assert_eq!(
            described.config.segment_size_bytes,
            256 * 1024,
            "the rest as it was"
        );
        let mut acks = Vec::new();
        for _ in 0..8_000 {
            acks.push(producer.send(None, &value).await.unwrap());
        }
        for ack in acks {
            ack.await.expect("retention frees room for every record");
        }
        let metrics =
            TestCluster::http_get(test.cluster.broker(0).unwrap().admin_addr, "/metrics").await;
        assert!(
            metrics.contains("tailstream_retention_freed_bytes_total"),
            "{metrics}"
        );
        let (ok, _, err) = test.cli(&["stream", "alter", "full"], b"").await;
        assert!(!ok && err.contains("say what to change"), "{err}");
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_serve_health_metrics_and_state() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(2, "").await;
        let cluster = test.client();
        cluster
            .create_stream("watched", 2, test.stream_config())
            .await
            .unwrap();
        let producer = cluster
            .producer("watched")
            .config(test.config.producer.clone())
            .build()
            .await
            .unwrap();
        for i in 0..1000 {
            producer
                .send(None, format!("{i}").as_bytes())
                .await
                .unwrap();
        }
        producer.flush().await.unwrap();
        let coordinator = test.cluster.coordinator.admin_addr;
        assert!(
            TestCluster::http_get(coordinator, "/healthz")
                .await
                .ends_with("ok\n")
        );
        let streams = TestCluster::http_get(coordinator, "/streams").await;
        assert!(streams.contains("\"watched\""), "{streams}");
        let brokers = TestCluster::http_get(coordinator, "/brokers").await;
        assert_eq!(brokers.matches("\"alive\":true").count(), 2, "{brokers}");
        // Only the brokers that own a streamlet show one: a create places streamlets on the
        // brokers alive at that moment, and on a loaded machine one may be late on a heartbeat.
        let owners: Vec<String> = cluster
            .describe_stream("watched")
            .await
            .unwrap()
            .streamlets
            .iter()
            .map(|p| p.owner_addr.clone())
            .collect();
        let mut appended = 0.0;
        let mut shown = 0;
        for broker in test.cluster.brokers() {
            assert!(
                TestCluster::http_get(broker.admin_addr, "/healthz")
                    .await
                    .ends_with("ok\n")
            );
            let metrics = TestCluster::http_get(broker.admin_addr, "/metrics").await;
            for name in [
                "tailstream_segment_memory_bytes",
                "tailstream_produce_latency_seconds_bucket",
            ] {
                assert!(metrics.contains(name), "{name} missing:\n{metrics}");
            }
            appended += metrics
                .lines()
                .find_map(|l| l.strip_prefix("tailstream_appended_records_total "))
                .map_or(0.0, |v| v.parse::<f64>().unwrap());
            let mut state = TestCluster::http_get(broker.admin_addr, "/streamlets").await;
            assert!(state.contains("assignment_version"), "{state}");
            if owners.contains(&broker.rpc_addr.to_string()) {
                // A create's push reaches an owner whose assignment is a version behind as an
                // addition it cannot apply; its next heartbeat catches it up. Until then the
                // producer may have written only the other streamlet.
                let asked = std::time::Instant::now();
                while !state.contains("committed_offset")
                    && asked.elapsed() < std::time::Duration::from_secs(10)
                {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    state = TestCluster::http_get(broker.admin_addr, "/streamlets").await;
                }
                assert!(
                    state.contains("committed_offset"),
                    "{} owns a streamlet of {owners:?}: {state}",
                    broker.rpc_addr
                );
                shown += 1;
            }
        }
        assert!(shown >= 1, "no broker showed a streamlet of {owners:?}");
        assert_eq!(appended, 1000.0);
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_stream_s_data_is_dropped_by_its_owners_and_backups() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(2, "").await;
        let client = test.client();
        let mut settings = client.stream_defaults();
        settings.replicas = 1;
        settings.segment_size_bytes = 64 * 1024;
        let stream = client
            .create_stream("doomed", 2, settings)
            .await
            .unwrap()
            .id;
        let producer = client.producer("doomed").build().await.unwrap();
        let mut acks = Vec::new();
        for i in 0..5_000 {
            acks.push(
                producer
                    .send(None, format!("r-{i}").as_bytes())
                    .await
                    .unwrap(),
            );
        }
        for ack in acks {
            ack.await.unwrap();
        }
        let held = |replicas: &[tailstream_wire::messages::ReplicaInfo]| {
            replicas
                .iter()
                .filter(|r| r.replica.stream == stream)
                .count()
        };
        let peers: Vec<String> = test
            .cluster
            .brokers()
            .map(|b| b.peer_addr.to_string())
            .collect();
        let mut before = 0;
        for peer in &peers {
            before += held(&common::list_replicas(peer).await);
        }
        assert!(before > 0, "the backups hold the stream's segments");

        let (ok, out, err) = test.cli(&["stream", "delete", "doomed"], b"").await;
        assert!(ok, "{err}");
        assert!(String::from_utf8_lossy(&out).contains("deleted stream doomed"));
        let (ok, _, err) = test.cli(&["stream", "describe", "doomed"], b"").await;
        assert!(!ok && err.contains("no stream named"), "{err}");
        let (ok, _, err) = test.cli(&["stream", "delete", "doomed"], b"").await;
        assert!(!ok && err.contains("no stream named"), "{err}");

        // Owners free its segment memory; backups drop its replicas (told by heartbeats).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let mut left = 0;
            for peer in &peers {
                left += held(&common::list_replicas(peer).await);
            }
            let mut memory = 0;
            for broker in test.cluster.brokers() {
                let body = TestCluster::http_get(broker.admin_addr, "/memory").await;
                let json: serde_json::Value =
                    serde_json::from_str(body.split("\r\n\r\n").nth(1).unwrap()).unwrap();
                memory += json["segment_memory_bytes"].as_u64().unwrap();
            }
            if left == 0 && memory == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{left} replicas and {memory} bytes of segment memory left of a deleted stream"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }

        // The name is free again: a new, empty stream.
        let again = client
            .create_stream("doomed", 1, client.stream_defaults())
            .await
            .unwrap();
        assert!(again.id > stream);
        let mut consumer = client
            .consumer("doomed")
            .from_beginning()
            .build()
            .await
            .unwrap();
        let producer = client.producer("doomed").build().await.unwrap();
        producer.send(None, b"fresh").await.unwrap().await.unwrap();
        let mut read = Vec::new();
        for _ in 0..50 {
            read.extend(
                consumer
                    .poll(std::time::Duration::from_millis(200))
                    .await
                    .unwrap(),
            );
            if !read.is_empty() {
                break;
            }
        }
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].value.as_deref(), Some(&b"fresh"[..]));
        test.stop().await;
    })
    .await
    .unwrap();
}

/// `broker kill N` takes the server index that `cluster status`, `stream describe` and Kafka
/// node ids show (the coordinator numbers brokers as they register, not as they were started),
/// and a command whose reader goes away (`| head`) ends quietly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_kill_takes_server_ids_and_a_closed_pipe_ends_a_command_quietly() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(3, "").await;
        let client = test.client();
        let brokers = client.list_brokers().await.unwrap();
        // The server whose launcher index differs from its own, if registration reordered
        // them; else any.
        let launcher_index = |rpc: &str| {
            (0..3)
                .find(|i| {
                    test.cluster
                        .broker(*i)
                        .is_some_and(|b| b.rpc_addr.to_string() == rpc)
                })
                .unwrap()
        };
        let target = brokers
            .iter()
            .find(|b| launcher_index(&b.rpc_addr) != b.server_id.index as usize)
            .unwrap_or(&brokers[1])
            .clone();
        let index = target.server_id.index.to_string();
        let data_dir = test.dir.path().to_str().unwrap().to_string();
        let (ok, out, err) = test
            .cli(&["broker", "kill", &index, "--data-dir", &data_dir], b"")
            .await;
        assert!(ok, "{err}");
        assert!(
            String::from_utf8_lossy(&out).contains(&target.server_id.to_string()),
            "{}",
            String::from_utf8_lossy(&out)
        );
        let victim = launcher_index(&target.rpc_addr);
        let mut exited = false;
        for _ in 0..100 {
            if test
                .cluster
                .exits()
                .iter()
                .any(|(_, i, _)| *i == Some(victim))
            {
                exited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(exited, "{} was not the one killed", target.server_id);
        assert_eq!(test.cluster.brokers().count(), 2, "only that one");

        // A closed pipe: `stream describe` of a wide stream (more lines than a pipe holds)
        // into a reader that takes one line and exits.
        let mut wide = test.stream_config();
        wide.logs_per_streamlet = 16;
        client.create_stream("wide", 64, wide).await.unwrap();
        let script = format!("{} stream describe wide | head -n 1", common::BINARY);
        let output = tokio::process::Command::new("bash")
            .args(["-o", "pipefail", "-c", &script])
            .env("TAILSTREAM_COORDINATOR", test.coordinator())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 1);
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Issue 21, finding 2 (in part): the coordinator keeps log heads in memory only, and a broker
/// reported a head only when it changed, so after a coordinator restart an idle log's head was
/// unknown there until the log next rolled, and a recovery in that window could not tell its
/// newest segment was missing. A broker now reports everything again on each new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_log_s_head_is_known_again_after_a_coordinator_restart() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(2, "").await;
        let cluster = test.client();
        let mut config = test.stream_config();
        config.replicas = 1;
        config.logs_per_streamlet = 1;
        cluster.create_stream("idle", 1, config).await.unwrap();
        let producer = cluster
            .producer("idle")
            .config(test.config.producer.clone())
            .build()
            .await
            .unwrap();
        producer.send(None, b"one").await.unwrap().await.unwrap();
        let known = idle_head_known(&test).await;
        assert!(known, "the head is reported while the log is written");
        test.cluster.restart_coordinator().await.unwrap();
        test.wait_for_brokers(2).await;
        // Nothing more is written: the head must come back by itself.
        let known_again = idle_head_known(&test).await;
        assert!(
            known_again,
            "an idle log's head is known again after the coordinator restarted"
        );
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Whether the coordinator's admin view shows a head segment for a log of stream "idle",
/// polled for up to 5 s.
async fn idle_head_known(test: &TestCluster) -> bool {
    for _ in 0..100 {
        let body = TestCluster::http_get(test.cluster.coordinator.admin_addr, "/streams").await;
        let streams: serde_json::Value = serde_json::from_str(http_body(&body)).unwrap();
        let known = streams["streams"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["name"] == "idle")
            .flat_map(|s| s["streamlets"].as_array().cloned().unwrap_or_default())
            .flat_map(|p| p["logs"].as_array().cloned().unwrap_or_default())
            .any(|log| log["head_segment"].is_u64());
        if known {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The body of an HTTP/1.0 response.
fn http_body(response: &str) -> &str {
    response
        .split_once("\r\n\r\n")
        .map_or(response, |(_, body)| body)
}
