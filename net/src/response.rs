//! What a server answers a request with: a status and a body made of parts. Apart from the
//! server, so that what builds answers (sessions, the writer) does not depend on the server
//! that uses them.

use bytes::Bytes;
use tailstream_wire::messages::ErrorBody;
use tailstream_wire::{Encode, Status};

/// A response: a status and a body made of parts written back to back (so large payloads,
/// such as fetched entries, are sent without being copied into one buffer).
#[derive(Debug)]
pub struct Response {
    pub status: Status,
    pub parts: Vec<Bytes>,
}

impl Response {
    pub fn ok(body: &impl Encode) -> Self {
        Self {
            status: Status::Ok,
            parts: vec![body.to_bytes()],
        }
    }

    pub fn ok_parts(parts: Vec<Bytes>) -> Self {
        Self {
            status: Status::Ok,
            parts,
        }
    }

    pub fn empty() -> Self {
        Self {
            status: Status::Ok,
            parts: Vec::new(),
        }
    }

    /// An error status with a message for humans.
    pub fn error(status: Status, message: impl Into<String>) -> Self {
        debug_assert!(!status.is_ok(), "an error response needs an error status");
        Self {
            status,
            parts: vec![
                ErrorBody {
                    message: message.into(),
                }
                .to_bytes(),
            ],
        }
    }
}
