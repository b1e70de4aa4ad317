//! The faults a chaos cycle injects into a local cluster, each against the owner of a
//! streamlet: what happens, who is gone while it lasts, and how the cluster is made whole
//! again afterwards.

use crate::harness::{owner_of, server_at};
use rand::RngExt;
use rand::rngs::StdRng;
use std::time::Duration;
use tailstream_client::Cluster;
use tailstream_launcher::LocalCluster;
use tailstream_wire::ServerId;
use tailstream_wire::messages::PlacementState;

/// The kinds of fault, as `--faults` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the owner.
    Owner,
    /// SIGKILL the owner and another broker at once (often one of its backups).
    OwnerAndAnother,
    /// SIGKILL the owner, then (0–300 ms later) the broker rebuilding one of its streamlets.
    DuringRecovery,
    /// SIGKILL the owner, then (0–300 ms later) SIGKILL and restart the coordinator.
    Coordinator,
    /// SIGSTOP the owner until its streamlets serve elsewhere, then SIGCONT: the zombie must
    /// stop serving and come back as a new, empty incarnation.
    Zombie,
}

/// A fault in progress.
#[derive(Debug)]
pub struct Injected {
    /// Broker indexes killed (restarted after the cycle).
    pub killed: Vec<usize>,
    /// Broker indexes paused (resumed once recovery moved their streamlets).
    pub paused: Vec<usize>,
    /// Incarnations that must no longer own anything.
    pub gone: Vec<ServerId>,
    /// When the first victim was hit (Unix ms).
    pub first_hit_ms: u64,
    /// The first victim.
    pub victim: ServerId,
}

async fn kill(local: &LocalCluster, index: usize) -> Result<(), String> {
    local.signal_broker(index, "KILL")
}

/// Injects `kind` against the owner of `streamlet`.
pub async fn inject(
    kind: FaultKind,
    rng: &mut StdRng,
    cluster: &Cluster,
    local: &mut LocalCluster,
    stream: &str,
    streamlet: usize,
) -> Result<Injected, String> {
    let owner = owner_of(cluster, local, stream, streamlet).await?;
    let owner_addr = local
        .broker(owner)
        .map(|b| b.rpc_addr.to_string())
        .ok_or("owner not running")?;
    let victim = server_at(cluster, &owner_addr).await?;
    let brokers = local.spec().brokers as usize;
    let mut injected = Injected {
        killed: vec![owner],
        paused: Vec::new(),
        gone: vec![victim],
        first_hit_ms: crate::harness::unix_ms(),
        victim,
    };
    match kind {
        FaultKind::Owner => kill(local, owner).await?,
        FaultKind::OwnerAndAnother => {
            let other = (owner + rng.random_range(1..brokers)) % brokers;
            let other_id = server_at(cluster, &broker_addr(local, other)?).await?;
            injected.first_hit_ms = crate::harness::unix_ms();
            kill(local, owner).await?;
            kill(local, other).await?;
            injected.killed.push(other);
            injected.gone.push(other_id);
        }
        FaultKind::DuringRecovery => {
            kill(local, owner).await?;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..=300))).await;
            let second = rebuilding_broker(cluster, local, stream, victim)
                .await
                .unwrap_or((owner + rng.random_range(1..brokers)) % brokers);
            if second != owner {
                let second_id = server_at(cluster, &broker_addr(local, second)?).await?;
                kill(local, second).await?;
                injected.killed.push(second);
                injected.gone.push(second_id);
            }
        }
        FaultKind::Coordinator => {
            kill(local, owner).await?;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..=300))).await;
            local.restart_coordinator().await?;
        }
        FaultKind::Zombie => {
            local.signal_broker(owner, "STOP")?;
            injected.killed.clear();
            injected.paused.push(owner);
        }
    }
    Ok(injected)
}

fn broker_addr(local: &LocalCluster, index: usize) -> Result<String, String> {
    local
        .broker(index)
        .map(|b| b.rpc_addr.to_string())
        .ok_or_else(|| format!("broker {index} is not running"))
}

/// A running broker rebuilding a streamlet of `stream` that `crashed` owned, if any.
async fn rebuilding_broker(
    cluster: &Cluster,
    local: &LocalCluster,
    stream: &str,
    crashed: ServerId,
) -> Option<usize> {
    let metadata = cluster.refresh_stream(stream).await.ok()?;
    let rebuilding = metadata
        .streamlets
        .iter()
        .find(|p| p.state == PlacementState::Recovering && p.owner != crashed)?;
    (0..local.spec().brokers as usize).find(|i| {
        local
            .broker(*i)
            .is_some_and(|b| b.rpc_addr.to_string() == rebuilding.owner_addr)
    })
}

/// Makes the cluster whole again after `injected`: paused brokers resume (and re-register as
/// new incarnations by themselves), killed ones are started again.
pub async fn heal(local: &mut LocalCluster, injected: &Injected) -> Result<(), String> {
    for index in &injected.paused {
        local.signal_broker(*index, "CONT")?;
    }
    for index in &injected.killed {
        local.restart_broker(*index).await?;
    }
    Ok(())
}
