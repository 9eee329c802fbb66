//! The state one leadership term shares between the reconciler, the events consumer and the
//! presence watcher, and the IO every one of them uses: status writes, finalizers, commands,
//! Kubernetes Events.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Template, Workflow, WorkflowState, WorkflowStatus};
use tink_bus::proto::{GetWorkflowsResponse, get_workflows_response, workflow as pw};
use tink_workflow::{
    AgentSeen, Candidate, Effect, EventReason, EventType, StepContext, Transition, Verdict,
    WorkflowKey, WorkflowRef, agent_ids, normalize_agent_id, pick_dispatches,
};
use tokio::sync::mpsc;
use tracing::{Instrument as _, debug, info, warn};

use crate::config::{ControllerConfig, FINALIZER};
use crate::metrics::Metrics;

/// Errors of one reconcile or one batch of events.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Workflow changed since it was read (409); the caller re-reads and retries.
    #[error("conflict writing {0}: it changed since it was read")]
    Conflict(WorkflowKey),
    /// The Kubernetes API failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Publishing a command failed.
    #[error("publishing a command: {0}")]
    Bus(#[from] tink_bus::BusError),
    /// Reading what the streams prove about a command failed.
    #[error("reading the streams: {0}")]
    Delivery(#[from] tink_bus::DeliveryError),
    /// An object could not be serialized.
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Conflict(_) => "conflict",
            Self::Kube(_) => "kube",
            Self::Bus(_) => "publish",
            Self::Delivery(_) => "delivery_lookup",
            Self::Json(_) => "json",
        }
    }
}

/// The latest version of a Workflow this replica wrote; newer than the watch cache until the
/// watch catches up.
struct Known {
    object: Arc<Workflow>,
    rv: u64,
    at: Instant,
}

/// An agent as the presence bucket shows it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// The id as the agent presented it (the dispatch subject is built from it).
    pub presented: String,
    /// Its last heartbeat (for a disconnected agent: when its stream ended).
    pub heartbeat: Timestamp,
    /// The instance id of the agent process holding the stream, if it sends one.
    pub instance: Option<String>,
    /// Whether a stream is open (the entry was not deleted).
    pub connected: bool,
}

/// A Kubernetes Event waiting to be published.
pub(crate) struct KubeEvent {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: EventReason,
    pub message: String,
}

pub(crate) struct Shared {
    pub client: Client,
    pub config: ControllerConfig,
    pub metrics: Metrics,
    pub workflows: Store<Workflow>,
    pub templates: Store<Template>,
    pub hardware: Store<Hardware>,
    pub jetstream: jetstream::Context,
    /// The streams (delivery look-ups, withdrawals).
    pub bus: tink_bus::Bus,
    /// The admitted agent ids this leader last wrote.
    pub(crate) admitted_written: crate::admitted::Written,
    /// When this term began: the last sign of life assumed for an agent not seen since.
    pub term_started: Timestamp,
    /// Whether the events that were stored when this term bound its consumer are all applied.
    /// Until then no Resume, timeout or verdict acts on an active Workflow: an outage's
    /// backlog may hold its end.
    pub backlog_applied: AtomicBool,
    /// Normalised agent id -> presence.
    pub presence: RwLock<HashMap<String, Seen>>,
    ledger: Mutex<HashMap<WorkflowKey, Known>>,
    /// Machine agent ids claimed by a dispatch whose status write is in flight.
    claims: Mutex<HashMap<String, WorkflowKey>>,
    /// Workflow uids stepped with `Resume` in this term.
    resumed: Mutex<HashSet<String>>,
    /// Workflow uids whose finalizer removal is in flight.
    releasing: Mutex<HashSet<String>>,
    /// Workflows the last resync woke (to count the dispatches it caused).
    resynced: Mutex<HashSet<WorkflowKey>>,
    triggers: mpsc::Sender<ObjectRef<Workflow>>,
    kube_events: mpsc::Sender<KubeEvent>,
    /// Agent session resets asked for by Hardware annotations, in flight.
    pub resets: crate::agent_reset::InFlight,
    /// One agent secret sync at a time per Hardware (a rotation reads the copy's generation
    /// and writes the next one).
    pub(crate) secret_syncs: crate::agent_secrets::SyncLocks,
    /// Normalised agent id -> the Hardware that named it when the watch delivered them, so an
    /// agent connecting looks at its own machine instead of every Hardware (10,000 agents
    /// reconnecting at once were 10^8 comparisons). A superset: entries are checked against
    /// the store when used.
    machines: RwLock<HashMap<String, HashSet<ObjectRef<Hardware>>>>,
    /// (namespace, Hardware name) -> the Workflows that named it when the watch delivered
    /// them, so a dispatch, a completion or a Hardware change looks at one machine's Workflows
    /// instead of every stored Workflow (the cost per workflow grew with the number stored:
    /// 10.6 ms of controller CPU per workflow with 50,000 stored, 1.9 with 1,000). A superset:
    /// entries are checked against the store when used, and the deleted ones dropped then.
    by_hardware: RwLock<WorkflowsByHardware>,
}

/// (namespace, Hardware name) -> Workflows naming it.
type WorkflowsByHardware = HashMap<(String, String), HashSet<ObjectRef<Workflow>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another task panicked while holding it; the data is still
    // usable (plain maps).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn rv_of(w: &Workflow) -> u64 {
    w.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn key_of(w: &Workflow) -> WorkflowKey {
    WorkflowKey::new(w.namespace().unwrap_or_default(), w.name_any())
}

pub(crate) fn ref_of(w: &Workflow) -> WorkflowRef {
    WorkflowRef::new(
        w.namespace().unwrap_or_default(),
        w.name_any(),
        w.uid().unwrap_or_default(),
    )
}

pub(crate) fn has_finalizer(w: &Workflow) -> bool {
    w.finalizers().iter().any(|f| f == FINALIZER)
}

fn is_active(state: WorkflowState) -> bool {
    matches!(
        state,
        WorkflowState::Scheduled | WorkflowState::Running | WorkflowState::Cancelling
    )
}

/// The dispatcher's answer for one Workflow.
pub(crate) enum Choice<'a> {
    /// Dispatch to this agent (as it presented its id); hold the claim until the status is
    /// written.
    Go(String, Claim<'a>),
    /// Not now: the machine is busy, disconnected, or an older Workflow goes first (it was
    /// woken); something will wake this one.
    Wait,
    /// Another dispatch to the same machine is being written right now.
    Busy,
}

/// Marks a finalizer removal in flight for one object uid.
pub(crate) struct Releasing<'a> {
    shared: &'a Shared,
    uid: String,
}

impl<'a> Releasing<'a> {
    fn start(shared: &'a Shared, uid: &str) -> Option<Self> {
        lock(&shared.releasing)
            .insert(uid.to_string())
            .then(|| Self {
                shared,
                uid: uid.to_string(),
            })
    }
}

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        lock(&self.shared.releasing).remove(&self.uid);
    }
}

/// Releases the machine's claim when the dispatch is written (or failed).
pub(crate) struct Claim<'a> {
    shared: &'a Shared,
    ids: Vec<String>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut claims = lock(&self.shared.claims);
        for id in &self.ids {
            claims.remove(id);
        }
    }
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        config: ControllerConfig,
        metrics: Metrics,
        workflows: Store<Workflow>,
        templates: Store<Template>,
        hardware: Store<Hardware>,
        bus: tink_bus::Bus,
        triggers: mpsc::Sender<ObjectRef<Workflow>>,
        kube_events: mpsc::Sender<KubeEvent>,
    ) -> Self {
        Self {
            client,
            config,
            metrics,
            workflows,
            templates,
            hardware,
            jetstream: bus.jetstream.clone(),
            bus,
            admitted_written: Default::default(),
            term_started: Timestamp::now(),
            backlog_applied: AtomicBool::new(false),
            presence: RwLock::new(HashMap::new()),
            ledger: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
            resumed: Mutex::new(HashSet::new()),
            releasing: Mutex::new(HashSet::new()),
            resynced: Mutex::new(HashSet::new()),
            triggers,
            kube_events,
            resets: Default::default(),
            secret_syncs: Default::default(),
            machines: Default::default(),
            by_hardware: Default::default(),
        }
    }

    pub fn api(&self, namespace: &str) -> Api<Workflow> {
        Api::namespaced(self.client.clone(), namespace)
    }

    pub fn step_context(&self, w: &Workflow, now: Timestamp) -> StepContext {
        let agent = w
            .status
            .as_ref()
            .and_then(|s| s.agent_id.as_deref())
            .map(|agent| self.agent_seen(agent));
        StepContext {
            now,
            workflow: ref_of(w),
            timeout: w.spec.timeout_limit(),
            config: self.config.workflow.clone(),
            agent,
        }
    }

    /// What presence shows of an agent; one not seen in this term counts as last seen when the
    /// term began.
    pub fn agent_seen(&self, agent: &str) -> AgentSeen {
        let presence = self.presence.read().unwrap_or_else(|e| e.into_inner());
        match presence.get(&normalize_agent_id(agent)) {
            Some(seen) => AgentSeen {
                instance: seen.instance.clone(),
                last_seen: if seen.connected {
                    // Connected: alive as of its latest heartbeat, or now if that is recent.
                    let age = Timestamp::now().duration_since(seen.heartbeat);
                    if age.as_secs_f64() <= self.config.bus.presence_ttl.as_secs_f64() {
                        Timestamp::now()
                    } else {
                        seen.heartbeat
                    }
                } else {
                    seen.heartbeat
                }
                .max(self.term_started),
            },
            None => AgentSeen {
                instance: None,
                last_seen: self.term_started,
            },
        }
    }

    /// Whether the events stored when this term began are applied (see `backlog_applied`).
    pub fn backlog_applied(&self) -> bool {
        self.backlog_applied.load(Ordering::Acquire)
    }

    // ---- the freshest view ----

    /// `w` or, when this replica wrote a newer version of the same object, that version.
    pub fn fresh(&self, w: &Arc<Workflow>) -> Arc<Workflow> {
        let ledger = lock(&self.ledger);
        Self::overlay(&ledger, w)
    }

    fn overlay(ledger: &HashMap<WorkflowKey, Known>, w: &Arc<Workflow>) -> Arc<Workflow> {
        match ledger.get(&key_of(w)) {
            Some(k) if k.object.uid() == w.uid() && k.rv > rv_of(w) => k.object.clone(),
            _ => w.clone(),
        }
    }

    /// The freshest known version of a Workflow from the cache and the ledger.
    pub fn cached(&self, key: &WorkflowKey) -> Option<Arc<Workflow>> {
        let r = ObjectRef::new(&key.name).within(&key.namespace);
        let cached = self.workflows.get(&r);
        let ledger = lock(&self.ledger);
        cached.map(|w| Self::overlay(&ledger, &w))
    }

    /// Reads a Workflow from the API server (after a conflict); `None` when it is gone.
    pub async fn read(&self, key: &WorkflowKey) -> Result<Option<Arc<Workflow>>, Error> {
        let w = self.api(&key.namespace).get_opt(&key.name).await?;
        Ok(w.map(|w| {
            let w = Arc::new(w);
            self.remember(&w);
            w
        }))
    }

    fn remember(&self, w: &Arc<Workflow>) {
        let rv = rv_of(w);
        let mut ledger = lock(&self.ledger);
        let key = key_of(w);
        match ledger.get(&key) {
            Some(k) if k.object.uid() == w.uid() && k.rv >= rv => {}
            _ => {
                ledger.insert(
                    key,
                    Known {
                        object: w.clone(),
                        rv,
                        at: Instant::now(),
                    },
                );
            }
        }
    }

    /// Drops ledger entries the watch cache has caught up with, and old entries of objects
    /// the cache no longer has.
    pub fn sweep(&self) {
        let mut ledger = lock(&self.ledger);
        ledger.retain(|key, k| {
            let r = ObjectRef::new(&key.name).within(&key.namespace);
            match self.workflows.get(&r) {
                Some(w) => w.uid() == k.object.uid() && rv_of(&w) < k.rv,
                None => k.at.elapsed() < Duration::from_secs(60),
            }
        });
    }

    /// Whether this is the first time this term looks at the object (then it is resumed).
    pub fn first_look(&self, uid: &str) -> bool {
        lock(&self.resumed).insert(uid.to_string())
    }

    /// Makes the next look at the object a resume again (its effects may not have happened).
    pub fn forget(&self, uid: &str) {
        lock(&self.resumed).remove(uid);
    }

    // ---- triggers ----

    /// Asks the reconciler to look at a Workflow. The queue is bounded: when it is full the
    /// trigger is dropped and counted (`errors{kind="trigger_dropped"}`), and the periodic
    /// resync looks at the Workflow instead.
    pub fn trigger(&self, key: &WorkflowKey) {
        let r = ObjectRef::new(&key.name).within(&key.namespace);
        if let Err(mpsc::error::TrySendError::Full(_)) = self.triggers.try_send(r) {
            self.metrics.error("trigger_dropped");
        }
    }

    /// Forgets per-object and per-agent memories that can no longer matter: resume marks of
    /// Workflows no longer cached, and presence of agents not seen for `forget_after`.
    pub fn prune(&self) {
        {
            let live: HashSet<String> = self
                .workflows
                .state()
                .iter()
                .filter_map(|w| w.metadata.uid.clone())
                .collect();
            lock(&self.resumed).retain(|uid| live.contains(uid));
        }
        let forget = self.config.forget_after.as_secs_f64();
        let now = Timestamp::now();
        self.presence
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, seen| now.duration_since(seen.heartbeat).as_secs_f64() <= forget);
    }

    /// The Workflows of a Hardware (namespace and name), from the cache, through the index.
    pub fn workflows_of_hardware(&self, namespace: &str, hardware: &str) -> Vec<Arc<Workflow>> {
        let key = (namespace.to_string(), hardware.to_string());
        let mut found = Vec::new();
        let mut gone = Vec::new();
        {
            let index = self.by_hardware.read().unwrap_or_else(|e| e.into_inner());
            for r in index.get(&key).into_iter().flatten() {
                match self.workflows.get(r) {
                    Some(w)
                        if w.spec.hardware_ref.name == hardware
                            && w.metadata.namespace.as_deref() == Some(namespace) =>
                    {
                        found.push(w)
                    }
                    _ => gone.push(r.clone()),
                }
            }
        }
        if !gone.is_empty() {
            let mut index = self.by_hardware.write().unwrap_or_else(|e| e.into_inner());
            if let Some(refs) = index.get_mut(&key) {
                for r in &gone {
                    // Still stored (under another Hardware): indexed there by its own delivery.
                    if self.workflows.get(r).is_none_or(|w| {
                        w.spec.hardware_ref.name != hardware
                            || w.metadata.namespace.as_deref() != Some(namespace)
                    }) {
                        refs.remove(r);
                    }
                }
                if refs.is_empty() {
                    index.remove(&key);
                }
            }
        }
        found
    }

    /// Forgets a deleted Workflow (the watch delivered its deletion).
    pub fn unindex_workflow(&self, w: &Workflow) {
        let key = (
            w.metadata.namespace.clone().unwrap_or_default(),
            w.spec.hardware_ref.name.clone(),
        );
        let mut index = self.by_hardware.write().unwrap_or_else(|e| e.into_inner());
        if let Some(refs) = index.get_mut(&key) {
            refs.remove(&ObjectRef::from_obj(w));
            if refs.is_empty() {
                index.remove(&key);
            }
        }
    }

    /// Records the Hardware a Workflow names (every Workflow the watch delivers comes here).
    pub fn index_workflow(&self, w: &Workflow) {
        let key = (
            w.metadata.namespace.clone().unwrap_or_default(),
            w.spec.hardware_ref.name.clone(),
        );
        let r = ObjectRef::from_obj(w);
        let mut index = self.by_hardware.write().unwrap_or_else(|e| e.into_inner());
        index.entry(key).or_default().insert(r);
    }

    /// Wakes the Pending Workflows of a Hardware (its agent became idle or connected).
    pub fn trigger_pending_of(&self, namespace: &str, hardware: &str) {
        for w in self.workflows_of_hardware(namespace, hardware) {
            let w = self.fresh(&w);
            let state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
            if state == WorkflowState::Pending && w.metadata.deletion_timestamp.is_none() {
                self.trigger(&key_of(&w));
            }
        }
    }

    /// Wakes the unfinished Workflows of the machine an agent id belongs to (Pending ones may
    /// be dispatched; active ones may need a verdict about a restarted agent).
    pub fn trigger_agent(&self, agent: &str) {
        let agent = normalize_agent_id(agent);
        let indexed: Vec<Arc<Hardware>> = {
            let machines = self.machines.read().unwrap_or_else(|e| e.into_inner());
            machines
                .get(&agent)
                .into_iter()
                .flatten()
                .filter_map(|r| self.hardware.get(r))
                .collect()
        };
        // An agent no indexed Hardware names (yet): every Hardware, as before the index.
        let candidates = if indexed.is_empty() {
            self.hardware.state()
        } else {
            indexed
        };
        for hw in candidates {
            if agent_ids(&hw.spec).contains(&agent) {
                let ns = hw.namespace().unwrap_or_default();
                for w in self.workflows_of_hardware(&ns, &hw.name_any()) {
                    let w = self.fresh(&w);
                    let state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
                    if !state.is_terminal() {
                        self.trigger(&key_of(&w));
                    }
                }
            }
        }
    }

    /// Records the agent ids a Hardware names (every Hardware the watch delivers comes here).
    pub fn index_hardware(&self, hw: &Hardware) {
        let r = ObjectRef::from_obj(hw);
        let mut machines = self.machines.write().unwrap_or_else(|e| e.into_inner());
        for id in agent_ids(&hw.spec) {
            machines.entry(id).or_default().insert(r.clone());
        }
    }

    /// Marks a Workflow as woken by the resync (a dispatch it causes is counted).
    pub fn mark_resync(&self, key: &WorkflowKey) {
        lock(&self.resynced).insert(key.clone());
    }

    /// Whether the resync woke this Workflow (and forgets it).
    pub fn take_resync(&self, key: &WorkflowKey) -> bool {
        lock(&self.resynced).remove(key)
    }

    // ---- dispatch ----

    /// Whether the agent may receive a command now: its presence entry is fresh.
    fn connected(&self, normalized: &str, now: Timestamp) -> Option<String> {
        let presence = self.presence.read().unwrap_or_else(|e| e.into_inner());
        let seen = presence.get(normalized).filter(|s| s.connected)?;
        let ttl = self.config.bus.presence_ttl;
        let age = now.duration_since(seen.heartbeat);
        (age.as_secs_f64() <= ttl.as_secs_f64()).then(|| seen.presented.clone())
    }

    /// Decides whether `w` (with the candidate `status`) is the Workflow to dispatch to its
    /// machine now: the machine is idle (nothing Scheduled, Running or Cancelling on it, no
    /// dispatch in flight), one of its agents is connected, and `w` is the oldest runnable
    /// Pending Workflow of that machine. Returns the agent id as the agent presented it, and a
    /// claim on the machine to hold until the status is written. When an older Workflow should
    /// go first, it is woken instead.
    pub fn choose_agent<'a>(
        &'a self,
        w: &Workflow,
        status: &WorkflowStatus,
        now: Timestamp,
    ) -> Choice<'a> {
        let namespace = w.namespace().unwrap_or_default();
        let hw_ref = ObjectRef::new(&w.spec.hardware_ref.name).within(&namespace);
        let Some(hw) = self.hardware.get(&hw_ref) else {
            return Choice::Wait;
        };
        let machine = agent_ids(&hw.spec);
        let me = key_of(w);
        let mut claims = lock(&self.claims);
        if machine
            .iter()
            .any(|id| claims.get(id).is_some_and(|k| *k != me))
        {
            return Choice::Busy;
        }
        let siblings = self.workflows_of_hardware(&namespace, &w.spec.hardware_ref.name);
        let mut candidates = Vec::with_capacity(siblings.len() + 1);
        {
            let ledger = lock(&self.ledger);
            for s in &siblings {
                if key_of(s) == me {
                    continue;
                }
                let s = Self::overlay(&ledger, s);
                candidates.push(Candidate::from_workflow(&s, Some(&hw.spec)));
            }
        }
        let mut mine = w.clone();
        mine.status = Some(status.clone());
        candidates.push(Candidate::from_workflow(&mine, Some(&hw.spec)));
        let connected: Vec<(String, String)> = machine
            .iter()
            .filter_map(|id| self.connected(id, now).map(|p| (id.clone(), p)))
            .collect();
        let picks = pick_dispatches(&candidates, connected.iter().map(|(id, _)| id), now);
        let Some((key, agent)) = picks.into_iter().next() else {
            return Choice::Wait;
        };
        if key != me {
            drop(claims);
            self.trigger(&key);
            return Choice::Wait;
        }
        let Some(presented) = connected
            .into_iter()
            .find(|(id, _)| *id == agent)
            .map(|(_, p)| p)
        else {
            return Choice::Wait;
        };
        for id in &machine {
            claims.insert(id.clone(), me.clone());
        }
        Choice::Go(
            presented,
            Claim {
                shared: self,
                ids: machine,
            },
        )
    }

    // ---- writes ----

    async fn add_finalizer(&self, w: &Workflow) -> Result<Arc<Workflow>, Error> {
        // A JSON patch that tests the list it extends: it cannot drop a finalizer someone else
        // added meanwhile (the test fails and the caller re-reads), yet needs no
        // resourceVersion, so a concurrent status write does not make it conflict.
        let current = w.metadata.finalizers.clone().filter(|f| !f.is_empty());
        let mut finalizers = current.clone().unwrap_or_default();
        finalizers.push(FINALIZER.to_string());
        let mut patch = vec![
            json!({"op": "test", "path": "/metadata/finalizers", "value": current}),
            json!({"op": "add", "path": "/metadata/finalizers", "value": finalizers}),
        ];
        // The trace id goes in with the finalizer (one write): operators find the Workflow's
        // trace from the object itself (`tinkctl workflow watch` prints it).
        let trace_id = crate::trace::trace_id(&w.uid().unwrap_or_default());
        if w.annotations().get(tink_api::TRACE_ID_ANNOTATION) != Some(&trace_id) {
            patch.push(if w.metadata.annotations.is_none() {
                json!({"op": "add", "path": "/metadata/annotations",
                       "value": {tink_api::TRACE_ID_ANNOTATION: trace_id}})
            } else {
                // RFC 6901: `/` in a key is written `~1`.
                let key = tink_api::TRACE_ID_ANNOTATION.replace('~', "~0").replace('/', "~1");
                json!({"op": "add", "path": format!("/metadata/annotations/{key}"), "value": trace_id})
            });
        }
        self.patch_meta(w, serde_json::Value::Array(patch)).await
    }

    async fn remove_finalizer(&self, w: &Workflow) -> Result<(), Error> {
        let Some(index) = w.finalizers().iter().position(|f| f == FINALIZER) else {
            return Ok(());
        };
        let uid = w.uid().unwrap_or_default();
        // One removal per object at a time: the reconciler seeing the end state while the
        // events consumer removes the finalizer must not write a second time.
        let Some(_releasing) = Releasing::start(self, &uid) else {
            return Ok(());
        };
        // Test the entry at its index, then remove that index: other finalizers survive
        // whatever happened to them; a moved list fails the test and the caller re-reads.
        let path = format!("/metadata/finalizers/{index}");
        let patch = json!([
            {"op": "test", "path": path, "value": FINALIZER},
            {"op": "remove", "path": path},
        ]);
        match self.patch_meta(w, patch).await {
            Ok(_) => Ok(()),
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 404 => Ok(()),
            // The list moved: if the finalizer is gone (the reconciler removed it meanwhile),
            // the removal is done; otherwise the caller re-reads and retries.
            Err(Error::Conflict(key)) => match self.read(&key).await? {
                Some(now) if has_finalizer(&now) => Err(Error::Conflict(key)),
                _ => Ok(()),
            },
            Err(e) => Err(e),
        }
    }

    async fn patch_meta(
        &self,
        w: &Workflow,
        patch: serde_json::Value,
    ) -> Result<Arc<Workflow>, Error> {
        let key = key_of(w);
        let patch: json_patch::Patch = serde_json::from_value(patch)?;
        let params = PatchParams::default();
        self.metrics.write("finalizer");
        match self
            .api(&key.namespace)
            .patch(&key.name, &params, &Patch::<()>::Json(patch))
            .await
        {
            Ok(out) => {
                let out = Arc::new(out);
                self.remember(&out);
                Ok(out)
            }
            // 422: a `test` failed, the finalizers changed since `w` was read.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
                self.metrics.error("finalizer_conflict");
                Err(Error::Conflict(key))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn write_status(
        &self,
        w: &Workflow,
        status: WorkflowStatus,
    ) -> Result<Arc<Workflow>, Error> {
        let key = key_of(w);
        let mut obj = w.clone();
        obj.status = Some(status);
        obj.metadata.managed_fields = None;
        self.metrics.write("status");
        match self
            .api(&key.namespace)
            .replace_status(&key.name, &PostParams::default(), &obj)
            .await
        {
            Ok(out) => {
                let out = Arc::new(out);
                self.remember(&out);
                Ok(out)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Err(Error::Conflict(key)),
            Err(e) => Err(e.into()),
        }
    }

    /// Carries out a transition on `w`: the finalizer first when the Workflow needs it (so
    /// nothing is dispatched before the finalizer protects it), the status write when it
    /// changed, then the effects in order. Returns the Workflow as written.
    pub async fn apply(&self, w: &Arc<Workflow>, t: &Transition) -> Result<Arc<Workflow>, Error> {
        let mut current = w.clone();
        let old_state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
        if t.effects.contains(&Effect::AddFinalizer)
            && !has_finalizer(&current)
            && current.metadata.deletion_timestamp.is_none()
        {
            current = self.add_finalizer(&current).await?;
        }
        if t.status_changed() {
            current = self.write_status(&current, t.status.clone()).await?;
            if is_active(old_state) && !is_active(t.status.state) {
                // The machine is free the moment the status says so: wake its next Workflow
                // now, not after the effects (an effect that fails, such as a finalizer removal
                // racing the reconciler's, must not lose this wake-up).
                let ns = current.namespace().unwrap_or_default();
                self.trigger_pending_of(&ns, &current.spec.hardware_ref.name);
            }
        }
        let uid = current.uid().unwrap_or_default();
        for effect in &t.effects {
            match effect {
                Effect::AddFinalizer => {}
                Effect::PublishStart {
                    agent_id,
                    dispatch_id,
                } => {
                    let span = tracing::info_span!("dispatch", workflow = %key_of(&current), agent = %agent_id, dispatch = %dispatch_id);
                    tink_telemetry::propagation::set_parent(
                        &span,
                        crate::trace::workflow_context(&uid),
                    );
                    let cmd = start_command(dispatch_id, &t.status);
                    let cx = span.in_scope(|| crate::trace::command_context(&uid));
                    let msg_id = format!("{dispatch_id}/start");
                    tink_bus::publish_command(&self.jetstream, agent_id, &cmd, &msg_id, &cx)
                        .instrument(span)
                        .await?;
                    if let Some(created) = current.metadata.creation_timestamp.as_ref() {
                        let waited = Timestamp::now().duration_since(created.0);
                        self.metrics
                            .dispatch_seconds
                            .observe(waited.as_secs_f64().max(0.0));
                    }
                    info!(workflow = %key_of(&current), agent = %agent_id, dispatch = %dispatch_id, "dispatched");
                }
                Effect::RepublishStart {
                    agent_id,
                    dispatch_id,
                } => {
                    self.republish_start(&current, t, agent_id, dispatch_id)
                        .await?
                }
                Effect::PublishStop {
                    agent_id,
                    dispatch_id,
                    reason,
                    message,
                } => {
                    let unconfirmed = w.status.as_ref().is_some_and(|s| {
                        s.state == WorkflowState::Scheduled && s.received_at.is_none()
                    });
                    if unconfirmed {
                        // A start the agent never confirmed must not reach it after the stop's
                        // reason (a timeout, a deletion) ended the workflow: take it out of the
                        // queue first. The stop follows in any case, for a start already in
                        // flight.
                        match tink_bus::withdraw_command(
                            &self.bus.dispatch,
                            &self.bus.events,
                            agent_id,
                            dispatch_id,
                        )
                        .await
                        {
                            Ok(outcome) => {
                                debug!(dispatch = %dispatch_id, ?outcome, "start withdrawn before the stop")
                            }
                            Err(e) => {
                                warn!(dispatch = %dispatch_id, error = %e, "cannot withdraw the start before the stop")
                            }
                        }
                    }
                    let cmd = GetWorkflowsResponse {
                        cmd: Some(get_workflows_response::Cmd::StopWorkflow(
                            get_workflows_response::StopWorkflow {
                                workflow_id: dispatch_id.clone(),
                                reason: Some(reason.as_str().to_string()),
                                message: Some(message.clone()),
                            },
                        )),
                        ..Default::default()
                    };
                    let cx = crate::trace::command_context(&uid);
                    let msg_id = format!("{dispatch_id}/stop");
                    tink_bus::publish_command(&self.jetstream, agent_id, &cmd, &msg_id, &cx)
                        .await?;
                    info!(workflow = %key_of(&current), agent = %agent_id, %reason, "stop sent");
                }
                Effect::KubeEvent {
                    type_,
                    reason,
                    message,
                } => self.kube_event(&current, *type_, *reason, message),
                Effect::RemoveFinalizer => self.remove_finalizer(&current).await?,
            }
        }
        Ok(current)
    }

    /// Tries to withdraw the queued Start of a Scheduled Workflow's dispatch; `true` when it is
    /// proven the agent can never receive it.
    pub async fn withdraw(&self, status: &WorkflowStatus) -> Result<bool, Error> {
        let (Some(agent_id), Some(dispatch_id)) = (&status.agent_id, &status.dispatch_id) else {
            return Ok(false);
        };
        let outcome =
            tink_bus::withdraw_command(&self.bus.dispatch, &self.bus.events, agent_id, dispatch_id)
                .await?;
        debug!(dispatch = %dispatch_id, ?outcome, "withdrawal of a start command");
        Ok(outcome == tink_bus::Withdrawal::Withdrawn)
    }

    /// After a restart: publishes the Start of a Scheduled Workflow again only when it is
    /// provably gone, neither waiting in the agent's queue nor received by any agent process
    /// (no event of the dispatch is stored). This repairs a crash between the status write and
    /// the first publish and never hands a dispatch to an agent twice.
    async fn republish_start(
        &self,
        w: &Workflow,
        t: &Transition,
        agent_id: &str,
        dispatch_id: &str,
    ) -> Result<(), Error> {
        let msg_id = format!("{dispatch_id}/start");
        if tink_bus::queued_command(&self.bus.dispatch, agent_id, &msg_id)
            .await?
            .is_some()
        {
            self.metrics.resumed_start("queued");
            debug!(workflow = %key_of(w), dispatch = %dispatch_id, "the start command still waits in the agent's queue");
            return Ok(());
        }
        if tink_bus::dispatch_received(&self.bus.events, dispatch_id).await? {
            self.metrics.resumed_start("received");
            debug!(workflow = %key_of(w), dispatch = %dispatch_id, "an agent received the dispatch; its events decide");
            return Ok(());
        }
        self.metrics.resumed_start("republished");
        let uid = w.uid().unwrap_or_default();
        let cmd = start_command(dispatch_id, &t.status);
        let cx = crate::trace::command_context(&uid);
        tink_bus::publish_command(&self.jetstream, agent_id, &cmd, &msg_id, &cx).await?;
        info!(workflow = %key_of(w), agent = %agent_id, dispatch = %dispatch_id, "start command was never published; published it");
        Ok(())
    }

    /// Publishes a verdict about a Workflow's agent as an event of its dispatch (so it is
    /// applied after everything the agent stored before it). De-duplicated per dispatch and
    /// reason.
    pub async fn publish_verdict(&self, w: &Workflow, verdict: &Verdict) -> Result<(), Error> {
        let event = crate::events::verdict_event(verdict);
        let uid = w.uid().unwrap_or_default();
        tink_bus::publish_event(
            &self.jetstream,
            &event,
            &crate::trace::command_context(&uid),
        )
        .await?;
        self.metrics.verdict(verdict.reason.as_str());
        warn!(workflow = %key_of(w), dispatch = %verdict.dispatch_id, reason = verdict.reason.as_str(), message = %verdict.message, "failing the workflow on its agent's behalf");
        Ok(())
    }

    /// Removes the finalizer of a Workflow in an end state (a step that crashed before doing
    /// so, or a finalizer added back by hand).
    pub async fn release_finished(&self, w: &Workflow) -> Result<(), Error> {
        self.remove_finalizer(w).await
    }

    /// Records a Kubernetes Event on a Workflow outside a transition.
    pub fn kube_event_on(
        &self,
        w: &Workflow,
        type_: EventType,
        reason: EventReason,
        message: &str,
    ) {
        self.kube_event(w, type_, reason, message);
    }

    fn kube_event(&self, w: &Workflow, type_: EventType, reason: EventReason, message: &str) {
        self.kube_event_raw(KubeEvent {
            regarding: w.object_ref(&()),
            type_,
            reason,
            message: message.to_string(),
        });
    }

    /// Queues a Kubernetes Event about any object (dropped, and counted, when the queue is full).
    pub fn kube_event_raw(&self, event: KubeEvent) {
        if !self.config.kube_events {
            return;
        }
        if self.kube_events.try_send(event).is_err() {
            self.metrics.error("kube_event_dropped");
            debug!("the Kubernetes Event queue is full; an Event is dropped");
        }
    }
}

/// The StartWorkflow command of a dispatch, built from the rendered actions.
pub(crate) fn start_command(dispatch_id: &str, status: &WorkflowStatus) -> GetWorkflowsResponse {
    let actions = status
        .actions
        .iter()
        .map(|a| {
            let r = &a.rendered;
            pw::Action {
                id: a.id.clone(),
                name: r.name.clone(),
                image: r.image.clone(),
                cmd: r.cmd.clone(),
                args: r.args.clone(),
                env: r.env.clone().into_iter().collect(),
                volumes: r.volumes.clone(),
                ns: (r.network_namespace.is_some() || r.pid_namespace.is_some()).then(|| {
                    pw::action::Namespace {
                        pid: r.pid_namespace.clone(),
                        net: r.network_namespace.clone(),
                    }
                }),
                timeout_seconds: a.timeout_limit().map(|d| d.as_secs().max(1)),
            }
        })
        .collect();
    GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StartWorkflow(
            get_workflows_response::StartWorkflow {
                workflow: Some(tink_bus::proto::Workflow {
                    workflow_id: dispatch_id.to_string(),
                    actions,
                    ..Default::default()
                }),
            },
        )),
        ..Default::default()
    }
}

/// Logs an error of a background piece and counts it.
pub(crate) fn report(metrics: &Metrics, what: &str, e: &Error) {
    metrics.error(e.kind());
    match e {
        Error::Conflict(_) => debug!(error = %e, "{what}"),
        _ => warn!(error = %e, "{what}"),
    }
}

#[cfg(test)]
mod tests {
    use tink_api::v1alpha2::{Action, ActionStatus};

    use super::*;

    #[test]
    fn start_commands_carry_both_namespaces() {
        let status = WorkflowStatus {
            actions: vec![
                ActionStatus {
                    id: "0-kexec".into(),
                    rendered: Action {
                        name: "kexec".into(),
                        image: "quay.io/tinkerbell/actions/kexec".into(),
                        pid_namespace: Some("host".into()),
                        ..Action::default()
                    },
                    ..ActionStatus::default()
                },
                ActionStatus {
                    id: "1-plain".into(),
                    rendered: Action {
                        name: "plain".into(),
                        image: "busybox".into(),
                        ..Action::default()
                    },
                    ..ActionStatus::default()
                },
            ],
            ..WorkflowStatus::default()
        };
        let cmd = start_command("ns/wf/uid/1", &status);
        let Some(get_workflows_response::Cmd::StartWorkflow(start)) = cmd.cmd else {
            panic!("a start");
        };
        let actions = start.workflow.expect("workflow").actions;
        let ns = actions[0].ns.as_ref().expect("namespaces");
        assert_eq!(ns.pid.as_deref(), Some("host"));
        assert_eq!(ns.net, None);
        assert_eq!(actions[1].ns, None);
    }
}
