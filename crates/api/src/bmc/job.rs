//! `Job`: an ordered list of actions for one Machine.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Action, ConditionStatus};

/// A reference to a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct MachineRef {
    /// The Machine's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The Machine's namespace.
    #[schemars(length(min = 1))]
    pub namespace: String,
}

/// The desired state of a Job.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bmc.tinkerbell.org",
    version = "v1alpha1",
    kind = "Job",
    plural = "jobs",
    singular = "job",
    namespaced,
    shortname = "j",
    category = "tinkerbell",
    status = "JobStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Job is an ordered list of baseboard management actions for one Machine.",
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".spec.machineRef.name",
        description = "The Machine"
    ),
    printcolumn(
        name = "Running",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Running\")].status",
        description = "Whether the Job is running"
    ),
    printcolumn(
        name = "Completed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Completed\")].status",
        description = "Whether every task completed"
    ),
    printcolumn(
        name = "Failed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Failed\")].status",
        description = "Whether a task failed"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// The Machine every task runs against.
    pub machine_ref: MachineRef,
    /// The actions, run in order: each task waits for the one before it to complete, the
    /// first failure stops the Job (`Failed`), and `Completed` is set once all succeeded.
    #[schemars(length(min = 1))]
    pub tasks: Vec<Action>,
}

/// The type of a Job condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum JobConditionType {
    /// The Job is running its tasks.
    Running,
    /// Every task completed.
    Completed,
    /// A task failed; the message is the provider's error.
    Failed,
}

/// An observation about a Job.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct JobCondition {
    /// The condition's type.
    #[serde(rename = "type")]
    pub type_: JobConditionType,
    /// `True` or `False`.
    pub status: ConditionStatus,
    /// Details, e.g. the provider's error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The observed state of a Job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Observations: `Running`, `Completed`, `Failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,
    /// When the controller started the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the Job completed (set only on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

impl JobStatus {
    /// Whether condition `t` is present with `status` (Rufio's `HasCondition`).
    pub fn has_condition(&self, t: JobConditionType, status: ConditionStatus) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == t && c.status == status)
    }

    /// Sets condition `t`, adding it when absent. Returns whether anything changed.
    pub fn set_condition(
        &mut self,
        t: JobConditionType,
        status: ConditionStatus,
        message: &str,
    ) -> bool {
        set(&mut self.conditions, t, status, message)
    }

    /// True once the Job completed or failed.
    pub fn is_finished(&self) -> bool {
        self.has_condition(JobConditionType::Completed, ConditionStatus::True)
            || self.has_condition(JobConditionType::Failed, ConditionStatus::True)
    }
}

fn set(
    conditions: &mut Vec<JobCondition>,
    t: JobConditionType,
    status: ConditionStatus,
    message: &str,
) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == t) {
        Some(c) if c.status == status && c.message == message => false,
        Some(c) => {
            c.status = status;
            c.message = message.to_string();
            true
        }
        None => {
            conditions.push(JobCondition {
                type_: t,
                status,
                message: message.to_string(),
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_set_once_per_type() {
        let mut s = JobStatus::default();
        assert!(!s.is_finished());
        assert!(s.set_condition(JobConditionType::Running, ConditionStatus::True, ""));
        assert!(!s.set_condition(JobConditionType::Running, ConditionStatus::True, ""));
        assert!(s.set_condition(JobConditionType::Running, ConditionStatus::False, ""));
        assert!(s.set_condition(
            JobConditionType::Failed,
            ConditionStatus::True,
            "power on: timed out"
        ));
        assert_eq!(s.conditions.len(), 2);
        assert!(s.is_finished());
        assert!(s.has_condition(JobConditionType::Running, ConditionStatus::False));
        assert!(!s.has_condition(JobConditionType::Completed, ConditionStatus::True));
    }
}
