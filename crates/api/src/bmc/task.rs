//! `Task`: one action of a Job, against a copy of its Machine's connection.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Action, ConditionStatus, Connection};

/// The desired state of a Task.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bmc.tinkerbell.org",
    version = "v1alpha1",
    kind = "Task",
    plural = "tasks",
    singular = "task",
    namespaced,
    shortname = "t",
    category = "tinkerbell",
    status = "TaskStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Task is one baseboard management action, usually one step of a Job.",
    printcolumn(
        name = "Power",
        type_ = "string",
        json_path = ".spec.task.powerAction",
        description = "The power action, if it is one"
    ),
    printcolumn(
        name = "Completed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Completed\")].status",
        description = "Whether the task completed"
    ),
    printcolumn(
        name = "Failed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Failed\")].status",
        description = "Whether the task failed"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// The action.
    pub task: Action,
    /// The BMC's connection (copied from the Job's Machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<Connection>,
}

/// The type of a Task condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaskConditionType {
    /// The action completed (a power action: the BMC reports the target state).
    Completed,
    /// The action failed; the message is the provider's error.
    Failed,
}

/// An observation about a Task.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct TaskCondition {
    /// The condition's type.
    #[serde(rename = "type")]
    pub type_: TaskConditionType,
    /// `True` or `False`.
    pub status: ConditionStatus,
    /// Details, e.g. the provider's error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The observed state of a Task.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Observations: `Completed`, `Failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<TaskCondition>,
    /// When the Task started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the Task completed (set only on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

impl TaskStatus {
    /// Whether condition `t` is present with `status`.
    pub fn has_condition(&self, t: TaskConditionType, status: ConditionStatus) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == t && c.status == status)
    }

    /// Sets condition `t`, adding it when absent. Returns whether anything changed.
    pub fn set_condition(
        &mut self,
        t: TaskConditionType,
        status: ConditionStatus,
        message: &str,
    ) -> bool {
        match self.conditions.iter_mut().find(|c| c.type_ == t) {
            Some(c) if c.status == status && c.message == message => false,
            Some(c) => {
                c.status = status;
                c.message = message.to_string();
                true
            }
            None => {
                self.conditions.push(TaskCondition {
                    type_: t,
                    status,
                    message: message.to_string(),
                });
                true
            }
        }
    }
}
