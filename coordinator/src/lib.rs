//! tailstream-coordinator: the cluster's metadata authority.
//!
//! - [`metadata`]: the pure state machine: brokers (server ids with generations), streams,
//!   placement of streamlets, the producer-id ceiling, the assignment version. No I/O.
//! - [`persist`]: [`persist::MetadataStore`], where that state is saved, and its one
//!   implementation today: a JSON file in the data directory, replaced atomically.
//! - [`core`]: the live state and the one way to change it (saved off the reader tasks, one
//!   change at a time), and assignment pushes.
//! - [`liveness`]: when each broker last heartbeated (memory only).
//! - [`service`]: the RPC handlers, split by listener: clients (streams, brokers, producer
//!   ids) and peers (register, heartbeat).
//! - [`server`]: wires it together: listeners, admin HTTP, shutdown.

pub mod core;
pub mod liveness;
pub mod metadata;
pub mod persist;
pub mod server;
pub mod service;
