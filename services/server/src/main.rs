//! tink-server: the agent-facing gRPC gateway in front of NATS JetStream.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

/// The tinkerbell server: agents stream their commands from it and publish events to it.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address of the gRPC endpoint (WorkflowService and grpc.health.v1).
    #[arg(long, env = "TINK_SERVER_LISTEN", default_value = "0.0.0.0:42113")]
    listen: SocketAddr,
    /// NATS server URL(s), comma separated.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// This replica's name in presence entries and logs; defaults to the host name (the pod name).
    #[arg(long, env = "TINK_REPLICA_ID")]
    replica_id: Option<String>,
    /// Replicas of the JetStream streams and bucket (1 for a single NATS server, 3 for a cluster).
    #[arg(long, env = "TINK_NATS_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
    /// Seconds a presence entry lives without a heartbeat.
    #[arg(long, env = "TINK_PRESENCE_TTL_SECONDS", default_value_t = 30)]
    presence_ttl_seconds: u64,
    /// PEM certificate chain for TLS; TLS is off unless both this and --tls-key are set.
    #[arg(long, env = "TINK_SERVER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS.
    #[arg(long, env = "TINK_SERVER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA bundle; when set, agents must present a client certificate it signed.
    #[arg(long, env = "TINK_SERVER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

fn read(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("tink-server", &args.telemetry)?;

    let replica_id = match args.replica_id {
        Some(id) => id,
        None => std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| format!("tink-server-{}", std::process::id())),
    };
    let mut config = tink_server::ServerConfig::new(args.nats_url, replica_id);
    config.bus.replicas = args.stream_replicas;
    config.bus.presence_ttl = Duration::from_secs(args.presence_ttl_seconds.max(2));
    config.bus.presence_heartbeat = config.bus.presence_ttl / 3;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some(tink_server::TlsConfig {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            client_ca_pem: args.tls_client_ca.as_ref().map(read).transpose()?,
        });
    }

    let shutdown = tink_runtime::shutdown_token();
    let health = tink_runtime::Health::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = tink_server::Metrics::register(&mut registry);
    let registry = Arc::new(registry);

    let admin = tokio::net::TcpListener::bind(args.admin.admin_addr)
        .await
        .with_context(|| format!("cannot bind the admin endpoint {}", args.admin.admin_addr))?;
    let admin_task = tokio::spawn(tink_runtime::serve_admin(
        admin,
        health.clone(),
        registry,
        shutdown.clone(),
    ));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot bind {}", args.listen))?;

    let served = tink_server::serve(config, listener, health, metrics, shutdown.clone()).await;
    shutdown.cancel();
    admin_task.await.context("admin endpoint task")??;
    served?;
    Ok(())
}
