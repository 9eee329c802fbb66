//! The HTTPS server: TLS (rustls, the certificate resolved per handshake from the reloading
//! store), HTTP/1.1 with keep-alive, the two webhook routes, bounded connections, and a
//! graceful shutdown bounded by a grace period.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::Instrument as _;

use crate::approval::Approver;
use crate::index::Index;
use crate::metrics::Metrics;

/// The default largest request body: 8 MiB. The API server refuses objects over 3 MiB
/// (etcd's request limit is lower still), and an AdmissionReview of an UPDATE carries two of
/// them (`object`, `oldObject`), plus the envelope.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 << 20;

/// Admission bodies up to this size are parsed and validated on the runtime thread that read
/// them (a typical AdmissionReview is a few KiB and takes microseconds); larger ones on the
/// blocking pool, under the same bound as conversions.
pub const INLINE_PARSE_BYTES: usize = 64 << 10;

/// Limits of the server.
#[derive(Clone, Debug)]
pub struct ServeLimits {
    /// Largest request body; a larger one is answered 413 (before it is read, when its
    /// `Content-Length` says so). Default [`DEFAULT_MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// Most open connections; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// Most reviews parsed and processed on the blocking pool at once: every ConversionReview,
    /// and AdmissionReviews larger than [`INLINE_PARSE_BYTES`]. Further ones wait for a slot.
    pub max_concurrent_conversions: usize,
    /// Time a client has for the TLS handshake and for sending request headers.
    pub handshake_timeout: Duration,
    /// Time open connections get to finish on shutdown before they are closed.
    pub shutdown_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
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
    /// Bounds the reviews processed on the blocking pool (conversions and large admissions).
    pub conversions: Arc<Semaphore>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Checks approvals of discovered Hardware (SubjectAccessReview); without one, every
    /// approval is refused.
    pub approver: Option<Arc<Approver>>,
}

impl AppState {
    /// A state over `index`.
    pub fn new(index: Arc<Index>, metrics: Metrics, limits: &ServeLimits) -> Self {
        Self {
            index,
            metrics,
            conversions: Arc::new(Semaphore::new(limits.max_concurrent_conversions.max(1))),
            max_body_bytes: limits.max_body_bytes,
            approver: None,
        }
    }

    /// The same state, checking approvals with `approver`.
    pub fn with_approver(mut self, approver: Arc<Approver>) -> Self {
        self.approver = Some(approver);
        self
    }
}

/// The routes: `POST /validate` and `POST /convert`.
pub fn router(state: AppState, limits: &ServeLimits) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/convert", post(convert))
        // The handlers read the body themselves, with `state.max_body_bytes`; this layer keeps
        // any other extractor bounded too.
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .with_state(state)
}

/// A `Status` answer (what the API server expects from a webhook that cannot answer a review).
fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "code": code.as_u16(), "reason": reason, "message": message});
    (code, axum::Json(body)).into_response()
}

/// 413 for a body over `limit` (`size`: its declared length, when known). The API server then
/// applies the webhook's `failurePolicy`.
fn too_large(limit: usize, size: Option<u64>) -> Response {
    let size = match size {
        Some(n) => format!("of {n} bytes "),
        None => String::new(),
    };
    tracing::warn!(limit, %size, "refusing a request body over the limit");
    status(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
        format!(
            "request body {size}is larger than the webhook's limit of {limit} bytes \
             (tink-webhook --max-body-bytes, TINK_WEBHOOK_MAX_BODY_BYTES)"
        ),
    )
}

/// The request body, at most `limit` bytes: a `Content-Length` over the limit is refused before
/// any of the body is read, a body without one as soon as it passes the limit.
async fn read_body(request: Request, limit: usize) -> Result<Bytes, Response> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared
        && n > limit as u64
    {
        return Err(too_large(limit, Some(n)));
    }
    match axum::body::to_bytes(request.into_body(), limit).await {
        Ok(body) => Ok(body),
        Err(e) => {
            let e = e.into_inner();
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(too_large(limit, None))
            } else {
                Err(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("cannot read the request body: {e}"),
                ))
            }
        }
    }
}

async fn validate(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    let body = match read_body(request, state.max_body_bytes).await {
        Ok(b) => b,
        Err(refused) => {
            let seconds = started.elapsed().as_secs_f64();
            state.metrics.admission("unknown", "error", seconds);
            return refused;
        }
    };
    // The admission metric times the review, not the client sending it.
    let started = Instant::now();
    let span = tracing::info_span!("admission", bytes = body.len());
    let approver = state.approver.as_deref();
    if body.len() <= INLINE_PARSE_BYTES {
        let checked = span.in_scope(|| crate::admission::check(&body, &state.index));
        let (code, out) =
            crate::admission::finish(checked, &state.index, &state.metrics, approver, started)
                .instrument(span)
                .await;
        return (code, axum::Json(out)).into_response();
    }
    // A large review: parsed and validated on the blocking pool, a bounded number at once, so
    // the runtime threads keep serving the small ones.
    let Ok(permit) = state.conversions.clone().acquire_owned().await else {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the webhook is shutting down".into(),
        );
    };
    let index = state.index.clone();
    let blocking_span = span.clone();
    let checked = tokio::task::spawn_blocking(move || {
        blocking_span.in_scope(|| crate::admission::check(&body, &index))
    })
    .await;
    // The SubjectAccessReview of an approval waits on the network, not on a CPU slot.
    drop(permit);
    match checked {
        Ok(checked) => {
            let (code, out) =
                crate::admission::finish(checked, &state.index, &state.metrics, approver, started)
                    .instrument(span)
                    .await;
            (code, axum::Json(out)).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "admission panicked");
            status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("admission failed unexpectedly: {e}"),
            )
        }
    }
}

async fn convert(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    let body = match read_body(request, state.max_body_bytes).await {
        Ok(b) => b,
        Err(refused) => {
            let seconds = started.elapsed().as_secs_f64();
            state.metrics.conversion("malformed", 0, seconds);
            return refused;
        }
    };
    let span = tracing::info_span!("conversion", bytes = body.len());
    let (code, out) =
        crate::conversion::handle(body, state.conversions.clone(), state.metrics.clone())
            .instrument(span)
            .await;
    (code, axum::Json(out)).into_response()
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
