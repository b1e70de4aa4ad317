//! [`BrokerPeerClient`]: the calls made to a broker's peer listener by the coordinator (push
//! an assignment, order a rebuild) and by other brokers (ping). [`BrokerPeerApi`] is the
//! coordinator's side as a trait, so the orchestrator can be driven by scripted brokers.
//!
//! A failed rebuild blames someone ([`RebuildFault`]): the replicas the plan named (a copy
//! unreadable or corrupt on every holder: plan again from fresh listings, the target is fine),
//! the target (not the incarnation the order was for, could not make the rebuilt segments
//! durable, or no answer: choose another target for a while), or nobody (a newer rebuild of the
//! same streamlet superseded the order).

use crate::error::StubError;
use async_trait::async_trait;
use tailstream_net::{RpcClient, RpcClientConfig, RpcPool};
use tailstream_wire::messages::{
    AssignStreamletsRequest, Empty, RecoverStreamletRequest, RecoverStreamletResponse,
};
use tailstream_wire::{Opcode, Status};

/// What the coordinator asks of brokers. Each call names the broker by its peer address.
#[async_trait]
pub trait BrokerPeerApi: Send + Sync + std::fmt::Debug {
    /// Pushes the broker its full current assignment (a broker that misses it catches up
    /// through its next heartbeat).
    async fn assign(&self, addr: &str, request: &AssignStreamletsRequest) -> Result<(), StubError>;

    /// Orders a rebuild of a crashed broker's streamlet; answered once every rebuilt segment
    /// has its copies. See [`RebuildFault`] for what a refusal blames.
    async fn recover(
        &self,
        addr: &str,
        request: &RecoverStreamletRequest,
    ) -> Result<RecoverStreamletResponse, StubError>;
}

/// Whom a failed rebuild blames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebuildFault {
    /// A copy the plan named did not serve whole and verified: plan again.
    Replicas,
    /// The target could not carry it out, or did not answer: choose another target.
    Target,
    /// A newer rebuild of the streamlet superseded the order.
    Superseded,
}

impl RebuildFault {
    /// The status a broker answers a failed rebuild with, per fault.
    pub fn status(self) -> Status {
        match self {
            RebuildFault::Replicas => Status::ReplicaCorrupt,
            RebuildFault::Target => Status::Internal,
            RebuildFault::Superseded => Status::StaleEpoch,
        }
    }

    /// Whom `error`, the failure of a rebuild order, blames.
    pub fn of(error: &StubError) -> Self {
        match error.status() {
            Some(Status::ReplicaCorrupt | Status::UnknownReplica) => RebuildFault::Replicas,
            Some(Status::StaleEpoch) => RebuildFault::Superseded,
            _ => RebuildFault::Target,
        }
    }
}

/// Brokers' peer listeners, by address: one pooled connection each.
#[derive(Debug)]
pub struct BrokerPeerClient {
    pool: RpcPool,
}

impl BrokerPeerClient {
    pub fn new(config: RpcClientConfig) -> Self {
        Self {
            pool: RpcPool::new(config),
        }
    }

    /// Whether the broker at `addr` answered a ping (the pool's timeouts bound it).
    pub async fn ping(&self, addr: &str) -> bool {
        match self.pool.get(addr).await {
            Ok(client) => ping(&client).await.is_ok(),
            Err(_) => false,
        }
    }

    /// Drops the connection to `addr` (it failed; the next call reconnects).
    pub fn forget(&self, addr: &str) {
        self.pool.forget(addr);
    }
}

/// One ping over a connection the caller made (a probe wants a fresh connection, to tell a
/// dead process from a stuck pooled socket).
pub async fn ping(client: &RpcClient) -> Result<(), StubError> {
    client.call_parts(Opcode::Ping, Vec::new()).await?;
    Ok(())
}

#[async_trait]
impl BrokerPeerApi for BrokerPeerClient {
    async fn assign(&self, addr: &str, request: &AssignStreamletsRequest) -> Result<(), StubError> {
        let client = self.pool.get(addr).await?;
        let _: Empty = client.call(Opcode::AssignStreamlets, request).await?;
        Ok(())
    }

    async fn recover(
        &self,
        addr: &str,
        request: &RecoverStreamletRequest,
    ) -> Result<RecoverStreamletResponse, StubError> {
        let client = self.pool.get(addr).await?;
        Ok(client.call(Opcode::RecoverStreamlet, request).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_failure_blames_what_its_status_says() {
        for fault in [
            RebuildFault::Replicas,
            RebuildFault::Target,
            RebuildFault::Superseded,
        ] {
            let answered = StubError::refused(fault.status(), "x");
            assert_eq!(RebuildFault::of(&answered), fault);
        }
        let silent = StubError::timed_out("b:1", 10);
        assert_eq!(RebuildFault::of(&silent), RebuildFault::Target);
    }
}
