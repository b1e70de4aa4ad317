//! What the Kafka front end's parts share: the state every connection of a broker uses, and
//! a connection's limits. Its own module so that the listener, the connections and the
//! handlers all depend on it and not on each other in a circle.

use crate::authenticator::Authenticator;
use crate::topics::Topics;
use std::sync::Arc;
use std::time::Duration;
use tailstream_broker::cluster::ClusterState;
use tailstream_broker::data_plane::DataPlane;
use tailstream_config::BrokerConfig;
use tailstream_identity::Authorizer;
use tailstream_net::BodyBudget;
use tailstream_stubs::CoordinatorClient;

/// What every Kafka connection of a broker shares.
#[derive(Debug)]
pub(crate) struct Kafka {
    pub plane: Arc<DataPlane>,
    pub cluster: Arc<ClusterState>,
    pub coordinator: Arc<CoordinatorClient>,
    /// The coordinator too, for joins and syncs: they wait for their group's rebalance, up to
    /// the coordinator's longest rebalance timeout, so these calls may take that long.
    pub groups: Arc<CoordinatorClient>,
    /// The coordinator for the group calls answered at once (heartbeats, leaves, offset
    /// commits and fetches), on a connection of their own: a client that holds a thousand
    /// joins open fills only the joins' connection, and delays nobody's commits.
    pub group_calls: Arc<CoordinatorClient>,
    pub topics: Topics,
    pub broker: BrokerConfig,
    /// Where this broker's Kafka clients are told to connect.
    pub advertised: Advertised,
    /// What clients authenticate against (`None`: authentication is off).
    pub authenticator: Option<Authenticator>,
    /// What authenticated clients may do (`None`: authentication is off, nothing is checked).
    pub authorizer: Option<Arc<Authorizer>>,
    /// Produce and fetch byte rates per principal.
    pub quotas: crate::quotas::Quotas,
    /// Fetch sessions (KIP-227), held only while a fetch begins or finishes (never across an
    /// await).
    pub fetch_sessions: std::sync::Mutex<crate::fetch_sessions::FetchSessions>,
}

/// A host and port as Kafka's Metadata and FindCoordinator answers carry them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Advertised {
    pub host: String,
    pub port: i32,
}

impl Advertised {
    /// `host:port` split at the last colon; `None` if it is not that.
    pub fn parse(addr: &str) -> Option<Self> {
        let (host, port) = addr.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        (!host.is_empty()).then(|| Advertised {
            host: host.to_owned(),
            port: i32::from(port),
        })
    }
}

/// Bounds of one Kafka connection.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionLimits {
    pub request_bytes_max: u32,
    pub requests_in_flight_max: usize,
    pub idle_timeout: Duration,
    pub request_read_timeout: Duration,
    /// Where authentication is required: the whole exchange's time from the connection's
    /// opening.
    pub handshake_timeout: Duration,
    /// How often an authenticated connection checks its user still holds the credential it
    /// proved; zero: never.
    pub session_recheck: Duration,
    pub budget: BodyBudget,
    pub fetch_wait_max: Duration,
    /// Bytes per second this connection's produces may decompress (0: not limited).
    pub decompressed_bytes_per_second: u64,
}
