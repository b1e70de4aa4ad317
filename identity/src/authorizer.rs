//! Access control on a broker's listeners (Kafka and native): what an authenticated user may do, by the
//! coordinator's rules (`tailstream acl add`). Where authentication is off there are no users
//! and nothing is checked; a super user (`kafka.super_users`, `security.super_users`) may do everything; anyone else
//! may do only what a rule allows.
//!
//! The rules are listed from the coordinator at first use and then every `REFRESH_EVERY` in
//! the background, so a check waits on the coordinator only for the first listing (`access`),
//! or not at all (`access_now`, which asks for a retry until then); a broker that could not
//! list them for `STALE_USABLE_FOR` allows nothing (it fails closed).

use crate::producer_ids::{ProducerIdCheck, ProducerIdOwners};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_auth::Principal;
pub use tailstream_auth::acl::Access;
use tailstream_auth::acl::rules_of;
use tailstream_stubs::CoordinatorClient;
use tailstream_wire::messages::AclRule;
use tokio::sync::watch;

/// How often the rules are listed again: a rule added or removed takes effect within it.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// How long rules are used while they cannot be listed again.
const STALE_USABLE_FOR: Duration = Duration::from_secs(300);

/// One listing of the rules, with each user's own rules picked out as they are needed.
#[derive(Debug)]
struct Snapshot {
    listed: Instant,
    rules: Vec<AclRule>,
    by_user: Mutex<HashMap<String, Arc<[AclRule]>>>,
}

impl Snapshot {
    fn for_user(&self, user: &str) -> Arc<[AclRule]> {
        let mut by_user = self.by_user.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rules) = by_user.get(user) {
            return rules.clone();
        }
        let mine = rules_of(&self.rules, user);
        // Bounded by the users who connected since the last listing.
        by_user.insert(user.to_owned(), mine.clone());
        mine
    }
}

#[derive(Debug)]
pub struct Authorizer {
    coordinator: Arc<CoordinatorClient>,
    super_users: HashSet<String>,
    snapshot: Mutex<Option<Arc<Snapshot>>>,
    /// One listing at a time when a request finds none yet.
    first_listing: tokio::sync::Mutex<()>,
    /// Whether listings have failed since the last that worked: then a request finding no
    /// rules is refused at once (the background refresh keeps trying), never held up on the
    /// coordinator.
    failing: std::sync::atomic::AtomicBool,
    /// Producer ids' owners, by the binding key learnt with the first listing that could.
    producer_ids: ProducerIdOwners,
}

impl Authorizer {
    pub fn new(coordinator: Arc<CoordinatorClient>, super_users: &[String]) -> Authorizer {
        Authorizer {
            coordinator,
            super_users: super_users.iter().cloned().collect(),
            snapshot: Mutex::new(None),
            first_listing: tokio::sync::Mutex::new(()),
            failing: std::sync::atomic::AtomicBool::new(false),
            producer_ids: ProducerIdOwners::default(),
        }
    }

    fn current(&self) -> Option<Arc<Snapshot>> {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|snapshot| snapshot.listed.elapsed() < STALE_USABLE_FOR)
    }

    /// What `user` may do by the rules listed last, without waiting: `None` while none were
    /// listed yet, so the caller can ask for a retry rather than refuse (nothing, once the
    /// last listing is too old to use). For a request that must be handled in arrival order (a produce).
    pub fn access_now(&self, user: &str) -> Option<Access> {
        if self.super_users.contains(user) {
            return Some(Access::Everything);
        }
        let snapshot = self
            .snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        // Rules too old to trust allow nothing, as for `access` (fails closed).
        Some(if snapshot.listed.elapsed() < STALE_USABLE_FOR {
            Access::Rules(snapshot.for_user(user))
        } else {
            Access::Nothing
        })
    }

    /// What `principal`'s request may do. Waits on the coordinator only for this broker's
    /// first listing, and not at all once a listing failed (until one works again).
    pub async fn access(&self, principal: &Principal) -> Access {
        let user = match principal {
            Principal::Anonymous => return Access::Everything,
            Principal::User(user) if self.super_users.contains(user) => {
                return Access::Everything;
            }
            Principal::User(user) => user,
        };
        let failed_lately = || self.failing.load(std::sync::atomic::Ordering::Acquire);
        let snapshot = match self.current() {
            Some(snapshot) => Some(snapshot),
            None if failed_lately() => None,
            None => {
                let _one = self.first_listing.lock().await;
                match self.current() {
                    Some(snapshot) => Some(snapshot),
                    None if failed_lately() => None,
                    None => self.list().await,
                }
            }
        };
        match snapshot {
            Some(snapshot) => Access::Rules(snapshot.for_user(user)),
            None => Access::Nothing,
        }
    }

    /// Whether `user` may write `batch` under the producer id it names (`ProducerIdOwners`).
    /// Without waiting: `KeyUnknown` until a listing has learnt the binding key.
    pub fn check_producer(&self, user: Option<&str>, batch: &[u8]) -> ProducerIdCheck {
        self.producer_ids.check(user, batch)
    }

    /// Learns the producer id binding key, if not known yet (it never changes).
    async fn learn_binding_key(&self) {
        if self.producer_ids.known() {
            return;
        }
        match self.coordinator.producer_id_binding_key().await {
            Ok(key) if self.producer_ids.learn(&key) => {}
            Ok(key) => tracing::warn!(bytes = key.len(), "the coordinator sent no binding key"),
            Err(error) => tracing::warn!(%error, "learning the producer id binding key failed"),
        }
    }

    /// Lists the rules now (and learns the binding key, the first time); the new snapshot,
    /// or `None` if the coordinator did not answer.
    async fn list(&self) -> Option<Arc<Snapshot>> {
        // On the peer listener: no admin token asked of the cluster's members.
        match self.coordinator.list_acls("").await {
            Ok(rules) => {
                let snapshot = Arc::new(Snapshot {
                    listed: Instant::now(),
                    rules,
                    by_user: Mutex::new(HashMap::new()),
                });
                *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = Some(snapshot.clone());
                self.failing
                    .store(false, std::sync::atomic::Ordering::Release);
                // After a listing that worked: a coordinator that does not answer costs the
                // first request one wait, not two.
                self.learn_binding_key().await;
                Some(snapshot)
            }
            Err(error) => {
                tracing::warn!(%error, "listing access control rules failed");
                self.failing
                    .store(true, std::sync::atomic::Ordering::Release);
                None
            }
        }
    }

    /// Lists the rules every `REFRESH_EVERY` until `shutdown`.
    pub async fn refresh(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(REFRESH_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = tailstream_net::server::shutdown_signalled(&mut shutdown) => return,
            }
            self.list().await;
        }
    }
}
