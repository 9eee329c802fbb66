//! `bmc.tinkerbell.org/v1alpha1`: Rufio's API for baseboard management controllers, with its
//! field names, JSON spellings and meaning kept, so Rufio's example manifests and the Jobs that
//! Cluster API's Tinkerbell provider creates apply unchanged.
//!
//! - [`Machine`]: how to reach one BMC (`spec.connection`: host, credentials Secret, TLS,
//!   provider options) and what was last seen of it (`status.powerState`, the `Contactable`
//!   condition).
//! - [`Job`]: an ordered list of [`Action`]s for one Machine; `Running`, `Completed` and
//!   `Failed` conditions.
//! - [`Task`]: one Action of a Job, run against a copy of the Machine's connection; each Job
//!   task becomes a child Task named by [`task_name`].
//!
//! Differences from Rufio, all of them refusals of input Rufio would only fail on later:
//! a task must name exactly one action (Rufio allows an empty one), a one-time boot action at
//! least one device, and a Job at least one task (as Rufio). `insecureTLS` defaults to `false`
//! instead of being required, and `preferredOrder` also accepts `redfish` and `rpc`.

mod action;
pub mod job;
pub mod machine;
pub mod plan;
pub mod task;

pub use action::{
    Action, ActionKind, BootDevice, OneTimeBootDeviceAction, PowerAction, VirtualMediaAction,
    VirtualMediaKind,
};
pub use job::{Job, JobCondition, JobConditionType, JobSpec, JobStatus, MachineRef};
pub use machine::{
    Connection, ExperimentalOpts, HmacOpts, IntelAmtOptions, IpmitoolOptions, Machine,
    MachineCondition, MachineConditionType, MachineSpec, MachineStatus, PowerState,
    ProviderOptions, RedfishOptions, RequestOpts, RpcOptions, SignatureOpts,
};
pub use task::{Task, TaskCondition, TaskConditionType, TaskSpec, TaskStatus};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the BMC kinds.
pub const GROUP: &str = "bmc.tinkerbell.org";
/// The version name.
pub const VERSION: &str = "v1alpha1";
/// The API version string of the BMC kinds.
pub const API_VERSION: &str = "bmc.tinkerbell.org/v1alpha1";

/// The name of the `n`th (0-based) Task of a Job, as Rufio names them: `<job>-task-<n>`.
pub fn task_name(job: &str, n: usize) -> String {
    format!("{job}-task-{n}")
}

/// The status of a condition: Rufio's conditions are `True` or `False`, never `Unknown`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    #[default]
    False,
}

impl ConditionStatus {
    /// `True` for `true`.
    pub fn from_bool(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

/// CEL rules of these kinds.
pub mod rules {
    /// On an [`super::Action`]: exactly one of the three actions.
    pub const ONE_ACTION: &str = "(has(self.powerAction) ? 1 : 0) + (has(self.oneTimeBootDeviceAction) ? 1 : 0) + (has(self.virtualMediaAction) ? 1 : 0) == 1";
    /// Message of [`ONE_ACTION`].
    pub const ONE_ACTION_MSG: &str =
        "a task sets exactly one of powerAction, oneTimeBootDeviceAction and virtualMediaAction";
    /// On `Machine.spec.connection.providerOptions.preferredOrder` entries: Rufio's provider
    /// names plus `redfish` and `rpc`, any case.
    pub const PROVIDER_NAME_PATTERN: &str =
        "(?i)^(ipmitool|asrockrack|gofish|IntelAMT|dell|supermicro|openbmc|redfish|rpc)$";
}
