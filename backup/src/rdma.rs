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
use std::sync::{Arc, Mutex, Weak};
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

/// A replica buffer registered with the device, until its primary's generation is fenced:
/// then its bytes are copied out and the region deregistered, so the NIC refuses any further
/// write into it (recovery still reads the copy).
#[derive(Debug)]
pub struct RegisteredBuffer {
    primary: ServerId,
    cell: Arc<Mutex<Region>>,
    capacity: u32,
}

#[derive(Debug)]
enum Region {
    Live(LocalMr),
    /// Deregistered at a fence; what the region held.
    Fenced(Box<[u8]>),
}

impl Region {
    /// Copies the bytes out and drops the registration (the NIC refuses the key from now on).
    fn fence(&mut self, capacity: u32) {
        if let Region::Live(region) = self {
            let copy: Box<[u8]> = region.as_slice()[..capacity as usize].into();
            *self = Region::Fenced(copy);
        }
    }
}

impl RegisteredBuffer {
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn primary(&self) -> ServerId {
        self.primary
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Region> {
        self.cell.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn with_bytes<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        match &*self.lock() {
            Region::Live(region) => f(&region.as_slice()[..self.capacity as usize]),
            Region::Fenced(copy) => f(copy),
        }
    }

    pub fn write_at(&mut self, offset: usize, data: &[u8]) {
        let range = offset..offset + data.len();
        match &mut *self.lock() {
            Region::Live(region) => region.as_mut_slice()[range].copy_from_slice(data),
            Region::Fenced(copy) => copy[range].copy_from_slice(data),
        }
    }

    /// What the primary needs to write here: address, length and remote key, serialized.
    pub fn token(&self) -> Result<Bytes, String> {
        let token = match &*self.lock() {
            Region::Live(region) => region
                .token_with_timeout(TOKEN_LIFETIME)
                .ok_or("registered region has no token")?,
            Region::Fenced(_) => return Err(format!("{} is fenced", self.primary)),
        };
        serde_json::to_vec(&token)
            .map(Bytes::from)
            .map_err(|e| e.to_string())
    }
}

#[derive(Debug, Default)]
struct Registry {
    connections: HashMap<ServerId, Arc<Rdma>>,
    /// Every region registered for a replica (dead ones are pruned as new ones come).
    regions: Vec<(ServerId, u32, Weak<Mutex<Region>>)>,
    /// Per server slot, the first generation not fenced.
    fenced_below: HashMap<u32, u32>,
}

impl Registry {
    fn is_fenced(&self, primary: ServerId) -> bool {
        self.fenced_below
            .get(&primary.index)
            .is_some_and(|below| primary.generation < *below)
    }
}

/// One queue pair per primary, and the regions registered for its replicas.
#[derive(Debug, Default)]
pub struct RdmaBackup {
    registry: Mutex<Registry>,
}

impl RdmaBackup {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connects a queue pair to `primary`'s endpoint and returns ours. A primary that connects
    /// again (it lost its connection) replaces its previous queue pair. A fenced one is
    /// refused, even if the fence came while its queue pair was being connected.
    pub async fn accept(&self, primary: ServerId, endpoint: &[u8]) -> Result<Bytes, String> {
        let remote: QueuePairEndpoint = serde_json::from_slice(endpoint)
            .map_err(|e| format!("bad queue pair endpoint: {e}"))?;
        if self.lock().is_fenced(primary) {
            return Err(format!("{primary} is fenced"));
        }
        let rdma = builder()
            .ibv_connect(remote)
            .await
            .map_err(|e| format!("connecting the queue pair: {e}"))?;
        let ours = serde_json::to_vec(&rdma.get_qp_endpoint()).map_err(|e| e.to_string())?;
        let mut registry = self.lock();
        if registry.is_fenced(primary) {
            return Err(format!("{primary} is fenced"));
        }
        registry.connections.insert(primary, Arc::new(rdma));
        Ok(Bytes::from(ours))
    }

    /// A zeroed region of `capacity` bytes registered on `primary`'s queue pair, or `None`
    /// when that primary does not use rdma.
    pub fn buffer_for(
        &self,
        primary: ServerId,
        capacity: u32,
    ) -> Option<Result<RegisteredBuffer, String>> {
        // Registered under the registry's lock, so a fence cannot miss it.
        let mut registry = self.lock();
        let rdma = registry.connections.get(&primary).cloned()?;
        if registry.is_fenced(primary) {
            return Some(Err(format!("{primary} is fenced")));
        }
        Some((|| {
            let layout =
                Layout::from_size_align(capacity as usize, 4096).map_err(|e| e.to_string())?;
            let mut region = rdma
                .alloc_local_mr(layout)
                .map_err(|e| format!("registering a buffer: {e}"))?;
            // Registered memory is not necessarily zero; the trailer scheme needs it to be.
            region.as_mut_slice().fill(0);
            let cell = Arc::new(Mutex::new(Region::Live(region)));
            registry
                .regions
                .retain(|(_, _, region)| region.strong_count() > 0);
            registry
                .regions
                .push((primary, capacity, Arc::downgrade(&cell)));
            Ok(RegisteredBuffer {
                primary,
                cell,
                capacity,
            })
        })())
    }

    /// Fences every generation of `newest`'s slot older than it, before anything is answered
    /// about their replicas: their queue pairs are dropped and every region registered for
    /// them is deregistered (its bytes kept for recovery), so a write already on its way from
    /// a fenced primary fails at the NIC instead of landing.
    pub fn fence_older_than(&self, newest: ServerId) {
        let fenced = |primary: &ServerId| {
            primary.index == newest.index && primary.generation < newest.generation
        };
        // All under the registry's lock: a second fencer waits until the regions are
        // deregistered, so neither answers about the generation while a region is live.
        let mut registry = self.lock();
        let below = registry.fenced_below.entry(newest.index).or_insert(0);
        if *below >= newest.generation {
            return;
        }
        *below = newest.generation;
        for (_, capacity, region) in registry.regions.iter().filter(|(p, _, _)| fenced(p)) {
            if let Some(region) = region.upgrade() {
                region
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .fence(*capacity);
            }
        }
        registry.regions.retain(|(primary, _, _)| !fenced(primary));
        registry.connections.retain(|primary, _| !fenced(primary));
    }
}
