//! The faults a chaos cycle injects into a local cluster, each against the owner of a
//! streamlet: what happens, who is gone while it lasts, and how the cluster is made whole
//! again afterwards.

use super::partition::Firewall;
use crate::harness::{owner_of, server_at};
use rand::RngExt;
use rand::rngs::StdRng;
use std::time::Duration;
use tailstream_client::CoordinatorClient;
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
    /// Cut the owner off from the coordinator (not from clients or other brokers) until its
    /// streamlets serve elsewhere, then heal: it must acknowledge nothing once its lease ran
    /// out, and come back as a new, empty incarnation. (Partition faults need `nft`.)
    OwnerCutFromCoordinator,
    /// Cut the owner off from every other broker (its backups), not from the coordinator or
    /// clients, for 2-4 s, then heal: its logs acknowledge nothing without their copies (and,
    /// past `replication.write_timeout_ms`, give up on every backup and look for others, which
    /// are cut off too), and carry on after.
    OwnerCutFromBrokers,
    /// Cut a broker that is not the owner off from every other broker, then heal: owners give
    /// up on writes it does not answer (`replication.write_timeout_ms`) and replace its
    /// replicas elsewhere. Lasts that long plus 2-4 s.
    BackupCutOff,
    /// Cut the coordinator off from half the brokers (the owner among them) until their
    /// streamlets serve elsewhere, then heal.
    CoordinatorCutFromHalf,
}

impl FaultKind {
    /// Whether the fault cuts the network (and so needs the run's firewall).
    pub fn is_partition(self) -> bool {
        matches!(
            self,
            Self::OwnerCutFromCoordinator
                | Self::OwnerCutFromBrokers
                | Self::BackupCutOff
                | Self::CoordinatorCutFromHalf
        )
    }
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
    /// How long the fault lasts at least (a partition nothing recovers from: its logs stall
    /// while it lasts).
    pub hold: Option<Duration>,
    /// The network is cut (healed by flushing the firewall).
    pub cut: bool,
}

async fn kill(local: &LocalCluster, index: usize) -> Result<(), String> {
    local.signal_broker(index, "KILL")
}

/// Injects `kind` against the owner of `streamlet` (partitions through `firewall`).
#[allow(clippy::too_many_arguments)]
pub async fn inject(
    kind: FaultKind,
    rng: &mut StdRng,
    cluster: &CoordinatorClient,
    local: &mut LocalCluster,
    stream: &str,
    streamlet: usize,
    firewall: Option<&Firewall>,
    write_timeout: Duration,
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
        hold: None,
        cut: false,
    };
    if kind.is_partition() {
        let firewall = firewall.ok_or("partition faults need the run's firewall")?;
        injected.killed.clear();
        injected.cut = true;
        let spec = local.spec();
        let ip = |index: usize| spec.broker_ip(index);
        let others = |except: usize| -> Result<Vec<std::net::IpAddr>, String> {
            (0..brokers).filter(|i| *i != except).map(ip).collect()
        };
        let coordinator = [spec.coordinator_ip()];
        let hold = Duration::from_millis(rng.random_range(2000..=4000));
        match kind {
            FaultKind::OwnerCutFromCoordinator => {
                firewall.cut(&[ip(owner)?], &coordinator).await?;
            }
            FaultKind::OwnerCutFromBrokers => {
                firewall.cut(&[ip(owner)?], &others(owner)?).await?;
                injected.gone.clear();
                injected.hold = Some(hold);
            }
            FaultKind::BackupCutOff => {
                let backup = (owner + rng.random_range(1..brokers)) % brokers;
                firewall.cut(&[ip(backup)?], &others(backup)?).await?;
                injected.gone.clear();
                injected.hold = Some(write_timeout + hold);
            }
            FaultKind::CoordinatorCutFromHalf => {
                let mut half = vec![owner];
                while half.len() < brokers / 2 {
                    let other = (owner + rng.random_range(1..brokers)) % brokers;
                    if !half.contains(&other) {
                        half.push(other);
                    }
                }
                for other in &half[1..] {
                    let id = server_at(cluster, &broker_addr(local, *other)?).await?;
                    injected.gone.push(id);
                }
                let cut: Vec<std::net::IpAddr> =
                    half.iter().map(|i| ip(*i)).collect::<Result<_, _>>()?;
                firewall.cut(&cut, &coordinator).await?;
            }
            _ => unreachable!("is_partition covers exactly the kinds above"),
        }
        injected.first_hit_ms = crate::harness::unix_ms();
        return Ok(injected);
    }
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
        FaultKind::OwnerCutFromCoordinator
        | FaultKind::OwnerCutFromBrokers
        | FaultKind::BackupCutOff
        | FaultKind::CoordinatorCutFromHalf => {}
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
    cluster: &CoordinatorClient,
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

/// Makes the cluster whole again after `injected`: cuts are healed and paused brokers resume
/// (both re-register as new incarnations by themselves if they were declared crashed meanwhile),
/// killed ones are started again.
pub async fn heal(
    local: &mut LocalCluster,
    injected: &Injected,
    firewall: Option<&Firewall>,
) -> Result<(), String> {
    if injected.cut
        && let Some(firewall) = firewall
    {
        firewall.heal().await?;
    }
    for index in &injected.paused {
        local.signal_broker(*index, "CONT")?;
    }
    for index in &injected.killed {
        local.restart_broker(*index).await?;
    }
    Ok(())
}
