//! The tinkerbell webhook: validating admission and CRD conversion for the `tinkerbell.org`
//! kinds (DESIGN.md section 1), served over HTTPS by any number of replicas behind one Service.
//!
//! - `POST /validate` ([`admission`]): AdmissionReview v1 for Hardware, Template, Workflow and
//!   OSIE, with the checks the CRD schema and CEL cannot express ([`validate`]): MAC and DHCP
//!   IP uniqueness across all Hardware (an in-memory [`Index`] fed by watches, one hash lookup
//!   per MAC), Go template syntax with line and column, image references, volumes,
//!   environment names, Workflow spec immutability after `Pending`, warnings for unresolved
//!   references, OSIE http(s) URLs; and for Rufio's `bmc.tinkerbell.org` Machine, Job and
//!   Task: BMC hosts the provider can read, Secrets and Machines only of the object's own
//!   namespace, http(s) RPC URLs ([`validate::bmc`]).
//!   Approving a discovered Hardware (`spec.discovery.approved`) needs the RBAC verb `approve`
//!   on `hardware.tinkerbell.org`, checked with a SubjectAccessReview for the requesting user
//!   ([`approval`]); a Workflow for a discovered Hardware not approved yet is refused.
//! - `POST /convert` ([`conversion`]): ConversionReview v1 through crates/api's conversion.
//! - TLS ([`tls`]): the certificate and key files are reloaded when they change;
//!   [`dev_certificates`] makes a CA and serving certificate for the development stack.
//!
//! The binary and the tests start it the same way:
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tink_webhook::Error> {
//! let config = tink_webhook::WebhookConfig::new(
//!     "0.0.0.0:9443".parse().unwrap(),
//!     "/etc/tink-webhook/tls.crt",
//!     "/etc/tink-webhook/tls.key",
//! );
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! tink_webhook::run(config, client, tink_runtime::Health::new(), Default::default(), shutdown).await
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod admission;
pub mod approval;
mod certs;
pub mod conversion;
pub mod identities;
pub mod index;
mod metrics;
pub mod serve;
pub mod tls;
pub mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tink_runtime::Health;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use certs::{CertError, DevCertificates, dev_certificates};
pub use index::Index;
pub use metrics::{AdmissionLabels, Label, Metrics};
pub use serve::{AppState, ServeLimits, router, serve};
pub use tls::{TlsError, TlsFiles};

/// How the webhook runs.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Address of the HTTPS listener.
    pub listen: SocketAddr,
    /// The serving certificate files.
    pub tls: TlsFiles,
    /// Server limits.
    pub limits: ServeLimits,
    /// How long an admitted Hardware's new MACs and IPs stay reserved while its watch event
    /// is on the way.
    pub reservation_ttl: Duration,
    /// How long a granted `approve` permission (SubjectAccessReview) is remembered; zero asks
    /// every time.
    pub approval_cache_ttl: Duration,
}

impl WebhookConfig {
    /// Defaults: certificate files checked every 10 s, [`ServeLimits::default`], 30 s
    /// reservations, every approval asked of the API server.
    pub fn new(listen: SocketAddr, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            listen,
            tls: TlsFiles {
                cert: cert.into(),
                key: key.into(),
                reload_interval: Duration::from_secs(10),
            },
            limits: ServeLimits::default(),
            reservation_ttl: Duration::from_secs(30),
            approval_cache_ttl: Duration::ZERO,
        }
    }
}

/// Errors that stop the webhook.
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
    /// The certificate or key is unusable.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The server failed.
    #[error("serving: {0}")]
    Serve(std::io::Error),
    /// A background task stopped on its own.
    #[error("{0}")]
    Stopped(String),
}

/// Binds `config.listen` and runs until `shutdown` (see [`run_on`]).
pub async fn run(
    config: WebhookConfig,
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

/// Serves on `listener` until `shutdown`: loads the certificate (an error here stops the
/// webhook), watches its files, feeds the index, and turns `health` ready once the index has
/// listed Hardware and Templates. A watch or reload task ending on its own ends the webhook.
/// Approvals of discovered Hardware are checked with SubjectAccessReviews through `client`.
pub async fn run_on(
    listener: TcpListener,
    config: WebhookConfig,
    client: kube::Client,
    health: Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    health.set_ready(false);
    let (store, loaded) = tls::load(&config.tls).await?;
    let server_config = Arc::new(store.server_config()?);
    let index = Arc::new(Index::new(config.reservation_ttl));
    let approver = approval::Approver::new(client.clone(), config.approval_cache_ttl);
    let state = AppState::new(index.clone(), metrics.clone(), &config.limits)
        .with_approver(Arc::new(approver));
    // All three parts are critical: any ending stops the group (and the webhook). Drain: the
    // server lets open requests finish within its grace period.
    let group = tink_runtime::TaskGroup::<Error>::new(health.clone(), &shutdown).with_drain(
        config
            .limits
            .shutdown_grace
            .max(tink_runtime::DEFAULT_SHUTDOWN_GRACE),
    );
    let tasks = group.token().clone();

    let reload = tls::watch(
        config.tls.clone(),
        store,
        loaded,
        metrics.clone(),
        tasks.clone(),
    );
    group.spawn_critical("certificate reloader", async move {
        reload.await;
        Ok(())
    });
    let feed = index::feed(client, index, metrics, health.clone(), tasks.clone());
    group.spawn_critical("index feed", async move {
        feed.await.map_err(|e| Error::Stopped(e.to_string()))
    });
    let server = serve(
        listener,
        server_config,
        router(state, &config.limits),
        config.limits.clone(),
        tasks.clone(),
    );
    group.spawn_critical(
        "HTTPS server",
        async move { server.await.map_err(Error::Serve) },
    );
    group
        .wait()
        .await
        .map_err(|failure| failure.into_error(Error::Stopped))
}
