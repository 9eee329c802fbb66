//! The HTTP side: the routes and the server with its graceful shutdown. One file per page
//! ([`machines`], [`workflows`], [`templates`], [`search`]), each a thin handler over pure
//! functions that filter, sort and paginate (tested on their own); the session extractor
//! (cookie or `Authorization` header), login, logout and the anti-CSRF check in [`session`].
//! Below them, with no page above: `state` ([`AppState`] and the access checks every page
//! makes), `error` ([`PageError`] and how it is answered), `query` (input helpers) and
//! `stream` (opening a live stream within its caps).
//!
//! Pages (GET): `/` machines, `/machines/{ns}/{name}`, `/workflows`,
//! `/workflows/{ns}/{name}`, `/templates`, `/templates/{ns}/{name}?hardware=`, `/search?q=`,
//! `/rollouts?ns=`, `/rollouts/{ns}/{name}`, `/login`. Live streams (GET, server-sent events): `/live/machines`,
//! `/live/machines/{ns}/{name}`, `/live/workflows`, `/live/workflows/{ns}/{name}`. Actions
//! (POST, with the session's anti-CSRF value when the session is a cookie): `/login`,
//! `/logout`, `/workflows/{ns}/{name}/cancel`, `/workflows/{ns}/{name}/rerun`,
//! `/machines/{ns}/{name}/power` (a BMC Job, created with the user's token).

mod error;
pub mod machines;
mod query;
pub mod rollouts;
pub mod search;
pub mod session;
mod state;
mod stream;
pub mod templates;
pub mod workflows;

use std::time::Instant;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderValue, header};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::{BadQuery, COOKIE, PageError, PageResult};
pub use machines::{MachineQuery, MachinesQuery, PowerChoice};
pub use query::paginate;
pub use search::{MAX_HITS, SearchQuery};
pub use session::{LoginQuery, Session, request_token};
pub use state::{AppState, HttpSettings};
pub use templates::TemplateQuery;
pub use workflows::{
    LiveQuery, LogsQuery, MAX_ROWS, Sort, WorkflowQuery, WorkflowsQuery, rerun_of,
};

const JS: &str = include_str!("../../static/console.js");
const CSS: &str = include_str!("../../static/console.css");

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(machines::page))
        .route("/machines/{ns}/{name}", get(machines::machine))
        .route("/machines/{ns}/{name}/power", post(machines::power))
        .route("/live/machines/{ns}/{name}", get(machines::live_machine))
        .route("/workflows", get(workflows::list))
        .route("/workflows/{ns}/{name}", get(workflows::page))
        .route("/workflows/{ns}/{name}/cancel", post(workflows::cancel))
        .route("/workflows/{ns}/{name}/rerun", post(workflows::rerun))
        .route("/workflows/{ns}/{name}/logs", get(workflows::logs))
        .route("/templates", get(templates::list))
        .route("/templates/{ns}/{name}", get(templates::page))
        .route("/rollouts", get(rollouts::list))
        .route("/rollouts/{ns}/{name}", get(rollouts::page))
        .route("/search", get(search::page))
        .route("/login", get(session::login_page).post(session::login))
        .route("/logout", post(session::logout))
        .route("/live/machines", get(machines::live))
        .route("/live/workflows", get(workflows::live_list))
        .route("/live/workflows/{ns}/{name}", get(workflows::live_page))
        .route(
            "/static/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .route(
            "/static/console.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .layer(middleware::from_fn(headers_and_trace))
        .with_state(state)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// Security headers on every answer, and one span per request.
async fn headers_and_trace(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let span = tracing::info_span!("request", %method, path = %path);
    let started = Instant::now();
    let mut response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    span.in_scope(|| {
        tracing::debug!(
            status = response.status().as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "answered"
        );
    });
    response
}

/// Serves `router` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}
