//! The coordinator's web console, loaded by headless Chromium against a running cluster: the
//! page renders with no console errors and shows the brokers, a stream with its logs and
//! replica placement, and a consumer group with its lag; the coordinator exports the same as
//! metrics.
//!
//! Chromium comes from the project's install step (`.ci/install-deps.sh`); without it the test
//! is skipped, unless `TAILSTREAM_REQUIRE_CHROMIUM` is set (as `.ci/run` does), when it fails.
//! `TAILSTREAM_CONSOLE_SCREENSHOT=path.png` also saves a screenshot (how `docs/console.png`
//! is made).

use crate::common;

use common::{TEST_TIMEOUT, TestCluster};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

/// How long one Chromium run may take.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            std::process::Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(PathBuf::from);
    if found.is_none() {
        assert!(
            std::env::var_os("TAILSTREAM_REQUIRE_CHROMIUM").is_none(),
            "chromium is required (TAILSTREAM_REQUIRE_CHROMIUM) but not installed: run .ci/install-deps.sh"
        );
        eprintln!("skipped: chromium is not installed (run .ci/install-deps.sh)");
    }
    found
}

/// Runs headless Chromium on `url` with `extra` arguments; its stdout and stderr.
async fn browse(browser: &Path, profile: &Path, url: &str, extra: &[&str]) -> (String, String) {
    let mut command = Command::new(browser);
    command
        .args([
            "--headless",
            // CI runs as root, where Chromium's sandbox cannot start.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            // Virtual time waits for the page's fetches: several refreshes of the page.
            "--virtual-time-budget=7000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .kill_on_drop(true);
    let output = tokio::time::timeout(BROWSER_TIMEOUT, command.output())
        .await
        .expect("chromium finishes")
        .unwrap();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_brokers_streams_replicas_and_groups_without_errors() {
    let Some(browser) = chromium() else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(3, "").await;
        let client = test.client();
        let mut settings = client.stream_defaults();
        settings.replicas = 1;
        settings.logs_per_streamlet = 2;
        client.create_stream("clicks", 2, settings).await.unwrap();
        // Two producers: each appends to a log of its own in every streamlet.
        let producers = [
            client.producer("clicks").build().await.unwrap(),
            client.producer("clicks").build().await.unwrap(),
        ];
        let produce = |records: u32| {
            let producers = producers.clone();
            async move {
                let mut acks = Vec::new();
                for i in 0..records {
                    let producer = &producers[i as usize % 2];
                    acks.push(
                        producer
                            .send(None, format!("click {i}").as_bytes())
                            .await
                            .unwrap(),
                    );
                }
                for ack in acks {
                    ack.await.unwrap();
                }
            }
        };
        produce(4_000).await;
        // A group that has read (and committed) part of the stream: it lags.
        let mut member = client
            .consumer("clicks")
            .group("billing")
            .from_beginning()
            .build()
            .await
            .unwrap();
        let mut read = 0;
        while read == 0 {
            read += member.poll(Duration::from_secs(1)).await.unwrap().len();
        }
        member.commit().await.unwrap();
        // Records the group has not read yet.
        produce(2_000).await;

        let url = format!("http://{}/", test.cluster.coordinator.admin_addr);
        let profile = tempfile::tempdir().unwrap();
        let (dom, log) = browse(&browser, profile.path(), &url, &["--dump-dom"]).await;
        let console_errors: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("CONSOLE") || line.contains("Uncaught"))
            .collect();
        assert!(
            console_errors.is_empty(),
            "the page logged to its console: {console_errors:#?}"
        );
        assert!(
            dom.contains("data-errors=\"0\""),
            "the page shows errors: {dom}"
        );
        assert!(
            !dom.contains("data-ready=\"0\""),
            "the page never rendered: {dom}"
        );
        for broker in test.cluster.brokers() {
            let addr = broker.rpc_addr.to_string();
            assert!(dom.contains(&addr), "broker {addr} is not shown: {dom}");
        }
        let leader = test.cluster.coordinator.rpc_addr.to_string();
        assert!(
            dom.contains(&leader),
            "the leader {leader} is not shown: {dom}"
        );
        for shown in [
            "Coordinators",
            "leader",
            "clicks",
            "serving",
            "billing",
            "segment memory",
            "→ server-",
        ] {
            assert!(dom.contains(shown), "{shown:?} is not shown: {dom}");
        }
        if let Some(path) = std::env::var_os("TAILSTREAM_CONSOLE_SCREENSHOT") {
            let path = std::path::absolute(PathBuf::from(path)).unwrap();
            let screenshot = format!("--screenshot={}", path.display());
            browse(
                &browser,
                profile.path(),
                &url,
                &[&screenshot, "--window-size=1500,1100", "--hide-scrollbars"],
            )
            .await;
            assert!(path.exists(), "no screenshot at {}", path.display());
        }
        // What the console shows, the coordinator also exports.
        // The per-group series are rendered once a second: polled until they are there.
        let admin = test.cluster.coordinator.admin_addr;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut metrics = TestCluster::http_get(admin, "/metrics").await;
        while !metrics.contains("tailstream_coordinator_group_lag_records{group=\"billing\"")
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
            metrics = TestCluster::http_get(admin, "/metrics").await;
        }
        for series in [
            "tailstream_coordinator_streams 1",
            "tailstream_coordinator_streamlets 2",
            "tailstream_coordinator_streamlets_owned{server=",
            "tailstream_coordinator_rpcs_total{opcode=\"CreateStream\"}",
            "tailstream_coordinator_persist_latency_seconds_count",
            "tailstream_coordinator_group_lag_records{group=\"billing\"",
        ] {
            assert!(
                metrics.contains(series),
                "{series} is not exported: {metrics}"
            );
        }
        member.close().await.unwrap();
        test.stop().await;
    })
    .await
    .unwrap();
}
