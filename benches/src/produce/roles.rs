//! Which broker process plays which role for the benchmark stream, and their CPU time.

use crate::cpu::{CpuTime, own_cpu_time, threads_cpu_time, total_cpu_time};
use tailstream_client::CoordinatorClient;
use tailstream_launcher::LocalCluster;

/// The broker processes in each role for the benchmark stream: owners of its streamlets
/// (primaries) and the others (backups, or idle). Once the load runs, [`Roles::backups`] says
/// which of the others hold copies of its logs.
#[derive(Debug, Default)]
pub(crate) struct Roles {
    pub primaries: Vec<u32>,
    pub others: Vec<u32>,
    pub backups: Option<Backups>,
}

/// The brokers holding copies of the stream's logs that own none of its streamlets (so their
/// CPU is a backup's alone), as the owners last reported their replica sets.
#[derive(Debug, Default, Clone)]
pub(crate) struct Backups {
    pub pids: Vec<u32>,
    /// Of every copy of every log, the fraction these hold: what they receive is the bytes
    /// produced times R times this (each log's load taken as equal).
    pub share: f64,
    /// Copies held by brokers that also own streamlets: their backup work cannot be told
    /// apart from their primary work.
    pub copies_on_owners: usize,
    /// Brokers that neither own a streamlet nor hold a copy (left out of the backup figure).
    pub idle: usize,
}

/// The name of a backup's software NIC threads (`tailstream_broker::backup::nic`): their CPU
/// is what one-sided writes cost a backup, apart from closing and flushing replicas.
const NIC_THREAD: &str = "tailstream-nic";

impl Roles {
    fn cpu(&self) -> (CpuTime, CpuTime) {
        (
            total_cpu_time(&self.primaries),
            total_cpu_time(&self.others),
        )
    }

    fn backup_cpu(&self) -> CpuTime {
        self.backups
            .as_ref()
            .map_or_else(CpuTime::default, |b| total_cpu_time(&b.pids))
    }

    fn nic_cpu(&self) -> CpuTime {
        let Some(backups) = &self.backups else {
            return CpuTime::default();
        };
        backups
            .pids
            .iter()
            .map(|pid| threads_cpu_time(*pid, NIC_THREAD))
            .fold(CpuTime::default(), |a, b| a + b)
    }
}

pub(super) async fn roles(
    cluster: &CoordinatorClient,
    local: Option<&LocalCluster>,
    stream: &str,
    streamlets: u32,
) -> Result<Roles, String> {
    let Some(local) = local else {
        return Ok(Roles::default());
    };
    let mut owners = Vec::new();
    for streamlet in 0..streamlets as usize {
        owners.push(crate::harness::owner_of(cluster, local, stream, streamlet).await?);
    }
    let mut roles = Roles::default();
    for (index, broker) in local.brokers().enumerate() {
        if let Some(pid) = broker.pid() {
            if owners.contains(&index) {
                roles.primaries.push(pid);
            } else {
                roles.others.push(pid);
            }
        }
    }
    Ok(roles)
}

/// Which brokers hold copies of `stream`'s logs while owning none of its streamlets (from
/// the replica sets the owners reported): asked once the load runs, when every log has them.
pub(super) async fn replica_holders(
    cluster: &CoordinatorClient,
    local: Option<&LocalCluster>,
    stream: &str,
) -> Result<Option<Backups>, String> {
    let Some(local) = local else {
        return Ok(None);
    };
    let metadata = cluster
        .refresh_stream(stream)
        .await
        .map_err(|e| e.to_string())?;
    let members = cluster.list_brokers().await.map_err(|e| e.to_string())?;
    let owners: Vec<_> = metadata.streamlets.iter().map(|p| p.owner).collect();
    let mut copies = std::collections::HashMap::new();
    let mut total = 0usize;
    for set in metadata.streamlets.iter().flat_map(|p| &p.replication) {
        for backup in &set.backups {
            *copies.entry(*backup).or_insert(0usize) += 1;
            total += 1;
        }
    }
    let pid_of = |server| {
        let addr = members
            .iter()
            .find(|m| m.server_id == server)
            .map(|m| m.rpc_addr.clone())?;
        local
            .brokers()
            .find(|b| b.rpc_addr.to_string() == addr)
            .and_then(|b| b.pid())
    };
    let mut backups = Backups::default();
    let mut pure_copies = 0usize;
    for (server, held) in &copies {
        if owners.contains(server) {
            backups.copies_on_owners += held;
        } else if let Some(pid) = pid_of(*server) {
            backups.pids.push(pid);
            pure_copies += held;
        }
    }
    backups.share = if total == 0 {
        0.0
    } else {
        pure_copies as f64 / total as f64
    };
    let busy = owners
        .iter()
        .chain(copies.keys())
        .collect::<std::collections::HashSet<_>>()
        .len();
    backups.idle = local.brokers().count().saturating_sub(busy);
    Ok(Some(backups))
}

/// CPU of every role at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuSnapshot {
    pub primaries: CpuTime,
    pub others: CpuTime,
    /// The brokers that hold copies and own nothing ([`Backups`]; part of `others`).
    pub backups: CpuTime,
    /// Their software NIC threads (part of `backups`).
    pub backups_nic: CpuTime,
    pub client: CpuTime,
}

impl CpuSnapshot {
    pub fn take(roles: &Roles) -> Self {
        let (primaries, others) = roles.cpu();
        Self {
            primaries,
            others,
            backups: roles.backup_cpu(),
            backups_nic: roles.nic_cpu(),
            client: own_cpu_time(),
        }
    }

    pub fn since(self, before: CpuSnapshot) -> CpuSnapshot {
        CpuSnapshot {
            primaries: self.primaries - before.primaries,
            others: self.others - before.others,
            backups: self.backups - before.backups,
            backups_nic: self.backups_nic - before.backups_nic,
            client: self.client - before.client,
        }
    }
}
