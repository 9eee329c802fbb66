//! tink-server: the agent-facing gRPC gateway in front of NATS JetStream.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;

// No mimalloc here, unlike the other services: the server's CPU per event and per workflow is
// the same with it (BENCHMARKS.md, "Server" and "At scale"), and its RSS per connected agent
// grew from 33 to 46-57 KiB.

/// The tinkerbell server: agents stream their commands from it and publish events to it.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address of the gRPC endpoint (WorkflowService and grpc.health.v1).
    #[arg(long, env = "TINK_SERVER_LISTEN", default_value = "0.0.0.0:42113")]
    listen: SocketAddr,
    #[command(flatten)]
    bus: tink_bus::BusArgs,
    /// This replica's name in presence entries and logs; defaults to the host name (the pod name).
    #[arg(long, env = "TINK_REPLICA_ID")]
    replica_id: Option<String>,
    /// PEM certificate chain for TLS (required, with --tls-key, unless --insecure).
    #[arg(long, env = "TINK_SERVER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS.
    #[arg(long, env = "TINK_SERVER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA bundle; when set, agents must present a client certificate it signed, whose URI
    /// SAN `spiffe://<domain>/agent/<agent id>` names the agent.
    #[arg(long, env = "TINK_SERVER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Serve plaintext gRPC without TLS (development only: agents' commands carry secrets).
    #[arg(long, env = "TINK_SERVER_INSECURE", conflicts_with = "tls_cert")]
    insecure: bool,
    /// Admit agents that present neither a client certificate nor their session token (agents
    /// built from the seeds/004 protocol alone); their events are trusted. Off by default.
    #[arg(long, env = "TINK_SERVER_ALLOW_UNAUTHENTICATED_AGENTS")]
    allow_unauthenticated_agents: bool,
    /// Admit agent ids that no Hardware names (benchmarks of the server alone). Off by default:
    /// only the ids the controller publishes from Hardware `spec.networkInterfaces` connect.
    #[arg(long, env = "TINK_SERVER_ADMIT_UNKNOWN_AGENTS")]
    admit_unknown_agents: bool,
    /// The most agent streams this replica holds; more are refused (RESOURCE_EXHAUSTED).
    #[arg(long, env = "TINK_SERVER_MAX_AGENT_STREAMS", default_value_t = 50_000)]
    max_agent_streams: usize,
    /// GetWorkflows streams one peer address may open per second (bursts of ten times that);
    /// 0 for no limit.
    #[arg(long, env = "TINK_SERVER_STREAM_OPENS_PER_PEER", default_value_t = 20)]
    stream_opens_per_peer: u32,
    /// PublishEvent and PublishLogs calls one agent may make per second (bursts of ten times
    /// that); 0 for no limit.
    #[arg(
        long,
        env = "TINK_SERVER_AGENT_CALLS_PER_SECOND",
        default_value_t = 100
    )]
    agent_calls_per_second: u32,
    /// Enrollment: take the inventory of a machine no Hardware names, without credentials, so
    /// the controller creates a discovered Hardware for it (approved before any Workflow).
    #[arg(long, env = "TINK_SERVER_ENROLLMENT")]
    enrollment: bool,
    /// Enrollments this replica takes per second (bursts of ten times that); 0 for no limit.
    #[arg(long, env = "TINK_SERVER_ENROLLMENTS_PER_SECOND", default_value_t = 20)]
    enrollments_per_second: u32,
    /// Serve LogService.ReadLogs, checking callers with the Kubernetes API of this kubeconfig
    /// (TokenReview, SubjectAccessReview, get workflows). Without it or --kube-in-cluster,
    /// ReadLogs answers FAILED_PRECONDITION.
    #[arg(
        long,
        env = "TINK_SERVER_KUBECONFIG",
        conflicts_with = "kube_in_cluster"
    )]
    kubeconfig: Option<PathBuf>,
    /// Serve LogService.ReadLogs with the in-cluster Kubernetes configuration (the pod's
    /// ServiceAccount; see deploy/rbac/server.yaml).
    #[arg(long, env = "TINK_SERVER_KUBE_IN_CLUSTER")]
    kube_in_cluster: bool,
    /// Seconds a positive TokenReview or SubjectAccessReview answer is reused (0: never).
    #[arg(
        long,
        env = "TINK_SERVER_LOG_ACCESS_CACHE_SECONDS",
        default_value_t = 5
    )]
    log_access_cache_seconds: u64,
    /// PublishLogs calls (action output) stored at once; more wait their turn, so action output
    /// can never crowd out events (which also have a NATS connection of their own).
    #[arg(long, env = "TINK_SERVER_LOGS_MAX_IN_FLIGHT", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    logs_max_in_flight: u32,
    /// ReadLogs calls (operators reading action output) served at once; more are refused with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "TINK_SERVER_LOG_READERS_MAX", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    log_readers_max: u32,
    /// Seconds between checks of a following ReadLogs caller's token and permission (TokenReview
    /// and SubjectAccessReview again): a removed RoleBinding ends its stream within this long.
    #[arg(long, env = "TINK_SERVER_LOG_REAUTHORIZE_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    log_reauthorize_seconds: u64,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

fn read(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// The Kubernetes client of LogService, if configured.
async fn kube_client(args: &Args) -> anyhow::Result<Option<tink_server::KubeClient>> {
    let config = if let Some(path) = &args.kubeconfig {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .with_context(|| format!("using the kubeconfig {}", path.display()))?
    } else if args.kube_in_cluster {
        kube::Config::incluster().context("reading the in-cluster Kubernetes configuration")?
    } else {
        tracing::info!(
            "no --kubeconfig or --kube-in-cluster: LogService.ReadLogs is not served (FAILED_PRECONDITION)"
        );
        return Ok(None);
    };
    Ok(Some(tink_server::KubeClient(
        kube::Client::try_from(config).context("building the Kubernetes client")?,
    )))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("tink-server", &args.telemetry)?;

    let replica_id = tink_runtime::replica_id(args.replica_id.clone(), "tink-server");
    let mut config = tink_server::ServerConfig::new(args.bus.nats_url.clone(), replica_id);
    config.bus = args.bus.bus_config();
    config.nats_auth = args.bus.nats_auth();
    config.allow_unauthenticated_agents = args.allow_unauthenticated_agents;
    config.admit_unknown_agents = args.admit_unknown_agents;
    config.max_sessions = args.max_agent_streams;
    config.stream_opens_per_peer = args.stream_opens_per_peer;
    config.agent_calls_per_second = args.agent_calls_per_second;
    config.enrollment = args.enrollment;
    config.enrollments_per_second = args.enrollments_per_second;
    config.log_access_cache = std::time::Duration::from_secs(args.log_access_cache_seconds);
    config.logs_max_in_flight = args.logs_max_in_flight as usize;
    config.log_readers_max = args.log_readers_max as usize;
    config.log_reauthorize = std::time::Duration::from_secs(args.log_reauthorize_seconds);
    config.kube = kube_client(&args).await?;
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            config.tls = Some(tink_server::TlsConfig {
                cert_pem: read(cert)?,
                key_pem: read(key)?,
                client_ca_pem: args.tls_client_ca.as_ref().map(read).transpose()?,
            });
        }
        _ if args.insecure => {
            tracing::warn!(
                "--insecure: serving plaintext gRPC; commands (with action env values) and tokens cross the network in the clear"
            );
        }
        _ => anyhow::bail!(
            "TLS is required: give --tls-cert and --tls-key (TINK_SERVER_TLS_CERT, TINK_SERVER_TLS_KEY), or --insecure for plaintext (development only)"
        ),
    }

    let mut service = tink_runtime::Service::new(&args.admin);
    let metrics = tink_server::Metrics::register(service.registry());
    let listen = args.listen;
    service
        .run(|health, shutdown| async move {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot bind {listen}"))?;
            tink_server::serve(config, listener, health, metrics, shutdown).await?;
            anyhow::Ok(())
        })
        .await?;
    Ok(())
}
