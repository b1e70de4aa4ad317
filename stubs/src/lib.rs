//! tailstream-stubs: one typed stub per kind of call between Tailstream's processes, in the
//! manner of RAMCloud's `*Client` classes. Nothing outside this crate names an opcode to call
//! another process; every stub answers with a typed [`StubError`].
//!
//! - [`addresses`]: [`CoordinatorAddresses`], the coordinators a process may reach and the one
//!   it tries now (moved on when it does not answer).
//! - [`error`]: [`StubError`], what a call ends in other than success: refused with a status,
//!   no verdict (retry), or fatal (the exchange itself cannot work).
//! - [`coordinator`]: [`CoordinatorClient`], what clients and front ends ask the coordinator
//!   (streams, groups, producer ids), with a cache of stream metadata.
//! - [`coordinator_peer`]: [`CoordinatorPeerClient`], what brokers tell the coordinator
//!   (register, heartbeat, suspect reports, log bounds).
//! - [`backup`]: [`BackupClient`], a primary's and a recoverer's calls to backups (open,
//!   close, free, set epoch, adopt, read, list); [`BackupApi`] is the recovery side of it as a
//!   trait, so recovery can be driven by scripted backups in tests.
//! - [`broker_peer`]: [`BrokerPeerClient`], the coordinator's and brokers' calls to a broker's
//!   peer listener (assign, recover, ping); [`BrokerPeerApi`] is it as a trait, and
//!   [`RebuildFault`] says whom a failed rebuild blames.

pub mod addresses;
pub mod backup;
pub mod broker_peer;
pub mod coordinator;
pub mod coordinator_peer;
pub mod error;

pub use addresses::CoordinatorAddresses;
pub use backup::{BackupApi, BackupClient};
pub use broker_peer::{BrokerPeerApi, BrokerPeerClient, RebuildFault};
pub use coordinator::CoordinatorClient;
pub use coordinator_peer::CoordinatorPeerClient;
pub use error::StubError;
