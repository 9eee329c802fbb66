//! `WorkflowSet`: one Template rolled over the Hardware a label selector picks, a few machines at
//! a time, halting when too many fail (Tinkerbell roadmap#40 names the kind `WorkflowSet`).
//!
//! The controller (services/controller, `rollout`) creates one Workflow per selected, approved
//! Hardware, named `<set>-<hardware>` (shortened with a hash when too long), owned by the set
//! and labelled [`WORKFLOW_SET_LABEL`]. It never has more than `maxConcurrent` of them unfinished
//! at a time, creates none while `paused` or once `maxFailures` of them failed (`Halted`), and
//! deleting the set deletes its Workflows, which cancels the running ones on their machines.
//! The Workflows are the record of which machine ran: a Workflow of the set deleted by hand
//! while the set exists is created again for its machine (to skip a machine, take it out of the
//! selector).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::LocalObjectReference;
use super::condition::ConditionStatus;
use crate::serde_util::{empty_as_none, is_false};

/// The label on every Workflow a WorkflowSet created: the set's name.
pub const WORKFLOW_SET_LABEL: &str = "tinkerbell.org/workflow-set";

/// The finalizer the controller keeps on a WorkflowSet until its Workflows are deleted.
pub const WORKFLOW_SET_FINALIZER: &str = "tinkerbell.org/workflow-set";

/// The failure budget when `maxFailures` is absent: the first failed Workflow halts the rollout.
pub const DEFAULT_MAX_FAILURES: i32 = 1;

/// Runs one Template on every approved Hardware its `hardwareSelector` matches, at most
/// `maxConcurrent` at a time, halting once `maxFailures` Workflows failed.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha2",
    kind = "WorkflowSet",
    plural = "workflowsets",
    singular = "workflowset",
    namespaced,
    shortname = "wfs",
    category = "tinkerbell",
    status = "WorkflowSetStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "WorkflowSet rolls one Template over the Hardware a label selector matches, with a concurrency limit and a failure budget.",
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.state",
        description = "Progressing, Paused, Halted or Completed"
    ),
    printcolumn(
        name = "Total",
        type_ = "integer",
        json_path = ".status.total",
        description = "Approved Hardware the selector matches"
    ),
    printcolumn(
        name = "Pending",
        type_ = "integer",
        json_path = ".status.pending",
        description = "Machines without a Workflow yet"
    ),
    printcolumn(
        name = "Running",
        type_ = "integer",
        json_path = ".status.running",
        description = "Workflows not finished"
    ),
    printcolumn(
        name = "Succeeded",
        type_ = "integer",
        json_path = ".status.succeeded",
        description = "Workflows that succeeded"
    ),
    printcolumn(
        name = "Failed",
        type_ = "integer",
        json_path = ".status.failed",
        description = "Workflows that failed"
    ),
    printcolumn(
        name = "Template",
        type_ = "string",
        json_path = ".spec.templateRef.name",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSetSpec {
    /// The Hardware to run on, in the set's namespace (`matchLabels`, `matchExpressions`).
    /// Required and not empty: a rollout over every machine must say so with an expression.
    /// Hardware that is not approved (`spec.discovery.approved`) is counted in
    /// `status.unapproved` and gets no Workflow until it is approved.
    pub hardware_selector: LabelSelector,

    /// The Template every Workflow runs, in the set's namespace.
    pub template_ref: LocalObjectReference,

    /// Data injected into the Template (as in `Workflow.spec.templateData`), the same for every
    /// machine; the Hardware's own fields are available as `.Hardware`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "template_data_schema")]
    pub template_data: BTreeMap<String, serde_json::Value>,

    /// The most Workflows of the set unfinished (Pending, Scheduled, Running, Cancelling) at
    /// once. At least 1.
    #[schemars(range(min = 1))]
    pub max_concurrent: i32,

    /// The failure budget: once this many of the set's Workflows have failed the rollout is
    /// `Halted` and creates no more (those running finish). At least 1; 1 when absent. Raise
    /// it to continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_failures: Option<i32>,

    /// Paused: no new Workflows are created (those running finish). Set back to false to
    /// resume.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
}

fn template_data_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "Data injected into the Template, the same for every machine.",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

impl WorkflowSetSpec {
    /// The failure budget in force.
    pub fn failure_budget(&self) -> i32 {
        self.max_failures.unwrap_or(DEFAULT_MAX_FAILURES)
    }
}

/// Where a rollout stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum WorkflowSetState {
    /// Workflows are being created and run.
    #[default]
    Progressing,
    /// `spec.paused`: no new Workflows; those created run on.
    Paused,
    /// The failure budget is spent: no new Workflows; those created run on.
    Halted,
    /// Every selected machine has a finished Workflow.
    Completed,
}

impl WorkflowSetState {
    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Progressing => "Progressing",
            Self::Paused => "Paused",
            Self::Halted => "Halted",
            Self::Completed => "Completed",
        }
    }

    /// No further progress unless the spec or the selected Hardware changes.
    pub fn is_done(self) -> bool {
        matches!(self, Self::Halted | Self::Completed)
    }
}

impl fmt::Display for WorkflowSetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of a WorkflowSet condition.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum WorkflowSetConditionType {
    /// `True` while `spec.paused`.
    Paused,
    /// `True` (`FailureBudgetSpent`) once `maxFailures` Workflows failed.
    Halted,
    /// `True` once every selected machine has a finished Workflow.
    Completed,
}

/// An observation about a WorkflowSet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSetCondition {
    /// Type of condition.
    #[serde(rename = "type")]
    pub type_: WorkflowSetConditionType,
    /// Status of the condition.
    pub status: ConditionStatus,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// A short CamelCase reason.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub reason: Option<String>,
    /// Details for people.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub message: Option<String>,
}

/// The observed state of a rollout, written by the controller through the status subresource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSetStatus {
    /// Where the rollout stands.
    #[serde(default)]
    pub state: WorkflowSetState,
    /// Approved Hardware the selector matches, plus Hardware no longer matching whose Workflow
    /// of this set still exists.
    #[serde(default)]
    pub total: i32,
    /// Approved, matched machines without a Workflow of the set yet.
    #[serde(default)]
    pub pending: i32,
    /// The set's Workflows not finished (Pending, Scheduled, Running, Cancelling).
    #[serde(default)]
    pub running: i32,
    /// The set's Workflows that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// The set's Workflows that failed (canceled ones are not counted).
    #[serde(default)]
    pub failed: i32,
    /// Matched Hardware that is not approved, so gets no Workflow.
    #[serde(default)]
    pub unapproved: i32,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Paused, Halted, Completed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WorkflowSetCondition>,
}

impl WorkflowSetStatus {
    /// The condition of this type, if set.
    pub fn condition(&self, type_: WorkflowSetConditionType) -> Option<&WorkflowSetCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Sets the condition of its type, keeping `lastTransitionTime` when the status is the same.
    pub fn set_condition(&mut self, mut cond: WorkflowSetCondition) {
        match self.conditions.iter_mut().find(|c| c.type_ == cond.type_) {
            Some(existing) => {
                if existing.status == cond.status {
                    cond.last_transition_time = existing.last_transition_time.clone();
                }
                *existing = cond;
            }
            None => self.conditions.push(cond),
        }
    }
}
