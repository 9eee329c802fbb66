//! v1alpha1 `Hardware`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Extra, any_object_list_schema, any_object_schema, any_value_schema};
use crate::serde_util::{is_false, null_as_default};

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// HardwareSpec defines the desired state of Hardware.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha1",
    kind = "Hardware",
    plural = "hardware",
    singular = "hardware",
    namespaced,
    shortname = "hw",
    category = "tinkerbell",
    status = "HardwareStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Hardware is the Schema for the Hardware API (Tinkerbell v1alpha1).",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "IP",
        type_ = "string",
        json_path = ".spec.interfaces[0].dhcp.ip.address"
    ),
    printcolumn(
        name = "MAC",
        type_ = "string",
        json_path = ".spec.interfaces[0].dhcp.mac"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HardwareSpec {
    /// BMCRef contains a relation to a BMC state management type in the same namespace as the
    /// Hardware (a Rufio `Machine`).
    #[serde(default, rename = "bmcRef", skip_serializing_if = "Option::is_none")]
    pub bmc_ref: Option<TypedLocalObjectReference>,

    /// Network interfaces: DHCP reservation and netboot settings per interface.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub interfaces: Vec<Interface>,

    /// Metadata served by Hegel (the Equinix Metal metadata shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<HardwareMetadata>,

    /// TinkVersion has no functional use.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tink_version: i64,

    /// Disks of the machine (`device` paths), exposed to templates as `.Hardware.Disks`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub disks: Vec<Disk>,

    /// Resources represents known resources that are available on a machine.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub resources: BTreeMap<String, Quantity>,

    /// UserData is the user data to configure in the hardware's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,

    /// VendorData is the vendor data to configure in the hardware's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_data: Option<String>,

    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `corev1.TypedLocalObjectReference`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypedLocalObjectReference {
    /// APIGroup is the group for the resource being referenced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Kind is the type of resource being referenced.
    #[serde(default)]
    pub kind: String,
    /// Name is the name of resource being referenced.
    #[serde(default)]
    pub name: String,
}

/// HardwareStatus defines the observed state of Hardware.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct HardwareStatus {
    /// State of the hardware (`Ready`, `Error`); unused by Tinkerbell.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A network interface configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Interface {
    /// Netboot settings of the interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netboot: Option<Netboot>,
    /// DHCP reservation of the interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp: Option<Dhcp>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Netboot configuration of an interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Netboot {
    /// Whether the interface may PXE boot.
    #[serde(default, rename = "allowPXE", skip_serializing_if = "Option::is_none")]
    pub allow_pxe: Option<bool>,
    /// Whether workflows may run for this interface.
    #[serde(
        default,
        rename = "allowWorkflow",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_workflow: Option<bool>,
    /// iPXE script override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipxe: Option<Ipxe>,
    /// OSIE location for this interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub osie: Option<Osie>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// iPXE script override.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Ipxe {
    /// URL of a hosted iPXE script.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// An inline iPXE script.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub contents: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// OSIE location: `baseURL` plus kernel and initrd file names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Osie {
    /// Base URL the kernel and initrd are fetched from.
    #[serde(default, rename = "baseURL", skip_serializing_if = "String::is_empty")]
    pub base_url: String,
    /// Kernel file name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel: String,
    /// Initrd file name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub initrd: String,
    /// Kernel parameters added to the OSIE's command line (Tinkerbell's `kernelParams`).
    #[serde(
        default,
        rename = "kernelParams",
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub kernel_params: Vec<String>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// DHCP configuration of an interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Dhcp {
    /// MAC address of the interface.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(pattern(r"([0-9a-f]{2}[:]){5}([0-9a-f]{2})"))]
    pub mac: String,
    /// Hostname to serve.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// Lease time in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lease_time: i64,
    /// Name servers to serve.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub name_servers: Vec<String>,
    /// Time servers to serve.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub time_servers: Vec<String>,
    /// Architecture (`x86_64`, `aarch64`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arch: String,
    /// Whether the machine boots UEFI.
    #[serde(default, skip_serializing_if = "is_false")]
    pub uefi: bool,
    /// Interface name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub iface_name: String,
    /// IP configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Ip>,
    /// VLAN ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vlan_id: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// IP configuration of an interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Ip {
    /// IPv4 address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// Netmask.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub netmask: String,
    /// Default gateway.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
    /// Address family (4).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub family: i64,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Hegel metadata (the Equinix Metal metadata shape). Sub-objects Tinkerbell core never reads
/// are kept as free-form JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct HardwareMetadata {
    /// State (`provisioning`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Bonding mode.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bonding_mode: i64,
    /// Manufacturer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<MetadataManufacturer>,
    /// Instance data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<MetadataInstance>,
    /// Custom data (free-form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object_schema")]
    pub custom: Option<serde_json::Value>,
    /// Facility.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facility: Option<MetadataFacility>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Manufacturer metadata.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetadataManufacturer {
    /// ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Slug.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub slug: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Instance metadata.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetadataInstance {
    /// ID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// State.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Hostname.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// Allow PXE.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_pxe: bool,
    /// Rescue.
    #[serde(default, skip_serializing_if = "is_false")]
    pub rescue: bool,
    /// Operating system (free-form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object_schema")]
    pub operating_system: Option<serde_json::Value>,
    /// Always PXE.
    #[serde(default, skip_serializing_if = "is_false")]
    pub always_pxe: bool,
    /// iPXE script URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ipxe_script_url: String,
    /// IPs (free-form).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(schema_with = "any_object_list_schema")]
    pub ips: Vec<serde_json::Value>,
    /// User data.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub userdata: String,
    /// Crypted root password.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub crypted_root_password: String,
    /// Tags.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub tags: Vec<String>,
    /// Storage (free-form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value_schema")]
    pub storage: Option<serde_json::Value>,
    /// SSH keys.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub ssh_keys: Vec<String>,
    /// Network ready.
    #[serde(default, skip_serializing_if = "is_false")]
    pub network_ready: bool,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Facility metadata.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetadataFacility {
    /// Plan slug.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plan_slug: String,
    /// Plan version slug.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plan_version_slug: String,
    /// Facility code.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub facility_code: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A disk device.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Disk {
    /// Device path, e.g. `/dev/sda`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}
