//! `tailstream acl add|remove|list`: the access control rules brokers enforce on Kafka
//! clients that authenticated (`kafka.sasl_mechanisms`): a rule lets a principal do one
//! operation on the topics, groups or cluster it names. Brokers apply a change within 5 s.

use clap::{Args, Subcommand};
use tailstream_config::Config;
use tailstream_wire::messages::{AclOperation, AclPattern, AclResource, AclRule};

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Add a rule.
    Add(RuleArgs),
    /// Remove a rule (named exactly as it was added).
    Remove(RuleArgs),
    /// Every rule: principal, operation, resource, name, pattern.
    List,
}

#[derive(Args, Debug)]
pub struct RuleArgs {
    /// Who: `User:NAME`, or `User:*` for every authenticated user.
    #[arg(long)]
    principal: String,
    /// What: all, read, write, create, delete, alter, describe or idempotent-write.
    #[arg(long)]
    operation: String,
    /// On a topic (`*`: every topic).
    #[arg(long, group = "resource")]
    topic: Option<String>,
    /// On a consumer group (`*`: every group).
    #[arg(long, group = "resource")]
    group: Option<String>,
    /// On the cluster (create topics, idempotent writes).
    #[arg(long, group = "resource")]
    cluster: bool,
    /// The name is a prefix: every topic or group whose name starts with it.
    #[arg(long)]
    prefixed: bool,
}

impl RuleArgs {
    fn rule(self) -> Result<AclRule, String> {
        let operation = AclOperation::from_name(&self.operation).ok_or_else(|| {
            let names: Vec<&str> = AclOperation::ALL.iter().map(|op| op.name()).collect();
            format!(
                "operation {:?}: one of {}",
                self.operation,
                names.join(", ")
            )
        })?;
        let (resource, name) = match (self.topic, self.group, self.cluster) {
            (Some(topic), None, false) => (AclResource::Topic, topic),
            (None, Some(group), false) => (AclResource::Group, group),
            (None, None, true) => (AclResource::Cluster, "kafka-cluster".to_owned()),
            _ => return Err("name one of --topic, --group or --cluster".into()),
        };
        Ok(AclRule {
            principal: self.principal,
            resource,
            pattern: if self.prefixed {
                AclPattern::Prefixed
            } else {
                AclPattern::Literal
            },
            name,
            operation,
        })
    }
}

pub async fn run(config: Config, coordinator: &str, command: AclCommand) -> Result<(), String> {
    let client = super::client(&config, coordinator);
    let coordinator = client.coordinator();
    let token = super::admin_token(&config);
    match command {
        AclCommand::Add(args) => {
            coordinator
                .change_acl(&token, args.rule()?, true)
                .await
                .map_err(|e| e.to_string())?;
            println!("rule added");
        }
        AclCommand::Remove(args) => {
            coordinator
                .change_acl(&token, args.rule()?, false)
                .await
                .map_err(|e| e.to_string())?;
            println!("rule removed");
        }
        AclCommand::List => {
            for rule in coordinator
                .list_acls(&token)
                .await
                .map_err(|e| e.to_string())?
            {
                let pattern = match rule.pattern {
                    AclPattern::Literal => "literal",
                    AclPattern::Prefixed => "prefixed",
                };
                println!(
                    "{}\t{}\t{}\t{}\t{pattern}",
                    rule.principal,
                    rule.operation.name(),
                    rule.resource.name(),
                    rule.name
                );
            }
        }
    }
    Ok(())
}
