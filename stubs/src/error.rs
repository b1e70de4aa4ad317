//! What a call to another process ends in, other than success. Three kinds, because a caller
//! acts on three different things:
//! - **refused**: the callee read the request and answered no (or not now), with a status;
//! - **retry**: no verdict came (no connection, a broken one, no answer in time, no request
//!   slot); the request may or may not have been executed, so only what is idempotent is sent
//!   again;
//! - **fatal**: the exchange itself cannot work (a malformed answer, a listener of another
//!   kind, a request the callee could not parse); sending it again changes nothing.

use tailstream_net::RpcError;
use tailstream_wire::Status;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StubError {
    /// The callee answered with this status.
    #[error("{status}: {message}")]
    Refused { status: Status, message: String },
    /// No verdict came from `addr`.
    #[error("no answer from {addr}: {reason}")]
    Retry { addr: String, reason: String },
    /// The exchange cannot work as it is.
    #[error("{0}")]
    Fatal(String),
}

impl StubError {
    /// A refusal with `status`.
    pub fn refused(status: Status, message: impl Into<String>) -> Self {
        StubError::Refused {
            status,
            message: message.into(),
        }
    }

    /// No answer from `addr` within `timeout_ms` (a caller's own deadline).
    pub fn timed_out(addr: &str, timeout_ms: u64) -> Self {
        StubError::Retry {
            addr: addr.to_string(),
            reason: format!("no answer within {timeout_ms} ms"),
        }
    }

    /// The status the callee answered with, if it answered.
    pub fn status(&self) -> Option<Status> {
        match self {
            StubError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Sending the same request again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            StubError::Retry { .. } => true,
            StubError::Refused { status, .. } => status.is_retryable(),
            StubError::Fatal(_) => false,
        }
    }

    /// No verdict came: the connection is suspect (a caller drops it before trying again).
    pub fn is_unanswered(&self) -> bool {
        matches!(self, StubError::Retry { .. })
    }

    /// Where the coordinator called says the leader is, if it answered `NotLeader` naming it.
    pub fn leader_named(&self) -> Option<&str> {
        match self {
            StubError::Refused {
                status: tailstream_wire::Status::NotLeader,
                message,
            } => tailstream_wire::messages::leader_named_in(message),
            _ => None,
        }
    }

    /// The coordinator called did not answer, or answered that it does not lead: the caller
    /// tries the next coordinator it knows.
    pub fn wants_another_coordinator(&self) -> bool {
        self.is_unanswered() || self.status() == Some(tailstream_wire::Status::NotLeader)
    }
}

impl From<RpcError> for StubError {
    fn from(error: RpcError) -> Self {
        match error {
            RpcError::Connection { addr, reason } => StubError::Retry { addr, reason },
            RpcError::Timeout { addr, timeout_ms } => StubError::Retry {
                addr,
                reason: format!("no answer within {timeout_ms} ms"),
            },
            RpcError::Busy { addr } => StubError::Retry {
                addr,
                reason: "no free request slot on the connection".into(),
            },
            // The callee could not read what this stub sent, or is not the server this stub
            // speaks to: the same request can never succeed there.
            RpcError::Status {
                status:
                    status @ (Status::UnknownOpcode | Status::Malformed | Status::UnsupportedVersion),
                message,
            } => StubError::Fatal(format!("{status}: {message}")),
            RpcError::Status { status, message } => StubError::Refused { status, message },
            RpcError::Decode(error) => StubError::Fatal(format!("malformed answer: {error}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rpc_failure_maps_to_the_kind_a_caller_acts_on() {
        let retry = StubError::from(RpcError::Timeout {
            addr: "a".into(),
            timeout_ms: 5,
        });
        assert!(retry.is_unanswered() && retry.is_retryable());
        let busy = StubError::from(RpcError::Busy { addr: "a".into() });
        assert!(busy.is_unanswered());
        let refused = StubError::from(RpcError::Status {
            status: Status::NotOwner,
            message: "moved".into(),
        });
        assert_eq!(refused.status(), Some(Status::NotOwner));
        assert!(refused.is_retryable() && !refused.is_unanswered());
        let final_no = StubError::from(RpcError::Status {
            status: Status::UnknownStream,
            message: "s".into(),
        });
        assert!(!final_no.is_retryable());
        let wrong_listener = StubError::from(RpcError::Status {
            status: Status::UnknownOpcode,
            message: "peer listener".into(),
        });
        assert!(matches!(wrong_listener, StubError::Fatal(_)));
        assert!(!wrong_listener.is_retryable());
    }
}
