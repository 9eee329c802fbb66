//! Prometheus metrics of the server.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tink_bus::EventKind;

/// Label of [`Metrics::events_published`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The event kind (`ActionStarted`, ...).
    pub kind: String,
}

/// Label of [`Metrics::errors`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    /// What failed: `invalid_agent_id`, `invalid_event`, `publish_event`, `malformed_command`,
    /// `dispatch_read`, `command_delete`, `presence`, ...
    pub op: String,
}

/// Label of [`Metrics::log_reads`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadResultLabel {
    /// `allowed`, `denied` (RBAC said no), `unauthenticated`, `invalid` (bad request or no such
    /// workflow), `not_configured` (no Kubernetes access), `error` (the API server failed),
    /// `busy` (--log-readers-max reached). An allowed follower is counted a second time when a
    /// later check ends it: `revoked` (permission gone), `token_revoked`, `recheck_failed` (the
    /// API server could not be asked for two periods).
    pub result: String,
}

/// The server's metrics; clones share the same values.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// The counters of `events_published` for each kind (and no kind, last), resolved once so
    /// publishing an event does not build a label and look it up.
    by_kind: [Counter; KINDS.len() + 1],
    /// Agent streams open on this replica.
    pub connected_agents: Gauge,
    /// Commands forwarded to agents (and acknowledged in JetStream).
    pub commands_forwarded: Counter,
    /// Events stored in JetStream, by kind (retries de-duplicated by JetStream included).
    pub events_published: Family<KindLabel, Counter>,
    /// Events JetStream recognised as duplicates of stored ones.
    pub events_duplicate: Counter,
    /// Streams ended because a newer stream for the same agent opened.
    pub streams_superseded: Counter,
    /// Streams ended because this replica could not reach NATS for the presence TTL.
    pub streams_nats_lost: Counter,
    /// Inventory requests forwarded to agents.
    pub inventory_requests: Counter,
    /// Errors by operation.
    pub errors: Family<ErrorLabel, Counter>,
    /// PublishEvent latency up to JetStream's acknowledgement, in seconds.
    pub publish_event_seconds: Histogram,
    /// Action output lines stored in the logs stream (duplicates not counted).
    pub log_lines_received: Counter,
    /// Action output lines dropped: by the agents' limits (as they report them) or refused here.
    pub log_lines_dropped: Counter,
    /// Bytes of action output text stored in the logs stream.
    pub log_bytes_stored: Counter,
    /// Log batches JetStream recognised as duplicates of stored ones (resent after a failure).
    pub log_batches_duplicate: Counter,
    /// PublishLogs latency up to JetStream's acknowledgement, in seconds.
    pub publish_logs_seconds: Histogram,
    /// `LogService.ReadLogs` calls, by result (allowed, denied, ...).
    pub log_reads: Family<ReadResultLabel, Counter>,
    /// Action output lines sent to `ReadLogs` callers.
    pub log_lines_served: Counter,
    /// `ReportInventory` calls by result: `accepted` (stored), `duplicate` (an identical
    /// inventory was stored already), `invalid` (too large or malformed), `denied` (another
    /// agent's id, unauthenticated or not admitted), `unavailable` (not stored; the agent retries).
    pub inventory_reports: Family<ReadResultLabel, Counter>,
}

/// Every event kind, in the order of [`kind_index`].
const KINDS: [EventKind; 6] = [
    EventKind::ActionStarted,
    EventKind::ActionSucceeded,
    EventKind::ActionFailed,
    EventKind::WorkflowRejected,
    EventKind::WorkflowCanceled,
    EventKind::WorkflowReceived,
];

fn kind_index(kind: Option<EventKind>) -> usize {
    match kind {
        Some(EventKind::ActionStarted) => 0,
        Some(EventKind::ActionSucceeded) => 1,
        Some(EventKind::ActionFailed) => 2,
        Some(EventKind::WorkflowRejected) => 3,
        Some(EventKind::WorkflowCanceled) => 4,
        Some(EventKind::WorkflowReceived) => 5,
        None => KINDS.len(),
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let events_published = Family::<KindLabel, Counter>::default();
        let counter = |kind: Option<EventKind>| {
            events_published
                .get_or_create(&KindLabel {
                    kind: kind.map_or("None", EventKind::as_str).to_string(),
                })
                .clone()
        };
        let by_kind = std::array::from_fn(|i| counter(KINDS.get(i).copied()));
        Metrics {
            by_kind,
            connected_agents: Gauge::default(),
            commands_forwarded: Counter::default(),
            events_published,
            events_duplicate: Counter::default(),
            streams_superseded: Counter::default(),
            streams_nats_lost: Counter::default(),
            inventory_requests: Counter::default(),
            errors: Family::default(),
            publish_event_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            log_lines_received: Counter::default(),
            log_lines_dropped: Counter::default(),
            log_bytes_stored: Counter::default(),
            log_batches_duplicate: Counter::default(),
            publish_logs_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            log_reads: Family::default(),
            log_lines_served: Counter::default(),
            inventory_reports: Family::default(),
        }
    }
}

impl Metrics {
    /// New metrics, registered in `registry` under the `tink_server` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Metrics::default();
        let registry = registry.sub_registry_with_prefix("tink_server");
        registry.register(
            "connected_agents",
            "Agent streams open on this replica",
            metrics.connected_agents.clone(),
        );
        registry.register(
            "commands_forwarded",
            "Commands forwarded to agents",
            metrics.commands_forwarded.clone(),
        );
        registry.register(
            "events_published",
            "Events stored in JetStream, by kind",
            metrics.events_published.clone(),
        );
        registry.register(
            "events_duplicate",
            "Events JetStream de-duplicated",
            metrics.events_duplicate.clone(),
        );
        registry.register(
            "streams_superseded",
            "Agent streams ended by a newer stream for the same agent",
            metrics.streams_superseded.clone(),
        );
        registry.register(
            "streams_nats_lost",
            "Agent streams ended because this replica could not reach NATS for the presence TTL",
            metrics.streams_nats_lost.clone(),
        );
        registry.register(
            "inventory_requests",
            "Inventory requests forwarded to agents on their streams",
            metrics.inventory_requests.clone(),
        );
        registry.register("errors", "Errors by operation", metrics.errors.clone());
        registry.register(
            "publish_event_seconds",
            "PublishEvent latency up to JetStream's acknowledgement",
            metrics.publish_event_seconds.clone(),
        );
        registry.register(
            "log_lines_received",
            "Action output lines stored in the logs stream",
            metrics.log_lines_received.clone(),
        );
        registry.register(
            "log_lines_dropped",
            "Action output lines dropped by agent limits or refused",
            metrics.log_lines_dropped.clone(),
        );
        registry.register(
            "log_bytes_stored",
            "Bytes of action output stored in the logs stream",
            metrics.log_bytes_stored.clone(),
        );
        registry.register(
            "log_batches_duplicate",
            "Log batches JetStream de-duplicated",
            metrics.log_batches_duplicate.clone(),
        );
        registry.register(
            "publish_logs_seconds",
            "PublishLogs latency up to JetStream's acknowledgement",
            metrics.publish_logs_seconds.clone(),
        );
        registry.register(
            "log_reads",
            "LogService.ReadLogs calls by result (allowed, denied, unauthenticated, invalid, not_configured, error)",
            metrics.log_reads.clone(),
        );
        registry.register(
            "log_lines_served",
            "Action output lines sent to ReadLogs callers",
            metrics.log_lines_served.clone(),
        );
        registry.register(
            "inventory_reports",
            "ReportInventory calls by result (accepted, duplicate, invalid, denied, unavailable)",
            metrics.inventory_reports.clone(),
        );
        metrics
    }

    /// Counts a `ReportInventory` call with `result`.
    pub fn inventory_report(&self, result: &str) {
        self.inventory_reports
            .get_or_create(&ReadResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// The `ReportInventory` calls counted with `result`.
    pub fn inventory_report_count(&self, result: &str) -> u64 {
        self.inventory_reports
            .get_or_create(&ReadResultLabel {
                result: result.to_string(),
            })
            .get()
    }

    /// Counts a `ReadLogs` call with `result`.
    pub fn log_read(&self, result: &str) {
        self.log_reads
            .get_or_create(&ReadResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// The `ReadLogs` calls counted with `result`.
    pub fn log_read_count(&self, result: &str) -> u64 {
        self.log_reads
            .get_or_create(&ReadResultLabel {
                result: result.to_string(),
            })
            .get()
    }

    /// Counts an event of `kind` stored in JetStream.
    pub fn event_published(&self, kind: Option<EventKind>) {
        self.by_kind[kind_index(kind)].inc();
    }

    /// Counts an error of operation `op`.
    pub fn error(&self, op: &str) {
        self.errors
            .get_or_create(&ErrorLabel { op: op.to_string() })
            .inc();
    }

    /// The error count of operation `op`.
    pub fn error_count(&self, op: &str) -> u64 {
        self.errors
            .get_or_create(&ErrorLabel { op: op.to_string() })
            .get()
    }
}
