//! The in-memory index requests are answered from: every Hardware's [`Machine`] by each of its
//! IPs and MACs (one hash lookup per request, no API call), and the OSIEs by `namespace/name`.
//!
//! [`feed`] keeps it current: a kube-runtime watcher of Hardware (objects are decoded one by
//! one, so a malformed Hardware is skipped with a log line instead of stalling the watch) and a
//! kube-runtime reflector of OSIEs. A relist (after a broken watch) replaces the Hardware index
//! at once when the list is complete, so requests never see a half-loaded index.
//!
//! An IP or MAC claimed by two Hardware answers neither ([`Lookup::Conflict`]): Hegel never
//! guesses which machine is asking.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tink_api::v1alpha2::{Hardware, Osie, OsieSpec};
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

use crate::machine::Machine;
use crate::metrics::Metrics;

/// The result of a lookup.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// Exactly one Hardware has it: the machine and the index of the matching interface.
    Found(Arc<Machine>, usize),
    /// No Hardware has it.
    Unknown,
    /// Several Hardware claim it (their `namespace/name`); nothing is served.
    Conflict(Vec<String>),
}

type Claims = HashMap<String, Vec<(Arc<Machine>, usize)>>;

#[derive(Debug, Default)]
struct Inner {
    machines: HashMap<String, Arc<Machine>>,
    by_ip: HashMap<IpAddr, Vec<(Arc<Machine>, usize)>>,
    by_mac: Claims,
}

impl Inner {
    fn remove(&mut self, key: &str) {
        let Some(old) = self.machines.remove(key) else {
            return;
        };
        for ip in old.ips() {
            if let Some(v) = self.by_ip.get_mut(&ip) {
                v.retain(|(m, _)| m.key != key);
                if v.is_empty() {
                    self.by_ip.remove(&ip);
                }
            }
        }
        for i in &old.interfaces {
            if let Some(v) = self.by_mac.get_mut(&i.mac) {
                v.retain(|(m, _)| m.key != key);
                if v.is_empty() {
                    self.by_mac.remove(&i.mac);
                }
            }
        }
    }

    fn upsert(&mut self, machine: Machine) {
        self.remove(&machine.key);
        let machine = Arc::new(machine);
        for (n, i) in machine.interfaces.iter().enumerate() {
            if let Some(ip) = i.ip {
                self.by_ip
                    .entry(IpAddr::V4(ip))
                    .or_default()
                    .push((machine.clone(), n));
            }
            self.by_mac
                .entry(i.mac.clone())
                .or_default()
                .push((machine.clone(), n));
        }
        self.machines.insert(machine.key.clone(), machine);
    }
}

fn resolve(claims: Option<&Vec<(Arc<Machine>, usize)>>) -> Lookup {
    match claims.map(Vec::as_slice) {
        None | Some([]) => Lookup::Unknown,
        Some([(m, i)]) => Lookup::Found(m.clone(), *i),
        Some(many) => {
            let mut keys: Vec<String> = many.iter().map(|(m, _)| m.key.clone()).collect();
            keys.sort();
            keys.dedup();
            if keys.len() == 1 {
                // One Hardware with the same IP on two interfaces: the first one answers.
                Lookup::Found(many[0].0.clone(), many[0].1)
            } else {
                Lookup::Conflict(keys)
            }
        }
    }
}

/// The index; share it in an `Arc`.
#[derive(Debug)]
pub struct Index {
    inner: RwLock<Inner>,
    osies: Store<Osie>,
    hardware_synced: AtomicBool,
    osies_synced: AtomicBool,
}

impl Index {
    /// An empty, unsynced index reading OSIEs from `osies`.
    pub fn new(osies: Store<Osie>) -> Self {
        Self {
            inner: RwLock::default(),
            osies,
            hardware_synced: AtomicBool::new(false),
            osies_synced: AtomicBool::new(false),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The machine whose interface has `ip`.
    pub fn by_ip(&self, ip: IpAddr) -> Lookup {
        resolve(self.read().by_ip.get(&ip))
    }

    /// The machine whose interface has `mac` (lower case).
    pub fn by_mac(&self, mac: &str) -> Lookup {
        resolve(self.read().by_mac.get(mac))
    }

    /// The OSIE `namespace/name`.
    pub fn osie(&self, namespace: &str, name: &str) -> Option<Arc<OsieSpec>> {
        self.osies
            .get(&ObjectRef::new(name).within(namespace))
            .map(|o| Arc::new(o.spec.clone()))
    }

    /// Adds or replaces a Hardware.
    pub fn upsert(&self, hw: &Hardware) {
        let m = Machine::from_hardware(hw);
        self.write().upsert(m);
    }

    /// Removes a Hardware (`namespace/name`).
    pub fn remove(&self, key: &str) {
        self.write().remove(key);
    }

    /// Replaces every Hardware (the end of a list) and marks the Hardware synced.
    pub fn replace(&self, all: Vec<Machine>) {
        let mut fresh = Inner::default();
        for m in all {
            fresh.upsert(m);
        }
        *self.write() = fresh;
        self.hardware_synced.store(true, Ordering::Release);
    }

    /// Number of Hardware indexed.
    pub fn len(&self) -> usize {
        self.read().machines.len()
    }

    /// Whether no Hardware is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether both the Hardware list and the OSIE list have completed once.
    pub fn synced(&self) -> bool {
        self.hardware_synced.load(Ordering::Acquire) && self.osies_synced.load(Ordering::Acquire)
    }

    /// Marks the index synced without a list (benchmarks that fill it themselves).
    pub fn mark_synced(&self) {
        self.hardware_synced.store(true, Ordering::Release);
        self.osies_synced.store(true, Ordering::Release);
    }
}

/// The Hardware or OSIE watch stream ended (it retries errors itself, so this is a bug or a
/// shutdown of the client).
#[derive(Debug, thiserror::Error)]
#[error("the {0} watch ended")]
pub struct FeedEnded(pub &'static str);

fn hardware_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(tink_api::GROUP, "v1alpha2", "Hardware"),
        "hardware",
    )
}

fn decode(obj: DynamicObject, metrics: &Metrics) -> Option<Hardware> {
    let name = format!(
        "{}/{}",
        obj.metadata.namespace.as_deref().unwrap_or_default(),
        obj.metadata.name.as_deref().unwrap_or_default()
    );
    let value = match serde_json::to_value(&obj) {
        Ok(v) => v,
        Err(error) => {
            tracing::warn!(hardware = %name, %error, "cannot encode Hardware; skipped");
            metrics.invalid_hardware.inc();
            return None;
        }
    };
    match tink_api::from_value::<Hardware>(value) {
        Ok(hw) => Some(hw),
        Err(error) => {
            tracing::warn!(hardware = %name, %error, "invalid Hardware; not served");
            metrics.invalid_hardware.inc();
            None
        }
    }
}

/// Keeps `index` current until `shutdown`, and `health` ready while it is synced.
/// `namespace` limits the watches to one namespace (all when `None`).
pub async fn feed(
    client: kube::Client,
    namespace: Option<String>,
    index: Arc<Index>,
    osie_writer: reflector::store::Writer<Osie>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let (hw_api, osie_api): (Api<DynamicObject>, Api<Osie>) = match &namespace {
        Some(ns) => (
            Api::namespaced_with(client.clone(), ns, &hardware_resource()),
            Api::namespaced(client, ns),
        ),
        None => (
            Api::all_with(client.clone(), &hardware_resource()),
            Api::all(client),
        ),
    };
    let mut hardware = watcher::watcher(hw_api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut osies = reflector::reflector(
        osie_writer,
        watcher::watcher(osie_api, watcher::Config::default()).default_backoff(),
    )
    .boxed();
    let mut initial: Vec<Machine> = Vec::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = hardware.next() => match event {
                None => return Err(FeedEnded("Hardware")),
                Some(Err(error)) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(%error, "Hardware watch error; retrying");
                }
                Some(Ok(Event::Init)) => initial.clear(),
                Some(Ok(Event::InitApply(obj))) => {
                    if let Some(hw) = decode(obj, &metrics) {
                        initial.push(Machine::from_hardware(&hw));
                    }
                }
                Some(Ok(Event::InitDone)) => {
                    index.replace(std::mem::take(&mut initial));
                    tracing::info!(hardware = index.len(), "Hardware index synced");
                }
                Some(Ok(Event::Apply(obj))) => {
                    let key = format!(
                        "{}/{}",
                        obj.metadata.namespace.as_deref().unwrap_or_default(),
                        obj.metadata.name.as_deref().unwrap_or_default()
                    );
                    match decode(obj, &metrics) {
                        Some(hw) => index.upsert(&hw),
                        // A Hardware that became invalid is no longer served.
                        None => index.remove(&key),
                    }
                }
                Some(Ok(Event::Delete(obj))) => {
                    let key = format!(
                        "{}/{}",
                        obj.metadata.namespace.as_deref().unwrap_or_default(),
                        obj.metadata.name.as_deref().unwrap_or_default()
                    );
                    index.remove(&key);
                }
            },
            event = osies.next() => match event {
                None => return Err(FeedEnded("OSIE")),
                Some(Err(error)) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(%error, "OSIE watch error; retrying");
                }
                Some(Ok(Event::InitDone)) => {
                    index.osies_synced.store(true, Ordering::Release);
                    tracing::info!(osies = index.osies.state().len(), "OSIE cache synced");
                }
                Some(Ok(_)) => {}
            },
        }
        metrics
            .indexed
            .set(i64::try_from(index.len()).unwrap_or(i64::MAX));
        if index.synced() {
            health.set_ready(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hw(name: &str, mac: &str, ip: &str) -> Hardware {
        serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"networkInterfaces": {mac: {"dhcp": {"ip": ip}}}},
        }))
        .expect("hardware")
    }

    fn index() -> Index {
        let (store, _writer) = reflector::store();
        Index::new(store)
    }

    #[test]
    fn lookups_follow_updates_and_refuse_conflicts() {
        let idx = index();
        idx.upsert(&hw("a", "aa:00:00:00:00:01", "10.0.0.1"));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(matches!(idx.by_ip(ip), Lookup::Found(m, 0) if m.key == "ns/a"));
        assert!(matches!(idx.by_mac("aa:00:00:00:00:01"), Lookup::Found(..)));
        // The IP moves to another address: the old one is unknown.
        idx.upsert(&hw("a", "aa:00:00:00:00:01", "10.0.0.2"));
        assert!(matches!(idx.by_ip(ip), Lookup::Unknown));
        // Two Hardware with one IP: neither is served.
        idx.upsert(&hw("b", "aa:00:00:00:00:02", "10.0.0.2"));
        match idx.by_ip("10.0.0.2".parse().unwrap()) {
            Lookup::Conflict(keys) => assert_eq!(keys, ["ns/a", "ns/b"]),
            other => panic!("{other:?}"),
        }
        idx.remove("ns/a");
        assert!(
            matches!(idx.by_ip("10.0.0.2".parse().unwrap()), Lookup::Found(m, _) if m.key == "ns/b")
        );
        assert!(matches!(idx.by_mac("aa:00:00:00:00:01"), Lookup::Unknown));
        assert!(!idx.synced());
        idx.replace(vec![]);
        assert!(idx.is_empty());
    }
}
