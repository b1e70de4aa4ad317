//! Issue 23's limits per user, on native clients that authenticate: one user cannot take every
//! consumer group the coordinator allows (`coordinator.groups_per_user_max`), and a user's
//! produced and fetched bytes are held to the broker's native quotas
//! (`broker.quota_*_bytes_per_second`), which slow the client down and refuse nothing. Each
//! check can fail: the third group is made by the same user, the bytes pass the rate.

use crate::common;
use crate::native_auth::{ADMIN_TOKEN, OVERRIDES, ROOT, as_user};

use common::hostile::metric_at;
use common::kafka::{CLIENTS_PY, bootstrap, kafka_python, required};
use common::{TEST_TIMEOUT, TestCluster};
use std::process::Stdio;
use std::time::{Duration, Instant};

const OPS: Option<(&str, &str)> = Some(("ops", "ops-password"));
/// The native quotas under test: small enough that a few hundred KiB pass them.
const QUOTA_BYTES_PER_SECOND: usize = 128 << 10;
const RECORDS: usize = 4_000;
const RECORD_BYTES: usize = 100;

fn overrides() -> String {
    let with_ops = OVERRIDES.replace(
        "super_users = [\"root\"]",
        "super_users = [\"root\", \"ops\"]",
    );
    assert_ne!(with_ops, OVERRIDES, "the shared overrides changed shape");
    format!(
        "{with_ops}[coordinator]\ngroups_per_user_max = 2\n\
         [broker]\nquota_produce_bytes_per_second = {QUOTA_BYTES_PER_SECOND}\n\
         quota_fetch_bytes_per_second = {QUOTA_BYTES_PER_SECOND}\n"
    )
}

/// `consume clicks` in `group` as `user`, for the first `records` records or until nothing
/// came for `idle_ms`.
async fn consume_in_group(
    test: &TestCluster,
    user: Option<(&str, &str)>,
    group: &str,
    records: usize,
    idle_ms: u64,
) -> (bool, String, String) {
    let (records, idle_ms) = (records.to_string(), idle_ms.to_string());
    let args = [
        "consume",
        "clicks",
        "--from-beginning",
        "--group",
        group,
        "--max-records",
        &records,
        "--idle-timeout-ms",
        &idle_ms,
    ];
    as_user(test, user, &args, b"").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_user_takes_neither_every_group_nor_every_byte() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, &overrides()).await;
        for (name, password) in [("root", "root-password"), ("ops", "ops-password")] {
            let create = ["user", "create", name, "--password", password];
            let (ok, _, err) = as_user(&test, None, &create, b"").await;
            assert!(ok, "{err}");
        }
        let started = Instant::now();
        loop {
            let (ok, _, err) = as_user(
                &test,
                ROOT,
                &["stream", "create", "clicks", "--streamlets", "1"],
                b"",
            )
            .await;
            if ok {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{err}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Root produces 400 KiB through a 128 KiB/s quota: one second's burst, then the
        // connection is read more slowly. Every record is acknowledged all the same.
        let records: String = (0..RECORDS)
            .map(|i| format!("{i:0width$}\n", width = RECORD_BYTES - 1))
            .collect();
        let (ok, _, err) = as_user(&test, ROOT, &["produce", "clicks"], records.as_bytes()).await;
        assert!(ok, "{err}");
        let admin = test.cluster.broker(0).unwrap().admin_addr;
        let metrics = format!("/metrics?token={ADMIN_TOKEN}");
        let throttled = |kind: &'static str| {
            let metrics = metrics.clone();
            async move {
                let name = "tailstream_throttled_milliseconds_total";
                metric_at(admin, &metrics, name, &[("kind", kind)]).await
            }
        };
        let produce_throttled_ms = throttled("produce").await;
        assert!(
            produce_throttled_ms > 0.0,
            "400 KiB at 128 KiB/s went unthrottled"
        );

        // Root makes two groups, reading everything back in each; a third is refused, naming
        // the limit.
        for group in ["g1", "g2"] {
            let (ok, out, err) = consume_in_group(&test, ROOT, group, RECORDS, 10_000).await;
            assert!(ok, "{group}: {err}");
            let mut read: Vec<&str> = out.lines().collect();
            read.sort();
            read.dedup();
            assert_eq!(read.len(), RECORDS, "{group}: every record, once");
        }
        assert!(throttled("fetch").await > 0.0, "fetches went unthrottled");
        let (ok, _, err) = consume_in_group(&test, ROOT, "g3", 1, 10_000).await;
        assert!(!ok && err.contains("groups_per_user_max"), "{err}");

        // Another user is not held by root's count, and may use root's groups (g1 is read to
        // its end: the consumer stops once idle).
        for group in ["g3", "g1"] {
            let (ok, _, err) = consume_in_group(&test, OPS, group, 1, 2_000).await;
            assert!(ok, "ops in {group}: {err}");
        }
        test.stop().await;
    })
    .await
    .expect("test timed out");
}

/// `clients.py ARGS` authenticated as `user` (SCRAM-SHA-256): (success, stdout, stderr).
async fn kafka_python_as(
    python: &std::path::Path,
    user: (&str, &str),
    args: &[&str],
) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(python);
    command
        .arg(CLIENTS_PY)
        .args(["--sasl", "SCRAM-SHA-256", user.0, user.1])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the client finished in 60 s")
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The same limit for Kafka clients, whose group calls their broker forwards to the
/// coordinator naming the client's user: a user's second group is refused with Kafka's
/// GROUP_MAX_SIZE_REACHED (the client reports it and stops), another user's is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_users_groups_are_counted_against_that_user() {
    let Some(python) = required(kafka_python(), "kafka-python") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let overrides = "[kafka]\nsasl_mechanisms = [\"SCRAM-SHA-256\"]\n\
                         super_users = [\"admin\", \"ops\"]\n\
                         [coordinator]\ngroups_per_user_max = 1\n";
        let test = TestCluster::start(1, overrides).await;
        let bootstrap = bootstrap(&test);
        let (admin, ops) = (("admin", "adm1n"), ("ops", "0ps"));
        for (user, password) in [admin, ops] {
            let create = ["user", "create", user, "--password", password];
            let (ok, _, err) = test.cli(&create, b"").await;
            assert!(ok, "{err}");
        }
        let produce = ["produce", bootstrap.as_str(), "clicks", "20"];
        let (ok, _, err) = kafka_python_as(&python, admin, &produce).await;
        assert!(ok, "{err}");
        let consume = |user, group| {
            let args = ["consume", bootstrap.as_str(), "clicks", group, "20", "5"];
            let python = python.clone();
            async move { kafka_python_as(&python, user, &args).await }
        };
        let (ok, out, err) = consume(admin, "first").await;
        assert!(ok, "{err}");
        assert_eq!(out.lines().count(), 20, "{err}");
        let (ok, _, err) = consume(admin, "second").await;
        assert!(
            !ok && err.contains("GroupMaxSizeReached"),
            "admin's second group: {err}"
        );
        let (ok, out, err) = consume(ops, "second").await;
        assert!(ok, "{err}");
        assert_eq!(out.lines().count(), 20, "{err}");
        test.stop().await;
    })
    .await
    .expect("test timed out");
}
