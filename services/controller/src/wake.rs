//! Wake-ups: which Workflows to look at when something changes, and the bounded queue that
//! asks the reconciler to look at them.
//!
//! Two indexes, fed by the watches before the caches hold what they deliver, answer "which
//! Workflows does this change concern" without a scan of every stored object: the Workflows
//! of each Hardware (this module's, a superset checked against the cache when used), and the
//! Hardware of each agent id (the shared [`tink_hardware_index::Index`], which the Hardware
//! watch keeps current through an [`tink_hardware_index::Applier`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use kube::ResourceExt as _;
use kube::runtime::reflector::ObjectRef;
use tink_api::AgentId;
use tink_api::v1alpha2::{Hardware, Workflow, WorkflowState};
use tink_hardware_index::{Claims, Index};
use tink_workflow::WorkflowKey;
use tokio::sync::mpsc;

use crate::keys::key_of;
use crate::ledger::Ledger;
use crate::locks::{lock, read, write};
use crate::metrics::Metrics;

/// (namespace, Hardware name) -> Workflows naming it.
type WorkflowsByHardware = HashMap<(String, String), HashSet<ObjectRef<Workflow>>>;

/// The wake-up indexes and the reconciler's trigger queue.
pub(crate) struct Wake {
    metrics: Metrics,
    /// The freshest view, to judge a Workflow's state before waking it.
    ledger: Arc<Ledger>,
    /// Every Hardware by the agent ids it claims, so an agent connecting looks at its own
    /// machine instead of every Hardware (10,000 agents reconnecting at once were 10^8
    /// comparisons).
    hardware: Arc<Index<Hardware>>,
    triggers: mpsc::Sender<ObjectRef<Workflow>>,
    /// (namespace, Hardware name) -> the Workflows that named it when the watch delivered
    /// them, so a dispatch, a completion or a Hardware change looks at one machine's Workflows
    /// instead of every stored Workflow (the cost per workflow grew with the number stored:
    /// 10.6 ms of controller CPU per workflow with 50,000 stored, 1.9 with 1,000). A superset:
    /// entries are checked against the store when used, and the deleted ones dropped then.
    by_hardware: RwLock<WorkflowsByHardware>,
    /// Workflows the last resync woke (to count the dispatches it caused).
    resynced: Mutex<HashSet<WorkflowKey>>,
}

impl Wake {
    pub fn new(
        metrics: Metrics,
        ledger: Arc<Ledger>,
        hardware: Arc<Index<Hardware>>,
        triggers: mpsc::Sender<ObjectRef<Workflow>>,
    ) -> Self {
        Self {
            metrics,
            ledger,
            hardware,
            triggers,
            by_hardware: Default::default(),
            resynced: Default::default(),
        }
    }

    /// Asks the reconciler to look at a Workflow. The queue is bounded: when it is full the
    /// trigger is dropped and counted (`errors{kind="trigger_dropped"}`), and the periodic
    /// resync looks at the Workflow instead.
    pub fn trigger(&self, key: &WorkflowKey) {
        let r = ObjectRef::new(&key.name).within(&key.namespace);
        if let Err(mpsc::error::TrySendError::Full(_)) = self.triggers.try_send(r) {
            self.metrics.error("trigger_dropped");
        }
    }

    /// The Workflows of a Hardware (namespace and name), from the cache, through the index.
    pub fn workflows_of_hardware(&self, namespace: &str, hardware: &str) -> Vec<Arc<Workflow>> {
        let workflows = self.ledger.workflows();
        let key = (namespace.to_string(), hardware.to_string());
        let mut found = Vec::new();
        let mut gone = Vec::new();
        {
            let index = read(&self.by_hardware);
            for r in index.get(&key).into_iter().flatten() {
                match workflows.get(r) {
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
            let mut index = write(&self.by_hardware);
            if let Some(refs) = index.get_mut(&key) {
                for r in &gone {
                    // Still stored (under another Hardware): indexed there by its own delivery.
                    if workflows.get(r).is_none_or(|w| {
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
        let mut index = write(&self.by_hardware);
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
        let mut index = write(&self.by_hardware);
        index.entry(key).or_default().insert(r);
    }

    /// Wakes the Pending Workflows of a Hardware (its agent became idle or connected).
    pub fn trigger_pending_of(&self, namespace: &str, hardware: &str) {
        for w in self.workflows_of_hardware(namespace, hardware) {
            let w = self.ledger.fresh(&w);
            let state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
            if state == WorkflowState::Pending && w.metadata.deletion_timestamp.is_none() {
                self.trigger(&key_of(&w));
            }
        }
    }

    /// Wakes the unfinished Workflows of the machine an agent id belongs to (Pending ones may
    /// be dispatched; active ones may need a verdict about a restarted agent).
    pub fn trigger_agent(&self, agent: &str) {
        // No Hardware claims what is no agent id in any spelling (the CRD keeps its keys
        // lower-case MACs), and no server admits such an agent.
        let Ok(agent) = AgentId::normalize(agent) else {
            return;
        };
        let mut machines = self.hardware.agent_claimants(&agent);
        // An agent no indexed Hardware names: every Hardware that claims it, as before the
        // index.
        if machines.is_empty() {
            machines = self.hardware.all();
            machines.retain(|hw| {
                Claims::of_hardware(hw)
                    .agent_ids
                    .iter()
                    .any(|(id, _)| *id == agent)
            });
        }
        for hw in machines {
            let ns = hw.namespace().unwrap_or_default();
            for w in self.workflows_of_hardware(&ns, &hw.name_any()) {
                let w = self.ledger.fresh(&w);
                let state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
                if !state.is_terminal() {
                    self.trigger(&key_of(&w));
                }
            }
        }
    }

    /// Wakes every unfinished Workflow (the unfinished ones of the whole cache), marking each
    /// as woken by the resync; returns how many.
    pub fn resync(&self) -> usize {
        let mut woken = 0usize;
        for w in self.ledger.workflows().state() {
            let w = self.ledger.fresh(&w);
            let state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
            if !state.is_terminal() {
                self.mark_resync(&key_of(&w));
                self.trigger(&key_of(&w));
                woken += 1;
            }
        }
        woken
    }

    /// Wakes every unfinished Workflow (after the term's backlog of events is applied).
    pub fn trigger_unfinished(&self) {
        for w in self.ledger.workflows().state() {
            let w = self.ledger.fresh(&w);
            let state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
            if !state.is_terminal() {
                self.trigger(&key_of(&w));
            }
        }
    }

    /// Marks a Workflow as woken by the resync (a dispatch it causes is counted).
    fn mark_resync(&self, key: &WorkflowKey) {
        lock(&self.resynced).insert(key.clone());
    }

    /// Whether the resync woke this Workflow (and forgets it).
    pub fn take_resync(&self, key: &WorkflowKey) -> bool {
        lock(&self.resynced).remove(key)
    }
}
