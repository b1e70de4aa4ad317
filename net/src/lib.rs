//! tailstream-net: frames over TCP, both directions. It knows frames, not what they mean.
//!
//! - [`listener`]: the accept loop every listener shares (native RPC, peer RPC, software NIC,
//!   admin HTTP): connections bounded in total and per remote address, closed at once beyond.
//! - [`server`]: one reader and one writer task per connection, requests dispatched *in
//!   arrival order* to a [`server::Service`], whose reply is either ready or a future; bounded
//!   requests in flight, frame read deadline, idle close with `GoAway`.
//! - [`session`]: who a connection is (the user it authenticated as), and the
//!   [`session::Authenticator`] a listener that requires authentication checks it with;
//!   [`scram_server`] is the SCRAM one, over any source of users' credentials; [`login`] is
//!   the client's side (the user a process's pooled connections authenticate as).
//! - [`budget`]: the memory budget for request bodies being received.
//! - [`control`]: a process's control runtime, a thread of its own for pings, heartbeats and
//!   probes, whose timing must not suffer when the data path is busy.
//! - [`client`]: [`client::RpcClient`], a pipelined connection: many requests in flight,
//!   answers matched by request id, every pending call failed when the connection dies.
//! - [`pool`]: one `RpcClient` per address, reconnecting on demand.
//! - [`error`]: [`RpcError`], what a caller of a remote operation can get back.
//! - [`source`]: the address outgoing connections come from (one per process in a test
//!   cluster, so partitions can be cut between processes).
//! - [`tls`]: TLS acceptors for listeners (peer listeners require a member's certificate) and
//!   the one connector a process's outgoing connections use.
//! - [`stream`]: a connection that is plain TCP or TLS, and its read and write halves.
//! - `tls_required`: the `TlsRequired` answer to a plain-text request on a TLS listener.
//! - [`metrics`]: the listener metrics' names.
//! - [`memory`]: giving the memory a burst or a flood of connections freed back to the system.
//! - [`pace`]: bytes owed beyond a rate (quotas, decompression budgets), a pure accounting.
//! - [`clock`]: the boot-time clock leases are judged on.

pub mod budget;
pub mod client;
pub mod clock;
pub mod control;
pub mod error;
pub mod listener;
pub mod login;
pub mod memory;
pub mod metrics;
pub mod pace;
pub mod pool;
mod response;
pub mod scram_server;
pub mod server;
pub mod session;
pub mod source;
pub mod stream;
pub mod tls;
mod tls_required;
mod write;

pub use budget::BodyBudget;
pub use client::{PendingCall, RpcClient, RpcClientConfig};
pub use control::ControlRuntime;
pub use error::RpcError;
pub use listener::{Closed, ConnectionLimits, Standing, accept_loop, accept_loop_authenticating};
pub use pool::RpcPool;
pub use server::{Reply, Request, Response, ServerLimits, Service};
pub use session::{Authentication, Authenticator, Session};
pub use stream::{Stream, StreamReader, StreamWriter};
