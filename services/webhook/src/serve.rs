//! The HTTPS server: TLS (rustls, the certificate resolved per handshake from the reloading
//! store), HTTP/1.1 with keep-alive, the two webhook routes, bounded connections, and a
//! graceful shutdown bounded by a grace period.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::IntoResponse;
use axum::routing::post;
use bytes::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::Instrument as _;

use crate::index::Index;
use crate::metrics::Metrics;

/// Limits of the server.
#[derive(Clone, Debug)]
pub struct ServeLimits {
    /// Largest request body (a ConversionReview of a long list is the biggest).
    pub max_body_bytes: usize,
    /// Most open connections; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// Most conversion reviews converted at once (each on a blocking thread).
    pub max_concurrent_conversions: usize,
    /// Time a client has for the TLS handshake and for sending request headers.
    pub handshake_timeout: Duration,
    /// Time open connections get to finish on shutdown before they are closed.
    pub shutdown_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 << 20,
            max_connections: 1024,
            max_concurrent_conversions: 4,
            handshake_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The MAC/IP and reference index.
    pub index: Arc<Index>,
    /// Metrics.
    pub metrics: Metrics,
    /// Bounds concurrent conversions.
    pub conversions: Arc<Semaphore>,
}

impl AppState {
    /// A state over `index`.
    pub fn new(index: Arc<Index>, metrics: Metrics, limits: &ServeLimits) -> Self {
        Self {
            index,
            metrics,
            conversions: Arc::new(Semaphore::new(limits.max_concurrent_conversions.max(1))),
        }
    }
}

/// The routes: `POST /validate` and `POST /convert`.
pub fn router(state: AppState, limits: &ServeLimits) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/convert", post(convert))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .with_state(state)
}

async fn validate(State(state): State<AppState>, body: Bytes) -> impl IntoResponse {
    let span = tracing::info_span!("admission", bytes = body.len());
    let (code, out) =
        span.in_scope(|| crate::admission::handle(&body, &state.index, &state.metrics));
    (code, axum::Json(out))
}

async fn convert(State(state): State<AppState>, body: Bytes) -> impl IntoResponse {
    let span = tracing::info_span!("conversion", bytes = body.len());
    let (code, out) =
        crate::conversion::handle(body, state.conversions.clone(), state.metrics.clone())
            .instrument(span)
            .await;
    (code, axum::Json(out))
}

/// Serves `app` over TLS on `listener` until `shutdown`, then lets open requests finish for
/// up to `limits.shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    limits: ServeLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "webhook listening (HTTPS)");
    }
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let stop = shutdown.clone();
        let handshake_timeout = limits.handshake_timeout;
        connections.spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |req| app.clone().oneshot(req));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(handshake_timeout)
                .serve_connection(TokioIo::new(tls), service);
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let deadline = Instant::now() + limits.shutdown_grace;
    while !connections.is_empty() {
        match tokio::time::timeout_at(deadline.into(), connections.join_next()).await {
            Ok(_) => {}
            Err(_) => {
                tracing::warn!(
                    open = connections.len(),
                    "closing connections still open after the shutdown grace period"
                );
                connections.abort_all();
                break;
            }
        }
    }
    Ok(())
}
