//! tailstream-storage: streamlets as MultiLogs, in memory, with no network I/O and no async.
//! The broker serves them (produce, fetch, replication, recovery); nothing here knows a
//! socket, a disk or a runtime.
//!
//! `store` (every streamlet this broker owns) → `streamlet` (a MultiLog of Q logs) → `log`
//! (append lock, head segment, groups) → `group` → `segment` (one buffer of entries and
//! trailers, written front to back). `producers` keeps the idempotence state of each log,
//! `commit_feed` queues the logs whose commit point moved (what heartbeats report), `memory`
//! the broker-wide segment budget and the reuse of freed segments' buffers, `error` the reasons
//! an operation is refused, `rebuild` makes a log again from its recovered segments (recovery),
//! keeping every id, position and offset, and `metrics` names what storage records.

pub mod commit_feed;
pub mod error;
pub mod group;
pub mod log;
mod log_read;
pub mod memory;
pub mod metrics;
pub mod producers;
mod rebuild;
pub mod segment;
pub mod store;
pub mod streamlet;

pub use error::StorageError;
pub use log::{AppendLocation, Appended, CommitPoint, Log, ReadOutcome, SegmentView};
pub use memory::SegmentMemory;
pub use producers::ProducerOwner;
pub use rebuild::{RebuildSummary, RecoveredSegment};
pub use store::Store;
pub use streamlet::Streamlet;

#[cfg(test)]
mod tests;
