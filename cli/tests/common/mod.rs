//! Shared harness for the process-level tests: real coordinator and broker processes of the
//! `tailstream` binary under test, on 127.0.0.1 with kernel-chosen ports, in a temp dir.

#![allow(dead_code, clippy::unwrap_used)] // each test binary uses a subset; tests may unwrap

pub mod hostile;
pub mod kafka;
pub mod ledger;
pub mod load;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;
use tailstream_client::Client;
use tailstream_config::Config;
use tailstream_launcher::etcd::EtcdCluster;
use tailstream_launcher::{ClusterSpec, EtcdSpec, LocalCluster, Ports};
use tailstream_wire::messages::{PlacementState, StreamConfig};

pub const BINARY: &str = env!("CARGO_BIN_EXE_tailstream");

/// Every test is bounded: a hang fails the test instead of the CI job.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(180);

pub struct TestCluster {
    pub cluster: LocalCluster,
    /// The local etcd the coordinators keep their state on, when they do.
    pub etcd: Option<EtcdCluster>,
    pub config: Config,
    pub dir: tempfile::TempDir,
    config_file: Option<PathBuf>,
    /// TLS everywhere, with this directory's CA and certificate (see [`Self::start_tls`]).
    pub tls_dir: Option<PathBuf>,
}

impl TestCluster {
    /// `brokers` brokers; `overrides` is TOML overlaid on the embedded config for every process
    /// and for the test's own clients.
    pub async fn start(brokers: u32, overrides: &str) -> TestCluster {
        Self::start_with(brokers, overrides, 0).await
    }

    /// [`Self::start`] with `coordinators` coordinators on a local three-member etcd (0: one
    /// coordinator on its file store). `None` when etcd is not installed (the test says so
    /// and passes, unless `TAILSTREAM_REQUIRE_ETCD` is set).
    pub async fn start_on_etcd(
        brokers: u32,
        overrides: &str,
        coordinators: usize,
    ) -> Option<TestCluster> {
        if !tailstream_launcher::etcd::etcd_installed() {
            assert!(
                std::env::var_os("TAILSTREAM_REQUIRE_ETCD").is_none(),
                "TAILSTREAM_REQUIRE_ETCD is set but etcd is not installed (.ci/install-deps.sh)"
            );
            eprintln!("skipped: etcd is not installed (.ci/install-deps.sh installs etcd-server)");
            return None;
        }
        Some(Self::start_with(brokers, overrides, coordinators.max(1)).await)
    }

    /// [`Self::start`] with TLS on every listener, with the CA and certificate in `tls_dir`.
    /// The test process must speak TLS itself (`tailstream_net::tls::set_outgoing`, once): a
    /// test binary is all TLS or none.
    pub async fn start_tls(brokers: u32, overrides: &str, tls_dir: &Path) -> TestCluster {
        Self::start_full(brokers, overrides, 0, Some(tls_dir.to_owned())).await
    }

    async fn start_with(brokers: u32, overrides: &str, etcd_coordinators: usize) -> TestCluster {
        Self::start_full(brokers, overrides, etcd_coordinators, None).await
    }

    async fn start_full(
        brokers: u32,
        overrides: &str,
        etcd_coordinators: usize,
        tls_dir: Option<PathBuf>,
    ) -> TestCluster {
        // Debugging a failure: TAILSTREAM_KEEP_TEST_DATA keeps every process's data and logs.
        let keep = std::env::var_os("TAILSTREAM_KEEP_TEST_DATA").is_some();
        let dir = tempfile::Builder::new()
            .prefix("tailstream-test-")
            .disable_cleanup(keep)
            .tempdir()
            .unwrap();
        if keep {
            eprintln!("test data in {}", dir.path().display());
        }
        let config = Config::with_overrides(overrides).unwrap();
        let config_file = if overrides.trim().is_empty() {
            None
        } else {
            let path = dir.path().join("config.toml");
            std::fs::write(&path, overrides).unwrap();
            Some(path)
        };
        let etcd = if etcd_coordinators > 0 {
            Some(
                EtcdCluster::start(3, &dir.path().join("etcd"))
                    .await
                    .unwrap(),
            )
        } else {
            None
        };
        let spec = ClusterSpec {
            binary: BINARY.into(),
            data_dir: dir.path().to_path_buf(),
            brokers,
            ports: Ports::Ephemeral,
            config_file: config_file.clone(),
            // Debugging a failure: TAILSTREAM_TEST_LOG sets the processes' RUST_LOG.
            log_filter: std::env::var("TAILSTREAM_TEST_LOG").unwrap_or_else(|_| "info".into()),
            own_addresses: false,
            etcd: etcd.as_ref().map(|etcd| EtcdSpec {
                endpoints: etcd.endpoints(),
                prefix: "/tailstream/test".into(),
                coordinators: etcd_coordinators,
            }),
            tls_dir: tls_dir.clone(),
        };
        let cluster = LocalCluster::start(spec).await.unwrap();
        let test = TestCluster {
            cluster,
            etcd,
            config,
            dir,
            config_file,
            tls_dir,
        };
        // Where clients must authenticate, the test waits as a user it creates first.
        if !test.config.security.client_authentication {
            test.wait_for_brokers(brokers as usize).await;
        }
        test
    }

    /// Every coordinator's client address ("a,b,c" on etcd: clients follow the leader).
    pub fn coordinator(&self) -> String {
        self.cluster.coordinator_addrs()
    }

    pub fn client(&self) -> Client {
        Client::builder(&self.coordinator())
            .from_config(&self.config)
            .build()
    }

    pub async fn wait_for_brokers(&self, brokers: usize) {
        let client = self.client();
        for _ in 0..400 {
            let alive = client
                .list_brokers()
                .await
                .map(|b| b.iter().filter(|b| b.alive).count());
            if alive.is_ok_and(|alive| alive >= brokers) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{brokers} brokers did not register");
    }

    /// Waits until the broker at `rpc_addr` is registered again as a new, live incarnation
    /// (generation above `previous`). Until then the coordinator still counts the killed one
    /// as alive and may place new streamlets on it, which are then lost with it.
    pub async fn wait_for_new_incarnation(&self, rpc_addr: &str, previous: u32) {
        let client = self.client();
        for _ in 0..400 {
            let registered = client.list_brokers().await.is_ok_and(|brokers| {
                brokers
                    .iter()
                    .any(|b| b.rpc_addr == rpc_addr && b.alive && b.server_id.generation > previous)
            });
            if registered {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the broker at {rpc_addr} did not register again");
    }

    /// The broker index (in the launcher) that owns `streamlet` of `stream`.
    pub async fn owner_of(&self, stream: &str, streamlet: usize) -> usize {
        let metadata = self.client().describe_stream(stream).await.unwrap();
        let owner = &metadata.streamlets[streamlet].owner_addr;
        (0..self.cluster.spec().brokers as usize)
            .find(|i| {
                self.cluster
                    .broker(*i)
                    .is_some_and(|b| b.rpc_addr.to_string() == *owner)
            })
            .expect("a live broker owns it")
    }

    pub fn stream_config(&self) -> StreamConfig {
        self.config.stream_defaults.clone()
    }

    /// A CLI command speaks TLS exactly when the cluster does.
    fn tls_env(&self, command: &mut tokio::process::Command) {
        match &self.tls_dir {
            Some(dir) => command.env("TAILSTREAM_TLS_DIR", dir),
            None => command.env_remove("TAILSTREAM_TLS_DIR"),
        };
    }

    /// `tailstream ARGS` against this cluster, to be spawned by the caller (a long-running
    /// command the test kills or waits for); killed when dropped.
    pub fn cli_command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(BINARY);
        if let Some(config) = &self.config_file {
            command.arg("--config").arg(config);
        }
        self.tls_env(&mut command);
        command
            .args(args)
            .env("TAILSTREAM_COORDINATOR", self.coordinator())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs `tailstream ARGS` against this cluster with `stdin` as input; returns (status
    /// success, stdout, stderr).
    pub async fn cli(&self, args: &[&str], stdin: &[u8]) -> (bool, Vec<u8>, String) {
        let mut command = tokio::process::Command::new(BINARY);
        if let Some(config) = &self.config_file {
            command.arg("--config").arg(config);
        }
        self.tls_env(&mut command);
        let mut child = command
            .args(args)
            .env("TAILSTREAM_COORDINATOR", self.coordinator())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        let data = stdin.to_vec();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = input.write_all(&data).await;
            drop(input);
        });
        let output = child.wait_with_output().await.unwrap();
        writer.await.unwrap();
        (
            output.status.success(),
            output.stdout,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// An HTTP GET on an admin endpoint (plain HTTP/1.0 over TCP, enough for our routes).
    pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    pub async fn stop(self) {
        self.cluster.stop().await;
        if let Some(etcd) = self.etcd {
            etcd.stop().await;
        }
    }
}

/// Small segments and groups, so recovery meets closed segments, open heads and several
/// groups per log.
pub fn recovered_stream(test: &TestCluster) -> StreamConfig {
    let mut stream = test.stream_config();
    stream.replicas = 2;
    stream.logs_per_streamlet = 2;
    stream.segment_size_bytes = 64 * 1024;
    stream.segments_per_group = 2;
    stream
}

/// Waits until every streamlet of `stream` serves (bounded), returning how long that took.
pub async fn wait_until_serving(test: &TestCluster, stream: &str) -> Duration {
    let started = Instant::now();
    let cluster = test.client();
    loop {
        let metadata = cluster.describe_stream(stream).await.unwrap();
        if metadata
            .streamlets
            .iter()
            .all(|p| p.state == PlacementState::Serving)
        {
            let owners_alive = metadata.streamlets.iter().all(|p| {
                test.cluster
                    .brokers()
                    .any(|b| b.rpc_addr.to_string() == p.owner_addr)
            });
            if owners_alive {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not serving after 30 s: {:?}",
            metadata.streamlets
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the backup at `peer_addr` (a broker's peer listener) lists: every replica it holds.
pub async fn list_replicas(peer_addr: &str) -> Vec<tailstream_wire::messages::ReplicaInfo> {
    use tailstream_wire::messages::{ListReplicasRequest, ListReplicasResponse};
    let client =
        tailstream_net::RpcClient::connect(peer_addr, tailstream_net::RpcClientConfig::default())
            .await
            .unwrap();
    let response: ListReplicasResponse = client
        .call(
            tailstream_wire::Opcode::ListReplicas,
            &ListReplicasRequest {
                term: Default::default(),
                primary: None,
                fence: Vec::new(),
            },
        )
        .await
        .unwrap();
    response.replicas
}
