//! Access control on the Kafka listener: what an authenticated user may do, by the
//! coordinator's rules (`tailstream acl add`). Where authentication is off there are no users
//! and nothing is checked; a super user (`kafka.super_users`) may do everything; anyone else
//! may do only what a rule allows.
//!
//! The rules are listed from the coordinator at first use and then every `REFRESH_EVERY` in
//! the background, so checking a request never waits on the coordinator; a broker that could
//! not list them for `STALE_USABLE_FOR` allows nothing (it fails closed).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_auth::Principal;
use tailstream_stubs::CoordinatorClient;
use tailstream_wire::messages::{AclOperation, AclPattern, AclResource, AclRule};
use tokio::sync::watch;

/// How often the rules are listed again: a rule added or removed takes effect within it.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// How long rules are used while they cannot be listed again.
const STALE_USABLE_FOR: Duration = Duration::from_secs(300);
/// The cluster resource's only name (as Kafka names it).
pub(crate) const CLUSTER: &str = "kafka-cluster";

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
        let mine: Arc<[AclRule]> = self
            .rules
            .iter()
            .filter(|rule| match rule.principal.strip_prefix("User:") {
                Some(named) => named == "*" || named == user,
                None => false,
            })
            .cloned()
            .collect();
        // Bounded by the users who connected since the last listing.
        by_user.insert(user.to_owned(), mine.clone());
        mine
    }
}

/// What one request may do.
#[derive(Clone, Debug)]
pub(crate) enum Access {
    /// Authentication is off, or a super user.
    Everything,
    /// An authenticated user: what these rules (its own and `User:*`'s) allow.
    Rules(Arc<[AclRule]>),
    /// The rules could not be had: nothing.
    Nothing,
}

impl Access {
    pub fn allows(&self, operation: AclOperation, resource: AclResource, name: &str) -> bool {
        match self {
            Access::Everything => true,
            Access::Nothing => false,
            Access::Rules(rules) => rules
                .iter()
                .any(|rule| rule_allows(rule, operation, resource, name)),
        }
    }

    pub fn topic(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, AclResource::Topic, name)
    }

    pub fn group(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, AclResource::Group, name)
    }

    /// Whether a topic may be created: Create on it, or on the cluster.
    pub fn may_create_topic(&self, name: &str) -> bool {
        self.topic(AclOperation::Create, name)
            || self.allows(AclOperation::Create, AclResource::Cluster, CLUSTER)
    }

    /// Whether a producer id may be had (Kafka 3's rule): IdempotentWrite on the cluster, or
    /// Write on any topic.
    pub fn may_write_idempotently(&self) -> bool {
        match self {
            Access::Everything => true,
            Access::Nothing => false,
            Access::Rules(rules) => rules.iter().any(|rule| {
                rule_allows(
                    rule,
                    AclOperation::IdempotentWrite,
                    AclResource::Cluster,
                    CLUSTER,
                ) || (rule.resource == AclResource::Topic
                    && matches!(rule.operation, AclOperation::Write | AclOperation::All))
            }),
        }
    }
}

/// Whether `rule` (already known to be the user's) allows `operation` on the resource.
fn rule_allows(rule: &AclRule, operation: AclOperation, resource: AclResource, name: &str) -> bool {
    let named = match rule.pattern {
        AclPattern::Literal => rule.name == "*" || rule.name == name,
        AclPattern::Prefixed => name.starts_with(&rule.name),
    };
    let operates = rule.operation == AclOperation::All
        || rule.operation == operation
        || (operation == AclOperation::Describe
            && matches!(
                rule.operation,
                AclOperation::Read
                    | AclOperation::Write
                    | AclOperation::Delete
                    | AclOperation::Alter
            ));
    rule.resource == resource && named && operates
}

#[derive(Debug)]
pub(crate) struct Authorizer {
    coordinator: Arc<CoordinatorClient>,
    super_users: HashSet<String>,
    snapshot: Mutex<Option<Arc<Snapshot>>>,
    /// One listing at a time when a request finds none yet.
    first_listing: tokio::sync::Mutex<()>,
    /// Whether listings have failed since the last that worked: then a request finding no
    /// rules is refused at once (the background refresh keeps trying), never held up on the
    /// coordinator.
    failing: std::sync::atomic::AtomicBool,
}

impl Authorizer {
    pub fn new(coordinator: Arc<CoordinatorClient>, super_users: &[String]) -> Authorizer {
        Authorizer {
            coordinator,
            super_users: super_users.iter().cloned().collect(),
            snapshot: Mutex::new(None),
            first_listing: tokio::sync::Mutex::new(()),
            failing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn current(&self) -> Option<Arc<Snapshot>> {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|snapshot| snapshot.listed.elapsed() < STALE_USABLE_FOR)
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

    /// Lists the rules now; the new snapshot, or `None` if the coordinator did not answer.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        principal: &str,
        resource: AclResource,
        pattern: AclPattern,
        name: &str,
        operation: AclOperation,
    ) -> AclRule {
        AclRule {
            principal: principal.into(),
            resource,
            pattern,
            name: name.into(),
            operation,
        }
    }

    fn access_of(user: &str, rules: Vec<AclRule>) -> Access {
        let snapshot = Snapshot {
            listed: Instant::now(),
            rules,
            by_user: Mutex::new(HashMap::new()),
        };
        Access::Rules(snapshot.for_user(user))
    }

    #[test]
    fn rules_allow_what_they_name_and_nothing_else() {
        use AclOperation::*;
        use AclPattern::*;
        use AclResource::*;
        let rules = vec![
            rule("User:alice", Topic, Literal, "clicks", Write),
            rule("User:alice", Topic, Prefixed, "logs-", Read),
            rule("User:alice", Group, Literal, "*", Read),
            rule("User:*", Topic, Literal, "public", Describe),
            rule("User:bob", Topic, Literal, "*", All),
        ];
        let alice = access_of("alice", rules.clone());
        assert!(alice.topic(Write, "clicks"));
        assert!(alice.topic(Describe, "clicks"), "Write implies Describe");
        assert!(!alice.topic(Read, "clicks"));
        assert!(alice.topic(Read, "logs-eu"));
        assert!(!alice.topic(Read, "logs"));
        assert!(alice.group(Read, "any-group"));
        assert!(alice.topic(Describe, "public"), "User:* applies to her");
        assert!(!alice.topic(Read, "public"));
        assert!(!alice.may_create_topic("clicks"));
        assert!(alice.may_write_idempotently(), "Write on a topic");
        let carol = access_of("carol", rules.clone());
        assert!(!carol.topic(Read, "clicks"));
        assert!(!carol.may_write_idempotently());
        let bob = access_of("bob", rules);
        assert!(bob.topic(Delete, "anything"));
        assert!(!bob.group(Read, "g"), "a topic rule is not a group rule");
        assert!(!Access::Nothing.topic(Read, "clicks"));
        assert!(Access::Everything.may_create_topic("clicks"));
    }
}
