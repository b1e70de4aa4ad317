//! [`BackupClient`]: the calls a primary and a recoverer make to a backup (on the backup
//! broker's peer listener). A primary opens, closes, re-epochs and frees its replicas; the
//! data itself goes over the one-sided path, not through here. A recoverer lists what a backup
//! holds (fencing crashed generations first), reads a replica's valid prefix, and adopts closed
//! replicas. [`BackupApi`] is the recovery side as a trait: the coordinator's orchestrator and
//! the broker's rebuild take it, so their loss paths can be driven by scripted backups.

use crate::error::StubError;
use async_trait::async_trait;
use tailstream_net::{RpcClient, RpcClientConfig, RpcPool};
use tailstream_wire::messages::{
    BufferDescriptor, Empty, ListReplicasRequest, ListReplicasResponse, RdmaConnectRequest,
    RdmaConnectResponse, ReadReplicaRequest, ReadReplicaResponse, ReplicaAdoptRequest,
    ReplicaCloseRequest, ReplicaFreeRequest, ReplicaOpenRequest, ReplicaSetEpochRequest,
};
use tailstream_wire::{Encode, Opcode};

/// What recovery asks of backups. Each call names the backup by its peer address.
#[async_trait]
pub trait BackupApi: Send + Sync + std::fmt::Debug {
    /// Fences the generations in `request.fence` (their writes refused from then on), then
    /// lists the replicas held.
    async fn list(
        &self,
        addr: &str,
        request: &ListReplicasRequest,
    ) -> Result<ListReplicasResponse, StubError>;

    /// A slice of a replica's valid prefix (at exactly the request's epoch).
    async fn read(
        &self,
        addr: &str,
        request: &ReadReplicaRequest,
    ) -> Result<ReadReplicaResponse, StubError>;

    /// A closed replica of a crashed primary becomes the new primary's, at a new epoch.
    async fn adopt(&self, addr: &str, request: &ReplicaAdoptRequest) -> Result<(), StubError>;
}

/// Backups, by peer address: one pooled connection each.
#[derive(Debug)]
pub struct BackupClient {
    pool: RpcPool,
}

impl BackupClient {
    pub fn new(config: RpcClientConfig) -> Self {
        Self {
            pool: RpcPool::new(config),
        }
    }

    /// The pooled connection to the backup at `addr` (the RPC replication baseline writes
    /// over it).
    pub async fn connection(&self, addr: &str) -> Result<RpcClient, StubError> {
        Ok(self.pool.get(addr).await?)
    }

    /// Drops the connection to `addr` (it failed; the next call reconnects).
    pub fn forget(&self, addr: &str) {
        self.pool.forget(addr);
    }

    async fn call_empty(
        &self,
        addr: &str,
        opcode: Opcode,
        request: &impl Encode,
    ) -> Result<(), StubError> {
        let client = self.pool.get(addr).await?;
        let _: Empty = client.call(opcode, request).await?;
        Ok(())
    }

    /// Opens a pre-zeroed replica buffer; the descriptor says where to write it.
    pub async fn open(
        &self,
        addr: &str,
        request: &ReplicaOpenRequest,
    ) -> Result<BufferDescriptor, StubError> {
        let client = self.pool.get(addr).await?;
        Ok(client.call(Opcode::ReplicaOpen, request).await?)
    }

    /// Closes a replica at its final length: the backup flushes it to disk before answering.
    pub async fn close(&self, addr: &str, request: &ReplicaCloseRequest) -> Result<(), StubError> {
        self.call_empty(addr, Opcode::ReplicaClose, request).await
    }

    /// Raises a replica's epoch (older-epoch writes are refused from then on).
    pub async fn set_epoch(
        &self,
        addr: &str,
        request: &ReplicaSetEpochRequest,
    ) -> Result<(), StubError> {
        self.call_empty(addr, Opcode::ReplicaSetEpoch, request)
            .await
    }

    /// Frees a replica the log no longer keeps.
    pub async fn free(&self, addr: &str, request: &ReplicaFreeRequest) -> Result<(), StubError> {
        self.call_empty(addr, Opcode::ReplicaFree, request).await
    }
}

/// Exchanges queue-pair endpoints with the backup behind `client`, for one-sided RDMA writes
/// (the data then goes over the queue pair, not through any stub). Over a connection the
/// caller holds: the queue pair lives as long as the writer that made it.
pub async fn rdma_connect(
    client: &RpcClient,
    request: &RdmaConnectRequest,
) -> Result<RdmaConnectResponse, StubError> {
    Ok(client.call(Opcode::RdmaConnect, request).await?)
}

#[async_trait]
impl BackupApi for BackupClient {
    async fn list(
        &self,
        addr: &str,
        request: &ListReplicasRequest,
    ) -> Result<ListReplicasResponse, StubError> {
        let client = self.pool.get(addr).await?;
        Ok(client.call(Opcode::ListReplicas, request).await?)
    }

    async fn read(
        &self,
        addr: &str,
        request: &ReadReplicaRequest,
    ) -> Result<ReadReplicaResponse, StubError> {
        let client = self.pool.get(addr).await?;
        Ok(client.call(Opcode::ReadReplica, request).await?)
    }

    async fn adopt(&self, addr: &str, request: &ReplicaAdoptRequest) -> Result<(), StubError> {
        self.call_empty(addr, Opcode::ReplicaAdopt, request).await
    }
}
