//! The memory an open replica is written into: a pool buffer (a memory-mapped file, written by
//! the tcp backend's software NIC or by RPC-mode writes), or, with the rdma backend, a memory
//! region registered with the RDMA device, written by the NIC itself.

use super::pool::PoolBuffer;

#[derive(Debug)]
pub enum ReplicaBuffer {
    Pool(PoolBuffer),
    #[cfg(feature = "rdma")]
    Rdma(crate::rdma::RegisteredBuffer),
}

impl ReplicaBuffer {
    /// Runs `f` on the buffer's bytes (its whole capacity).
    pub fn with_bytes<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        match self {
            ReplicaBuffer::Pool(buffer) => f(buffer.map.bytes()),
            #[cfg(feature = "rdma")]
            ReplicaBuffer::Rdma(buffer) => buffer.with_bytes(f),
        }
    }

    /// Copies `bytes` in at `offset` (RPC-mode writes). The caller checked the bounds.
    pub fn write_at(&mut self, offset: usize, bytes: &[u8]) {
        let end = offset + bytes.len();
        match self {
            ReplicaBuffer::Pool(buffer) => {
                buffer.map.bytes_mut()[offset..end].copy_from_slice(bytes);
                buffer.high_water = buffer.high_water.max(end);
            }
            #[cfg(feature = "rdma")]
            ReplicaBuffer::Rdma(buffer) => buffer.write_at(offset, bytes),
        }
    }

    /// The pool buffer, for the software NIC (which only writes pool buffers).
    pub fn pool_mut(&mut self) -> Option<&mut PoolBuffer> {
        match self {
            ReplicaBuffer::Pool(buffer) => Some(buffer),
            #[cfg(feature = "rdma")]
            ReplicaBuffer::Rdma(_) => None,
        }
    }

    pub fn pool(&self) -> Option<&PoolBuffer> {
        match self {
            ReplicaBuffer::Pool(buffer) => Some(buffer),
            #[cfg(feature = "rdma")]
            ReplicaBuffer::Rdma(_) => None,
        }
    }
}
