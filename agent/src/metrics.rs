//! Prometheus metrics of the agent.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label of [`Metrics::actions`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `Succeeded`, or the failure reason (`NonZeroExitCode`, `Timeout`, ...).
    pub outcome: String,
}

/// The agent's metrics; clones share the same values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// 1 while a command stream to a server is open.
    pub connected: Gauge,
    /// 1 while a workflow runs.
    pub busy: Gauge,
    /// Command streams opened.
    pub stream_connects: Counter,
    /// Commands received.
    pub commands_received: Counter,
    /// Workflows rejected because one was running.
    pub workflows_rejected: Counter,
    /// Actions finished, by outcome.
    pub actions: Family<OutcomeLabel, Counter>,
    /// Events the server confirmed.
    pub events_published: Counter,
    /// Failed `PublishEvent` attempts (each retried).
    pub event_publish_failures: Counter,
    /// Events the server refused as malformed (not retried) or abandoned at shutdown.
    pub events_dropped: Counter,
    /// Events waiting to be published.
    pub events_queued: Gauge,
}

impl Metrics {
    /// New metrics registered under the `tink_agent` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("tink_agent");
        r.register(
            "connected",
            "1 while a command stream to a server is open",
            m.connected.clone(),
        );
        r.register("busy", "1 while a workflow runs", m.busy.clone());
        r.register(
            "stream_connects",
            "Command streams opened",
            m.stream_connects.clone(),
        );
        r.register(
            "commands_received",
            "Commands received",
            m.commands_received.clone(),
        );
        r.register(
            "workflows_rejected",
            "Workflows rejected while busy",
            m.workflows_rejected.clone(),
        );
        r.register("actions", "Actions finished, by outcome", m.actions.clone());
        r.register(
            "events_published",
            "Events confirmed by a server",
            m.events_published.clone(),
        );
        r.register(
            "event_publish_failures",
            "Failed PublishEvent attempts (retried)",
            m.event_publish_failures.clone(),
        );
        r.register(
            "events_dropped",
            "Events refused as malformed or abandoned at shutdown",
            m.events_dropped.clone(),
        );
        r.register(
            "events_queued",
            "Events waiting to be published",
            m.events_queued.clone(),
        );
        m
    }
}
