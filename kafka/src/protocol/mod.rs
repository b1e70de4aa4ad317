//! The Kafka wire protocol as this listener speaks it. Pure: no I/O, no async.
//!
//! - `versions`: which APIs are served, at which versions, with which header versions.
//! - `shapes`: each served request's body, field by field, per version.
//! - `guard`: walks a request against its shape, every length checked against the bytes left,
//!   before anything is decoded.
//! - `request`: a frame in, the header and decoded body out (guard first, then the crate).
//! - `fetch_response`: a fetch answer around the stored batches, zero-copy.

mod fetch_response;
mod guard;
mod request;
mod shapes;
mod versions;

pub use fetch_response::{PartitionAnswer, TopicAnswer, encode_fetch_response};
pub use guard::GuardError;
pub use request::{DecodeError, Decoded, RequestBody, RequestHeader, decode_request};
pub use versions::Api;
