//! `tailstream`: the one user-facing binary.
//!
//! - `dev`: a local cluster (coordinator + N broker processes) with the embedded config.
//! - `coordinator`, `broker`: one server process each (what `dev` starts).
//! - `stream create|list|describe`, `produce`, `consume`: talk to a cluster.
//! - `bench produce|e2e|consume|recovery|chaos|plot`: benchmarks (they live in the `tailstream-bench` crate).
//!
//! Every command finds the coordinator through `--coordinator`, else `$TAILSTREAM_COORDINATOR`,
//! else `coordinator.rpc_addr` of the configuration.

/// Every command's `println!` goes through `output::line`, so a closed pipe ends it quietly
/// instead of panicking (defined before the modules, whose `println!` it shadows).
macro_rules! println {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

mod commands;
mod output;
mod servers;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tailstream_config::Config;

/// With the `jemalloc` feature, jemalloc with background threads that give pages a burst left
/// unused back to the system. Off by default: `benches/scripts/allocator_ab.sh` measured it
/// slower than the system allocator on the produce path, and no better after a burst.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug)]
#[command(
    name = "tailstream",
    version,
    about = "Tailstream: MultiLog streams with Tailwind replication"
)]
struct Cli {
    /// A TOML file overriding any part of the embedded default configuration.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The coordinator's RPC address.
    #[arg(long, global = true, env = "TAILSTREAM_COORDINATOR")]
    coordinator: Option<String>,
    /// Threads of this process's async runtime (default: one per core). Servers that share a
    /// machine should split its cores: `dev` and the benchmarks do so for the processes they
    /// start, since every extra thread per process costs cross-thread wake-ups on each request.
    #[arg(long, global = true, env = "TAILSTREAM_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: Option<u16>,
    /// TLS with the files of this directory: ca.pem, and for a server member.pem and
    /// member.key (what `dev --tls` makes). Overrides the config's `[tls]` section.
    #[arg(long, global = true, env = "TAILSTREAM_TLS_DIR")]
    tls_dir: Option<PathBuf>,
    /// The user this command authenticates as, where the cluster requires it
    /// (`security.client_authentication`); the password is read from $TAILSTREAM_PASSWORD
    /// (never a flag: a process's arguments are visible to every user of the machine).
    #[arg(long, global = true, env = "TAILSTREAM_USER")]
    user: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a local cluster: one coordinator and N brokers on 127.0.0.1, until Ctrl-C.
    Dev(commands::dev::DevArgs),
    /// Run a coordinator process.
    Coordinator(servers::CoordinatorArgs),
    /// Run a broker process.
    Broker(servers::BrokerArgs),
    /// Create, list and describe streams.
    #[command(subcommand)]
    Stream(commands::stream::StreamCommand),
    /// The cluster as the coordinator sees it.
    #[command(subcommand)]
    Cluster(commands::cluster::ClusterCommand),
    /// Consumer groups and their lag.
    #[command(subcommand)]
    Group(commands::group::GroupCommand),
    /// The users Kafka clients authenticate as.
    #[command(subcommand)]
    User(commands::user::UserCommand),
    /// What authenticated users may do.
    #[command(subcommand)]
    Acl(commands::acl::AclCommand),
    /// Produce one record per stdin line; prints the acked count to stderr.
    Produce(commands::produce::ProduceArgs),
    /// Print one record per line to stdout.
    Consume(commands::consume::ConsumeArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Produce N records as fast as the cluster takes them; report throughput and latency.
    Produce(tailstream_bench::produce::ProduceBenchArgs),
    /// Fill one streamlet, kill its owner, report detection, each recovery phase and
    /// kill-to-serving time.
    Recovery(tailstream_bench::recovery::RecoveryBenchArgs),
    /// Kill the leading coordinator (alone, then with a broker) on a local etcd; report kill
    /// to new leader and kill to serving again.
    Failover(tailstream_bench::failover::FailoverBenchArgs),
    /// Crash brokers at random under a running load; check every acked record is read back
    /// exactly once, in order.
    Chaos(tailstream_bench::chaos::ChaosBenchArgs),
    /// Produce on a fixed schedule and time each record until a consumer has it.
    E2e(tailstream_bench::e2e::E2eBenchArgs),
    /// Fill a stream, then read it with C consumers at once; report read throughput.
    Consume(tailstream_bench::consume::ConsumeBenchArgs),
    /// The same produce load through the native protocol and through the Kafka listener,
    /// side by side on one cluster; report both and their ratio.
    Kafka(tailstream_bench::kafka::KafkaBenchArgs),
    /// Time a fresh log's first acknowledged append (it opens the log's replicas) beside the
    /// next record's.
    FirstAppend(tailstream_bench::first_append::FirstAppendBenchArgs),
    /// Turn benchmark JSON lines into SVG figures (throughput, replication, latency, recovery).
    Plot(tailstream_bench::plot::PlotArgs),
}

fn init_tracing(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("tailstream: {error}");
            return ExitCode::from(2);
        }
    };
    let tls_dir = cli.tls_dir.clone().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = &tls_dir {
        config.tls = tailstream_config::TlsConfig::from_dir(dir);
    }
    if matches!(cli.command, Command::Bench(_)) {
        // Benchmarks start clusters of their own (`bench produce --tls` for one with TLS):
        // TLS from the user's shell or file must not reach those children.
        config.tls = tailstream_config::TlsConfig::default();
    }
    let servers = matches!(
        cli.command,
        Command::Coordinator(_) | Command::Broker(_) | Command::Dev(_)
    );
    let member = matches!(cli.command, Command::Coordinator(_) | Command::Broker(_));
    // Benchmarks set up their own; `dev` speaks as its cluster does (it knows after --tls).
    if !matches!(cli.command, Command::Bench(_) | Command::Dev(_))
        && let Err(error) = install_tls(&config.tls, member)
    {
        eprintln!("tailstream: {error}");
        return ExitCode::from(2);
    }
    // Servers authenticate to each other by certificate; benchmarks and `dev` start clusters
    // of their own. Every other command's connections authenticate as the user given.
    if !servers
        && !matches!(cli.command, Command::Bench(_))
        && let Some(user) = cli.user.as_deref().filter(|u| !u.is_empty())
    {
        let password = std::env::var("TAILSTREAM_PASSWORD").unwrap_or_default();
        if password.is_empty() {
            eprintln!("tailstream: --user {user} needs its password in $TAILSTREAM_PASSWORD");
            return ExitCode::from(2);
        }
        tailstream_net::login::set_outgoing(Some(tailstream_net::login::Login::new(
            user,
            &password,
            tailstream_wire::messages::ScramMechanism::Sha256,
        )));
    }
    init_tracing(if servers { "info" } else { "warn" });
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = cli.worker_threads {
        builder.worker_threads(usize::from(threads));
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tailstream: starting the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let coordinator_arg = cli.coordinator.clone();
    let coordinator = cli
        .coordinator
        .unwrap_or_else(|| config.coordinator.rpc_addr.to_string());
    let config_path = cli.config.clone();
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Dev(args) => commands::dev::run(config, config_path, tls_dir, args).await,
            Command::Coordinator(args) => servers::run_coordinator(config, args).await,
            Command::Broker(args) => servers::run_broker(config, args, coordinator_arg).await,
            Command::Stream(command) => commands::stream::run(config, &coordinator, command).await,
            Command::Produce(args) => commands::produce::run(config, &coordinator, args).await,
            Command::Consume(args) => commands::consume::run(config, &coordinator, args).await,
            Command::Cluster(command) => {
                commands::cluster::run(config, &coordinator, command).await
            }
            Command::Group(command) => commands::group::run(config, &coordinator, command).await,
            Command::User(command) => commands::user::run(config, &coordinator, command).await,
            Command::Acl(command) => commands::acl::run(config, &coordinator, command).await,
            Command::Bench(BenchCommand::Produce(args)) => {
                tailstream_bench::produce::run(config, config_path, cli_coordinator(&args), args)
                    .await
            }
            Command::Bench(BenchCommand::Recovery(args)) => {
                tailstream_bench::recovery::run(config, args).await
            }
            Command::Bench(BenchCommand::Failover(args)) => {
                tailstream_bench::failover::run(config, args).await
            }
            Command::Bench(BenchCommand::Chaos(args)) => {
                tailstream_bench::chaos::run(config, args).await
            }
            Command::Bench(BenchCommand::E2e(args)) => {
                tailstream_bench::e2e::run(config, args).await
            }
            Command::Bench(BenchCommand::Consume(args)) => {
                tailstream_bench::consume::run(config, args).await
            }
            Command::Bench(BenchCommand::Kafka(args)) => {
                tailstream_bench::kafka::run(config, args).await
            }
            Command::Bench(BenchCommand::FirstAppend(args)) => {
                tailstream_bench::first_append::run(config, args).await
            }
            Command::Bench(BenchCommand::Plot(args)) => tailstream_bench::plot::run(args),
        }
    });
    // Servers and clients may leave background tasks (connections, timers): don't wait.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tailstream: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Makes this process speak TLS as `tls` says: a member (broker, coordinator) on its listeners
/// and outgoing connections, any other command on its connections.
pub(crate) fn install_tls(tls: &tailstream_config::TlsConfig, member: bool) -> Result<(), String> {
    if !tls.enabled {
        return Ok(());
    }
    let identity = tls.identity();
    let files = tailstream_net::tls::TlsFiles {
        ca_path: tls.ca_path.clone(),
        cert_path: identity.map(|(cert, _)| cert.to_owned()),
        key_path: identity.map(|(_, key)| key.to_owned()),
    };
    if member {
        tailstream_net::tls::install_member(tailstream_net::tls::member(&files)?);
    } else {
        tailstream_net::tls::set_outgoing(Some(tailstream_net::tls::client(&files)?));
    }
    Ok(())
}

/// The bench joins the cluster given by `--join`, else starts its own.
fn cli_coordinator(args: &tailstream_bench::produce::ProduceBenchArgs) -> Option<String> {
    args.join.clone()
}
