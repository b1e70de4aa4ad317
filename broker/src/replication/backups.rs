//! This primary's connections to its backups: the replica control RPCs (open, close,
//! set-epoch, free) on each backup's RPC port, and one writer per backup for the data.

use super::transport::rpc::RpcWriter;
use super::transport::tcp::NicWriter;
use super::transport::{ReplicaWriter, TransportError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_config::{OneSidedTransport, ReplicationMode};
use tailstream_net::RpcClientConfig;
use tailstream_stubs::BackupClient;
use tailstream_wire::ServerId;
use tailstream_wire::messages::{
    BufferDescriptor, ReplicaCloseRequest, ReplicaFreeRequest, ReplicaOpenRequest,
    ReplicaSetEpochRequest,
};

/// How data reaches backups, decided once at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritePath {
    /// One-sided writes to the backup's software NIC over TCP.
    Tcp,
    /// One-sided RDMA WRITE (feature `rdma`).
    Rdma,
    /// The RPC baseline.
    Rpc,
}

impl WritePath {
    pub fn from_config(mode: ReplicationMode, transport: OneSidedTransport) -> Self {
        match (mode, transport) {
            (ReplicationMode::Rpc, _) => WritePath::Rpc,
            (ReplicationMode::OneSided, OneSidedTransport::Tcp) => WritePath::Tcp,
            (ReplicationMode::OneSided, OneSidedTransport::Rdma) => WritePath::Rdma,
        }
    }
}

#[derive(Debug)]
pub struct Backups {
    path: WritePath,
    /// The control calls (and, in RPC mode, the writes) go through it; recovery reads and
    /// adopts through it too.
    client: Arc<BackupClient>,
    control_timeout: Duration,
    /// How often an otherwise silent one-sided connection sends a keepalive.
    keepalive: Duration,
    /// One writer per backup, keyed by (this broker's incarnation, backup): a writer speaks
    /// for the incarnation that connected it, and backups refuse a fenced one's writes, so a
    /// broker that comes back as a new generation must not reuse its old writers.
    writers: Mutex<HashMap<(ServerId, ServerId), Arc<dyn ReplicaWriter>>>,
}

impl Backups {
    /// `idle_timeout` is the backups' listener idle timeout: connections to them are kept alive
    /// well within it.
    pub fn new(path: WritePath, control_timeout: Duration, idle_timeout: Duration) -> Self {
        let keepalive = idle_timeout / 4;
        // Kept alive: a broken RPC-mode writer would count its backup's replicas as lost.
        let client = Arc::new(BackupClient::new(RpcClientConfig {
            requests_in_flight_max: 4096,
            frame_body_bytes_max: 64 << 20,
            connect_timeout_ms: control_timeout.as_millis() as u64,
            request_timeout_ms: control_timeout.as_millis() as u64,
            keepalive_ms: keepalive.as_millis() as u64,
        }));
        Self {
            path,
            client,
            control_timeout,
            keepalive,
            writers: Mutex::new(HashMap::new()),
        }
    }

    /// The backup stub: what recovery reads and adopts through.
    pub fn client(&self) -> Arc<BackupClient> {
        self.client.clone()
    }

    /// Opens a replica on the backup at `addr` and returns its key and the writer for it.
    pub async fn open(
        &self,
        backup: ServerId,
        addr: &str,
        request: &ReplicaOpenRequest,
    ) -> Result<(u64, Arc<dyn ReplicaWriter>), String> {
        let descriptor = self
            .client
            .open(addr, request)
            .await
            .map_err(|e| e.to_string())?;
        let writer = self
            .writer(backup, addr, &descriptor, request.primary)
            .await
            .map_err(|e| e.to_string())?;
        writer
            .register(descriptor.key, &descriptor)
            .map_err(|e| e.to_string())?;
        Ok((descriptor.key, writer))
    }

    /// The live writer to `backup`, connecting one if there is none.
    async fn writer(
        &self,
        backup: ServerId,
        addr: &str,
        descriptor: &BufferDescriptor,
        primary: ServerId,
    ) -> Result<Arc<dyn ReplicaWriter>, TransportError> {
        if let Some(writer) = self.cached(primary, backup) {
            return Ok(writer);
        }
        let writer: Arc<dyn ReplicaWriter> = match self.path {
            WritePath::Tcp => Arc::new(
                NicWriter::connect(
                    &descriptor.nic_addr,
                    primary,
                    descriptor.nic_ticket,
                    self.control_timeout,
                    self.keepalive,
                )
                .await?,
            ),
            WritePath::Rpc => {
                let client = self
                    .client
                    .connection(addr)
                    .await
                    .map_err(|e| TransportError::Broken(e.to_string()))?;
                Arc::new(RpcWriter::new(client, primary))
            }
            WritePath::Rdma => {
                return Err(TransportError::Broken(
                    "rdma writes are not available in this build".into(),
                ));
            }
        };
        let mut writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        // Writers of an earlier incarnation of this broker are of no use any more.
        writers.retain(|(speaks_for, _), _| *speaks_for == primary);
        // Another replicator may have connected meanwhile: keep one writer per backup.
        let writer = match writers.get(&(primary, backup)) {
            Some(existing) if !existing.is_broken() => existing.clone(),
            _ => {
                writers.insert((primary, backup), writer.clone());
                writer
            }
        };
        Ok(writer)
    }

    fn cached(&self, primary: ServerId, backup: ServerId) -> Option<Arc<dyn ReplicaWriter>> {
        let writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        writers
            .get(&(primary, backup))
            .filter(|w| !w.is_broken())
            .cloned()
    }

    /// Forgets `backup`'s connections (it failed; a later open reconnects).
    pub fn forget(&self, backup: ServerId, addr: Option<&str>) {
        self.writers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(_, to), _| *to != backup);
        if let Some(addr) = addr {
            self.client.forget(addr);
        }
    }

    pub async fn close(&self, addr: &str, request: &ReplicaCloseRequest) -> Result<(), String> {
        self.client
            .close(addr, request)
            .await
            .map_err(|e| e.to_string())
    }

    pub async fn set_epoch(
        &self,
        addr: &str,
        request: &ReplicaSetEpochRequest,
    ) -> Result<(), String> {
        self.client
            .set_epoch(addr, request)
            .await
            .map_err(|e| e.to_string())
    }

    pub async fn free(&self, addr: &str, request: &ReplicaFreeRequest) -> Result<(), String> {
        self.client
            .free(addr, request)
            .await
            .map_err(|e| e.to_string())
    }
}
