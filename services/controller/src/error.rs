//! The controller's errors: what stops a replica, and the one error type of a step (reading,
//! stepping and applying one Workflow, in the reconciler and in the events consumer alike).

use async_nats::jetstream::kv;
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

/// Why the leader's upkeep of the agent buckets and the agent secret copies failed for now (a
/// session reset, a machine's secret, an admission, a sweep of either bucket). It is retried:
/// on the next change of the Hardware, or by the next sweep.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpkeepError {
    /// The Kubernetes API failed (a copy, a Secret, the reset annotation's patch).
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// An agent id of the machine is not a valid id.
    #[error(transparent)]
    Token(#[from] tink_bus::TokenError),
    /// A patch could not be built.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Reading a bucket entry failed.
    #[error(transparent)]
    Entry(#[from] kv::EntryError),
    /// Writing a bucket entry failed.
    #[error(transparent)]
    Put(#[from] kv::PutError),
    /// Deleting or purging a bucket entry failed (one error type in async-nats).
    #[error(transparent)]
    Delete(#[from] kv::DeleteError),
    /// Listing a bucket's keys failed.
    #[error(transparent)]
    Keys(#[from] kv::HistoryError),
    /// Reading a bucket's keys failed.
    #[error(transparent)]
    Watcher(#[from] kv::WatcherError),
    /// The Hardware cache a sweep waits for is gone (the term is ending).
    #[error("the Hardware cache is gone: {0}")]
    CacheGone(#[from] kube::runtime::reflector::store::WriterDropped),
    /// Some machines of a sweep could not be brought up to date (each is logged).
    #[error("{0} agent secrets could not be updated")]
    Failed(usize),
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
