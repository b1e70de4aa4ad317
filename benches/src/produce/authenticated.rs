//! `bench produce --authenticate`: the cluster it starts requires client authentication, and
//! this process's connections authenticate as a user that is no super user, allowed only by
//! rules (Create and Write on the benchmark's streams), so every produce is checked against the rules as a
//! real user's would be. What that costs next to a run without it.

use std::time::Duration;
use tailstream_auth::scram::new_credential;
use tailstream_client::CoordinatorClient;
use tailstream_config::Config;
use tailstream_net::login::{Login, set_outgoing};
use tailstream_wire::messages::{AclOperation, AclPattern, AclResource, AclRule, ScramMechanism};

const USER: &str = "bench";

/// Turns client authentication on in `config` (the cluster's), with a fresh admin token.
pub fn require(config: &mut Config) {
    config.security.client_authentication = true;
    config.security.admin_token = format!("bench-{:032x}", rand::random::<u128>());
    config.security.super_users.clear();
}

/// Creates the benchmark's user and its rule on the cluster at `coordinator`, then makes this
/// process's connections authenticate as it. Waits until brokers have listed the rule.
pub async fn log_in(config: &Config, coordinator: &str) -> Result<(), String> {
    let password = format!("{:032x}", rand::random::<u128>());
    let credentials = ScramMechanism::ALL
        .iter()
        .map(|&m| new_credential(m, &password, 4096).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    // Before the login is set: these calls carry the admin token instead.
    let admin = CoordinatorClient::new(
        coordinator,
        tailstream_stubs::coordinator::client_rpc_config(
            &config.client,
            config.producer.request_timeout_ms,
        ),
    );
    let token = &config.security.admin_token;
    admin
        .create_user(token, USER, credentials)
        .await
        .map_err(|e| format!("creating the benchmark's user: {e}"))?;
    // It creates its stream, then writes to it.
    for operation in [AclOperation::Create, AclOperation::Write] {
        let rule = AclRule {
            principal: format!("User:{USER}"),
            resource: AclResource::Topic,
            pattern: AclPattern::Prefixed,
            name: "bench-".into(),
            operation,
        };
        admin
            .change_acl(token, rule, true)
            .await
            .map_err(|e| format!("adding the benchmark's rules: {e}"))?;
    }
    set_outgoing(Some(Login::new(USER, &password, ScramMechanism::Sha256)));
    // Brokers list the rules every 5 s; the first produce must find this one.
    tokio::time::sleep(tailstream_identity::REFRESH_EVERY + Duration::from_secs(1)).await;
    Ok(())
}
