//! Leader election with a `coordination.k8s.io/v1` Lease ([`Elector`]), and [`run_elected`],
//! the loop a replica runs around it: stand by until elected, run one term, stop the term
//! (bounded) when leadership is lost, stand by again; release the Lease on shutdown so a
//! standby takes over at once. Shared by the workflow controller and the BMC controller, so
//! two replicas of either never act at once.
#![forbid(unsafe_code)]

mod elector;

use std::future::Future;
use std::time::Duration;

pub use elector::{Elector, Ended};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Leader election with a `coordination.k8s.io/v1` Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// How long a leader's claim is valid without renewal; a standby takes over once it has
    /// seen no renewal for this long. Default 10 s.
    pub duration: Duration,
    /// How often the leader renews. Default 2 s.
    pub renew_period: Duration,
    /// The leader steps down when it could not renew for this long (shorter than `duration`,
    /// so it stops before anyone else may start). Default 7 s.
    pub renew_deadline: Duration,
    /// How often a standby looks at the Lease. Default 2 s.
    pub retry_period: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            namespace: "tink-system".into(),
            name: "tink-controller".into(),
            duration: Duration::from_secs(10),
            renew_period: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(7),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseConfig {
    /// What a term that lost the Lease has left to stop before a standby may start: the
    /// Lease's duration after the renew deadline (at least 100 ms).
    pub fn drain_budget(&self) -> Duration {
        self.duration
            .saturating_sub(self.renew_deadline)
            .max(Duration::from_millis(100))
    }
}

/// Runs one replica until `shutdown` is cancelled: stands by (`standing_by(ok)` after each
/// look at the Lease: whether the API server answered), leads when elected
/// (`leading(true)`, then `term(token)` until it returns or leadership is lost: the token is
/// cancelled and the term gets [`LeaseConfig::drain_budget`] to return before it is dropped),
/// and stands by again (`leading(false)`). A term's error ends the loop (after releasing the
/// Lease) and is returned; so is the last term's result on shutdown.
pub async fn run_elected<T, Fut, E>(
    elector: &Elector,
    shutdown: &CancellationToken,
    standing_by: impl Fn(bool),
    leading: impl Fn(bool),
    mut term: T,
) -> Result<(), E>
where
    T: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    loop {
        leading(false);
        if !elector.acquire(shutdown, &standing_by).await {
            return Ok(());
        }
        leading(true);
        let token = shutdown.child_token();
        let run = term(token.clone());
        let keeper = elector.keep(&token);
        tokio::pin!(run, keeper);
        let outcome = tokio::select! {
            r = &mut run => { token.cancel(); r }
            ended = &mut keeper => {
                if ended == Ended::Lost {
                    warn!("leadership lost; stopping the term and standing by");
                }
                token.cancel();
                let budget = elector.config().drain_budget();
                match tokio::time::timeout(budget, &mut run).await {
                    Ok(r) => r,
                    Err(_) => {
                        warn!(?budget, "the term did not drain in time; aborting it");
                        Ok(())
                    }
                }
            }
        };
        leading(false);
        if shutdown.is_cancelled() {
            elector.release().await;
            return outcome;
        }
        if outcome.is_err() {
            elector.release().await;
            return outcome;
        }
        info!("standing by");
    }
}
