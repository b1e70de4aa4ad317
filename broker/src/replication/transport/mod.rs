//! The write path to backups, behind one trait with three implementations:
//! - [`tcp`]: one-sided writes to the backup's software NIC (the default backend);
//! - `rdma` (cargo feature `rdma`): one-sided RDMA WRITE with async-rdma;
//! - [`rpc`]: the baseline: each write is a request the backup parses, verifies and copies.
//!
//! A writer carries the writes of every replica this primary has on one backup. `write`
//! queues the write *before it returns*, so writes issued in order are performed and
//! completed in that order; the returned future resolves when the backup holds the bytes.

pub mod rpc;
pub mod tcp;

use bytes::Bytes;
use futures::future::BoxFuture;
use tailstream_wire::messages::{BufferDescriptor, ReplicaId};
use thiserror::Error;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TransportError {
    /// The connection to the backup is gone (or refused a write): its replicas are lost.
    #[error("write path to backup broken: {0}")]
    Broken(String),
}

/// Which buffer a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteTarget {
    pub replica: ReplicaId,
    pub key: u64,
}

pub type WriteFuture = BoxFuture<'static, Result<(), TransportError>>;

pub trait ReplicaWriter: Send + Sync + std::fmt::Debug {
    /// Learns what the backup said about a buffer it opened (the rdma backend keeps the
    /// region's token; the others need nothing).
    fn register(&self, _key: u64, _descriptor: &BufferDescriptor) -> Result<(), TransportError> {
        Ok(())
    }

    /// Queues `parts` (written back to back) at `offset` of the target buffer.
    fn write(&self, target: WriteTarget, offset: u32, parts: Vec<Bytes>) -> WriteFuture;

    /// The connection is gone; a new writer is needed.
    fn is_broken(&self) -> bool;
}

/// Whether one-sided RDMA can be used in this process (a build with the `rdma` feature and an
/// RDMA device), or why not.
pub fn rdma_available() -> Result<(), String> {
    #[cfg(feature = "rdma")]
    return crate::rdma::probe();
    #[cfg(not(feature = "rdma"))]
    Err("this build has no RDMA support (rebuild with `--features rdma`)".into())
}

/// A future that fails at once (for writes on a writer that cannot take them).
pub fn failed(reason: impl Into<String>) -> WriteFuture {
    let error = TransportError::Broken(reason.into());
    Box::pin(std::future::ready(Err(error)))
}
