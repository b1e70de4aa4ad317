//! The client-side subcommands, one module each.

pub mod cluster;
pub mod consume;
pub mod dev;
pub mod produce;
pub mod stream;

use std::sync::Arc;
use tailstream_client::Cluster;
use tailstream_config::Config;

/// The cluster client every command uses.
pub fn cluster(config: &Config, coordinator: &str) -> Arc<Cluster> {
    Cluster::new(
        coordinator,
        &config.client,
        config.producer.request_timeout_ms,
    )
}
