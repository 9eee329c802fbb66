//! Prometheus metrics of the BMC controller (prefix `tink_bmc`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a BMC operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// `power_state`, `set_power`, `boot_once`, `insert_media`, `eject_media`.
    pub op: &'static str,
    /// For `set_power`: `on`, `off`, `soft`, `cycle`, `reset`; empty otherwise.
    pub action: &'static str,
    /// `ok` or `error`.
    pub result: &'static str,
}

/// Labels of a reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `machine`, `job` or `task`.
    pub kind: &'static str,
    /// `ok` or `error`.
    pub result: &'static str,
}

/// Labels of the Machines gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PowerLabels {
    /// `on`, `off`, `unknown`.
    pub power_state: &'static str,
}

fn op_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The controller's metrics; clones share the same values.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// BMC operations by operation and result.
    pub ops: Family<OpLabels, Counter>,
    /// Their durations (seconds), by operation and result.
    pub op_seconds: Family<OpLabels, Histogram, fn() -> Histogram>,
    /// Reconciles by kind and result.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Machines by last observed power state.
    pub machines: Family<PowerLabels, Gauge>,
    /// Machines whose BMC did not answer the last call.
    pub unreachable: Gauge,
    /// BMC calls in flight.
    pub calls_in_flight: Gauge,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// Events dropped because the queue was full.
    pub events_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            ops: Family::default(),
            op_seconds: Family::new_with_constructor(op_seconds),
            reconciles: Family::default(),
            machines: Family::default(),
            unreachable: Gauge::default(),
            calls_in_flight: Gauge::default(),
            leader: Gauge::default(),
            events_dropped: Counter::default(),
        }
    }
}

impl Metrics {
    /// New metrics registered in `registry` under the `tink_bmc` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("tink_bmc");
        r.register(
            "operations",
            "BMC operations by operation and result",
            m.ops.clone(),
        );
        r.register(
            "operation_seconds",
            "Duration of BMC operations (retries included) by operation and result",
            m.op_seconds.clone(),
        );
        r.register(
            "reconciles",
            "Reconciles by kind (machine, job, task) and result",
            m.reconciles.clone(),
        );
        r.register(
            "machines",
            "Machines by last observed power state",
            m.machines.clone(),
        );
        r.register(
            "unreachable_machines",
            "Machines whose BMC did not answer the last call",
            m.unreachable.clone(),
        );
        r.register(
            "calls_in_flight",
            "BMC calls in flight",
            m.calls_in_flight.clone(),
        );
        r.register("leader", "1 while this replica leads", m.leader.clone());
        r.register(
            "events_dropped",
            "Kubernetes Events dropped because the publish queue was full",
            m.events_dropped.clone(),
        );
        m
    }

    pub(crate) fn op(&self, op: &'static str, action: &'static str, ok: bool, seconds: f64) {
        let l = OpLabels {
            op,
            action,
            result: if ok { "ok" } else { "error" },
        };
        self.ops.get_or_create(&l).inc();
        self.op_seconds.get_or_create(&l).observe(seconds);
    }

    pub(crate) fn reconciled(&self, kind: &'static str, ok: bool) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind,
                result: if ok { "ok" } else { "error" },
            })
            .inc();
    }

    /// Reconciles of `kind` with `result` (`ok`, `error`) so far.
    pub fn reconciles_of(&self, kind: &'static str, result: &'static str) -> u64 {
        self.reconciles
            .get_or_create(&ReconcileLabels { kind, result })
            .get()
    }

    /// Operations `op` (with `action`, for `set_power`) with `result` (`ok`, `error`) so far.
    pub fn ops_of(&self, op: &'static str, action: &'static str, result: &'static str) -> u64 {
        self.ops
            .get_or_create(&OpLabels { op, action, result })
            .get()
    }
}
