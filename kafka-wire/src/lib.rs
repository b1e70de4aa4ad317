//! tailstream-kafka-wire: the Kafka wire protocol as Tailstream's Kafka listener speaks it.
//! Pure: bytes in and out, no I/O, no async (so the fuzz targets build it alone).
//!
//! - [`versions`]: which APIs are served, at which versions, with which header versions.
//! - `shapes`: each served request's body, field by field, per version.
//! - [`guard`]: walks a request against its shape, every length and count checked against the
//!   bytes left, before anything is decoded (`kafka-protocol` pre-allocates arrays from the
//!   counts on the wire).
//! - [`request`]: a frame in, the header and the decoded body out (guard first, then the
//!   crate).
//! - [`fetch_response`]: a fetch answer around the stored batches, zero-copy.
//! - [`fuzzing`]: the decoder behind one entry point, for fuzz targets and tests.

pub mod fetch_response;
pub mod fuzzing;
pub mod guard;
pub mod request;
mod shapes;
pub mod versions;

pub use fetch_response::{FetchHeader, PartitionAnswer, TopicAnswer, encode_fetch_response};
pub use guard::GuardError;
pub use request::{DecodeError, Decoded, RequestBody, RequestHeader, decode_request};
pub use versions::Api;
