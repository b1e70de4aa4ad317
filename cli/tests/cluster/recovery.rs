//! Crash recovery through real processes on 127.0.0.1: 5 brokers, R = 2, producers and a
//! consumer running; the owner of a streamlet is killed with SIGKILL (alone, with one of its
//! backups, during another recovery, with the coordinator killed mid-recovery, or paused as a
//! zombie), and every acknowledged record must be read back exactly once, in per-log order.

use crate::common;

use common::load::Load;
use common::{TEST_TIMEOUT, TestCluster, recovered_stream, wait_until_serving};
use std::time::{Duration, Instant};
use tailstream_wire::ServerId;
use tailstream_wire::messages::PlacementState;

/// The coordinator's `/recoveries`.
async fn recoveries(test: &TestCluster) -> serde_json::Value {
    let response = TestCluster::http_get(test.cluster.coordinator.admin_addr, "/recoveries").await;
    let body = response.split("\r\n\r\n").nth(1).unwrap();
    serde_json::from_str(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_s_streamlets_are_rebuilt_and_nothing_acked_is_lost() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(5, "").await;
        test.client()
            .create_stream("survive", 4, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "survive", 2);
        load.wait_for_acks(60_000).await;
        let victim = test.owner_of("survive", 0).await;
        test.cluster.kill_broker(victim).await;
        let took = wait_until_serving(&test, "survive").await;
        eprintln!("serving again {took:?} after the kill");
        let acked = load.finish_and_check().await;
        assert!(acked > 60_000);
        let recoveries = recoveries(&test).await;
        eprintln!("{recoveries:#}");
        let done = recoveries["recoveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["streamlets"].as_array().is_some_and(|s| !s.is_empty()))
            .expect("a recovery of the victim's streamlets");
        assert_eq!(done["phase"], "Done");
        assert!(done["bytes"].as_u64().unwrap() > 0, "{done}");
        // The CLI shows the same recovery with its phase times.
        let (ok, out, err) = test.cli(&["cluster", "status", "--json"], b"").await;
        assert!(ok, "{err}");
        let status: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let shown = status["recoveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == done["id"])
            .expect("cluster status lists the recovery");
        assert_eq!(shown["phase"], "Done", "{shown}");
        assert_eq!(shown["total_ms"], done["total_ms"], "{shown}");
        let (ok, out, _) = test.cli(&["cluster", "status"], b"").await;
        assert!(ok);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains("recent recoveries") && text.contains("Done"),
            "{text}"
        );
        test.stop().await;
    })
    .await
    .unwrap();
}

/// The broker index whose incarnation is `server`.
fn index_of(server: ServerId) -> usize {
    server.index as usize
}

/// The broker index the metadata names as the owner of `streamlet`, whatever its state.
async fn owner_of_any(test: &TestCluster, stream: &str, streamlet: usize) -> usize {
    let metadata = test.client().describe_stream(stream).await.unwrap();
    index_of(metadata.streamlets[streamlet].owner)
}

/// Brokers holding a replica written by `primary` (its backups).
async fn backups_of(test: &TestCluster, primary: usize) -> Vec<usize> {
    let mut backups = Vec::new();
    for i in 0..test.cluster.spec().brokers as usize {
        if i == primary {
            continue;
        }
        let Some(broker) = test.cluster.broker(i) else {
            continue;
        };
        if common::list_replicas(&broker.peer_addr.to_string())
            .await
            .iter()
            .any(|r| r.primary.index as usize == primary)
        {
            backups.push(i);
        }
    }
    backups
}

/// Waits until `streamlet` of `stream` is being rebuilt; returns its new owner's index.
async fn rebuilding_on(test: &TestCluster, stream: &str, streamlet: usize) -> Option<usize> {
    let started = Instant::now();
    let cluster = test.client();
    while started.elapsed() < Duration::from_secs(10) {
        let metadata = cluster.describe_stream(stream).await.unwrap();
        let placement = &metadata.streamlets[streamlet];
        if placement.state == PlacementState::Recovering && placement.detail.contains("rebuilt on")
        {
            return Some(index_of(placement.owner));
        }
        if placement.state == PlacementState::Serving && started.elapsed() > Duration::from_secs(1)
        {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_with_one_of_its_backups_loses_nothing_acked() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(5, "").await;
        test.client()
            .create_stream("pair", 4, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "pair", 2);
        load.wait_for_acks(60_000).await;
        let owner = test.owner_of("pair", 1).await;
        let backup = backups_of(&test, owner).await[0];
        // Together: R = 2 leaves one copy of each of the owner's segments.
        test.cluster.kill_broker(owner).await;
        test.cluster.kill_broker(backup).await;
        wait_until_serving(&test, "pair").await;
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_owner_killed_while_it_rebuilds_loses_nothing_acked() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(5, "").await;
        test.client()
            .create_stream("twice", 4, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "twice", 2);
        load.wait_for_acks(60_000).await;
        let first = test.owner_of("twice", 0).await;
        test.cluster.kill_broker(first).await;
        // The broker rebuilding the first victim's streamlet dies in turn: its own streamlets
        // and the one it was rebuilding both go to recovery.
        if let Some(second) = rebuilding_on(&test, "twice", 0).await {
            test.cluster.kill_broker(second).await;
        } else {
            let other = (0..5).find(|i| *i != first).unwrap();
            test.cluster.kill_broker(other).await;
        }
        wait_until_serving(&test, "twice").await;
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_during_a_recovery_resumes_it() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(5, "").await;
        test.client()
            .create_stream("resume", 4, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "resume", 2);
        load.wait_for_acks(60_000).await;
        let victim = test.owner_of("resume", 2).await;
        test.cluster.kill_broker(victim).await;
        rebuilding_on(&test, "resume", 2).await;
        test.cluster.restart_coordinator().await.unwrap();
        wait_until_serving(&test, "resume").await;
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_that_wakes_up_serves_nothing_that_moved() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(5, "").await;
        test.client()
            .create_stream("zombie", 4, recovered_stream(&test))
            .await
            .unwrap();
        let load = Load::start(&test, "zombie", 2);
        load.wait_for_acks(60_000).await;
        let zombie = test.owner_of("zombie", 3).await;
        test.cluster.signal_broker(zombie, "STOP").unwrap();
        // Declared crashed and recovered elsewhere while it sleeps...
        let moved = Instant::now();
        while owner_of_any(&test, "zombie", 3).await == zombie {
            assert!(
                moved.elapsed() < Duration::from_secs(20),
                "never declared crashed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wait_until_serving(&test, "zombie").await;
        // ...it wakes up holding streamlets that moved: it must serve none of them, and
        // registers again as a new, empty incarnation.
        test.cluster.signal_broker(zombie, "CONT").unwrap();
        let rejoined = Instant::now();
        loop {
            let brokers = test.client().list_brokers().await.unwrap();
            let back = brokers.iter().any(|b| {
                b.server_id.index as usize == zombie && b.server_id.generation > 1 && b.alive
            });
            if back {
                break;
            }
            assert!(
                rejoined.elapsed() < Duration::from_secs(20),
                "the zombie never re-registered"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        load.finish_and_check().await;
        test.stop().await;
    })
    .await
    .unwrap();
}

/// `tailstream bench chaos`, a few cycles: one of each fault (the bag draws every kind once per
/// five cycles), random streamlets and moments, and the exactly-once ledger must be clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_chaos_meets_every_fault_once_and_loses_and_duplicates_nothing() {
    use tailstream_bench::chaos::{ChaosBenchArgs, faults::FaultKind, measure};
    let mut args = ChaosBenchArgs::defaults();
    args.cycles = 5;
    args.seed = 11;
    args.max_delay_ms = 300;
    args.recovery_timeout_ms = 30_000;
    args.records_per_second = 1000;
    args.binary = Some(common::BINARY.into());
    let report = tokio::time::timeout(
        TEST_TIMEOUT,
        measure(tailstream_config::Config::embedded(), &args),
    )
    .await
    .expect("bounded")
    .expect("every cycle recovered");
    let verdict = &report.verdict;
    eprintln!("{verdict:?}");
    assert!(verdict.is_clean(), "{verdict:?}");
    assert!(verdict.acked > 1000, "{verdict:?}");
    let mut kinds: Vec<FaultKind> = report.cycle_reports.iter().map(|c| c.fault).collect();
    kinds.sort_by_key(|k| format!("{k:?}"));
    kinds.dedup();
    assert_eq!(kinds.len(), 5, "one of each: {kinds:?}");
}

/// `tailstream bench chaos` with network partitions: the owner cut off from the coordinator,
/// from its backups, a backup cut off, and the coordinator cut off from half the brokers, each
/// once, every cut healed after; the exactly-once ledger must be clean. The run makes its own
/// user and network namespace (`unshare`) and cuts with nftables there: without them the test
/// is skipped, unless `TAILSTREAM_REQUIRE_PARTITIONS` is set (as `.ci/run` does).
#[test]
fn bench_chaos_partitions_lose_and_duplicate_nothing() {
    use std::os::unix::process::CommandExt;
    let probe = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--", "sh", "-c"])
        .arg("ip link set lo up && nft list ruleset")
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        let why = match &probe {
            Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_string(),
            Err(error) => error.to_string(),
        };
        assert!(
            std::env::var_os("TAILSTREAM_REQUIRE_PARTITIONS").is_none(),
            "partitions are required (TAILSTREAM_REQUIRE_PARTITIONS) but cannot be cut here ({why}): run .ci/install-deps.sh"
        );
        eprintln!(
            "skipped: cannot cut partitions here (unshare, ip, nft: {why}); run .ci/install-deps.sh"
        );
        return;
    }
    let kinds = [
        "owner-cut-from-coordinator",
        "owner-cut-from-brokers",
        "backup-cut-off",
        "coordinator-cut-from-half",
    ];
    // A backup cut off is given up on after 3 s (10 s by default), so the cut outlasts it.
    let dir = tempfile::tempdir().expect("a scratch directory");
    let config = dir.path().join("partitions.toml");
    std::fs::write(&config, "[replication]\nwrite_timeout_ms = 3000\n").expect("config");
    let mut child = std::process::Command::new(common::BINARY)
        .arg("--config")
        .arg(&config)
        .args(["bench", "chaos", "--json", "--cycles", "4", "--seed", "3"])
        .args(["--max-delay-ms", "300", "--recovery-timeout-ms", "30000"])
        .args(["--records-per-second", "1000", "--faults", &kinds.join(",")])
        .stdout(std::process::Stdio::piped())
        // A group of its own, so a run that overstays is killed whole (the re-run in its
        // namespace and the cluster included).
        .process_group(0)
        .spawn()
        .expect("the tailstream binary starts");
    // Bounded: the run is killed if it outlives the test's budget.
    let deadline = Instant::now() + TEST_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the run") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            panic!("bench chaos with partitions did not finish in {TEST_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut stdout)
        .expect("reading the report");
    assert!(status.success(), "bench chaos failed ({status}): {stdout}");
    let report: serde_json::Value = stdout
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .expect("a JSON report");
    let verdict = &report["verdict"];
    eprintln!("{verdict}");
    for field in ["lost", "duplicated", "out_of_order", "misplaced", "unknown"] {
        assert_eq!(verdict[field], 0, "{field}: {verdict}");
    }
    assert!(verdict["acked"].as_u64().unwrap_or(0) > 1000, "{verdict}");
    let mut met: Vec<&str> = report["cycle_reports"]
        .as_array()
        .expect("cycles")
        .iter()
        .filter_map(|c| c["fault"].as_str())
        .collect();
    met.sort_unstable();
    let mut expected = kinds.to_vec();
    expected.sort_unstable();
    assert_eq!(met, expected, "one of each partition");
}

/// Issue 20, case 3: R = 3 on four brokers leaves no broker to spare. Killing an owner must
/// not stall anything: its streamlet is rebuilt with the copies that can be had (serving once
/// it has `min_insync_replicas` of them), every other streamlet that had a copy on it keeps
/// acknowledging with the two it has left, all say they are under-replicated, and every
/// acknowledged record is read back exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_with_no_broker_to_spare_stalls_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(4, "").await;
        let mut config = recovered_stream(&test);
        config.replicas = 3;
        test.client()
            .create_stream("no-spare", 4, config)
            .await
            .unwrap();
        let load = Load::start(&test, "no-spare", 2);
        load.wait_for_acks(20_000).await;
        let victim = test.owner_of("no-spare", 0).await;
        test.cluster.kill_broker(victim).await;
        let killed_at = Instant::now();
        let acked_at_kill = load.acked.load(std::sync::atomic::Ordering::Relaxed);
        let took = wait_until_serving(&test, "no-spare").await;
        eprintln!("serving again {took:?} after the kill");
        assert!(
            took < Duration::from_secs(10),
            "the crashed owner's streamlet took {took:?} to serve again"
        );
        load.wait_for_acks(acked_at_kill + 20_000).await;
        eprintln!("20000 more acks {:?} after the kill", killed_at.elapsed());
        let described = test.client().describe_stream("no-spare").await.unwrap();
        let short: usize = described
            .streamlets
            .iter()
            .map(|p| p.under_replicated_logs(3))
            .sum();
        assert!(
            short > 0,
            "nothing said it was under-replicated: {described:?}"
        );
        let acked = load.finish_and_check().await;
        assert!(acked > acked_at_kill as usize);
        test.stop().await;
    })
    .await
    .unwrap();
}

/// Issue 21, finding 2: a log's head is saved at the coordinator before any record in it is
/// acknowledged. Here the only copy of a log (one open segment, R = 1) is on a backup killed
/// with its owner, and the coordinator restarts in between, so it has no head in memory: it
/// used to find no segment on the live backups, take the log as empty, and serve it with no
/// word. Now the streamlet is lost (saying what is missing) until that backup returns, and
/// then it serves every acknowledged record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_whose_only_copy_is_away_is_lost_until_it_returns_never_served_empty() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(4, "").await;
        let cluster = test.client();
        let mut config = test.stream_config();
        config.replicas = 1;
        config.logs_per_streamlet = 1;
        cluster.create_stream("only", 1, config).await.unwrap();
        let producer = cluster
            .producer("only")
            .config(test.config.producer.clone())
            .build()
            .await
            .unwrap();
        let records = 200;
        let mut acks = Vec::new();
        for i in 0..records {
            let value = format!("only-{i}");
            acks.push(producer.send(None, value.as_bytes()).await.unwrap());
        }
        producer.flush().await.unwrap();
        for ack in acks {
            ack.await.unwrap();
        }
        drop(producer);
        let owner = test.owner_of("only", 0).await;
        // The one segment with records (the next one is reserved, and empty, elsewhere).
        let mut holders = Vec::new();
        for i in (0..4).filter(|i| *i != owner) {
            let peer = test.cluster.broker(i).unwrap().peer_addr.to_string();
            let replicas = common::list_replicas(&peer).await;
            if replicas.iter().any(|r| r.valid_bytes > 0) {
                holders.push(i);
            }
        }
        assert_eq!(holders.len(), 1, "one segment, one copy: {holders:?}");
        let holder = holders[0];
        test.cluster.kill_broker(owner).await;
        test.cluster.kill_broker(holder).await;
        test.cluster.restart_coordinator().await.unwrap();
        // Recovery runs once both are declared crashed; the live backups hold nothing of it.
        let started = Instant::now();
        let placement = loop {
            let metadata = cluster.describe_stream("only").await;
            if let Ok(metadata) = metadata {
                let placement = metadata.streamlets[0].clone();
                let moved = index_of(placement.owner) != owner;
                if placement.state == PlacementState::Lost
                    || (placement.state == PlacementState::Serving && moved)
                {
                    break placement;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no recovery decision after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            placement.state,
            PlacementState::Lost,
            "served while its only copy is away: {placement:?}"
        );
        assert!(
            placement.detail.contains("no segment"),
            "{}",
            placement.detail
        );
        // The backup returns (a new incarnation with the same files): the log is whole again.
        test.cluster.restart_broker(holder).await.unwrap();
        wait_until_serving(&test, "only").await;
        let mut consumer = cluster
            .consumer("only")
            .config(test.config.consumer.clone())
            .from_beginning()
            .build()
            .await
            .unwrap();
        let mut values = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while values.len() < records {
            assert!(
                Instant::now() < deadline,
                "read {} of {records}",
                values.len()
            );
            for record in consumer.poll(Duration::from_millis(200)).await.unwrap() {
                values.push(
                    String::from_utf8_lossy(record.value.as_deref().unwrap_or_default())
                        .into_owned(),
                );
            }
        }
        let expected: Vec<String> = (0..records).map(|i| format!("only-{i}")).collect();
        assert_eq!(
            values, expected,
            "every acknowledged record, once, in order"
        );
        test.stop().await;
    })
    .await
    .unwrap();
}
