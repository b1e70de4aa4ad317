//! Issue 23's limits per user, on native clients that authenticate: one user cannot take every
//! consumer group the coordinator allows (`coordinator.groups_per_user_max`), and a user's
//! produced and fetched bytes are held to the broker's native quotas
//! (`broker.quota_*_bytes_per_second`), which slow the client down and refuse nothing. Each
//! check can fail: the third group is made by the same user, the bytes pass the rate.

use crate::common;
use crate::native_auth::{ADMIN_TOKEN, OVERRIDES, ROOT, as_user};

use common::hostile::metric_at;
use common::{TEST_TIMEOUT, TestCluster};
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
