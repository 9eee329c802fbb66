//! The index itself: entries by `namespace/name`, and by every MAC, IP and agent id they
//! claim. Each lookup is one hash lookup; a value claimed by several Hardware is a
//! [`Lookup::Conflict`] that names them, never a guess.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use kube::runtime::reflector::{ObjectRef, Store};
use tink_api::AgentId;
use tink_api::v1alpha2::{Hardware, Osie, OsieSpec};

use crate::claims::{Claims, IpKey};
use crate::feed::DecodeError;
use crate::interface::Interface;

/// What the index holds per Hardware: the caller's own view of it (Hegel's pre-rendered
/// meta-data, netboot's interfaces, the webhook's claims, or the Hardware itself).
pub trait Entry: Send + Sync + Sized + 'static {
    /// `namespace/name` of the Hardware it was made from.
    fn key(&self) -> String;
    /// What it claims (computed once per insert).
    fn claims(&self) -> Claims;
    /// The entry of a watched object ([`crate::feed`]); an error is counted, logged and
    /// removes the Hardware from the index. Typed entries use [`crate::decode`].
    fn decode(obj: kube::api::DynamicObject) -> Result<Self, DecodeError>;
}

/// Entries built from a typed Hardware ([`Index::upsert`]).
pub trait FromHardware: Entry {
    /// The entry of `hw`.
    fn from_hardware(hw: &Hardware) -> Self;
}

/// An entry found by the MACs and IPv4 `dhcp.ip`s of its interfaces, the slot being the
/// interface ([`Claims::of_interfaces`]): a boot service's machine (Hegel's, netboot's). Each
/// such type is an [`Entry`] and [`FromHardware`] through this trait alone.
pub trait InterfaceEntry: Send + Sync + Sized + 'static {
    /// The entry of `hw`.
    fn of_hardware(hw: &Hardware) -> Self;
    /// `namespace/name` of the Hardware it was made from, and its interfaces.
    fn parts(&self) -> (&str, &[Interface]);
}

impl<T: InterfaceEntry> Entry for T {
    fn key(&self) -> String {
        self.parts().0.to_owned()
    }

    fn claims(&self) -> Claims {
        Claims::of_interfaces(self.parts().1)
    }

    fn decode(obj: kube::api::DynamicObject) -> Result<Self, DecodeError> {
        crate::decode(obj)
    }
}

impl<T: InterfaceEntry> FromHardware for T {
    fn from_hardware(hw: &Hardware) -> Self {
        T::of_hardware(hw)
    }
}

/// The Hardware itself as an entry: [`Claims::of_hardware`] (MACs, DHCP IPs, agent ids).
impl Entry for Hardware {
    fn key(&self) -> String {
        key(
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    fn claims(&self) -> Claims {
        Claims::of_hardware(self)
    }

    fn decode(obj: kube::api::DynamicObject) -> Result<Self, DecodeError> {
        crate::decode(obj)
    }
}

impl FromHardware for Hardware {
    fn from_hardware(hw: &Hardware) -> Self {
        hw.clone()
    }
}

/// The `namespace/name` key of an object.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The result of a lookup.
#[derive(Debug)]
pub enum Lookup<T> {
    /// Exactly one Hardware claims it: its entry and the slot of the claim (for Hegel and
    /// netboot, the index of the matching interface). One Hardware claiming it in two slots is
    /// found at the first.
    Found(Arc<T>, usize),
    /// No Hardware claims it.
    Unknown,
    /// Several Hardware claim it: their `namespace/name`, sorted. Nothing should be served.
    Conflict(Vec<String>),
}

impl<T> Clone for Lookup<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Found(e, i) => Self::Found(e.clone(), *i),
            Self::Unknown => Self::Unknown,
            Self::Conflict(k) => Self::Conflict(k.clone()),
        }
    }
}

/// One claim of one entry.
#[derive(Debug)]
struct Claim<T> {
    key: Arc<str>,
    entry: Arc<T>,
    slot: usize,
}

impl<T> Clone for Claim<T> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            entry: self.entry.clone(),
            slot: self.slot,
        }
    }
}

type ClaimMap<K, T> = HashMap<K, Vec<Claim<T>>>;

#[derive(Debug)]
struct Inner<T> {
    entries: HashMap<Arc<str>, (Arc<T>, Claims)>,
    by_mac: ClaimMap<String, T>,
    by_ip: ClaimMap<IpKey, T>,
    by_agent: ClaimMap<AgentId, T>,
    reserved_macs: HashMap<String, (Arc<str>, Instant)>,
    reserved_ips: HashMap<IpKey, (Arc<str>, Instant)>,
    /// When expired reservations were last dropped.
    last_sweep: Option<Instant>,
}

impl<T> Default for Inner<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            by_mac: HashMap::new(),
            by_ip: HashMap::new(),
            by_agent: HashMap::new(),
            reserved_macs: HashMap::new(),
            reserved_ips: HashMap::new(),
            last_sweep: None,
        }
    }
}

fn drop_claim<K: std::hash::Hash + Eq>(map: &mut ClaimMap<K, impl Sized>, value: &K, key: &str) {
    if let Some(v) = map.get_mut(value) {
        v.retain(|c| &*c.key != key);
        if v.is_empty() {
            map.remove(value);
        }
    }
}

fn add_claim<K: std::hash::Hash + Eq, T>(
    map: &mut ClaimMap<K, T>,
    value: K,
    key: &Arc<str>,
    entry: &Arc<T>,
    slot: usize,
) {
    map.entry(value).or_default().push(Claim {
        key: key.clone(),
        entry: entry.clone(),
        slot,
    });
}

impl<T> Inner<T> {
    fn remove(&mut self, key: &str) -> Option<Arc<T>> {
        let (old, claims) = self.entries.remove(key)?;
        for (mac, _) in &claims.macs {
            drop_claim(&mut self.by_mac, mac, key);
        }
        for (ip, _) in &claims.ips {
            drop_claim(&mut self.by_ip, ip, key);
        }
        for (id, _) in &claims.agent_ids {
            drop_claim(&mut self.by_agent, id, key);
        }
        Some(old)
    }

    fn insert(&mut self, key: Arc<str>, entry: Arc<T>, claims: Claims) {
        self.remove(&key);
        // The watch event of an admitted object replaces its reservations.
        self.reserved_macs.retain(|_, (o, _)| *o != key);
        self.reserved_ips.retain(|_, (o, _)| *o != key);
        for (mac, slot) in &claims.macs {
            add_claim(&mut self.by_mac, mac.clone(), &key, &entry, *slot);
        }
        for (ip, slot) in &claims.ips {
            add_claim(&mut self.by_ip, ip.clone(), &key, &entry, *slot);
        }
        for (id, slot) in &claims.agent_ids {
            add_claim(&mut self.by_agent, id.clone(), &key, &entry, *slot);
        }
        self.entries.insert(key, (entry, claims));
    }
}

fn resolve<T>(claims: Option<&Vec<Claim<T>>>) -> Lookup<T> {
    match claims.map(Vec::as_slice) {
        None | Some([]) => Lookup::Unknown,
        Some([c]) => Lookup::Found(c.entry.clone(), c.slot),
        Some(many) => {
            let keys = sorted_keys(many.iter().map(|c| &c.key));
            if keys.len() == 1 {
                // One Hardware claiming it twice (the same IP on two interfaces): the first.
                Lookup::Found(many[0].entry.clone(), many[0].slot)
            } else {
                Lookup::Conflict(keys)
            }
        }
    }
}

fn sorted_keys<'a>(keys: impl Iterator<Item = &'a Arc<str>>) -> Vec<String> {
    let mut out: Vec<String> = keys.map(|k| k.to_string()).collect();
    out.sort();
    out.dedup();
    out
}

/// Other owners of `value` (`except` left out), reservations included, sorted.
fn owners_of<K, Q, T>(
    map: &ClaimMap<K, T>,
    reserved: &HashMap<K, (Arc<str>, Instant)>,
    value: &Q,
    except: &str,
    now: Instant,
) -> Vec<String>
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    let mut out = sorted_keys(
        map.get(value)
            .into_iter()
            .flatten()
            .map(|c| &c.key)
            .filter(|k| &***k != except),
    );
    if let Some((owner, until)) = reserved.get(value)
        && &**owner != except
        && *until > now
        && !out.iter().any(|o| o == &**owner)
    {
        out.push(owner.to_string());
        out.sort();
    }
    out
}

#[derive(Debug)]
struct Osies {
    store: Store<Osie>,
    synced: AtomicBool,
}

/// How long a reservation lasts unless set otherwise ([`Index::with_reservation_ttl`]).
pub const DEFAULT_RESERVATION_TTL: Duration = Duration::from_secs(30);

/// The index; share it in an `Arc`. Fed by [`crate::feed`] (or filled directly by tests and
/// benchmarks), read by any number of tasks.
#[derive(Debug)]
pub struct Index<T> {
    inner: RwLock<Inner<T>>,
    hardware_synced: AtomicBool,
    osies: Option<Osies>,
    reservation_ttl: Duration,
}

impl<T> Default for Index<T> {
    /// An empty, unsynced Hardware index (no OSIEs).
    fn default() -> Self {
        Self {
            inner: RwLock::default(),
            hardware_synced: AtomicBool::new(false),
            osies: None,
            reservation_ttl: DEFAULT_RESERVATION_TTL,
        }
    }
}

impl<T> Index<T> {
    /// An empty, unsynced index that also serves the OSIEs of `osies` (the boot services: the
    /// feed then runs that store's reflector too, and [`Index::synced`] waits for it).
    pub fn new(osies: Store<Osie>) -> Self {
        Self {
            osies: Some(Osies {
                store: osies,
                synced: AtomicBool::new(false),
            }),
            ..Self::default()
        }
    }

    /// This index with reservations ([`Index::reserve`]) lasting `ttl`.
    pub fn with_reservation_ttl(mut self, ttl: Duration) -> Self {
        self.reservation_ttl = ttl;
        self
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner<T>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<T>> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry claiming the MAC `mac` (compared as given; see [`crate::canonical_mac`]).
    pub fn by_mac(&self, mac: &str) -> Lookup<T> {
        resolve(self.read().by_mac.get(mac))
    }

    /// The entry claiming the IP `ip`.
    pub fn by_ip(&self, ip: IpAddr) -> Lookup<T> {
        resolve(self.read().by_ip.get(&IpKey::Addr(ip)))
    }

    /// The entry claiming the IP key `ip` (text that is no address included).
    pub fn by_ip_key(&self, ip: &IpKey) -> Lookup<T> {
        resolve(self.read().by_ip.get(ip))
    }

    /// The entry claiming the agent id `id`.
    pub fn by_agent(&self, id: &AgentId) -> Lookup<T> {
        resolve(self.read().by_agent.get(id))
    }

    /// Every entry claiming the agent id `id`, in key order (a conflict's claimants too).
    pub fn agent_claimants(&self, id: &AgentId) -> Vec<Arc<T>> {
        let inner = self.read();
        let mut claims: Vec<&Claim<T>> = inner.by_agent.get(id).into_iter().flatten().collect();
        claims.sort_by(|a, b| a.key.cmp(&b.key));
        claims.dedup_by(|a, b| a.key == b.key);
        claims.into_iter().map(|c| c.entry.clone()).collect()
    }

    /// Other Hardware (`namespace/name`, sorted) claiming `mac`, the Hardware `except` left out
    /// and live reservations included: what an admission check asks.
    pub fn mac_owners(&self, mac: &str, except: &str) -> Vec<String> {
        let inner = self.read();
        owners_of(
            &inner.by_mac,
            &inner.reserved_macs,
            mac,
            except,
            Instant::now(),
        )
    }

    /// Other Hardware claiming the IP key `ip`, as [`Index::mac_owners`].
    pub fn ip_owners(&self, ip: &IpKey, except: &str) -> Vec<String> {
        let inner = self.read();
        owners_of(
            &inner.by_ip,
            &inner.reserved_ips,
            ip,
            except,
            Instant::now(),
        )
    }

    /// The entry of Hardware `namespace/name`.
    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        self.read().entries.get(key).map(|(e, _)| e.clone())
    }

    /// Whether Hardware `namespace/name` is indexed.
    pub fn contains(&self, key: &str) -> bool {
        self.read().entries.contains_key(key)
    }

    /// Every entry (no order).
    pub fn all(&self) -> Vec<Arc<T>> {
        self.read()
            .entries
            .values()
            .map(|(e, _)| e.clone())
            .collect()
    }

    /// Number of Hardware indexed.
    pub fn len(&self) -> usize {
        self.read().entries.len()
    }

    /// Whether no Hardware is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes Hardware `namespace/name`; its entry when it was indexed.
    pub fn remove(&self, key: &str) -> Option<Arc<T>> {
        self.write().remove(key)
    }

    /// Reserves `macs` and `ips` for Hardware `key` until a watch event of `key` arrives or the
    /// reservation TTL passes: an admitted object's claims count before the watch shows it.
    pub fn reserve(&self, key: &str, macs: &[String], ips: &[IpKey]) {
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

    /// Whether the Hardware list, and the OSIE list when the index has OSIEs, completed once.
    pub fn synced(&self) -> bool {
        self.hardware_synced()
            && self
                .osies
                .as_ref()
                .is_none_or(|o| o.synced.load(Ordering::Acquire))
    }

    /// Whether the Hardware list completed once.
    pub fn hardware_synced(&self) -> bool {
        self.hardware_synced.load(Ordering::Acquire)
    }

    /// Marks the index synced without a list (tests and benchmarks that fill it themselves).
    pub fn mark_synced(&self) {
        self.hardware_synced.store(true, Ordering::Release);
        if let Some(o) = &self.osies {
            o.synced.store(true, Ordering::Release);
        }
    }

    pub(crate) fn mark_osies_synced(&self) {
        if let Some(o) = &self.osies {
            o.synced.store(true, Ordering::Release);
        }
    }

    pub(crate) fn has_osies(&self) -> bool {
        self.osies.is_some()
    }

    /// The OSIE `namespace/name` (always `None` for an index without OSIEs).
    pub fn osie(&self, namespace: &str, name: &str) -> Option<Arc<OsieSpec>> {
        self.osies
            .as_ref()?
            .store
            .get(&ObjectRef::new(name).within(namespace))
            .map(|o| Arc::new(o.spec.clone()))
    }

    /// Number of OSIEs cached.
    pub fn osie_count(&self) -> usize {
        self.osies.as_ref().map_or(0, |o| o.store.state().len())
    }
}

impl<T: Entry> Index<T> {
    /// Adds or replaces an entry (under [`Entry::key`]); the entry as stored.
    pub fn insert(&self, entry: T) -> Arc<T> {
        let key: Arc<str> = Arc::from(entry.key());
        let claims = entry.claims();
        let entry = Arc::new(entry);
        self.write().insert(key, entry.clone(), claims);
        entry
    }

    /// Adds or replaces a Hardware.
    pub fn upsert(&self, hw: &Hardware)
    where
        T: FromHardware,
    {
        self.insert(T::from_hardware(hw));
    }

    /// Replaces every entry (the end of a list) and marks the Hardware synced. Reservations
    /// stay: they stand for admissions the list may not show yet.
    pub fn replace(&self, all: Vec<T>) {
        let fresh: Vec<(Arc<str>, Arc<T>, Claims)> = all
            .into_iter()
            .map(|e| (Arc::from(e.key()), e.claims(), e))
            .map(|(k, c, e)| (k, Arc::new(e), c))
            .collect();
        let mut inner = self.write();
        let reserved_macs = std::mem::take(&mut inner.reserved_macs);
        let reserved_ips = std::mem::take(&mut inner.reserved_ips);
        *inner = Inner::default();
        for (key, entry, claims) in fresh {
            inner.insert(key, entry, claims);
        }
        inner.reserved_macs = reserved_macs;
        inner.reserved_ips = reserved_ips;
        drop(inner);
        self.hardware_synced.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hw(name: &str, ifaces: serde_json::Value) -> Hardware {
        serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"networkInterfaces": ifaces},
        }))
        .expect("hardware")
    }

    fn one(name: &str, mac: &str, ip: &str) -> Hardware {
        hw(name, json!({mac: {"dhcp": {"ip": ip}}}))
    }

    fn agent(id: &str) -> AgentId {
        AgentId::parse(id).unwrap()
    }

    #[test]
    fn lookups_by_mac_ip_and_agent_follow_updates() {
        let idx: Index<Hardware> = Index::default();
        idx.upsert(&one("a", "aa:00:00:00:00:01", "10.0.0.1"));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(matches!(idx.by_ip(ip), Lookup::Found(h, 0) if h.key() == "ns/a"));
        assert!(matches!(idx.by_mac("aa:00:00:00:00:01"), Lookup::Found(..)));
        assert!(matches!(
            idx.by_agent(&agent("aa:00:00:00:00:01")),
            Lookup::Found(..)
        ));
        assert!(matches!(
            idx.by_ip_key(&IpKey::parse("10.0.0.1")),
            Lookup::Found(..)
        ));
        // The IP moves: the old one is unknown.
        idx.upsert(&one("a", "aa:00:00:00:00:01", "10.0.0.2"));
        assert!(matches!(idx.by_ip(ip), Lookup::Unknown));
        assert_eq!(idx.len(), 1);
        assert!(idx.contains("ns/a") && idx.get("ns/a").is_some());
        let gone = idx.remove("ns/a").expect("was indexed");
        assert_eq!(gone.key(), "ns/a");
        assert!(idx.is_empty() && idx.remove("ns/a").is_none());
        assert!(matches!(
            idx.by_agent(&agent("aa:00:00:00:00:01")),
            Lookup::Unknown
        ));
    }

    #[test]
    fn conflicts_are_data_naming_every_claimant() {
        let idx: Index<Hardware> = Index::default();
        idx.upsert(&one("b", "aa:00:00:00:00:01", "10.0.0.1"));
        idx.upsert(&one("a", "aa:00:00:00:00:01", "10.0.0.2"));
        match idx.by_mac("aa:00:00:00:00:01") {
            Lookup::Conflict(keys) => assert_eq!(keys, ["ns/a", "ns/b"]),
            other => panic!("{other:?}"),
        }
        let claimants = idx.agent_claimants(&agent("aa:00:00:00:00:01"));
        let keys: Vec<String> = claimants.iter().map(|h| h.key()).collect();
        assert_eq!(keys, ["ns/a", "ns/b"]);
        assert!(matches!(
            idx.by_agent(&agent("aa:00:00:00:00:01")),
            Lookup::Conflict(_)
        ));
        // One Hardware with one IP on two interfaces is no conflict: the first interface.
        idx.upsert(&hw(
            "c",
            json!({"cc:00:00:00:00:01": {"dhcp": {"ip": "10.0.0.9"}},
                   "cc:00:00:00:00:02": {"dhcp": {"ip": "10.0.0.9"}}}),
        ));
        assert!(matches!(
            idx.by_ip("10.0.0.9".parse().unwrap()),
            Lookup::Found(_, 0)
        ));
        idx.remove("ns/b");
        assert!(
            matches!(idx.by_mac("aa:00:00:00:00:01"), Lookup::Found(h, _) if h.key() == "ns/a")
        );
    }

    #[test]
    fn owners_leave_out_the_asker_and_count_reservations() {
        let idx: Index<Hardware> = Index::default().with_reservation_ttl(Duration::from_millis(50));
        idx.upsert(&one("a", "aa:00:00:00:00:01", "10.0.0.1"));
        assert_eq!(idx.mac_owners("aa:00:00:00:00:01", "x/y"), ["ns/a"]);
        assert!(idx.mac_owners("aa:00:00:00:00:01", "ns/a").is_empty());
        idx.reserve(
            "ns/new",
            &["aa:00:00:00:00:05".into()],
            &[IpKey::parse("10.0.0.5")],
        );
        assert_eq!(idx.mac_owners("aa:00:00:00:00:05", "x/y"), ["ns/new"]);
        assert_eq!(idx.ip_owners(&IpKey::parse("10.0.0.5"), "x/y"), ["ns/new"]);
        // A relist keeps reservations; the watch event of their owner ends them.
        idx.replace(vec![one("a", "aa:00:00:00:00:01", "10.0.0.1")]);
        assert!(idx.hardware_synced() && idx.synced());
        assert_eq!(idx.mac_owners("aa:00:00:00:00:05", "x/y"), ["ns/new"]);
        idx.upsert(&one("new", "aa:00:00:00:00:06", "10.0.0.6"));
        assert!(idx.mac_owners("aa:00:00:00:00:05", "x/y").is_empty());
        // Or the TTL.
        idx.reserve("ns/late", &["aa:00:00:00:00:07".into()], &[]);
        std::thread::sleep(Duration::from_millis(80));
        assert!(idx.mac_owners("aa:00:00:00:00:07", "x/y").is_empty());
    }

    #[test]
    fn unparsed_ips_still_collide() {
        let idx: Index<Hardware> = Index::default();
        idx.upsert(&one("a", "aa:00:00:00:00:01", "10.0.0.01"));
        assert_eq!(idx.ip_owners(&IpKey::parse(" 10.0.0.01"), "x/y"), ["ns/a"]);
    }

    #[test]
    fn an_index_with_osies_waits_for_them() {
        let (store, _writer) = kube::runtime::reflector::store();
        let idx: Index<Hardware> = Index::new(store);
        idx.replace(vec![]);
        assert!(idx.hardware_synced() && !idx.synced());
        idx.mark_osies_synced();
        assert!(idx.synced());
        assert!(idx.osie("ns", "hook").is_none());
        let plain: Index<Hardware> = Index::default();
        plain.replace(vec![]);
        assert!(plain.synced());
    }
}
