//! Users' credentials as this broker checks clients against them: looked up from the
//! coordinator (its peer listener) and kept for a short while, so that a client connecting
//! again costs no call, a deleted user or a changed password takes effect within
//! `FRESH_FOR`, and a coordinator failover does not stop known users from connecting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_stubs::{CoordinatorClient, StubError};
use tailstream_wire::Status;
use tailstream_wire::messages::ScramCredential;

/// How long a lookup's answer is used without asking again.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(10);
/// Past `FRESH_FOR`, an answer is still used while the coordinator cannot be asked, this long.
const STALE_USABLE_FOR: Duration = Duration::from_secs(300);
/// Users remembered at once; past it the oldest half is forgotten.
const ENTRIES_MAX: usize = 10_000;

/// A user's credentials (`None`: no such user), or why they could not be looked up.
pub(crate) type Lookup = Result<Option<Arc<Vec<ScramCredential>>>, String>;

/// When a user was looked up, and what was found.
type Cached = (Instant, Option<Arc<Vec<ScramCredential>>>);

#[derive(Debug)]
pub(crate) struct Credentials {
    coordinator: Arc<CoordinatorClient>,
    cache: Mutex<HashMap<String, Cached>>,
}

impl Credentials {
    pub fn new(coordinator: Arc<CoordinatorClient>) -> Credentials {
        Credentials {
            coordinator,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub async fn lookup(&self, user: &str) -> Lookup {
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(user)
            .cloned();
        if let Some((at, found)) = &cached
            && at.elapsed() < FRESH_FOR
        {
            return Ok(found.clone());
        }
        let found = match self.coordinator.lookup_credentials(user).await {
            Ok(credentials) => Some(Arc::new(credentials)),
            Err(StubError::Refused {
                status: Status::UnknownUser,
                ..
            }) => None,
            Err(error) => {
                return match cached {
                    Some((at, found)) if at.elapsed() < STALE_USABLE_FOR => Ok(found),
                    _ => Err(error.to_string()),
                };
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= ENTRIES_MAX && !cache.contains_key(user) {
            let mut ages: Vec<Instant> = cache.values().map(|(at, _)| *at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            cache.retain(|_, (at, _)| *at > cut);
        }
        cache.insert(user.to_owned(), (Instant::now(), found.clone()));
        Ok(found)
    }
}
