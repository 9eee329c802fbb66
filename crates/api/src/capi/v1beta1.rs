//! `infrastructure.cluster.x-k8s.io/v1beta1`: TinkerbellCluster, TinkerbellMachine and
//! TinkerbellMachineTemplate.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::v1alpha2::{LocalObjectReference, TemplateSpec};

/// The API version string of this module's kinds.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
/// The version name.
pub const VERSION: &str = "v1beta1";
/// The port of `controlPlaneEndpoint` when none is given.
pub const DEFAULT_API_SERVER_PORT: i32 = 6443;

/// CEL rules of these kinds.
pub mod rules {
    /// On `TinkerbellMachine.spec.providerID`: immutable once set.
    pub const PROVIDER_ID_IMMUTABLE: &str = "self == oldSelf";
    /// Message of [`PROVIDER_ID_IMMUTABLE`].
    pub const PROVIDER_ID_IMMUTABLE_MSG: &str = "providerID is immutable once set";
    /// On `TinkerbellMachine.spec`: a providerID once set cannot be removed.
    pub const PROVIDER_ID_KEPT: &str = "!has(oldSelf.providerID) || has(self.providerID)";
    /// Message of [`PROVIDER_ID_KEPT`].
    pub const PROVIDER_ID_KEPT_MSG: &str = "providerID cannot be removed once set";
    /// On a template override: exactly one of `inline` and `templateRef`.
    pub const ONE_TEMPLATE: &str = "has(self.inline) != has(self.templateRef)";
    /// Message of [`ONE_TEMPLATE`].
    pub const ONE_TEMPLATE_MSG: &str = "set exactly one of inline and templateRef";
    /// On `TinkerbellMachineTemplate.spec.template`: immutable, as Cluster API expects of
    /// infrastructure templates (a rollout is a new template, not an edited one).
    pub const TEMPLATE_IMMUTABLE: &str = "self == oldSelf";
    /// Message of [`TEMPLATE_IMMUTABLE`].
    pub const TEMPLATE_IMMUTABLE_MSG: &str = "spec.template is immutable: create a new TinkerbellMachineTemplate and point the MachineDeployment or control plane at it";
}

fn default_port() -> i32 {
    DEFAULT_API_SERVER_PORT
}

/// The endpoint of a cluster's Kubernetes API server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ApiEndpoint {
    /// The host name or IP address the API server is reached on.
    #[schemars(length(max = 512))]
    pub host: String,
    /// The port; 6443 when not given.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535), extend("default" = 6443))]
    pub port: i32,
}

/// A Template to run instead of the default: inline, or a Template in the machine's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": rules::ONE_TEMPLATE, "message": rules::ONE_TEMPLATE_MSG}
]))]
pub struct TemplateOverride {
    /// The Template's spec (actions, volumes, env), rendered with the Hardware and the
    /// Workflow's data like any Template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<TemplateSpec>,
    /// A Template in the machine's namespace, copied when the machine's Workflow is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<LocalObjectReference>,
}

/// The state of the cluster's infrastructure as Cluster API reads it (v1beta2 contract).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Initialization {
    /// True once the infrastructure is provisioned; never goes back to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

// ---------------------------------------------------------------------------------------------
// TinkerbellCluster

/// The desired state of a cluster's Tinkerbell infrastructure. Tinkerbell creates no load
/// balancer: the control plane endpoint is given (a VIP that kube-vip or similar serves).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TinkerbellCluster",
    plural = "tinkerbellclusters",
    singular = "tinkerbellcluster",
    namespaced,
    shortname = "tc",
    category = "cluster-api",
    status = "TinkerbellClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "TinkerbellCluster is the infrastructure of a Cluster API cluster on Tinkerbell Hardware.",
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "Control plane endpoint"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned",
        description = "Infrastructure provisioned"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TinkerbellClusterSpec {
    /// The endpoint of the cluster's API server. The cluster is provisioned once it has a host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,

    /// The Template the cluster's machines run when a machine has no `templateOverride` of
    /// its own (default: stream `imageURL` to the first disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_override: Option<TemplateOverride>,

    /// The Hardware label whose values are the cluster's failure domains
    /// (`topology.kubernetes.io/zone` when not given). A Machine with `spec.failureDomain` only
    /// gets Hardware whose label has that value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    pub failure_domain_label: Option<String>,
}

/// A failure domain as Cluster API reads it (v1beta2 contract: a list entry with a name).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// The value of the failure domain label.
    pub name: String,
    /// Whether control plane machines may be placed in it (always true here).
    #[serde(default)]
    pub control_plane: bool,
}

/// The observed state of a TinkerbellCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TinkerbellClusterStatus {
    /// The v1beta2 contract's provisioning state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// The v1beta1 contract's `ready`: the same as `initialization.provisioned`.
    #[serde(default)]
    pub ready: bool,
    /// The failure domains: the distinct values of the failure domain label on the
    /// namespace's Hardware, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<FailureDomain>,
    /// `Ready` and `Paused`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// TinkerbellMachine

/// A Hardware selection term: a label selector over Hardware in the machine's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareAffinityTerm {
    /// The Hardware this term matches.
    pub label_selector: LabelSelector,
}

/// A preferred term with its weight.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightedHardwareAffinityTerm {
    /// Added to a Hardware's score when the term matches it; 1 to 100.
    #[schemars(range(min = 1, max = 100))]
    pub weight: i32,
    /// The term.
    pub hardware_affinity_term: HardwareAffinityTerm,
}

/// Which Hardware a machine may get, and which it prefers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareAffinity {
    /// The machine only gets Hardware matching at least one of these terms (OR'ed); any
    /// Hardware when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<HardwareAffinityTerm>,
    /// Among the eligible Hardware, the highest sum of the weights of the matching terms wins
    /// (ties: by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred: Vec<WeightedHardwareAffinityTerm>,
}

/// The desired state of one machine of a cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TinkerbellMachine",
    plural = "tinkerbellmachines",
    singular = "tinkerbellmachine",
    namespaced,
    shortname = "tm",
    category = "cluster-api",
    status = "TinkerbellMachineStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "TinkerbellMachine is a Cluster API machine provisioned on a Tinkerbell Hardware.",
    printcolumn(
        name = "Hardware",
        type_ = "string",
        json_path = ".status.hardwareRef.name",
        description = "Hardware claimed"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "tinkerbell://<namespace>/<hardware>"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned",
        description = "Machine provisioned"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": rules::PROVIDER_ID_KEPT, "message": rules::PROVIDER_ID_KEPT_MSG}
]))]
pub struct TinkerbellMachineSpec {
    /// `tinkerbell://<namespace>/<hardware>`, set by the provider when the machine is
    /// provisioned. Immutable once set.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": rules::PROVIDER_ID_IMMUTABLE, "message": rules::PROVIDER_ID_IMMUTABLE_MSG}
    ]))]
    pub provider_id: Option<String>,

    /// Which Hardware the machine may get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_affinity: Option<HardwareAffinity>,

    /// The image the default Template streams to the Hardware's first disk (a raw or gzip'ed
    /// disk image URL), given to templates as `{{ .image_url }}`.
    #[serde(default, rename = "imageURL", skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,

    /// The Template to run instead of the cluster's override or the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_override: Option<TemplateOverride>,

    /// A Template run on the Hardware when the machine is deleted (e.g. wiping its disks),
    /// before the Hardware is released. None: the Hardware is released as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprovision_template: Option<TemplateOverride>,
}

/// A machine address (Cluster API's `MachineAddress`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct MachineAddress {
    /// `Hostname`, `ExternalIP`, `InternalIP`, `ExternalDNS` or `InternalDNS`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// The observed state of a TinkerbellMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TinkerbellMachineStatus {
    /// The v1beta2 contract's provisioning state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// The v1beta1 contract's `ready`: the same as `initialization.provisioned`.
    #[serde(default)]
    pub ready: bool,
    /// The Hardware's addresses (its interfaces' IPs as `InternalIP`, its hostname).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// The Hardware claimed (the claim itself is the Hardware's label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_ref: Option<LocalObjectReference>,
    /// The failure domain the machine is in: the claimed Hardware's value of the cluster's
    /// failure domain label (Cluster API copies it to `Machine.status.failureDomain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// `Ready`, `HardwareClaimed`, `Provisioned`, `Paused` (see the provider's documentation
    /// for their reasons).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// TinkerbellMachineTemplate

/// The machine a MachineDeployment or control plane stamps out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TinkerbellMachineTemplateResource {
    /// The spec of each TinkerbellMachine made from the template.
    pub spec: TinkerbellMachineSpec,
}

/// A template of TinkerbellMachines (`spec.template.spec`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TinkerbellMachineTemplate",
    plural = "tinkerbellmachinetemplates",
    singular = "tinkerbellmachinetemplate",
    namespaced,
    shortname = "tmt",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "TinkerbellMachineTemplate is the template of the TinkerbellMachines of a MachineDeployment or control plane."
)]
pub struct TinkerbellMachineTemplateSpec {
    /// The machine to stamp out; immutable.
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": rules::TEMPLATE_IMMUTABLE, "message": rules::TEMPLATE_IMMUTABLE_MSG}
    ]))]
    pub template: TinkerbellMachineTemplateResource,
}

/// Condition types and reasons of these kinds.
pub mod conditions {
    /// Summary: True when the machine (cluster) is provisioned.
    pub const READY: &str = "Ready";
    /// A Hardware is claimed for the machine.
    pub const HARDWARE_CLAIMED: &str = "HardwareClaimed";
    /// The provisioning Workflow succeeded.
    pub const PROVISIONED: &str = "Provisioned";
    /// Reconciliation is paused (`Cluster.spec.paused` or the paused annotation).
    pub const PAUSED: &str = "Paused";

    /// No Cluster owns the TinkerbellCluster yet.
    pub const WAITING_FOR_CLUSTER_OWNER: &str = "WaitingForClusterOwner";
    /// No Machine owns the TinkerbellMachine yet.
    pub const WAITING_FOR_MACHINE: &str = "WaitingForMachineOwner";
    /// The Cluster's infrastructure is not provisioned yet.
    pub const WAITING_FOR_CLUSTER: &str = "WaitingForClusterInfrastructure";
    /// `Machine.spec.bootstrap.dataSecretName` is not set yet or its Secret is missing.
    pub const WAITING_FOR_BOOTSTRAP: &str = "WaitingForBootstrapData";
    /// No free Hardware matches the affinity and failure domain.
    pub const NO_HARDWARE: &str = "NoHardwareAvailable";
    /// Claimed.
    pub const CLAIMED: &str = "Claimed";
    /// The claimed Hardware was deleted.
    pub const HARDWARE_GONE: &str = "HardwareNotFound";
    /// The Workflow is not finished.
    pub const WORKFLOW_RUNNING: &str = "WorkflowRunning";
    /// The Workflow succeeded.
    pub const WORKFLOW_SUCCEEDED: &str = "WorkflowSucceeded";
    /// The Workflow failed (the message carries the Workflow's reason and message).
    pub const WORKFLOW_FAILED: &str = "WorkflowFailed";
    /// The override Template (or the default's image) is missing.
    pub const TEMPLATE_INVALID: &str = "TemplateInvalid";
    /// Paused.
    pub const PAUSED_REASON: &str = "Paused";
    /// Not paused.
    pub const NOT_PAUSED: &str = "NotPaused";
    /// The control plane endpoint has no host.
    pub const NO_ENDPOINT: &str = "WaitingForControlPlaneEndpoint";
    /// Provisioned.
    pub const PROVISIONED_REASON: &str = "Provisioned";
    /// Deleting: powering the Hardware off through its BMC failed (retried after the wait
    /// period; the message has the BMC's error).
    pub const DELETING_POWER_OFF_FAILED: &str = "PowerOffFailed";
}
