//! Why a storage operation was refused, and the status each reason is answered with.

use tailstream_wire::{
    BatchSequence, GroupId, LogId, ProducerEpoch, ProducerId, SegmentId, Status,
};
use thiserror::Error;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum StorageError {
    #[error("this broker does not own the streamlet")]
    NotOwner,
    #[error("{0} does not exist in this streamlet")]
    UnknownLog(LogId),
    #[error("{0} does not exist in this log")]
    UnknownGroup(GroupId),
    #[error("{0} was freed by retention")]
    GroupRetired(GroupId),
    #[error("{0} is not part of the group")]
    UnknownSegment(SegmentId),
    #[error("position {position} is not an entry boundary of the committed part of {segment}")]
    PositionOutOfRange { segment: SegmentId, position: u32 },
    #[error("segment memory budget of {bytes_max} bytes is full; retry later")]
    Backpressure { bytes_max: u64 },
    #[error("a batch of {batch_bytes} bytes cannot fit in an empty {segment_bytes}-byte segment")]
    BatchTooLarge {
        batch_bytes: usize,
        segment_bytes: usize,
    },
    #[error("batch sequence {got} arrived before {expected}")]
    OutOfOrderSequence {
        expected: BatchSequence,
        got: BatchSequence,
    },
    #[error(
        "{producer} at {epoch} sent {sequence} for a place in the log that holds another batch (or one too old to compare): not appended"
    )]
    SequenceClash {
        producer: ProducerId,
        epoch: ProducerEpoch,
        sequence: BatchSequence,
    },
    #[error(
        "the log keeps no state for {producer} (forgotten, or never seen) and its batch at {epoch} starts at {sequence}, not 0: not appended; the producer must move to a new epoch"
    )]
    UnknownProducer {
        producer: ProducerId,
        epoch: ProducerEpoch,
        sequence: BatchSequence,
    },
    #[error(
        "{producer} belongs to another user (the first to write under it in this log): not appended; get a producer id of your own"
    )]
    ForeignProducer { producer: ProducerId },
    #[error("{producer} at {got} is fenced: the log has seen its {current}")]
    ProducerFenced {
        producer: ProducerId,
        got: ProducerEpoch,
        current: ProducerEpoch,
    },
    #[error(
        "the log digest of {live_segments} segments does not fit a segment: raise segment_size_bytes or lower retention"
    )]
    DigestTooLarge { live_segments: usize },
    #[error("{bytes} appended bytes are still being replicated; retry shortly")]
    ReplicationBacklog { bytes: u64 },
    #[error(
        "fewer than min_insync_replicas ({required}) backups can hold a copy now (brokers are gone and none can replace them); retry later"
    )]
    NotEnoughReplicas { required: u32 },
    /// A state the code rules out was met: a bug, never the caller's fault and never fixed by
    /// retrying. Made only through `StorageError::invariant`, which makes it loud.
    #[error("internal error (a broker bug): {0}")]
    Invariant(&'static str),
    #[error("record offset {offset} is not in this log (live offsets {first}..={committed})")]
    OffsetOutOfRange {
        offset: tailstream_wire::RecordOffset,
        first: tailstream_wire::RecordOffset,
        committed: tailstream_wire::RecordOffset,
    },
    /// A replica read for recovery does not rebuild into a valid log.
    #[error("recovered segment refused: {0}")]
    Recovery(String),
}

impl StorageError {
    /// An impossible state: trips a debug assertion, is logged and counted, and answers
    /// `Internal` (which clients do not retry), never a status that means something else.
    pub fn invariant(what: &'static str) -> Self {
        metrics::counter!(crate::metrics::INVARIANT_VIOLATIONS).increment(1);
        tracing::error!(invariant = what, "storage invariant broken");
        debug_assert!(false, "storage invariant broken: {what}");
        StorageError::Invariant(what)
    }

    pub fn status(&self) -> Status {
        match self {
            StorageError::NotOwner => Status::NotOwner,
            StorageError::UnknownLog(_) => Status::UnknownLog,
            StorageError::UnknownGroup(_) => Status::UnknownGroup,
            StorageError::GroupRetired(_) => Status::GroupRetired,
            StorageError::UnknownSegment(_) => Status::UnknownSegment,
            StorageError::PositionOutOfRange { .. } | StorageError::OffsetOutOfRange { .. } => {
                Status::PositionOutOfRange
            }
            StorageError::Backpressure { .. } => Status::Backpressure,
            StorageError::BatchTooLarge { .. } => Status::BatchTooLarge,
            StorageError::OutOfOrderSequence { .. } => Status::OutOfOrderSequence,
            StorageError::SequenceClash { .. } => Status::SequenceClash,
            StorageError::ProducerFenced { .. } => Status::ProducerFenced,
            StorageError::UnknownProducer { .. } => Status::UnknownProducer,
            StorageError::ForeignProducer { .. } => Status::Forbidden,
            StorageError::ReplicationBacklog { .. } => Status::Busy,
            StorageError::NotEnoughReplicas { .. } => Status::NotEnoughReplicas,
            StorageError::DigestTooLarge { .. }
            | StorageError::Invariant(_)
            | StorageError::Recovery(_) => Status::Internal,
        }
    }
}
