//! tailstream-broker: one broker process.
//!
//! - [`storage`]: streamlets as MultiLogs in memory (store → streamlet → log → group →
//!   segment), idempotence tables, the segment memory budget. No I/O, no async.
//! - [`service`]: the client RPC service: decodes requests, validates record batches, appends
//!   and reads through `storage`, answers with typed statuses. Produce is appended on the
//!   connection's reader task (so pipelined batches keep their order); fetch may long-poll.
//! - [`peer_service`]: the peer RPC service, on a listener of its own: the coordinator's
//!   assignments and the replica RPCs other brokers call.
//! - [`backup`]: the backup every broker also is: replica buffers (memory-mapped files), the
//!   replica RPCs, and the one-sided endpoint of the tcp backend.
//! - [`cluster`]: the broker's side of membership: register with the coordinator, heartbeat,
//!   apply streamlet assignments.
//! - [`replication`]: the primary side of replication: per-log replicators driving the
//!   `ReplicatedSegment` state machine over a write path (tcp/rdma one-sided, or RPC).
//! - `rdma` (cargo feature `rdma`): the one-sided RDMA backend, both sides.
//! - [`metrics`]: every exported metric's name and help text, registered at start.
//! - [`server`]: wires it together: listeners, admin HTTP, retention timer, shutdown.

pub mod backup;
pub mod cluster;
pub mod metrics;
pub mod peer_service;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod replication;
pub mod server;
pub mod service;
pub mod storage;
