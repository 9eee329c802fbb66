//! The Workflow writes: the status (a replace with the resourceVersion read) and our finalizer
//! (JSON patches that test what they change). Every object written goes into the ledger, so
//! the next step of this term sees it before the watch delivers it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use tink_api::v1alpha2::{Workflow, WorkflowStatus};

use crate::config::FINALIZER;
use crate::error::StepError;
use crate::keys::{has_finalizer, key_of};
use crate::ledger::Ledger;
use crate::locks::lock;
use crate::metrics::Metrics;

/// The writer of Workflow status and finalizers.
pub(crate) struct Writes {
    client: Client,
    metrics: Metrics,
    ledger: Arc<Ledger>,
    /// Workflow uids whose finalizer removal is in flight.
    releasing: Mutex<HashSet<String>>,
}

/// Marks a finalizer removal in flight for one object uid.
struct Releasing<'a> {
    writes: &'a Writes,
    uid: String,
}

impl<'a> Releasing<'a> {
    fn start(writes: &'a Writes, uid: &str) -> Option<Self> {
        lock(&writes.releasing)
            .insert(uid.to_string())
            .then(|| Self {
                writes,
                uid: uid.to_string(),
            })
    }
}

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        lock(&self.writes.releasing).remove(&self.uid);
    }
}

impl Writes {
    pub fn new(client: Client, metrics: Metrics, ledger: Arc<Ledger>) -> Self {
        Self {
            client,
            metrics,
            ledger,
            releasing: Mutex::new(HashSet::new()),
        }
    }

    fn api(&self, namespace: &str) -> Api<Workflow> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Adds our finalizer (and the trace id annotation) to `w`; returns the Workflow as
    /// written.
    pub async fn add_finalizer(&self, w: &Workflow) -> Result<Arc<Workflow>, StepError> {
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

    /// Removes our finalizer from `w`, once per object at a time.
    pub async fn remove_finalizer(&self, w: &Workflow) -> Result<(), StepError> {
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
            Err(StepError::Kube(kube::Error::Api(e))) if e.code == 404 => Ok(()),
            // The list moved: if the finalizer is gone (the reconciler removed it meanwhile),
            // the removal is done; otherwise the caller re-reads and retries.
            Err(StepError::Conflict(key)) => match self.ledger.read(&key).await? {
                Some(now) if has_finalizer(&now) => Err(StepError::Conflict(key)),
                _ => Ok(()),
            },
            Err(e) => Err(e),
        }
    }

    async fn patch_meta(
        &self,
        w: &Workflow,
        patch: serde_json::Value,
    ) -> Result<Arc<Workflow>, StepError> {
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
                self.ledger.remember(&out);
                Ok(out)
            }
            // 422: a `test` failed, the finalizers changed since `w` was read.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
                self.metrics.error("finalizer_conflict");
                Err(StepError::Conflict(key))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the status of `w` (a conflict when `w` is not the stored version); returns
    /// the Workflow as written.
    pub async fn write_status(
        &self,
        w: &Workflow,
        status: WorkflowStatus,
    ) -> Result<Arc<Workflow>, StepError> {
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
                self.ledger.remember(&out);
                Ok(out)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Err(StepError::Conflict(key)),
            Err(e) => Err(e.into()),
        }
    }
}
