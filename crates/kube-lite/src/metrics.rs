//! Request counters by verb, resource and status code, served as Prometheus text at `/metrics`
//! (`kube_lite_requests_total`, the labels kube-apiserver's `apiserver_request_total` uses:
//! `verb`, `group`, `resource`, `subresource`, `code`), so benchmarks can count API writes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use http::Method;

/// One counter's labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// `create`, `get`, `list`, `watch`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: &'static str,
    /// The API group (empty for the core group).
    pub group: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource (`status`), empty for the main resource.
    pub subresource: String,
    /// The HTTP status code of the answer.
    pub code: u16,
}

impl RequestKey {
    /// Whether the verb changes state.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// The verb kube-apiserver reports for a request on a resource path.
pub(crate) fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

/// The counters.
#[derive(Debug, Default)]
pub(crate) struct Requests(Mutex<BTreeMap<RequestKey, u64>>);

impl Requests {
    pub(crate) fn add(&self, key: RequestKey) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(key).or_default() += 1;
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<RequestKey, u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::from(
            "# HELP kube_lite_requests_total API requests answered, by verb, resource and code.\n\
             # TYPE kube_lite_requests_total counter\n",
        );
        for (k, n) in self.snapshot() {
            let _ = writeln!(
                out,
                "kube_lite_requests_total{{verb=\"{}\",group=\"{}\",resource=\"{}\",subresource=\"{}\",code=\"{}\"}} {n}",
                k.verb, k.group, k.resource, k.subresource, k.code
            );
        }
        out
    }
}
