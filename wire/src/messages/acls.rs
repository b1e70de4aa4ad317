//! Access control: which principal may do which operation on which resource. Rules only allow:
//! where authentication is on, whatever no rule allows is refused (as Kafka with
//! `allow.everyone.if.no.acl.found=false`), except for the configured super users.

#[cfg(test)]
use super::small_vec;
use crate::{wire_enum, wire_message};

wire_enum! {
    /// What a rule is about.
    pub enum AclResource {
        /// A stream (a Kafka topic).
        Topic = 1,
        /// A consumer group.
        Group = 2,
        /// The cluster itself (its name is always `kafka-cluster`).
        Cluster = 3,
    }
}

wire_enum! {
    /// How a rule's name matches a resource's.
    pub enum AclPattern {
        /// The same name, or every name when the rule's is `*`.
        Literal = 1,
        /// Every name that starts with the rule's.
        Prefixed = 2,
    }
}

wire_enum! {
    /// What a rule allows. `Describe` is implied by `Read`, `Write`, `Delete` and `Alter`.
    pub enum AclOperation {
        All = 1,
        Read = 2,
        Write = 3,
        Create = 4,
        Delete = 5,
        Alter = 6,
        Describe = 7,
        IdempotentWrite = 8,
    }
}

impl AclResource {
    pub fn name(self) -> &'static str {
        match self {
            AclResource::Topic => "topic",
            AclResource::Group => "group",
            AclResource::Cluster => "cluster",
        }
    }
}

impl AclOperation {
    pub fn name(self) -> &'static str {
        match self {
            AclOperation::All => "all",
            AclOperation::Read => "read",
            AclOperation::Write => "write",
            AclOperation::Create => "create",
            AclOperation::Delete => "delete",
            AclOperation::Alter => "alter",
            AclOperation::Describe => "describe",
            AclOperation::IdempotentWrite => "idempotent-write",
        }
    }

    pub fn from_name(name: &str) -> Option<AclOperation> {
        AclOperation::ALL
            .iter()
            .copied()
            .find(|op| op.name().eq_ignore_ascii_case(name))
    }
}

wire_message! {
    /// One rule: `principal` (`User:NAME`, or `User:*` for every authenticated user) may do
    /// `operation` on the `resource`s whose names match `name` by `pattern`.
    pub struct AclRule {
        pub principal: String,
        pub resource: AclResource,
        pub pattern: AclPattern,
        pub name: String,
        pub operation: AclOperation,
    }
}

wire_message! {
    /// Add (`AddAcl`) or remove (`RemoveAcl`) one rule.
    pub struct AclChangeRequest {
        /// `security.admin_token`, where the coordinator requires it.
        pub admin_token: String,
        pub rule: AclRule,
    }
}

wire_message! {
    pub struct ListAclsResponse {
        #[cfg_attr(test, proptest(strategy = "small_vec::<AclRule>()"))]
        pub rules: Vec<AclRule>,
    }
}
