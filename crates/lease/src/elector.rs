//! The Lease elector.
//!
//! Written here rather than taken from a crate: `kube-lease-manager` (the maintained one that
//! supports kube 5) relies on server-side-apply field-manager conflicts to make concurrent
//! acquisition fail, which the project's test API server does not implement. This loop uses
//! what client-go's leader election uses, a `resourceVersion`-guarded update (a 409 means
//! someone else won), which every API server enforces.
//!
//! Expiry is judged by the observer's own clock, as client-go does: a standby takes over once
//! it has seen the same Lease version for `duration` (so clock skew between replicas does not
//! matter). The leader renews every `renew_period` and steps down when it could not renew for
//! `renew_deadline` (< `duration`), so it stops before a standby may start.

use std::sync::Mutex;
use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::LeaseConfig;

/// How leading ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Another replica holds the Lease, or renewing failed for longer than the deadline.
    Lost,
    /// The term was cancelled (shutdown).
    Cancelled,
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    identity: String,
    /// The Lease version last seen and when this replica first saw it.
    observed: Mutex<Option<(String, Instant)>>,
}

fn conflict_or_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Elector {
    /// An elector for `identity` (the replica id).
    pub fn new(client: Client, config: LeaseConfig, identity: impl Into<String>) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            identity: identity.into(),
            observed: Mutex::new(None),
        }
    }

    /// The Lease's settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.config.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Tries once to become (or stay) the leader. `Ok(true)`: this replica holds the Lease.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if conflict_or_exists(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let mine = holder.as_deref() == Some(self.identity.as_str());
        if holder.is_some() && !mine {
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let held_for = i64::from(spec.lease_duration_seconds.unwrap_or(self.duration_secs()));
            let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
            let expired = match observed.as_ref() {
                Some((seen, since)) if *seen == rv => {
                    since.elapsed().as_secs_f64() >= held_for.max(1) as f64
                }
                _ => {
                    *observed = Some((rv, Instant::now()));
                    false
                }
            };
            if !expired {
                return Ok(false);
            }
            info!(previous = ?holder, "the Lease expired; taking over");
        }
        let mut lease = lease;
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration_secs()),
            acquire_time: if mine {
                spec.acquire_time
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!mine)),
            ..spec
        });
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if conflict_or_exists(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica leads (`true`) or `shutdown` is cancelled (`false`). `on_poll`
    /// is told after each look whether the API server answered.
    pub async fn acquire(&self, shutdown: &CancellationToken, on_poll: impl Fn(bool)) -> bool {
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    info!(identity = %self.identity, lease = %self.config.name, "leading");
                    return true;
                }
                Ok(false) => {
                    on_poll(true);
                    debug!("another replica leads; standing by");
                }
                Err(e) => {
                    on_poll(false);
                    warn!(error = %e, "cannot read or write the Lease");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    /// Renews the Lease until leadership is lost or `term` is cancelled.
    ///
    /// Every renewal is bounded by what is left of the renew deadline: a request that hangs (a
    /// stalled connection to the API server; the client sets no read timeout) ends leadership
    /// at the deadline, before a standby can see the Lease expire.
    pub async fn keep(&self, term: &CancellationToken) -> Ended {
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                _ = term.cancelled() => return Ended::Cancelled,
                _ = tokio::time::sleep(self.config.renew_period) => {}
            }
            let left = self.config.renew_deadline.saturating_sub(renewed.elapsed());
            let attempt = tokio::select! {
                _ = term.cancelled() => return Ended::Cancelled,
                r = tokio::time::timeout(left, self.try_acquire()) => r,
            };
            let Ok(attempt) = attempt else {
                warn!(
                    deadline = ?self.config.renew_deadline,
                    "the Lease renewal did not finish before the renew deadline; stepping down"
                );
                return Ended::Lost;
            };
            match attempt {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => {
                    warn!("another replica holds the Lease");
                    return Ended::Lost;
                }
                Err(e) => {
                    warn!(error = %e, "cannot renew the Lease");
                    if renewed.elapsed() >= self.config.renew_deadline {
                        return Ended::Lost;
                    }
                }
            }
        }
    }

    /// Gives the Lease up (on shutdown) so a standby takes over at once; bounded by the renew
    /// deadline (an unreachable API server: the Lease then expires by itself).
    pub async fn release(&self) {
        if tokio::time::timeout(self.config.renew_deadline, self.release_once())
            .await
            .is_err()
        {
            warn!("cannot release the Lease in time; it expires by itself");
        }
    }

    async fn release_once(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: None,
            ..spec
        });
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!("Lease released"),
            Err(e) => warn!(error = %e, "cannot release the Lease; it expires by itself"),
        }
    }
}
