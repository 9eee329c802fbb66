//! Prometheus metrics of the webhook (prefix `tink_webhook`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of an admission.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `Hardware`, `Template`, `Workflow`, `OSIE`, `Machine`, `Job`, `Task`, or `unknown`
    /// (malformed or another kind).
    pub kind: String,
    /// `allowed`, `denied` or `error` (malformed review, index not synced).
    pub verdict: String,
}

/// A label with one value.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    /// `result` of conversions (`success`, `failure`, `malformed`), TLS reloads (`ok`, `error`),
    /// `kind` of indexed objects.
    pub value: String,
}

fn latency() -> Histogram {
    // 50 µs .. ~1.6 s
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The webhook's metrics; clones share the same values.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Admission reviews by kind and verdict.
    pub admissions: Family<AdmissionLabels, Counter>,
    /// Admission handling time by kind, in seconds (from the body read to the answer).
    pub admission_seconds: HistogramFamily<Label>,
    /// Conversion reviews by result.
    pub conversions: Family<Label, Counter>,
    /// Objects in conversion reviews.
    pub conversion_objects: Counter,
    /// Conversion review handling time, in seconds.
    pub conversion_seconds: Histogram,
    /// Objects in the in-memory index, by kind (`Hardware`, `Template`).
    pub indexed: Family<Label, Gauge>,
    /// Serving certificate reloads by result.
    pub tls_reloads: Family<Label, Counter>,
    /// Watch errors of the index (the watch retries with back-off).
    pub watch_errors: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            admissions: Family::default(),
            admission_seconds: Family::new_with_constructor(latency),
            conversions: Family::default(),
            conversion_objects: Counter::default(),
            conversion_seconds: latency(),
            indexed: Family::default(),
            tls_reloads: Family::default(),
            watch_errors: Counter::default(),
        }
    }
}

impl Metrics {
    /// New metrics registered in `registry` under the `tink_webhook` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("tink_webhook");
        r.register(
            "admissions",
            "Admission reviews by kind and verdict",
            m.admissions.clone(),
        );
        r.register(
            "admission_seconds",
            "Admission review handling time by kind",
            m.admission_seconds.clone(),
        );
        r.register(
            "conversions",
            "Conversion reviews by result",
            m.conversions.clone(),
        );
        r.register(
            "conversion_objects",
            "Objects in conversion reviews",
            m.conversion_objects.clone(),
        );
        r.register(
            "conversion_seconds",
            "Conversion review handling time",
            m.conversion_seconds.clone(),
        );
        r.register(
            "indexed",
            "Objects in the in-memory index by kind",
            m.indexed.clone(),
        );
        r.register(
            "tls_reloads",
            "Serving certificate reloads by result",
            m.tls_reloads.clone(),
        );
        r.register(
            "watch_errors",
            "Errors of the index watches (retried with back-off)",
            m.watch_errors.clone(),
        );
        m
    }

    pub(crate) fn admission(&self, kind: &str, verdict: &str, seconds: f64) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                kind: kind.to_string(),
                verdict: verdict.to_string(),
            })
            .inc();
        self.admission_seconds
            .get_or_create(&Label::of(kind))
            .observe(seconds);
    }

    pub(crate) fn conversion(&self, result: &str, objects: usize, seconds: f64) {
        self.conversions.get_or_create(&Label::of(result)).inc();
        self.conversion_objects.inc_by(objects as u64);
        self.conversion_seconds.observe(seconds);
    }

    pub(crate) fn tls_reload(&self, result: &str) {
        self.tls_reloads.get_or_create(&Label::of(result)).inc();
    }

    pub(crate) fn set_indexed(&self, kind: &str, n: usize) {
        self.indexed
            .get_or_create(&Label::of(kind))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Admissions of `kind` with `verdict` so far.
    pub fn admissions_of(&self, kind: &str, verdict: &str) -> u64 {
        self.admissions
            .get_or_create(&AdmissionLabels {
                kind: kind.to_string(),
                verdict: verdict.to_string(),
            })
            .get()
    }

    /// TLS reloads with `result` so far.
    pub fn tls_reloads_of(&self, result: &str) -> u64 {
        self.tls_reloads.get_or_create(&Label::of(result)).get()
    }
}

impl Label {
    fn of(value: &str) -> Self {
        Self {
            value: value.to_string(),
        }
    }
}
