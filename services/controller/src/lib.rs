//! The tinkerbell controller: the only writer of Workflow status (DESIGN.md sections 1 and 3).
//!
//! Replicas elect a leader with a `coordination.k8s.io/v1` Lease ([`leader`]); only the leader
//! runs a term ([`run`]):
//! - a kube-runtime reconciler of Workflows (watching Templates and Hardware too, so a Workflow
//!   waiting for a missing one proceeds when it appears) that prepares (finalizer, render,
//!   `Pending`), dispatches (the oldest runnable Pending Workflow of an idle machine whose agent
//!   is connected per the presence bucket; `Scheduled` is written before `StartWorkflow` is
//!   published, and a restart resumes), supervises (timeouts by requeue time), cancels on
//!   deletion and removes the finalizer at every end state, all through the pure
//!   `tink_workflow::step_all`;
//! - a durable JetStream consumer of agent events, applying each batch per Workflow in one
//!   status write and acknowledging after it;
//! - a watch of the presence and replica heartbeat buckets (deleting the entries of dead
//!   replicas), Kubernetes Events for transitions, metrics;
//! - when enabled ([`capi::CapiConfig`]), the Cluster API infrastructure provider's reconcilers
//!   ([`capi`]).
//!
//! Tests and the binary start it the same way:
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tink_controller::Error> {
//! let config = tink_controller::ControllerConfig::new("nats://127.0.0.1:4222", "controller-0");
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! tink_controller::run(
//!     config,
//!     client,
//!     tink_runtime::Health::new(),
//!     tink_controller::Metrics::default(),
//!     shutdown,
//! )
//! .await
//! # }
//! ```
#![forbid(unsafe_code)]

mod admitted;
pub mod agent_reset;
pub mod agent_secrets;
mod boot;
pub mod capi;
mod config;
mod dispatch;
mod effects;
mod engine;
mod error;
mod events;
pub mod inventory;
pub mod inventory_request;
mod keys;
/// The Lease elector (from `tink-lease`, shared with the BMC controller).
pub use tink_lease as leader;
mod ledger;
pub mod limits;
mod locks;
mod metrics;
mod presence;
mod reconcile;
pub mod recorder;
pub mod rollout;
pub use tink_render as render;
// WorkflowRuleSets (issue 31): Workflows created from inventory matches.
pub mod rules;
mod tasks;
mod term;
pub mod trace;
mod wake;
mod writes;

use kube::Client;
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub use config::{CONTROLLER_NAME, ControllerConfig, FINALIZER, LeaseConfig};
pub use error::Error;
pub use events::consumer_config;
pub use metrics::{Label, Metrics};

/// Runs one replica until `shutdown` is cancelled: stands by, leads when elected, and stands
/// by again if leadership is lost. On shutdown the leader drains its term and releases the
/// Lease so a standby takes over at once.
///
/// Readiness: a standby is ready while it can read the Lease; the leader turns ready once its
/// caches are synced, the events consumer is bound and presence is watched.
pub async fn run(
    config: ControllerConfig,
    client: Client,
    health: Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    health.set_ready(false);
    let name = format!("tink-controller {}", config.replica_id);
    // Counts reconnections: the leader ensures the streams again after one (a NATS server that
    // lost its store, or memory streams after a restart, gets them back; the servers only
    // verify and wait for them).
    let reconnects = std::sync::Arc::new(tokio::sync::watch::channel(0u64).0);
    let nats = {
        let reconnects = reconnects.clone();
        tink_bus::ServiceConnection::new(&config.nats_url, &config.nats_auth, name)
            .on_event(move |event| {
                if matches!(event, async_nats::Event::Connected) {
                    reconnects.send_modify(|n| *n += 1);
                }
            })
            .connect()
            .await
            .map_err(Error::Nats)?
    };
    let jetstream = async_nats::jetstream::new(nats.clone());
    let elector = leader::Elector::new(
        client.clone(),
        config.lease.clone(),
        config.replica_id.clone(),
    );
    let standby_health = health.clone();
    let leading = |on: bool| {
        metrics.leader.set(i64::from(on));
        health.set_ready(false);
    };
    let result = leader::run_elected(
        &elector,
        &shutdown,
        |ok| standby_health.set_ready(ok),
        leading,
        |term| {
            engine::lead(
                client.clone(),
                config.clone(),
                metrics.clone(),
                health.clone(),
                jetstream.clone(),
                reconnects.subscribe(),
                term,
            )
        },
    )
    .await;
    if let Err(e) = nats.flush().await {
        warn!(error = %e, "cannot flush NATS on shutdown");
    }
    result
}
