use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Health;

/// Flags for the admin endpoint, flattened into each service's arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct AdminArgs {
    /// Address of the admin HTTP endpoint serving /healthz, /readyz and /metrics.
    #[arg(
        long = "admin-addr",
        env = "TINK_ADMIN_ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub admin_addr: SocketAddr,
    /// Seconds from SIGTERM until the process exits whatever its dependencies (NATS, the
    /// Kubernetes API) are doing: in-flight work gets this long to finish or be handed back.
    #[arg(
        long = "shutdown-grace-seconds",
        env = "TINK_SHUTDOWN_GRACE_SECONDS",
        default_value_t = 10
    )]
    pub shutdown_grace_seconds: u64,
}

impl AdminArgs {
    /// The shutdown grace as a duration.
    pub fn shutdown_grace(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.shutdown_grace_seconds)
    }
}

#[derive(Clone)]
struct AdminState {
    health: Health,
    registry: Arc<Registry>,
}

/// The admin routes: `/healthz` (200 while the process serves), `/readyz` (200 when ready, 503
/// otherwise) and `/metrics` (OpenMetrics text of `registry`).
pub fn admin_router(health: Health, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState { health, registry })
}

/// Serves [`admin_router`] on `listener` until `shutdown` is cancelled.
pub async fn serve_admin(
    listener: TcpListener,
    health: Health,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin endpoint listening");
    }
    axum::serve(listener, admin_router(health, registry))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let (status, verdict) = if state.health.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    };
    let mut body = verdict.to_string();
    for note in state.health.notes() {
        body.push_str("note: ");
        body.push_str(&note);
        body.push('\n');
    }
    (status, body).into_response()
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}

/// A service binary's admin endpoint, bound and serving until the shutdown token is cancelled.
pub struct AdminServer {
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl AdminServer {
    /// Binds `args.admin_addr` (an error names the address) and serves [`admin_router`] there
    /// until `shutdown` is cancelled.
    pub async fn start(
        args: &AdminArgs,
        health: &Health,
        registry: Registry,
        shutdown: &CancellationToken,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(args.admin_addr).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot bind the admin endpoint {}: {e}", args.admin_addr),
            )
        })?;
        let task = tokio::spawn(serve_admin(
            listener,
            health.clone(),
            Arc::new(registry),
            shutdown.clone(),
        ));
        Ok(Self { task })
    }

    /// Waits for the endpoint to stop (after the shutdown token was cancelled).
    pub async fn stopped(self) -> std::io::Result<()> {
        self.task
            .await
            .map_err(|e| std::io::Error::other(format!("admin endpoint task: {e}")))?
    }
}
