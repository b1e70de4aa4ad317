//! Which broker process plays which role for the benchmark stream, and their CPU time.

use crate::cpu::{CpuTime, own_cpu_time, threads_cpu_time, total_cpu_time};
use tailstream_client::CoordinatorClient;
use tailstream_launcher::LocalCluster;

/// The broker processes in each role for the benchmark stream: owners of its streamlets
/// (primaries) and the others (backups, or idle).
#[derive(Debug, Default)]
pub(crate) struct Roles {
    pub primaries: Vec<u32>,
    pub others: Vec<u32>,
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

    fn nic_cpu(&self) -> CpuTime {
        self.others
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

/// CPU of every role at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuSnapshot {
    pub primaries: CpuTime,
    pub others: CpuTime,
    /// The other brokers' software NIC threads (part of `others`).
    pub others_nic: CpuTime,
    pub client: CpuTime,
}

impl CpuSnapshot {
    pub fn take(roles: &Roles) -> Self {
        let (primaries, others) = roles.cpu();
        Self {
            primaries,
            others,
            others_nic: roles.nic_cpu(),
            client: own_cpu_time(),
        }
    }

    pub fn since(self, before: CpuSnapshot) -> CpuSnapshot {
        CpuSnapshot {
            primaries: self.primaries - before.primaries,
            others: self.others - before.others,
            others_nic: self.others_nic - before.others_nic,
            client: self.client - before.client,
        }
    }
}
