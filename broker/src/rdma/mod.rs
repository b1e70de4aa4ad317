//! The rdma backend (cargo feature `rdma`): one-sided RDMA WRITE with async-rdma.
//!
//! - [`probe`]: can this process use RDMA at all (a device exists)? Start-up fails with the
//!   reason when not, unless the config allows falling back to tcp.
//! - [`backup`] (in `tailstream-backup`): the backup's side: one queue pair per primary (endpoints exchanged with the
//!   `RdmaConnect` RPC) and replica buffers registered with the device; the NIC writes into
//!   them and the backup's CPU never looks until close.
//! - [`writer`]: the primary's side, a `ReplicaWriter` issuing RDMA WRITEs from a registered
//!   staging buffer into the backup's registered regions, named by the tokens the backup
//!   returned when it opened them.
//!
//! async-rdma is GPL-3.0; a binary built with this feature is GPL-3.0 as a whole.
//!
//! Limitation: async-rdma cannot register memory it did not allocate, so an rdma replica
//! buffer is a registered anonymous region, not a pool buffer mapped from a file: a backup
//! *process* crash loses its open rdma replicas (the other R - 1 copies and the primary still
//! hold the data; closed replicas are files as always).

pub mod writer;

/// The backup's side lives with the backup (`tailstream_backup::rdma`).
pub use tailstream_backup::rdma as backup;
pub use tailstream_backup::rdma::{RdmaBackup, RegisteredBuffer, builder};
pub use writer::RdmaWriter;

/// Whether an RDMA device can be opened, or a message naming why not.
pub fn probe() -> Result<(), String> {
    match builder().build() {
        Ok(_) => Ok(()),
        Err(error) => Err(match error.kind() {
            std::io::ErrorKind::Unsupported => {
                format!("this kernel has no RDMA support ({error}); no RDMA device can exist here")
            }
            std::io::ErrorKind::NotFound => format!("no RDMA device found ({error})"),
            _ => format!("opening the RDMA device failed: {error}"),
        }),
    }
}
