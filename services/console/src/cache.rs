//! The console's read side: the shared Hardware index ([`tink_hardware_index::Index`], fed from
//! the console's own typed watch through an [`Applier`]), kube-runtime reflectors (watch-fed
//! stores) of Workflows, Templates and Kubernetes Events, an index of each machine's Workflows,
//! and a bounded memory of deleted Workflows (a canceled Workflow disappears once the controller
//! releases it; its page still shows how it ended). No page view lists anything from the API
//! server.
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
}

fn created_ms(w: &Workflow) -> i64 {
    w.metadata
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
        });
        (
            cache,
            Writers {
                workflows: wf,
                templates: t,
                events: ev,
            },
        )
    }

    /// Whether every watch has listed once.
    pub fn synced(&self) -> bool {
        self.hardware.hardware_synced() && self.synced.iter().all(|s| s.load(Ordering::Acquire))
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
                .insert((created_ms(&w), name));
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

    /// Fills the index and stores directly (benchmarks and tests that do not run watches) and
    /// marks the cache synced.
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
        for s in &cache.synced {
            s.store(true, Ordering::Release);
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

/// Runs the four watches until `shutdown`, keeping `cache` (its Hardware index too) current,
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
        let (index, changed, metrics, ready) = (
            cache.hardware.clone(),
            changed.clone(),
            metrics.clone(),
            ready.clone(),
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
                    changed(Change::Machine {
                        hw: &h,
                        deleted: false,
                    })
                }
                Ok(WatchEvent::Delete(h)) => changed(Change::Machine {
                    hw: &h,
                    deleted: true,
                }),
                Ok(WatchEvent::InitDone) => {
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
        let (metrics, ready) = (metrics.clone(), ready);
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
    let result = tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        _ = hardware => Err(WatchEnded("Hardware")),
        _ = workflows => Err(WatchEnded("Workflow")),
        _ = templates => Err(WatchEnded("Template")),
        _ = events => Err(WatchEnded("Event")),
    };
    health.set_ready(false);
    result
}

/// The name of a Hardware's Workflow, for logs.
pub fn describe(w: &Workflow) -> String {
    format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any())
}
