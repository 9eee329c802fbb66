//! The console's read side: the shared Hardware index ([`tink_hardware_index::Index`], fed from
//! the console's own typed watch through an [`Applier`]), kube-runtime reflectors (watch-fed
//! stores) of Workflows, Templates and Kubernetes Events, an index of each machine's Workflows,
//! and a bounded memory of deleted Workflows (a canceled Workflow disappears once the controller
//! releases it; its page still shows how it ended). No page view lists anything from the API
//! server.
//!
//! The BMC kinds (`bmc.tinkerbell.org` Machines and Jobs) are watched too, best effort: where
//! their CRDs are not installed (the list answers 404) or the console may not list them (403),
//! the cache says so ([`BmcApi::Unavailable`]) instead of holding the console unready, and
//! the watch keeps retrying, so CRDs installed later are picked up.
//!
//! Every change a watch delivers is applied here, then handed on as a [`Change`] to whoever
//! runs the watches ([`watch`]'s `changed`): the console's `feed::Feed`, the one
//! driver of the live fan-out. The cache itself knows nothing of the browsers.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Resource, ResourceExt as _};
use tink_api::bmc::{Job as BmcJob, Machine as BmcMachine};
use tink_api::v1alpha2::{Hardware, Template, Workflow};
use tink_hardware_index::{Applier, Index};
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::presence::Presence;
use crate::views::event_time;

/// `namespace/name` of an object.
pub type Key = (String, String);

/// The key of an object.
pub fn key_of<K: Resource>(o: &K) -> Key {
    (
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

/// How many deleted Workflows are remembered by default.
pub const DEFAULT_TOMBSTONES: usize = 1000;

/// The stores and indexes pages are rendered from.
pub struct Cache {
    /// Every Hardware (the shared index; its synced flag is the Hardware watch's).
    pub hardware: Arc<Index<Hardware>>,
    /// Every Workflow.
    pub workflows: Store<Workflow>,
    /// Every Template.
    pub templates: Store<Template>,
    /// Every core Event.
    pub events: Store<Event>,
    /// Per machine (`namespace/hardware`), its Workflows by creation time.
    by_machine: RwLock<HashMap<Key, BTreeSet<(i64, String)>>>,
    tombstones: Mutex<VecDeque<Arc<Workflow>>>,
    tombstones_max: usize,
    /// Whether the Workflow, Template and Event watches listed once (at `WORKFLOWS`,
    /// `TEMPLATES`, `EVENTS`; the Hardware index keeps its own flag).
    synced: [AtomicBool; 3],
    /// Agent presence (off unless configured); shared with [`crate::presence::watch`].
    pub presence: Arc<Presence>,
    /// Machines' boot logs (syslog), read over the presence watch's NATS connection.
    pub syslog: Arc<crate::syslog::SyslogSource>,
    /// Every BMC Machine (`bmc.tinkerbell.org`), when the API is there.
    pub bmc_machines: Store<BmcMachine>,
    /// Every BMC Job, when the API is there.
    pub bmc_jobs: Store<BmcJob>,
    /// Per BMC Machine (`namespace/machine`), its Jobs (of its own namespace) in order.
    jobs_by_machine: RwLock<JobIndex>,
    /// Per BMC Machine, the Hardware of its namespace whose `spec.bmcRef` names it.
    hw_by_bmc: RwLock<HashMap<Key, BTreeSet<String>>>,
    /// Per Hardware, the Machine its `spec.bmcRef` names (to unindex it when that changes).
    bmc_of_hw: RwLock<HashMap<Key, String>>,
    /// Whether the Machine and Job watches listed (at `BMC_MACHINES`, `BMC_JOBS`).
    bmc_api: [Mutex<BmcApi>; 2],
}

/// Whether the BMC API (`bmc.tinkerbell.org` Machines and Jobs) can be shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum BmcApi {
    /// Not listed yet.
    #[default]
    Loading,
    /// Listed: the stores are current.
    Ready,
    /// Not installed (404), or the console may not list it (403): why, for the pages.
    Unavailable(String),
}

const BMC_MACHINES: usize = 0;
const BMC_JOBS: usize = 1;

/// A Job's place among its Machine's: creation time (whole seconds, as the API server keeps
/// it), then the order this console first saw it in (Jobs created within one second, e.g.
/// a click and the next, keep the order they were created in), then the name.
type JobOrder = (i64, u64, String);

/// The Jobs of each BMC Machine, in order.
#[derive(Default)]
struct JobIndex {
    by_machine: HashMap<Key, BTreeSet<JobOrder>>,
    /// Each indexed Job (`namespace/name`): its Machine and its place.
    of: HashMap<Key, (Key, JobOrder)>,
    next: u64,
}

impl JobIndex {
    fn insert(&mut self, job: Key, machine: Key, created: i64) {
        if let Some((m, _)) = self.of.get(&job)
            && *m == machine
        {
            return;
        }
        self.remove(&job);
        self.next += 1;
        let order = (created, self.next, job.1.clone());
        self.by_machine
            .entry(machine.clone())
            .or_default()
            .insert(order.clone());
        self.of.insert(job, (machine, order));
    }

    fn remove(&mut self, job: &Key) {
        if let Some((machine, order)) = self.of.remove(job)
            && let Some(set) = self.by_machine.get_mut(&machine)
        {
            set.remove(&order);
            if set.is_empty() {
                self.by_machine.remove(&machine);
            }
        }
    }
}

/// One change the watches applied to the cache, as it is handed on (borrowed from the watch
/// event: nothing is cloned for it).
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// A machine changed, or went (`deleted`).
    Machine {
        /// The Hardware (its last state when deleted).
        hw: &'a Hardware,
        /// Whether it went.
        deleted: bool,
    },
    /// A Workflow changed, or went (`deleted`).
    Workflow {
        /// The Workflow (its last state when deleted).
        w: &'a Workflow,
        /// Whether it went.
        deleted: bool,
    },
    /// A Kubernetes Event about a Workflow changed.
    Event(&'a Event),
    /// A BMC Machine changed, or went.
    BmcMachine(&'a BmcMachine),
    /// A BMC Job changed, or went.
    BmcJob(&'a BmcJob),
    /// A watch listed again: everything may have changed.
    Resync,
}

const WORKFLOWS: usize = 0;
const TEMPLATES: usize = 1;
const EVENTS: usize = 2;

/// The writers of a [`Cache`]'s stores, consumed by [`watch`] (the Hardware index is written
/// through its own `Arc`).
pub struct Writers {
    workflows: reflector::store::Writer<Workflow>,
    templates: reflector::store::Writer<Template>,
    events: reflector::store::Writer<Event>,
    bmc_machines: reflector::store::Writer<BmcMachine>,
    bmc_jobs: reflector::store::Writer<BmcJob>,
}

fn created_ms<K: Resource>(w: &K) -> i64 {
    w.meta()
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .unwrap_or(0)
}

impl Cache {
    /// Empty stores and their writers; `tombstones` deleted Workflows are remembered.
    pub fn new(tombstones: usize) -> (Arc<Cache>, Writers) {
        let (workflows, wf) = reflector::store();
        let (templates, t) = reflector::store();
        let (events, ev) = reflector::store();
        let (bmc_machines, bm) = reflector::store();
        let (bmc_jobs, bj) = reflector::store();
        let cache = Arc::new(Cache {
            hardware: Arc::default(),
            workflows,
            templates,
            events,
            by_machine: RwLock::default(),
            tombstones: Mutex::default(),
            tombstones_max: tombstones,
            synced: Default::default(),
            presence: Default::default(),
            syslog: Default::default(),
            bmc_machines,
            bmc_jobs,
            jobs_by_machine: RwLock::default(),
            hw_by_bmc: RwLock::default(),
            bmc_of_hw: RwLock::default(),
            bmc_api: Default::default(),
        });
        (
            cache,
            Writers {
                workflows: wf,
                templates: t,
                events: ev,
                bmc_machines: bm,
                bmc_jobs: bj,
            },
        )
    }

    /// Whether every watch has listed once (the BMC watches: or found their API unavailable).
    pub fn synced(&self) -> bool {
        self.hardware.hardware_synced()
            && self.synced.iter().all(|s| s.load(Ordering::Acquire))
            && self.bmc_api() != BmcApi::Loading
    }

    /// Whether the BMC API can be shown: unavailable when either kind is, loading while either
    /// is.
    pub fn bmc_api(&self) -> BmcApi {
        let states = self
            .bmc_api
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let mut out = BmcApi::Ready;
        for s in states {
            match s {
                BmcApi::Unavailable(_) => return s,
                BmcApi::Loading => out = BmcApi::Loading,
                BmcApi::Ready => {}
            }
        }
        out
    }

    /// Sets what watch `i` found; whether that changed anything.
    fn set_bmc_api(&self, i: usize, state: BmcApi) -> bool {
        let mut s = self.bmc_api[i].lock().unwrap_or_else(|e| e.into_inner());
        if *s == state {
            return false;
        }
        *s = state;
        true
    }

    /// The BMC Machine `namespace/name`.
    pub fn bmc_machine(&self, namespace: &str, name: &str) -> Option<Arc<BmcMachine>> {
        self.bmc_machines
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The newest Job (of the Machine's own namespace) of BMC Machine `namespace/machine`.
    pub fn latest_job(&self, namespace: &str, machine: &str) -> Option<Arc<BmcJob>> {
        let index = self
            .jobs_by_machine
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let set = index
            .by_machine
            .get(&(namespace.to_string(), machine.to_string()))?;
        set.iter().rev().find_map(|(_, _, name)| {
            self.bmc_jobs
                .get(&ObjectRef::new(name).within(namespace))
                .filter(|j| j.spec.machine_ref.name == machine)
        })
    }

    /// What machine `hw` shows of its BMC at `now`.
    pub fn bmc(&self, hw: &Hardware, now: jiff::Timestamp) -> crate::views::Bmc {
        let api = self.bmc_api();
        let ns = hw.metadata.namespace.as_deref().unwrap_or("");
        let (machine, job) = match (&api, hw.spec.bmc_ref.as_ref()) {
            (BmcApi::Ready, Some(r)) => {
                (self.bmc_machine(ns, &r.name), self.latest_job(ns, &r.name))
            }
            _ => (None, None),
        };
        crate::views::Bmc::new(hw, &api, machine.as_deref(), job.as_deref(), now)
    }

    /// The Hardware whose `spec.bmcRef` names BMC Machine `namespace/machine`.
    pub fn hardware_of_bmc(&self, namespace: &str, machine: &str) -> Vec<Arc<Hardware>> {
        let names: Vec<String> = {
            let index = self.hw_by_bmc.read().unwrap_or_else(|e| e.into_inner());
            match index.get(&(namespace.to_string(), machine.to_string())) {
                Some(set) => set.iter().cloned().collect(),
                None => return Vec::new(),
            }
        };
        names
            .iter()
            .filter_map(|n| self.machine(namespace, n))
            .collect()
    }

    /// The Workflow `namespace/name`, or the last state of a deleted one (`true`).
    pub fn workflow(&self, namespace: &str, name: &str) -> Option<(Arc<Workflow>, bool)> {
        if let Some(w) = self.workflows.get(&ObjectRef::new(name).within(namespace)) {
            return Some((w, false));
        }
        let tombs = self.tombstones.lock().unwrap_or_else(|e| e.into_inner());
        tombs
            .iter()
            .rev()
            .find(|w| {
                w.metadata.namespace.as_deref() == Some(namespace)
                    && w.metadata.name.as_deref() == Some(name)
            })
            .map(|w| (w.clone(), true))
    }

    /// The Hardware `namespace/name`.
    pub fn machine(&self, namespace: &str, name: &str) -> Option<Arc<Hardware>> {
        self.hardware
            .get(&tink_hardware_index::key(namespace, name))
    }

    /// The Template `namespace/name`.
    pub fn template(&self, namespace: &str, name: &str) -> Option<Arc<Template>> {
        self.templates.get(&ObjectRef::new(name).within(namespace))
    }

    /// The newest Workflow of machine `namespace/hardware`.
    pub fn latest_workflow(&self, namespace: &str, hardware: &str) -> Option<Arc<Workflow>> {
        let index = self.by_machine.read().unwrap_or_else(|e| e.into_inner());
        let set = index.get(&(namespace.to_string(), hardware.to_string()))?;
        set.iter()
            .rev()
            .find_map(|(_, name)| self.workflows.get(&ObjectRef::new(name).within(namespace)))
    }

    /// The newest Workflow of every machine that has one (one pass over the index).
    pub fn latest_workflows(&self) -> HashMap<Key, Arc<Workflow>> {
        let index = self.by_machine.read().unwrap_or_else(|e| e.into_inner());
        let mut out = HashMap::with_capacity(index.len());
        for ((ns, hw), set) in index.iter() {
            if let Some(w) = set
                .iter()
                .rev()
                .find_map(|(_, name)| self.workflows.get(&ObjectRef::new(name).within(ns)))
            {
                out.insert((ns.clone(), hw.clone()), w);
            }
        }
        out
    }

    /// The Kubernetes Events about Workflow `namespace/name`, oldest first.
    pub fn workflow_events(&self, namespace: &str, name: &str) -> Vec<Arc<Event>> {
        let mut events: Vec<Arc<Event>> = self
            .events
            .state()
            .into_iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Workflow")
                    && e.involved_object.namespace.as_deref() == Some(namespace)
                    && e.involved_object.name.as_deref() == Some(name)
            })
            .collect();
        events.sort_by_key(|e| event_time(e));
        events
    }

    fn index_workflow(&self, w: &Workflow) {
        let (ns, name) = key_of(w);
        let hw = w.spec.hardware_ref.name.clone();
        let mut index = self.by_machine.write().unwrap_or_else(|e| e.into_inner());
        index
            .entry((ns, hw))
            .or_default()
            .insert((created_ms(w), name));
    }

    fn unindex_workflow(&self, w: &Workflow) {
        let (ns, name) = key_of(w);
        let key = (ns, w.spec.hardware_ref.name.clone());
        let mut index = self.by_machine.write().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = index.get_mut(&key) {
            set.remove(&(created_ms(w), name));
            if set.is_empty() {
                index.remove(&key);
            }
        }
    }

    fn reindex_workflows(&self) {
        let mut fresh: HashMap<Key, BTreeSet<(i64, String)>> = HashMap::new();
        for w in self.workflows.state() {
            let (ns, name) = key_of(w.as_ref());
            fresh
                .entry((ns, w.spec.hardware_ref.name.clone()))
                .or_default()
                .insert((created_ms(w.as_ref()), name));
        }
        *self.by_machine.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    fn bury(&self, w: Workflow) {
        if self.tombstones_max == 0 {
            return;
        }
        let mut tombs = self.tombstones.lock().unwrap_or_else(|e| e.into_inner());
        let key = key_of(&w);
        tombs.retain(|t| key_of(t.as_ref()) != key);
        if tombs.len() >= self.tombstones_max {
            tombs.pop_front();
        }
        tombs.push_back(Arc::new(w));
    }

    /// A Job counts for its Machine only in the Machine's own namespace (the console shows
    /// both under the Hardware's namespace, with the permissions of that one namespace).
    fn job_key(j: &BmcJob) -> Option<Key> {
        let (ns, _) = key_of(j);
        (j.spec.machine_ref.namespace == ns).then(|| (ns, j.spec.machine_ref.name.clone()))
    }

    fn index_job(&self, j: &BmcJob) {
        let mut index = self
            .jobs_by_machine
            .write()
            .unwrap_or_else(|e| e.into_inner());
        match Self::job_key(j) {
            Some(machine) => index.insert(key_of(j), machine, created_ms(j)),
            None => index.remove(&key_of(j)),
        }
    }

    fn unindex_job(&self, j: &BmcJob) {
        let mut index = self
            .jobs_by_machine
            .write()
            .unwrap_or_else(|e| e.into_inner());
        index.remove(&key_of(j));
    }

    /// After a relist: the Jobs that went are forgotten, the others keep their place, new
    /// ones follow in the list's order.
    fn reindex_jobs(&self) {
        let jobs = self.bmc_jobs.state();
        let mut index = self
            .jobs_by_machine
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let listed: std::collections::HashSet<Key> =
            jobs.iter().map(|j| key_of(j.as_ref())).collect();
        let gone: Vec<Key> = index
            .of
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            index.remove(&k);
        }
        for j in &jobs {
            match Self::job_key(j) {
                Some(machine) => index.insert(key_of(j.as_ref()), machine, created_ms(j.as_ref())),
                None => index.remove(&key_of(j.as_ref())),
            }
        }
    }

    /// Records (`deleted`: forgets) which BMC Machine `hw` names.
    fn index_bmc_ref(&self, hw: &Hardware, deleted: bool) {
        let key = key_of(hw);
        let now = if deleted {
            None
        } else {
            hw.spec
                .bmc_ref
                .as_ref()
                .map(|r| r.name.clone())
                .filter(|n| !n.is_empty())
        };
        let mut of = self.bmc_of_hw.write().unwrap_or_else(|e| e.into_inner());
        let before = match &now {
            Some(m) => of.insert(key.clone(), m.clone()),
            None => of.remove(&key),
        };
        if before == now {
            return;
        }
        let mut by = self.hw_by_bmc.write().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = before {
            let k = (key.0.clone(), m);
            if let Some(set) = by.get_mut(&k) {
                set.remove(&key.1);
                if set.is_empty() {
                    by.remove(&k);
                }
            }
        }
        if let Some(m) = now {
            by.entry((key.0.clone(), m)).or_default().insert(key.1);
        }
    }

    fn reindex_bmc_refs(&self) {
        let mut of = HashMap::new();
        let mut by: HashMap<Key, BTreeSet<String>> = HashMap::new();
        for hw in self.hardware.all() {
            if let Some(m) = hw
                .spec
                .bmc_ref
                .as_ref()
                .map(|r| &r.name)
                .filter(|n| !n.is_empty())
            {
                let (ns, name) = key_of(hw.as_ref());
                by.entry((ns.clone(), m.clone()))
                    .or_default()
                    .insert(name.clone());
                of.insert((ns, name), m.clone());
            }
        }
        *self.bmc_of_hw.write().unwrap_or_else(|e| e.into_inner()) = of;
        *self.hw_by_bmc.write().unwrap_or_else(|e| e.into_inner()) = by;
    }

    /// Fills the BMC stores directly (tests and benchmarks that do not run watches) and marks
    /// the BMC API ready.
    pub fn fill_bmc(
        writers: &mut Writers,
        cache: &Cache,
        machines: Vec<BmcMachine>,
        jobs: Vec<BmcJob>,
    ) {
        writers.bmc_machines.apply_watcher_event(&WatchEvent::Init);
        for m in machines {
            writers
                .bmc_machines
                .apply_watcher_event(&WatchEvent::InitApply(m));
        }
        writers
            .bmc_machines
            .apply_watcher_event(&WatchEvent::InitDone);
        writers.bmc_jobs.apply_watcher_event(&WatchEvent::Init);
        for j in jobs {
            writers
                .bmc_jobs
                .apply_watcher_event(&WatchEvent::InitApply(j));
        }
        writers.bmc_jobs.apply_watcher_event(&WatchEvent::InitDone);
        cache.reindex_jobs();
        cache.set_bmc_api(BMC_MACHINES, BmcApi::Ready);
        cache.set_bmc_api(BMC_JOBS, BmcApi::Ready);
    }

    /// Fills the index and stores directly (benchmarks and tests that do not run watches) and
    /// marks the cache synced (the BMC API unavailable: [`Cache::fill_bmc`] fills it).
    pub fn fill(
        writers: &mut Writers,
        cache: &Cache,
        hardware: Vec<Hardware>,
        workflows: Vec<Workflow>,
    ) {
        // A whole list at once, as the watch's relist does (it also marks the index synced).
        cache.hardware.replace(hardware);
        writers.workflows.apply_watcher_event(&WatchEvent::Init);
        for w in workflows {
            writers
                .workflows
                .apply_watcher_event(&WatchEvent::InitApply(w));
        }
        writers.workflows.apply_watcher_event(&WatchEvent::InitDone);
        writers.templates.apply_watcher_event(&WatchEvent::Init);
        writers.templates.apply_watcher_event(&WatchEvent::InitDone);
        writers.events.apply_watcher_event(&WatchEvent::Init);
        writers.events.apply_watcher_event(&WatchEvent::InitDone);
        cache.reindex_workflows();
        cache.reindex_bmc_refs();
        for s in &cache.synced {
            s.store(true, Ordering::Release);
        }
        for i in [BMC_MACHINES, BMC_JOBS] {
            cache.set_bmc_api(i, BmcApi::Unavailable("not watched".into()));
        }
    }

    /// Applies one Workflow change as the watch would, and returns the change the watch would
    /// hand on (benchmarks drive the live path with it: `feed.apply(cache.apply_workflow(..))`).
    pub fn apply_workflow<'w>(&self, writers: &mut Writers, w: &'w Workflow) -> Change<'w> {
        writers
            .workflows
            .apply_watcher_event(&WatchEvent::Apply(w.clone()));
        self.index_workflow(w);
        Change::Workflow { w, deleted: false }
    }
}

/// A watch stream ended on its own (it retries errors itself, so this is a bug or a shutdown
/// of the client).
#[derive(Debug, thiserror::Error)]
#[error("the {0} watch ended")]
pub struct WatchEnded(pub &'static str);

/// Runs the six watches until `shutdown`, keeping `cache` (its Hardware index too) current,
/// handing every change to `changed` once it is applied, and turning `health` ready once every
/// watch has listed.
#[allow(clippy::too_many_arguments)] // the parts of the service it wires, each used once
pub async fn watch<F>(
    client: kube::Client,
    namespace: Option<String>,
    cache: Arc<Cache>,
    writers: Writers,
    changed: F,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), WatchEnded>
where
    F: Fn(Change<'_>) + Clone + Send + 'static,
{
    fn api<K>(client: &kube::Client, ns: &Option<String>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let ready = {
        let cache = cache.clone();
        let health = health.clone();
        // `Some(i)`: watch `i` listed; `None`: the Hardware watch did (the index knows).
        move |i: Option<usize>| {
            if let Some(i) = i {
                cache.synced[i].store(true, Ordering::Release);
            }
            if cache.synced() {
                health.set_ready(true);
            }
        }
    };

    let hardware = {
        let (index, changed, metrics, ready, cache) = (
            cache.hardware.clone(),
            changed.clone(),
            metrics.clone(),
            ready.clone(),
            cache.clone(),
        );
        // The typed stream stays the console's (its events are handed on as they came); the
        // applier writes them to the index first, a relist only once it is whole.
        let mut applier = Applier::default();
        watcher::watcher(
            api::<Hardware>(&client, &namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .for_each(move |ev| {
            if let Ok(ev) = &ev {
                applier.apply(&index, ev);
            }
            match ev {
                Ok(WatchEvent::Apply(h)) | Ok(WatchEvent::InitApply(h)) => {
                    cache.index_bmc_ref(&h, false);
                    changed(Change::Machine {
                        hw: &h,
                        deleted: false,
                    })
                }
                Ok(WatchEvent::Delete(h)) => {
                    cache.index_bmc_ref(&h, true);
                    changed(Change::Machine {
                        hw: &h,
                        deleted: true,
                    })
                }
                Ok(WatchEvent::InitDone) => {
                    cache.reindex_bmc_refs();
                    ready(None);
                    changed(Change::Resync);
                }
                Ok(WatchEvent::Init) => {}
                Err(e) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(error = %e, "Hardware watch failed; retrying");
                }
            }
            futures::future::ready(())
        })
    };
    let workflows = {
        let (cache, changed, metrics, ready) = (
            cache.clone(),
            changed.clone(),
            metrics.clone(),
            ready.clone(),
        );
        reflector::reflector(
            writers.workflows,
            watcher::watcher(
                api::<Workflow>(&client, &namespace),
                watcher::Config::default(),
            )
            .default_backoff(),
        )
        .for_each(move |ev| {
            match ev {
                Ok(WatchEvent::Apply(w)) | Ok(WatchEvent::InitApply(w)) => {
                    cache.index_workflow(&w);
                    changed(Change::Workflow {
                        w: &w,
                        deleted: false,
                    });
                }
                Ok(WatchEvent::Delete(w)) => {
                    cache.unindex_workflow(&w);
                    changed(Change::Workflow {
                        w: &w,
                        deleted: true,
                    });
                    cache.bury(w);
                }
                Ok(WatchEvent::InitDone) => {
                    cache.reindex_workflows();
                    ready(Some(WORKFLOWS));
                    changed(Change::Resync);
                }
                Ok(WatchEvent::Init) => {}
                Err(e) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(error = %e, "Workflow watch failed; retrying");
                }
            }
            futures::future::ready(())
        })
    };
    let templates = {
        let (metrics, ready) = (metrics.clone(), ready.clone());
        reflector::reflector(
            writers.templates,
            watcher::watcher(
                api::<Template>(&client, &namespace),
                watcher::Config::default(),
            )
            .default_backoff(),
        )
        .for_each(move |ev| {
            match ev {
                Ok(WatchEvent::InitDone) => ready(Some(TEMPLATES)),
                Ok(_) => {}
                Err(e) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(error = %e, "Template watch failed; retrying");
                }
            }
            futures::future::ready(())
        })
    };
    let events = {
        let (metrics, ready, changed) = (metrics.clone(), ready.clone(), changed.clone());
        // Only Events about Workflows: the console shows no others.
        let config = watcher::Config::default().fields("involvedObject.kind=Workflow");
        reflector::reflector(
            writers.events,
            watcher::watcher(api::<Event>(&client, &namespace), config).default_backoff(),
        )
        .for_each(move |ev| {
            match ev {
                Ok(WatchEvent::Apply(e)) => changed(Change::Event(&e)),
                Ok(WatchEvent::InitDone) => ready(Some(EVENTS)),
                Ok(_) => {}
                Err(e) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(error = %e, "Event watch failed; retrying");
                }
            }
            futures::future::ready(())
        })
    };
    let bmc_machines = {
        let (cache, changed, metrics, ready) = (
            cache.clone(),
            changed.clone(),
            metrics.clone(),
            ready.clone(),
        );
        reflector::reflector(
            writers.bmc_machines,
            watcher::watcher(
                api::<BmcMachine>(&client, &namespace),
                watcher::Config::default(),
            )
            .default_backoff(),
        )
        .for_each(move |ev| {
            match ev {
                Ok(WatchEvent::Apply(m)) | Ok(WatchEvent::Delete(m)) => {
                    changed(Change::BmcMachine(&m))
                }
                Ok(WatchEvent::InitDone) => {
                    cache.set_bmc_api(BMC_MACHINES, BmcApi::Ready);
                    ready(None);
                    changed(Change::Resync);
                }
                Ok(_) => {}
                Err(e) => bmc_watch_failed(&cache, BMC_MACHINES, &e, &metrics, &ready, &changed),
            }
            futures::future::ready(())
        })
    };
    let bmc_jobs = {
        let (cache, changed, metrics, ready) = (
            cache.clone(),
            changed.clone(),
            metrics.clone(),
            ready.clone(),
        );
        reflector::reflector(
            writers.bmc_jobs,
            watcher::watcher(
                api::<BmcJob>(&client, &namespace),
                watcher::Config::default(),
            )
            .default_backoff(),
        )
        .for_each(move |ev| {
            match ev {
                // A relist's objects are shown after it (its InitDone resyncs every page).
                Ok(WatchEvent::InitApply(j)) => cache.index_job(&j),
                Ok(WatchEvent::Apply(j)) => {
                    cache.index_job(&j);
                    changed(Change::BmcJob(&j));
                }
                Ok(WatchEvent::Delete(j)) => {
                    cache.unindex_job(&j);
                    changed(Change::BmcJob(&j));
                }
                Ok(WatchEvent::InitDone) => {
                    cache.reindex_jobs();
                    cache.set_bmc_api(BMC_JOBS, BmcApi::Ready);
                    ready(None);
                    changed(Change::Resync);
                }
                Ok(WatchEvent::Init) => {}
                Err(e) => bmc_watch_failed(&cache, BMC_JOBS, &e, &metrics, &ready, &changed),
            }
            futures::future::ready(())
        })
    };
    let result = tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        _ = bmc_machines => Err(WatchEnded("BMC Machine")),
        _ = bmc_jobs => Err(WatchEnded("BMC Job")),
        _ = hardware => Err(WatchEnded("Hardware")),
        _ = workflows => Err(WatchEnded("Workflow")),
        _ = templates => Err(WatchEnded("Template")),
        _ = events => Err(WatchEnded("Event")),
    };
    health.set_ready(false);
    result
}

/// Why a BMC watch cannot list its kind, when retrying soon would not help: the CRD is not
/// installed (404), or the console's identity may not list it (403).
pub fn bmc_unavailable(kind: &str, e: &watcher::Error) -> Option<String> {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return None,
    };
    match status.code {
        404 => Some(format!(
            "BMC API not installed: the Kubernetes API does not serve {kind} (apply deploy/crds/bmc.tinkerbell.org_*.yaml)"
        )),
        403 => Some(format!(
            "the console may not list {kind}: grant its service account list and watch on them (deploy/rbac/console.yaml)"
        )),
        _ => None,
    }
}

/// A BMC watch failed: unavailable (404, 403) is a state the pages show and readiness does
/// not wait for; anything else is retried like the other watches' errors.
fn bmc_watch_failed<F, R>(
    cache: &Cache,
    i: usize,
    e: &watcher::Error,
    metrics: &Metrics,
    ready: &R,
    changed: &F,
) where
    F: Fn(Change<'_>),
    R: Fn(Option<usize>),
{
    let kind = if i == BMC_MACHINES {
        "machines.bmc.tinkerbell.org"
    } else {
        "jobs.bmc.tinkerbell.org"
    };
    match bmc_unavailable(kind, e) {
        Some(why) => {
            let was_ready = cache.bmc_api() == BmcApi::Ready;
            if cache.set_bmc_api(i, BmcApi::Unavailable(why.clone())) {
                tracing::info!(%why, "the BMC API is unavailable; pages show no power state (retrying)");
                ready(None);
                if was_ready {
                    changed(Change::Resync);
                }
            }
        }
        None => {
            metrics.watch_errors.inc();
            tracing::warn!(error = %e, "{kind} watch failed; retrying");
        }
    }
}

/// The name of a Hardware's Workflow, for logs.
pub fn describe(w: &Workflow) -> String {
    format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_forbidden_bmc_api_is_a_state_other_errors_are_retried() {
        use kube::core::Status;
        let api = |code| kube::Error::Api(Status::failure("no", "x").with_code(code).boxed());
        let kind = "machines.bmc.tinkerbell.org";
        let e = watcher::Error::InitialListFailed(api(404));
        assert!(bmc_unavailable(kind, &e).is_some_and(|m| m.starts_with("BMC API not installed")));
        let e = watcher::Error::WatchError(Status::failure("no", "x").with_code(403).boxed());
        assert!(bmc_unavailable(kind, &e).is_some_and(|m| m.contains("may not list")));
        assert_eq!(
            bmc_unavailable(kind, &watcher::Error::InitialListFailed(api(500))),
            None
        );
        assert_eq!(
            bmc_unavailable(kind, &watcher::Error::NoResourceVersion),
            None
        );
    }

    #[test]
    fn jobs_created_within_one_second_keep_the_order_they_were_seen_in() {
        let mut index = JobIndex::default();
        let machine: Key = ("a".into(), "bmc-1".into());
        let job = |n: &str| -> Key { ("a".into(), n.into()) };
        let last = |index: &JobIndex| {
            index.by_machine[&machine]
                .iter()
                .next_back()
                .map(|o| o.2.clone())
        };
        index.insert(job("z-first"), machine.clone(), 1000);
        index.insert(job("a-second"), machine.clone(), 1000);
        assert_eq!(last(&index).as_deref(), Some("a-second"));
        // A change of the first keeps its place; an older one goes before both.
        index.insert(job("z-first"), machine.clone(), 1000);
        index.insert(job("older"), machine.clone(), 0);
        assert_eq!(last(&index).as_deref(), Some("a-second"));
        index.remove(&job("a-second"));
        assert_eq!(last(&index).as_deref(), Some("z-first"));
        // A Job moved to another Machine leaves this one.
        index.insert(job("z-first"), ("a".into(), "bmc-2".into()), 1000);
        assert_eq!(last(&index).as_deref(), Some("older"));
        index.remove(&job("older"));
        assert!(
            !index.by_machine.contains_key(&machine),
            "nothing left behind"
        );
        assert_eq!(index.of.len(), 1);
    }
}
