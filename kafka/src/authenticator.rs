//! What a Kafka listener that requires authentication checks clients with: the mechanisms
//! it offers, users' credentials, and the bounds on PLAIN's derivations. The exchange itself
//! is `authenticate`'s; this is apart so that the state every connection shares (`shared`)
//! does not depend on the exchange, nor the exchange on it in return.

use std::sync::Arc;
use tailstream_identity::Credentials;
use tailstream_wire::messages::ScramMechanism;
use tokio::sync::Semaphore;

/// A SASL mechanism the listener can require.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(scram) => scram.sasl_name(),
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        if name.eq_ignore_ascii_case("PLAIN") {
            return Some(Mechanism::Plain);
        }
        ScramMechanism::from_sasl_name(name).map(Mechanism::Scram)
    }
}

/// What a listener that requires authentication checks clients with.
#[derive(Debug)]
pub(crate) struct Authenticator {
    pub mechanisms: Vec<Mechanism>,
    /// Their names, as handshake answers list them.
    pub names: Vec<String>,
    pub credentials: Credentials,
    /// Makes the decoy of a user without a credential of the mechanism asked for.
    pub decoy_key: [u8; 32],
    /// PLAIN's password derivations running at once (each costs up to `ITERATIONS_MAX`
    /// HMACs): a flood of attempts waits here, then fails, instead of queueing without end.
    pub derivations: Arc<Semaphore>,
}

impl Authenticator {
    /// Whether `user` still holds the credential whose StoredKey is `stored_key`: `Some(false)`
    /// once the user is gone (its lookup gives decoys) or its password changed; `None` when
    /// that cannot be told now (the coordinator does not answer): the session carries on.
    pub async fn still_holds(&self, user: &str, stored_key: &[u8]) -> Option<bool> {
        let credentials = self.credentials.lookup(user).await.ok()?;
        Some(
            credentials
                .iter()
                .any(|c| c.stored_key.as_ref() == stored_key),
        )
    }
}

/// How long a PLAIN attempt waits for a derivation slot before it fails.
pub(crate) const DERIVATION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Authenticator {
    pub fn new(names: &[String], credentials: Credentials) -> Authenticator {
        let mechanisms: Vec<Mechanism> = names
            .iter()
            .filter_map(|n| Mechanism::from_name(n))
            .collect();
        Authenticator {
            names: mechanisms.iter().map(|m| m.name().to_owned()).collect(),
            mechanisms,
            credentials,
            decoy_key: rand::random(),
            derivations: Arc::new(Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            )),
        }
    }
}
