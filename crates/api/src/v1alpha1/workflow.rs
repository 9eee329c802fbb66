//! v1alpha1 `Workflow`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Extra;
use crate::serde_util::{is_false, null_as_default};

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// WorkflowSpec defines the desired state of Workflow.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha1",
    kind = "Workflow",
    plural = "workflows",
    singular = "workflow",
    namespaced,
    shortname = "wf",
    category = "tinkerbell",
    status = "WorkflowStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Workflow is the Schema for the Workflows API (Tinkerbell v1alpha1).",
    printcolumn(name = "Template", type_ = "string", json_path = ".spec.templateRef"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSpec {
    /// Name of the Template associated with this workflow.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template_ref: String,

    /// Name of the Hardware associated with this workflow.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hardware_ref: String,

    /// A mapping of template devices to hardware MAC addresses (`device_1: 00:00:00:00:00:01`),
    /// available to the template as `{{.device_1}}`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub hardware_map: BTreeMap<String, String>,

    /// Options used when netbooting the hardware (Tinkerbell's `bootOptions`).
    #[serde(
        default,
        rename = "bootOptions",
        skip_serializing_if = "Option::is_none"
    )]
    pub boot_options: Option<BootOpts>,

    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Tinkerbell's `bootOptions`: how the Hardware is booted for the Workflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootOpts {
    /// Allow netboot on the Hardware before the Workflow runs and disallow it after it
    /// succeeded.
    #[serde(default, skip_serializing_if = "is_false")]
    pub toggle_allow_netboot: bool,
    /// Netboot the machine once through its BMC (older releases; the same as
    /// `bootMode: netboot`, which wins when both are set).
    #[serde(default, skip_serializing_if = "is_false")]
    pub one_time_netboot: bool,
    /// Boot mode: `netboot`, `isoboot`, `iso` (the older spelling of `isoboot`) or
    /// `customboot`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = BOOT_MODES))]
    pub boot_mode: String,
    /// The http(s) URL of the ISO `bootMode: isoboot` boots as virtual media.
    #[serde(default, rename = "isoURL", skip_serializing_if = "String::is_empty")]
    pub iso_url: String,
    /// The BMC actions of `bootMode: customboot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customboot_config: Option<CustombootConfig>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The `bootMode` values Tinkerbell accepts.
pub const BOOT_MODES: [&str; 4] = ["netboot", "isoboot", "iso", "customboot"];

/// The BMC actions of `bootMode: customboot`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustombootConfig {
    /// BMC actions run before any Workflow action.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub preparing_actions: Vec<BmcAction>,
    /// BMC actions run after every Workflow action succeeded.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub post_actions: Vec<BmcAction>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One BMC action of a customboot configuration (Tinkerbell's `bmc.Action`): one of
/// `powerAction`, `oneTimeBootDeviceAction`, `bootDevice` and `virtualMediaAction`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BmcAction {
    /// A power operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_action: Option<crate::bmc::PowerAction>,
    /// A one-time boot device (Tinkerbell deprecates it for `bootDevice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_time_boot_device_action: Option<crate::bmc::OneTimeBootDeviceAction>,
    /// A boot device, one-time unless `persistent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_device: Option<BootDeviceConfig>,
    /// A virtual media insert or eject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_media_action: Option<crate::bmc::VirtualMediaAction>,
    /// Fields this version does not know (newer BMC actions), kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Tinkerbell's `bmc.BootDeviceConfig`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootDeviceConfig {
    /// The device to boot first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::bmc::BootDevice>,
    /// Set the device for every boot, not only the next one.
    #[serde(default, skip_serializing_if = "is_false")]
    pub persistent: bool,
    /// Boot the device in UEFI mode.
    #[serde(default, skip_serializing_if = "is_false")]
    pub efi_boot: bool,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Tinkerbell's `status.bootOptions`: the boot steps taken.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootOptionsStatus {
    /// What was done with the Hardware's allowPXE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_netboot: Option<AllowNetbootStatus>,
    /// The BMC Jobs created, by name.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub jobs: BTreeMap<String, JobStatus>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Tinkerbell's `AllowNetbootStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowNetbootStatus {
    /// allowPXE was set to true before the Workflow ran.
    #[serde(default, skip_serializing_if = "is_false")]
    pub toggled_true: bool,
    /// allowPXE was set to false after the Workflow succeeded.
    #[serde(default, skip_serializing_if = "is_false")]
    pub toggled_false: bool,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Tinkerbell's `JobStatus`: one BMC Job created for the Workflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// UID of the Job.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The Job reported itself complete.
    #[serde(default, skip_serializing_if = "is_false")]
    pub complete: bool,
    /// An existing Job of the same name was deleted first.
    #[serde(default, skip_serializing_if = "is_false")]
    pub existing_job_deleted: bool,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A v1alpha1 workflow (and action) state: `STATE_PENDING`, `STATE_RUNNING`, ... Values this
/// version does not know are kept as [`WorkflowState::Other`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WorkflowState {
    /// `STATE_PENDING`.
    Pending,
    /// `STATE_PREPARING`.
    Preparing,
    /// `STATE_RUNNING`.
    Running,
    /// `STATE_FAILED`.
    Failed,
    /// `STATE_TIMEOUT`.
    Timeout,
    /// `STATE_SUCCESS`.
    Success,
    /// Any other value, kept verbatim.
    Other(String),
}

impl WorkflowState {
    /// The JSON string.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "STATE_PENDING",
            Self::Preparing => "STATE_PREPARING",
            Self::Running => "STATE_RUNNING",
            Self::Failed => "STATE_FAILED",
            Self::Timeout => "STATE_TIMEOUT",
            Self::Success => "STATE_SUCCESS",
            Self::Other(s) => s,
        }
    }

    /// Parses a state string (never fails: unknown values are [`WorkflowState::Other`]).
    pub fn from_str_lossless(s: &str) -> Self {
        match s {
            "STATE_PENDING" => Self::Pending,
            "STATE_PREPARING" => Self::Preparing,
            "STATE_RUNNING" => Self::Running,
            "STATE_FAILED" => Self::Failed,
            "STATE_TIMEOUT" => Self::Timeout,
            "STATE_SUCCESS" => Self::Success,
            other => Self::Other(other.to_string()),
        }
    }
}

impl fmt::Display for WorkflowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for WorkflowState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for WorkflowState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Self::from_str_lossless(&s))
    }
}

impl JsonSchema for WorkflowState {
    fn schema_name() -> Cow<'static, str> {
        "WorkflowStateV1alpha1".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "STATE_PENDING, STATE_PREPARING, STATE_RUNNING, STATE_FAILED, STATE_TIMEOUT or STATE_SUCCESS."
        })
    }
}

/// WorkflowStatus defines the observed state of Workflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    /// State is the state of the workflow in Tinkerbell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<WorkflowState>,
    /// GlobalTimeout represents the max execution time, in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub global_timeout: i64,
    /// Tasks are the tasks to be completed (the rendered template).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub tasks: Vec<WorkflowTask>,
    /// Conditions (netboot job and allowPXE toggling observations).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub conditions: Vec<WorkflowCondition>,
    /// When the workflow started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_started: Option<Time>,
    /// When the workflow completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_completed: Option<Time>,
    /// The agent running the workflow (current releases; JSON `agentID`).
    #[serde(default, rename = "agentID", skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// The boot steps taken for `spec.bootOptions` (current releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_options: Option<BootOptionsStatus>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A condition of a v1alpha1 Workflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WorkflowCondition {
    /// Condition type, e.g. `NetbootJobComplete`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// Reason of the last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Message of the last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Time of the condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A rendered task.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WorkflowTask {
    /// Task name.
    #[serde(default)]
    pub name: String,
    /// The worker (MAC address) that runs the task.
    #[serde(default)]
    pub worker: String,
    /// The agent that runs the task (current releases; JSON `agentID`).
    #[serde(default, rename = "agentID", skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// The actions and their states.
    #[serde(default, deserialize_with = "null_as_default")]
    pub actions: Vec<WorkflowAction>,
    /// Volumes of every action.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub volumes: Vec<String>,
    /// Environment of every action.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub environment: BTreeMap<String, String>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A rendered action and its state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowAction {
    /// Action name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// OCI image.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Timeout in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout: i64,
    /// Container command.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub command: Vec<String>,
    /// Volumes.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub volumes: Vec<String>,
    /// PID namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pid: String,
    /// Environment.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub environment: BTreeMap<String, String>,
    /// State of the action (older releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkflowState>,
    /// State of the action (current releases write `state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<WorkflowState>,
    /// When the action started (older releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the action started (current releases write `executionStart`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_start: Option<Time>,
    /// How long the action ran, in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seconds: i64,
    /// Message reported by the action.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}
