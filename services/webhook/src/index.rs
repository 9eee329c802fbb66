//! The in-memory index the admission checks read: every Hardware's MACs and DHCP IPs (keyed by
//! value, so a uniqueness check is one hash lookup whatever the number of Hardware) and the
//! names of Hardware and Templates (so a Workflow's references are checked without a request to
//! the API server). It is fed by two kube-runtime watchers ([`feed`]), which relist after a
//! broken watch and replace the index content at the end of each list.
//!
//! Reservations close most of the gap between an admission and the watch event of the object
//! it admitted: an allowed create or update reserves its new MACs and IPs for a short time
//! (`reservation_ttl`), so a second object with the same MAC sent to the same replica a moment
//! later is refused too. Two replicas admitting two such objects within a watch round trip can
//! still both accept them (admission webhooks cannot lock the store); the controller and
//! netboot treat a MAC claimed twice as a conflict.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::validate::hardware::identities;

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

#[derive(Debug, Default)]
struct Inner {
    hardware: HashMap<Arc<str>, Claims>,
    macs: HashMap<String, Vec<Arc<str>>>,
    ips: HashMap<String, Vec<Arc<str>>>,
    reserved_macs: HashMap<String, (Arc<str>, Instant)>,
    reserved_ips: HashMap<String, (Arc<str>, Instant)>,
    templates: HashSet<Arc<str>>,
    hardware_synced: bool,
    templates_synced: bool,
    /// When expired reservations were last dropped.
    last_sweep: Option<Instant>,
}

fn add(map: &mut HashMap<String, Vec<Arc<str>>>, value: &str, owner: &Arc<str>) {
    let owners = map.entry(value.to_string()).or_default();
    if !owners.contains(owner) {
        owners.push(owner.clone());
    }
}

fn drop_owner(map: &mut HashMap<String, Vec<Arc<str>>>, value: &str, owner: &str) {
    if let Some(owners) = map.get_mut(value) {
        owners.retain(|o| &**o != owner);
        if owners.is_empty() {
            map.remove(value);
        }
    }
}

fn owners_of(
    map: &HashMap<String, Vec<Arc<str>>>,
    reserved: &HashMap<String, (Arc<str>, Instant)>,
    value: &str,
    except: &str,
    now: Instant,
) -> Vec<String> {
    let mut out: Vec<String> = map
        .get(value)
        .into_iter()
        .flatten()
        .filter(|o| &***o != except)
        .map(|o| o.to_string())
        .collect();
    if let Some((owner, until)) = reserved.get(value)
        && &**owner != except
        && *until > now
        && !out.iter().any(|o| o == &**owner)
    {
        out.push(owner.to_string());
    }
    out.sort();
    out
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some(old) = self.hardware.remove(key) {
            for m in &old.macs {
                drop_owner(&mut self.macs, m, key);
            }
            for ip in &old.ips {
                drop_owner(&mut self.ips, ip, key);
            }
        }
    }

    fn upsert(&mut self, key: Arc<str>, claims: Claims) {
        self.remove(&key);
        // The watch event of an admitted object replaces its reservations.
        self.reserved_macs.retain(|_, (o, _)| *o != key);
        self.reserved_ips.retain(|_, (o, _)| *o != key);
        for m in &claims.macs {
            add(&mut self.macs, m, &key);
        }
        for ip in &claims.ips {
            add(&mut self.ips, ip, &key);
        }
        self.hardware.insert(key, claims);
    }
}

/// The index; share it in an `Arc`.
#[derive(Debug)]
pub struct Index {
    inner: RwLock<Inner>,
    reservation_ttl: Duration,
}

impl Default for Index {
    fn default() -> Self {
        Self::new(Duration::from_secs(30))
    }
}

impl Index {
    /// An empty, unsynced index whose reservations last `reservation_ttl`.
    pub fn new(reservation_ttl: Duration) -> Self {
        Self {
            inner: RwLock::default(),
            reservation_ttl,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces a Hardware (`namespace/name`) from its object (either version).
    pub fn upsert_hardware(&self, key: &str, obj: &Value) {
        let claims = Claims::of(obj);
        self.write().upsert(Arc::from(key), claims);
    }

    /// Removes a Hardware.
    pub fn remove_hardware(&self, key: &str) {
        self.write().remove(key);
    }

    /// Replaces every Hardware (the end of a list) and marks the Hardware synced.
    fn replace_hardware(&self, all: Vec<(Arc<str>, Claims)>) {
        let mut inner = self.write();
        let reserved_macs = std::mem::take(&mut inner.reserved_macs);
        let reserved_ips = std::mem::take(&mut inner.reserved_ips);
        let templates = std::mem::take(&mut inner.templates);
        let templates_synced = inner.templates_synced;
        *inner = Inner {
            reserved_macs,
            reserved_ips,
            templates,
            templates_synced,
            hardware_synced: true,
            ..Inner::default()
        };
        for (key, claims) in all {
            inner.upsert(key, claims);
        }
    }

    /// Marks the Hardware synced without a list (tests and benchmarks that fill the index
    /// themselves).
    pub fn mark_synced(&self) {
        let mut inner = self.write();
        inner.hardware_synced = true;
        inner.templates_synced = true;
    }

    /// Adds a Template name.
    pub fn add_template(&self, key: &str) {
        self.write().templates.insert(Arc::from(key));
    }

    fn remove_template(&self, key: &str) {
        self.write().templates.remove(key);
    }

    fn replace_templates(&self, all: HashSet<Arc<str>>) {
        let mut inner = self.write();
        inner.templates = all;
        inner.templates_synced = true;
    }

    /// Whether both watches have listed once.
    pub fn synced(&self) -> bool {
        let inner = self.read();
        inner.hardware_synced && inner.templates_synced
    }

    /// Whether the Hardware watch has listed once.
    pub fn hardware_synced(&self) -> bool {
        self.read().hardware_synced
    }

    /// Other Hardware (`namespace/name`, sorted) claiming `mac` (lower-case), reservations
    /// included.
    pub fn mac_owners(&self, mac: &str, except: &str) -> Vec<String> {
        let inner = self.read();
        owners_of(
            &inner.macs,
            &inner.reserved_macs,
            mac,
            except,
            Instant::now(),
        )
    }

    /// Other Hardware claiming the DHCP IP `ip`, reservations included.
    pub fn ip_owners(&self, ip: &str, except: &str) -> Vec<String> {
        let inner = self.read();
        owners_of(&inner.ips, &inner.reserved_ips, ip, except, Instant::now())
    }

    /// Whether the Hardware `namespace/name` exists.
    pub fn has_hardware(&self, key: &str) -> bool {
        self.read().hardware.contains_key(key)
    }

    /// Whether the Template `namespace/name` exists.
    pub fn has_template(&self, key: &str) -> bool {
        self.read().templates.contains(key)
    }

    /// The number of Hardware and Templates.
    pub fn len(&self) -> (usize, usize) {
        let inner = self.read();
        (inner.hardware.len(), inner.templates.len())
    }

    /// Whether no Hardware is indexed.
    pub fn is_empty(&self) -> bool {
        self.read().hardware.is_empty()
    }

    /// Reserves MACs and IPs for `key` until its watch event arrives or the TTL passes.
    pub fn reserve(&self, key: &str, macs: &[String], ips: &[String]) {
        if macs.is_empty() && ips.is_empty() {
            return;
        }
        let owner: Arc<str> = Arc::from(key);
        let now = Instant::now();
        let until = now + self.reservation_ttl;
        let mut inner = self.write();
        // Drop expired reservations at most once a second (amortized O(1) per admission).
        let due = inner
            .last_sweep
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
        if due && inner.reserved_macs.len() + inner.reserved_ips.len() > 1024 {
            inner.reserved_macs.retain(|_, (_, t)| *t > now);
            inner.reserved_ips.retain(|_, (_, t)| *t > now);
            inner.last_sweep = Some(now);
        }
        for m in macs {
            inner
                .reserved_macs
                .insert(m.clone(), (owner.clone(), until));
        }
        for ip in ips {
            inner
                .reserved_ips
                .insert(ip.clone(), (owner.clone(), until));
        }
    }
}

/// Why the index feed stopped.
#[derive(Debug, thiserror::Error)]
#[error("the {0} watch ended")]
pub struct FeedEnded(&'static str);

fn key_of(obj: &DynamicObject) -> Option<Arc<str>> {
    let name = obj.metadata.name.as_deref()?;
    let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    Some(Arc::from(format!("{ns}/{name}")))
}

fn hardware_claims(obj: &DynamicObject) -> Option<(Arc<str>, Claims)> {
    let key = key_of(obj)?;
    let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
    let value = serde_json::json!({"apiVersion": tink_api::v1alpha2::API_VERSION, "spec": spec});
    Some((key, Claims::of(&value)))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(tink_api::GROUP, tink_api::v1alpha2::VERSION, kind),
        plural,
    )
}

/// Watches Hardware and Templates (v1alpha2, all namespaces) into `index` until `shutdown`,
/// turning `health` ready once both have listed. Objects are read untyped, so one malformed
/// object cannot stop the watch. Errors are retried with back-off; the stream ending is an
/// error (a dead feed must end the process, not serve a stale index forever).
pub async fn feed(
    client: kube::Client,
    index: Arc<Index>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let hw_api: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("Hardware", "hardware"));
    let tpl_api: Api<DynamicObject> = Api::all_with(client, &resource("Template", "templates"));
    let mut hardware = watcher(hw_api).boxed();
    let mut templates = watcher(tpl_api).boxed();
    let mut hw_init: Vec<(Arc<str>, Claims)> = Vec::new();
    let mut tpl_init: HashSet<Arc<str>> = HashSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = hardware.next() => match event {
                None => return Err(FeedEnded("Hardware")),
                Some(Err(error)) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(%error, "Hardware watch error; retrying");
                }
                Some(Ok(Event::Init)) => hw_init.clear(),
                Some(Ok(Event::InitApply(obj))) => hw_init.extend(hardware_claims(&obj)),
                Some(Ok(Event::InitDone)) => {
                    index.replace_hardware(std::mem::take(&mut hw_init));
                    tracing::info!(hardware = index.len().0, "Hardware index synced");
                }
                Some(Ok(Event::Apply(obj))) => {
                    if let Some((key, claims)) = hardware_claims(&obj) {
                        index.write().upsert(key, claims);
                    }
                }
                Some(Ok(Event::Delete(obj))) => {
                    if let Some(key) = key_of(&obj) {
                        index.remove_hardware(&key);
                    }
                }
            },
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
        let (hw, tpl) = index.len();
        metrics.set_indexed("Hardware", hw);
        metrics.set_indexed("Template", tpl);
        if index.synced() {
            health.set_ready(true);
        }
    }
}

fn watcher(
    api: Api<DynamicObject>,
) -> impl futures::Stream<Item = Result<Event<DynamicObject>, watcher::Error>> + Send {
    watcher::watcher(api, watcher::Config::default()).default_backoff()
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
