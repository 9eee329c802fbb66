//! What the controller reads off a Workflow object to name it and judge it: its key, its
//! reference for the state machine, its resourceVersion, and whether it carries our finalizer.

use kube::ResourceExt as _;
use tink_api::v1alpha2::{Workflow, WorkflowState};
use tink_workflow::{WorkflowKey, WorkflowRef};

use crate::config::FINALIZER;

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

pub(crate) fn rv_of(w: &Workflow) -> u64 {
    w.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn has_finalizer(w: &Workflow) -> bool {
    w.finalizers().iter().any(|f| f == FINALIZER)
}

/// Whether a Workflow in this state holds its machine (a dispatch is out).
pub(crate) fn is_active(state: WorkflowState) -> bool {
    matches!(
        state,
        WorkflowState::Scheduled | WorkflowState::Running | WorkflowState::Cancelling
    )
}
