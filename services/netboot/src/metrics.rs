//! Prometheus metrics of the netboot service (prefix `netboot`).
//!
//! The Hardware index's own metrics are the shared [`IndexMetrics`], registered by netboot's
//! main in its `netboot` sub-registry: `netboot_hegel_indexed_hardware`,
//! `netboot_hegel_invalid_hardware` and `netboot_hegel_watch_errors`, the names they had when
//! netboot borrowed Hegel's index, which dashboards and the netns test read.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub use tink_hardware_index::IndexMetrics;

/// A DHCP message type (`discover`, `offer`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    /// The message type.
    pub r#type: &'static str,
}

/// Why a DHCP packet got no answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The reason (`unknown_mac`, `malformed`, ...).
    pub reason: &'static str,
}

/// The end of a TFTP transfer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok`, `not_found`, `refused`, `timeout`, `error`.
    pub result: &'static str,
}

/// An HTTP request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// `GET`, `HEAD` or `other`.
    pub method: &'static str,
    /// The status code.
    pub status: u16,
}

/// The service's metrics; clones share the same values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// DHCP packets received, by message type (`invalid` when it could not be read).
    pub dhcp_received: Family<TypeLabels, Counter>,
    /// DHCP replies sent, by type.
    pub dhcp_replies: Family<TypeLabels, Counter>,
    /// DHCP packets not answered, by reason.
    pub dhcp_ignored: Family<ReasonLabels, Counter>,
    /// DHCP replies that could not be sent.
    pub dhcp_send_errors: Counter,
    /// TFTP transfers by result.
    pub tftp_transfers: Family<ResultLabels, Counter>,
    /// Bytes sent by TFTP.
    pub tftp_bytes: Counter,
    /// HTTP requests by method and status.
    pub http_requests: Family<HttpLabels, Counter>,
    /// HTTP GET bodies by where they came from: `hit` (the in-memory copy), `loaded` (read
    /// into memory by this request), `disk` (streamed from the file).
    pub http_cache: Family<ResultLabels, Counter>,
    /// ISO route requests (`/iso/<mac>/<name>.iso`) by method and status.
    pub iso_requests: Family<HttpLabels, Counter>,
    /// Bytes of ISO sent.
    pub iso_bytes: Counter,
    /// Syslog datagrams by what became of them (`accepted`, `unknown_source`, `rate_limited`,
    /// ...: see the syslog module).
    pub syslog_datagrams: Family<ResultLabels, Counter>,
    /// Accepted syslog lines JetStream did not store.
    pub syslog_publish_errors: Counter,
    /// OSIE release fetches (`SHA256SUMS` and files from `--osie-url`) by result: `ok`,
    /// `mismatch` (the SHA-256 of what arrived is not the listed one), `error`.
    pub osie_fetches: Family<ResultLabels, Counter>,
    /// Bytes of OSIE release files fetched.
    pub osie_fetched_bytes: Counter,
    /// OSIE release files refused, by reason: `mismatch` (a file on disk), `upstream_mismatch`
    /// (a fetched file), `not_listed`, `bad_sums` (an unreadable `SHA256SUMS`).
    pub osie_verify_failures: Family<ResultLabels, Counter>,
}

impl Metrics {
    /// New metrics registered in `registry` under the `netboot` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("netboot");
        r.register(
            "dhcp_packets_received",
            "DHCP packets received, by message type",
            m.dhcp_received.clone(),
        );
        r.register(
            "dhcp_replies",
            "DHCP replies sent, by message type",
            m.dhcp_replies.clone(),
        );
        r.register(
            "dhcp_packets_ignored",
            "DHCP packets not answered, by reason",
            m.dhcp_ignored.clone(),
        );
        r.register(
            "dhcp_send_errors",
            "DHCP replies that could not be sent",
            m.dhcp_send_errors.clone(),
        );
        r.register(
            "tftp_transfers",
            "TFTP read requests by result",
            m.tftp_transfers.clone(),
        );
        r.register("tftp_bytes", "Bytes sent by TFTP", m.tftp_bytes.clone());
        r.register(
            "http_requests",
            "HTTP file requests by method and status",
            m.http_requests.clone(),
        );
        r.register(
            "http_cache_responses",
            "HTTP GET bodies by where they came from (hit, loaded, disk)",
            m.http_cache.clone(),
        );
        r.register(
            "iso_requests",
            "ISO route requests (/iso/<mac>/<name>.iso) by method and status",
            m.iso_requests.clone(),
        );
        r.register("iso_bytes", "Bytes of ISO sent", m.iso_bytes.clone());
        r.register(
            "syslog_datagrams",
            "Syslog datagrams by result (accepted, unknown_source, conflicting_source, \
             rate_limited, malformed, queue_full, not_ready)",
            m.syslog_datagrams.clone(),
        );
        r.register(
            "syslog_publish_errors",
            "Accepted syslog lines NATS JetStream did not store",
            m.syslog_publish_errors.clone(),
        );
        r.register(
            "osie_fetches",
            "OSIE release fetches from --osie-url by result (ok, mismatch, error)",
            m.osie_fetches.clone(),
        );
        r.register(
            "osie_fetched_bytes",
            "Bytes of OSIE release files fetched",
            m.osie_fetched_bytes.clone(),
        );
        r.register(
            "osie_verify_failures",
            "OSIE release files refused by reason (mismatch, upstream_mismatch, not_listed, \
             bad_sums)",
            m.osie_verify_failures.clone(),
        );
        m
    }

    /// Counts an OSIE fetch by result.
    pub fn osie_fetch(&self, result: &'static str) {
        self.osie_fetches
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// OSIE fetches so far with `result`.
    pub fn osie_fetches_of(&self, result: &'static str) -> u64 {
        self.osie_fetches
            .get_or_create(&ResultLabels { result })
            .get()
    }

    /// Counts an OSIE file refused.
    pub fn osie_verify_failure(&self, reason: &'static str) {
        self.osie_verify_failures
            .get_or_create(&ResultLabels { result: reason })
            .inc();
    }

    /// OSIE files refused so far for `reason`.
    pub fn osie_verify_failures_of(&self, reason: &'static str) -> u64 {
        self.osie_verify_failures
            .get_or_create(&ResultLabels { result: reason })
            .get()
    }

    /// Syslog datagrams counted with `result` so far.
    pub fn syslog_count(&self, result: &'static str) -> u64 {
        self.syslog_datagrams
            .get_or_create(&ResultLabels { result })
            .get()
    }

    /// Counts a syslog datagram by what became of it.
    pub fn syslog(&self, result: &'static str) {
        self.syslog_datagrams
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts a received packet.
    pub fn received(&self, r#type: &'static str) {
        self.dhcp_received
            .get_or_create(&TypeLabels { r#type })
            .inc();
    }

    /// Counts a reply.
    pub fn replied(&self, r#type: &'static str) {
        self.dhcp_replies
            .get_or_create(&TypeLabels { r#type })
            .inc();
    }

    /// Counts an ignored packet.
    pub fn ignored(&self, reason: &'static str) {
        self.dhcp_ignored
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Ignored packets so far for `reason`.
    pub fn ignored_of(&self, reason: &'static str) -> u64 {
        self.dhcp_ignored
            .get_or_create(&ReasonLabels { reason })
            .get()
    }

    /// Replies so far of `type`.
    pub fn replies_of(&self, r#type: &'static str) -> u64 {
        self.dhcp_replies
            .get_or_create(&TypeLabels { r#type })
            .get()
    }

    /// Counts a TFTP transfer's end.
    pub fn tftp(&self, result: &'static str) {
        self.tftp_transfers
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts an HTTP GET body by where it came from (`hit`, `loaded`, `disk`).
    pub fn http_body_from(&self, from: &'static str) {
        self.http_cache
            .get_or_create(&ResultLabels { result: from })
            .inc();
    }

    /// HTTP GET bodies so far that came from `from`.
    pub fn http_bodies_from(&self, from: &'static str) -> u64 {
        self.http_cache
            .get_or_create(&ResultLabels { result: from })
            .get()
    }

    /// TFTP transfers so far with `result`.
    pub fn tftp_of(&self, result: &'static str) -> u64 {
        self.tftp_transfers
            .get_or_create(&ResultLabels { result })
            .get()
    }

    /// Counts an ISO route request.
    pub fn iso(&self, method: &'static str, status: u16) {
        self.iso_requests
            .get_or_create(&HttpLabels { method, status })
            .inc();
    }

    /// ISO route requests so far with `method` and `status`.
    pub fn iso_of(&self, method: &'static str, status: u16) -> u64 {
        self.iso_requests
            .get_or_create(&HttpLabels { method, status })
            .get()
    }

    /// HTTP file requests so far with `method` and `status`.
    pub fn http_of(&self, method: &'static str, status: u16) -> u64 {
        self.http_requests
            .get_or_create(&HttpLabels { method, status })
            .get()
    }

    /// Counts an HTTP request.
    pub fn http(&self, method: &'static str, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels { method, status })
            .inc();
    }
}
