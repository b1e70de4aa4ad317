//! tailstream-coordinator: the cluster's metadata authority.
//!
//! - [`metadata`]: the pure state machine: brokers (server ids with generations), streams,
//!   placement of streamlets, producer ids (unique and enciphered, epochs bumped), the
//!   assignment version. No I/O.
//! - [`persist`]: [`persist::MetadataStore`], where that state is saved: a JSON snapshot and
//!   a journal of changes in the data directory, or etcd (one key per object, every write fenced by the leader key).
//! - [`election`]: leadership on etcd: campaign, lease keep-alive, step down and campaign
//!   again; [`leader_lease`]: until when this coordinator surely still leads (nothing but a
//!   ping is answered after).
//! - [`core`]: the live state and the one way to change it (saved off the reader tasks, one
//!   change at a time), and assignment pushes.
//! - [`additions`]: recent changes that only added streamlets, so a broker is sent what it
//!   gained since the version it knows rather than its whole assignment (memory only).
//! - [`liveness`]: when each broker last heartbeated (memory only).
//! - [`detector`]: failure detection as a pure state machine (reports, probe outcomes and
//!   heartbeat silence in, probe/declare out: a refused connection declares at once, silence
//!   only with the heartbeats silent too); [`watchdog`] is its async shell (probes, heartbeat
//!   backstop, declarations), on the control runtime.
//! - [`recovery`]: the planner (pure) and the orchestrator that rebuilds a crashed broker's
//!   streamlets on the survivors.
//! - [`groups`]: consumer groups: membership (Kafka's classic group protocol, a pure state
//!   machine) and committed offsets (durable, in the data directory), behind one shell.
//! - [`metrics`]: every exported metric's name.
//! - [`migrate`]: a file-store cluster's state into etcd.
//! - [`service`]: the RPC handlers, split by listener: clients (streams, brokers, producer
//!   ids) and peers (register, heartbeat); users and rules (`service_users`), and who a
//!   client of the client listener is and what it may do (`service_access`).
//! - [`admin`]: the admin HTTP routes: JSON for operators and the console page itself.
//! - [`standby`]: what a coordinator answers while another leads: `NotLeader`, naming the
//!   leader from its warm copy of etcd ([`persist::mirror`]).
//! - [`server`]: wires it together: listeners, admin HTTP, shutdown; the peer listener and
//!   the watchdog on a control runtime of their own.

pub mod additions;
pub mod admin;
pub mod core;
pub mod detector;
pub mod election;
pub mod groups;
pub mod invariant;
pub mod leader_lease;
pub mod leadership_view;
pub mod liveness;
pub mod metadata;
pub mod metrics;
pub mod migrate;
pub mod persist;
pub mod recovery;
pub mod server;
pub mod service;
pub mod standby;
pub mod watchdog;
