//! Access control rules as a request is checked against them: which of the cluster's rules
//! (`tailstream acl add`) are a user's, and whether they allow an operation on a resource.
//! Pure: the Kafka listener, the native broker listener and the coordinator each get the
//! rules their own way and check every request here.

use std::sync::Arc;
use tailstream_wire::messages::{AclOperation, AclPattern, AclResource, AclRule};

/// The cluster resource's only name (as Kafka names it).
pub const CLUSTER: &str = "kafka-cluster";

/// The rules of `rules` that apply to `user`: its own, and `User:*`'s.
pub fn rules_of(rules: &[AclRule], user: &str) -> Arc<[AclRule]> {
    rules
        .iter()
        .filter(|rule| match rule.principal.strip_prefix("User:") {
            Some(named) => named == "*" || named == user,
            None => false,
        })
        .cloned()
        .collect()
}

/// What one request may do.
#[derive(Clone, Debug)]
pub enum Access {
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
        Access::Rules(rules_of(&rules, user))
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
