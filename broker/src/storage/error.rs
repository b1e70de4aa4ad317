//! Why a storage operation was refused, and the status each reason is answered with.

use tailstream_wire::{BatchSequence, GroupId, LogId, SegmentId, Status};
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
    #[error("batch sequence {0} was appended long ago and its location is forgotten")]
    DuplicateSequence(BatchSequence),
    #[error(
        "the log digest of {live_segments} segments does not fit a segment: raise segment_size_bytes or lower retention"
    )]
    DigestTooLarge { live_segments: usize },
    #[error("{bytes} appended bytes are still being replicated; retry shortly")]
    ReplicationBacklog { bytes: u64 },
}

impl StorageError {
    pub fn status(&self) -> Status {
        match self {
            StorageError::NotOwner => Status::NotOwner,
            StorageError::UnknownLog(_) => Status::UnknownLog,
            StorageError::UnknownGroup(_) => Status::UnknownGroup,
            StorageError::GroupRetired(_) => Status::GroupRetired,
            StorageError::UnknownSegment(_) => Status::UnknownSegment,
            StorageError::PositionOutOfRange { .. } => Status::PositionOutOfRange,
            StorageError::Backpressure { .. } => Status::Backpressure,
            StorageError::BatchTooLarge { .. } => Status::BatchTooLarge,
            StorageError::OutOfOrderSequence { .. } => Status::OutOfOrderSequence,
            StorageError::DuplicateSequence(_) => Status::DuplicateSequence,
            StorageError::ReplicationBacklog { .. } => Status::Busy,
            StorageError::DigestTooLarge { .. } => Status::Internal,
        }
    }
}
