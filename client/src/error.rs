//! What a client operation can fail with.

use tailstream_net::RpcError;
use tailstream_wire::Status;
use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum ClientError {
    #[error(transparent)]
    Rpc(#[from] RpcError),
    #[error("no stream named {0:?}")]
    UnknownStream(String),
    #[error("the producer is closed")]
    Closed,
    #[error("a record of {bytes} bytes exceeds the largest batch this stream takes ({max} bytes)")]
    RecordTooLarge { bytes: usize, max: usize },
    #[error(
        "record not acknowledged within the delivery timeout of {timeout_ms} ms (last error: {last_error})"
    )]
    DeliveryTimeout { timeout_ms: u64, last_error: String },
    #[error("broker refused the batch: {status}: {message}")]
    Refused { status: Status, message: String },
    #[error("fetched data is corrupt: {0}")]
    Corrupt(String),
    /// A server answered something no correct server sends (out-of-range metadata, offsets).
    #[error("invalid answer from the cluster: {0}")]
    InvalidAnswer(String),
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl ClientError {
    /// The status a server answered with, when that is what failed.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Rpc(error) => error.status(),
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The same operation may succeed if tried again later (the cluster was busy, moving a
    /// streamlet, rebalancing a group, or unreachable for a moment).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Rpc(error) => error.is_retryable(),
            ClientError::Refused { status, .. } => status.is_retryable(),
            _ => false,
        }
    }
}
