//! Acknowledgements: one shared cell per batch, one cheap future per record.
//!
//! A record's ack future is the batch's cell plus the record's index in the batch, so a batch
//! of ten thousand records costs one allocation, not ten thousand.

use crate::error::ClientError;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tailstream_wire::{GroupId, LogId, RecordOffset, SegmentId, SegmentPosition, StreamletId};
use tokio::sync::Notify;

/// Where an acknowledged record is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLocation {
    /// The log of its streamlet the record went to (the producer's log there).
    pub log: LogId,
    /// The record's offset in that log.
    pub offset: RecordOffset,
    /// The group holding the record.
    pub group: GroupId,
    /// The segment holding the record, within `group`.
    pub segment: SegmentId,
    /// Position of the record's batch entry in the segment.
    pub position: SegmentPosition,
}

/// A record the broker has acknowledged (stored, and replicated if the stream says so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordAck {
    /// The streamlet the record went to.
    pub streamlet: StreamletId,
    /// Where it is stored (a retried batch is acknowledged only with where its first attempt
    /// went, which the broker checks is this very batch).
    pub location: RecordLocation,
    /// When the producer processed the broker's answer (for latency measurements).
    pub acked_at: Instant,
}

/// What a whole batch ended in.
#[derive(Clone, Debug)]
pub(crate) struct BatchAck {
    pub streamlet: StreamletId,
    pub location: RecordLocation,
    pub acked_at: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct BatchCell {
    outcome: OnceLock<Result<BatchAck, ClientError>>,
    resolved: Notify,
}

impl BatchCell {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Settles the batch; later calls are ignored (a batch is settled exactly once).
    pub fn resolve(&self, outcome: Result<BatchAck, ClientError>) {
        if self.outcome.set(outcome).is_ok() {
            self.resolved.notify_waiters();
        }
    }

    #[cfg(test)]
    pub fn is_resolved(&self) -> bool {
        self.outcome.get().is_some()
    }

    #[cfg(test)]
    pub fn outcome(&self) -> Option<&Result<BatchAck, ClientError>> {
        self.outcome.get()
    }

    pub async fn wait(&self) -> &Result<BatchAck, ClientError> {
        loop {
            let notified = self.resolved.notified();
            tokio::pin!(notified);
            // Registered before checking, so a resolve between the check and the await wakes us.
            notified.as_mut().enable();
            if let Some(outcome) = self.outcome.get() {
                return outcome;
            }
            notified.await;
        }
    }

    fn record(&self, index: u32) -> Option<Result<RecordAck, ClientError>> {
        Some(record_ack(self.outcome.get()?, index))
    }
}

fn record_ack(
    outcome: &Result<BatchAck, ClientError>,
    index: u32,
) -> Result<RecordAck, ClientError> {
    match outcome {
        Ok(batch) => {
            let l = batch.location;
            // The offset comes from the broker: checked, never wrapped.
            let location = RecordLocation {
                offset: l.offset.checked_advance(index).ok_or_else(|| {
                    ClientError::InvalidAnswer(format!(
                        "base offset {} leaves no room for record {index}",
                        l.offset.0
                    ))
                })?,
                ..l
            };
            Ok(RecordAck {
                streamlet: batch.streamlet,
                location,
                acked_at: batch.acked_at,
            })
        }
        Err(error) => Err(error.clone()),
    }
}

/// Resolves when the record is acknowledged or has definitely failed. `.await` it.
#[derive(Debug, Clone)]
pub struct AckFuture {
    cell: Arc<BatchCell>,
    index: u32,
}

impl AckFuture {
    pub(crate) fn new(cell: Arc<BatchCell>, index: u32) -> Self {
        Self { cell, index }
    }

    /// Whether `other` is a record of the same batch as this one: the two are acknowledged
    /// (or fail) together, at the same moment. Lets a caller that tracks many records keep
    /// one entry per batch instead of one per record.
    pub fn same_batch(&self, other: &AckFuture) -> bool {
        Arc::ptr_eq(&self.cell, &other.cell)
    }

    /// The outcome if it is already known.
    pub fn try_result(&self) -> Option<Result<RecordAck, ClientError>> {
        self.cell.record(self.index)
    }

    /// Waits for the outcome (what `.await` on the future itself does).
    pub async fn wait(self) -> Result<RecordAck, ClientError> {
        let outcome = self.cell.wait().await;
        record_ack(outcome, self.index)
    }
}

impl IntoFuture for AckFuture {
    type Output = Result<RecordAck, ClientError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.wait())
    }
}
