//! Users and their credentials, as the coordinator keeps them and brokers look them up.
//!
//! A credential is SCRAM's (RFC 5802): a salt, an iteration count and two keys derived from
//! the salted password. The password itself never leaves the client that sets it: the CLI
//! derives these and sends them, and a broker checks a client's proof against them.

#[cfg(test)]
use super::{small_bytes, small_vec};
use crate::wire_message;
use bytes::Bytes;

crate::wire_enum! {
    /// A SCRAM mechanism. Discriminants are the wire values.
    pub enum ScramMechanism {
        Sha256 = 1,
        Sha512 = 2,
    }
}

impl ScramMechanism {
    /// The SASL mechanism name (as Kafka clients ask for it).
    pub fn sasl_name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_sasl_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL
            .iter()
            .copied()
            .find(|m| m.sasl_name().eq_ignore_ascii_case(name))
    }

    /// Bytes of the hash, and so of each key.
    pub fn key_bytes(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

wire_message! {
    /// One mechanism's credential of a user.
    pub struct ScramCredential {
        pub mechanism: ScramMechanism,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub salt: Bytes,
        pub iterations: u32,
        /// H(ClientKey): checks a client's proof.
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub stored_key: Bytes,
        /// HMAC(SaltedPassword, "Server Key"): signs the server's final message.
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub server_key: Bytes,
    }
}

wire_message! {
    /// Add a user (refused with `UserExists` if the name is taken).
    pub struct CreateUserRequest {
        /// `security.admin_token`, where the coordinator requires it.
        pub admin_token: String,
        pub name: String,
        /// One per mechanism the user may authenticate with (at least one).
        #[cfg_attr(test, proptest(strategy = "small_vec::<ScramCredential>()"))]
        pub credentials: Vec<ScramCredential>,
    }
}

wire_message! {
    pub struct DeleteUserRequest {
        pub admin_token: String,
        pub name: String,
    }
}

wire_message! {
    /// A listing of users or access control rules (`ListUsers`, `ListAcls`).
    pub struct SecurityListRequest {
        /// `security.admin_token`, where the coordinator requires it (not of brokers, which
        /// list rules on its peer listener).
        pub admin_token: String,
    }
}

wire_message! {
    /// A user as listings show it: no key material.
    pub struct UserSummary {
        pub name: String,
        #[cfg_attr(test, proptest(strategy = "small_vec::<ScramMechanism>()"))]
        pub mechanisms: Vec<ScramMechanism>,
    }
}

wire_message! {
    pub struct ListUsersResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<UserSummary>()"))]
        pub users: Vec<UserSummary>,
    }
}

wire_message! {
    /// A user's credentials; for a user that does not exist, decoys (see `known`).
    pub struct LookupCredentialsRequest {
        pub name: String,
    }
}

wire_message! {
    pub struct LookupCredentialsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<ScramCredential>()"))]
        pub credentials: Vec<ScramCredential>,
        /// False: no such user, and `credentials` are decoys derived from the cluster's secret
        /// and the name (the same from every broker), which no password matches: a client is
        /// answered as a known user with a wrong password would be.
        pub known: bool,
    }
}

crate::wire_enum! {
    /// Where a native SCRAM exchange is, as the server answered a step.
    pub enum AuthenticateOutcome {
        /// The server's first message: send the client-final message next.
        Continue = 1,
        /// Authenticated; the message is the server's final one, which the client verifies.
        Done = 2,
        /// This listener requires no authentication (a peer listener, or one with
        /// `security.client_authentication` off): nothing was checked.
        NotRequired = 3,
    }
}

wire_message! {
    /// One step of a connection's SCRAM exchange (RFC 5802): the client-first message, then
    /// the client-final one. A wrong step, a wrong proof or an unknown user is answered
    /// `AuthenticationFailed` and the connection closes.
    pub struct AuthenticateRequest {
        pub mechanism: ScramMechanism,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub message: Bytes,
    }
}

wire_message! {
    pub struct AuthenticateResponse {
        pub outcome: AuthenticateOutcome,
        #[cfg_attr(test, proptest(strategy = "small_bytes()"))]
        pub message: Bytes,
    }
}
