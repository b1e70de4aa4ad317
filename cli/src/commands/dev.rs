//! `tailstream dev`: a whole cluster on this machine, for trying Tailstream out.

use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use tailstream_config::Config;
use tailstream_launcher::etcd::EtcdCluster;
use tailstream_launcher::{ClusterSpec, EtcdSpec, LocalCluster, Ports};

#[derive(Args, Debug)]
pub struct DevArgs {
    /// Broker processes to start.
    #[arg(long)]
    brokers: Option<u32>,
    /// Where the coordinator's metadata and every process's log go.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Let the kernel pick every port (for running several clusters side by side).
    #[arg(long)]
    ephemeral_ports: bool,
    /// Restart a child that exited (a crashed or killed broker comes back as a new
    /// incarnation with the same data directory) after this long. Without it, an exited
    /// broker stays down and the cluster carries on without it.
    #[arg(long)]
    restart_after_ms: Option<u64>,
    /// Coordinators to start (more than one needs etcd: one leads, the others stand by).
    #[arg(long, default_value_t = 1)]
    coordinators: usize,
    /// Keep the coordinators' state on a local three-member etcd started here (Debian's
    /// `etcd`), with its data under the data directory.
    #[arg(long, conflicts_with = "etcd_endpoints")]
    etcd: bool,
    /// Keep the coordinators' state on the etcd already running at these client URLs.
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// TLS on every listener: makes a local CA and a certificate under the data directory
    /// (`tls/`), gives them to every process, and prints how clients trust them.
    #[arg(long)]
    tls: bool,
}

pub async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    tls_dir_given: Option<PathBuf>,
    args: DevArgs,
) -> Result<(), String> {
    let brokers = args.brokers.unwrap_or(config.dev.brokers);
    if brokers == 0 {
        return Err("--brokers must be at least 1".into());
    }
    let data_dir = args.data_dir.unwrap_or_else(|| config.dev.data_dir.clone());
    let ports = if args.ephemeral_ports {
        Ports::Ephemeral
    } else {
        Ports::Fixed {
            coordinator_rpc: config.coordinator.rpc_addr.port(),
            coordinator_peer: config.coordinator.peer_addr.port(),
            coordinator_admin: config.coordinator.admin_addr.port(),
            broker_rpc_base: config.dev.broker_rpc_port_base,
            broker_admin_base: config.dev.broker_admin_port_base,
            kafka_base: config.dev.kafka_port_base,
        }
    };
    let binary = std::env::current_exe().map_err(|e| format!("locating tailstream: {e}"))?;
    let on_etcd = args.etcd || !args.etcd_endpoints.is_empty();
    if args.coordinators == 0 || (args.coordinators > 1 && !on_etcd) {
        return Err(
            "--coordinators must be 1, or more with --etcd / --etcd-endpoints (one leads)".into(),
        );
    }
    let local_etcd = if args.etcd {
        if !tailstream_launcher::etcd::etcd_installed() {
            return Err(
                "--etcd needs Debian's etcd-server (`.ci/install-deps.sh` installs it)".into(),
            );
        }
        let etcd = EtcdCluster::start(3, &data_dir.join("etcd")).await?;
        println!("tailstream dev: etcd {}", etcd.endpoints().join(","));
        Some(etcd)
    } else {
        None
    };
    let endpoints = match &local_etcd {
        Some(etcd) => etcd.endpoints(),
        None => args.etcd_endpoints.clone(),
    };
    // TLS: made here with --tls, else the directory this process was given (--tls-dir or
    // $TAILSTREAM_TLS_DIR), else whatever the config file says (the children read it too).
    let tls_dir = if args.tls {
        let dir = data_dir.join("tls");
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Some(tailstream_launcher::tls::make_dev_certificates(&dir, &[])?)
    } else {
        tls_dir_given.map(|dir| std::path::absolute(&dir).unwrap_or(dir))
    };
    let own_tls = match &tls_dir {
        Some(dir) => tailstream_config::TlsConfig::from_dir(dir),
        None => config.tls.clone(),
    };
    // This process talks to its cluster too (it waits for the brokers to register).
    // With the member's certificate (`dev --tls` made it), `dev` may ask the coordinator's
    // peer listener, which it does where clients must authenticate (it has no user).
    crate::install_tls(&own_tls, own_tls.identity().is_some())?;
    let etcd = on_etcd.then(|| EtcdSpec {
        endpoints,
        prefix: config.coordinator.etcd_prefix.clone(),
        coordinators: args.coordinators,
    });
    let spec = ClusterSpec {
        binary,
        data_dir: data_dir.clone(),
        brokers,
        ports,
        config_file: config_path,
        log_filter: std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        own_addresses: false,
        etcd,
        tls_dir: tls_dir.clone(),
    };
    let mut cluster = LocalCluster::start(spec).await?;
    let coordinator = cluster.coordinator_addrs();
    let asked = if config.security.client_authentication {
        cluster.coordinator_peer_addrs()
    } else {
        coordinator.clone()
    };
    let registered = wait_for_brokers(&config, &asked, brokers).await?;
    println!(
        "tailstream dev: coordinator {coordinator} (brokers register at {})",
        cluster.coordinator_peer_addrs()
    );
    let scheme = if own_tls.enabled { "https" } else { "http" };
    for standby in &cluster.standbys {
        println!(
            "tailstream dev: {} stands by (leads if the leader goes): rpc {} admin {scheme}://{}",
            standby.name, standby.rpc_addr, standby.admin_addr
        );
    }
    println!(
        "tailstream dev: console {scheme}://{}/ (the coordinator's admin port)",
        cluster.coordinator.admin_addr
    );
    for broker in cluster.brokers() {
        let kafka = broker
            .kafka_addr
            .map_or(String::new(), |addr| format!(" kafka {addr}"));
        // The coordinator numbers brokers as they register: the id every other command shows.
        let server = registered
            .iter()
            .filter(|b| b.rpc_addr == broker.rpc_addr.to_string())
            .max_by_key(|b| b.server_id.generation)
            .map_or_else(|| "unregistered".to_string(), |b| b.server_id.to_string());
        println!(
            "tailstream dev: {} ({server}) rpc {} peer {} admin {scheme}://{}{kafka}",
            broker.name, broker.rpc_addr, broker.peer_addr, broker.admin_addr
        );
    }
    let bootstrap: Vec<String> = cluster
        .brokers()
        .filter_map(|b| b.kafka_addr.map(|a| a.to_string()))
        .collect();
    if !bootstrap.is_empty() {
        println!(
            "tailstream dev: Kafka clients: bootstrap.servers={}",
            bootstrap.join(",")
        );
    }
    println!("tailstream dev: logs in {}/*/*.log", data_dir.display());
    println!("tailstream dev: export TAILSTREAM_COORDINATOR={coordinator}");
    if let Some(dir) = &tls_dir {
        let ca = dir.join(tailstream_config::TLS_CA_FILE);
        println!(
            "tailstream dev: TLS on every listener; for the CLI: export TAILSTREAM_TLS_DIR={}",
            dir.display()
        );
        println!(
            "tailstream dev: Kafka clients: security.protocol=SSL (SASL_SSL with users), ssl.ca.location={}",
            ca.display()
        );
        println!(
            "tailstream dev: curl --cacert {} https://<admin>/metrics; a browser must trust that CA for the console",
            ca.display()
        );
    }
    println!("tailstream dev: running; Ctrl-C stops the cluster");
    let data_dir_arg = if data_dir == config.dev.data_dir {
        String::new()
    } else {
        format!(" --data-dir {}", data_dir.display())
    };
    println!(
        "tailstream dev: crash a broker on purpose with `tailstream broker kill N{data_dir_arg}`, N of its server-N.G (recovery moves its streamlets)"
    );
    let mut watch = tokio::time::interval(Duration::from_millis(200));
    let mut restarts: Vec<(tokio::time::Instant, Option<usize>)> = Vec::new();
    // The coordinator stays reported as exited until it is restarted: say so once.
    let mut coordinator_down = false;
    let outcome = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = watch.tick() => {
                for (name, index, how) in cluster.exits() {
                    if index.is_none() {
                        if coordinator_down {
                            continue;
                        }
                        coordinator_down = true;
                    }
                    match args.restart_after_ms {
                        Some(after) => {
                            println!("tailstream dev: {name} {how}; restarting it in {after} ms");
                            let at = tokio::time::Instant::now() + Duration::from_millis(after);
                            if !restarts.iter().any(|(_, i)| *i == index) {
                                restarts.push((at, index));
                            }
                        }
                        None => {
                            println!("tailstream dev: {name} {how}; the cluster carries on without it (--restart-after-ms restarts children)");
                            if index.is_none() {
                                println!("tailstream dev: without the coordinator nothing recovers; stop with Ctrl-C");
                            }
                        }
                    }
                }
                let now = tokio::time::Instant::now();
                let (due, later): (Vec<_>, Vec<_>) = restarts.drain(..).partition(|(at, _)| *at <= now);
                restarts = later;
                for (_, index) in due {
                    let restarted = match index {
                        Some(index) => cluster.restart_broker(index).await,
                        None => cluster.restart_coordinator().await,
                    };
                    match (restarted, index) {
                        (Ok(()), Some(index)) => println!("tailstream dev: broker-{index} restarted (a new incarnation)"),
                        (Ok(()), None) => {
                            coordinator_down = false;
                            println!("tailstream dev: coordinator restarted");
                        }
                        (Err(error), _) => println!("tailstream dev: restart failed: {error}"),
                    }
                }
            }
        }
    };
    println!("tailstream dev: stopping");
    cluster.stop().await;
    if let Some(etcd) = local_etcd {
        etcd.stop().await;
    }
    println!("tailstream dev: stopped");
    outcome
}

/// Waits until `brokers` brokers are registered and alive; returns the coordinator's list.
async fn wait_for_brokers(
    config: &Config,
    coordinator: &str,
    brokers: u32,
) -> Result<Vec<tailstream_client::BrokerInfo>, String> {
    let cluster = super::client(config, coordinator);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let listed = cluster.list_brokers().await.unwrap_or_default();
        let alive = listed.iter().filter(|b| b.alive).count();
        if alive >= brokers as usize {
            return Ok(listed);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "only {alive} of {brokers} brokers registered in time"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
