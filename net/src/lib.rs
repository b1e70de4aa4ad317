//! tailstream-net: frames over TCP, both directions. It knows frames, not what they mean.
//!
//! - [`server`]: the accept loop (bounded connections), one reader and one writer task per
//!   connection, requests dispatched *in arrival order* to a [`server::Service`], whose reply is
//!   either ready or a future; bounded requests in flight per connection; clean shutdown.
//! - [`client`]: [`client::RpcClient`], a pipelined connection: many requests in flight,
//!   answers matched by request id, every pending call failed when the connection dies.
//! - [`pool`]: one `RpcClient` per address, reconnecting on demand.
//! - [`error`]: [`RpcError`], what a caller of a remote operation can get back.

pub mod client;
pub mod error;
pub mod pool;
pub mod server;
mod write;

pub use client::{PendingCall, RpcClient, RpcClientConfig};
pub use error::RpcError;
pub use pool::RpcPool;
pub use server::{Reply, Request, Response, ServerLimits, Service};
