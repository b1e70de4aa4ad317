//! The client-side subcommands, one module each.

pub mod acl;
pub mod cluster;
pub mod consume;
pub mod dev;
pub mod group;
pub mod produce;
pub mod stream;
pub mod user;

use tailstream_client::Client;
use tailstream_config::Config;

/// The client every command uses: the library's own API, with the config file's client,
/// producer, consumer and stream default tables.
pub fn client(config: &Config, coordinator: &str) -> Client {
    Client::builder(coordinator).from_config(config).build()
}

/// The admin token the CLI sends with user and access control operations:
/// `$TAILSTREAM_ADMIN_TOKEN`, else the configuration's `security.admin_token` (empty: none).
pub fn admin_token(config: &Config) -> String {
    std::env::var("TAILSTREAM_ADMIN_TOKEN").unwrap_or_else(|_| config.security.admin_token.clone())
}
