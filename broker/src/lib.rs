//! tailstream-broker: one broker process.
//!
//! - [`storage`] (the `tailstream-storage` crate, re-exported): streamlets as MultiLogs in
//!   memory (store → streamlet → log → group →
//!   segment), idempotence tables, the segment memory budget. No I/O, no async.
//! - [`data_plane`]: produce, fetch (by position or record offset) and group listings,
//!   neutral to front ends, addressed by (stream, streamlet, ownership epoch): it admits a
//!   request only if this broker holds the streamlet at that epoch, handed over, under a live
//!   lease; produce returns a commit waiter.
//! - [`service`]: the native client RPC front end over the data plane. Produce is appended on
//!   the connection's reader task (so pipelined batches keep their order); fetch may
//!   long-poll. With client authentication, each request is checked against the rules
//!   (`tailstream-identity`) as its connection's user.
//! - [`peer_service`]: the peer RPC service, on a listener of its own served on the control
//!   runtime (pings answered on time however busy the data path): the coordinator's
//!   assignments and the replica RPCs other brokers call.
//! - [`backup`] (the `tailstream-backup` crate, re-exported): the backup every broker also
//!   is: replica buffers (memory-mapped files), the replica RPCs, and the one-sided endpoint
//!   of the tcp backend.
//! - [`cluster`]: the broker's side of membership: register with the coordinator, heartbeat,
//!   apply streamlet assignments.
//! - [`heartbeat_reports`]: what heartbeats tell the coordinator of owned logs (heads,
//!   committed ends, replica sets): only what changed, within a byte budget per heartbeat.
//! - [`term_fence`]: the newest coordinator term seen; orders of older terms are refused.
//! - [`log_bounds`]: what the coordinator durably knows of each replicated log's head and
//!   oldest kept segment (a record commits only in a head it knows; a replica is freed only
//!   past the oldest it knows).
//! - [`lease`]: the lease answered heartbeats renew, on the boot-time clock (a suspended host
//!   does not wake holding it); checked on admission and again when an ack leaves.
//! - [`pinger`]: failure detection: ping a few random peers every interval, report the silent
//!   ones to the coordinator (which checks them itself).
//! - [`recovery`]: the new owner's side of recovery: read a crashed broker's segments from
//!   its backups, rebuild the streamlet with every id, position and offset, adopt the closed
//!   copies, replicate afresh what lost one.
//! - [`replication`]: the primary side of replication: per-log replicators driving the
//!   `ReplicatedSegment` state machine over a write path (tcp/rdma one-sided, or RPC).
//! - `rdma` (cargo feature `rdma`): the one-sided RDMA backend, both sides.
//! - [`metrics`]: every exported metric's name and help text, registered at start.
//! - [`server`]: wires it together: listeners, admin HTTP, retention timer, shutdown.

/// The backup is its own crate; `backup::` paths name it.
pub use tailstream_backup as backup;
pub mod cluster;
pub mod data_plane;
pub mod heartbeat_reports;
pub mod lease;
pub mod log_bounds;
pub mod metrics;
pub mod peer_service;
pub mod pinger;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod recovery;
pub mod replication;
pub mod server;
pub mod service;
pub mod term_fence;
/// Storage is its own crate; `storage::` paths name it.
pub use tailstream_storage as storage;
