//! The backup's side of the rdma backend (cargo feature `rdma`): one queue pair per primary
//! (endpoints exchanged with the `RdmaConnect` RPC) and replica buffers registered with the
//! device; the NIC writes into them and the backup's CPU never looks until close.
//!
//! async-rdma is GPL-3.0; a binary built with this feature is GPL-3.0 as a whole.

use async_rdma::{
    ConnectionType, LocalMr, LocalMrReadAccess, LocalMrWriteAccess, MRManageStrategy,
    QueuePairEndpoint, Rdma, RdmaBuilder,
};
use bytes::Bytes;
use std::alloc::Layout;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailstream_wire::ServerId;

/// How long a primary may use a registered region's token (the region lives as long as its
/// replica; the deadline only has to outlast that).
const TOKEN_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The builder every Tailstream queue pair starts from (both sides): connections set up with
/// endpoints we exchange ourselves, memory regions allocated raw (no jemalloc arenas).
pub fn builder() -> RdmaBuilder {
    RdmaBuilder::default()
        .set_conn_type(ConnectionType::RCIBV)
        .set_mr_strategy(MRManageStrategy::Raw)
}

/// A replica buffer registered with the device.
#[derive(Debug)]
pub struct RegisteredBuffer {
    region: LocalMr,
    capacity: u32,
}

impl RegisteredBuffer {
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn with_bytes<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        let bytes = self.region.as_slice();
        f(&bytes[..self.capacity as usize])
    }

    pub fn write_at(&mut self, offset: usize, data: &[u8]) {
        let mut bytes = self.region.as_mut_slice();
        bytes[offset..offset + data.len()].copy_from_slice(data);
    }

    /// What the primary needs to write here: address, length and remote key, serialized.
    pub fn token(&self) -> Result<Bytes, String> {
        let token = self
            .region
            .token_with_timeout(TOKEN_LIFETIME)
            .ok_or("registered region has no token")?;
        serde_json::to_vec(&token)
            .map(Bytes::from)
            .map_err(|e| e.to_string())
    }
}

/// One queue pair per primary, and the regions registered for its replicas.
#[derive(Debug, Default)]
pub struct RdmaBackup {
    connections: Mutex<HashMap<ServerId, Arc<Rdma>>>,
}

impl RdmaBackup {
    /// Connects a queue pair to `primary`'s endpoint and returns ours. A primary that connects
    /// again (it lost its connection) replaces its previous queue pair.
    pub async fn accept(&self, primary: ServerId, endpoint: &[u8]) -> Result<Bytes, String> {
        let remote: QueuePairEndpoint = serde_json::from_slice(endpoint)
            .map_err(|e| format!("bad queue pair endpoint: {e}"))?;
        let rdma = builder()
            .ibv_connect(remote)
            .await
            .map_err(|e| format!("connecting the queue pair: {e}"))?;
        let ours = serde_json::to_vec(&rdma.get_qp_endpoint()).map_err(|e| e.to_string())?;
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(primary, Arc::new(rdma));
        Ok(Bytes::from(ours))
    }

    /// A zeroed region of `capacity` bytes registered on `primary`'s queue pair, or `None`
    /// when that primary does not use rdma.
    pub fn buffer_for(
        &self,
        primary: ServerId,
        capacity: u32,
    ) -> Option<Result<RegisteredBuffer, String>> {
        let rdma = self
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&primary)
            .cloned()?;
        Some((|| {
            let layout =
                Layout::from_size_align(capacity as usize, 4096).map_err(|e| e.to_string())?;
            let mut region = rdma
                .alloc_local_mr(layout)
                .map_err(|e| format!("registering a buffer: {e}"))?;
            // Registered memory is not necessarily zero; the trailer scheme needs it to be.
            region.as_mut_slice().fill(0);
            Ok(RegisteredBuffer { region, capacity })
        })())
    }
}
