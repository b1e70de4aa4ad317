//! The `[security]` and `[tls]` sections: the secrets every process of a cluster shares, and
//! the files TLS is made from. Never printed whole: configs are logged.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The files of `tailstream dev --tls` and of a `--tls-dir`: the CA, and a member's
/// certificate and key.
pub const TLS_CA_FILE: &str = "ca.pem";
pub const TLS_CERT_FILE: &str = "member.pem";
pub const TLS_KEY_FILE: &str = "member.key";

/// TLS on the listeners clients and members use, and on this process's connections to them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub enabled: bool,
    pub ca_path: PathBuf,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

impl TlsConfig {
    /// TLS on, with the files of `dir` (see [`TLS_CA_FILE`]); a certificate and key only where
    /// `dir` holds them (a client's directory may hold the CA alone).
    pub fn from_dir(dir: &Path) -> Self {
        let existing = |name: &str| {
            let path = dir.join(name);
            if path.exists() { path } else { PathBuf::new() }
        };
        Self {
            enabled: true,
            ca_path: dir.join(TLS_CA_FILE),
            cert_path: existing(TLS_CERT_FILE),
            key_path: existing(TLS_KEY_FILE),
        }
    }

    /// The certificate and key, where both are set.
    pub fn identity(&self) -> Option<(&Path, &Path)> {
        (!self.cert_path.as_os_str().is_empty() && !self.key_path.as_os_str().is_empty())
            .then_some((self.cert_path.as_path(), self.key_path.as_path()))
    }
}

/// Secrets every process of a cluster shares.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    /// Required by the admin HTTP endpoints and the console, and by the coordinator's user and
    /// access control operations on its client listener; empty: not required.
    pub admin_token: String,
    /// Native clients must authenticate (SCRAM) on the brokers' and the coordinator's client
    /// listeners, and are held to the access control rules.
    pub client_authentication: bool,
    /// Users the native listeners allow everything.
    pub super_users: Vec<String>,
    /// How often an authenticated native connection checks that its user still holds the
    /// credential it proved (closed once deleted or its password changed); 0: never.
    pub session_recheck_ms: u64,
}

impl SecurityConfig {
    /// `session_recheck_ms` as a period; `None` when off.
    pub fn session_recheck(&self) -> Option<std::time::Duration> {
        (self.session_recheck_ms > 0)
            .then(|| std::time::Duration::from_millis(self.session_recheck_ms))
    }
}

/// Shortest admin token accepted.
pub const ADMIN_TOKEN_CHARS_MIN: usize = 16;

impl std::fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never printed: configs are logged.
        f.debug_struct("SecurityConfig")
            .field(
                "admin_token",
                &if self.admin_token.is_empty() {
                    ""
                } else {
                    "(set)"
                },
            )
            .field("client_authentication", &self.client_authentication)
            .field("super_users", &self.super_users)
            .field("session_recheck_ms", &self.session_recheck_ms)
            .finish()
    }
}
