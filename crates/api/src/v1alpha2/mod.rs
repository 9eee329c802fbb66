//! `tinkerbell.org/v1alpha2`, the storage version: Hardware, OSIE, Template and Workflow as
//! seeds/000 defines them, field for field and JSON name for JSON name, plus the execution
//! additions of seeds/004 (each documented where it is declared).
//!
//! Conventions shared by all kinds:
//! - optional strings are `Option<String>`; `""` deserializes as `None` (Go `omitempty`
//!   semantics, which cannot tell the two apart either);
//! - `bool` fields with `omitempty` are plain `bool`s, omitted when `false`;
//! - lists and maps with `omitempty` are omitted when empty;
//! - the validation the API server can enforce (patterns, bounds, CEL rules) is part of the
//!   generated schema; see [`patterns`] and [`rules`].

mod boot;
mod condition;
mod hardware;
mod osie;
mod rollout;
// WorkflowRuleSet (issue 31; `rules` is taken by the CEL rules below).
mod rule_set;
mod template;
mod workflow;

pub use boot::{
    AllowNetbootStatus, BootJobStatus, BootMode, BootOptions, BootOptionsProblem,
    BootOptionsStatus, CustombootConfig, ISO_URL_PATTERN,
};
pub use condition::{Condition, ConditionSeverity, ConditionStatus, ConditionType, set_condition};
pub use hardware::{
    DEFAULT_LEASE_TIME, Dhcp, Discovery, Hardware, HardwareAttributes, HardwareOsie, HardwareSpec,
    HardwareStatus, INVENTORY_REQUEST_ANNOTATION, INVENTORY_SOURCE_AGENT,
    INVENTORY_SOURCE_ENROLLMENT, Instance, Ipxe, NetworkInterface, inventory_request_id,
};
pub use osie::{Osie, OsieSpec};
pub use rollout::{
    DEFAULT_MAX_FAILURES, WORKFLOW_SET_FINALIZER, WORKFLOW_SET_LABEL, WorkflowSet,
    WorkflowSetCondition, WorkflowSetConditionType, WorkflowSetSpec, WorkflowSetState,
    WorkflowSetStatus,
};
pub use rule_set::{
    CountRange, FieldPattern, ValuePattern, WorkflowRule, WorkflowRuleSet, WorkflowRuleSetSpec,
    WorkflowRuleSetStatus, WorkflowRuleSetWorkflow, rule_set_conditions,
};
pub use template::{Action, Template, TemplateSpec};
pub use workflow::{
    ActionState, ActionStatus, Workflow, WorkflowSpec, WorkflowState, WorkflowStatus,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API version string of this module's kinds.
pub const API_VERSION: &str = "tinkerbell.org/v1alpha2";
/// The version name.
pub const VERSION: &str = "v1alpha2";

/// A reference to an object in the same namespace, `corev1.LocalObjectReference` in the seed.
/// The name is required and non-empty here (an empty reference cannot be resolved).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the referent.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

impl LocalObjectReference {
    /// A reference to `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }

    /// A reference without a name (not given): serialized as an absent field.
    pub fn is_empty(&self) -> bool {
        self.name.is_empty()
    }
}

/// Removes a derived `default` (one that would not validate against the schema).
pub(crate) fn no_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

/// The validation patterns of seeds/000, anchored (`^...$`) so a value cannot merely contain a
/// match. Two seed patterns are repaired: the hostname pattern has a stray `"` in the seed, and
/// the VLAN pattern's alternation let any 4-digit tail through (`12345`); here a VLAN list is
/// comma-separated numbers 0..=4096.
pub mod patterns {
    /// An IPv4 address (`DHCP.ip`, `DHCP.gateway`).
    pub const IPV4: &str =
        r"^(25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)(\.(25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)){3}$";
    /// An IPv4 netmask (`DHCP.netmask`).
    pub const NETMASK: &str = r"^(255)\.(0|128|192|224|240|248|252|254|255)\.(0|128|192|224|240|248|252|254|255)\.(0|128|192|224|240|248|252|254|255)$";
    /// A DNS hostname (`DHCP.hostname`).
    pub const HOSTNAME: &str = r"^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9\-]*[a-zA-Z0-9])\.)*([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9\-]*[A-Za-z0-9])$";
    /// A VLAN ID 0..=4096, or a comma-separated list of them (`DHCP.vlanId`).
    pub const VLAN_ID: &str = r"^([0-9]{1,3}|[1-3][0-9]{3}|40[0-8][0-9]|409[0-6])(,([0-9]{1,3}|[1-3][0-9]{3}|40[0-8][0-9]|409[0-6]))*$";
    /// A hostname or an IPv4 address (`DHCP.nameservers[]`, `DHCP.timeservers[]`).
    pub const HOST_OR_IPV4: &str = r"^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9\-]*[a-zA-Z0-9])\.)*([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9\-]*[A-Za-z0-9])$|^(([0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])\.){3}([0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])$";
    /// A lower-case MAC address (the keys of `Hardware.spec.networkInterfaces`).
    pub const MAC: &str = r"^([0-9a-f]{2}:){5}([0-9a-f]{2})$";
    /// A Linux device path (`Hardware.spec.storageDevices[]`).
    pub const STORAGE_DEVICE: &str = r"^(/[^/ ]*)+/?$";
    /// The Go duration syntax of `Workflow.spec.timeout` and `Action.timeout`.
    pub const TIMEOUT: &str = crate::duration::TIMEOUT_PATTERN;
}

/// The CEL `x-kubernetes-validations` rules of the generated CRDs, with the messages the API
/// server returns when a rule is broken.
pub mod rules {
    /// On `Hardware.spec.networkInterfaces`: every key is a lower-case MAC address.
    pub const MAC_KEYS: &str = "self.all(mac, mac.matches('^([0-9a-f]{2}:){5}([0-9a-f]{2})$'))";
    /// Message of [`MAC_KEYS`].
    pub const MAC_KEYS_MSG: &str =
        "networkInterfaces keys must be lower-case MAC addresses such as 00:00:5e:00:53:01";
    /// On `Hardware.spec.ipxe`: `inline` and `url` are mutually exclusive.
    pub const IPXE_ONE_OF: &str = "!(has(self.inline) && has(self.url))";
    /// Message of [`IPXE_ONE_OF`].
    pub const IPXE_ONE_OF_MSG: &str = "ipxe: set either inline or url, not both";
    /// On `Template.spec.actions`: action names are unique.
    pub const UNIQUE_ACTION_NAMES: &str = "self.all(a, self.exists_one(b, b.name == a.name))";
    /// Message of [`UNIQUE_ACTION_NAMES`].
    pub const UNIQUE_ACTION_NAMES_MSG: &str = "action names must be unique within a Template";
    /// On `Template.spec`: `actions` and `v1alpha1Data` are mutually exclusive.
    pub const ACTIONS_OR_DATA: &str = "!(has(self.actions) && has(self.v1alpha1Data))";
    /// Message of [`ACTIONS_OR_DATA`].
    pub const ACTIONS_OR_DATA_MSG: &str =
        "set either actions or v1alpha1Data (a converted Tinkerbell template), not both";
    /// On `Workflow.spec`: `hardwareRef` cannot be added or removed after creation.
    pub const HARDWARE_REF_PRESENCE: &str = "has(self.hardwareRef) == has(oldSelf.hardwareRef)";
    /// Message of [`HARDWARE_REF_PRESENCE`].
    pub const HARDWARE_REF_PRESENCE_MSG: &str =
        "hardwareRef cannot be added or removed after the Workflow is created";
    /// On `Workflow.spec`: `templateRef` cannot be added or removed after creation.
    pub const TEMPLATE_REF_PRESENCE: &str = "has(self.templateRef) == has(oldSelf.templateRef)";
    /// Message of [`TEMPLATE_REF_PRESENCE`].
    pub const TEMPLATE_REF_PRESENCE_MSG: &str =
        "templateRef cannot be added or removed after the Workflow is created";
    /// On `Workflow.spec.hardwareRef`, `templateRef` and `templateData`: immutable once set.
    pub const IMMUTABLE: &str = "self == oldSelf";
    /// Message of [`IMMUTABLE`] on `hardwareRef`.
    pub const HARDWARE_REF_IMMUTABLE_MSG: &str =
        "hardwareRef is immutable: delete the Workflow and create a new one";
    /// Message of [`IMMUTABLE`] on `templateRef`.
    pub const TEMPLATE_REF_IMMUTABLE_MSG: &str =
        "templateRef is immutable: delete the Workflow and create a new one";
    /// Message of [`IMMUTABLE`] on `templateData`.
    pub const TEMPLATE_DATA_IMMUTABLE_MSG: &str =
        "templateData is immutable: delete the Workflow and create a new one";
    /// On `Workflow.spec`: `templateData` cannot be added or removed after creation.
    pub const TEMPLATE_DATA_PRESENCE: &str = "has(self.templateData) == has(oldSelf.templateData)";
    /// Message of [`TEMPLATE_DATA_PRESENCE`].
    pub const TEMPLATE_DATA_PRESENCE_MSG: &str =
        "templateData cannot be added or removed after the Workflow is created";
    /// On `Workflow.spec.bootOptions`: `bootMode: isoboot` needs an `isoURL`.
    pub const ISO_URL_REQUIRED: &str =
        "!has(self.bootMode) || self.bootMode != 'isoboot' || has(self.isoURL)";
    /// Message of [`ISO_URL_REQUIRED`].
    pub const ISO_URL_REQUIRED_MSG: &str = "bootOptions.isoURL is required with bootMode isoboot: give the http(s) URL of the ISO to boot";
    /// On `Workflow.spec.bootOptions`: `isoURL` only with `bootMode: isoboot`.
    pub const ISO_URL_ONLY_ISOBOOT: &str =
        "!has(self.isoURL) || (has(self.bootMode) && self.bootMode == 'isoboot')";
    /// Message of [`ISO_URL_ONLY_ISOBOOT`].
    pub const ISO_URL_ONLY_ISOBOOT_MSG: &str = "bootOptions.isoURL is only used with bootMode isoboot: set bootMode: isoboot or remove isoURL";
    /// On `Workflow.spec.bootOptions`: `bootMode: customboot` needs a `custombootConfig`.
    pub const CUSTOMBOOT_CONFIG_REQUIRED: &str =
        "!has(self.bootMode) || self.bootMode != 'customboot' || has(self.custombootConfig)";
    /// Message of [`CUSTOMBOOT_CONFIG_REQUIRED`].
    pub const CUSTOMBOOT_CONFIG_REQUIRED_MSG: &str = "bootOptions.custombootConfig is required with bootMode customboot: give its preparingActions and/or postActions";
    /// On `Workflow.spec.bootOptions`: `custombootConfig` only with `bootMode: customboot`.
    pub const CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT: &str =
        "!has(self.custombootConfig) || (has(self.bootMode) && self.bootMode == 'customboot')";
    /// Message of [`CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT`].
    pub const CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT_MSG: &str = "bootOptions.custombootConfig is only used with bootMode customboot: set bootMode: customboot or remove custombootConfig";
}
