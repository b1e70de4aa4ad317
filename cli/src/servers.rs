//! The server subcommands: `tailstream coordinator` and `tailstream broker`.
//!
//! Both stop cleanly on SIGINT or SIGTERM, and, with `--exit-on-stdin-eof`, when their stdin
//! closes: that is how `tailstream dev` stops its children, and why children never outlive a
//! `dev` that was killed.

use clap::Args;
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

/// `tailstream broker`: the server arguments, and where the coordinator's peer listener is.
#[derive(Args, Debug)]
pub struct BrokerArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The coordinator's peer address (where brokers register); defaults to
    /// `coordinator.peer_addr` of the configuration.
    #[arg(long)]
    coordinator_peer: Option<String>,
}

pub async fn run_coordinator(mut config: Config, args: ServerArgs) -> Result<(), String> {
    let coordinator = &mut config.coordinator;
    coordinator.rpc_addr = args.rpc_addr.unwrap_or(coordinator.rpc_addr);
    coordinator.peer_addr = args.peer_addr.unwrap_or(coordinator.peer_addr);
    coordinator.admin_addr = args.admin_addr.unwrap_or(coordinator.admin_addr);
    if let Some(dir) = args.data_dir {
        coordinator.data_dir = dir;
    }
    let shutdown = shutdown_signal(args.exit_on_stdin_eof);
    tailstream_coordinator::server::run(config, shutdown).await
}

pub async fn run_broker(mut config: Config, args: BrokerArgs) -> Result<(), String> {
    let coordinator_peer_addr = args
        .coordinator_peer
        .unwrap_or_else(|| config.coordinator.peer_addr.to_string());
    let args = args.server;
    let broker = &mut config.broker;
    broker.rpc_addr = args.rpc_addr.unwrap_or(broker.rpc_addr);
    broker.peer_addr = args.peer_addr.unwrap_or(broker.peer_addr);
    broker.admin_addr = args.admin_addr.unwrap_or(broker.admin_addr);
    if let Some(dir) = args.data_dir {
        broker.data_dir = dir;
    }
    let shutdown = shutdown_signal(args.exit_on_stdin_eof);
    tailstream_broker::server::run(
        BrokerOptions {
            config,
            coordinator_peer_addr,
        },
        shutdown,
    )
    .await
}
