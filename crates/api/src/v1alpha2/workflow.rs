//! `Workflow`: one run of a Template on a Hardware.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::boot::{BootOptions, BootOptionsStatus};
use super::condition::{Condition, ConditionType, set_condition};
use super::{Action, LocalObjectReference, rules};
use crate::duration::Timeout;
use crate::serde_util::{empty_as_none, is_zero_u32, null_as_default};

/// A set of actions to run on a specific Hardware. Workflows execute once and should be
/// considered ephemeral; `hardwareRef`, `templateRef` and `templateData` are immutable.
/// Deleting a Workflow cancels it (seeds/004).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha2",
    kind = "Workflow",
    plural = "workflows",
    singular = "workflow",
    namespaced,
    shortname = "wf",
    category = "tinkerbell",
    status = "WorkflowStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Workflow describes a set of actions to be run on a specific Hardware. Workflows execute once and should be considered ephemeral.",
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.state",
        description = "State of the workflow such as Pending, Running etc"
    ),
    printcolumn(
        name = "Hardware",
        type_ = "string",
        json_path = ".spec.hardwareRef.name",
        description = "Hardware object that runs the workflow"
    ),
    printcolumn(
        name = "Template",
        type_ = "string",
        json_path = ".spec.templateRef.name",
        description = "Template to run on the associated Hardware"
    ),
    printcolumn(
        name = "Agent",
        type_ = "string",
        json_path = ".status.agentId",
        description = "Agent the workflow is dispatched to",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    selectable = ".spec.hardwareRef.name"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": rules::TEMPLATE_DATA_PRESENCE, "message": rules::TEMPLATE_DATA_PRESENCE_MSG},
    {"rule": rules::HARDWARE_REF_PRESENCE, "message": rules::HARDWARE_REF_PRESENCE_MSG},
    {"rule": rules::TEMPLATE_REF_PRESENCE, "message": rules::TEMPLATE_REF_PRESENCE_MSG}
]))]
pub struct WorkflowSpec {
    /// HardwareRef is a reference to the Hardware this workflow executes on, in the
    /// Workflow's namespace. Immutable. Absent only on Workflows converted from a v1alpha1
    /// Workflow that had none (older Tinkerbell releases named the machine by MAC in
    /// `hardwareMap` only; `tinkctl migrate` resolves it); such a Workflow waits with reason
    /// `HardwareNotFound`.
    #[serde(default, skip_serializing_if = "LocalObjectReference::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": rules::IMMUTABLE, "message": rules::HARDWARE_REF_IMMUTABLE_MSG}
    ]))]
    pub hardware_ref: LocalObjectReference,

    /// TemplateRef is a reference to the Template used to render workflow actions, in the
    /// Workflow's namespace. Immutable. Absent only on Workflows converted from a v1alpha1
    /// Workflow that had none; such a Workflow waits with reason `TemplateNotFound`.
    #[serde(default, skip_serializing_if = "LocalObjectReference::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": rules::IMMUTABLE, "message": rules::TEMPLATE_REF_IMMUTABLE_MSG}
    ]))]
    pub template_ref: LocalObjectReference,

    /// TemplateData is user defined data that is injected during template rendering (as
    /// `.<key>`, e.g. `{{ .device_1 }}`). Any JSON values. Immutable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "template_data_schema")]
    pub template_data: BTreeMap<String, serde_json::Value>,

    /// Timeout is the time the workflow has to complete, counted from the first action's start
    /// (`status.startedAt`), written as a Go / Kubernetes duration string: `90m`, `1h30m`,
    /// `45s`, `1.5h`. Absent or `0` means no timeout. (The seed's Go `time.Duration` would be
    /// integer nanoseconds, which nobody writes by hand.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Timeout>,

    /// BootOptions control how the Hardware boots for this Workflow through its BMC
    /// (Tinkerbell's `bootOptions`, same names): `bootMode` (`netboot`, `isoboot` with
    /// `isoURL`, `customboot` with `custombootConfig`) makes the controller create BMC Jobs
    /// before dispatch (and after success, for `isoboot` and `customboot`);
    /// `toggleAllowNetboot` allows netboot on the Hardware before the run and disallows it after
    /// success. Absent: the machine is expected to boot into the OSIE by itself. Immutable once
    /// the controller acted on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_options: Option<BootOptions>,
}

fn template_data_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "TemplateData is user defined data that is injected during template rendering.",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-validations": [
            {"rule": rules::IMMUTABLE, "message": rules::TEMPLATE_DATA_IMMUTABLE_MSG}
        ]
    })
}

impl WorkflowSpec {
    /// The workflow timeout to enforce, `None` when there is none (absent or zero).
    pub fn timeout_limit(&self) -> Option<Duration> {
        self.timeout.as_ref().and_then(Timeout::limit)
    }
}

/// The state of a Workflow (seeds/000 plus seeds/004's `Scheduled`, `Cancelling`, `Canceled`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum WorkflowState {
    /// Waiting to be dispatched to its agent (the initial state; also after a rejection).
    #[default]
    Pending,
    /// Dispatched to the agent, which has not reported the first action started yet.
    Scheduled,
    /// The first action has been started and the workflow is in progress.
    Running,
    /// All actions succeeded. Terminal.
    Succeeded,
    /// An action failed, a timeout tripped, rendering failed or the agent was lost. Terminal. The
    /// `Succeeded` condition's reason says which: the action's own reason (or `ActionFailed`),
    /// `ScheduledTimeout`, `WorkflowTimeout`, `ActionTimeout`, `RenderFailed`, `NoActions`,
    /// `AgentRestarted` (another instance of the agent connected while the workflow was active:
    /// the machine rebooted or the agent restarted mid-workflow) or `AgentLost` (the agent was
    /// disconnected longer than the controller's limit, 15 minutes by default).
    Failed,
    /// The workflow was deleted while Scheduled or Running; the agent is being told to stop.
    Cancelling,
    /// Cancellation finished (or a Pending workflow was deleted). Terminal.
    Canceled,
}

impl WorkflowState {
    /// Every state, in declaration order.
    pub const ALL: [Self; 7] = [
        Self::Pending,
        Self::Scheduled,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelling,
        Self::Canceled,
    ];

    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Scheduled => "Scheduled",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Cancelling => "Cancelling",
            Self::Canceled => "Canceled",
        }
    }

    /// An end state: no further transition happens.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Canceled)
    }
}

impl fmt::Display for WorkflowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of an Action.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ActionState {
    /// Awaiting execution.
    #[default]
    Pending,
    /// Execution has begun.
    Running,
    /// Completed successfully. Terminal.
    Succeeded,
    /// Failed (including timeouts); see `failureReason` and `failureMessage`. Terminal.
    Failed,
    /// Addition: the workflow was canceled or failed before this action finished. Terminal.
    Canceled,
}

impl ActionState {
    /// Every state, in declaration order.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Canceled,
    ];

    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Canceled => "Canceled",
        }
    }

    /// An end state.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Canceled)
    }
}

impl fmt::Display for ActionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observed state of a Workflow. Written by the controller only.
///
/// Additions to seeds/000, all used by the controller to schedule and supervise:
/// - `agentId`: the agent the workflow is (or was last) dispatched to;
/// - `dispatchId`: identifies the current dispatch attempt; agent events carry it, so events of
///   an older attempt (or of a deleted Workflow of the same name) are recognised as stale;
/// - `dispatchAttempts`: how many times the workflow has been dispatched; drives the growing
///   back-off after rejections;
/// - `nextAttemptAt`: after a rejection, the workflow is not dispatched again before this time;
/// - `observedGeneration`: the `metadata.generation` the status was computed from;
/// - `bootOptions`: the boot steps taken for `spec.bootOptions` (Tinkerbell's field).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    /// Actions is the list of rendered actions and their states, in execution order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub actions: Vec<ActionStatus>,

    /// StartedAt is the time the first action was requested. Absent: not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// LastTransition is the observed time when State transitioned last.
    #[serde(
        default,
        rename = "lastTransitioned",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_transition: Option<Time>,

    /// State is the current state of the workflow.
    #[serde(default)]
    pub state: WorkflowState,

    /// Conditions details a set of observations about the Workflow.
    #[serde(default, deserialize_with = "null_as_default")]
    pub conditions: Vec<Condition>,

    /// Addition: the id of the agent the workflow is (or was last) dispatched to.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub agent_id: Option<String>,

    /// Addition: identifies the current dispatch attempt. Set when the workflow becomes
    /// `Scheduled`; agent events carrying another id are stale and ignored.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub dispatch_id: Option<String>,

    /// Addition: when the agent confirmed it has the current dispatch (its delivery receipt,
    /// or its first event about the dispatch). Until then the dispatch may still wait in the
    /// agent's queue and `Scheduled` is bounded by the scheduled timeout; after it the agent is
    /// supervised by the workflow timeout and the agent-loss rules (`AgentRestarted`,
    /// `AgentLost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_at: Option<Time>,

    /// Addition: the instance id of the agent process that received the current dispatch. An
    /// agent that shows up with another instance id (it restarted) while the workflow is active
    /// fails it with reason `AgentRestarted`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub agent_instance: Option<String>,

    /// Addition: how many times the workflow has been dispatched (1 after the first dispatch).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub dispatch_attempts: u32,

    /// Addition: after a rejection, the earliest time the workflow may be dispatched again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Time>,

    /// Addition: the `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// BootOptions records the boot steps the controller took for `spec.bootOptions`: whether
    /// it allowed and later disallowed netboot on the Hardware, and each BMC Job it created (by
    /// name, with its UID and whether it completed). Once anything is recorded here
    /// `spec.bootOptions` can no longer change.
    #[serde(default, skip_serializing_if = "BootOptionsStatus::is_empty")]
    pub boot_options: BootOptionsStatus,
}

impl WorkflowStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Sets a condition (see [`set_condition`]); returns whether anything changed.
    pub fn set_condition(&mut self, cond: Condition) -> bool {
        set_condition(&mut self.conditions, cond)
    }

    /// The action status with this id.
    pub fn action(&self, id: &str) -> Option<&ActionStatus> {
        self.actions.iter().find(|a| a.id == id)
    }

    /// The action status with this id, mutably.
    pub fn action_mut(&mut self, id: &str) -> Option<&mut ActionStatus> {
        self.actions.iter_mut().find(|a| a.id == id)
    }
}

/// Status information about an action.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionStatus {
    /// Rendered is the rendered action.
    #[serde(default)]
    #[schemars(transform = crate::v1alpha2::no_default)]
    pub rendered: Action,

    /// ID uniquely identifies the action status within the workflow.
    pub id: String,

    /// StartedAt is the time the action was requested. Absent: not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// LastTransition is the observed time when State transitioned last.
    #[serde(
        default,
        rename = "lastTransitioned",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_transition: Option<Time>,

    /// State is the current state of the action.
    #[serde(default)]
    pub state: ActionState,

    /// FailureReason is a short CamelCase word or phrase describing why the action failed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub failure_reason: Option<String>,

    /// FailureMessage is a free-form user friendly message describing why the action failed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub failure_message: Option<String>,
}

impl ActionStatus {
    /// The action timeout to enforce, `None` when there is none.
    pub fn timeout_limit(&self) -> Option<Duration> {
        self.rendered.timeout.as_ref().and_then(Timeout::limit)
    }
}
