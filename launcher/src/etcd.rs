//! [`EtcdCluster`]: a local etcd of N members on 127.0.0.1, for coordinators that keep their
//! state on etcd (`tailstream dev --etcd`, tests, `bench failover`).
//!
//! Each member runs Debian's `etcd` binary under a small shell that kills it when the shell's
//! stdin closes, so members never outlive a launcher that was killed. Members can be killed
//! (SIGKILL) and started again on the same data directory and ports.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, Command};

/// How long members may take to agree on a leader.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether an `etcd` binary is on the PATH (Debian's `etcd-server` package).
pub fn etcd_installed() -> bool {
    std::process::Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[derive(Debug)]
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    data_dir: PathBuf,
    log_file: PathBuf,
    running: Option<(Child, ChildStdin, u32)>,
}

/// A running local etcd cluster.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
}

/// Ports nobody listens on now (bound, read, released: a small race with other processes,
/// which a failed start reports).
pub fn free_ports(count: usize) -> Result<Vec<u16>, String> {
    let listeners: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("finding free ports: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())
}

impl EtcdCluster {
    /// Starts `members` members with their data under `dir` and waits until the cluster is
    /// healthy.
    pub async fn start(members: usize, dir: &Path) -> Result<Self, String> {
        let ports = free_ports(members * 2)?;
        let members: Vec<Member> = (0..members)
            .map(|i| {
                let name = format!("etcd{i}");
                Member {
                    client: SocketAddr::from(([127, 0, 0, 1], ports[2 * i])),
                    peer: SocketAddr::from(([127, 0, 0, 1], ports[2 * i + 1])),
                    data_dir: dir.join(&name),
                    log_file: dir.join(format!("{name}.log")),
                    name,
                    running: None,
                }
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            members,
            initial_cluster,
        };
        for i in 0..cluster.members.len() {
            cluster.start_member(i).await?;
        }
        cluster.wait_healthy(HEALTHY_TIMEOUT).await?;
        Ok(cluster)
    }

    /// The client URLs, e.g. `http://127.0.0.1:2379`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://{}", m.client))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    async fn start_member(&mut self, index: usize) -> Result<(), String> {
        let initial_cluster = self.initial_cluster.clone();
        let member = &mut self.members[index];
        if member.running.is_some() {
            return Ok(());
        }
        std::fs::create_dir_all(&member.data_dir)
            .map_err(|e| format!("creating {}: {e}", member.data_dir.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&member.log_file)
            .map_err(|e| format!("opening {}: {e}", member.log_file.display()))?;
        let client_url = format!("http://{}", member.client);
        let peer_url = format!("http://{}", member.peer);
        let state = if member.data_dir.join("member").exists() {
            "existing"
        } else {
            "new"
        };
        // The shell prints etcd's pid, then kills it when its own stdin closes.
        // (A background job's stdin is /dev/null unless redirected: hence fd 3.)
        let script = r#"exec 3<&0; etcd "$@" </dev/null & child=$!; echo "$child"; (cat <&3 >/dev/null; kill -9 "$child" 2>/dev/null) & wait "$child""#;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("etcd-member")
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&member.data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "tailstream-local"])
            // etcd's own defaults: shorter ones made its members hold elections of their own
            // on a loaded 2-core machine, and each cost the coordinators' leader its lease.
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting etcd (is etcd-server installed?): {e}"))?;
        let stdin = child.stdin.take().ok_or("etcd's stdin")?;
        let mut stdout = child.stdout.take().ok_or("etcd's stdout")?;
        let mut line = Vec::new();
        let read_pid = async {
            let mut byte = [0u8; 1];
            while stdout.read(&mut byte).await.map_err(|e| e.to_string())? == 1 {
                if byte[0] == b'\n' {
                    break;
                }
                line.push(byte[0]);
            }
            Ok::<_, String>(())
        };
        tokio::time::timeout(Duration::from_secs(5), read_pid)
            .await
            .map_err(|_| "etcd's shell printed no pid".to_string())??;
        let pid: u32 = String::from_utf8_lossy(&line)
            .trim()
            .parse()
            .map_err(|_| format!("etcd's shell printed {line:?}, not a pid"))?;
        member.running = Some((child, stdin, pid));
        Ok(())
    }

    /// SIGKILL of member `index` (its data stays).
    pub async fn kill(&mut self, index: usize) {
        if let Some((mut shell, stdin, pid)) = self.members[index].running.take() {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            drop(stdin);
            let _ = tokio::time::timeout(Duration::from_secs(5), shell.wait()).await;
        }
    }

    /// Starts member `index` again on its data.
    pub async fn restart(&mut self, index: usize) -> Result<(), String> {
        self.kill(index).await;
        self.start_member(index).await
    }

    /// Waits until a majority answers `/health` with a leader.
    pub async fn wait_healthy(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut healthy = 0;
            for member in self.members.iter().filter(|m| m.running.is_some()) {
                if health(member.client).await {
                    healthy += 1;
                }
            }
            if healthy > self.members.len() / 2 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| m.log_file.display().to_string())
                    .collect();
                return Err(format!(
                    "etcd did not become healthy within {timeout:?} (logs: {})",
                    logs.join(", ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops every member.
    pub async fn stop(mut self) {
        for i in 0..self.members.len() {
            self.kill(i).await;
        }
    }
}

/// Whether the member at `client` says it is healthy (it has a leader).
async fn health(client: SocketAddr) -> bool {
    crate::http::get(&client.to_string(), "/health", Duration::from_secs(1))
        .await
        .is_some_and(|answer| answer.contains("\"health\":\"true\""))
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some((_, _, pid)) = member.running.take() {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
        }
    }
}
