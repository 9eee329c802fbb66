//! Prometheus metrics of the controller.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tink_api::v1alpha2::WorkflowState;

/// A label with one value.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    /// `result` of reconciles, `kind` of errors and writes, `state` of workflows, `outcome` of
    /// events.
    pub value: String,
}

impl Label {
    fn of(value: &str) -> Self {
        Self {
            value: value.to_string(),
        }
    }
}

/// The controller's metrics; clones share the same values.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Reconciles by `value` = `ok` / `error`.
    pub reconciles: Family<Label, Counter>,
    /// Errors by kind (`kube`, `conflict`, `publish`, `render`, `consumer`, `lease`, ...).
    pub errors: Family<Label, Counter>,
    /// Workflows seen by the leader, by state (refreshed every few seconds).
    pub workflows: Family<Label, Gauge>,
    /// Kubernetes API writes by kind (`status`, `finalizer`, `event`).
    pub api_writes: Family<Label, Counter>,
    /// Agent events by outcome (`applied`, `ignored`, `invalid`, `gone`).
    pub events: Family<Label, Counter>,
    /// From an event stored in JetStream to its status write, in seconds.
    pub event_to_status_seconds: Histogram,
    /// From a Workflow's creation to its StartWorkflow command stored in JetStream, in seconds.
    pub dispatch_seconds: Histogram,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// Workflows dispatched by the periodic resync although nothing woke them: each one is a
    /// lost wake-up the safety net caught.
    pub resync_dispatches: Counter,
    /// Verdicts published on an agent's behalf, by reason (`AgentRestarted`, `AgentLost`).
    pub verdicts: Family<Label, Counter>,
    /// Start commands by what a restart found (`republished`, `queued`, `received`).
    pub resumed_starts: Family<Label, Counter>,
    /// Agent inventories by outcome: `written` (Hardware status patched), `unchanged` (no
    /// write), `unknown_agent` (no Hardware names the agent id: dropped), `conflict` (several
    /// do: dropped), `gone` (the Hardware was deleted), `invalid` (dropped), `failed` (retried).
    pub inventories: Family<Label, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            workflows: Family::default(),
            api_writes: Family::default(),
            events: Family::default(),
            event_to_status_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            dispatch_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 20)),
            leader: Gauge::default(),
            resync_dispatches: Counter::default(),
            verdicts: Family::default(),
            resumed_starts: Family::default(),
            inventories: Family::default(),
        }
    }
}

impl Metrics {
    /// New metrics registered in `registry` under the `tink_controller` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("tink_controller");
        r.register(
            "reconciles",
            "Workflow reconciles by result",
            m.reconciles.clone(),
        );
        r.register("errors", "Errors by kind", m.errors.clone());
        r.register(
            "workflows",
            "Workflows by state (leader only)",
            m.workflows.clone(),
        );
        r.register(
            "api_writes",
            "Kubernetes API writes by kind",
            m.api_writes.clone(),
        );
        r.register("events", "Agent events by outcome", m.events.clone());
        r.register(
            "event_to_status_seconds",
            "Latency from an agent event stored in JetStream to the Workflow status write",
            m.event_to_status_seconds.clone(),
        );
        r.register(
            "dispatch_seconds",
            "Latency from Workflow creation to its StartWorkflow command stored in JetStream",
            m.dispatch_seconds.clone(),
        );
        r.register("leader", "1 while this replica leads", m.leader.clone());
        r.register(
            "resync_dispatches",
            "Workflows dispatched by the periodic resync (lost wake-ups caught)",
            m.resync_dispatches.clone(),
        );
        r.register(
            "verdicts",
            "Workflows failed on an agent's behalf, by reason",
            m.verdicts.clone(),
        );
        r.register(
            "resumed_starts",
            "Start commands of Scheduled workflows seen after a restart, by what the streams showed",
            m.resumed_starts.clone(),
        );
        r.register(
            "inventories",
            "Agent inventories by outcome (written, unchanged, unknown_agent, conflict, gone, invalid, failed)",
            m.inventories.clone(),
        );
        m
    }

    pub(crate) fn inventory(&self, outcome: &str) {
        self.inventories.get_or_create(&Label::of(outcome)).inc();
    }

    /// The inventories counted with `outcome` so far.
    pub fn inventory_count(&self, outcome: &str) -> u64 {
        self.inventories.get_or_create(&Label::of(outcome)).get()
    }

    pub(crate) fn verdict(&self, reason: &str) {
        self.verdicts.get_or_create(&Label::of(reason)).inc();
    }

    pub(crate) fn resumed_start(&self, found: &str) {
        self.resumed_starts.get_or_create(&Label::of(found)).inc();
    }

    pub(crate) fn error(&self, kind: &str) {
        self.errors.get_or_create(&Label::of(kind)).inc();
    }

    pub(crate) fn write(&self, kind: &str) {
        self.api_writes.get_or_create(&Label::of(kind)).inc();
    }

    pub(crate) fn event(&self, outcome: &str) {
        self.events.get_or_create(&Label::of(outcome)).inc();
    }

    pub(crate) fn reconciled(&self, ok: bool) {
        let v = if ok { "ok" } else { "error" };
        self.reconciles.get_or_create(&Label::of(v)).inc();
    }

    /// The number of writes of `kind` so far.
    pub fn writes(&self, kind: &str) -> u64 {
        self.api_writes.get_or_create(&Label::of(kind)).get()
    }

    pub(crate) fn set_states(&self, counts: &[(WorkflowState, i64)]) {
        for (state, n) in counts {
            self.workflows
                .get_or_create(&Label::of(state.as_str()))
                .set(*n);
        }
    }
}
