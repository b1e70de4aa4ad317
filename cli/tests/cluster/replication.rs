//! Replication through real processes: every acked record survives, and is read exactly once
//! and in order per log, while a backup is killed with SIGKILL, with one-sided (tcp) and RPC
//! replication; a killed backup restarts holding the replicas it had.

use crate::common;

use common::load::Load;
use common::{TEST_TIMEOUT, TestCluster};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tailstream_wire::ServerId;
use tailstream_wire::messages::{ReplicaId, ReplicaState};

/// Small segments and groups, so closed segments (and their re-replication) are exercised.
fn replicated_stream(test: &TestCluster, replicas: u32) -> tailstream_wire::messages::StreamConfig {
    let mut stream = test.stream_config();
    stream.replicas = replicas;
    stream.logs_per_streamlet = 2;
    stream.segment_size_bytes = 64 * 1024;
    stream.segments_per_group = 2;
    stream
}

/// Complete (not filling, not corrupt) replicas per (primary, segment) on the live brokers.
async fn complete_copies(test: &TestCluster) -> HashMap<(ServerId, ReplicaId), usize> {
    let mut copies = HashMap::new();
    for broker in test.cluster.brokers() {
        for info in common::list_replicas(&broker.peer_addr.to_string()).await {
            if !info.filling && info.state != ReplicaState::Corrupt {
                *copies.entry((info.primary, info.replica)).or_insert(0) += 1;
            }
        }
    }
    copies
}

/// The broker that owns no streamlet of `stream`: it only acts as a backup.
async fn backup_only_broker(test: &TestCluster, stream: &str) -> usize {
    let metadata = test.client().describe_stream(stream).await.unwrap();
    (0..test.cluster.spec().brokers as usize)
        .find(|i| {
            let addr = test.cluster.broker(*i).unwrap().rpc_addr.to_string();
            !metadata.streamlets.iter().any(|p| p.owner_addr == addr)
        })
        .expect("a broker without streamlets")
}

async fn exactly_once_with_replicas(mode: &str) {
    let overrides = format!("[replication]\nmode = \"{mode}\"\n");
    let test = TestCluster::start(4, &overrides).await;
    let cluster = test.client();
    cluster
        .create_stream("replicated", 3, replicated_stream(&test, 3))
        .await
        .unwrap();
    let load = Load::start(&test, "replicated", 3);
    load.wait_for_acks(20_000).await;
    let acked = load.finish_and_check().await;
    assert!(acked >= 20_000);
    // Every segment of every log with data lives on three backups.
    let mut held = 0;
    for broker in test.cluster.brokers() {
        held += common::list_replicas(&broker.peer_addr.to_string())
            .await
            .len();
    }
    assert!(held >= 3 * 3, "only {held} replicas in the cluster");
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sided_replication_reads_back_every_acked_record_exactly_once() {
    tokio::time::timeout(TEST_TIMEOUT, exactly_once_with_replicas("one-sided"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_replication_reads_back_every_acked_record_exactly_once() {
    tokio::time::timeout(TEST_TIMEOUT, exactly_once_with_replicas("rpc"))
        .await
        .unwrap();
}

/// The scenario: 4 brokers, R = 3, load running; SIGKILL the backup-only broker. Its
/// replicas cannot be re-created anywhere else (every other broker already holds one), so
/// with `min_insync_replicas = 3` (every copy, the strict setting) commits pause until it is
/// back; restarted, it still lists every replica it held, and the load completes with every
/// acked record read exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backup_restarts_with_its_replicas_and_nothing_acked_is_lost() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Slow heartbeats widen the window in which the restarted backup is listed before
        // primaries learn of it and start re-filling its replicas.
        let mut test = TestCluster::start(
            4,
            "[broker]\nheartbeat_interval_ms = 1000\nlease_ms = 3000\n",
        )
        .await;
        let cluster = test.client();
        let mut strict = replicated_stream(&test, 3);
        strict.min_insync_replicas = 3;
        cluster.create_stream("survivor", 3, strict).await.unwrap();
        let victim = backup_only_broker(&test, "survivor").await;
        let load = Load::start(&test, "survivor", 2);
        load.wait_for_acks(15_000).await;
        let victim_addr = test.cluster.broker(victim).unwrap().peer_addr.to_string();
        let before = common::list_replicas(&victim_addr).await;
        assert!(
            before.len() >= 3,
            "the backup held {} replicas",
            before.len()
        );
        test.cluster.kill_broker(victim).await;
        let acked_at_kill = load.acked.load(Ordering::Relaxed);
        // Acks already committed before the kill may still arrive; after that, nothing can be
        // acknowledged: no other broker can take the third replica.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let stalled_at = load.acked.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(
            load.acked.load(Ordering::Relaxed),
            stalled_at,
            "acked with a backup missing"
        );
        test.cluster.restart_broker(victim).await.unwrap();
        let after = common::list_replicas(&victim_addr).await;
        for held in &before {
            let kept = after.iter().any(|a| {
                a.primary == held.primary
                    && a.replica == held.replica
                    && ((a.epoch == held.epoch && a.valid_bytes >= held.valid_bytes)
                        || (a.epoch > held.epoch && !a.filling))
            });
            assert!(
                kept,
                "replica {:?} epoch {} ({} bytes) missing after restart: {after:?}",
                held.replica, held.epoch, held.valid_bytes
            );
        }
        load.wait_for_acks(acked_at_kill + 5_000).await;
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Issue 20, case 3, with the default `min_insync_replicas` (R - 1 = 2): the same kill, and
/// the producers carry on with two copies of everything; `stream describe` says the stream is
/// under-replicated; once the broker is back, its copies are made again (a replacement filled
/// at a higher epoch) and the logs have three copies in sync again. Every acked record is read
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_backup_gone_and_none_to_replace_it_producers_carry_on_and_the_logs_heal() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(4, "").await;
        let cluster = test.client();
        cluster
            .create_stream("degraded", 3, replicated_stream(&test, 3))
            .await
            .unwrap();
        let victim = backup_only_broker(&test, "degraded").await;
        let load = Load::start(&test, "degraded", 2);
        load.wait_for_acks(5_000).await;
        test.cluster.kill_broker(victim).await;
        let acked_at_kill = load.acked.load(Ordering::Relaxed);
        load.wait_for_acks(acked_at_kill + 5_000).await;
        // The logs say they are short of a copy, and still at min_insync_replicas.
        let mut short = 0;
        for _ in 0..100 {
            let described = cluster.describe_stream("degraded").await.unwrap();
            short = described
                .streamlets
                .iter()
                .map(|p| p.under_replicated_logs(3))
                .sum::<usize>();
            if short > 0 {
                assert!(
                    described
                        .streamlets
                        .iter()
                        .all(|p| p.replication.iter().all(|log| log.in_sync_replicas >= 2))
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(short > 0, "no log said it was under-replicated");
        let (ok, out, err) = test.cli(&["cluster", "status"], b"").await;
        assert!(ok, "{err}");
        let status = String::from_utf8_lossy(&out);
        assert!(status.contains("UNDER-REPLICATED"), "{status}");
        test.cluster.restart_broker(victim).await.unwrap();
        let acked_at_restart = load.acked.load(Ordering::Relaxed);
        load.wait_for_acks(acked_at_restart + 5_000).await;
        let mut healed = false;
        for _ in 0..150 {
            let described = cluster.describe_stream("degraded").await.unwrap();
            healed = described
                .streamlets
                .iter()
                .all(|p| p.replication.len() == 2 && p.under_replicated_logs(3) == 0);
            if healed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(healed, "the logs did not get their third copy back");
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

/// With a fifth broker, losing a backup-only broker is survived without it coming back: its
/// replicas (open and closed) are re-created on the spare and the producers carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_of_a_killed_backup_are_recreated_elsewhere_and_producers_carry_on() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(5, "").await;
        let cluster = test.client();
        cluster
            .create_stream("carry-on", 3, replicated_stream(&test, 3))
            .await
            .unwrap();
        let victim = backup_only_broker(&test, "carry-on").await;
        let load = Load::start(&test, "carry-on", 2);
        load.wait_for_acks(10_000).await;
        test.cluster.kill_broker(victim).await;
        let acked_at_kill = load.acked.load(Ordering::Relaxed);
        load.wait_for_acks(acked_at_kill + 5_000).await;
        load.finish_and_check().await;
        // Eventually every segment, closed ones included, has three complete replicas again,
        // all on live brokers.
        let mut last = HashMap::new();
        for _ in 0..100 {
            last = complete_copies(&test).await;
            if !last.is_empty() && last.values().all(|copies| *copies == 3) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            !last.is_empty() && last.values().all(|copies| *copies == 3),
            "{last:?}"
        );
        let mut recreated = 0.0;
        for broker in test.cluster.brokers() {
            let metrics = TestCluster::http_get(broker.admin_addr, "/metrics").await;
            recreated += metrics
                .lines()
                .find_map(|l| l.strip_prefix("tailstream_replica_recreations_total "))
                .map_or(0.0, |v| v.parse::<f64>().unwrap());
        }
        assert!(recreated > 0.0, "no replica was re-created");
        test.stop().await;
    })
    .await
    .unwrap();
}
