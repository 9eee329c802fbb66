//! Conditions: observations about a resource (seeds/000 "Conditions").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::serde_util::empty_as_none;

/// The type of a condition.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum ConditionType {
    /// The workflow has started: `False` until `status.startedAt` is set, then `True`.
    Started,
    /// The workflow succeeded: `True`/`Info` on `Succeeded`; `False`/`Error` on `Failed` (reason
    /// and message from the failed action); on `Canceled`, `False`/`Warning` when the cancel the
    /// user asked for completed and `False`/`Error` when it had to be forced (`CancelTimeout`).
    Succeeded,
    /// Addition: the Template rendered with the Hardware and `templateData`. `False`/`Error`
    /// with the render error as message when it did not.
    TemplateRendered,
    /// Addition, for `spec.bootOptions.toggleAllowNetboot`: `True` (`NetbootAllowed`) once the
    /// controller allowed netboot on the Hardware before the Workflow ran, `False`
    /// (`NetbootDisallowed`) once it disallowed it after the Workflow succeeded.
    NetbootAllowed,
    /// Addition, for `spec.bootOptions.bootMode`: the BMC Job that boots the Hardware into the
    /// OSIE before dispatch. `False`/`Info` while it runs (`BootJobRunning`), `True` when it
    /// completed (`BootJobCompleted`), `False`/`Error` when it failed (`BootJobFailed`,
    /// `BootJobTimeout`, `NoBMC`: the Workflow fails with the same reason and message).
    BootPrepared,
    /// Addition, for `spec.bootOptions.bootMode` `isoboot` (eject) and `customboot`
    /// (`postActions`): the BMC Job run after the Workflow succeeded, with the reasons of
    /// `BootPrepared`. Its failure leaves the Workflow `Succeeded` (every action did).
    BootFinished,
}

impl ConditionType {
    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "Started",
            Self::Succeeded => "Succeeded",
            Self::TemplateRendered => "TemplateRendered",
            Self::NetbootAllowed => "NetbootAllowed",
            Self::BootPrepared => "BootPrepared",
            Self::BootFinished => "BootFinished",
        }
    }
}

/// The status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// The condition has been evaluated as true.
    True,
    /// The condition has been evaluated as false.
    False,
    /// The default: the condition cannot be evaluated as True or False.
    #[default]
    Unknown,
}

/// The severity with which to treat failures of a condition type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionSeverity {
    /// The condition should be treated as an error (the default).
    #[default]
    Error,
    /// The condition should be investigated but everything may continue to function.
    Warning,
    /// The condition is informational only.
    Info,
    /// No severity (`""`).
    #[serde(rename = "")]
    None,
}

fn default_severity() -> ConditionSeverity {
    ConditionSeverity::Error
}

/// An observation on a resource that is generally attainable by inspecting other status fields.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of condition.
    #[serde(rename = "type")]
    pub type_: ConditionType,

    /// Status of the condition.
    pub status: ConditionStatus,

    /// Severity with which to treat failures of this type of condition. `Error` when absent.
    #[serde(default = "default_severity")]
    #[schemars(extend("default" = "Error"))]
    pub severity: ConditionSeverity,

    /// LastTransition is the last time the condition transitioned from one status to another.
    #[serde(
        default,
        rename = "lastTransitionTime",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_transition: Option<Time>,

    /// Reason is a short CamelCase description for the condition's last transition.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub reason: Option<String>,

    /// Message is a human readable message indicating details about the last transition.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub message: Option<String>,
}

impl Condition {
    /// A condition with no reason or message.
    pub fn new(
        type_: ConditionType,
        status: ConditionStatus,
        severity: ConditionSeverity,
        now: Time,
    ) -> Self {
        Self {
            type_,
            status,
            severity,
            last_transition: Some(now),
            reason: None,
            message: None,
        }
    }

    /// Sets the reason and message.
    pub fn with_reason(mut self, reason: impl Into<String>, message: impl Into<String>) -> Self {
        self.reason = Some(reason.into()).filter(|s: &String| !s.is_empty());
        self.message = Some(message.into()).filter(|s: &String| !s.is_empty());
        self
    }
}

/// Sets `cond` in `conditions`, replacing the condition of the same type. When the status does
/// not change, the existing `lastTransitionTime` is kept (it records status transitions only).
/// Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut cond: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == cond.type_) {
        Some(existing) => {
            if existing.status == cond.status {
                cond.last_transition = existing.last_transition.clone();
            }
            if *existing == cond {
                false
            } else {
                *existing = cond;
                true
            }
        }
        None => {
            conditions.push(cond);
            true
        }
    }
}
