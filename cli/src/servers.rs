//! The server subcommands: `tailstream coordinator` and `tailstream broker`.
//!
//! Both stop cleanly on SIGINT or SIGTERM, and, with `--exit-on-stdin-eof`, when their stdin
//! closes: that is how `tailstream dev` stops its children, and why children never outlive a
//! `dev` that was killed.

use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use tailstream_broker::server::BrokerOptions;
use tailstream_config::Config;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Client RPC listen address (port 0 picks a free port; the bound one is printed).
    #[arg(long)]
    rpc_addr: Option<SocketAddr>,
    /// Peer RPC listen address, for the cluster's own members (port 0 picks a free port).
    #[arg(long)]
    peer_addr: Option<SocketAddr>,
    /// HTTP admin listen address.
    #[arg(long)]
    admin_addr: Option<SocketAddr>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Shut down when stdin reaches end-of-file (set by `tailstream dev`).
    #[arg(long)]
    exit_on_stdin_eof: bool,
    /// Make every outgoing connection from this address, and listen for one-sided writes on
    /// it (a test cluster gives each process a loopback address of its own, so that a
    /// firewall rule can cut the network between two processes).
    #[arg(long)]
    source_ip: Option<std::net::IpAddr>,
}

impl ServerArgs {
    fn apply_source_ip(&self) -> Result<(), String> {
        match self.source_ip {
            Some(ip) => tailstream_net::source::bind_outgoing_to(ip),
            None => Ok(()),
        }
    }
}

/// A shutdown signal that turns true on SIGINT, SIGTERM or (if asked) stdin EOF.
fn shutdown_signal(exit_on_stdin_eof: bool) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let stdin_closed = async {
            if exit_on_stdin_eof {
                let mut stdin = tokio::io::stdin();
                let mut buf = [0u8; 64];
                while let Ok(n) = stdin.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            } else {
                std::future::pending::<()>().await;
            }
        };
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
            _ = stdin_closed => {}
        }
        let _ = tx.send(true);
    });
    rx
}

/// `tailstream coordinator`: the server arguments, and where its state lives; or
/// `tailstream coordinator migrate`, which moves a file-store cluster's state into etcd.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CoordinatorArgs {
    #[command(subcommand)]
    action: Option<CoordinatorAction>,
    #[command(flatten)]
    server: ServerArgs,
    /// Keep the cluster's state on etcd at these client URLs ("http://a:2379,http://b:2379"):
    /// sets `coordinator.store = "etcd"`. Several coordinators may run; one leads.
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// The cluster's key prefix on etcd (`coordinator.etcd_prefix`).
    #[arg(long)]
    etcd_prefix: Option<String>,
}

#[derive(Subcommand, Debug)]
enum CoordinatorAction {
    /// Move a file-store cluster's coordinator state (metadata, recoveries, committed
    /// offsets) into etcd. Stop its coordinator first; brokers keep their data. Refused when
    /// the prefix already holds metadata.
    Migrate(MigrateArgs),
}

#[derive(Args, Debug)]
struct MigrateArgs {
    /// The file-store coordinator's data directory (`coordinator.data_dir`).
    #[arg(long)]
    from_dir: PathBuf,
    /// etcd's client URLs.
    #[arg(long, value_delimiter = ',', required = true)]
    etcd_endpoints: Vec<String>,
    /// The cluster's key prefix on etcd (default: `coordinator.etcd_prefix`).
    #[arg(long)]
    etcd_prefix: Option<String>,
}

/// `tailstream coordinator migrate`.
async fn migrate(config: &Config, args: MigrateArgs) -> Result<(), String> {
    let prefix = args
        .etcd_prefix
        .unwrap_or_else(|| config.coordinator.etcd_prefix.clone());
    let migrated = tailstream_coordinator::migrate::migrate(
        &args.from_dir,
        &args.etcd_endpoints,
        &prefix,
        tailstream_coordinator::server::offset_limits(config),
    )
    .await?;
    println!(
        "migrated {} streams, {} brokers ({} keys) and {} groups' offsets ({} partitions) from {} to etcd under {prefix}",
        migrated.streams,
        migrated.brokers,
        migrated.metadata_keys,
        migrated.groups,
        migrated.offsets,
        args.from_dir.display()
    );
    println!(
        "start the coordinators with --etcd-endpoints {} --etcd-prefix {prefix}",
        args.etcd_endpoints.join(",")
    );
    Ok(())
}

/// `tailstream broker`: the server arguments, and where the coordinator's peer listener is;
/// or `tailstream broker kill N`, which crashes a broker of a dev cluster on purpose.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BrokerArgs {
    #[command(subcommand)]
    action: Option<BrokerAction>,
    #[command(flatten)]
    server: ServerArgs,
    /// The coordinator's peer address (where brokers register); defaults to
    /// `coordinator.peer_addr` of the configuration.
    #[arg(long)]
    coordinator_peer: Option<String>,
    /// The Kafka listener's address (port 0 picks a free port); defaults to
    /// `kafka.listen_addr` of the configuration.
    #[arg(long)]
    kafka_addr: Option<SocketAddr>,
}

#[derive(Subcommand, Debug)]
enum BrokerAction {
    /// SIGKILL broker N of a running `tailstream dev` cluster (a crash, not a clean stop:
    /// the coordinator detects it and recovers its streamlets on the other brokers).
    Kill(KillArgs),
}

#[derive(Args, Debug)]
struct KillArgs {
    /// The broker's server index: N of `server-N.G`, as `cluster status`, `stream describe`
    /// and Kafka's node ids show it.
    index: u32,
    /// The dev cluster's data directory (`dev.data_dir` of the configuration by default).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Kills the broker with server index `args.index` of the dev cluster whose files live under
/// `data_dir`: the coordinator says where that server listens, and the dev cluster's files say
/// which of its children that is (the coordinator numbers brokers in the order they register,
/// which need not be the order `dev` started them).
async fn kill_dev_broker(
    config: &Config,
    coordinator: Option<String>,
    args: KillArgs,
) -> Result<(), String> {
    use tailstream_launcher::LocalCluster;
    let data_dir = args.data_dir.unwrap_or_else(|| config.dev.data_dir.clone());
    let coordinator = coordinator
        .or_else(|| {
            std::fs::read_to_string(LocalCluster::coordinator_addr_file(&data_dir))
                .ok()
                .map(|a| a.trim().to_string())
        })
        .unwrap_or_else(|| config.coordinator.rpc_addr.to_string());
    let brokers = crate::commands::client(config, &coordinator)
        .list_brokers()
        .await
        .map_err(|e| format!("asking the coordinator at {coordinator} for its brokers: {e}"))?;
    let target = brokers
        .iter()
        .filter(|b| b.server_id.index == args.index && !b.crashed)
        .max_by_key(|b| b.server_id.generation)
        .ok_or_else(|| {
            let known: Vec<String> = brokers
                .iter()
                .filter(|b| !b.crashed)
                .map(|b| b.server_id.to_string())
                .collect();
            format!(
                "no live broker has server index {} (brokers: {})",
                args.index,
                known.join(", ")
            )
        })?;
    let child = (0..256)
        .find(|k| {
            std::fs::read_to_string(LocalCluster::rpc_addr_file(&data_dir, *k))
                .is_ok_and(|addr| addr.trim() == target.rpc_addr)
        })
        .ok_or_else(|| {
            format!(
                "{} (at {}) is not a broker of the `tailstream dev` cluster in {}",
                target.server_id,
                target.rpc_addr,
                data_dir.display()
            )
        })?;
    let pid_file = LocalCluster::pid_file(&data_dir, child);
    let text = std::fs::read_to_string(&pid_file).map_err(|e| {
        format!(
            "reading {} ({e}): is a `tailstream dev` cluster running with that data directory?",
            pid_file.display()
        )
    })?;
    let pid: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{} does not hold a pid", pid_file.display()))?;
    let status = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("running kill: {e}"))?;
    if !status.success() {
        return Err(format!(
            "kill -KILL {pid} failed: {} is not running",
            target.server_id
        ));
    }
    // The pid is spent: a second kill must not hit whatever reuses it.
    let _ = std::fs::remove_file(&pid_file);
    println!("{} (pid {pid}) killed", target.server_id);
    Ok(())
}

pub async fn run_coordinator(mut config: Config, args: CoordinatorArgs) -> Result<(), String> {
    if let Some(CoordinatorAction::Migrate(migrate_args)) = args.action {
        return migrate(&config, migrate_args).await;
    }
    let coordinator = &mut config.coordinator;
    if !args.etcd_endpoints.is_empty() {
        coordinator.store = tailstream_config::MetadataStoreKind::Etcd;
        coordinator.etcd_endpoints = args.etcd_endpoints;
    }
    if let Some(prefix) = args.etcd_prefix {
        coordinator.etcd_prefix = prefix;
    }
    config.validate().map_err(|e| e.to_string())?;
    let coordinator = &mut config.coordinator;
    let args = args.server;
    coordinator.rpc_addr = args.rpc_addr.unwrap_or(coordinator.rpc_addr);
    coordinator.peer_addr = args.peer_addr.unwrap_or(coordinator.peer_addr);
    coordinator.admin_addr = args.admin_addr.unwrap_or(coordinator.admin_addr);
    args.apply_source_ip()?;
    if let Some(dir) = args.data_dir {
        coordinator.data_dir = dir;
    }
    let shutdown = shutdown_signal(args.exit_on_stdin_eof);
    tailstream_coordinator::server::run(config, shutdown).await
}

pub async fn run_broker(
    mut config: Config,
    args: BrokerArgs,
    coordinator: Option<String>,
) -> Result<(), String> {
    if let Some(BrokerAction::Kill(kill)) = args.action {
        return kill_dev_broker(&config, coordinator, kill).await;
    }
    let coordinator_peer_addr = args
        .coordinator_peer
        .unwrap_or_else(|| config.coordinator.peer_addr.to_string());
    if let Some(addr) = args.kafka_addr {
        config.kafka.listen_addr = addr;
    }
    let args = args.server;
    let broker = &mut config.broker;
    broker.rpc_addr = args.rpc_addr.unwrap_or(broker.rpc_addr);
    broker.peer_addr = args.peer_addr.unwrap_or(broker.peer_addr);
    broker.admin_addr = args.admin_addr.unwrap_or(broker.admin_addr);
    args.apply_source_ip()?;
    if let Some(dir) = args.data_dir {
        broker.data_dir = dir;
    }
    if let Some(ip) = args.source_ip {
        config.backup.nic_addr.set_ip(ip);
    }
    let shutdown = shutdown_signal(args.exit_on_stdin_eof);
    // Bound first, so the broker registers with the address its Kafka clients will use.
    let kafka = tailstream_kafka::bind(&config.kafka).await?;
    let kafka_addr = kafka.as_ref().map(|k| k.advertised_addr().to_owned());
    let front_ends = kafka.into_iter().map(|k| k.into_front_end()).collect();
    tailstream_broker::server::run_with(
        BrokerOptions {
            config,
            coordinator_peer_addr,
            kafka_addr,
        },
        front_ends,
        shutdown,
    )
    .await
}
