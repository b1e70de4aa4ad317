//! tailstream-launcher: a local cluster of real processes.
//!
//! [`LocalCluster`] runs one coordinator and N brokers as child processes of a given
//! `tailstream` binary, all bound to 127.0.0.1. Each child announces its bound addresses on a
//! `ready` line on stdout (so ports may be ephemeral), logs to a file in its data directory,
//! and exits when its stdin closes, so children never outlive a launcher that was killed.
//! Brokers can be killed (SIGKILL) and restarted at the same address (a new generation of the
//! same server), which is what the fault-injection tests do.
//!
//! [`etcd::EtcdCluster`] runs a local etcd of N members, for coordinators on etcd;
//! [`http::get`] is the plain GET the launcher and the benchmarks poll endpoints with;
//! [`tls::make_dev_certificates`] makes a local CA and certificate for a cluster with TLS.

pub mod etcd;
pub mod http;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// How long a child may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a child may take to stop after its stdin closed before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the processes listen. `Ephemeral` lets the kernel pick every port.
#[derive(Clone, Copy, Debug)]
pub enum Ports {
    Ephemeral,
    Fixed {
        coordinator_rpc: u16,
        coordinator_peer: u16,
        coordinator_admin: u16,
        broker_rpc_base: u16,
        broker_admin_base: u16,
        /// Broker i's Kafka listener is on this plus i.
        kafka_base: u16,
    },
}

#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// The `tailstream` executable.
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    pub brokers: u32,
    pub ports: Ports,
    /// Passed to every child as `--config`.
    pub config_file: Option<PathBuf>,
    /// `RUST_LOG` for the children.
    pub log_filter: String,
    /// Each process listens on, and connects from, a loopback address of its own (the
    /// coordinator 127.0.0.10, broker i 127.0.0.(11 + i)) instead of all sharing 127.0.0.1,
    /// so a firewall rule can cut the network between processes.
    pub own_addresses: bool,
    /// Coordinators on etcd instead of one on a file: the first leads, the others stand by.
    pub etcd: Option<EtcdSpec>,
    /// TLS everywhere, with the CA and member certificate in this directory (see
    /// [`tls::make_dev_certificates`]); given to every child as `$TAILSTREAM_TLS_DIR`.
    pub tls_dir: Option<PathBuf>,
}

/// Where coordinators keep their state when on etcd, and how many run.
#[derive(Clone, Debug)]
pub struct EtcdSpec {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// The cluster's key prefix.
    pub prefix: String,
    /// Coordinators in all (at least one).
    pub coordinators: usize,
}

/// The coordinator's address when processes have addresses of their own.
const COORDINATOR_OWN_IP: [u8; 4] = [127, 0, 0, 10];
/// Broker i's is this plus i.
const FIRST_BROKER_OWN_IP: [u8; 4] = [127, 0, 0, 11];

/// One running child.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    pub rpc_addr: SocketAddr,
    /// Where the cluster's own members call it.
    pub peer_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// A broker's software NIC (one-sided writes); `None` for the coordinator.
    pub nic_addr: Option<SocketAddr>,
    /// A broker's Kafka listener, if it runs one.
    pub kafka_addr: Option<SocketAddr>,
    pub log_file: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Proc {
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Closes stdin (the child's signal to shut down cleanly), waits, then kills if needed.
    async fn stop(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(STOP_TIMEOUT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// SIGKILL: no chance to clean up, as in a crash.
    async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Whether the child has exited.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// How the child ended, if it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// Starts one child and waits for its ready line.
async fn spawn(
    spec: &ClusterSpec,
    role: &str,
    name: String,
    data_dir: &Path,
    rpc: SocketAddr,
    admin: SocketAddr,
    extra: &[String],
) -> Result<Proc, String> {
    spawn_until(spec, role, name, data_dir, rpc, admin, extra, false).await
}

/// [`spawn`], returning at the child's `ready` line, or (with `standby_is_ready`) at a
/// coordinator's `standby` line: a standby binds no admin listener until it leads.
#[allow(clippy::too_many_arguments)]
async fn spawn_until(
    spec: &ClusterSpec,
    role: &str,
    name: String,
    data_dir: &Path,
    rpc: SocketAddr,
    admin: SocketAddr,
    extra: &[String],
    standby_is_ready: bool,
) -> Result<Proc, String> {
    std::fs::create_dir_all(data_dir)
        .map_err(|e| format!("creating {}: {e}", data_dir.display()))?;
    let log_file = data_dir.join(format!("{name}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_file)
        .map_err(|e| format!("opening {}: {e}", log_file.display()))?;
    let mut command = Command::new(&spec.binary);
    if let Some(config) = &spec.config_file {
        command.arg("--config").arg(config);
    }
    command
        .arg(role)
        .arg("--rpc-addr")
        .arg(rpc.to_string())
        .arg("--admin-addr")
        .arg(admin.to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--exit-on-stdin-eof")
        .args(extra)
        .env("RUST_LOG", &spec.log_filter)
        .env(
            "TAILSTREAM_WORKER_THREADS",
            worker_threads_per_child(spec.brokers).to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    // Children speak TLS exactly when the spec says so, whatever this process inherited.
    match &spec.tls_dir {
        Some(dir) => command.env("TAILSTREAM_TLS_DIR", dir),
        None => command.env_remove("TAILSTREAM_TLS_DIR"),
    };
    let mut child = command
        .spawn()
        .map_err(|e| format!("starting {}: {e}", spec.binary.display()))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or("child has no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let prefix = format!("tailstream {role} ready ");
    let standby = format!("tailstream {role} standby ");
    let ready = tokio::time::timeout(READY_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix(&prefix) {
                return Some(rest.to_string());
            }
            if let Some(rest) = line.strip_prefix(&standby).filter(|_| standby_is_ready) {
                return Some(rest.to_string());
            }
        }
        None
    })
    .await;
    let line = match ready {
        Ok(Some(line)) => line,
        _ => {
            let _ = child.kill().await;
            let log = std::fs::read_to_string(&log_file).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            return Err(format!(
                "{name} did not become ready; last log lines:\n{tail}"
            ));
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let field = |key: &str| -> Result<SocketAddr, String> {
        line.split_whitespace()
            .find_map(|part| part.strip_prefix(key))
            .map(|v| v.trim_start_matches("http://"))
            .ok_or_else(|| format!("ready line without {key}: {line}"))?
            .parse()
            .map_err(|e| format!("bad address in ready line {line:?}: {e}"))
    };
    Ok(Proc {
        name,
        rpc_addr: field("rpc=")?,
        peer_addr: field("peer=")?,
        admin_addr: field("admin=")?,
        nic_addr: field("nic=").ok(),
        kafka_addr: field("kafka=").ok(),
        log_file,
        child,
        stdin,
    })
}

/// The runtime threads each broker gets: the machine's cores split among the brokers, at
/// least one. All of them run on this one machine, and a thread more than a process can keep
/// busy only adds cross-thread wake-ups to every request (on 2 cores, 2 threads per broker
/// instead of 1 cost the backups 3x the user CPU and the ack ~20% more latency).
fn worker_threads_per_child(brokers: u32) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores / brokers.max(1) as usize).max(1)
}

/// A coordinator's arguments for keeping its state on `etcd`.
fn etcd_args(etcd: &EtcdSpec) -> Vec<String> {
    vec![
        "--etcd-endpoints".to_string(),
        etcd.endpoints.join(","),
        "--etcd-prefix".to_string(),
        etcd.prefix.clone(),
    ]
}

/// `kill -SIGNAL pid`.
fn signal_pid(pid: u32, signal: &str) -> Result<(), String> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("running kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -{signal} {pid} failed"))
    }
}

/// How a child ended, for a person.
fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(9)) => "was killed (SIGKILL)".into(),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended".into(),
    }
}

/// A coordinator and its brokers, as child processes.
#[derive(Debug)]
pub struct LocalCluster {
    spec: ClusterSpec,
    /// The coordinator (on etcd: the one started first, which led first).
    pub coordinator: Proc,
    /// On etcd: the other coordinators, standing by (until one of them leads).
    pub standbys: Vec<Proc>,
    brokers: Vec<Option<Proc>>,
    /// Addresses (rpc, peer, admin) each broker slot was first bound to, reused on restart.
    broker_addrs: Vec<BrokerAddrs>,
}

/// Where a broker listens: kept across restarts, so a restarted broker is found where it was.
#[derive(Clone, Copy, Debug)]
struct BrokerAddrs {
    rpc: SocketAddr,
    peer: SocketAddr,
    admin: SocketAddr,
    kafka: SocketAddr,
}

impl BrokerAddrs {
    fn of(proc: &Proc, asked: BrokerAddrs) -> Self {
        BrokerAddrs {
            rpc: proc.rpc_addr,
            peer: proc.peer_addr,
            admin: proc.admin_addr,
            kafka: proc.kafka_addr.unwrap_or(asked.kafka),
        }
    }
}

impl ClusterSpec {
    /// Where the coordinator listens and connects from.
    pub fn coordinator_ip(&self) -> IpAddr {
        if self.own_addresses {
            IpAddr::from(COORDINATOR_OWN_IP)
        } else {
            IpAddr::from([127, 0, 0, 1])
        }
    }

    /// Where broker `index` listens and connects from.
    pub fn broker_ip(&self, index: usize) -> Result<IpAddr, String> {
        if !self.own_addresses {
            return Ok(IpAddr::from([127, 0, 0, 1]));
        }
        let [a, b, c, first] = FIRST_BROKER_OWN_IP;
        let last = u8::try_from(index)
            .ok()
            .and_then(|i| first.checked_add(i))
            .filter(|last| *last < 255)
            .ok_or("too many brokers for addresses of their own")?;
        Ok(IpAddr::from([a, b, c, last]))
    }

    /// `--source-ip` for a child at `ip`, when processes have addresses of their own.
    fn source_args(&self, ip: IpAddr) -> Vec<String> {
        if self.own_addresses {
            vec!["--source-ip".into(), ip.to_string()]
        } else {
            Vec::new()
        }
    }
}

impl LocalCluster {
    pub async fn start(spec: ClusterSpec) -> Result<Self, String> {
        let ip = spec.coordinator_ip();
        let at = |port| SocketAddr::new(ip, port);
        let (coordinator_rpc, coordinator_peer, coordinator_admin) = match spec.ports {
            Ports::Ephemeral => (at(0), at(0), at(0)),
            Ports::Fixed {
                coordinator_rpc,
                coordinator_peer,
                coordinator_admin,
                ..
            } => (
                at(coordinator_rpc),
                at(coordinator_peer),
                at(coordinator_admin),
            ),
        };
        let (coordinator, standbys) = match &spec.etcd {
            None => {
                let mut extra = vec!["--peer-addr".to_string(), coordinator_peer.to_string()];
                extra.extend(spec.source_args(ip));
                let coordinator = spawn(
                    &spec,
                    "coordinator",
                    "coordinator".into(),
                    &spec.data_dir.join("coordinator"),
                    coordinator_rpc,
                    coordinator_admin,
                    &extra,
                )
                .await?;
                (coordinator, Vec::new())
            }
            Some(etcd) => Self::start_coordinators_on_etcd(&spec, etcd).await?,
        };
        let _ = std::fs::write(
            Self::coordinator_addr_file(&spec.data_dir),
            coordinator.rpc_addr.to_string(),
        );
        let mut cluster = Self {
            spec,
            coordinator,
            standbys,
            brokers: Vec::new(),
            broker_addrs: Vec::new(),
        };
        for index in 0..cluster.spec.brokers {
            let ip = cluster.spec.broker_ip(index as usize)?;
            let loopback = |port| SocketAddr::new(ip, port);
            let asked = match cluster.spec.ports {
                Ports::Ephemeral => BrokerAddrs {
                    rpc: loopback(0),
                    peer: loopback(0),
                    admin: loopback(0),
                    kafka: loopback(0),
                },
                Ports::Fixed {
                    broker_rpc_base,
                    broker_admin_base,
                    kafka_base,
                    ..
                } => {
                    let offset = u16::try_from(index).map_err(|_| "too many brokers")?;
                    BrokerAddrs {
                        rpc: loopback(broker_rpc_base + offset),
                        peer: loopback(0),
                        admin: loopback(broker_admin_base + offset),
                        kafka: loopback(kafka_base + offset),
                    }
                }
            };
            let proc = cluster.spawn_broker(index as usize, asked).await?;
            cluster.broker_addrs.push(BrokerAddrs::of(&proc, asked));
            cluster.brokers.push(Some(proc));
        }
        Ok(cluster)
    }

    /// Coordinators on etcd, each on ports chosen now (a standby binds no admin listener
    /// until it leads, so its addresses must be known before): the first is started alone and leads,
    /// then the standbys.
    async fn start_coordinators_on_etcd(
        spec: &ClusterSpec,
        etcd: &EtcdSpec,
    ) -> Result<(Proc, Vec<Proc>), String> {
        let ip = spec.coordinator_ip();
        let count = etcd.coordinators.max(1);
        let ports = etcd::free_ports(count * 3)?;
        let mut started = Vec::with_capacity(count);
        for i in 0..count {
            let at = |k: usize| SocketAddr::new(ip, ports[3 * i + k]);
            let mut extra = vec!["--peer-addr".to_string(), at(1).to_string()];
            extra.extend(etcd_args(etcd));
            extra.extend(spec.source_args(ip));
            let name = if i == 0 {
                "coordinator".to_string()
            } else {
                format!("coordinator-{i}")
            };
            let proc = spawn_until(
                spec,
                "coordinator",
                name.clone(),
                &spec.data_dir.join(&name),
                at(0),
                at(2),
                &extra,
                i > 0,
            )
            .await?;
            started.push(proc);
        }
        let coordinator = started.remove(0);
        Ok((coordinator, started))
    }

    /// Every coordinator's client address, "a,b,c" (what clients and tools take).
    pub fn coordinator_addrs(&self) -> String {
        std::iter::once(&self.coordinator)
            .chain(&self.standbys)
            .map(|c| c.rpc_addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every coordinator's peer address, "a,b,c" (what brokers take).
    pub fn coordinator_peer_addrs(&self) -> String {
        std::iter::once(&self.coordinator)
            .chain(&self.standbys)
            .map(|c| c.peer_addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// SIGKILL of the coordinator started first (on etcd: the first leader).
    pub async fn kill_coordinator(&mut self) {
        self.coordinator.kill().await;
    }

    /// Every coordinator process: the one started first, then the standbys (on etcd any of
    /// them may lead by now).
    pub fn coordinators(&self) -> impl Iterator<Item = &Proc> {
        std::iter::once(&self.coordinator).chain(&self.standbys)
    }

    fn coordinator_at(&mut self, rpc: SocketAddr) -> Result<&mut Proc, String> {
        std::iter::once(&mut self.coordinator)
            .chain(&mut self.standbys)
            .find(|c| c.rpc_addr == rpc)
            .ok_or_else(|| format!("no coordinator of this cluster listens at {rpc}"))
    }

    /// SIGKILL of the coordinator at `rpc` (on etcd: whichever leads now, say).
    pub async fn kill_coordinator_at(&mut self, rpc: SocketAddr) -> Result<(), String> {
        self.coordinator_at(rpc)?.kill().await;
        Ok(())
    }

    /// Starts the (killed) coordinator at `rpc` again, on etcd, at the same addresses and data
    /// directory: it comes back a standby (or wins, if no other leads).
    pub async fn restart_coordinator_at(&mut self, rpc: SocketAddr) -> Result<(), String> {
        let etcd = self
            .spec
            .etcd
            .clone()
            .ok_or("restart_coordinator_at is for coordinators on etcd")?;
        let spec = self.spec.clone();
        let slot = self.coordinator_at(rpc)?;
        slot.kill().await;
        let mut extra = vec!["--peer-addr".to_string(), slot.peer_addr.to_string()];
        extra.extend(etcd_args(&etcd));
        extra.extend(spec.source_args(spec.coordinator_ip()));
        let name = slot.name.clone();
        *slot = spawn_until(
            &spec,
            "coordinator",
            name.clone(),
            &spec.data_dir.join(&name),
            slot.rpc_addr,
            slot.admin_addr,
            &extra,
            true,
        )
        .await?;
        Ok(())
    }

    /// Sends `signal` ("STOP", "CONT") to the coordinator started first.
    pub fn signal_coordinator(&self, signal: &str) -> Result<(), String> {
        let pid = self
            .coordinator
            .pid()
            .ok_or("the coordinator is not running")?;
        signal_pid(pid, signal)
    }

    async fn spawn_broker(&self, index: usize, addrs: BrokerAddrs) -> Result<Proc, String> {
        let mut coordinator = vec![
            "--coordinator-peer".to_string(),
            self.coordinator_peer_addrs(),
            "--peer-addr".to_string(),
            addrs.peer.to_string(),
            "--kafka-addr".to_string(),
            addrs.kafka.to_string(),
        ];
        coordinator.extend(self.spec.source_args(self.spec.broker_ip(index)?));
        let dir = self.spec.data_dir.join(format!("broker-{index}"));
        let proc = spawn(
            &self.spec,
            "broker",
            format!("broker-{index}"),
            &dir,
            addrs.rpc,
            addrs.admin,
            &coordinator,
        )
        .await?;
        if let Some(pid) = proc.pid() {
            let _ = std::fs::write(Self::pid_file(&self.spec.data_dir, index), pid.to_string());
        }
        let _ = std::fs::write(
            Self::rpc_addr_file(&self.spec.data_dir, index),
            proc.rpc_addr.to_string(),
        );
        Ok(proc)
    }

    pub fn coordinator_addr(&self) -> SocketAddr {
        self.coordinator.rpc_addr
    }

    pub fn brokers(&self) -> impl Iterator<Item = &Proc> {
        self.brokers.iter().flatten()
    }

    pub fn broker(&self, index: usize) -> Option<&Proc> {
        self.brokers.get(index)?.as_ref()
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// SIGKILLs broker `index`.
    pub async fn kill_broker(&mut self, index: usize) {
        if let Some(mut proc) = self.brokers.get_mut(index).and_then(Option::take) {
            proc.kill().await;
        }
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to broker `index`: a paused process keeps its
    /// sockets open and answers nothing, as a broker stuck in a long pause would.
    pub fn signal_broker(&self, index: usize, signal: &str) -> Result<(), String> {
        let pid = self
            .broker(index)
            .and_then(Proc::pid)
            .ok_or_else(|| format!("broker {index} is not running"))?;
        signal_pid(pid, signal)
    }

    /// Starts broker `index` again at the addresses it had (a new generation of that server).
    pub async fn restart_broker(&mut self, index: usize) -> Result<(), String> {
        self.kill_broker(index).await;
        let addrs = *self.broker_addrs.get(index).ok_or("no such broker")?;
        let proc = match self.spawn_broker(index, addrs).await {
            Ok(proc) => proc,
            // With kernel-chosen ports, a port the killed broker had may meanwhile be the
            // source port of some outgoing connection: start on fresh ones (a broker
            // advertises its addresses when it registers, and clients follow the metadata).
            Err(error)
                if matches!(self.spec.ports, Ports::Ephemeral)
                    && error.contains("Address already in use") =>
            {
                let any = SocketAddr::new(self.spec.broker_ip(index)?, 0);
                let fresh = BrokerAddrs {
                    rpc: any,
                    peer: any,
                    admin: any,
                    kafka: any,
                };
                let proc = self.spawn_broker(index, fresh).await?;
                self.broker_addrs[index] = BrokerAddrs::of(&proc, fresh);
                proc
            }
            Err(error) => return Err(error),
        };
        self.brokers[index] = Some(proc);
        Ok(())
    }

    /// SIGKILLs the coordinator and starts it again at the same addresses and data directory.
    pub async fn restart_coordinator(&mut self) -> Result<(), String> {
        self.coordinator.kill().await;
        let (rpc, admin) = (self.coordinator.rpc_addr, self.coordinator.admin_addr);
        let mut peer = vec![
            "--peer-addr".to_string(),
            self.coordinator.peer_addr.to_string(),
        ];
        peer.extend(self.spec.source_args(self.spec.coordinator_ip()));
        if let Some(etcd) = &self.spec.etcd {
            // On etcd it comes back a standby (another leads by now, or it wins again).
            peer.extend(etcd_args(etcd));
            self.coordinator = spawn_until(
                &self.spec,
                "coordinator",
                "coordinator".into(),
                &self.spec.data_dir.join("coordinator"),
                rpc,
                admin,
                &peer,
                true,
            )
            .await?;
            return Ok(());
        }
        let dir = self.spec.data_dir.join("coordinator");
        let spawned = spawn(
            &self.spec,
            "coordinator",
            "coordinator".into(),
            &dir,
            rpc,
            admin,
            &peer,
        )
        .await;
        self.coordinator = match spawned {
            Ok(proc) => proc,
            // With kernel-chosen ports, the killed coordinator's admin port may meanwhile be
            // the source port of some outgoing connection. Clients and brokers know only its
            // rpc and peer addresses, so the admin listener may move (as a broker's do).
            Err(error)
                if matches!(self.spec.ports, Ports::Ephemeral)
                    && error.contains("binding coordinator admin")
                    && error.contains("Address already in use") =>
            {
                spawn(
                    &self.spec,
                    "coordinator",
                    "coordinator".into(),
                    &dir,
                    rpc,
                    SocketAddr::new(self.spec.coordinator_ip(), 0),
                    &peer,
                )
                .await?
            }
            Err(error) => return Err(error),
        };
        Ok(())
    }

    /// Children that exited on their own since they were started: (name, broker index or
    /// `None` for the coordinator, how it ended). A broker that exited is forgotten (its slot
    /// can be restarted); the coordinator is reported until it is restarted.
    pub fn exits(&mut self) -> Vec<(String, Option<usize>, String)> {
        let mut gone = Vec::new();
        if let Some(status) = self.coordinator.exit_status() {
            gone.push((self.coordinator.name.clone(), None, describe_exit(status)));
        }
        for (index, slot) in self.brokers.iter_mut().enumerate() {
            let status = slot.as_mut().and_then(Proc::exit_status);
            if let Some(status) = status {
                let name = slot.take().map(|p| p.name).unwrap_or_default();
                let _ = std::fs::remove_file(Self::pid_file(&self.spec.data_dir, index));
                gone.push((name, Some(index), describe_exit(status)));
            }
        }
        gone
    }

    /// Where broker `index` writes its pid (for `tailstream broker kill`).
    pub fn pid_file(data_dir: &Path, index: usize) -> PathBuf {
        data_dir.join(format!("broker-{index}")).join("pid")
    }

    /// Where broker `index`'s client address is written (`tailstream broker kill` finds a
    /// broker by the server id the coordinator gave it, which need not be `index`).
    pub fn rpc_addr_file(data_dir: &Path, index: usize) -> PathBuf {
        data_dir.join(format!("broker-{index}")).join("rpc_addr")
    }

    /// Where the coordinator's client address is written.
    pub fn coordinator_addr_file(data_dir: &Path) -> PathBuf {
        data_dir.join("coordinator").join("rpc_addr")
    }

    /// Stops every child cleanly (brokers first), killing any that will not stop.
    pub async fn stop(self) {
        for index in 0..self.brokers.len() {
            let _ = std::fs::remove_file(Self::pid_file(&self.spec.data_dir, index));
        }
        let mut stopping = tokio::task::JoinSet::new();
        for proc in self.brokers.into_iter().flatten() {
            stopping.spawn(proc.stop());
        }
        while stopping.join_next().await.is_some() {}
        for standby in self.standbys {
            standby.stop().await;
        }
        self.coordinator.stop().await;
    }
}
