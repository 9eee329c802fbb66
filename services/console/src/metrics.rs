//! Prometheus metrics of the console (prefix `console`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The page, from a fixed set (`machines`, `workflow`, `cancel`, ...), never the raw path.
    pub page: &'static str,
    /// The HTTP status code.
    pub status: u16,
}

/// Labels of a refused live stream.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `user` (the user's own cap, --sse-max-clients-per-user) or `total` (--sse-max-clients).
    pub cap: &'static str,
}

/// The console's metrics; clones share the same values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Requests by page and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Open live-update streams.
    pub sse_clients: Gauge,
    /// Streams that fell behind and were told to resync.
    pub sse_resyncs: Counter,
    /// Streams refused (429) by a cap, by cap.
    pub sse_refused: Family<RefusedLabels, Counter>,
    /// Streams ended because the user's access was withdrawn (the periodic recheck).
    pub sse_revoked: Counter,
    /// Errors of the watches (retried with back-off).
    pub watch_errors: Counter,
}

impl Metrics {
    /// New metrics registered in `registry` under the `console` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("console");
        r.register(
            "requests",
            "HTTP requests by page and status",
            m.requests.clone(),
        );
        r.register(
            "sse_clients",
            "Open live-update (server-sent events) streams",
            m.sse_clients.clone(),
        );
        r.register(
            "sse_resyncs",
            "Live-update streams that fell behind the buffer and were told to reload",
            m.sse_resyncs.clone(),
        );
        r.register(
            "sse_refused",
            "Live-update streams refused with 429 by a cap (cap: user or total)",
            m.sse_refused.clone(),
        );
        r.register(
            "sse_revoked",
            "Live-update streams ended because the user's access was withdrawn",
            m.sse_revoked.clone(),
        );
        r.register(
            "watch_errors",
            "Errors of the Hardware, Workflow, Template and Event watches (retried with back-off)",
            m.watch_errors.clone(),
        );
        m
    }

    pub(crate) fn request(&self, page: &'static str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels { page, status })
            .inc();
    }

    /// Live streams refused by `cap` (`user` or `total`) so far.
    pub fn sse_refused_of(&self, cap: &'static str) -> u64 {
        self.sse_refused.get_or_create(&RefusedLabels { cap }).get()
    }

    /// Requests to `page` answered with `status` so far.
    pub fn requests_of(&self, page: &'static str, status: u16) -> u64 {
        self.requests
            .get_or_create(&RequestLabels { page, status })
            .get()
    }
}
