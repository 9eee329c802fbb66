//! The in-memory index the admission checks read: every Hardware's MACs and DHCP IPs (the
//! shared watched Hardware index, [`tink_hardware_index`], keyed by value, so a uniqueness
//! check is one hash lookup whatever the number of Hardware) and the names of Hardware and
//! Templates (so a Workflow's references are checked without a request to the API server). It
//! is fed by two kube-runtime watchers ([`feed`]), which relist after a broken watch and
//! replace the index content at the end of each list.
//!
//! Reservations close most of the gap between an admission and the watch event of the object
//! it admitted: an allowed create or update reserves its new MACs and IPs for a short time
//! (`reservation_ttl`), so a second object with the same MAC sent to the same replica a moment
//! later is refused too. Two replicas admitting two such objects within a watch round trip can
//! still both accept them (admission webhooks cannot lock the store); the controller and
//! netboot treat a MAC claimed twice as a conflict.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tink_hardware_index::{DecodeError, Entry, FeedMetrics, IpKey};
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

use crate::identities::identities;
use crate::metrics::Metrics;

pub use tink_hardware_index::FeedEnded;

/// What one Hardware claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Claims {
    macs: Vec<String>,
    ips: Vec<String>,
}

impl Claims {
    fn of(obj: &Value) -> Self {
        let ids = identities(obj);
        Self {
            macs: ids.macs.into_iter().map(|i| i.value).collect(),
            ips: ids.ips.into_iter().map(|i| i.value).collect(),
        }
    }
}

/// The webhook's entry in the shared index: a Hardware (`namespace/name`), its claims, and
/// whether it is approved (a discovered machine not approved yet gets no Workflow).
#[derive(Debug)]
struct Claimed {
    key: Arc<str>,
    claims: Claims,
    approved: bool,
}

impl Claimed {
    /// `obj` in either version; a discovery that does not read is not approved.
    fn of(key: Arc<str>, obj: &Value) -> Self {
        Self {
            key,
            claims: Claims::of(obj),
            approved: crate::approval::approved(obj).unwrap_or(false),
        }
    }
}

impl Entry for Claimed {
    fn key(&self) -> String {
        self.key.to_string()
    }

    fn claims(&self) -> tink_hardware_index::Claims {
        let c = &self.claims;
        tink_hardware_index::Claims {
            macs: c.macs.iter().cloned().zip(0..).collect(),
            ips: c.ips.iter().map(|ip| IpKey::parse(ip)).zip(0..).collect(),
            agent_ids: Vec::new(),
        }
    }

    /// Read untyped, from `spec` as v1alpha2 (what the API server stores): one malformed
    /// object cannot stop the watch, and whatever it claims still counts.
    fn decode(obj: DynamicObject) -> Result<Self, DecodeError> {
        let key = key_of(&obj).ok_or_else(|| {
            DecodeError::Invalid(tink_api::ParseError {
                path: "metadata.name".into(),
                message: "missing".into(),
            })
        })?;
        let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
        let value =
            serde_json::json!({"apiVersion": tink_api::v1alpha2::API_VERSION, "spec": spec});
        Ok(Self::of(key, &value))
    }
}

#[derive(Debug, Default)]
struct Templates {
    names: HashSet<Arc<str>>,
    synced: bool,
}

/// The index; share it in an `Arc`.
#[derive(Debug)]
pub struct Index {
    hardware: Arc<tink_hardware_index::Index<Claimed>>,
    templates: RwLock<Templates>,
}

impl Default for Index {
    fn default() -> Self {
        Self::new(tink_hardware_index::DEFAULT_RESERVATION_TTL)
    }
}

impl Index {
    /// An empty, unsynced index whose reservations last `reservation_ttl`.
    pub fn new(reservation_ttl: Duration) -> Self {
        Self {
            hardware: Arc::new(
                tink_hardware_index::Index::default().with_reservation_ttl(reservation_ttl),
            ),
            templates: RwLock::default(),
        }
    }

    fn templates(&self) -> std::sync::RwLockReadGuard<'_, Templates> {
        self.templates.read().unwrap_or_else(|p| p.into_inner())
    }

    fn templates_mut(&self) -> std::sync::RwLockWriteGuard<'_, Templates> {
        self.templates.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces a Hardware (`namespace/name`) from its object (either version).
    pub fn upsert_hardware(&self, key: &str, obj: &Value) {
        self.hardware.insert(Claimed::of(Arc::from(key), obj));
    }

    /// Removes a Hardware.
    pub fn remove_hardware(&self, key: &str) {
        self.hardware.remove(key);
    }

    /// Replaces every Hardware (the end of a list) and marks the Hardware synced; reservations
    /// and Templates stay.
    #[cfg(test)]
    fn replace_hardware(&self, all: Vec<(Arc<str>, Claims)>) {
        self.hardware.replace(
            all.into_iter()
                .map(|(key, claims)| Claimed {
                    key,
                    claims,
                    approved: true,
                })
                .collect(),
        );
    }

    /// Marks the Hardware synced without a list (tests and benchmarks that fill the index
    /// themselves).
    pub fn mark_synced(&self) {
        self.hardware.mark_synced();
        self.templates_mut().synced = true;
    }

    /// Adds a Template name.
    pub fn add_template(&self, key: &str) {
        self.templates_mut().names.insert(Arc::from(key));
    }

    fn remove_template(&self, key: &str) {
        self.templates_mut().names.remove(key);
    }

    fn replace_templates(&self, all: HashSet<Arc<str>>) {
        let mut t = self.templates_mut();
        t.names = all;
        t.synced = true;
    }

    /// Whether both watches have listed once.
    pub fn synced(&self) -> bool {
        self.hardware.hardware_synced() && self.templates().synced
    }

    /// Whether the Hardware watch has listed once.
    pub fn hardware_synced(&self) -> bool {
        self.hardware.hardware_synced()
    }

    /// Other Hardware (`namespace/name`, sorted) claiming `mac` (lower-case), reservations
    /// included.
    pub fn mac_owners(&self, mac: &str, except: &str) -> Vec<String> {
        self.hardware.mac_owners(mac, except)
    }

    /// Other Hardware claiming the DHCP IP `ip`, reservations included.
    pub fn ip_owners(&self, ip: &str, except: &str) -> Vec<String> {
        self.hardware.ip_owners(&IpKey::parse(ip), except)
    }

    /// Whether the Hardware `namespace/name` exists.
    pub fn has_hardware(&self, key: &str) -> bool {
        self.hardware.contains(key)
    }

    /// Whether the Hardware `namespace/name` is approved (see [`crate::approval`]); `None` when
    /// it is not indexed.
    pub fn hardware_approved(&self, key: &str) -> Option<bool> {
        self.hardware.get(key).map(|h| h.approved)
    }

    /// Whether the Template `namespace/name` exists.
    pub fn has_template(&self, key: &str) -> bool {
        self.templates().names.contains(key)
    }

    /// The number of Hardware and Templates.
    pub fn len(&self) -> (usize, usize) {
        (self.hardware.len(), self.templates().names.len())
    }

    /// Whether no Hardware is indexed.
    pub fn is_empty(&self) -> bool {
        self.hardware.is_empty()
    }

    /// Reserves MACs and IPs for `key` until its watch event arrives or the TTL passes.
    pub fn reserve(&self, key: &str, macs: &[String], ips: &[String]) {
        let ips: Vec<IpKey> = ips.iter().map(|ip| IpKey::parse(ip)).collect();
        self.hardware.reserve(key, macs, &ips);
    }
}

fn key_of(obj: &DynamicObject) -> Option<Arc<str>> {
    let name = obj.metadata.name.as_deref()?;
    let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    Some(Arc::from(format!("{ns}/{name}")))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(tink_api::GROUP, tink_api::v1alpha2::VERSION, kind),
        plural,
    )
}

/// Watches Hardware (the shared index's feed) and Templates (v1alpha2, all namespaces) into
/// `index` until `shutdown`, turning `health` ready once both have listed. Objects are read
/// untyped, so one malformed object cannot stop the watch. Errors are retried with back-off;
/// the stream ending is an error (a dead feed must end the process, not serve a stale index
/// forever).
pub async fn feed(
    client: kube::Client,
    index: Arc<Index>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let report = {
        let (index, metrics) = (index.clone(), metrics.clone());
        move || {
            let (hw, tpl) = index.len();
            metrics.set_indexed("Hardware", hw);
            metrics.set_indexed("Template", tpl);
            if index.synced() {
                health.set_ready(true);
            }
        }
    };
    let counters = FeedMetrics {
        // Never moves: the claims of any object are read, valid or not.
        invalid_hardware: Default::default(),
        watch_errors: metrics.watch_errors.clone(),
    };
    let hardware = {
        let report = report.clone();
        tink_hardware_index::feed(
            client.clone(),
            None,
            index.hardware.clone(),
            None,
            counters,
            move |_, _| report(),
            shutdown.clone(),
        )
    };
    tokio::select! {
        r = hardware => r,
        r = templates(client, &index, &metrics, report, shutdown) => r,
    }
}

/// The Template names' watch, until `shutdown`.
async fn templates(
    client: kube::Client,
    index: &Index,
    metrics: &Metrics,
    report: impl Fn(),
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let tpl_api: Api<DynamicObject> = Api::all_with(client, &resource("Template", "templates"));
    let mut templates = watcher::watcher(tpl_api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut tpl_init: HashSet<Arc<str>> = HashSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = templates.next() => match event {
                None => return Err(FeedEnded("Template")),
                Some(Err(error)) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(%error, "Template watch error; retrying");
                }
                Some(Ok(Event::Init)) => tpl_init.clear(),
                Some(Ok(Event::InitApply(obj))) => tpl_init.extend(key_of(&obj)),
                Some(Ok(Event::InitDone)) => index.replace_templates(std::mem::take(&mut tpl_init)),
                Some(Ok(Event::Apply(obj))) => {
                    if let Some(key) = key_of(&obj) {
                        index.add_template(&key);
                    }
                }
                Some(Ok(Event::Delete(obj))) => {
                    if let Some(key) = key_of(&obj) {
                        index.remove_template(&key);
                    }
                }
            },
        }
        report();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hw(macs_ips: &[(&str, Option<&str>)]) -> Value {
        let mut ifaces = serde_json::Map::new();
        for (mac, ip) in macs_ips {
            let dhcp = match ip {
                Some(ip) => json!({"ip": ip}),
                None => json!({}),
            };
            ifaces.insert(mac.to_string(), json!({"dhcp": dhcp}));
        }
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware", "spec": {"networkInterfaces": ifaces}})
    }

    #[test]
    fn lookups_exclude_the_object_itself_and_follow_updates() {
        let index = Index::default();
        index.upsert_hardware("a/one", &hw(&[("00:00:00:00:00:01", Some("10.0.0.1"))]));
        index.upsert_hardware("b/two", &hw(&[("00:00:00:00:00:02", Some("10.0.0.2"))]));
        assert_eq!(index.mac_owners("00:00:00:00:00:01", "x/y"), vec!["a/one"]);
        assert!(index.mac_owners("00:00:00:00:00:01", "a/one").is_empty());
        assert_eq!(index.ip_owners("10.0.0.2", "a/one"), vec!["b/two"]);
        // An update moves the claims.
        index.upsert_hardware("a/one", &hw(&[("00:00:00:00:00:03", None)]));
        assert!(index.mac_owners("00:00:00:00:00:01", "x/y").is_empty());
        assert!(index.ip_owners("10.0.0.1", "x/y").is_empty());
        assert_eq!(index.mac_owners("00:00:00:00:00:03", "x/y"), vec!["a/one"]);
        index.remove_hardware("a/one");
        assert!(index.mac_owners("00:00:00:00:00:03", "x/y").is_empty());
        assert!(index.has_hardware("b/two") && !index.has_hardware("a/one"));
    }

    #[test]
    fn approval_follows_the_hardware() {
        let index = Index::default();
        let mut waiting = hw(&[("00:00:00:00:00:01", None)]);
        waiting["spec"]["discovery"] = json!({"approved": false});
        index.upsert_hardware("a/d", &waiting);
        assert_eq!(index.hardware_approved("a/d"), Some(false));
        waiting["spec"]["discovery"]["approved"] = json!(true);
        index.upsert_hardware("a/d", &waiting);
        assert_eq!(index.hardware_approved("a/d"), Some(true));
        index.upsert_hardware("a/plain", &hw(&[]));
        assert_eq!(index.hardware_approved("a/plain"), Some(true));
        assert_eq!(index.hardware_approved("a/none"), None);
        // As the watch decodes it.
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "w", "namespace": "a"},
            "spec": {"discovery": {"address": "10.0.0.9"}}}))
        .expect("object");
        let decoded = Claimed::decode(obj.clone()).expect("decode");
        assert!(!decoded.approved);
        obj.data["spec"]["discovery"]["approved"] = json!(true);
        assert!(Claimed::decode(obj).expect("decode").approved);
    }

    #[test]
    fn duplicates_already_stored_are_all_reported() {
        let index = Index::default();
        index.upsert_hardware("a/one", &hw(&[("00:00:00:00:00:01", None)]));
        index.upsert_hardware("a/two", &hw(&[("00:00:00:00:00:01", None)]));
        assert_eq!(
            index.mac_owners("00:00:00:00:00:01", "c/new"),
            vec!["a/one", "a/two"]
        );
        index.remove_hardware("a/one");
        assert_eq!(
            index.mac_owners("00:00:00:00:00:01", "c/new"),
            vec!["a/two"]
        );
    }

    #[test]
    fn reservations_expire_and_give_way_to_the_watch_event() {
        let index = Index::new(Duration::from_millis(50));
        index.reserve("a/one", &["00:00:00:00:00:01".into()], &["10.0.0.1".into()]);
        assert_eq!(index.mac_owners("00:00:00:00:00:01", "b/x"), vec!["a/one"]);
        assert_eq!(index.ip_owners("10.0.0.1", "b/x"), vec!["a/one"]);
        assert!(index.mac_owners("00:00:00:00:00:01", "a/one").is_empty());
        // The watch event of a/one without that MAC clears the reservation at once.
        index.upsert_hardware("a/one", &hw(&[("00:00:00:00:00:09", None)]));
        assert!(index.mac_owners("00:00:00:00:00:01", "b/x").is_empty());
        index.reserve("a/two", &["00:00:00:00:00:02".into()], &[]);
        std::thread::sleep(Duration::from_millis(80));
        assert!(index.mac_owners("00:00:00:00:00:02", "b/x").is_empty());
    }

    #[test]
    fn a_relist_replaces_everything_but_keeps_reservations() {
        let index = Index::default();
        index.upsert_hardware("a/gone", &hw(&[("00:00:00:00:00:01", None)]));
        index.reserve("a/new", &["00:00:00:00:00:05".into()], &[]);
        assert!(!index.hardware_synced());
        index.replace_hardware(vec![(
            Arc::from("a/kept"),
            Claims::of(&hw(&[("00:00:00:00:00:02", None)])),
        )]);
        assert!(index.hardware_synced());
        assert!(!index.synced(), "templates not listed yet");
        assert!(index.mac_owners("00:00:00:00:00:01", "x/y").is_empty());
        assert_eq!(index.mac_owners("00:00:00:00:00:02", "x/y"), vec!["a/kept"]);
        assert_eq!(index.mac_owners("00:00:00:00:00:05", "x/y"), vec!["a/new"]);
        index.replace_templates(HashSet::from([Arc::from("a/tpl")]));
        assert!(index.synced() && index.has_template("a/tpl"));
    }
}
