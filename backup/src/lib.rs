//! tailstream-backup: the backup half of every broker, replica buffers other brokers replicate
//! into. It never parses a one-sided write; it reads what it holds only to close a replica
//! (verify and flush) and to describe it after a primary's crash (Algorithm 1).
//!
//! - [`buffer`]: what an open replica is written into (pool buffer, or rdma region).
//! - [`mapped`]: a memory-mapped file (the one `unsafe` call in Tailstream).
//! - [`pool`]: the reusable, pre-zeroed buffers replicas are written into.
//! - [`replica`]: one replica: identity, JSON sidecar, buffer while open.
//! - [`store`]: every replica held, the pool's bounds, fencing of old primary generations.
//! - [`ops`]: close (verify + flush), describe (Algorithm 1), read, RPC-mode verified writes.
//! - [`listing`]: what `ListReplicas` answers, linear in what is held (digests of each log's
//!   newest segments only).
//! - [`service`]: the replica RPCs.
//! - [`nic`]: the tcp backend's one-sided endpoint, which never parses what it places.
//! - [`nic_ticket`]: the ticket a primary must show the NIC, granted over the peer RPC.
//! - `rdma` (cargo feature `rdma`): the rdma backend's side: one queue pair per primary and
//!   replica buffers registered with the device.
//! - [`metrics`]: the names of what the backup records.

pub mod buffer;
pub mod listing;
pub mod mapped;
pub mod metrics;
pub mod nic;
pub mod nic_ticket;
pub mod ops;
pub mod pool;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod replica;
pub mod service;
pub mod store;

pub use service::BackupService;
pub use store::{BackupError, BackupLimits, BackupStore};

#[cfg(test)]
mod tests;
