//! tink-webhook: validating admission and CRD conversion for the tinkerbell.org kinds.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

/// mimalloc instead of glibc malloc: allocation is a large share of a request's cost here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The tinkerbell webhook: validates Hardware, Template, Workflow and OSIE objects and converts
/// them between v1alpha1 and v1alpha2, over HTTPS.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address of the HTTPS listener (POST /validate, POST /convert).
    #[arg(long, env = "TINK_WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    listen: SocketAddr,
    /// PEM certificate chain (leaf first); reloaded when it changes.
    #[arg(long, env = "TINK_WEBHOOK_TLS_CERT")]
    tls_cert: PathBuf,
    /// PEM private key of the certificate; reloaded when it changes.
    #[arg(long, env = "TINK_WEBHOOK_TLS_KEY")]
    tls_key: PathBuf,
    /// Seconds between checks of the certificate files for changes.
    #[arg(long, env = "TINK_WEBHOOK_TLS_RELOAD_SECONDS", default_value_t = 10)]
    tls_reload_seconds: u64,
    /// Largest request body in bytes (8 MiB: the API server's objects are at most 3 MiB, an
    /// UPDATE's review carries two); larger bodies get 413 and the API server applies the
    /// webhook's failurePolicy. Raise it for v1alpha1 lists whose ConversionReview is larger.
    #[arg(long, env = "TINK_WEBHOOK_MAX_BODY_BYTES", default_value_t = tink_webhook::serve::DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// Most open client connections.
    #[arg(long, env = "TINK_WEBHOOK_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// Most reviews processed on the blocking pool at once: ConversionReviews, and
    /// AdmissionReviews over 64 KiB (smaller ones are validated inline).
    #[arg(
        long,
        env = "TINK_WEBHOOK_MAX_CONCURRENT_CONVERSIONS",
        default_value_t = 4
    )]
    max_concurrent_conversions: usize,
    /// Seconds an admitted Hardware's new MACs and IPs stay reserved until its watch event.
    #[arg(long, env = "TINK_WEBHOOK_RESERVATION_SECONDS", default_value_t = 30)]
    reservation_seconds: u64,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("tink-webhook", &args.telemetry)?;

    let mut config = tink_webhook::WebhookConfig::new(args.listen, args.tls_cert, args.tls_key);
    config.tls.reload_interval = Duration::from_secs(args.tls_reload_seconds.max(1));
    config.limits.max_body_bytes = args.max_body_bytes;
    config.limits.max_connections = args.max_connections.max(1);
    config.limits.max_concurrent_conversions = args.max_concurrent_conversions.max(1);
    // Open requests get three quarters of the grace; the process exits at the full grace.
    config.limits.shutdown_grace = args.admin.shutdown_grace() * 3 / 4;
    config.reservation_ttl = Duration::from_secs(args.reservation_seconds);

    let client = kube::Client::try_default()
        .await
        .context("cannot configure the Kubernetes client (KUBECONFIG or in-cluster)")?;

    let mut service = tink_runtime::Service::new(&args.admin);
    let metrics = tink_webhook::Metrics::register(service.registry());
    service
        .run(|health, shutdown| tink_webhook::run(config, client, health, metrics, shutdown))
        .await?;
    Ok(())
}
