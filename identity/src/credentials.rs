//! Users' credentials as this broker checks clients against them: looked up from the
//! coordinator (its peer listener) and kept for a short while, so that a client connecting
//! again costs no call, a deleted user or a changed password takes effect for new connections
//! within `FRESH_FOR`, and a coordinator failover does not stop users seen lately from
//! connecting (a lookup waits `LOOKUP_WAIT` at most, then what was known serves).
//!
//! A name that is not a user's gets decoy credentials (the coordinator's, the same from every
//! broker; for a name no user can have, this broker's own, with no call), so the exchange goes
//! on and fails as a wrong password would. Known users and unknown names are kept apart, so
//! a flood of invented names never pushes a real user out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_auth::scram::{check_credential, decoy_credential};
use tailstream_stubs::CoordinatorClient;
use tailstream_wire::messages::{ScramCredential, ScramMechanism};

/// How long a lookup's answer is used without asking again.
pub const FRESH_FOR: Duration = Duration::from_secs(10);
/// Past `FRESH_FOR`, a known user's credentials are still used while the coordinator cannot
/// be asked, this long.
const STALE_USABLE_FOR: Duration = Duration::from_secs(300);
/// Known users remembered at once; past it the oldest half is forgotten.
const KNOWN_MAX: usize = 10_000;
/// Unknown names remembered at once; past it all are forgotten.
const UNKNOWN_MAX: usize = 1_000;
/// Longest a connection's lookup may take (a failover retries for longer: a client would run
/// out of its handshake time waiting).
const LOOKUP_WAIT: Duration = Duration::from_secs(3);

/// A user's credentials (decoys for an unknown name), or why they could not be looked up.
pub type Lookup = Result<Arc<Vec<ScramCredential>>, String>;

/// When a name was looked up, and what was found.
type Cached = (Instant, Arc<Vec<ScramCredential>>);

#[derive(Debug, Default)]
struct Cache {
    known: HashMap<String, Cached>,
    unknown: HashMap<String, Cached>,
}

#[derive(Debug)]
pub struct Credentials {
    coordinator: Arc<CoordinatorClient>,
    cache: Mutex<Cache>,
    /// Makes decoys for names no user can have (never sent to the coordinator).
    local_secret: [u8; 32],
}

impl Credentials {
    pub fn new(coordinator: Arc<CoordinatorClient>) -> Credentials {
        Credentials {
            coordinator,
            cache: Mutex::new(Cache::default()),
            local_secret: rand::random(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn lookup(&self, user: &str) -> Lookup {
        if tailstream_auth::check_user_name(user).is_err() {
            return Ok(Arc::new(
                ScramMechanism::ALL
                    .iter()
                    .map(|&m| decoy_credential(m, user, &self.local_secret))
                    .collect(),
            ));
        }
        let cached = {
            let cache = self.lock();
            cache
                .known
                .get(user)
                .or_else(|| cache.unknown.get(user))
                .cloned()
        };
        if let Some((at, found)) = &cached
            && at.elapsed() < FRESH_FOR
        {
            return Ok(found.clone());
        }
        let looked_up =
            tokio::time::timeout(LOOKUP_WAIT, self.coordinator.lookup_credentials(user)).await;
        let answer = match looked_up {
            Ok(Ok(answer)) => answer,
            failed => {
                // What was known last serves while the coordinator cannot answer (a failover),
                // unknown names' decoys too, so the two still look alike.
                return match cached {
                    Some((at, found)) if at.elapsed() < STALE_USABLE_FOR => Ok(found),
                    _ => Err(match failed {
                        Ok(Err(error)) => error.to_string(),
                        _ => format!("no answer within {} ms", LOOKUP_WAIT.as_millis()),
                    }),
                };
            }
        };
        // Checked before use, as anything from the network: a credential of the wrong size or
        // iterations out of bounds (which would cost a PLAIN check without end) is dropped.
        let mut credentials = answer.credentials;
        credentials.retain(|c| check_credential(c).is_ok());
        let found = Arc::new(credentials);
        let entry = (Instant::now(), found.clone());
        let mut cache = self.lock();
        if answer.known {
            cache.unknown.remove(user);
            if cache.known.len() >= KNOWN_MAX && !cache.known.contains_key(user) {
                let mut ages: Vec<Instant> = cache.known.values().map(|(at, _)| *at).collect();
                ages.sort_unstable();
                // `ages` holds KNOWN_MAX entries at least: its middle exists.
                let cut = ages[ages.len() / 2];
                cache.known.retain(|_, (at, _)| *at > cut);
            }
            cache.known.insert(user.to_owned(), entry);
        } else {
            cache.known.remove(user);
            if cache.unknown.len() >= UNKNOWN_MAX {
                cache.unknown.clear();
            }
            cache.unknown.insert(user.to_owned(), entry);
        }
        Ok(found)
    }
}

impl tailstream_net::scram_server::CredentialSource for Credentials {
    fn credentials<'a>(&'a self, user: &'a str) -> futures::future::BoxFuture<'a, Lookup> {
        Box::pin(self.lookup(user))
    }
}
