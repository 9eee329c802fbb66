//! tink-console: the web console.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser};

/// mimalloc instead of glibc malloc: allocation is a large share of a request's cost here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The web console: machines, workflows and templates, live, seen through each user's own
/// Kubernetes RBAC (log in with a bearer token).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address of the HTTP listener.
    #[arg(long, env = "TINK_CONSOLE_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Only show objects of this namespace (default: all namespaces).
    #[arg(long, env = "TINK_NAMESPACE")]
    namespace: Option<String>,
    /// Seconds a positive TokenReview or SubjectAccessReview answer is remembered (0: never).
    #[arg(long, env = "TINK_CONSOLE_REVIEW_CACHE_SECONDS", default_value_t = 5)]
    review_cache_seconds: u64,
    /// Whether the session cookie is `Secure` (sent over HTTPS only); turn off only for a
    /// console reached over plain HTTP on loopback (the dev stack).
    #[arg(long, env = "TINK_CONSOLE_SECURE_COOKIES", default_value_t = true, action = ArgAction::Set)]
    secure_cookies: bool,
    /// Updates kept for the live streams; a browser further behind reloads its page.
    #[arg(long, env = "TINK_CONSOLE_SSE_BUFFER", default_value_t = 4096)]
    sse_buffer: usize,
    /// At most this many live-update streams at once (more get 429).
    #[arg(long, env = "TINK_CONSOLE_SSE_MAX_CLIENTS", default_value_t = 1000)]
    sse_max_clients: usize,
    /// At most this many live-update streams of one user at once (more get 429).
    #[arg(
        long,
        env = "TINK_CONSOLE_SSE_MAX_CLIENTS_PER_USER",
        default_value_t = 8
    )]
    sse_max_clients_per_user: usize,
    /// Seconds after which a live stream ends (the page reloads and access is checked again).
    #[arg(long, env = "TINK_CONSOLE_SSE_MAX_AGE_SECONDS", default_value_t = 1800)]
    sse_max_age_seconds: u64,
    /// Seconds between checks of a live stream's access (TokenReview, SubjectAccessReview):
    /// a withdrawn permission ends the stream within this plus --review-cache-seconds.
    #[arg(long, env = "TINK_CONSOLE_SSE_RECHECK_SECONDS", default_value_t = 30)]
    sse_recheck_seconds: u64,
    /// Deleted workflows remembered, so the page of a canceled workflow shows how it ended.
    #[arg(long, env = "TINK_CONSOLE_TOMBSTONES", default_value_t = 1000)]
    tombstones: usize,
    /// NATS URL(s) of the agent presence bucket the servers write; unset: tiles show
    /// `agent unknown`.
    #[arg(long, env = "TINK_CONSOLE_NATS_URL")]
    nats_url: Option<String>,
    /// NATS credentials file (JWT and NKey seed) for the presence watch.
    #[arg(long, env = "NATS_CREDS")]
    nats_creds: Option<std::path::PathBuf>,
    /// NATS user for the presence watch (with --nats-password); deploy/'s is `tink-console`,
    /// which may only watch the presence and replica heartbeat buckets.
    #[arg(long, env = "NATS_USER", requires = "nats_password")]
    nats_user: Option<String>,
    /// NATS password.
    #[arg(
        long,
        env = "NATS_PASSWORD",
        requires = "nats_user",
        hide_env_values = true
    )]
    nats_password: Option<String>,
    /// CA certificate (PEM) of the NATS servers; turns TLS on.
    #[arg(long, env = "NATS_TLS_CA")]
    nats_tls_ca: Option<std::path::PathBuf>,
    /// Seconds a server replica's heartbeat counts: its agents are offline after that (the
    /// servers' --presence-ttl-seconds).
    #[arg(long, env = "TINK_PRESENCE_TTL_SECONDS", default_value_t = 30)]
    presence_ttl_seconds: u64,
    /// tink-server addresses (`HOST:PORT`, comma separated) whose LogService shows action
    /// output on workflow pages, read with the user's own token; unset: no output shown.
    #[arg(long, env = "TINK_CONSOLE_SERVER_URL")]
    server_url: Option<String>,
    /// CA certificate (PEM) of the servers' TLS certificates; required with --server-url
    /// unless --insecure.
    #[arg(long, env = "TINK_CONSOLE_SERVER_TLS_CA")]
    server_tls_ca: Option<std::path::PathBuf>,
    /// Talk plaintext gRPC to the servers (servers started with --insecure; development
    /// only: the users' tokens cross the network in the clear).
    #[arg(long, env = "TINK_CONSOLE_INSECURE", conflicts_with = "server_tls_ca")]
    insecure: bool,
    /// The most output lines one page shows.
    #[arg(long, env = "TINK_CONSOLE_LOG_LINES_MAX", default_value_t = 5000)]
    log_lines_max: usize,
    /// This replica's name in logs; defaults to the host name (the pod name).
    #[arg(long, env = "TINK_REPLICA_ID")]
    replica_id: Option<String>,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Checked before anything starts: TLS to the servers unless --insecure.
    let logs = args
        .server_url
        .clone()
        .filter(|u| !u.trim().is_empty())
        .map(|servers| tink_console::logs::LogsConfig {
            servers,
            tls_ca: args.server_tls_ca.clone(),
            insecure: args.insecure,
            max_lines: args.log_lines_max.max(1),
            timeout: Duration::from_secs(15),
        });
    if let Some(logs) = &logs {
        logs.check().map_err(anyhow::Error::msg)?;
    }
    let _telemetry = tink_telemetry::init("tink-console", &args.telemetry)?;
    if args.insecure && logs.is_some() {
        tracing::warn!(
            "--insecure: plaintext gRPC to the servers; the users' tokens cross the network in the clear"
        );
    }
    let replica_id = tink_runtime::replica_id(args.replica_id, "tink-console");
    tracing::info!(replica = %replica_id, listen = %args.listen, "tink-console starting");

    let kube = kube::Config::infer()
        .await
        .context("cannot configure the Kubernetes client (KUBECONFIG or in-cluster)")?;
    let mut config = tink_console::ConsoleConfig::new(args.listen, kube);
    config.namespace = args.namespace.filter(|n| !n.trim().is_empty());
    config.review_cache_ttl = Duration::from_secs(args.review_cache_seconds);
    config.secure_cookies = args.secure_cookies;
    config.sse_buffer = args.sse_buffer.max(1);
    config.sse_max_clients = args.sse_max_clients;
    config.sse_max_clients_per_user = args.sse_max_clients_per_user;
    config.limits.max_age = Duration::from_secs(args.sse_max_age_seconds.max(10));
    config.limits.recheck = Duration::from_secs(args.sse_recheck_seconds.max(1));
    config.tombstones = args.tombstones;
    config.logs = logs;
    config.presence = args
        .nats_url
        .filter(|u| !u.trim().is_empty())
        .map(|nats_url| tink_console::presence::PresenceConfig {
            nats_url,
            auth: tink_bus::NatsAuth {
                credentials_file: args.nats_creds,
                user: args.nats_user,
                password: args.nats_password,
                tls_ca: args.nats_tls_ca,
                ..Default::default()
            },
            ttl: Duration::from_secs(args.presence_ttl_seconds.max(1)),
        });

    let mut service = tink_runtime::Service::new(&args.admin);
    let metrics = tink_console::Metrics::register(service.registry());
    service
        .run(|health, shutdown| tink_console::run(config, health, metrics, shutdown))
        .await?;
    Ok(())
}
