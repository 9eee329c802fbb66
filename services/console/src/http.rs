//! The routes, the session (cookie or `Authorization` header), the access checks every page
//! and action makes, and the server with its graceful shutdown.
//!
//! Pages (GET): `/` machines, `/workflows`, `/workflows/{ns}/{name}`, `/templates`,
//! `/templates/{ns}/{name}?hardware=`, `/search?q=`, `/login`. Live streams (GET, server-sent
//! events): `/live/machines`, `/live/workflows`, `/live/workflows/{ns}/{name}`. Actions (POST,
//! with the session's anti-CSRF value when the session is a cookie): `/login`, `/logout`,
//! `/workflows/{ns}/{name}/cancel`, `/workflows/{ns}/{name}/rerun`.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt as _;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use kube::api::{Api, DeleteParams, PostParams};
use serde::Deserialize;
use tink_api::v1alpha2::{Hardware, Workflow, WorkflowState};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::access::{Access, AccessError, Permission, User, csrf_token};
use crate::cache::Cache;
use crate::live::{Filter, Live, Namespaces, Recheck, Refused, Slots, StreamLimits};
use crate::metrics::Metrics;
use crate::pages::*;
use crate::views::{Detail, EventRow, Row, Selector, Tile, state_of};

/// The session cookie.
pub const COOKIE: &str = "tink_console";
/// How long a login lasts in the browser (the token's own expiry still applies).
const COOKIE_MAX_AGE: u32 = 8 * 3600;
/// The most rows the workflows page shows.
pub const MAX_ROWS: usize = 2000;
/// The most search hits.
pub const MAX_HITS: usize = 200;
/// The most namespaces checked one by one for a user without cluster-wide access.
const MAX_NAMESPACE_CHECKS: usize = 256;

const JS: &str = include_str!("../static/console.js");
const CSS: &str = include_str!("../static/console.css");

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
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(machines))
        .route("/workflows", get(workflows))
        .route("/workflows/{ns}/{name}", get(workflow))
        .route("/workflows/{ns}/{name}/cancel", post(cancel))
        .route("/workflows/{ns}/{name}/rerun", post(rerun))
        .route("/workflows/{ns}/{name}/logs", get(logs))
        .route("/templates", get(templates))
        .route("/templates/{ns}/{name}", get(template))
        .route("/search", get(search))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/live/machines", get(live_machines))
        .route("/live/workflows", get(live_workflows))
        .route("/live/workflows/{ns}/{name}", get(live_workflow))
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

/// An authenticated request.
pub struct Session {
    /// Who.
    pub user: User,
    /// Their bearer token.
    pub token: String,
    /// Whether it came from the cookie (then POSTs need the anti-CSRF value).
    pub from_cookie: bool,
}

/// The bearer token of a request: the `Authorization` header, else the session cookie.
pub fn request_token(headers: &HeaderMap) -> Result<Option<(String, bool)>, PageError> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v
            .to_str()
            .map_err(|_| PageError::BadRequest("the Authorization header is not ASCII".into()))?;
        let token = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                PageError::Unauthenticated(
                    "the Authorization header must be `Bearer <token>`".into(),
                )
            })?;
        return Ok(Some((token.to_string(), false)));
    }
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for part in v.split(';') {
            if let Some(value) = part
                .trim()
                .strip_prefix(COOKIE)
                .and_then(|r| r.strip_prefix('='))
            {
                let token: String = form_urlencoded::parse(format!("t={value}").as_bytes())
                    .next()
                    .map(|(_, t)| t.into_owned())
                    .unwrap_or_default();
                if !token.is_empty() {
                    return Ok(Some((token, true)));
                }
            }
        }
    }
    Ok(None)
}

impl AppState {
    async fn session(&self, headers: &HeaderMap, here: &str) -> Result<Session, PageError> {
        let Some((token, from_cookie)) = request_token(headers)? else {
            return Err(PageError::Login(here.to_string()));
        };
        let user = self.inner.access.authenticate(&token).await?;
        Ok(Session {
            user,
            token,
            from_cookie,
        })
    }

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

/// Query of the machines page.
#[derive(Debug, Default, Deserialize)]
pub struct MachinesQuery {
    /// Namespace filter.
    pub ns: Option<String>,
    /// Label filter.
    pub labels: Option<String>,
    /// (Live stream) the sequence number the page was rendered at.
    pub since: Option<u64>,
}

struct MachinesView {
    tiles: Vec<Tile>,
    namespaces: Vec<String>,
    counts: Vec<(&'static str, usize)>,
    hw_visible: Namespaces,
    wf_visible: Namespaces,
    selector: Selector,
}

impl AppState {
    async fn machines_view(
        &self,
        s: &Session,
        q: &MachinesQuery,
    ) -> Result<MachinesView, PageError> {
        self.synced()?;
        let filter = nonempty(&q.ns);
        if let Some(ns) = filter {
            object_name("namespace", ns)?;
        }
        let selector =
            Selector::parse(q.labels.as_deref().unwrap_or("")).map_err(PageError::BadRequest)?;
        let cache = &self.inner.cache;
        let all = cache.hardware.state();
        let known = namespaces_of(all.iter());
        let hw_visible = self
            .visible(
                &s.user,
                crate::access::GROUP,
                "hardware",
                filter,
                known.iter().cloned(),
            )
            .await?;
        let wf_visible = match self
            .visible(
                &s.user,
                crate::access::GROUP,
                "workflows",
                filter,
                known.iter().cloned(),
            )
            .await
        {
            Ok(v) => v,
            Err(PageError::Forbidden(_)) => Namespaces::Some(HashSet::new()),
            Err(e) => return Err(e),
        };
        let latest = cache.latest_workflows();
        let mut tiles: Vec<Tile> = all
            .iter()
            .filter(|h| {
                let ns = h.metadata.namespace.as_deref().unwrap_or("");
                hw_visible.contains(ns)
                    && filter.is_none_or(|f| f == ns)
                    && (selector.is_empty()
                        || selector
                            .matches(h.metadata.labels.as_ref().unwrap_or(&Default::default())))
            })
            .map(|h| {
                let key = crate::cache::key_of(h.as_ref());
                let w = if wf_visible.contains(&key.0) {
                    latest.get(&key).map(|w| w.as_ref())
                } else {
                    None
                };
                Tile::new(h, w, cache.presence.of(h))
            })
            .collect();
        tiles.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut counts: Vec<(&'static str, usize)> = [
            "provisioning",
            "succeeded",
            "failed",
            "cancelling",
            "canceled",
            "idle",
        ]
        .into_iter()
        .map(|c| (c, 0))
        .collect();
        for t in &tiles {
            if let Some(c) = counts.iter_mut().find(|(c, _)| *c == t.class) {
                c.1 += 1;
            }
        }
        let namespaces = known
            .into_iter()
            .filter(|n| hw_visible.contains(n))
            .collect();
        Ok(MachinesView {
            tiles,
            namespaces,
            counts,
            hw_visible,
            wf_visible,
            selector,
        })
    }

    /// Renders the machines page for `headers`' session (the benchmark measures this).
    pub async fn machines_page(&self, headers: &HeaderMap, q: &MachinesQuery) -> PageResult {
        let s = self.session(headers, "/").await?;
        let seq = self.inner.live.seq();
        let v = self.machines_view(&s, q).await?;
        let live = format!(
            "/live/machines?ns={}&labels={}&since={seq}",
            encode(nonempty(&q.ns).unwrap_or("")),
            encode(q.labels.as_deref().unwrap_or(""))
        );
        let page = MachinesPage {
            layout: self.layout(&s, "Machines", "machines", live),
            tiles: &v.tiles,
            namespaces: v.namespaces,
            ns: nonempty(&q.ns).unwrap_or("").to_string(),
            labels: q.labels.clone().unwrap_or_default(),
            counts: v.counts,
        };
        Ok(html(StatusCode::OK, &page))
    }
}

async fn machines(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<MachinesQuery>,
) -> Response {
    let r = st.machines_page(&headers, &q).await;
    st.done("machines", r)
}

async fn live_machines(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<MachinesQuery>,
) -> Response {
    let r = async {
        let s = st.session(&headers, "/").await?;
        let v = st.machines_view(&s, &q).await?;
        st.sse(
            &s,
            Filter::Machines {
                namespaces: v.hw_visible,
                workflows: v.wf_visible,
                namespace: nonempty(&q.ns).map(str::to_string),
                selector: v.selector,
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

impl AppState {
    /// Opens a live stream of `filter` for `s` (whose access to it was just checked): within
    /// the caps, and checked again every `limits.recheck`.
    fn sse(&self, s: &Session, filter: Filter, since: Option<u64>) -> PageResult {
        let slot = self.inner.sse.acquire(&s.user.name).map_err(|r| {
            let (cap, message) = match r {
                Refused::User(n) => (
                    "user",
                    format!(
                        "user {:?} already has {n} live-update streams open, the most one user may (--sse-max-clients-per-user): close other console tabs, or try again later",
                        s.user.name
                    ),
                ),
                Refused::Total(n) => (
                    "total",
                    format!(
                        "the console already has {n} live-update streams open, the most it serves (--sse-max-clients): try again later"
                    ),
                ),
            };
            self.inner
                .metrics
                .sse_refused
                .get_or_create(&crate::RefusedLabels { cap })
                .inc();
            PageError::TooMany(message)
        })?;
        let recheck = self.recheck(s, filter.needs());
        let body = crate::live::stream(
            &self.inner.live,
            filter,
            since,
            self.inner.limits,
            slot,
            Some(recheck),
            self.inner.shutdown.clone(),
        );
        Ok((
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
                (http::HeaderName::from_static("x-accel-buffering"), "no"),
            ],
            Body::from_stream(body),
        )
            .into_response())
    }
}

impl AppState {
    /// The periodic check of a stream: the token still names the same user (TokenReview) and
    /// the user still has every permission in `needs` (SubjectAccessReview; positive answers
    /// cached for `--review-cache-seconds`). A review that cannot be made counts as a refusal:
    /// the stream ends and the page reloads, which answers with the reason.
    fn recheck(&self, s: &Session, needs: Vec<Permission>) -> Recheck {
        let st = self.clone();
        let token = s.token.clone();
        let user = s.user.clone();
        let needs = Arc::new(needs);
        Box::new(move || {
            let (st, token, user, needs) = (st.clone(), token.clone(), user.clone(), needs.clone());
            Box::pin(async move {
                let access = &st.inner.access;
                match access.authenticate(&token).await {
                    Ok(u) if u == user => {}
                    Ok(_) => return false,
                    Err(e) => {
                        tracing::debug!(user = %user.name, error = %e, "live stream recheck: token");
                        return false;
                    }
                }
                // One by one: a background check, cached answers mostly, and it stops at the
                // first refusal.
                for p in needs.iter() {
                    match access.may(&user, p).await {
                        Ok(true) => {}
                        Ok(false) => return false,
                        Err(e) => {
                            tracing::debug!(user = %user.name, error = %e, "live stream recheck");
                            return false;
                        }
                    }
                }
                true
            })
        })
    }
}

/// Query of the workflows page.
#[derive(Debug, Default, Deserialize)]
pub struct WorkflowsQuery {
    /// Namespace filter.
    pub ns: Option<String>,
    /// State filter.
    pub state: Option<String>,
    /// Name filter (substring).
    pub name: Option<String>,
    /// Sort key.
    pub sort: Option<String>,
    /// (Live stream) the sequence number the page was rendered at.
    pub since: Option<u64>,
}

async fn workflows(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WorkflowsQuery>,
) -> Response {
    let r = async {
        let s = st.session(&headers, "/workflows").await?;
        st.synced()?;
        let filter = nonempty(&q.ns);
        if let Some(ns) = filter {
            object_name("namespace", ns)?;
        }
        let state = match nonempty(&q.state) {
            None => None,
            Some(x) => Some(
                WorkflowState::ALL
                    .into_iter()
                    .find(|s| s.as_str().eq_ignore_ascii_case(x))
                    .ok_or_else(|| {
                        PageError::BadRequest(format!(
                            "state {x:?} is not one of {}",
                            WorkflowState::ALL.map(|s| s.as_str()).join(", ")
                        ))
                    })?,
            ),
        };
        let sort = nonempty(&q.sort).unwrap_or("created");
        if ![
            "name",
            "namespace",
            "hardware",
            "state",
            "duration",
            "created",
        ]
        .contains(&sort)
        {
            return Err(PageError::BadRequest(format!(
                "sort {sort:?}: one of name, namespace, hardware, state, duration, created"
            )));
        }
        let name = nonempty(&q.name).unwrap_or("").to_ascii_lowercase();
        let seq = st.inner.live.seq();
        let all = st.inner.cache.workflows.state();
        let known = namespaces_of(all.iter());
        let visible = st
            .visible(
                &s.user,
                crate::access::GROUP,
                "workflows",
                filter,
                known.iter().cloned(),
            )
            .await?;
        let now = jiff::Timestamp::now();
        let mut rows: Vec<Row> = all
            .iter()
            .filter(|w| {
                let ns = w.metadata.namespace.as_deref().unwrap_or("");
                visible.contains(ns)
                    && filter.is_none_or(|f| f == ns)
                    && state.is_none_or(|st| state_of(w) == st)
                    && (name.is_empty() || w.metadata.name.as_deref().unwrap_or("").contains(&name))
            })
            .map(|w| Row::new(w, now))
            .collect();
        match sort {
            "name" => rows.sort_by(|a, b| (&a.name, &a.namespace).cmp(&(&b.name, &b.namespace))),
            "namespace" => {
                rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
            }
            "hardware" => rows.sort_by(|a, b| (&a.hardware, &a.name).cmp(&(&b.hardware, &b.name))),
            "state" => rows.sort_by(|a, b| (&a.state, &a.name).cmp(&(&b.state, &b.name))),
            "duration" => rows.sort_by(|a, b| b.seconds.cmp(&a.seconds).then(a.name.cmp(&b.name))),
            _ => rows.sort_by(|a, b| b.created.cmp(&a.created).then(a.name.cmp(&b.name))),
        }
        let more = rows.len().saturating_sub(MAX_ROWS);
        rows.truncate(MAX_ROWS);
        let base = format!(
            "ns={}&state={}&name={}",
            encode(filter.unwrap_or("")),
            encode(state.map(|s| s.as_str()).unwrap_or("")),
            encode(&name)
        );
        let page = WorkflowsPage {
            layout: st.layout(
                &s,
                "Workflows",
                "workflows",
                format!(
                    "/live/workflows?ns={}&since={seq}",
                    encode(filter.unwrap_or(""))
                ),
            ),
            rows: &rows,
            namespaces: known.into_iter().filter(|n| visible.contains(n)).collect(),
            states: WorkflowState::ALL.map(|s| s.as_str()).to_vec(),
            ns: filter.unwrap_or("").to_string(),
            state: state.map(|s| s.as_str()).unwrap_or("").to_string(),
            name,
            sort: sort.to_string(),
            base,
            more,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("workflows", r)
}

async fn live_workflows(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WorkflowsQuery>,
) -> Response {
    let r = async {
        let s = st.session(&headers, "/workflows").await?;
        st.synced()?;
        let filter = nonempty(&q.ns);
        let known = namespaces_of(st.inner.cache.workflows.state().iter());
        let visible = st
            .visible(&s.user, crate::access::GROUP, "workflows", filter, known)
            .await?;
        st.sse(
            &s,
            Filter::Workflows {
                namespaces: visible,
                namespace: filter.map(str::to_string),
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

/// Query of a workflow's page.
#[derive(Debug, Default, Deserialize)]
pub struct WorkflowQuery {
    /// A notice key after an action (`cancel`, `rerun`).
    pub notice: Option<String>,
}

async fn workflow(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<WorkflowQuery>,
) -> Response {
    let r = async {
        let here = format!("/workflows/{ns}/{name}");
        let s = st.session(&headers, &here).await?;
        object_name("namespace", &ns)?;
        object_name("workflow", &name)?;
        st.synced()?;
        let access = &st.inner.access;
        access
            .authorize(&s.user, &Permission::tink("get", "workflows", &ns, &name))
            .await?;
        let seq = st.inner.live.seq();
        let (w, deleted) = st
            .inner
            .cache
            .workflow(&ns, &name)
            .ok_or_else(|| PageError::NotFound(format!("workflow {ns}/{name} does not exist")))?;
        let events_allowed = access.may(&s.user, &Permission::events("list", &ns)).await?;
        let events = if events_allowed {
            st.inner.cache.workflow_events(&ns, &name).iter().map(|e| EventRow::new(e)).collect()
        } else {
            Vec::new()
        };
        let detail = Detail::new(&w, deleted, jiff::Timestamp::now());
        let notice = match q.notice.as_deref() {
            Some("cancel") => "Cancellation requested: the workflow was deleted; the controller stops its agent and it ends Canceled.",
            Some("rerun") => "Created from the workflow it was run again from.",
            _ => "",
        };
        let page = WorkflowPage {
            layout: st.layout(&s, format!("Workflow {name}"), "workflows", format!("/live/workflows/{ns}/{name}?since={seq}")),
            d: &detail,
            hardware: w.spec.hardware_ref.name.clone(),
            template: w.spec.template_ref.name.clone(),
            events_allowed,
            events,
            logs: st.inner.logs.is_some(),
            notice: notice.to_string(),
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("workflow", r)
}

/// Query of a live stream.
#[derive(Debug, Default, Deserialize)]
pub struct LiveQuery {
    /// The sequence number the page was rendered at.
    pub since: Option<u64>,
}

async fn live_workflow(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<LiveQuery>,
) -> Response {
    let r = async {
        let s = st
            .session(&headers, &format!("/workflows/{ns}/{name}"))
            .await?;
        object_name("namespace", &ns)?;
        object_name("workflow", &name)?;
        let access = &st.inner.access;
        access
            .authorize(&s.user, &Permission::tink("get", "workflows", &ns, &name))
            .await?;
        let events = access
            .may(&s.user, &Permission::events("list", &ns))
            .await?;
        st.sse(
            &s,
            Filter::Workflow {
                namespace: ns,
                name,
                events,
            },
            q.since,
        )
    }
    .await;
    st.done("live", r)
}

/// Query of the logs page.
#[derive(Debug, Default, Deserialize)]
pub struct LogsQuery {
    /// Only this action's output (its name).
    pub action: Option<String>,
}

async fn logs(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<LogsQuery>,
) -> Response {
    let r = async {
        let here = format!("/workflows/{ns}/{name}/logs");
        let s = st.session(&headers, &here).await?;
        object_name("namespace", &ns)?;
        object_name("workflow", &name)?;
        st.inner
            .access
            .authorize(&s.user, &Permission::tink("get", "workflows", &ns, &name))
            .await?;
        let logs = st.inner.logs.as_ref().ok_or_else(|| {
            PageError::NotFound(
                "no tink-server is configured (--server-url): use tinkctl workflow logs".into(),
            )
        })?;
        let action = nonempty(&q.action).unwrap_or("").to_string();
        if action.len() > 253 {
            return Err(PageError::BadRequest(
                "the action name is longer than 253 characters".into(),
            ));
        }
        // The server decides, with the user's own token.
        let read = logs
            .read(&s.token, &ns, &name, &action)
            .await
            .map_err(|e| match e {
                crate::logs::LogsError::Unauthenticated(m) => PageError::Unauthenticated(m),
                crate::logs::LogsError::Forbidden(m) => PageError::Forbidden(m),
                crate::logs::LogsError::NotFound(m) => PageError::NotFound(m),
                crate::logs::LogsError::Unavailable(m) => PageError::Unavailable(m),
            })?;
        let actions = st
            .inner
            .cache
            .workflow(&ns, &name)
            .map(|(w, _)| {
                w.status
                    .as_ref()
                    .map(|s| s.actions.iter().map(|a| a.rendered.name.clone()).collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let (lines, truncated, dispatched) = match read {
            Some((lines, truncated)) => (lines, truncated, true),
            None => (Vec::new(), false, false),
        };
        let page = LogsPage {
            layout: st.layout(&s, format!("Output of {name}"), "workflows", String::new()),
            namespace: ns.clone(),
            name: name.clone(),
            actions,
            action,
            lines,
            truncated,
            dispatched,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("logs", r)
}

/// The fields of a posted form.
fn form(body: &Bytes) -> Vec<(String, String)> {
    form_urlencoded::parse(body).into_owned().collect()
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A browser's POST must come from a console page: the `Origin` (when sent) is this host, and
/// a cookie session posts its anti-CSRF value.
fn check_post(
    headers: &HeaderMap,
    s: Option<&Session>,
    fields: &[(String, String)],
) -> Result<(), PageError> {
    if let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST)) {
        let (origin, host) = (origin.to_str().unwrap_or(""), host.to_str().unwrap_or(""));
        if origin != format!("http://{host}") && origin != format!("https://{host}") {
            return Err(PageError::Forbidden(format!(
                "cross-site request refused: Origin {origin:?} is not this console ({host})"
            )));
        }
    }
    if let Some(s) = s.filter(|s| s.from_cookie) {
        let sent = field(fields, "csrf").unwrap_or("");
        if !same(sent.as_bytes(), csrf_token(&s.token).as_bytes()) {
            return Err(PageError::Forbidden(
                "the form's anti-CSRF value is missing or wrong: reload the page and try again"
                    .into(),
            ));
        }
    }
    Ok(())
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

async fn cancel(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let r = async {
        let s = st.session(&headers, &format!("/workflows/{ns}/{name}")).await?;
        object_name("namespace", &ns)?;
        object_name("workflow", &name)?;
        check_post(&headers, Some(&s), &form(&body))?;
        st.inner
            .access
            .authorize(&s.user, &Permission::tink("delete", "workflows", &ns, &name))
            .await?;
        // Cancellation is deletion: the controller moves a Scheduled or Running workflow to
        // Cancelling, stops its agent, then Canceled. Sent with the user's own token.
        let api: Api<Workflow> = Api::namespaced(st.user_client(&s.token)?, &ns);
        api.delete(&name, &DeleteParams::default())
            .await
            .map_err(|e| kube_error(&format!("cannot delete workflow {ns}/{name}"), e))?;
        tracing::info!(user = %s.user.name, workflow = %format!("{ns}/{name}"), "workflow canceled from the console");
        Ok(redirect(&format!("/workflows/{ns}/{name}?notice=cancel")))
    }
    .await;
    st.done("cancel", r)
}

fn suffix() -> String {
    let mut bytes = [0u8; 5];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// The Workflow that runs `w`'s template on `w`'s machine again.
pub fn rerun_of(w: &Workflow) -> Workflow {
    let base = w.metadata.name.clone().unwrap_or_default();
    let base: String = base.chars().take(200).collect();
    let mut annotations = std::collections::BTreeMap::new();
    annotations.insert("tinkerbell.org/rerun-of".to_string(), base.clone());
    Workflow {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-{}", base.trim_end_matches('-'), suffix())),
            namespace: w.metadata.namespace.clone(),
            labels: w.metadata.labels.clone(),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: w.spec.clone(),
        status: None,
    }
}

async fn rerun(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let r = async {
        let s = st.session(&headers, &format!("/workflows/{ns}/{name}")).await?;
        object_name("namespace", &ns)?;
        object_name("workflow", &name)?;
        check_post(&headers, Some(&s), &form(&body))?;
        let access = &st.inner.access;
        access
            .authorize(&s.user, &Permission::tink("get", "workflows", &ns, &name))
            .await?;
        access
            .authorize(&s.user, &Permission::tink("create", "workflows", &ns, ""))
            .await?;
        let (w, _) = st
            .inner
            .cache
            .workflow(&ns, &name)
            .ok_or_else(|| PageError::NotFound(format!("workflow {ns}/{name} does not exist")))?;
        let new = rerun_of(&w);
        let api: Api<Workflow> = Api::namespaced(st.user_client(&s.token)?, &ns);
        let created = api
            .create(&PostParams::default(), &new)
            .await
            .map_err(|e| kube_error(&format!("cannot create a workflow in {ns}"), e))?;
        let new_name = created.metadata.name.unwrap_or_default();
        tracing::info!(user = %s.user.name, from = %format!("{ns}/{name}"), workflow = %new_name, "workflow run again from the console");
        Ok(redirect(&format!("/workflows/{ns}/{new_name}?notice=rerun")))
    }
    .await;
    st.done("rerun", r)
}

async fn templates(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let r = async {
        let s = st.session(&headers, "/templates").await?;
        st.synced()?;
        let all = st.inner.cache.templates.state();
        let visible = st
            .visible(
                &s.user,
                crate::access::GROUP,
                "templates",
                None,
                namespaces_of(all.iter()),
            )
            .await?;
        let mut items: Vec<TemplateItem> = all
            .iter()
            .filter(|t| visible.contains(t.metadata.namespace.as_deref().unwrap_or("")))
            .map(|t| TemplateItem {
                namespace: t.metadata.namespace.clone().unwrap_or_default(),
                name: t.metadata.name.clone().unwrap_or_default(),
                actions: t
                    .spec
                    .actions
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
            .collect();
        items.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let page = TemplatesPage {
            layout: st.layout(&s, "Templates", "templates", String::new()),
            items,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("templates", r)
}

fn action_item(a: &tink_api::v1alpha2::Action) -> ActionItem {
    let mut lines = Vec::new();
    if let Some(cmd) = &a.cmd {
        lines.push(format!("cmd: {cmd}"));
    }
    if !a.args.is_empty() {
        lines.push(format!("args: {}", a.args.join(" ")));
    }
    for (k, v) in &a.env {
        lines.push(format!("{k}={v}"));
    }
    ActionItem {
        name: a.name.clone(),
        image: a.image.clone(),
        details: lines.join("\n"),
    }
}

/// Query of a template's page.
#[derive(Debug, Default, Deserialize)]
pub struct TemplateQuery {
    /// The machine to preview against.
    pub hardware: Option<String>,
    /// The `templateData` (a JSON object); default: that of the newest Workflow of the template.
    pub data: Option<String>,
}

async fn template(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<TemplateQuery>,
) -> Response {
    let r = async {
        let here = format!("/templates/{ns}/{name}");
        let s = st.session(&headers, &here).await?;
        object_name("namespace", &ns)?;
        object_name("template", &name)?;
        st.synced()?;
        let access = &st.inner.access;
        access
            .authorize(&s.user, &Permission::tink("get", "templates", &ns, &name))
            .await?;
        let t =
            st.inner.cache.template(&ns, &name).ok_or_else(|| {
                PageError::NotFound(format!("template {ns}/{name} does not exist"))
            })?;
        let may_list = access
            .may(&s.user, &Permission::tink("list", "hardware", &ns, ""))
            .await?;
        let mut machines: Vec<String> = if may_list {
            st.inner
                .cache
                .hardware
                .state()
                .iter()
                .filter(|h| h.metadata.namespace.as_deref() == Some(ns.as_str()))
                .filter_map(|h| h.metadata.name.clone())
                .collect()
        } else {
            Vec::new()
        };
        machines.sort();
        machines.truncate(500);
        let hardware = nonempty(&q.hardware).unwrap_or("").to_string();
        let (mut rendered, mut error) = (Vec::new(), String::new());
        let data: std::collections::BTreeMap<String, serde_json::Value> = match nonempty(&q.data) {
            Some(text) => serde_json::from_str(text).map_err(|e| {
                PageError::BadRequest(format!("templateData must be a JSON object: {e}"))
            })?,
            None => st
                .inner
                .cache
                .workflows
                .state()
                .iter()
                .filter(|w| {
                    w.metadata.namespace.as_deref() == Some(ns.as_str())
                        && w.spec.template_ref.name == name
                })
                .max_by_key(|w| w.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .map(|w| w.spec.template_data.clone())
                .unwrap_or_default(),
        };
        let data_text = serde_json::to_string(&data).unwrap_or_default();
        if !hardware.is_empty() {
            object_name("hardware", &hardware)?;
            access
                .authorize(
                    &s.user,
                    &Permission::tink("get", "hardware", &ns, &hardware),
                )
                .await?;
            match st.inner.cache.machine(&ns, &hardware) {
                None => error = format!("machine {ns}/{hardware} does not exist"),
                Some(hw) => {
                    let mut preview = preview_workflow(&ns, &name, &hardware);
                    preview.spec.template_data = data;
                    let data = tink_controller::render::template_data(&preview, &hw);
                    match tink_controller::render::render_actions(&t.spec, &data) {
                        Ok(actions) => rendered = actions.iter().map(action_item).collect(),
                        Err(e) => {
                            error = format!("the template does not render for {hardware}: {e}")
                        }
                    }
                }
            }
        } else if machines.is_empty() {
            error =
                "no machine to preview against in this namespace (or you may not list them)".into();
        }
        let page = TemplatePage {
            layout: st.layout(&s, format!("Template {name}"), "templates", String::new()),
            namespace: ns.clone(),
            name: name.clone(),
            source: t.spec.actions.iter().map(action_item).collect(),
            machines,
            hardware,
            data: data_text,
            rendered,
            error,
        };
        Ok(html(StatusCode::OK, &page))
    }
    .await;
    st.done("template", r)
}

fn preview_workflow(ns: &str, template: &str, hardware: &str) -> Workflow {
    let mut w = Workflow::new(
        "preview",
        tink_api::v1alpha2::WorkflowSpec {
            hardware_ref: tink_api::v1alpha2::LocalObjectReference::new(hardware),
            template_ref: tink_api::v1alpha2::LocalObjectReference::new(template),
            template_data: Default::default(),
            timeout: None,
        },
    );
    w.metadata.namespace = Some(ns.to_string());
    w
}

/// Query of the search page.
#[derive(Debug, Default, Deserialize)]
pub struct SearchQuery {
    /// The text.
    pub q: Option<String>,
}

fn hw_match(h: &Hardware, q: &str) -> Option<String> {
    let name = h.metadata.name.as_deref().unwrap_or("");
    if name.contains(q) {
        return Some("name".into());
    }
    let q_mac = q.replace('-', ":");
    for (mac, nic) in &h.spec.network_interfaces {
        if mac.contains(&q_mac) {
            return Some(format!("MAC {mac}"));
        }
        if let Some(ip) = nic.dhcp.as_ref().and_then(|d| d.ip.as_deref())
            && ip.contains(q)
        {
            return Some(format!("IP {ip}"));
        }
    }
    None
}

async fn search(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<SearchQuery>,
) -> Response {
    let r = async {
        let text = nonempty(&q.q).unwrap_or("").to_ascii_lowercase();
        let s = st
            .session(&headers, &format!("/search?q={}", encode(&text)))
            .await?;
        st.synced()?;
        if text.len() > 253 {
            return Err(PageError::BadRequest(
                "the search text is longer than 253 characters".into(),
            ));
        }
        let cache = &st.inner.cache;
        let mut hits = Vec::new();
        let mut truncated = false;
        if !text.is_empty() {
            let g = crate::access::GROUP;
            let hardware = cache.hardware.state();
            let workflows = cache.workflows.state();
            let templates = cache.templates.state();
            let see = |r: Result<Namespaces, PageError>| match r {
                Ok(v) => Ok(v),
                Err(PageError::Forbidden(_)) => Ok(Namespaces::Some(HashSet::new())),
                Err(e) => Err(e),
            };
            let hw_ns = see(st
                .visible(&s.user, g, "hardware", None, namespaces_of(hardware.iter()))
                .await)?;
            let wf_ns = see(st
                .visible(
                    &s.user,
                    g,
                    "workflows",
                    None,
                    namespaces_of(workflows.iter()),
                )
                .await)?;
            let t_ns = see(st
                .visible(
                    &s.user,
                    g,
                    "templates",
                    None,
                    namespaces_of(templates.iter()),
                )
                .await)?;
            for h in hardware.iter() {
                let ns = h.metadata.namespace.clone().unwrap_or_default();
                if !hw_ns.contains(&ns) {
                    continue;
                }
                if let Some(matched) = hw_match(h, &text) {
                    let name = h.metadata.name.clone().unwrap_or_default();
                    hits.push(Hit {
                        kind: "Hardware",
                        href: format!("/?ns={}#{}", encode(&ns), crate::views::tile_id(&ns, &name)),
                        namespace: ns,
                        name,
                        matched,
                    });
                }
            }
            for w in workflows.iter() {
                let ns = w.metadata.namespace.clone().unwrap_or_default();
                let name = w.metadata.name.clone().unwrap_or_default();
                if wf_ns.contains(&ns) && name.contains(&text) {
                    hits.push(Hit {
                        kind: "Workflow",
                        href: format!("/workflows/{ns}/{name}"),
                        namespace: ns,
                        name,
                        matched: "name".into(),
                    });
                }
            }
            for t in templates.iter() {
                let ns = t.metadata.namespace.clone().unwrap_or_default();
                let name = t.metadata.name.clone().unwrap_or_default();
                if t_ns.contains(&ns) && name.contains(&text) {
                    hits.push(Hit {
                        kind: "Template",
                        href: format!("/templates/{ns}/{name}"),
                        namespace: ns,
                        name,
                        matched: "name".into(),
                    });
                }
            }
            hits.sort_by(|a, b| {
                (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name))
            });
            truncated = hits.len() > MAX_HITS;
            hits.truncate(MAX_HITS);
        }
        let mut layout = st.layout(&s, "Search", "", String::new());
        layout.q = text;
        Ok(html(
            StatusCode::OK,
            &SearchPage {
                layout,
                hits,
                truncated,
            },
        ))
    }
    .await;
    st.done("search", r)
}

/// Query of the login page.
#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    /// Where to go afterwards.
    pub next: Option<String>,
}

/// Only a path of this console (no `//host`, no scheme): no open redirect.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.contains("://") =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

async fn login_page(State(st): State<AppState>, Query(q): Query<LoginQuery>) -> Response {
    let page = LoginPage {
        layout: Layout {
            title: "Log in".into(),
            ..Default::default()
        },
        next: safe_next(q.next.as_deref()),
        error: String::new(),
    };
    st.done("login", Ok(html(StatusCode::OK, &page)))
}

async fn login(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let fields = form(&body);
    let next = safe_next(field(&fields, "next"));
    let r = async {
        check_post(&headers, None, &fields)?;
        let token = field(&fields, "token").map(str::trim).unwrap_or("");
        let failed = |error: String, status: StatusCode| {
            let page = LoginPage {
                layout: Layout {
                    title: "Log in".into(),
                    ..Default::default()
                },
                next: next.clone(),
                error,
            };
            html(status, &page)
        };
        if token.is_empty() || token.len() > 16 * 1024 || token.chars().any(|c| c.is_control()) {
            return Ok(failed(
                "Paste a Kubernetes bearer token.".into(),
                StatusCode::BAD_REQUEST,
            ));
        }
        match st.inner.access.authenticate(token).await {
            Ok(user) => {
                tracing::info!(user = %user.name, "logged in");
                let mut r = redirect(&next);
                let cookie = format!(
                    "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={COOKIE_MAX_AGE}{}",
                    encode(token),
                    if st.inner.secure_cookies {
                        "; Secure"
                    } else {
                        ""
                    }
                );
                let v = HeaderValue::from_str(&cookie).map_err(|_| {
                    PageError::BadRequest("the token cannot be stored in a cookie".into())
                })?;
                r.headers_mut().insert(header::SET_COOKIE, v);
                Ok(r)
            }
            Err(AccessError::Unauthenticated(why)) => Ok(failed(
                format!("The Kubernetes API refused this token: {why}"),
                StatusCode::UNAUTHORIZED,
            )),
            Err(e) => Err(e.into()),
        }
    }
    .await;
    st.done("login", r)
}

async fn logout(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let r = async {
        let fields = form(&body);
        let token = request_token(&headers)?;
        let session = token.map(|(token, from_cookie)| Session {
            user: User {
                name: String::new(),
                uid: String::new(),
                groups: Vec::new(),
                extra: Default::default(),
            },
            token,
            from_cookie,
        });
        check_post(&headers, session.as_ref(), &fields)?;
        let mut r = redirect("/login");
        r.headers_mut().insert(
            header::SET_COOKIE,
            HeaderValue::from_static("tink_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        );
        Ok(r)
    }
    .await;
    st.done("logout", r)
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
    fn tokens_come_from_the_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        assert!(request_token(&h).unwrap().is_none());
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; tink_console=abc%2Bd; c=d"),
        );
        assert_eq!(
            request_token(&h).unwrap(),
            Some(("abc+d".to_string(), true))
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer xyz"),
        );
        assert_eq!(request_token(&h).unwrap(), Some(("xyz".to_string(), false)));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic xyz"));
        assert!(matches!(
            request_token(&h),
            Err(PageError::Unauthenticated(_))
        ));
    }

    #[test]
    fn the_login_redirect_stays_on_this_site() {
        assert_eq!(safe_next(Some("/workflows/a/b")), "/workflows/a/b");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn posts_need_the_session_csrf_value_and_this_origin() {
        let s = Session {
            user: User {
                name: "a".into(),
                uid: String::new(),
                groups: vec![],
                extra: Default::default(),
            },
            token: "tok".into(),
            from_cookie: true,
        };
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("console:8080"));
        let good = vec![("csrf".to_string(), csrf_token("tok"))];
        assert!(check_post(&h, Some(&s), &good).is_ok());
        assert!(check_post(&h, Some(&s), &[]).is_err());
        assert!(check_post(&h, Some(&s), &[("csrf".into(), csrf_token("other"))]).is_err());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(check_post(&h, Some(&s), &good).is_err());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://console:8080"),
        );
        assert!(check_post(&h, Some(&s), &good).is_ok());
        // A header session is not sent by browsers on their own: no CSRF value needed.
        let header_session = Session {
            from_cookie: false,
            ..s
        };
        assert!(check_post(&h, Some(&header_session), &[]).is_ok());
    }

    #[test]
    fn names_from_paths_are_checked() {
        assert!(object_name("workflow", "wf-1.a").is_ok());
        assert!(object_name("workflow", "WF").is_err());
        assert!(object_name("workflow", "a/b").is_err());
        assert!(object_name("workflow", "").is_err());
    }
}
