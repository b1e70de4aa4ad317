//! Access control rules, kept with the metadata (one key on etcd: rules change rarely and are
//! few, at most `coordinator.acls_max`). Brokers list them and enforce them.

use super::{Metadata, MetadataError};
use serde::{Deserialize, Serialize};
use tailstream_wire::messages::{AclOperation, AclPattern, AclResource, AclRule};

/// The cluster resource's only name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// Longest resource name in a rule.
const RESOURCE_NAME_BYTES_MAX: usize = 255;

/// A rule as saved (ordered, so the list is kept sorted and free of duplicates).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StoredAcl {
    pub principal: String,
    pub resource: AclResource,
    pub pattern: AclPattern,
    pub name: String,
    pub operation: AclOperation,
}

impl StoredAcl {
    pub fn from_wire(rule: &AclRule) -> StoredAcl {
        StoredAcl {
            principal: rule.principal.clone(),
            resource: rule.resource,
            pattern: rule.pattern,
            name: rule.name.clone(),
            operation: rule.operation,
        }
    }

    pub fn to_wire(&self) -> AclRule {
        AclRule {
            principal: self.principal.clone(),
            resource: self.resource,
            pattern: self.pattern,
            name: self.name.clone(),
            operation: self.operation,
        }
    }

    /// Whether the rule can mean something: `User:NAME` or `User:*`; the cluster is named
    /// `kafka-cluster`; `*` only as a literal name.
    pub fn check(&self) -> Result<(), String> {
        match self.principal.strip_prefix("User:") {
            Some("*") => {}
            Some(user) => tailstream_auth::check_user_name(user)?,
            None => {
                return Err(format!(
                    "principal {:?}: User:NAME or User:*",
                    self.principal
                ));
            }
        }
        if self.name.is_empty() || self.name.len() > RESOURCE_NAME_BYTES_MAX {
            return Err(format!(
                "a resource name is 1 to {RESOURCE_NAME_BYTES_MAX} bytes"
            ));
        }
        if self.resource == AclResource::Cluster
            && (self.name != CLUSTER_NAME || self.pattern != AclPattern::Literal)
        {
            return Err(format!("the cluster resource is named {CLUSTER_NAME:?}"));
        }
        if self.pattern == AclPattern::Prefixed && self.name.contains('*') {
            return Err("`*` is a literal name only (every resource)".into());
        }
        Ok(())
    }
}

impl Metadata {
    /// Adds a rule (adding one already there changes nothing).
    pub fn add_acl(&mut self, rule: &AclRule, acls_max: usize) -> Result<(), MetadataError> {
        let stored = StoredAcl::from_wire(rule);
        stored.check().map_err(MetadataError::InvalidArgument)?;
        match self.acls.binary_search(&stored) {
            Ok(_) => Ok(()),
            Err(_) if self.acls.len() >= acls_max => Err(MetadataError::LimitReached(format!(
                "the cluster has {} access control rules, its limit (coordinator.acls_max)",
                self.acls.len()
            ))),
            Err(at) => {
                self.acls.insert(at, stored);
                Ok(())
            }
        }
    }

    /// Removes a rule; refused (`InvalidArgument`) if there is no such rule.
    pub fn remove_acl(&mut self, rule: &AclRule) -> Result<(), MetadataError> {
        let stored = StoredAcl::from_wire(rule);
        match self.acls.binary_search(&stored) {
            Ok(at) => {
                self.acls.remove(at);
                Ok(())
            }
            Err(_) => Err(MetadataError::InvalidArgument(
                "no such access control rule".into(),
            )),
        }
    }

    pub fn list_acls(&self) -> Vec<AclRule> {
        self.acls.iter().map(StoredAcl::to_wire).collect()
    }

    /// Checks saved rules as adding them would (a loaded file is not trusted either).
    pub fn check_acls(&self) -> Result<(), String> {
        for rule in &self.acls {
            rule.check()?;
        }
        if !self.acls.is_sorted() || self.acls.windows(2).any(|w| w[0] == w[1]) {
            return Err("access control rules out of order or repeated".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        principal: &str,
        resource: AclResource,
        name: &str,
        operation: AclOperation,
    ) -> AclRule {
        AclRule {
            principal: principal.into(),
            resource,
            pattern: AclPattern::Literal,
            name: name.into(),
            operation,
        }
    }

    #[test]
    fn rules_are_added_once_removed_and_checked() {
        let mut m = Metadata::default();
        let read = rule(
            "User:alice",
            AclResource::Topic,
            "clicks",
            AclOperation::Read,
        );
        m.add_acl(&read, 10).unwrap();
        m.add_acl(&read, 10).unwrap();
        assert_eq!(m.list_acls(), vec![read.clone()]);
        m.check_acls().unwrap();
        m.remove_acl(&read).unwrap();
        assert!(m.remove_acl(&read).is_err());
        for bad in [
            rule("alice", AclResource::Topic, "t", AclOperation::Read),
            rule("User:a/b", AclResource::Topic, "t", AclOperation::Read),
            rule("User:alice", AclResource::Topic, "", AclOperation::Read),
            rule(
                "User:alice",
                AclResource::Cluster,
                "other",
                AclOperation::Alter,
            ),
        ] {
            assert!(m.add_acl(&bad, 10).is_err(), "{bad:?}");
        }
        m.add_acl(
            &rule(
                "User:*",
                AclResource::Cluster,
                CLUSTER_NAME,
                AclOperation::IdempotentWrite,
            ),
            1,
        )
        .unwrap();
        assert!(matches!(
            m.add_acl(&read, 1),
            Err(MetadataError::LimitReached(_))
        ));
    }
}
