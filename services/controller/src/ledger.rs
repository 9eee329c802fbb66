//! The freshest view of the Workflows: what this term wrote (or read after a conflict) is newer
//! than the watch cache until the watch catches up, and a step must never act on the older
//! version. The ledger keeps those versions and overlays them on the cache; it also remembers
//! which Workflows this term has looked at (the first look resumes a Workflow).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt as _};
use tink_api::v1alpha2::Workflow;
use tink_workflow::WorkflowKey;

use crate::error::StepError;
use crate::keys::{key_of, rv_of};
use crate::locks::lock;

/// The latest version of a Workflow this replica wrote; newer than the watch cache until the
/// watch catches up.
struct Known {
    object: Arc<Workflow>,
    rv: u64,
    at: Instant,
}

/// The term's own knowledge of each Workflow, over the watch cache.
pub(crate) struct Ledger {
    client: Client,
    /// The watch cache of Workflows.
    workflows: Store<Workflow>,
    known: Mutex<HashMap<WorkflowKey, Known>>,
    /// Workflow uids stepped with `Resume` in this term.
    resumed: Mutex<HashSet<String>>,
}

impl Ledger {
    pub fn new(client: Client, workflows: Store<Workflow>) -> Self {
        Self {
            client,
            workflows,
            known: Mutex::new(HashMap::new()),
            resumed: Mutex::new(HashSet::new()),
        }
    }

    /// The watch cache under the ledger.
    pub fn workflows(&self) -> &Store<Workflow> {
        &self.workflows
    }

    /// `w` or, when this replica wrote a newer version of the same object, that version.
    pub fn fresh(&self, w: &Arc<Workflow>) -> Arc<Workflow> {
        let known = lock(&self.known);
        overlay(&known, w)
    }

    /// [`Self::fresh`] of each of `ws`, all against the same instant of the ledger.
    pub fn fresh_all(&self, ws: &[Arc<Workflow>]) -> Vec<Arc<Workflow>> {
        let known = lock(&self.known);
        ws.iter().map(|w| overlay(&known, w)).collect()
    }

    /// The freshest known version of a Workflow from the cache and the ledger.
    pub fn cached(&self, key: &WorkflowKey) -> Option<Arc<Workflow>> {
        let r = ObjectRef::new(&key.name).within(&key.namespace);
        let cached = self.workflows.get(&r);
        let known = lock(&self.known);
        cached.map(|w| overlay(&known, &w))
    }

    /// Reads a Workflow from the API server (after a conflict); `None` when it is gone.
    pub async fn read(&self, key: &WorkflowKey) -> Result<Option<Arc<Workflow>>, StepError> {
        let api: Api<Workflow> = Api::namespaced(self.client.clone(), &key.namespace);
        let w = api.get_opt(&key.name).await?;
        Ok(w.map(|w| {
            let w = Arc::new(w);
            self.remember(&w);
            w
        }))
    }

    /// Keeps `w` (as the API server returned it) unless a newer version is known.
    pub fn remember(&self, w: &Arc<Workflow>) {
        let rv = rv_of(w);
        let mut known = lock(&self.known);
        let key = key_of(w);
        match known.get(&key) {
            Some(k) if k.object.uid() == w.uid() && k.rv >= rv => {}
            _ => {
                known.insert(
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
        let mut known = lock(&self.known);
        known.retain(|key, k| {
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

    /// Forgets the resume marks of Workflows no longer cached.
    pub fn prune(&self) {
        let live: HashSet<String> = self
            .workflows
            .state()
            .iter()
            .filter_map(|w| w.metadata.uid.clone())
            .collect();
        lock(&self.resumed).retain(|uid| live.contains(uid));
    }
}

fn overlay(known: &HashMap<WorkflowKey, Known>, w: &Arc<Workflow>) -> Arc<Workflow> {
    match known.get(&key_of(w)) {
        Some(k) if k.object.uid() == w.uid() && k.rv > rv_of(w) => k.object.clone(),
        _ => w.clone(),
    }
}
