//! tink-console: the web console of tinkerbell-rs. Machines as tiles coloured by their latest
//! workflow's state, workflows with a server-drawn timeline of their actions, their conditions
//! and Kubernetes Events, templates with a rendered preview, a search over names, MACs and IPs;
//! live through server-sent events fed by the watches; cancel and run-again actions; each
//! machine's BMC (`bmc.tinkerbell.org`: power state, last Job) and power actions, which create
//! a BMC Job with the user's own token.
//!
//! Reads come from the shared Hardware index and kube-runtime reflectors ([`cache`]), never a
//! list per page view. Each
//! request carries the user's own Kubernetes bearer token and is authorised with
//! `SubjectAccessReview` against the user's RBAC ([`access`]); writes are sent with that token.
//! Pages are askama templates (HTML-escaped); the only script is the small
//! `static/console.js`, served by the console itself.
//!
//! ```no_run
//! # async fn example(kube: kube::Config) -> Result<(), tink_console::Error> {
//! let config = tink_console::ConsoleConfig::new("0.0.0.0:8080".parse().unwrap(), kube);
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! tink_console::run(config, tink_runtime::Health::new(), Default::default(), shutdown).await
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod access;
pub mod cache;
pub mod feed;
pub mod http;
pub mod live;
pub mod logs;
mod metrics;
pub mod pages;
pub mod presence;
pub mod syslog;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tink_runtime::Health;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use http::{AppState, HttpSettings, router};
pub use live::StreamLimits;
pub use metrics::{Metrics, RefusedLabels, RequestLabels};

/// How the console runs.
#[derive(Clone)]
pub struct ConsoleConfig {
    /// Address of the HTTP listener.
    pub listen: SocketAddr,
    /// The Kubernetes API: the console's own identity for watches and reviews, and the base
    /// of the per-user clients that carry out actions.
    pub kube: kube::Config,
    /// Only show objects of this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// How long positive TokenReview and SubjectAccessReview answers are remembered.
    pub review_cache_ttl: Duration,
    /// Whether the session cookie is `Secure` (HTTPS only).
    pub secure_cookies: bool,
    /// Updates kept for the live streams (a stream further behind resyncs).
    pub sse_buffer: usize,
    /// At most this many live streams at once.
    pub sse_max_clients: usize,
    /// At most this many live streams of one user at once.
    pub sse_max_clients_per_user: usize,
    /// The live streams' keep-alive, maximum age and access recheck period.
    pub limits: StreamLimits,
    /// Deleted workflows remembered (their pages show how they ended).
    pub tombstones: usize,
    /// Where agent presence comes from (NATS); `None`: tiles say `agent unknown`.
    pub presence: Option<presence::PresenceConfig>,
    /// The tink-servers that serve action output; `None`: no output on workflow pages.
    pub logs: Option<logs::LogsConfig>,
}

impl ConsoleConfig {
    /// The defaults of the flags.
    pub fn new(listen: SocketAddr, kube: kube::Config) -> Self {
        ConsoleConfig {
            listen,
            kube,
            namespace: None,
            review_cache_ttl: Duration::from_secs(5),
            secure_cookies: true,
            sse_buffer: 4096,
            sse_max_clients: 1000,
            sse_max_clients_per_user: 8,
            limits: StreamLimits {
                keepalive: Duration::from_secs(15),
                max_age: Duration::from_secs(1800),
                recheck: Duration::from_secs(30),
            },
            tombstones: cache::DEFAULT_TOMBSTONES,
            presence: None,
            logs: None,
        }
    }
}

/// Errors that stop the console.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A client (Kubernetes, tink-server) could not be built.
    #[error("cannot build a client: {0}")]
    Client(String),
    /// The server failed.
    #[error("serving: {0}")]
    Serve(std::io::Error),
    /// A background task stopped on its own.
    #[error("{0}")]
    Stopped(String),
}

/// Binds `config.listen` and runs until `shutdown` (see [`run_on`]).
pub async fn run(
    config: ConsoleConfig,
    health: Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
    run_on(listener, config, health, metrics, shutdown).await
}

/// Serves on `listener` until `shutdown`: feeds the caches from the API server and turns
/// `health` ready once every watch has listed (pages answer 503 before). A watch ending on its
/// own ends the console, so a replica never serves stale data while it looks healthy.
pub async fn run_on(
    listener: TcpListener,
    config: ConsoleConfig,
    health: Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    health.set_ready(false);
    let client =
        kube::Client::try_from(config.kube.clone()).map_err(|e| Error::Client(e.to_string()))?;
    let logs = match config.logs.clone() {
        Some(c) => Some(logs::Logs::new(c).map_err(Error::Client)?),
        None => None,
    };
    let (cache, writers) = cache::Cache::new(config.tombstones);
    let live = Arc::new(live::Live::new(config.sse_buffer, metrics.clone()));
    // The one driver of the live streams: both watches hand it what they saw.
    let changes = feed::Feed::new(cache.clone(), live.clone());
    // The watches and the HTTP server are critical (either ending stops the console); the
    // presence watch is best effort.
    let group = tink_runtime::TaskGroup::<Error>::new(health.clone(), &shutdown);
    let tasks = group.token().clone();
    let state = AppState::new(
        cache.clone(),
        live.clone(),
        access::Access::new(client.clone(), config.review_cache_ttl),
        metrics.clone(),
        config.kube.clone(),
        HttpSettings {
            secure_cookies: config.secure_cookies,
            sse_max_clients: config.sse_max_clients,
            sse_max_clients_per_user: config.sse_max_clients_per_user,
            limits: config.limits,
            logs,
        },
        tasks.clone(),
    );
    let watches = cache::watch(
        client,
        config.namespace.clone(),
        cache.clone(),
        writers,
        {
            let changes = changes.clone();
            move |c| changes.apply(c)
        },
        metrics,
        health.clone(),
        tasks.clone(),
    );
    group.spawn_critical("watches", async move {
        watches.await.map_err(|e| Error::Stopped(e.to_string()))
    });
    // Presence is best effort: without NATS the tiles say so, the console still serves.
    if let Some(p) = config.presence.clone() {
        group.spawn(
            "presence watch",
            presence::watch(
                p,
                cache.presence.clone(),
                cache.syslog.clone(),
                move |c| changes.agent_changed(&c),
                tasks.clone(),
            ),
        );
    }
    let server = http::serve(listener, router(state), tasks.clone());
    group.spawn_critical(
        "HTTP server",
        async move { server.await.map_err(Error::Serve) },
    );
    group
        .wait()
        .await
        .map_err(|failure| failure.into_error(Error::Stopped))
}
