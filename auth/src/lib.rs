//! tailstream-auth: who a client is. Pure: no I/O, no clock; the Kafka listener and the native
//! listeners drive these exchanges over their own connections.
//!
//! - [`acl`]: which access control rules are a user's, and what they allow;
//! - [`scram`]: SCRAM-SHA-256/512: deriving a credential from a password (the CLI does, so a
//!   password never reaches the cluster), the server's exchange (with a decoy for unknown
//!   users), and a client's;
//! - [`plain`]: SASL PLAIN's message, checked against the same SCRAM credential;
//! - [`producer_binding`]: producer ids that carry their owner's mark, so a broker refuses a
//!   batch under another user's id without asking anyone;
//! - [`users`]: user names, principals, and comparing a configured token.

pub mod acl;
pub mod plain;
pub mod producer_binding;
pub mod scram;
pub mod users;

pub use users::{Principal, check_user_name, token_matches};
