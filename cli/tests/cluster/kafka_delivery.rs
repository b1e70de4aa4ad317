//! Issue 20 with the client that found it: librdkafka (confluent-kafka for Python, whose wheel
//! carries a current librdkafka), unmodified, against real processes.
//!
//! - Case 1: a short `message.timeout.ms` on a loaded cluster (a closed-loop benchmark, busy
//!   loops, and a partition leader paused past the timeout), so requests time out in flight
//!   and librdkafka bumps its producer epoch and sends again from sequence 0. Before the fix,
//!   the broker answered those batches as duplicates of the old epoch's and most "delivered"
//!   records were in no log.
//! - Case 3: R = 3 on four brokers, a partition leader killed mid-stream: nothing stalls past
//!   the recovery and nothing the producer was told is delivered fails to be stored; a
//!   librdkafka consumer group member reading all along (across the leader change and its
//!   leader epochs) reads every delivered record, each stored record once, in order.
//! - A transactional producer is refused at once, with an error librdkafka does not retry.
//!
//! The ledger: every record reported delivered is in the log, at the partition and offset it
//! was reported at. A record stored twice must have its copies in different producer epochs:
//! librdkafka re-sends, in its new epoch, messages whose first attempt may have been stored
//! (confluentinc/librdkafka#4953); within one epoch the broker stores a batch once.

use crate::common;

use common::kafka::{bootstrap, python_with, required, run};
use common::{TEST_TIMEOUT, TestCluster};
use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;
use tailstream_client::ConsumedRecord;
use tailstream_wire::messages::StreamConfig;

const DELIVERY_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/delivery.py");

/// What the producer script reported.
#[derive(Debug, Default)]
struct Reports {
    /// value -> (partition, offset, seconds since the start). The offset is unknown (`None`)
    /// when librdkafka counts a message persisted because a later one of its partition was
    /// acknowledged (its own request timed out): the record must still be in that partition.
    delivered: HashMap<String, (u32, Option<u64>, f64)>,
    failed: Vec<(String, String)>,
    fatal: Vec<String>,
}

fn parse_reports(out: &str) -> Reports {
    let mut reports = Reports::default();
    for line in out.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[0] {
            "ok" => {
                let previous = reports.delivered.insert(
                    parts[3].to_owned(),
                    (
                        parts[1].parse().unwrap_or_else(|e| panic!("{line:?}: {e}")),
                        (parts[2] != "None")
                            .then(|| parts[2].parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))),
                        parts[4].parse().unwrap_or_else(|e| panic!("{line:?}: {e}")),
                    ),
                );
                assert!(previous.is_none(), "{} reported delivered twice", parts[3]);
            }
            "failed" => reports
                .failed
                .push((parts[1].to_owned(), parts[2].to_owned())),
            "fatal" => reports.fatal.push(line.to_owned()),
            "unsettled" => assert_eq!(parts[1], "0", "messages never settled"),
            other => panic!("unexpected line {other:?}"),
        }
    }
    reports
}

/// Every record of `stream`, read from the beginning by the native consumer until `expected`
/// records are in and nothing more comes for a while.
async fn read_stream(test: &TestCluster, stream: &str, expected: usize) -> Vec<ConsumedRecord> {
    let client = test.client();
    let mut consumer = client
        .consumer(stream)
        .from_beginning()
        .build()
        .await
        .unwrap();
    let mut records = Vec::new();
    let mut idle = 0;
    while idle < 6 {
        let polled = consumer.poll(Duration::from_millis(500)).await.unwrap();
        if polled.is_empty() && records.len() >= expected {
            idle += 1;
        } else {
            idle = 0;
        }
        records.extend(polled);
    }
    records
}

/// Until `stream` holds at least `count` records (bounded: 60 s).
async fn wait_for_records(test: &TestCluster, stream: &str, count: usize) {
    let client = test.client();
    let mut consumer = client
        .consumer(stream)
        .from_beginning()
        .build()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut seen = 0;
    while seen < count {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {seen} records in {stream} after 60 s"
        );
        seen += consumer
            .poll(Duration::from_millis(200))
            .await
            .unwrap()
            .len();
    }
}

/// Checks the ledger; returns (records stored, delivered records stored twice, epochs seen).
fn check_ledger(reports: &Reports, stored: &[ConsumedRecord], logs: u32) -> (usize, usize, usize) {
    let mut copies: HashMap<&str, Vec<&ConsumedRecord>> = HashMap::new();
    let mut epochs = HashSet::new();
    for record in stored {
        let value = std::str::from_utf8(record.value.as_deref().unwrap()).unwrap();
        copies.entry(value).or_default().push(record);
        if let Some(session) = &record.producer {
            epochs.insert((session.producer_id, session.producer_epoch));
        }
    }
    let mut twice = 0;
    for (value, (partition, offset, _)) in &reports.delivered {
        let stored_at = copies
            .get(value.as_str())
            .unwrap_or_else(|| panic!("{value} was reported delivered and is in no log"));
        let (streamlet, log) = (partition / logs, partition % logs);
        assert!(
            stored_at.iter().any(|r| r.streamlet.0 == streamlet
                && r.log.0 == log
                && offset.is_none_or(|offset| r.offset.0 == offset)),
            "{value} reported at partition {partition} offset {offset:?}, stored at {:?}",
            stored_at
                .iter()
                .map(|r| (r.streamlet, r.log, r.offset))
                .collect::<Vec<_>>()
        );
        twice += usize::from(stored_at.len() > 1);
    }
    for (value, at) in &copies {
        let sessions: HashSet<_> = at
            .iter()
            .map(|r| {
                r.producer
                    .as_ref()
                    .map(|s| (s.producer_id, s.producer_epoch))
            })
            .collect();
        assert_eq!(
            sessions.len(),
            at.len(),
            "{value} stored {} times within one producer epoch",
            at.len()
        );
    }
    (copies.len(), twice, epochs.len())
}

fn stream(test: &TestCluster, replicas: u32) -> StreamConfig {
    let mut config = test.stream_config();
    config.replicas = replicas;
    config.logs_per_streamlet = 2;
    config
}

async fn produce(
    python: &std::path::Path,
    bootstrap: &str,
    topic: &str,
    count: u32,
    rate: u32,
    message_timeout_ms: u32,
) -> tokio::task::JoinHandle<String> {
    let args: Vec<String> = [
        DELIVERY_PY,
        "produce",
        bootstrap,
        topic,
        &count.to_string(),
        &rate.to_string(),
        &message_timeout_ms.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let python = python.to_path_buf();
    tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&python, &args, b"").await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn librdkafka_timing_out_and_bumping_its_epoch_is_never_told_a_record_is_stored_that_is_not()
{
    let Some(python) = required(python_with("confluent_kafka"), "confluent-kafka") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(4, "").await;
        let bootstrap = bootstrap(&test);
        test.client()
            .create_stream("timeouts", 2, stream(&test, 2))
            .await
            .unwrap();
        // A loaded machine: a closed-loop benchmark on another replicated stream, and two
        // busy loops.
        let mut bench = test
            .cli_command(&[
                "bench",
                "produce",
                "--join",
                &test.coordinator(),
                "--producers",
                "4",
                "--replicas",
                "2",
                "--streamlets",
                "4",
                "--records",
                "1000000000",
                "--time-limit-s",
                "25",
                "--warmup-s",
                "1",
                "--no-floor",
                "--json",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed below, or when dropped if the test fails first (never through a wrapper
        // such as `timeout`, whose own death would leave the loop running).
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
        let producer = produce(&python, &bootstrap, "timeouts", 15_000, 1_000, 800).await;
        // Leaders paused past the message timeout: their requests in flight time out for sure
        // (it comes back well within its liveness timeout, so nobody declares it). Paused only
        // once the producer is well under way: on a loaded machine Python may take seconds to
        // start, and a pause before its first request times nothing out.
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Both partitions' leaders: whichever partition librdkafka's partitioner is filling
        // then, its requests time out (with one paused, a loaded CI run once had none). And
        // twice: one pause in eight timed nothing out, even so.
        let mut leaders = vec![
            test.owner_of("timeouts", 0).await,
            test.owner_of("timeouts", 1).await,
        ];
        leaders.dedup();
        for stored in [2_000, 6_000] {
            wait_for_records(&test, "timeouts", stored).await;
            for leader in &leaders {
                test.cluster.signal_broker(*leader, "STOP").unwrap();
            }
            tokio::time::sleep(Duration::from_millis(1500)).await;
            for leader in &leaders {
                test.cluster.signal_broker(*leader, "CONT").unwrap();
            }
        }
        let reports = parse_reports(&producer.await.unwrap());
        let _ = bench.kill().await;
        for spinner in &mut spinners {
            let _ = spinner.kill().await;
        }
        assert!(reports.fatal.is_empty(), "{:?}", reports.fatal);
        assert!(
            !reports.failed.is_empty(),
            "no request timed out: the test did not reach librdkafka's epoch bump"
        );
        let stored = read_stream(&test, "timeouts", reports.delivered.len()).await;
        let (records, twice, epochs) = check_ledger(&reports, &stored, 2);
        eprintln!(
            "{} delivered, {} failed (timed out), {records} stored, {twice} delivered records \
             stored twice (in two epochs), {epochs} producer epochs",
            reports.delivered.len(),
            reports.failed.len(),
        );
        assert!(epochs >= 2, "librdkafka never bumped its epoch");
        test.stop().await;
    })
    .await
    .expect("the librdkafka test finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn librdkafka_through_a_leader_crash_with_no_broker_to_spare_stalls_nothing_and_loses_nothing()
 {
    let Some(python) = required(python_with("confluent_kafka"), "confluent-kafka") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut test = TestCluster::start(4, "").await;
        let bootstrap = bootstrap(&test);
        test.client()
            .create_stream("no-spare", 4, stream(&test, 3))
            .await
            .unwrap();
        // A consumer group member reads all along, across the crash (librdkafka follows the
        // leader epochs: the new leader fences the old epoch, and its position is validated).
        let consumer = {
            let (python, bootstrap) = (python.clone(), bootstrap.clone());
            tokio::spawn(async move {
                let args = [DELIVERY_PY, "consume", &bootstrap, "no-spare", "readers", "12"];
                run(&python, &args, b"").await
            })
        };
        // 15 s of records; the leader of partitions 0 and 1 is killed 5 s in.
        let producer = produce(&python, &bootstrap, "no-spare", 15_000, 1_000, 30_000).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let victim = test.owner_of("no-spare", 0).await;
        test.cluster.kill_broker(victim).await;
        let reports = parse_reports(&producer.await.unwrap());
        assert!(reports.fatal.is_empty(), "{:?}", reports.fatal);
        assert!(
            reports.failed.is_empty(),
            "records not delivered within 30 s: {:?}",
            &reports.failed[..reports.failed.len().min(5)]
        );
        // No partition's deliveries pause for long: the crashed leader's partitions serve
        // again within seconds, and the others (one of whose copies was on it) never stop.
        let mut by_partition: HashMap<u32, Vec<f64>> = HashMap::new();
        for (partition, _, at) in reports.delivered.values() {
            by_partition.entry(*partition).or_default().push(*at);
        }
        let mut longest_gap = 0.0f64;
        for times in by_partition.values_mut() {
            times.sort_by(f64::total_cmp);
            let gap = times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
            longest_gap = longest_gap.max(gap);
        }
        assert!(
            longest_gap < 8.0,
            "a partition delivered nothing for {longest_gap:.1} s: a stall past the recovery"
        );
        let stored = read_stream(&test, "no-spare", reports.delivered.len()).await;
        let (records, twice, _) = check_ledger(&reports, &stored, 2);
        // The consumer read every delivered record, each stored record once, each partition
        // in offset order (a value stored twice is read at both its offsets).
        let read = consumer.await.unwrap();
        let mut seen: HashMap<String, Vec<(u32, u64)>> = HashMap::new();
        let mut offsets_read: HashSet<(u32, u64)> = HashSet::new();
        let mut last: HashMap<u32, u64> = HashMap::new();
        for line in read.lines() {
            let parts: Vec<&str> = line.splitn(3, ' ').collect();
            assert_ne!(parts[0], "error", "the consumer saw {line}");
            let (partition, offset): (u32, u64) = (parts[0].parse().unwrap(), parts[1].parse().unwrap());
            if let Some(previous) = last.insert(partition, offset) {
                assert!(previous < offset, "partition {partition}: {previous} then {offset}");
            }
            assert!(offsets_read.insert((partition, offset)), "{line} read twice");
            seen.entry(parts[2].to_owned()).or_default().push((partition, offset));
        }
        for (value, (partition, offset, _)) in &reports.delivered {
            let Some(read_at) = seen.get(value) else {
                panic!("{value} delivered but never read by the group");
            };
            assert!(
                read_at.iter().any(|(p, o)| p == partition && offset.is_none_or(|d| d == *o)),
                "{value} delivered at {partition}/{offset:?}, read at {read_at:?}"
            );
        }
        eprintln!(
            "{} delivered, longest pause {longest_gap:.2} s, {records} stored, {twice} stored twice, {} read by the group",
            reports.delivered.len(),
            offsets_read.len()
        );
        let described = test.client().describe_stream("no-spare").await.unwrap();
        assert!(
            described
                .streamlets
                .iter()
                .any(|p| p.under_replicated_logs(3) > 0),
            "with a broker gone and none to spare, the stream is under-replicated"
        );
        test.stop().await;
    })
    .await
    .expect("the librdkafka test finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_librdkafka_producer_is_refused_at_once() {
    let Some(python) = required(python_with("confluent_kafka"), "confluent-kafka") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, "").await;
        let bootstrap = bootstrap(&test);
        let out = run(&python, &[DELIVERY_PY, "transactional", &bootstrap], b"").await;
        let parts: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(parts[0], "refused", "{out}");
        let seconds: f64 = parts[1].parse().unwrap();
        assert!(seconds < 5.0, "refused only after {seconds} s: {out}");
        assert!(
            out.contains("fatal=True") || out.contains("retriable=False"),
            "{out}"
        );
        test.stop().await;
    })
    .await
    .expect("the transactional test finished in time");
}
