//! Hegel: per-machine metadata for cloud-init (the EC2 instance metadata API) and the iPXE
//! boot script, for any number of replicas behind one Service (DESIGN.md section 4).
//!
//! A request is answered from the caller's source IP ([`client_ip`]: `X-Forwarded-For` only
//! from trusted proxies) looked up in an in-memory [`Index`] of Hardware fed by watches
//! ([`index::feed`]) and, for the agent secrets of boot scripts, a cache of the copies the
//! controller keeps in the system namespace ([`secrets`]); no request reaches the Kubernetes
//! API. See services/hegel/README.md for
//! the endpoints and where each value comes from.
//!
//! The binary and the tests start it the same way:
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), hegel::Error> {
//! let config = hegel::HegelConfig::new(
//!     "0.0.0.0:50061".parse().unwrap(),
//!     hegel::IpxeConfig::new("tink-server.tink-system.svc:42113"),
//! );
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! hegel::run(config, client, tink_runtime::Health::new(), Default::default(), shutdown).await
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod client_ip;
pub mod http;
pub mod imds;
pub mod index;
pub mod ipxe;
pub mod machine;
mod metrics;
pub mod secrets;

use std::net::SocketAddr;
use std::sync::Arc;

use tink_runtime::Health;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use client_ip::{Cidr, TrustedProxies};
pub use http::{AppState, RateLimit, router};
pub use index::{Index, Lookup};
pub use ipxe::IpxeConfig;
pub use metrics::{Metrics, MissLabels, RequestLabels};
pub use secrets::AgentSecrets;

/// How Hegel runs.
#[derive(Clone, Debug)]
pub struct HegelConfig {
    /// Address of the HTTP listener.
    pub listen: SocketAddr,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<Cidr>,
    /// The iPXE script values.
    pub ipxe: IpxeConfig,
    /// The per-client rate limit.
    pub rate_limit: RateLimit,
    /// Only serve Hardware of this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Where the controller keeps the copies of agent secrets (the only namespace whose
    /// Secrets Hegel reads). Default `tink-system`.
    pub system_namespace: String,
}

impl HegelConfig {
    /// No trusted proxies, the default rate limit, all namespaces.
    pub fn new(listen: SocketAddr, ipxe: IpxeConfig) -> Self {
        Self {
            listen,
            trusted_proxies: Vec::new(),
            ipxe,
            rate_limit: RateLimit::default(),
            namespace: None,
            system_namespace: tink_api::agent_secret::DEFAULT_SYSTEM_NAMESPACE.into(),
        }
    }
}

/// Errors that stop Hegel.
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
    /// The server failed.
    #[error("serving: {0}")]
    Serve(std::io::Error),
    /// A background task stopped on its own.
    #[error("{0}")]
    Stopped(String),
}

/// Binds `config.listen` and runs until `shutdown` (see [`run_on`]).
pub async fn run(
    config: HegelConfig,
    client: kube::Client,
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
    run_on(listener, config, client, health, metrics, shutdown).await
}

/// Serves on `listener` until `shutdown`: feeds the agent secret copies, then the index, from
/// the API server and turns `health` ready once the copies, Hardware and OSIEs have been
/// listed. Requests before that get 503. A feed ending on its own ends Hegel (a dead watch must
/// not leave a replica serving stale data while it looks healthy).
pub async fn run_on(
    listener: TcpListener,
    config: HegelConfig,
    client: kube::Client,
    health: Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    health.set_ready(false);
    let (osies, osie_writer) = kube::runtime::reflector::store();
    let index = Arc::new(Index::new(osies));
    let (copies, copies_writer) = kube::runtime::reflector::store();
    let secrets = AgentSecrets::new(config.system_namespace.clone(), copies);
    let state = AppState::new(
        index.clone(),
        metrics.clone(),
        TrustedProxies::new(config.trusted_proxies.clone()),
        config.ipxe.clone(),
        config.rate_limit,
    )
    .with_secrets(secrets);
    // Both parts are critical: either ending stops the group (and Hegel, with its error).
    let group = tink_runtime::TaskGroup::<Error>::new(health.clone(), &shutdown);
    let tasks = group.token().clone();
    let feed = feeds(
        client,
        config,
        index,
        osie_writer,
        copies_writer,
        metrics,
        health.clone(),
        tasks.clone(),
    );
    group.spawn_critical("index feed", async move {
        feed.await.map_err(|e| Error::Stopped(e.to_string()))
    });
    let server = http::serve(listener, state, tasks.clone());
    group.spawn_critical(
        "HTTP server",
        async move { server.await.map_err(Error::Serve) },
    );
    group
        .wait()
        .await
        .map_err(|failure| failure.into_error(Error::Stopped))
}

/// The agent secret copies' feed, and once they are listed the index's (so Hegel is never
/// ready while a machine's secret could still be missing from the cache); until `shutdown` or
/// either ends.
#[allow(clippy::too_many_arguments)]
async fn feeds(
    client: kube::Client,
    config: HegelConfig,
    index: Arc<Index>,
    osie_writer: kube::runtime::reflector::store::Writer<tink_api::v1alpha2::Osie>,
    copies_writer: kube::runtime::reflector::store::Writer<k8s_openapi::api::core::v1::Secret>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), index::FeedEnded> {
    let (synced_tx, mut synced) = tokio::sync::watch::channel(false);
    let mut copies = tokio::spawn(secrets::feed(
        client.clone(),
        config.system_namespace.clone(),
        copies_writer,
        metrics.clone(),
        synced_tx,
        shutdown.clone(),
    ));
    let ended = |r: Result<Result<(), index::FeedEnded>, tokio::task::JoinError>| {
        r.unwrap_or(Err(index::FeedEnded("agent secret copies")))
    };
    tokio::select! {
        r = &mut copies => return ended(r),
        listed = async { synced.wait_for(|s| *s).await.is_ok() } => if !listed {
            return ended(copies.await);
        },
    }
    tokio::select! {
        r = &mut copies => ended(r),
        r = index::feed(
            client,
            config.namespace.clone(),
            index,
            osie_writer,
            metrics,
            health,
            shutdown,
        ) => r,
    }
}
