//! Network partitions between the processes of a chaos cluster.
//!
//! Each process of the cluster listens on, and connects from, a loopback address of its own
//! (`ClusterSpec::own_addresses`), so a partition is an nftables rule dropping the packets
//! between two sets of those addresses. Packets are dropped on the way in (the input hook),
//! so neither side gets an error: the other side just goes silent, as behind a broken switch
//! (a drop on the way out would fail the sender's `connect` at once). The rules live in a
//! network namespace the run makes for itself (`unshare --user --net`), so they never touch
//! the machine's own network and vanish with the run.

use std::net::IpAddr;
use std::process::{ExitStatus, Stdio};
use tokio::io::AsyncWriteExt;

/// Set in the re-run that lives in the run's own network namespace.
pub const NETNS_ENV: &str = "TAILSTREAM_CHAOS_NETNS";
const TABLE: &str = "tailstream_chaos";

/// Whether this process runs in the network namespace a chaos run made for itself.
pub fn in_own_netns() -> bool {
    std::env::var_os(NETNS_ENV).is_some()
}

/// Runs this very command line again in a new user and network namespace, where it may set
/// firewall rules; returns how it ended. Its output is this process's.
pub fn rerun_in_own_netns() -> Result<ExitStatus, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    std::process::Command::new("unshare")
        // --fork --kill-child: the re-run dies with `unshare` if that is killed.
        .args([
            "--user",
            "--map-root-user",
            "--net",
            "--fork",
            "--kill-child",
            "--",
        ])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(NETNS_ENV, "1")
        .status()
        .map_err(|e| {
            format!(
                "partitions run in a network namespace of their own: starting `unshare` failed: {e}"
            )
        })
}

/// The run's firewall: one table, one input chain, rules added per cut and flushed to heal.
#[derive(Debug)]
pub struct Firewall(());

impl Firewall {
    /// Brings the namespace's loopback interface up and makes the table. Fails (saying what
    /// is missing) outside the run's own namespace or without `nft`.
    pub async fn prepare() -> Result<Self, String> {
        if !in_own_netns() {
            return Err(format!(
                "partition faults need the run's own network namespace ({NETNS_ENV}): run them through `tailstream bench chaos`, which makes one"
            ));
        }
        run("ip", &["link", "set", "lo", "up"], None).await?;
        nft(&format!(
            "add table inet {TABLE}\n\
             add chain inet {TABLE} input {{ type filter hook input priority 0; policy accept; }}\n"
        ))
        .await?;
        Ok(Self(()))
    }

    /// Drops every packet between an address of `a` and one of `b`, both ways.
    pub async fn cut(&self, a: &[IpAddr], b: &[IpAddr]) -> Result<(), String> {
        if a.is_empty() || b.is_empty() {
            return Ok(());
        }
        let set = |ips: &[IpAddr]| {
            let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
            format!("{{ {} }}", list.join(", "))
        };
        let (a, b) = (set(a), set(b));
        nft(&format!(
            "add rule inet {TABLE} input ip saddr {a} ip daddr {b} drop\n\
             add rule inet {TABLE} input ip saddr {b} ip daddr {a} drop\n"
        ))
        .await
    }

    /// Removes every cut.
    pub async fn heal(&self) -> Result<(), String> {
        nft(&format!("flush chain inet {TABLE} input\n")).await
    }
}

async fn nft(script: &str) -> Result<(), String> {
    run("nft", &["-f", "-"], Some(script)).await
}

async fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting `{program}` failed (is it installed?): {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|e| format!("{program}: {e}"))?;
    }
    let output = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait_with_output())
        .await
        .map_err(|_| format!("`{program}` did not finish in 10 s"))?
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
