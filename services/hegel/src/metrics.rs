//! Prometheus metrics of Hegel (prefix `hegel`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tink_hardware_index::IndexMetrics;

/// Labels of a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The endpoint, from a fixed set (`meta-data/instance-id`, `user-data`, `ipxe`, `other`,
    /// ...), never the raw path.
    pub endpoint: &'static str,
    /// The HTTP status code.
    pub status: u16,
}

/// Labels of a lookup miss.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MissLabels {
    /// `ip` or `mac`.
    pub by: &'static str,
    /// `unknown` (no Hardware) or `conflict` (several Hardware claim it).
    pub reason: &'static str,
}

/// Hegel's metrics; clones share the same values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Requests by endpoint and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Lookups that found no single Hardware.
    pub lookup_misses: Family<MissLabels, Counter>,
    /// Requests refused by the per-IP rate limit.
    pub rate_limited: Counter,
    /// The Hardware index's: `hegel_indexed_hardware`, `hegel_invalid_hardware` and
    /// `hegel_watch_errors` (also the agent secret copies' watch errors).
    pub index: IndexMetrics,
}

impl Metrics {
    /// New metrics registered in `registry` under the `hegel` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("hegel");
        r.register(
            "requests",
            "HTTP requests by endpoint and status",
            m.requests.clone(),
        );
        r.register(
            "lookup_misses",
            "Lookups by IP or MAC that found no single Hardware",
            m.lookup_misses.clone(),
        );
        r.register(
            "rate_limited",
            "Requests refused by the per-IP rate limit",
            m.rate_limited.clone(),
        );
        m.index.register_in(r);
        m
    }

    pub(crate) fn request(&self, endpoint: &'static str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels { endpoint, status })
            .inc();
    }

    pub(crate) fn miss(&self, by: &'static str, reason: &'static str) {
        self.lookup_misses
            .get_or_create(&MissLabels { by, reason })
            .inc();
    }

    /// Requests to `endpoint` answered with `status` so far.
    pub fn requests_of(&self, endpoint: &'static str, status: u16) -> u64 {
        self.requests
            .get_or_create(&RequestLabels { endpoint, status })
            .get()
    }

    /// Lookup misses so far.
    pub fn misses_of(&self, by: &'static str, reason: &'static str) -> u64 {
        self.lookup_misses
            .get_or_create(&MissLabels { by, reason })
            .get()
    }
}
