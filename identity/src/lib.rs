//! tailstream-identity: who a broker's client is and what it may do, as the broker learns it
//! from the coordinator. The Kafka listener and the broker's native listener each hold one of
//! each (their super users differ: `kafka.super_users`, `security.super_users`).
//!
//! - [`credentials`]: users' SCRAM credentials, looked up from the coordinator (its peer
//!   listener) and kept for a short while; decoys for names that are no user's;
//! - [`authorizer`]: the access control rules, listed from the coordinator and refreshed in
//!   the background, turned into what one principal may do ([`Access`]);
//! - [`producer_ids`]: whether a batch's producer id is its writer's, by the binding key the
//!   authorizer learns from the coordinator after its first listing that works.

pub mod authorizer;
pub mod credentials;
pub mod producer_ids;

pub use authorizer::{Access, Authorizer, REFRESH_EVERY};
pub use credentials::{Credentials, FRESH_FOR, Lookup};
pub use producer_ids::{ProducerIdCheck, ProducerIdOwners};
