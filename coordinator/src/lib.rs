//! tailstream-coordinator: the cluster's metadata authority.
//!
//! - [`metadata`]: the pure state machine: brokers (server ids with generations), streams,
//!   placement of streamlets, producer-id allocation, the assignment version. No I/O.
//! - [`persist`]: saves and loads that state as one JSON file in the data directory, atomically
//!   (write, fsync, rename), so metadata survives a coordinator restart.
//! - [`liveness`]: when each broker last heartbeated (memory only).
//! - [`service`]: the RPC service: register, heartbeat, create/describe/list streams, list
//!   brokers, allocate producer ids; pushes assignments to brokers after a change.
//! - [`server`]: wires it together: listener, admin HTTP, shutdown.

pub mod liveness;
pub mod metadata;
pub mod persist;
pub mod server;
pub mod service;
