//! What a remote call can end in, other than success.

use tailstream_wire::{DecodeError, Status};
use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum RpcError {
    /// Could not connect, or the connection broke: the request may or may not have been
    /// executed. Retry only what is idempotent.
    #[error("connection to {addr} failed: {reason}")]
    Connection { addr: String, reason: String },
    /// No answer within the deadline; the connection is dropped.
    #[error("request to {addr} timed out after {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    /// The connection's in-flight window is full; nothing was sent.
    #[error("connection to {addr} has no free request slot")]
    Busy { addr: String },
    /// The server answered with an error status.
    #[error("{status}: {message}")]
    Status { status: Status, message: String },
    /// The server's answer could not be decoded.
    #[error("malformed response: {0}")]
    Decode(#[from] DecodeError),
}

impl RpcError {
    /// The status the server answered with, if it answered.
    pub fn status(&self) -> Option<Status> {
        match self {
            RpcError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Sending the same request again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            RpcError::Connection { .. } | RpcError::Timeout { .. } | RpcError::Busy { .. } => true,
            RpcError::Status { status, .. } => status.is_retryable(),
            RpcError::Decode(_) => false,
        }
    }

    /// The request never got a verdict from the server (it may have been executed).
    pub fn is_transport(&self) -> bool {
        matches!(self, RpcError::Connection { .. } | RpcError::Timeout { .. })
    }
}
