//! The HTTP side: the routes, the shared state, the error page, the access checks every page
//! makes, and the server with its graceful shutdown. One file per page ([`machines`],
//! [`workflows`], [`templates`], [`search`]), each a thin handler over pure functions that
//! filter, sort and paginate (tested on their own); the session (cookie or `Authorization`
//! header), login, logout and the anti-CSRF check in [`session`]; live streams in [`stream`].
//!
//! Pages (GET): `/` machines, `/workflows`, `/workflows/{ns}/{name}`, `/templates`,
//! `/templates/{ns}/{name}?hardware=`, `/search?q=`, `/login`. Live streams (GET, server-sent
//! events): `/live/machines`, `/live/workflows`, `/live/workflows/{ns}/{name}`. Actions (POST,
//! with the session's anti-CSRF value when the session is a cookie): `/login`, `/logout`,
//! `/workflows/{ns}/{name}/cancel`, `/workflows/{ns}/{name}/rerun`.

pub mod machines;
pub mod search;
pub mod session;
mod stream;
pub mod templates;
pub mod workflows;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt as _;
use http::{HeaderValue, StatusCode, header};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::access::{Access, AccessError, Permission, User, csrf_token};
use crate::cache::Cache;
use crate::live::{Live, Namespaces, Slots, StreamLimits};
use crate::metrics::Metrics;
use crate::pages::{ErrorPage, Layout};

pub use machines::MachinesQuery;
pub use search::SearchQuery;
pub use session::{COOKIE, LoginQuery, Session, request_token};
pub use templates::TemplateQuery;
pub use workflows::{LiveQuery, LogsQuery, Sort, WorkflowQuery, WorkflowsQuery, rerun_of};

/// The most rows the workflows page shows.
pub const MAX_ROWS: usize = 2000;
/// The most search hits.
pub const MAX_HITS: usize = 200;
/// The most namespaces checked one by one for a user without cluster-wide access.
const MAX_NAMESPACE_CHECKS: usize = 256;

const JS: &str = include_str!("../../static/console.js");
const CSS: &str = include_str!("../../static/console.css");

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    cache: Arc<Cache>,
    live: Arc<Live>,
    access: Access,
    metrics: Metrics,
    kube: kube::Config,
    secure_cookies: bool,
    sse: Slots,
    limits: StreamLimits,
    logs: Option<crate::logs::Logs>,
    shutdown: CancellationToken,
}

/// How the HTTP side behaves.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// Whether the session cookie is `Secure` (HTTPS only).
    pub secure_cookies: bool,
    /// At most this many live streams at once.
    pub sse_max_clients: usize,
    /// At most this many live streams of one user at once.
    pub sse_max_clients_per_user: usize,
    /// The live streams' limits.
    pub limits: StreamLimits,
    /// Where action output is read, if anywhere.
    pub logs: Option<crate::logs::Logs>,
}

impl AppState {
    /// The state of the routes.
    pub fn new(
        cache: Arc<Cache>,
        live: Arc<Live>,
        access: Access,
        metrics: Metrics,
        kube: kube::Config,
        settings: HttpSettings,
        shutdown: CancellationToken,
    ) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                cache,
                live,
                access,
                metrics,
                kube,
                secure_cookies: settings.secure_cookies,
                sse: Slots::new(settings.sse_max_clients, settings.sse_max_clients_per_user),
                limits: settings.limits,
                logs: settings.logs,
                shutdown,
            }),
        }
    }
}

/// Why a request was not answered with its page.
#[derive(Debug)]
pub enum PageError {
    /// No session: log in first (GET pages redirect to the login page).
    Login(String),
    /// The token was refused.
    Unauthenticated(String),
    /// The user may not.
    Forbidden(String),
    /// No such object.
    NotFound(String),
    /// Malformed input.
    BadRequest(String),
    /// Too many live streams (of this user, or in all).
    TooMany(String),
    /// The caches have not synced, or the Kubernetes API did not answer.
    Unavailable(String),
}

impl PageError {
    fn status(&self) -> StatusCode {
        match self {
            PageError::Login(_) => StatusCode::SEE_OTHER,
            PageError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            PageError::Forbidden(_) => StatusCode::FORBIDDEN,
            PageError::NotFound(_) => StatusCode::NOT_FOUND,
            PageError::BadRequest(_) => StatusCode::BAD_REQUEST,
            PageError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            PageError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl From<AccessError> for PageError {
    fn from(e: AccessError) -> Self {
        match e {
            AccessError::Unauthenticated(_) => {
                PageError::Unauthenticated(format!("{e}. Log in again with a valid token."))
            }
            AccessError::Forbidden { .. } => PageError::Forbidden(e.to_string()),
            AccessError::Unavailable { .. } => PageError::Unavailable(e.to_string()),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match self {
            PageError::Login(next) => {
                let to = format!("/login?next={}", encode(&next));
                return redirect(&to);
            }
            PageError::Unauthenticated(m)
            | PageError::Forbidden(m)
            | PageError::NotFound(m)
            | PageError::BadRequest(m)
            | PageError::TooMany(m)
            | PageError::Unavailable(m) => m,
        };
        let page = ErrorPage {
            layout: Layout {
                title: status.as_u16().to_string(),
                ..Default::default()
            },
            status: status.as_u16(),
            message,
        };
        let mut response = html(status, &page);
        if status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
        }
        if status == StatusCode::UNAUTHORIZED {
            // The stored token is of no use any more.
            if let Ok(v) = HeaderValue::from_str(&format!(
                "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
            )) {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
        }
        response
    }
}

type PageResult = Result<Response, PageError>;

fn encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn html(status: StatusCode, page: &impl askama::Template) -> Response {
    match page.render() {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot render a page");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot render the page").into_response()
        }
    }
}

/// The routes.
/// Bad input in a query parameter: the page answers 400 naming the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("query parameter `{param}`: {value:?} is not one of {allowed}")]
pub struct BadQuery {
    /// The parameter.
    pub param: &'static str,
    /// What was sent.
    pub value: String,
    /// What it may be, comma separated.
    pub allowed: String,
}

impl From<BadQuery> for PageError {
    fn from(e: BadQuery) -> Self {
        PageError::BadRequest(e.to_string())
    }
}

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(machines::page))
        .route("/workflows", get(workflows::list))
        .route("/workflows/{ns}/{name}", get(workflows::page))
        .route("/workflows/{ns}/{name}/cancel", post(workflows::cancel))
        .route("/workflows/{ns}/{name}/rerun", post(workflows::rerun))
        .route("/workflows/{ns}/{name}/logs", get(workflows::logs))
        .route("/templates", get(templates::list))
        .route("/templates/{ns}/{name}", get(templates::page))
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

impl AppState {
    fn synced(&self) -> Result<(), PageError> {
        if self.inner.cache.synced() {
            Ok(())
        } else {
            Err(PageError::Unavailable(
                "the console is still loading Hardware, Workflows, Templates and Events from the Kubernetes API; try again in a moment".into(),
            ))
        }
    }

    /// The namespaces in which `user` may list `resource` (of `group`): all, or those of
    /// `known` the user may list in; just `filter` when given (403 when not allowed there).
    async fn visible(
        &self,
        user: &User,
        group: &'static str,
        resource: &'static str,
        filter: Option<&str>,
        known: impl IntoIterator<Item = String>,
    ) -> Result<Namespaces, PageError> {
        let access = &self.inner.access;
        let perm = |ns: &str| Permission {
            verb: "list",
            group,
            resource,
            subresource: "",
            namespace: ns.to_string(),
            name: String::new(),
        };
        if let Some(ns) = filter {
            access.authorize(user, &perm(ns)).await?;
            return Ok(Namespaces::Some([ns.to_string()].into()));
        }
        if access.may(user, &perm("")).await? {
            return Ok(Namespaces::All);
        }
        let known: BTreeSet<String> = known.into_iter().collect();
        let checks = futures::stream::iter(known.into_iter().take(MAX_NAMESPACE_CHECKS))
            .map(|ns| async move {
                let ok = access.may(user, &perm(&ns)).await;
                (ns, ok)
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        let mut set = HashSet::new();
        for (ns, ok) in checks {
            if ok? {
                set.insert(ns);
            }
        }
        if set.is_empty() {
            return Err(PageError::Forbidden(format!(
                "user {:?} may not list {resource} in any namespace: it needs {}",
                user.name,
                perm("")
            )));
        }
        Ok(Namespaces::Some(set))
    }

    fn layout(
        &self,
        s: &Session,
        title: impl Into<String>,
        nav: &'static str,
        live: String,
    ) -> Layout {
        Layout {
            title: title.into(),
            user: s.user.name.clone(),
            csrf: csrf_token(&s.token),
            live,
            nav,
            q: String::new(),
        }
    }

    fn user_client(&self, token: &str) -> Result<kube::Client, PageError> {
        let mut config = self.inner.kube.clone();
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        kube::Client::try_from(config)
            .map_err(|e| PageError::Unavailable(format!("cannot build a Kubernetes client: {e}")))
    }

    fn done(&self, page: &'static str, r: PageResult) -> Response {
        let response = r.unwrap_or_else(IntoResponse::into_response);
        self.inner.metrics.request(page, response.status().as_u16());
        response
    }
}

fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn namespaces_of<'a, K: kube::Resource + 'a>(
    objs: impl Iterator<Item = &'a Arc<K>>,
) -> BTreeSet<String> {
    objs.filter_map(|o| o.meta().namespace.clone()).collect()
}

/// Cuts `items` to the first `max`; how many were left out.
pub fn paginate<T>(items: &mut Vec<T>, max: usize) -> usize {
    let more = items.len().saturating_sub(max);
    items.truncate(max);
    more
}

/// Checks a name from a path: a Kubernetes object name (DNS subdomain).
fn object_name(what: &str, s: &str) -> Result<(), PageError> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(PageError::BadRequest(format!(
            "{what} {s:?} is not a Kubernetes name (lower-case letters, digits, `-` and `.`)"
        )))
    }
}

fn kube_error(what: &str, e: kube::Error) -> PageError {
    match e {
        kube::Error::Api(s) if s.code == 404 => {
            PageError::NotFound(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 403 => {
            PageError::Forbidden(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 401 => {
            PageError::Unauthenticated(format!("{what}: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 400 || s.code == 409 || s.code == 422 => {
            PageError::BadRequest(format!("{what}: {}", s.message))
        }
        e => PageError::Unavailable(format!("{what}: {e}")),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paginate_keeps_the_first_and_counts_the_rest() {
        let mut v: Vec<u32> = (0..10).collect();
        assert_eq!(paginate(&mut v, 4), 6);
        assert_eq!(v, [0, 1, 2, 3]);
        assert_eq!(paginate(&mut v, 4), 0);
        assert_eq!(paginate(&mut v, 10), 0);
        assert_eq!(v.len(), 4);
    }

    #[test]
    fn names_from_paths_are_checked() {
        assert!(object_name("workflow", "wf-1.a").is_ok());
        assert!(object_name("workflow", "WF").is_err());
        assert!(object_name("workflow", "a/b").is_err());
        assert!(object_name("workflow", "").is_err());
    }
}
