//! The object store: every object in its storage version, one global resourceVersion counter, an
//! event history for watches, the owner index for garbage collection, and the queue of writes for
//! the persistence thread.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::events::storage_gr;
use crate::registry::Registry;

/// `(group, plural)`.
pub type Gr = (String, String);
/// `(namespace, name)`; namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// ADDED.
    Added,
    /// MODIFIED.
    Modified,
    /// DELETED.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// ADDED / MODIFIED / DELETED.
    pub etype: EventType,
    /// The resource.
    pub gr: Gr,
    /// The object's namespace.
    pub namespace: String,
    /// The object after the change (for DELETED: the last state, with the deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before a MODIFIED change (watches with selectors turn a change that leaves or
    /// enters the selection into DELETED or ADDED, as the API server does).
    pub prev: Option<Arc<Value>>,
}

/// A write for the persistence thread.
#[derive(Debug)]
pub enum PersistOp {
    /// Store the JSON under the key.
    Put(String, Vec<u8>),
    /// Remove the key.
    Delete(String),
}

/// The key an object is persisted under.
pub fn persist_key(gr: &Gr, key: &ObjKey) -> String {
    format!("{}|{}|{}|{}", gr.0, gr.1, key.0, key.1)
}

/// The whole mutable state, behind one mutex.
pub struct State {
    /// Known resource types.
    pub registry: Registry,
    data: HashMap<Gr, BTreeMap<ObjKey, Arc<Value>>>,
    /// The last resourceVersion handed out.
    pub rv: u64,
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    /// Every event with rv > floor is in `history`.
    floor: u64,
    dependents: HashMap<String, BTreeSet<(Gr, ObjKey)>>,
    tx: broadcast::Sender<Arc<Event>>,
    /// Pending writes when persistence is on.
    pub persist: Option<Vec<PersistOp>>,
    /// How long an Event lives after its last write (kube-apiserver's `--event-ttl`); `None`
    /// keeps Events forever.
    pub event_ttl: Option<Duration>,
    /// (expiry, key, resourceVersion of that write) of every Event write, in time order; an
    /// item whose Event was written again since is skipped when it comes up.
    event_expiry: VecDeque<(Instant, ObjKey, u64)>,
}

fn rv_of(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0)
}

/// What a watch starting at a resourceVersion gets: the past events to replay, then the live feed.
pub struct Subscription {
    /// Events after the requested resourceVersion still in history.
    pub backlog: Vec<Arc<Event>>,
    /// Live events.
    pub live: broadcast::Receiver<Arc<Event>>,
}

/// The watch start is older than the retained history.
#[derive(Debug)]
pub struct TooOld {
    /// The oldest resourceVersion a watch can start from.
    pub oldest: u64,
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| o.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Metadata string field.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

impl State {
    /// An empty state.
    pub fn new(history_cap: usize, tx: broadcast::Sender<Arc<Event>>, persist: bool) -> Self {
        Self {
            registry: Registry::new(),
            data: HashMap::new(),
            rv: 0,
            history: VecDeque::new(),
            history_cap: history_cap.max(1),
            floor: 0,
            dependents: HashMap::new(),
            tx,
            persist: persist.then(Vec::new),
            event_ttl: None,
            event_expiry: VecDeque::new(),
        }
    }

    /// Loads an object without an event (startup from disk).
    pub fn load(&mut self, gr: Gr, key: ObjKey, obj: Value) {
        let rv = rv_of(&obj);
        self.rv = self.rv.max(rv);
        self.index_owners(&gr, &key, None, &obj);
        // An Event loaded from disk lives out what is left of its TTL since its last write, as
        // its own times tell (kube-apiserver's lease survives a restart too).
        let age = event_written_at(&obj)
            .and_then(|at| Duration::try_from(jiff::Timestamp::now().duration_since(at)).ok())
            .unwrap_or(Duration::ZERO);
        self.schedule_expiry(&gr, &key, rv, age);
        self.data.entry(gr).or_default().insert(key, Arc::new(obj));
    }

    /// Watches may start from any resourceVersion from now on (after loading from disk).
    /// Also puts the loaded Events' expiry in time order (they were loaded in key order).
    pub fn reset_floor(&mut self) {
        self.floor = self.rv;
        self.event_expiry
            .make_contiguous()
            .sort_by_key(|(at, _, _)| *at);
    }

    /// One object.
    pub fn get(&self, gr: &Gr, key: &ObjKey) -> Option<Arc<Value>> {
        self.data.get(gr).and_then(|m| m.get(key)).cloned()
    }

    /// All objects of a resource, optionally in one namespace, ordered by (namespace, name).
    pub fn list(&self, gr: &Gr, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let Some(m) = self.data.get(gr) else {
            return Vec::new();
        };
        match namespace {
            Some(ns) => m
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => m.values().cloned().collect(),
        }
    }

    /// Number of objects in a namespace, over all resources.
    pub fn count_in_namespace(&self, ns: &str) -> usize {
        self.data
            .values()
            .map(|m| {
                m.range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .count()
            })
            .sum()
    }

    /// Every (resource, key) in a namespace.
    pub fn keys_in_namespace(&self, ns: &str) -> Vec<(Gr, ObjKey)> {
        let mut out = Vec::new();
        for (gr, m) in &self.data {
            for (k, _) in m
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
            {
                out.push((gr.clone(), k.clone()));
            }
        }
        out
    }

    fn index_owners(&mut self, gr: &Gr, key: &ObjKey, old: Option<&Value>, new: &Value) {
        if let Some(old) = old {
            for uid in owner_uids(old) {
                if let Some(set) = self.dependents.get_mut(&uid) {
                    set.remove(&(gr.clone(), key.clone()));
                    if set.is_empty() {
                        self.dependents.remove(&uid);
                    }
                }
            }
        }
        for uid in owner_uids(new) {
            self.dependents
                .entry(uid)
                .or_default()
                .insert((gr.clone(), key.clone()));
        }
    }

    /// Objects whose ownerReferences name `uid`.
    pub fn dependents_of(&self, uid: &str) -> Vec<(Gr, ObjKey)> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn record(
        &mut self,
        etype: EventType,
        gr: &Gr,
        key: &ObjKey,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        let ev = Arc::new(Event {
            rv: self.rv,
            etype,
            gr: gr.clone(),
            namespace: key.0.clone(),
            object,
            prev,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_cap {
            if let Some(old) = self.history.pop_front() {
                self.floor = old.rv;
            }
        }
        // No receiver is not an error: nobody watches.
        let _ = self.tx.send(ev);
    }

    /// Stores an object with a new resourceVersion and records the event.
    pub fn put(&mut self, gr: &Gr, key: &ObjKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(self.rv.to_string()));
        }
        let old = self.data.get(gr).and_then(|m| m.get(key)).cloned();
        self.index_owners(gr, key, old.as_deref(), &obj);
        let obj = Arc::new(obj);
        self.data
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), obj.clone());
        if let Some(p) = &mut self.persist {
            p.push(PersistOp::Put(
                persist_key(gr, key),
                serde_json::to_vec(&*obj).unwrap_or_default(),
            ));
        }
        let etype = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(etype, gr, key, obj.clone(), old);
        self.schedule_expiry(gr, key, self.rv, Duration::ZERO);
        obj
    }

    /// Schedules the expiry of an Event written `age` ago (zero for a write now).
    fn schedule_expiry(&mut self, gr: &Gr, key: &ObjKey, rv: u64, age: Duration) {
        if let Some(ttl) = self.event_ttl
            // `crate::events::storage_gr()`, compared without building it on every write.
            && gr.0.is_empty()
            && gr.1 == "events"
        {
            self.event_expiry.push_back((
                Instant::now() + ttl.saturating_sub(age),
                key.clone(),
                rv,
            ));
        }
    }

    /// Deletes at most `max` of the Events whose TTL ran out by `now` (each with its DELETED
    /// watch event and persisted deletion; the rest wait for the next call, so Events loaded
    /// together from disk do not expire in one long hold of the lock); returns how many.
    pub fn expire_events(&mut self, now: Instant, max: usize) -> usize {
        let gr = storage_gr();
        let mut removed = 0;
        while let Some((at, _, _)) = self.event_expiry.front() {
            if *at > now || removed >= max {
                break;
            }
            let Some((_, key, rv)) = self.event_expiry.pop_front() else {
                break;
            };
            // Only the item of the Event's latest write expires it.
            let current = self.get(&gr, &key).map(|o| rv_of(&o));
            if current == Some(rv) && self.remove(&gr, &key).is_some() {
                removed += 1;
            }
        }
        removed
    }

    /// Removes an object and records the DELETED event. Returns the removed object.
    pub fn remove(&mut self, gr: &Gr, key: &ObjKey) -> Option<Arc<Value>> {
        let old = self.data.get_mut(gr)?.remove(key)?;
        self.rv += 1;
        let mut last = (*old).clone();
        if let Some(m) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(self.rv.to_string()));
        }
        for uid in owner_uids(&old) {
            if let Some(set) = self.dependents.get_mut(&uid) {
                set.remove(&(gr.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(&uid);
                }
            }
        }
        if let Some(p) = &mut self.persist {
            p.push(PersistOp::Delete(persist_key(gr, key)));
        }
        let last = Arc::new(last);
        self.record(EventType::Deleted, gr, key, last.clone(), None);
        Some(last)
    }

    /// Subscribes to events after `from` (0: only live events).
    pub fn subscribe(&self, gr: &Gr, from: u64) -> Result<Subscription, TooOld> {
        if from != 0 && from < self.floor {
            return Err(TooOld { oldest: self.floor });
        }
        let live = self.tx.subscribe();
        let backlog = if from == 0 {
            Vec::new()
        } else {
            self.history
                .iter()
                .filter(|e| e.rv > from && &e.gr == gr)
                .cloned()
                .collect()
        };
        Ok(Subscription { backlog, live })
    }

    /// Takes the pending persistence writes.
    pub fn take_persist(&mut self) -> Vec<PersistOp> {
        self.persist
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

/// When an Event was last written, by its own times: the newest of `series.lastObservedTime`,
/// `lastTimestamp`, `eventTime` and `metadata.creationTimestamp` that parses (None without any).
fn event_written_at(obj: &Value) -> Option<jiff::Timestamp> {
    [
        "/series/lastObservedTime",
        "/lastTimestamp",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .filter_map(|path| obj.pointer(path)?.as_str()?.parse::<jiff::Timestamp>().ok())
    .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gr() -> Gr {
        (String::new(), "configmaps".into())
    }

    #[test]
    fn rv_history_and_too_old() {
        let (tx, _rx) = broadcast::channel(16);
        let mut s = State::new(3, tx, false);
        for i in 0..5 {
            s.put(
                &gr(),
                &("ns".into(), format!("c{i}")),
                json!({"metadata": {"name": format!("c{i}")}}),
            );
        }
        assert_eq!(s.rv, 5);
        assert!(s.subscribe(&gr(), 1).is_err());
        let sub = s
            .subscribe(&gr(), 3)
            .unwrap_or_else(|_| panic!("rv 3 is retained"));
        assert_eq!(
            sub.backlog.iter().map(|e| e.rv).collect::<Vec<_>>(),
            vec![4, 5]
        );
        assert_eq!(s.list(&gr(), Some("ns")).len(), 5);
        assert_eq!(s.list(&gr(), Some("n")).len(), 0);
        let gone = s.remove(&gr(), &("ns".into(), "c0".into())).unwrap();
        assert_eq!(meta_str(&gone, "resourceVersion"), Some("6"));
        assert_eq!(s.count_in_namespace("ns"), 4);
    }

    #[test]
    fn events_expire_a_ttl_after_their_last_write() {
        let (tx, _rx) = broadcast::channel(64);
        let mut s = State::new(100, tx, true);
        s.event_ttl = Some(Duration::from_secs(60));
        let ev = storage_gr();
        let key = |n: &str| ("ns".to_string(), n.to_string());
        let t0 = Instant::now();
        s.put(&ev, &key("a"), json!({"metadata": {"name": "a"}}));
        s.put(&ev, &key("b"), json!({"metadata": {"name": "b"}}));
        // Other resources never expire.
        s.put(&gr(), &key("cm"), json!({"metadata": {"name": "cm"}}));
        assert_eq!(s.expire_events(t0, 100), 0);
        // "b" is written again (a series count): its TTL starts over.
        s.put(&ev, &key("b"), json!({"metadata": {"name": "b"}}));
        let later = Instant::now() + Duration::from_secs(61);
        s.take_persist();
        assert_eq!(s.expire_events(later, 1), 1, "at most one per call");
        assert_eq!(s.expire_events(later, 100), 1, "a and b, each once");
        assert!(s.get(&ev, &key("a")).is_none());
        assert!(s.get(&gr(), &key("cm")).is_some());
        // The deletions are persisted.
        assert_eq!(s.take_persist().len(), 2);
        // A deleted Event's stale item and a re-created Event of the same name.
        s.put(&ev, &key("c"), json!({"metadata": {"name": "c"}}));
        s.remove(&ev, &key("c"));
        s.put(&ev, &key("c"), json!({"metadata": {"name": "c"}}));
        assert_eq!(
            s.expire_events(Instant::now() + Duration::from_secs(61), 100),
            1
        );
        assert!(s.event_expiry.is_empty());
    }

    #[test]
    fn events_loaded_from_disk_live_out_the_rest_of_their_ttl() {
        let (tx, _rx) = broadcast::channel(64);
        let mut s = State::new(100, tx, true);
        s.event_ttl = Some(Duration::from_secs(3600));
        let ev = storage_gr();
        let key = |n: &str| ("ns".to_string(), n.to_string());
        let ago = |minutes: i64| {
            (jiff::Timestamp::now() - jiff::SignedDuration::from_mins(minutes)).to_string()
        };
        // Loaded in key order: "a" was written 2 h ago (its series went on until then), "b" 50
        // minutes ago, "c" has no time at all, "d" says it was written in the future.
        s.load(
            ev.clone(),
            key("a"),
            json!({"metadata": {"name": "a", "resourceVersion": "1", "creationTimestamp": ago(300)},
                   "series": {"count": 9, "lastObservedTime": ago(120)}}),
        );
        s.load(
            ev.clone(),
            key("b"),
            json!({"metadata": {"name": "b", "resourceVersion": "2", "creationTimestamp": ago(90)},
                   "lastTimestamp": ago(50)}),
        );
        s.load(
            ev.clone(),
            key("c"),
            json!({"metadata": {"name": "c", "resourceVersion": "3"}}),
        );
        s.load(
            ev.clone(),
            key("d"),
            json!({"metadata": {"name": "d", "resourceVersion": "4", "creationTimestamp": ago(-30)}}),
        );
        s.reset_floor();
        let now = Instant::now();
        assert_eq!(s.expire_events(now, 100), 1, "a is long past its TTL");
        assert!(s.get(&ev, &key("a")).is_none());
        let in_minutes = |m: u64| now + Duration::from_secs(m * 60);
        assert_eq!(s.expire_events(in_minutes(9), 100), 0);
        assert_eq!(
            s.expire_events(in_minutes(11), 100),
            1,
            "b: 10 minutes left"
        );
        assert!(s.get(&ev, &key("b")).is_none());
        assert_eq!(
            s.expire_events(in_minutes(59), 100),
            0,
            "c and d: a whole TTL"
        );
        assert_eq!(s.expire_events(in_minutes(61), 100), 2);
        assert!(s.event_expiry.is_empty());
    }

    #[test]
    fn owner_index() {
        let (tx, _rx) = broadcast::channel(16);
        let mut s = State::new(10, tx, false);
        let k = ("ns".to_string(), "child".to_string());
        s.put(
            &gr(),
            &k,
            json!({"metadata": {"name": "child", "ownerReferences": [{"uid": "u1"}]}}),
        );
        assert_eq!(s.dependents_of("u1"), vec![(gr(), k.clone())]);
        s.put(
            &gr(),
            &k,
            json!({"metadata": {"name": "child", "ownerReferences": [{"uid": "u2"}]}}),
        );
        assert!(s.dependents_of("u1").is_empty());
        s.remove(&gr(), &k);
        assert!(s.dependents_of("u2").is_empty());
    }
}
