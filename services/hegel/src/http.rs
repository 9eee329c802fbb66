//! The HTTP routes, the middleware that finds the caller's address, rate-limits it and counts
//! the request, and the server with its graceful shutdown.
//!
//! Routes (`{version}` is `2009-04-04` or `latest`; any other version is 404, which is how
//! cloud-init's EC2 data source learns which versions exist):
//!
//! - `GET /`: the versions;
//! - `GET /{version}/`: `meta-data`, plus `user-data` and `vendor-data` when the caller has them;
//! - `GET /{version}/meta-data/[path]`: the caller's meta-data tree ([`crate::machine`]);
//! - `GET /{version}/user-data`, `GET /{version}/vendor-data`: byte-exact, 404 when unset;
//! - `GET /ipxe/script/{mac}/auto.ipxe`: the script of the interface with that MAC (with
//!   `--discovery-osie`, a MAC no Hardware has gets that OSIE's script, to enroll);
//! - `GET /ipxe/script/auto.ipxe` and `GET /auto.ipxe`: the script of the caller's interface;
//! - `PUT /{version}/api/token`: an IMDSv2 session token ([`crate::imds`]); a request that
//!   carries one (`X-aws-ec2-metadata-token`) is refused (401) when it is not valid for the
//!   caller, one that carries none is served as before.
//!
//! Every machine endpoint answers from the caller's address only: there is no endpoint that
//! serves a machine's data to whoever knows its instance id. The script by MAC is refused (403)
//! to a caller whose address belongs to another Hardware.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use bytes::Bytes;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{HeaderValue, StatusCode, header};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::client_ip::TrustedProxies;
use crate::index::{Index, Lookup};
use crate::ipxe::{self, IpxeConfig};
use crate::machine::Machine;
use crate::metrics::Metrics;
use crate::secrets::AgentSecrets;

/// The per-IP rate limit: a token bucket (GCRA) per client address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second a client may make on average; 0 turns the limit off.
    pub per_second: u32,
    /// Requests a client may make at once (the bucket size).
    pub burst: u32,
}

impl Default for RateLimit {
    /// 20 requests per second, bursts of 100 (a cloud-init crawl is about 15 requests).
    fn default() -> Self {
        Self {
            per_second: 20,
            burst: 100,
        }
    }
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The Hardware and OSIE index.
    pub index: Arc<Index>,
    /// Metrics.
    pub metrics: Metrics,
    /// Where `X-Forwarded-For` is believed.
    pub trusted: Arc<TrustedProxies>,
    /// Values of the iPXE scripts.
    pub ipxe: Arc<IpxeConfig>,
    /// The copies of the agent secrets Hardware name in `tinkerbell.org/agent-secret` (None:
    /// such machines get no script).
    pub secrets: Option<AgentSecrets>,
    limiter: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
}

impl AppState {
    /// A state over `index`.
    pub fn new(
        index: Arc<Index>,
        metrics: Metrics,
        trusted: TrustedProxies,
        ipxe: IpxeConfig,
        rate: RateLimit,
    ) -> Self {
        let limiter = NonZeroU32::new(rate.per_second).map(|per_second| {
            let burst = NonZeroU32::new(rate.burst).unwrap_or(per_second);
            Arc::new(RateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ))
        });
        Self {
            index,
            metrics,
            trusted: Arc::new(trusted),
            ipxe: Arc::new(ipxe),
            secrets: None,
            limiter,
        }
    }

    /// Serves agent secrets from `secrets`.
    pub fn with_secrets(mut self, secrets: AgentSecrets) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Forgets clients whose buckets are full again (bounds the limiter's memory); called
    /// periodically.
    pub fn sweep_rate_limits(&self) {
        if let Some(l) = &self.limiter {
            l.retain_recent();
            l.shrink_to_fit();
        }
    }
}

/// The caller's address, after `X-Forwarded-For` from trusted proxies.
#[derive(Clone, Copy, Debug)]
pub struct ClientIp(pub IpAddr);

/// The endpoint label of a response, for the metrics.
#[derive(Clone, Copy, Debug)]
struct Endpoint(&'static str);

fn text(status: StatusCode, endpoint: &'static str, body: impl Into<Body>) -> Response {
    let mut r = (status, body.into()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.extensions_mut().insert(Endpoint(endpoint));
    r
}

fn bytes(endpoint: &'static str, content_type: &'static str, body: Bytes) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.extensions_mut().insert(Endpoint(endpoint));
    r
}

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(versions))
        .route("/{version}", get(version_root))
        .route("/{version}/", get(version_root))
        .route("/{version}/meta-data", get(meta_root))
        .route("/{version}/meta-data/", get(meta_root))
        .route("/{version}/meta-data/{*path}", get(meta_data))
        .route("/{version}/user-data", get(user_data))
        .route("/{version}/vendor-data", get(vendor_data))
        .route("/{version}/api/token", put(api_token))
        .route("/ipxe/script/{mac}/auto.ipxe", get(ipxe_by_mac))
        .route("/ipxe/script/auto.ipxe", get(ipxe_by_ip))
        .route("/auto.ipxe", get(ipxe_by_ip))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state)
}

/// Finds the client address, applies the rate limit and readiness, counts the request.
async fn edge(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
    next: Next,
) -> Response {
    let client = match state.trusted.client_ip(peer.ip(), req.headers()) {
        Ok(ip) => ip,
        Err(error) => {
            tracing::info!(peer = %peer.ip(), %error, "refused a request from a trusted proxy");
            let r = text(StatusCode::BAD_REQUEST, "other", format!("{error}\n"));
            state.metrics.request("other", r.status().as_u16());
            return r;
        }
    };
    if let Some(limiter) = &state.limiter
        && limiter.check_key(&client).is_err()
    {
        state.metrics.rate_limited.inc();
        let mut r = text(
            StatusCode::TOO_MANY_REQUESTS,
            "other",
            format!("too many requests from {client}; retry later\n"),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        state.metrics.request("other", 429);
        return r;
    }
    if !state.index.synced() {
        let r = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "other",
            "hegel has not loaded the Hardware yet; retry shortly\n",
        );
        state.metrics.request("other", 503);
        return r;
    }
    // An IMDSv2 token, when the client sends one, must be valid for it (the token request
    // itself carries none).
    if let Some(token) = req.headers().get(crate::imds::TOKEN_HEADER)
        && let Err(e) = crate::imds::check(token.as_bytes(), client, unix_now())
    {
        let r = text(StatusCode::UNAUTHORIZED, "other", format!("{e}\n"));
        state.metrics.request("other", 401);
        return r;
    }
    req.extensions_mut().insert(ClientIp(client));
    let span = tracing::debug_span!("hegel.request", client = %client, path = %req.uri().path());
    let mut resp = next.run(req).instrument(span).await;
    let endpoint = resp
        .extensions_mut()
        .remove::<Endpoint>()
        .map_or("other", |e| e.0);
    state.metrics.request(endpoint, resp.status().as_u16());
    resp
}

fn supported(version: &str) -> bool {
    version == "2009-04-04" || version == "latest"
}

fn unsupported(version: &str) -> Response {
    text(
        StatusCode::NOT_FOUND,
        "other",
        format!(
            "API version {:?} is not served; this server serves 2009-04-04 and latest\n",
            version.chars().take(64).collect::<String>()
        ),
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `PUT /{version}/api/token`: an IMDSv2 token for the caller's address, for the TTL asked.
async fn api_token(
    Path(version): Path<String>,
    axum::Extension(ClientIp(ip)): axum::Extension<ClientIp>,
    headers: http::HeaderMap,
) -> Response {
    if !supported(&version) {
        return unsupported(&version);
    }
    let ttl = match crate::imds::ttl(headers.get(crate::imds::TTL_HEADER).map(|v| v.as_bytes())) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::BAD_REQUEST, "api-token", format!("{e}\n")),
    };
    let mut r = text(
        StatusCode::OK,
        "api-token",
        crate::imds::issue(ip, unix_now(), ttl),
    );
    if let Ok(v) = HeaderValue::from_str(&ttl.to_string()) {
        r.headers_mut().insert(crate::imds::TTL_HEADER, v);
    }
    r
}

async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "other", "not found\n")
}

async fn versions() -> Response {
    text(StatusCode::OK, "versions", "2009-04-04\nlatest")
}

/// The caller's machine and interface, or the response explaining why there is none.
// The error is the response itself, returned at once by every handler: boxing it would only
// add an allocation on the miss path.
#[allow(clippy::result_large_err)]
fn caller(
    state: &AppState,
    ip: IpAddr,
    endpoint: &'static str,
) -> Result<(Arc<Machine>, usize), Response> {
    match state.index.by_ip(ip) {
        Lookup::Found(m, i) => Ok((m, i)),
        Lookup::Unknown => {
            state.metrics.miss("ip", "unknown");
            tracing::debug!(%ip, endpoint, "no Hardware has this IP");
            Err(text(
                StatusCode::NOT_FOUND,
                endpoint,
                format!("no Hardware has the IP {ip} (spec.networkInterfaces[*].dhcp.ip)\n"),
            ))
        }
        Lookup::Conflict(keys) => {
            state.metrics.miss("ip", "conflict");
            tracing::warn!(%ip, hardware = ?keys, "several Hardware claim one IP; serving none");
            Err(text(
                StatusCode::CONFLICT,
                endpoint,
                format!(
                    "the IP {ip} is claimed by several Hardware ({}); nothing is served to it\n",
                    keys.join(", ")
                ),
            ))
        }
    }
}

async fn version_root(
    State(state): State<AppState>,
    Path(version): Path<String>,
    axum::Extension(ClientIp(ip)): axum::Extension<ClientIp>,
) -> Response {
    if !supported(&version) {
        return unsupported(&version);
    }
    let (m, _) = match caller(&state, ip, "version") {
        Ok(c) => c,
        Err(r) => return r,
    };
    let mut listing = String::from("meta-data");
    if m.user_data.is_some() {
        listing.push_str("\nuser-data");
    }
    if m.vendor_data.is_some() {
        listing.push_str("\nvendor-data");
    }
    text(StatusCode::OK, "version", listing)
}

async fn meta_root(
    state: State<AppState>,
    Path(version): Path<String>,
    ip: axum::Extension<ClientIp>,
) -> Response {
    meta(state, version, String::new(), ip).await
}

async fn meta_data(
    state: State<AppState>,
    Path((version, path)): Path<(String, String)>,
    ip: axum::Extension<ClientIp>,
) -> Response {
    meta(state, version, path, ip).await
}

/// The metrics label of a meta-data path: one of the names served, never the raw path.
fn meta_label(path: &str) -> &'static str {
    match path.trim_matches('/').split('/').next().unwrap_or_default() {
        "" => "meta-data",
        "instance-id" => "meta-data/instance-id",
        "hostname" => "meta-data/hostname",
        "local-hostname" => "meta-data/local-hostname",
        "local-ipv4" => "meta-data/local-ipv4",
        "mac" => "meta-data/mac",
        "public-keys" => "meta-data/public-keys",
        "facility" => "meta-data/facility",
        "plan" => "meta-data/plan",
        "tags" => "meta-data/tags",
        _ => "meta-data/other",
    }
}

async fn meta(
    State(state): State<AppState>,
    version: String,
    path: String,
    axum::Extension(ClientIp(ip)): axum::Extension<ClientIp>,
) -> Response {
    if !supported(&version) {
        return unsupported(&version);
    }
    let label = meta_label(&path);
    let (m, i) = match caller(&state, ip, label) {
        Ok(c) => c,
        Err(r) => return r,
    };
    match m.tree(i).and_then(|t| t.get(&path)) {
        Some(body) => bytes(label, "text/plain; charset=utf-8", body.clone()),
        None => text(
            StatusCode::NOT_FOUND,
            label,
            format!(
                "meta-data/{} is not served for Hardware {}\n",
                path.chars().take(128).collect::<String>(),
                m.key
            ),
        ),
    }
}

async fn user_data(
    State(state): State<AppState>,
    Path(version): Path<String>,
    axum::Extension(ClientIp(ip)): axum::Extension<ClientIp>,
) -> Response {
    if !supported(&version) {
        return unsupported(&version);
    }
    let (m, _) = match caller(&state, ip, "user-data") {
        Ok(c) => c,
        Err(r) => return r,
    };
    match &m.user_data {
        Some(body) => bytes("user-data", "application/octet-stream", body.clone()),
        None => text(
            StatusCode::NOT_FOUND,
            "user-data",
            format!("Hardware {} has no spec.instance.userdata\n", m.key),
        ),
    }
}

async fn vendor_data(
    State(state): State<AppState>,
    Path(version): Path<String>,
    axum::Extension(ClientIp(ip)): axum::Extension<ClientIp>,
) -> Response {
    if !supported(&version) {
        return unsupported(&version);
    }
    let (m, _) = match caller(&state, ip, "vendor-data") {
        Ok(c) => c,
        Err(r) => return r,
    };
    match &m.vendor_data {
        Some(body) => bytes("vendor-data", "application/octet-stream", body.clone()),
        None => text(
            StatusCode::NOT_FOUND,
            "vendor-data",
            format!("Hardware {} has no spec.instance.vendordata\n", m.key),
        ),
    }
}

/// A MAC in any of its usual spellings, in the one canonical form of an agent id
/// ([`tink_api::AgentId`]: lower case, `:`-separated), which is how Hardware keys are spelled.
fn normalize_mac(s: &str) -> Option<String> {
    tink_api::AgentId::normalize(s)
        .ok()
        .filter(tink_api::AgentId::is_mac)
        .map(tink_api::AgentId::into_string)
}

async fn script_response(
    state: &AppState,
    m: &Machine,
    i: usize,
    via: &str,
    caller_is_machine: bool,
) -> Response {
    // A machine with a pre-shared agent secret: the script carries it, so only the machine
    // itself (by its own address) gets it.
    let secret = match &m.agent_secret {
        None => None,
        Some(_) if !caller_is_machine => {
            state.metrics.miss("ipxe", "agent_secret_caller");
            tracing::warn!(hardware = %m.key, via, "iPXE script with an agent secret refused to an address that is not the machine's");
            return text(
                StatusCode::FORBIDDEN,
                "ipxe",
                format!(
                    "Hardware {} has an agent secret: its script is served only to the machine's own address\n",
                    m.key
                ),
            );
        }
        Some(name) => match agent_secret(state, m, name) {
            Ok(v) => Some(v),
            Err(why) => {
                tracing::error!(hardware = %m.key, via, reason = %why, "cannot read the machine's agent secret; no iPXE script served");
                return text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ipxe",
                    format!("Hardware {}: tinkerbell.org/agent-secret: {why}\n", m.key),
                );
            }
        },
    };
    let result = ipxe::script_with_secret(
        m,
        i,
        |name| state.index.osie(&m.namespace, name),
        &state.ipxe,
        secret.as_deref(),
    );
    match result {
        Ok(s) => {
            let mut r = text(StatusCode::OK, "ipxe", s);
            if secret.is_some() {
                r.headers_mut().insert(
                    axum::http::header::CACHE_CONTROL,
                    axum::http::HeaderValue::from_static("no-store"),
                );
            }
            r
        }
        Err(e) if e.is_not_found() => {
            tracing::info!(hardware = %m.key, via, reason = %e, "no iPXE script served");
            text(StatusCode::NOT_FOUND, "ipxe", format!("{e}\n"))
        }
        Err(e) => {
            tracing::error!(hardware = %m.key, via, error = %e, "cannot render the iPXE script");
            text(StatusCode::INTERNAL_SERVER_ERROR, "ipxe", format!("{e}\n"))
        }
    }
}

/// The agent secret of the machine, whose annotation names the Secret `name`: from the
/// controller's copy in the system namespace (a watched cache; never the Secret in the
/// machine's namespace, which Hegel may not read).
fn agent_secret(state: &AppState, m: &Machine, name: &str) -> Result<String, String> {
    let Some(secrets) = &state.secrets else {
        return Err("this Hegel reads no agent secrets (started without an API client)".into());
    };
    secrets.value(&m.namespace, &m.name, name)
}

async fn ipxe_by_mac(
    State(state): State<AppState>,
    Path(mac): Path<String>,
    axum::Extension(ClientIp(ip)): axum::Extension<ClientIp>,
) -> Response {
    let Some(mac) = normalize_mac(&mac) else {
        return text(
            StatusCode::BAD_REQUEST,
            "ipxe",
            format!(
                "{:?} is not a MAC address (expected aa:bb:cc:dd:ee:ff)\n",
                mac.chars().take(64).collect::<String>()
            ),
        );
    };
    let (m, i) = match state.index.by_mac(&mac) {
        Lookup::Found(m, i) => (m, i),
        Lookup::Unknown => {
            // Discovery: an unknown machine boots the discovery OSIE to enroll, unless its
            // address is another machine's.
            if let Some((namespace, osie)) = &state.ipxe.discovery_osie {
                if let Lookup::Found(owner, _) = state.index.by_ip(ip) {
                    tracing::warn!(%mac, client = %ip, owner = %owner.key, "discovery script refused to another machine's address");
                    return text(
                        StatusCode::FORBIDDEN,
                        "ipxe",
                        format!(
                            "the address {ip} belongs to another Hardware; it cannot boot as the unknown machine {mac}\n"
                        ),
                    );
                }
                state.metrics.miss("mac", "discovery");
                tracing::info!(%mac, client = %ip, osie = %osie, "no Hardware has this MAC: serving the discovery OSIE");
                let m = Machine::discovered(namespace, &mac, osie);
                return script_response(&state, &m, 0, "discovery", false).await;
            }
            state.metrics.miss("mac", "unknown");
            tracing::info!(%mac, client = %ip, "no Hardware has this MAC; no iPXE script");
            return text(
                StatusCode::NOT_FOUND,
                "ipxe",
                format!("no Hardware has the MAC {mac} (spec.networkInterfaces)\n"),
            );
        }
        Lookup::Conflict(keys) => {
            state.metrics.miss("mac", "conflict");
            tracing::warn!(%mac, hardware = ?keys, "several Hardware claim one MAC; serving none");
            return text(
                StatusCode::CONFLICT,
                "ipxe",
                format!(
                    "the MAC {mac} is claimed by several Hardware ({}); no script is served\n",
                    keys.join(", ")
                ),
            );
        }
    };
    // A caller whose address is another machine's does not get this one's script.
    if let Lookup::Found(owner, _) = state.index.by_ip(ip)
        && owner.key != m.key
    {
        tracing::warn!(%mac, client = %ip, owner = %owner.key, "iPXE script by MAC refused to another machine's address");
        return text(
            StatusCode::FORBIDDEN,
            "ipxe",
            format!(
                "the address {ip} belongs to another Hardware; it cannot read the script of {mac}\n"
            ),
        );
    }
    let caller_is_machine =
        matches!(state.index.by_ip(ip), Lookup::Found(owner, _) if owner.key == m.key);
    script_response(&state, &m, i, "mac", caller_is_machine).await
}

async fn ipxe_by_ip(
    State(state): State<AppState>,
    axum::Extension(ClientIp(ip)): axum::Extension<ClientIp>,
) -> Response {
    let (m, i) = match caller(&state, ip, "ipxe") {
        Ok(c) => c,
        Err(r) => return r,
    };
    script_response(&state, &m, i, "ip", true).await
}

/// Serves `app` on `listener` until `shutdown`, then lets open requests finish (the process's
/// shutdown grace bounds the wait).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "hegel listening (HTTP)");
    }
    let sweeper = {
        let state = state.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => state.sweep_rate_limits(),
                }
            }
        })
    };
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    sweeper.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_normalize() {
        assert_eq!(
            normalize_mac("AA-BB-cc-00-00-01").as_deref(),
            Some("aa:bb:cc:00:00:01")
        );
        assert_eq!(normalize_mac("aa:bb:cc:00:00"), None);
        assert_eq!(normalize_mac("aa:bb:cc:00:00:0g"), None);
    }

    #[test]
    fn meta_labels_are_bounded() {
        assert_eq!(meta_label(""), "meta-data");
        assert_eq!(
            meta_label("public-keys/0/openssh-key"),
            "meta-data/public-keys"
        );
        assert_eq!(meta_label("../../etc"), "meta-data/other");
    }
}
