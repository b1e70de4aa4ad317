//! What a client operation can fail with.

use tailstream_net::RpcError;
use tailstream_stubs::StubError;
use tailstream_wire::Status;
use thiserror::Error;

/// What a client call can fail with. [`is_retryable`](ClientError::is_retryable) says whether
/// trying again later can help; [`status`](ClientError::status) gives the server's answer.
#[derive(Debug, Clone, Error)]
pub enum ClientError {
    /// A request failed: the connection (retryable), or the server's answer (see `status`).
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// A call to the coordinator failed (see `status`, and whether it is retryable).
    #[error("coordinator: {0}")]
    Coordinator(#[from] StubError),
    /// No stream has this name: create it first.
    #[error("no stream named {0:?}")]
    UnknownStream(String),
    /// The producer's sender task is gone (the runtime is shutting down).
    #[error("the producer is closed")]
    Closed,
    /// The record can never be sent: split it, or use a stream with larger segments.
    #[error("a record of {bytes} bytes exceeds the largest batch this stream takes ({max} bytes)")]
    RecordTooLarge {
        /// The record's size with its framing.
        bytes: usize,
        /// The most a record of this stream may take.
        max: usize,
    },
    /// Retries went on for the whole delivery timeout without an ack; the record may or may
    /// not be stored.
    #[error(
        "record not acknowledged within the delivery timeout of {timeout_ms} ms (last error: {last_error})"
    )]
    DeliveryTimeout {
        /// The producer's `delivery_timeout_ms`.
        timeout_ms: u64,
        /// Why the last attempt failed.
        last_error: String,
    },
    /// The batch was sent, no verdict came back, and the producer had to move on to a new
    /// epoch before it could find out (an earlier batch timed out or clashed): the record may
    /// or may not be stored, and is not sent again, since a resend could store it twice.
    #[error("record may or may not be stored: {reason}")]
    MaybeStored {
        /// What made the producer give up on it.
        reason: String,
    },
    /// The broker refused the batch for good (see `status`).
    #[error("broker refused the batch: {status}: {message}")]
    Refused {
        /// The broker's answer.
        status: Status,
        /// The broker's explanation.
        message: String,
    },
    /// A fetched entry or batch failed its checksum: the consumer stops rather than hand out
    /// changed bytes. Report it; the data on the broker or the path to it is damaged.
    #[error("fetched data is corrupt: {0}")]
    Corrupt(String),
    /// A server answered something no correct server sends (out-of-range metadata, offsets).
    #[error("invalid answer from the cluster: {0}")]
    InvalidAnswer(String),
    /// An offset past the end of its log (records not yet written cannot be deleted).
    #[error("{0}")]
    OffsetOutOfRange(String),
    /// A setting is out of range: the message says which and why.
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl ClientError {
    /// The status a server answered with, when that is what failed.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Rpc(error) => error.status(),
            ClientError::Coordinator(error) => error.status(),
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The same operation may succeed if tried again later (the cluster was busy, moving a
    /// streamlet, rebalancing a group, or unreachable for a moment).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Rpc(error) => error.is_retryable(),
            ClientError::Coordinator(error) => error.is_retryable(),
            ClientError::Refused { status, .. } => status.is_retryable(),
            _ => false,
        }
    }
}
