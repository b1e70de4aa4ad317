//! The Kafka listener of a broker: bound before the broker registers (so its address is
//! advertised), then served over the broker's data plane through the accept loop every
//! listener shares.

use crate::authenticator::Authenticator;
use crate::connection::serve_connection;
use crate::fetch_sessions::FetchSessions;
use crate::shared::{Advertised, ConnectionLimits as KafkaLimits, Kafka};
use crate::topics::Topics;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tailstream_broker::server::{FrontEnd, FrontEndContext};
use tailstream_config::KafkaConfig;
use tailstream_identity::Authorizer;
use tailstream_identity::Credentials;
use tailstream_net::{BodyBudget, ConnectionLimits, accept_loop_authenticating};
use tailstream_stubs::CoordinatorClient;
use tailstream_stubs::coordinator::client_rpc_config;
use tokio::net::TcpListener;

/// A bound Kafka listener, not yet serving.
#[derive(Debug)]
pub struct KafkaListener {
    listener: TcpListener,
    advertised: String,
    config: KafkaConfig,
}

/// Binds the Kafka listener `config` asks for (`Ok(None)` when it is disabled).
pub async fn bind(config: &KafkaConfig) -> Result<Option<KafkaListener>, String> {
    if !config.enabled {
        return Ok(None);
    }
    let listener = TcpListener::bind(config.listen_addr)
        .await
        .map_err(|e| format!("binding kafka listener {}: {e}", config.listen_addr))?;
    let bound: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    let advertised = if config.advertised_addr.is_empty() {
        bound.to_string()
    } else {
        config.advertised_addr.clone()
    };
    if Advertised::parse(&advertised).is_none() {
        return Err(format!(
            "kafka.advertised_addr {advertised:?} is not host:port"
        ));
    }
    Ok(Some(KafkaListener {
        listener,
        advertised,
        config: config.clone(),
    }))
}

impl KafkaListener {
    /// The address Kafka clients are told to use for this broker.
    pub fn advertised_addr(&self) -> &str {
        &self.advertised
    }

    /// The front end the broker starts once its data plane exists.
    pub fn into_front_end(self) -> FrontEnd {
        Box::new(move |context| Box::pin(self.serve(context)))
    }

    async fn serve(self, context: FrontEndContext) {
        let config = &context.config;
        let Some(advertised) = Advertised::parse(&self.advertised) else {
            return;
        };
        let coordinator = CoordinatorClient::new(
            &context.coordinator_peer_addr,
            client_rpc_config(&config.client, config.producer.request_timeout_ms),
        );
        let groups = CoordinatorClient::new(
            &context.coordinator_peer_addr,
            client_rpc_config(
                &config.client,
                config
                    .coordinator
                    .group_rebalance_timeout_ms_max
                    .saturating_add(config.producer.request_timeout_ms),
            ),
        );
        let group_calls = CoordinatorClient::new(
            &context.coordinator_peer_addr,
            client_rpc_config(&config.client, config.producer.request_timeout_ms),
        );
        let secured = !self.config.sasl_mechanisms.is_empty();
        // Credentials are looked up on the coordinator's peer listener (clients cannot), on a
        // connection of their own, which the rules' listings share.
        let security = CoordinatorClient::new(
            &context.coordinator_peer_addr,
            client_rpc_config(&config.client, config.producer.request_timeout_ms),
        );
        let authenticator = secured.then(|| {
            Authenticator::new(
                &self.config.sasl_mechanisms,
                Credentials::new(security.clone()),
            )
        });
        let authorizer = secured.then(|| {
            let authorizer = Arc::new(Authorizer::new(security, &self.config.super_users));
            tokio::spawn(authorizer.clone().refresh(context.shutdown.clone()));
            authorizer
        });
        let kafka = Arc::new(Kafka {
            authenticator,
            authorizer,
            groups,
            group_calls,
            plane: context.plane,
            cluster: context.cluster,
            topics: Topics::new(
                coordinator.clone(),
                &self.config,
                config.stream_defaults.clone(),
            ),
            coordinator,
            broker: config.broker.clone(),
            advertised,
            quotas: crate::quotas::Quotas::new(
                self.config.quota_produce_bytes_per_second,
                self.config.quota_fetch_bytes_per_second,
            ),
            fetch_sessions: std::sync::Mutex::new(FetchSessions::new(
                self.config.fetch_sessions_max as usize,
                self.config.fetch_session_partitions_max as usize,
            )),
        });
        let listeners = &config.listeners;
        let limits = KafkaLimits {
            request_bytes_max: self.config.request_bytes_max,
            requests_in_flight_max: self.config.requests_in_flight_per_connection_max as usize,
            idle_timeout: listeners.idle_timeout(),
            request_read_timeout: listeners.request_read_timeout(),
            handshake_timeout: listeners.handshake_timeout(),
            session_recheck: Duration::from_millis(self.config.session_recheck_ms),
            budget: BodyBudget::new("kafka", self.config.request_body_bytes_max),
            fetch_wait_max: Duration::from_millis(u64::from(config.broker.fetch_wait_ms_max)),
            decompressed_bytes_per_second: self.config.decompressed_bytes_per_second_per_connection,
        };
        let connections = ConnectionLimits {
            connections_max: self.config.connections_max as usize,
            connections_per_address_max: listeners.connections_per_address_max as usize,
        };
        // With authentication, a connection is unproven until it authenticated: a full
        // listener makes room for a new one by closing an unproven one.
        let tls = tailstream_net::tls::listener(tailstream_net::tls::Facing::Clients);
        accept_loop_authenticating(
            self.listener,
            "kafka",
            connections,
            context.shutdown,
            secured,
            move |stream, _peer, standing| {
                serve_connection(stream, tls.clone(), kafka.clone(), limits.clone(), standing)
            },
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_addresses_split_at_the_last_colon() {
        assert_eq!(
            Advertised::parse("127.0.0.1:9092"),
            Some(Advertised {
                host: "127.0.0.1".into(),
                port: 9092
            })
        );
        assert_eq!(
            Advertised::parse("[::1]:9093").map(|a| a.host),
            Some("::1".into())
        );
        assert_eq!(Advertised::parse("nohost"), None);
        assert_eq!(Advertised::parse(":9092"), None);
        assert_eq!(Advertised::parse("h:99999"), None);
    }
}
