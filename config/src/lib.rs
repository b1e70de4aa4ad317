//! tailstream-config: the typed settings of every Tailstream process and the embedded default.
//!
//! - [`Config`] and its sections mirror `config/default.toml`, which is compiled into the
//!   binary (`DEFAULT_TOML`); `Config::load` overlays an optional user file on it, then
//!   `validate` checks how the values relate before any process trusts them.
//!
//! - `security`: the secrets every process shares (`[security]`) and TLS (`[tls]`).
//!
//! Nothing here does network I/O; loading reads at most one file.

mod security;

pub use security::{
    ADMIN_TOKEN_CHARS_MIN, SecurityConfig, TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE, TlsConfig,
};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tailstream_wire::messages::StreamConfig;
use thiserror::Error;

/// The documented default configuration, embedded at build time.
pub const DEFAULT_TOML: &str = include_str!("../default.toml");

/// Smallest segment we accept: room for a digest and a few small batches.
pub const SEGMENT_SIZE_BYTES_MIN: u32 = 4096;
/// Largest segment: positions are u32 and buffers are allocated whole.
pub const SEGMENT_SIZE_BYTES_MAX: u32 = 1 << 30;
/// Most logs in one streamlet's MultiLog.
pub const LOGS_PER_STREAMLET_MAX: u32 = 256;
/// Most streamlets in one stream.
pub const STREAMLETS_MAX: u32 = 4096;
/// Most backups per segment.
pub const REPLICAS_MAX: u32 = 7;
/// Most spare replica buffers a backup keeps made ahead (`backup.spare_buffers`).
pub const SPARE_BUFFERS_MAX: u32 = 64;
/// Largest request body the coordinator accepts (its requests are small metadata).
pub const COORDINATOR_FRAME_BODY_BYTES_MAX: u32 = 1 << 20;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing config: {0}")]
    Parse(String),
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub coordinator: CoordinatorConfig,
    pub broker: BrokerConfig,
    /// What `stream create` uses for settings it is not given (the wire type itself: one
    /// definition of a stream's settings).
    pub stream_defaults: StreamConfig,
    pub backup: BackupConfig,
    pub kafka: KafkaConfig,
    pub listeners: ListenersConfig,
    pub replication: ReplicationConfig,
    pub producer: ProducerConfig,
    pub consumer: ConsumerConfig,
    pub client: ClientConfig,
    pub dev: DevConfig,
    pub security: SecurityConfig,
    pub tls: TlsConfig,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorConfig {
    pub rpc_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub data_dir: PathBuf,
    pub store: MetadataStoreKind,
    pub etcd_endpoints: Vec<String>,
    pub etcd_prefix: String,
    pub election_lease_ms: u64,
    pub broker_liveness_timeout_ms: u64,
    pub probe_timeout_ms: u64,
    pub probe_attempts: u32,
    pub recovery_timeout_ms: u64,
    pub assign_timeout_ms: u64,
    pub group_session_timeout_ms_min: u64,
    pub group_session_timeout_ms_max: u64,
    pub group_rebalance_timeout_ms_max: u64,
    pub group_initial_rebalance_delay_ms: u64,
    pub groups_max: u32,
    pub group_members_max: u32,
    /// Streams the cluster holds at most: a create past it is refused (`QuotaExceeded`).
    pub streams_max: u32,
    /// Fresh producer ids handed out per second at most, ten seconds' worth at once (0: not
    /// limited).
    pub producer_ids_per_second: u32,
    /// Users kept at most: a create past it is refused (`QuotaExceeded`).
    pub users_max: u32,
    /// Access control rules kept at most.
    pub acls_max: u32,
    pub group_committed_partitions_max: u32,
    /// Consumer groups one authenticated user may make (0: not limited).
    pub groups_per_user_max: u32,
    /// Committed partitions the groups one authenticated user made may hold together (0: not
    /// limited).
    pub group_committed_partitions_per_user_max: u32,
    pub connections_max: u32,
    pub peer_connections_max: u32,
    pub request_body_bytes_max: u32,
}

/// Where the coordinator keeps the cluster's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetadataStoreKind {
    /// A JSON file in the coordinator's data directory: one coordinator.
    File,
    /// etcd: coordinators elect a leader there; the others stand by.
    Etcd,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    pub rpc_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub data_dir: PathBuf,
    pub heartbeat_interval_ms: u64,
    pub lease_ms: u64,
    pub leaderless_lease_ms: u64,
    pub ping_interval_ms: u64,
    pub ping_timeout_ms: u64,
    pub ping_peers: u32,
    pub segment_memory_bytes_max: u64,
    pub connections_max: u32,
    pub peer_connections_max: u32,
    pub request_body_bytes_max: u32,
    pub requests_in_flight_per_connection_max: u32,
    pub frame_body_bytes_max: u32,
    pub fetch_wait_ms_max: u32,
    pub fetch_bytes_max: u32,
    /// Bytes per second one client connection's produces may have the broker decompress, one
    /// second of burst; past it a produce is answered `Busy` until the debt drained (0: not
    /// limited).
    pub decompressed_bytes_per_second_per_connection: u64,
    /// Bytes per second one authenticated user may produce / fetch through this broker's
    /// native listener, one second of burst; past it the connection is not read for a while
    /// (0: not limited).
    pub quota_produce_bytes_per_second: u64,
    pub quota_fetch_bytes_per_second: u64,
    pub retention_check_interval_ms: u64,
    pub producers_per_log_max: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupConfig {
    pub nic_addr: SocketAddr,
    pub open_buffers_max: u32,
    pub open_buffer_bytes_max: u64,
    pub nic_connections_max: u32,
    /// Free replica buffers kept made ahead of need, in the background.
    pub spare_buffers: u32,
}

/// What every listener of every process applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenersConfig {
    pub idle_timeout_ms: u64,
    pub request_read_timeout_ms: u64,
    pub connections_per_address_max: u32,
    /// Where authentication is required: a connection not authenticated this long after it
    /// opened is closed.
    pub handshake_timeout_ms: u64,
    pub admin_connections_max: u32,
    /// How often each process checks how much memory its allocator holds free, and gives it
    /// back past `memory_trim_free_bytes_min`; 0: never.
    pub memory_trim_interval_ms: u64,
    pub memory_trim_free_bytes_min: u64,
}

impl ListenersConfig {
    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.idle_timeout_ms)
    }

    pub fn request_read_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.request_read_timeout_ms)
    }

    pub fn handshake_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.handshake_timeout_ms)
    }
}

/// How a primary gets entries into its backups' buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplicationMode {
    /// Tailwind: one-sided writes; the backup never parses what it receives.
    #[serde(rename = "one-sided")]
    OneSided,
    /// The baseline: one request per write, parsed, verified and copied by the backup.
    #[serde(rename = "rpc")]
    Rpc,
}

/// The one-sided write backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OneSidedTransport {
    #[serde(rename = "tcp")]
    Tcp,
    #[serde(rename = "rdma")]
    Rdma,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationConfig {
    pub mode: ReplicationMode,
    pub transport: OneSidedTransport,
    pub rdma_fallback_to_tcp: bool,
    pub writes_in_flight_per_replica_max: u32,
    pub uncommitted_bytes_per_log_max: u64,
    pub ack_timeout_ms: u64,
    pub write_timeout_ms: u64,
    pub control_timeout_ms: u64,
    pub failed_backup_quarantine_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducerConfig {
    pub batch_size_bytes: u32,
    pub linger_ms: u64,
    pub max_in_flight: u32,
    pub buffer_bytes_max: u64,
    pub request_timeout_ms: u64,
    pub delivery_timeout_ms: u64,
    pub retry_backoff_ms: u64,
    pub retry_backoff_ms_max: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerConfig {
    pub fetch_max_bytes: u32,
    pub fetch_max_wait_ms: u32,
    pub group_refresh_ms: u64,
    /// Consumer groups: a member silent this long is removed and its logs go to the others.
    pub member_session_timeout_ms: u32,
    pub member_heartbeat_interval_ms: u64,
    /// How long a rebalance waits for every member to rejoin.
    pub member_rebalance_timeout_ms: u32,
    /// How often a member commits what its polls returned, at most.
    pub member_commit_interval_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub requests_in_flight_max: u32,
    pub frame_body_bytes_max: u32,
    pub connect_timeout_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevConfig {
    pub brokers: u32,
    pub data_dir: PathBuf,
    pub broker_rpc_port_base: u16,
    pub broker_admin_port_base: u16,
    pub kafka_port_base: u16,
}

/// A broker's Kafka protocol listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub enabled: bool,
    pub listen_addr: SocketAddr,
    /// Empty: the bound listen address.
    pub advertised_addr: String,
    pub auto_create_topics: bool,
    pub auto_create_streamlets: u32,
    /// Auto-creations per second this broker makes at most, on average...
    pub auto_creates_per_second: u32,
    /// ...and at once.
    pub auto_create_burst: u32,
    /// Topics one Metadata request may name and have looked up one by one (and auto-created);
    /// past it, one listing answers, and nothing is created.
    pub metadata_topics_max: u32,
    /// Bytes per second each broker lets one principal produce / fetch (0: not limited).
    pub quota_produce_bytes_per_second: u64,
    pub quota_fetch_bytes_per_second: u64,
    /// Bytes per second one connection's produces may have this broker decompress (to
    /// validate them), with one second of burst; beyond it the connection waits before each
    /// further batch (0: not limited).
    pub decompressed_bytes_per_second_per_connection: u64,
    pub connections_max: u32,
    pub request_bytes_max: u32,
    pub requests_in_flight_per_connection_max: u32,
    pub request_body_bytes_max: u32,
    /// SASL mechanisms a client must authenticate with; empty: no authentication.
    pub sasl_mechanisms: Vec<String>,
    /// Users allowed everything, whatever the access control rules say.
    pub super_users: Vec<String>,
    /// How often an authenticated connection checks its user still holds the credential it
    /// proved (0: never).
    pub session_recheck_ms: u64,
    /// Fetch sessions (KIP-227) this broker keeps at most, and partitions kept over all of
    /// them; past either, fetches are answered sessionless.
    pub fetch_sessions_max: u32,
    pub fetch_session_partitions_max: u32,
}

/// The SASL mechanisms the Kafka listener can require.
pub const SASL_MECHANISMS: &[&str] = &["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"];

impl Default for Config {
    fn default() -> Self {
        Self::embedded()
    }
}

macro_rules! section_default {
    ($($ty:ident => $field:ident),*) => {
        $(impl Default for $ty {
            fn default() -> Self {
                Config::embedded().$field
            }
        })*
    };
}

section_default!(
    CoordinatorConfig => coordinator, BrokerConfig => broker, BackupConfig => backup,
    KafkaConfig => kafka, ListenersConfig => listeners,
    ReplicationConfig => replication,
    ProducerConfig => producer, ConsumerConfig => consumer, ClientConfig => client,
    DevConfig => dev
);

impl Config {
    /// The embedded default.
    pub fn embedded() -> Self {
        // invariant: DEFAULT_TOML is compiled in and checked by `embedded_default_is_valid`.
        Self::parse(DEFAULT_TOML).expect("invariant: the embedded default config parses")
    }

    /// Parses a complete configuration.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
    }

    /// The embedded default, overlaid with `overrides` (any subset of the same tables), validated.
    pub fn with_overrides(overrides: &str) -> Result<Self, ConfigError> {
        let parse = |text: &str| -> Result<toml::Table, ConfigError> {
            text.parse::<toml::Table>()
                .map_err(|e| ConfigError::Parse(e.to_string()))
        };
        let mut base = parse(DEFAULT_TOML)?;
        merge(&mut base, parse(overrides)?);
        let config: Config = base
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The embedded default overlaid with the file at `path`, if any.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        match path {
            None => {
                let config = Self::embedded();
                config.validate()?;
                Ok(config)
            }
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                Self::with_overrides(&text)
            }
        }
    }

    /// How this configuration's client authentication can be got around, if it can: with TLS
    /// off, a peer listener takes anyone who reaches it for a member (who may create and delete
    /// streams, and look up users' credentials), so the peer ports must be reachable by the
    /// cluster's members alone.
    pub fn authentication_bypass(&self) -> Option<&'static str> {
        let authenticating =
            self.security.client_authentication || !self.kafka.sasl_mechanisms.is_empty();
        (authenticating && !self.tls.enabled).then_some(
            "client authentication is on but TLS is off: anyone who reaches a peer listener \
             (coordinator.peer_addr, broker.peer_addr) is taken for a member and is not held to \
             it; turn TLS on ([tls], or dev --tls), or keep the peer ports reachable by the \
             cluster's members alone",
        )
    }

    /// Checks the relations between values that the types cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_stream_config(&self.stream_defaults).map_err(ConfigError::Invalid)?;
        let invalid = |what: String| Err(ConfigError::Invalid(what));
        let broker = &self.broker;
        let produce_frame_bytes = tailstream_wire::batch::PRODUCE_BATCH_BYTES_MAX + 1024;
        if (broker.frame_body_bytes_max as usize) < produce_frame_bytes {
            return invalid(format!(
                "broker.frame_body_bytes_max must be at least {produce_frame_bytes} (a full produce batch)"
            ));
        }
        if broker.fetch_bytes_max == 0 || broker.fetch_bytes_max > broker.frame_body_bytes_max {
            return invalid("broker.fetch_bytes_max must be in 1..=frame_body_bytes_max".into());
        }
        if broker.connections_max == 0
            || broker.peer_connections_max == 0
            || broker.requests_in_flight_per_connection_max == 0
        {
            return invalid("broker connection and request limits must be positive".into());
        }
        if broker.request_body_bytes_max < broker.frame_body_bytes_max {
            return invalid(
                "broker.request_body_bytes_max must be at least frame_body_bytes_max".into(),
            );
        }
        if broker.heartbeat_interval_ms == 0
            || broker.ping_interval_ms == 0
            || broker.ping_timeout_ms == 0
        {
            return invalid("broker heartbeat and ping intervals must be positive".into());
        }
        if broker.lease_ms < 2 * broker.heartbeat_interval_ms {
            return invalid(
                "broker.lease_ms must be at least two heartbeat intervals (a late heartbeat must not end the lease)".into(),
            );
        }
        if broker.leaderless_lease_ms < broker.lease_ms || broker.leaderless_lease_ms > 600_000 {
            return invalid(
                "broker.leaderless_lease_ms must be at least lease_ms and at most 600000".into(),
            );
        }
        let coordinator = &self.coordinator;
        if coordinator.probe_timeout_ms == 0 || coordinator.probe_attempts == 0 {
            return invalid("coordinator probe timeout and attempts must be positive".into());
        }
        if coordinator.group_session_timeout_ms_min == 0
            || coordinator.group_session_timeout_ms_min > coordinator.group_session_timeout_ms_max
            || coordinator.group_rebalance_timeout_ms_max == 0
            || coordinator.groups_max == 0
            || coordinator.group_members_max == 0
            || coordinator.group_committed_partitions_max == 0
        {
            return invalid(
                "coordinator group timeouts and limits must be positive, min <= max".into(),
            );
        }
        if coordinator.streams_max == 0 || coordinator.users_max == 0 || coordinator.acls_max == 0 {
            return invalid(
                "coordinator.streams_max, users_max and acls_max must be positive".into(),
            );
        }
        if coordinator.connections_max == 0 || coordinator.peer_connections_max == 0 {
            return invalid("coordinator connection limits must be positive".into());
        }
        if coordinator.request_body_bytes_max < COORDINATOR_FRAME_BODY_BYTES_MAX {
            return invalid(format!(
                "coordinator.request_body_bytes_max must be at least {COORDINATOR_FRAME_BODY_BYTES_MAX}"
            ));
        }
        if coordinator.store == MetadataStoreKind::Etcd {
            if coordinator.etcd_endpoints.is_empty() {
                return invalid(
                    "coordinator.store = \"etcd\" needs coordinator.etcd_endpoints".into(),
                );
            }
            if !coordinator.etcd_prefix.starts_with('/') || coordinator.etcd_prefix.ends_with('/') {
                return invalid(
                    "coordinator.etcd_prefix must start with '/' and not end with one".into(),
                );
            }
            if !(1000..=60_000).contains(&coordinator.election_lease_ms) {
                return invalid("coordinator.election_lease_ms must be in 1000..=60000".into());
            }
        }
        let kafka = &self.kafka;
        if kafka.connections_max == 0
            || kafka.requests_in_flight_per_connection_max == 0
            || kafka.request_bytes_max < (1 << 20)
        {
            return invalid(
                "kafka connection and request limits must be positive, request_bytes_max at least 1 MiB".into(),
            );
        }
        if kafka.request_body_bytes_max < kafka.request_bytes_max {
            return invalid(
                "kafka.request_body_bytes_max must be at least request_bytes_max".into(),
            );
        }
        if kafka.auto_create_streamlets == 0 || kafka.auto_create_streamlets > STREAMLETS_MAX {
            return invalid(format!(
                "kafka.auto_create_streamlets must be in 1..={STREAMLETS_MAX}"
            ));
        }
        if kafka.auto_creates_per_second == 0
            || kafka.auto_create_burst == 0
            || kafka.metadata_topics_max == 0
        {
            return invalid(
                "kafka auto-creation rate and burst, and metadata_topics_max, must be positive (auto_create_topics = false turns auto-creation off)".into(),
            );
        }
        let listeners = &self.listeners;
        let token = &self.security.admin_token;
        if !token.is_empty()
            && (token.chars().count() < ADMIN_TOKEN_CHARS_MIN
                || !token.chars().all(|c| c.is_ascii_graphic()))
        {
            return invalid(format!(
                "security.admin_token: at least {ADMIN_TOKEN_CHARS_MIN} printable ASCII characters, no spaces"
            ));
        }
        if self.security.client_authentication && token.is_empty() {
            return invalid(
                "security.client_authentication needs security.admin_token: the first users are created with it".into(),
            );
        }
        if (1..1000).contains(&self.security.session_recheck_ms) {
            return invalid(
                "security.session_recheck_ms must be 0 (never) or at least 1000".into(),
            );
        }
        if (1..1000).contains(&kafka.session_recheck_ms) {
            return invalid("kafka.session_recheck_ms must be 0 (never) or at least 1000".into());
        }
        let tls = &self.tls;
        if tls.enabled && tls.ca_path.as_os_str().is_empty() {
            return invalid("tls.enabled needs tls.ca_path (the CA every process trusts)".into());
        }
        if tls.cert_path.as_os_str().is_empty() != tls.key_path.as_os_str().is_empty() {
            return invalid("tls.cert_path and tls.key_path go together".into());
        }
        if let Some(unknown) = kafka
            .sasl_mechanisms
            .iter()
            .find(|m| !SASL_MECHANISMS.contains(&m.as_str()))
        {
            return invalid(format!(
                "kafka.sasl_mechanisms: {unknown:?} is not one of {SASL_MECHANISMS:?}"
            ));
        }
        if listeners.idle_timeout_ms == 0
            || listeners.handshake_timeout_ms == 0
            || listeners.request_read_timeout_ms == 0
            || listeners.connections_per_address_max == 0
            || listeners.admin_connections_max == 0
        {
            return invalid("listeners timeouts and limits must be positive".into());
        }
        let producer = &self.producer;
        if producer.batch_size_bytes < 128 {
            return invalid("producer.batch_size_bytes must be at least 128".into());
        }
        if u64::from(producer.batch_size_bytes) > producer.buffer_bytes_max {
            return invalid("producer.batch_size_bytes must not exceed buffer_bytes_max".into());
        }
        if producer.max_in_flight == 0 || producer.request_timeout_ms == 0 {
            return invalid(
                "producer.max_in_flight and request_timeout_ms must be positive".into(),
            );
        }
        let replication = &self.replication;
        if replication.writes_in_flight_per_replica_max == 0
            || replication.ack_timeout_ms == 0
            || replication.write_timeout_ms == 0
        {
            return invalid(
                "replication writes in flight, ack timeout and write timeout must be positive"
                    .into(),
            );
        }
        if replication.ack_timeout_ms >= self.producer.request_timeout_ms {
            return invalid(
                "replication.ack_timeout_ms must be below producer.request_timeout_ms".into(),
            );
        }
        if self.backup.open_buffers_max == 0 || self.backup.nic_connections_max == 0 {
            return invalid("backup buffer and connection limits must be positive".into());
        }
        if self.backup.spare_buffers > SPARE_BUFFERS_MAX {
            return invalid(format!(
                "backup.spare_buffers must be at most {SPARE_BUFFERS_MAX}"
            ));
        }
        if self.consumer.member_heartbeat_interval_ms == 0
            || self.consumer.member_heartbeat_interval_ms
                >= u64::from(self.consumer.member_session_timeout_ms)
        {
            return invalid(
                "consumer.member_heartbeat_interval_ms must be positive and below \
                 consumer.member_session_timeout_ms"
                    .into(),
            );
        }
        if self.consumer.member_rebalance_timeout_ms == 0 {
            return invalid("consumer.member_rebalance_timeout_ms must be positive".into());
        }
        if self.consumer.fetch_max_bytes == 0 {
            return invalid("consumer.fetch_max_bytes must be positive".into());
        }
        if self.client.requests_in_flight_max == 0 {
            return invalid("client.requests_in_flight_max must be positive".into());
        }
        Ok(())
    }
}

/// Checks a stream's settings (used for the defaults and for every `create stream`).
pub fn validate_stream_config(config: &StreamConfig) -> Result<(), String> {
    if !(1..=LOGS_PER_STREAMLET_MAX).contains(&config.logs_per_streamlet) {
        return Err(format!(
            "logs per streamlet must be in 1..={LOGS_PER_STREAMLET_MAX}"
        ));
    }
    if config.replicas > REPLICAS_MAX {
        return Err(format!("replicas must be at most {REPLICAS_MAX}"));
    }
    if !(SEGMENT_SIZE_BYTES_MIN..=SEGMENT_SIZE_BYTES_MAX).contains(&config.segment_size_bytes) {
        return Err(format!(
            "segment_size_bytes must be in {SEGMENT_SIZE_BYTES_MIN}..={SEGMENT_SIZE_BYTES_MAX}"
        ));
    }
    if config.segments_per_group == 0 {
        return Err("segments_per_group must be positive".into());
    }
    if config.min_insync_replicas > config.replicas {
        return Err(format!(
            "min_insync_replicas ({}) cannot exceed replicas ({})",
            config.min_insync_replicas, config.replicas
        ));
    }
    Ok(())
}

/// The R `stream create` (and Kafka's topic auto-creation) uses when none is given, for
/// `live_brokers` brokers: up to 3, leaving one broker to spare where the cluster allows it
/// (an owner plus R backups, and one more broker to replace any of them after a crash), so a
/// crash never leaves a segment short of a copy for longer than a re-replication takes.
pub fn default_replicas(live_brokers: u32) -> u32 {
    match live_brokers {
        0 | 1 => 0,
        2 => 1,
        brokers => (brokers - 2).min(3),
    }
}

/// Overlays `overlay` on `base`, table by table; non-table values replace.
fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over)) => merge(inner, over),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid() {
        let config = Config::embedded();
        config.validate().unwrap();
        assert_eq!(config.stream_defaults.logs_per_streamlet, 4);
        assert_eq!(config.stream_defaults.segment_size_bytes, 8 << 20);
        assert_eq!(config.stream_defaults.segments_per_group, 16);
        assert_eq!(config.dev.brokers, 4);
    }

    #[test]
    fn overrides_replace_single_values_and_keep_the_rest() {
        let config = Config::with_overrides("[producer]\nlinger_ms = 42\n").unwrap();
        assert_eq!(config.producer.linger_ms, 42);
        assert_eq!(
            config.producer.batch_size_bytes,
            Config::embedded().producer.batch_size_bytes
        );
    }

    #[test]
    fn unknown_keys_and_bad_relations_are_refused() {
        assert!(Config::with_overrides("[producer]\nlinger = 42\n").is_err());
        assert!(Config::with_overrides("[stream_defaults]\nsegment_size_bytes = 10\n").is_err());
        assert!(Config::with_overrides("[stream_defaults]\nlogs_per_streamlet = 0\n").is_err());
    }
}
