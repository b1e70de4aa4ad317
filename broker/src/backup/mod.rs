//! The backup half of every broker: replica buffers other brokers replicate into.
//!
//! - [`buffer`]: what an open replica is written into (pool buffer, or rdma region).
//! - [`mapped`]: a memory-mapped file (the one `unsafe` call in Tailstream).
//! - [`pool`]: the reusable, pre-zeroed buffers replicas are written into.
//! - [`replica`]: one replica: identity, JSON sidecar, buffer while open.
//! - [`store`]: every replica held, the pool's bounds, fencing of old primary generations.
//! - [`ops`]: close (verify + flush), describe (Algorithm 1), read, RPC-mode verified writes.
//! - [`service`]: the replica RPCs.
//! - [`nic`]: the tcp backend's one-sided endpoint, which never parses what it places.

pub mod buffer;
pub mod mapped;
pub mod nic;
pub mod ops;
pub mod pool;
pub mod replica;
pub mod service;
pub mod store;

pub use service::BackupService;
pub use store::{BackupError, BackupLimits, BackupStore};

#[cfg(test)]
mod tests;
