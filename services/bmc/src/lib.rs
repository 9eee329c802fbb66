//! The BMC controller: Rufio's `bmc.tinkerbell.org` Machines, Jobs and Tasks reconciled over
//! the `tink-bmc` providers (Redfish, IPMI, an RPC webhook).
//!
//! - **Machines** ([`reconcile::machine`]): the power state read on a period with ±20% jitter
//!   and whenever the spec changes; `status.powerState` and the `Contactable` condition written
//!   only when they change, an Event for each change.
//! - **Jobs** ([`reconcile::job`]): the pure planner [`job::next_step`] applied one step at a
//!   time; one Job at a time per Machine ([`job::runnable`]); each task a child Task named
//!   `<job>-task-<n>` as Rufio names them, so a restarted controller finds the Tasks it created.
//!   A Job may only name a Machine in its own namespace.
//! - **Tasks** ([`reconcile::task`]): the only code that sends a BMC an action. A power task
//!   reads the state first (an `on` for a machine that is on sends nothing), completes only
//!   when the BMC reports the target state, refreshes the Machine at once, and is never sent
//!   twice: see [`task`] for how a restarted controller knows what was sent.
//!
//! One replica acts at a time (a Lease, [`tink_lease::run_elected`]); every BMC call has a
//! timeout, retries only when safe, and runs under a per-BMC and an overall bound
//! ([`tink_bmc::Limits`]). Credentials come only from `kubernetes.io/basic-auth` Secrets in
//! the object's own namespace and never reach logs, Events or status.
#![forbid(unsafe_code)]

mod config;
mod context;
mod error;
pub mod job;
mod metrics;
mod reconcile;
pub mod task;

use kube::Client;
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

pub use config::{BmcConfig, CONTROLLER_NAME};
pub use error::Error;
pub use metrics::Metrics;

/// Runs one replica until `shutdown` is cancelled: stands by, reconciles while it leads, and
/// stands by again if leadership is lost; releases the Lease on shutdown.
///
/// Readiness: a standby is ready while it can read the Lease; the leader once its caches are
/// filled.
pub async fn run(
    config: BmcConfig,
    client: Client,
    health: Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    health.set_ready(false);
    let elector = tink_lease::Elector::new(
        client.clone(),
        config.lease.clone(),
        config.replica_id.clone(),
    );
    let standby = health.clone();
    let leading = |on: bool| {
        metrics.leader.set(i64::from(on));
        health.set_ready(false);
    };
    tink_lease::run_elected(
        &elector,
        &shutdown,
        |ok| standby.set_ready(ok),
        leading,
        |term| {
            reconcile::run(
                client.clone(),
                config.clone(),
                metrics.clone(),
                health.clone(),
                term,
            )
        },
    )
    .await
}
