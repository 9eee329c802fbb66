//! The controller's errors: what stops a replica, and the one error type of a step (reading,
//! stepping and applying one Workflow, in the reconciler and in the events consumer alike).

use tink_workflow::WorkflowKey;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// Errors that stop a replica.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// NATS refused the connection or the options are invalid.
    #[error(transparent)]
    Nats(tink_bus::NatsConnectError),
    /// A part of the leader's term stopped on its own.
    #[error("the {0} stopped unexpectedly")]
    Stopped(String),
    /// A part of the leader's term panicked (its name, the panic's message).
    #[error("the {0} panicked: {1}")]
    Panicked(String, String),
}

/// Errors of one reconcile or one batch of events.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    /// The Workflow changed since it was read (409); the caller re-reads and retries.
    #[error("conflict writing {0}: it changed since it was read")]
    Conflict(WorkflowKey),
    /// The Kubernetes API failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Publishing a command failed.
    #[error("publishing a command: {0}")]
    Bus(#[from] tink_bus::BusError),
    /// Reading what the streams prove about a command failed.
    #[error("reading the streams: {0}")]
    Delivery(#[from] tink_bus::DeliveryError),
    /// An object could not be serialized.
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
}

impl StepError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Conflict(_) => "conflict",
            Self::Kube(_) => "kube",
            Self::Bus(_) => "publish",
            Self::Delivery(_) => "delivery_lookup",
            Self::Json(_) => "json",
        }
    }
}

/// Logs an error of a background piece and counts it.
pub(crate) fn report(metrics: &Metrics, what: &str, e: &StepError) {
    metrics.error(e.kind());
    match e {
        StepError::Conflict(_) => debug!(error = %e, "{what}"),
        _ => warn!(error = %e, "{what}"),
    }
}
