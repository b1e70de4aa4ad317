//! The primary side of replication: every segment of every replicated log is written to R
//! backups before its bytes are acknowledged or readable.
//!
//! - [`segment`]: `ReplicatedSegment`, the pure state machine of one segment's replicas
//!   (open, coalesced writes, commit on all R, close, replacement with epochs).
//! - [`selector`]: which backup to use (random live broker, not self, not already used,
//!   not recently failed).
//! - [`transport`]: the write paths (tcp one-sided, rdma one-sided, RPC baseline).
//! - [`backups`]: the replica control RPCs and one writer per backup.
//! - [`placements`]: where each log's segments in flight have their replicas (admin view).
//! - [`replicator`]: the per-log task driving the state machines (its action issuing and its
//!   handling of lost backups and freed segments are in `replicator_actions` and
//!   `replicator_failures`).

pub mod backups;
pub mod placements;
pub mod replicator;
mod replicator_actions;
mod replicator_failures;
pub mod segment;
pub mod selector;
pub mod transport;

use crate::storage::Streamlet;
pub use replicator::{ClosedRecord, RecoveredReplicas, ReplicationContext, spawn_recovered};
pub use segment::ReplicatedSegment;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Starts a replicator for every log of every replicated streamlet created from now on.
pub async fn run_manager(
    ctx: Arc<ReplicationContext>,
    mut created: mpsc::UnboundedReceiver<Arc<Streamlet>>,
) {
    while let Some(streamlet) = created.recv().await {
        if streamlet.config().replicas == 0 {
            continue;
        }
        for log in streamlet.logs() {
            replicator::spawn(ctx.clone(), streamlet.clone(), log.id());
        }
    }
}
