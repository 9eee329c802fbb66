//! The metrics of a served index ([`crate::serve`]): its size and its feed's counters.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::feed::FeedMetrics;

/// The Hardware index feed's metrics; clones share the same values.
///
/// Named `hegel_indexed_hardware`, `hegel_invalid_hardware` and `hegel_watch_errors` wherever
/// they are registered (Hegel in its registry, netboot in its `netboot` sub-registry:
/// `netboot_hegel_indexed_hardware` ...), the names they had when Hegel alone had an index,
/// which dashboards and tests read.
#[derive(Clone, Debug, Default)]
pub struct IndexMetrics {
    /// Hardware in the index.
    pub indexed: Gauge,
    /// Hardware objects that could not be decoded (not served).
    pub invalid_hardware: Counter,
    /// Errors of the watches (retried with back-off).
    pub watch_errors: Counter,
}

impl IndexMetrics {
    /// New metrics registered in `registry` under the `hegel` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        m.register_in(registry.sub_registry_with_prefix("hegel"));
        m
    }

    /// Registers these metrics in `registry` as it is (for a caller that already holds the
    /// `hegel` sub-registry).
    pub fn register_in(&self, registry: &mut Registry) {
        registry.register(
            "indexed_hardware",
            "Hardware in the index",
            self.indexed.clone(),
        );
        registry.register(
            "invalid_hardware",
            "Hardware objects that could not be decoded (not served)",
            self.invalid_hardware.clone(),
        );
        registry.register(
            "watch_errors",
            "Errors of the Hardware, OSIE and agent secret copy watches (retried with back-off)",
            self.watch_errors.clone(),
        );
    }

    /// The counters the shared index feed moves (the same values as these fields).
    pub fn feed_metrics(&self) -> FeedMetrics {
        FeedMetrics {
            invalid_hardware: self.invalid_hardware.clone(),
            watch_errors: self.watch_errors.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_hegel_prefix_under_any_registry() {
        let mut registry = Registry::default();
        let m = IndexMetrics::register(registry.sub_registry_with_prefix("netboot"));
        m.indexed.set(2);
        m.feed_metrics().watch_errors.inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("netboot_hegel_indexed_hardware 2"), "{text}");
        assert!(
            text.contains("netboot_hegel_watch_errors_total 1"),
            "{text}"
        );
        assert!(
            text.contains("netboot_hegel_invalid_hardware_total 0"),
            "{text}"
        );
    }
}
