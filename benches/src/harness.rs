//! What every process-level benchmark does around its measurement: start a local cluster of
//! real processes with a given effective configuration, wait for its brokers, find which
//! broker owns a streamlet, wait until a stream serves again, read the coordinator's admin
//! pages.

use std::path::Path;

use std::time::{Duration, Instant};
use tailstream_client::{Client, CoordinatorClient, RecoverySummary};
use tailstream_config::Config;
use tailstream_launcher::{ClusterSpec, LocalCluster, Ports};
use tailstream_wire::ServerId;
use tailstream_wire::messages::PlacementState;

/// A scratch directory for a benchmark's cluster, removed afterwards unless the run failed or
/// `TAILSTREAM_KEEP_BENCH_DATA` is set (then its path, with every process's log, is printed).
#[derive(Debug)]
pub struct BenchDir {
    dir: Option<tempfile::TempDir>,
}

impl BenchDir {
    pub fn new(prefix: &str) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .map_err(|e| e.to_string())?;
        Ok(Self { dir: Some(dir) })
    }

    pub fn path(&self) -> &Path {
        // Invariant: `dir` is only taken by `finish`, which consumes self.
        self.dir.as_ref().expect("taken only by finish").path()
    }

    /// Removes the directory, or keeps it (saying where) when `failed` or asked to.
    pub fn finish(mut self, failed: bool) {
        let keep = failed || std::env::var_os("TAILSTREAM_KEEP_BENCH_DATA").is_some();
        if let Some(dir) = self.dir.take()
            && keep
        {
            eprintln!("cluster data and logs kept in {}", dir.keep().display());
        }
    }
}

/// A benchmark's cluster: one it started (in a scratch directory) or one it joined.
#[derive(Debug)]
pub struct BenchCluster {
    pub local: Option<LocalCluster>,
    pub coordinator: String,
    dir: BenchDir,
}

impl BenchCluster {
    /// Joins the coordinator at `join`, or starts `brokers` brokers running `config` with
    /// replication in `mode` ("rpc" or "one-sided").
    pub async fn start_or_join(
        config: &Config,
        join: Option<String>,
        mode: &str,
        brokers: u32,
    ) -> Result<Self, String> {
        let dir = BenchDir::new("tailstream-bench-")?;
        let (local, coordinator) = match join {
            Some(addr) => (None, addr),
            None => {
                // The effective config (embedded default + the user's file) with the
                // replication mode asked for, written whole for the children.
                let mut effective = config.clone();
                effective.replication.mode = match mode {
                    "rpc" => tailstream_config::ReplicationMode::Rpc,
                    _ => tailstream_config::ReplicationMode::OneSided,
                };
                // Benchmarks measure the broker, not the per-principal quotas that would cap
                // one client's rate (every benchmark producer shares one client id).
                effective.kafka.quota_produce_bytes_per_second = 0;
                effective.kafka.quota_fetch_bytes_per_second = 0;
                effective.kafka.decompressed_bytes_per_second_per_connection = 0;
                effective.broker.quota_produce_bytes_per_second = 0;
                effective.broker.quota_fetch_bytes_per_second = 0;
                let cluster =
                    start_cluster(None, &effective, dir.path(), brokers, &log_filter("warn"))
                        .await?;
                let addr = cluster.coordinator_addr().to_string();
                (Some(cluster), addr)
            }
        };
        Ok(Self {
            local,
            coordinator,
            dir,
        })
    }

    /// Stops what it started; keeps the data and logs when `failed` (or asked to).
    pub async fn finish(self, failed: bool) {
        if let Some(cluster) = self.local {
            cluster.stop().await;
        }
        self.dir.finish(failed);
    }
}

/// The children's log filter: `TAILSTREAM_BENCH_LOG` (e.g. `info`), else `default`.
pub fn log_filter(default: &str) -> String {
    std::env::var("TAILSTREAM_BENCH_LOG").unwrap_or_else(|_| default.to_string())
}

/// Starts `brokers` brokers and a coordinator on 127.0.0.1 (kernel-chosen ports) under
/// `data_dir`, every child running `config` (written whole to `data_dir/bench.toml`). The
/// children run `binary`, or this executable (the `tailstream` CLI) when `None`.
pub async fn start_cluster(
    binary: Option<&Path>,
    config: &Config,
    data_dir: &Path,
    brokers: u32,
    log_filter: &str,
) -> Result<LocalCluster, String> {
    start_cluster_with(binary, config, data_dir, brokers, log_filter, false).await
}

/// [`start_cluster`]; with `own_addresses`, each process on a loopback address of its own
/// (see `ClusterSpec::own_addresses`), so that partitions can be cut between them.
pub async fn start_cluster_with(
    binary: Option<&Path>,
    config: &Config,
    data_dir: &Path,
    brokers: u32,
    log_filter: &str,
    own_addresses: bool,
) -> Result<LocalCluster, String> {
    let text = toml::to_string(config).map_err(|e| e.to_string())?;
    let config_file = data_dir.join("bench.toml");
    std::fs::write(&config_file, text).map_err(|e| e.to_string())?;
    let spec = ClusterSpec {
        binary: match binary {
            Some(binary) => binary.to_path_buf(),
            None => std::env::current_exe().map_err(|e| e.to_string())?,
        },
        data_dir: data_dir.to_path_buf(),
        brokers,
        ports: Ports::Ephemeral,
        config_file: Some(config_file),
        log_filter: log_filter.into(),
        own_addresses,
        etcd: None,
        tls_dir: None,
    };
    LocalCluster::start(spec).await
}

/// A client of `coordinator` with `config`'s client settings.
pub fn client(config: &Config, coordinator: &str) -> Client {
    Client::builder(coordinator).from_config(config).build()
}

/// `count` consumers of `stream` from its beginning, consumer i reading every `count`-th log
/// starting at the i-th.
pub async fn consumers(
    client: &Client,
    stream: &str,
    count: u32,
) -> Result<Vec<tailstream_client::Consumer>, String> {
    let mut consumers = Vec::new();
    for member in 0..count {
        let consumer = client
            .consumer(stream)
            .from_beginning()
            .member(member, count)
            .build()
            .await
            .map_err(|e| format!("consumer: {e}"))?;
        consumers.push(consumer);
    }
    Ok(consumers)
}

/// Waits (at most 20 s) until the coordinator counts `brokers` live brokers.
pub async fn wait_for_brokers(cluster: &CoordinatorClient, brokers: u32) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let alive = cluster
            .list_brokers()
            .await
            .map(|b| b.iter().filter(|b| b.alive).count())
            .unwrap_or(0);
        if alive >= brokers as usize {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {alive} of {brokers} brokers alive"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The index of the broker of `local` that owns `streamlet` of `stream` now.
pub async fn owner_of(
    cluster: &CoordinatorClient,
    local: &LocalCluster,
    stream: &str,
    streamlet: usize,
) -> Result<usize, String> {
    let metadata = cluster
        .refresh_stream(stream)
        .await
        .map_err(|e| e.to_string())?;
    let owner = &metadata
        .streamlets
        .get(streamlet)
        .ok_or("no such streamlet")?
        .owner_addr;
    (0..local.spec().brokers as usize)
        .find(|i| {
            local
                .broker(*i)
                .is_some_and(|b| b.rpc_addr.to_string() == *owner)
        })
        .ok_or_else(|| format!("streamlet {streamlet} is owned by {owner}, no running broker"))
}

/// Waits until every streamlet of `stream` serves on an owner other than the `gone` ones,
/// polling every `poll`; fails after `timeout` naming the streamlets that do not.
pub async fn wait_until_serving(
    cluster: &CoordinatorClient,
    stream: &str,
    gone: &[ServerId],
    poll: Duration,
    timeout: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if let Ok(metadata) = cluster.refresh_stream(stream).await {
            let not_serving: Vec<String> = metadata
                .streamlets
                .iter()
                .enumerate()
                .filter(|(_, p)| p.state != PlacementState::Serving || gone.contains(&p.owner))
                .map(|(i, p)| format!("streamlet-{i} {:?} on {} {}", p.state, p.owner, p.detail))
                .collect();
            if not_serving.is_empty() {
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(format!(
                    "not serving after {timeout:?}: {}",
                    not_serving.join("; ")
                ));
            }
        } else if started.elapsed() > timeout {
            return Err(format!("the coordinator did not answer for {timeout:?}"));
        }
        tokio::time::sleep(poll).await;
    }
}

/// Waits (at most `timeout`) until every streamlet of `stream` serves with every log back to
/// R complete copies, as the owners report them. A streamlet serves again as soon as its
/// segments have `min_insync_replicas` copies; with R = 2 that is one, so a second failure
/// before the rest are copied can lose acknowledged records (as in Kafka, R copies survive
/// R - 1 failures at a time). Fault loops wait for this between faults.
pub async fn wait_until_replicated(
    cluster: &CoordinatorClient,
    stream: &str,
    poll: Duration,
    timeout: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if let Ok(metadata) = cluster.refresh_stream(stream).await {
            let replicas = metadata.config.replicas;
            let logs = metadata.config.logs_per_streamlet as usize;
            let short: Vec<String> = metadata
                .streamlets
                .iter()
                .enumerate()
                .filter(|(_, p)| {
                    replicas > 0
                        && (p.state != PlacementState::Serving
                            || p.replication.len() < logs
                            || p.under_replicated_logs(replicas) > 0)
                })
                .map(|(i, p)| {
                    let fewest = p.replication.iter().map(|r| r.in_sync_replicas).min();
                    format!(
                        "streamlet-{i} {:?} on {}: {} of {logs} logs reported, fewest copies {fewest:?}",
                        p.state,
                        p.owner,
                        p.replication.len()
                    )
                })
                .collect();
            if short.is_empty() {
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(format!(
                    "not back to R copies after {timeout:?}: {}",
                    short.join("; ")
                ));
            }
        } else if started.elapsed() > timeout {
            return Err(format!("the coordinator did not answer for {timeout:?}"));
        }
        tokio::time::sleep(poll).await;
    }
}

/// The server id the coordinator knows for the live broker at `rpc_addr`.
pub async fn server_at(cluster: &CoordinatorClient, rpc_addr: &str) -> Result<ServerId, String> {
    let brokers = cluster.list_brokers().await.map_err(|e| e.to_string())?;
    brokers
        .iter()
        .filter(|b| b.rpc_addr == rpc_addr && !b.crashed)
        .map(|b| b.server_id)
        .max()
        .ok_or_else(|| format!("no live broker at {rpc_addr}"))
}

/// Waits (at most `timeout`) for the finished recovery of `crashed`, as the coordinator's
/// `ListRecoveries` reports it.
pub async fn recovery_of(
    cluster: &CoordinatorClient,
    crashed: ServerId,
    timeout: Duration,
) -> Result<RecoverySummary, String> {
    let started = Instant::now();
    loop {
        let found = cluster
            .list_recoveries()
            .await
            .ok()
            .and_then(|all| all.into_iter().find(|r| r.crashed == crashed));
        match found {
            Some(record) if record.phase == "Done" => return Ok(record),
            _ if started.elapsed() > timeout => {
                return Err(format!("no finished recovery of {crashed} in {timeout:?}"));
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Milliseconds since the Unix epoch (the coordinator's recovery records use them).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
