//! `Hardware`: a machine that can execute Workflows.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::{LocalObjectReference, patterns, rules};
use crate::serde_util::{empty_as_none, is_false};

/// The lease time served when `leaseTime` is not given: 24 hours, in seconds.
pub const DEFAULT_LEASE_TIME: i32 = 86_400;

fn default_lease_time() -> i32 {
    DEFAULT_LEASE_TIME
}

/// The desired state of a machine: its network interfaces (DHCP reservations and netboot
/// switches), boot environment, instance data and storage devices.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha2",
    kind = "Hardware",
    plural = "hardware",
    singular = "hardware",
    namespaced,
    shortname = "hw",
    category = "tinkerbell",
    status = "HardwareStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Hardware is a logical representation of a machine that can execute Workflows.",
    printcolumn(
        name = "IP",
        type_ = "string",
        json_path = ".spec.networkInterfaces.*.dhcp.ip",
        description = "IP address served to a network interface"
    ),
    printcolumn(
        name = "Hostname",
        type_ = "string",
        json_path = ".spec.networkInterfaces.*.dhcp.hostname",
        description = "Hostname served to a network interface"
    ),
    printcolumn(
        name = "OSIE",
        type_ = "string",
        json_path = ".spec.osie.osieRef.name",
        description = "OSIE the machine netboots"
    ),
    printcolumn(
        name = "BMC",
        type_ = "string",
        json_path = ".spec.bmcRef.name",
        description = "Baseboard management controller attached to the Hardware",
        priority = "1"
    ),
    printcolumn(
        name = "Threads",
        type_ = "integer",
        json_path = ".status.attributes.inBand.cpu.totalThreads",
        description = "Logical processors the agent reported",
        priority = "1"
    ),
    printcolumn(
        name = "Memory",
        type_ = "integer",
        json_path = ".status.attributes.inBand.memory.totalBytes",
        description = "Memory in bytes the agent reported",
        priority = "1"
    ),
    printcolumn(
        name = "Serial",
        type_ = "string",
        json_path = ".status.attributes.inBand.product.serialNumber",
        description = "System serial number the agent reported (SMBIOS)",
        priority = "1"
    ),
    printcolumn(
        name = "Inventory",
        type_ = "date",
        json_path = ".status.inventoryReportedAt",
        description = "When the agent's inventory was last stored",
        priority = "1"
    ),
    printcolumn(
        name = "Approved",
        type_ = "boolean",
        json_path = ".spec.discovery.approved",
        description = "Discovered machines only: whether it may get Workflows",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HardwareSpec {
    /// NetworkInterfaces defines the desired DHCP and netboot configuration for each network
    /// interface, keyed by lower-case MAC address. When given, at least one. (Optional, as the
    /// seed's `omitempty` makes it: a machine known only by its BMC, or a v1alpha1 Hardware with
    /// no interfaces, has none and never netboots.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "minProperties" = 1,
        "maxProperties" = 64,
        "x-kubernetes-validations" = [{"rule": rules::MAC_KEYS, "message": rules::MAC_KEYS_MSG}]
    ))]
    pub network_interfaces: BTreeMap<String, NetworkInterface>,

    /// IPXE provides iPXE script override fields. This is useful for debugging or netboot
    /// customization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipxe: Option<Ipxe>,

    /// OSIE describes the Operating System Installation Environment to be netbooted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub osie: Option<HardwareOsie>,

    /// Instance describes instance specific data that is generally unused by Tinkerbell core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<Instance>,

    /// StorageDevices is a list of storage devices that will be available in the OSIE, as Linux
    /// device paths without partitions (`/dev/sda`, `/dev/nvme0n1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(pattern(patterns::STORAGE_DEVICE)))]
    pub storage_devices: Vec<String>,

    /// BMCRef references a Rufio Machine object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc_ref: Option<LocalObjectReference>,

    /// Discovery is set on a Hardware the controller created for a machine that enrolled
    /// itself (its agent reported an inventory under an id no Hardware named). Such a machine
    /// gets no Workflow until `approved` is true; making it true needs the verb `approve` on
    /// `hardware.tinkerbell.org` (checked by the webhook), not only `update`. A Hardware without
    /// this field was written by a person and needs no approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,
}

/// How a discovered machine came, and whether a person (or a rule) approved it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Approved: the machine may get Workflows (and with them, secrets). Needs `approve`.
    #[serde(default)]
    pub approved: bool,

    /// When the machine first enrolled (RFC 3339, set by the controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered_at: Option<String>,

    /// The address the machine's agent enrolled from (as its server saw it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub address: Option<String>,
}

/// The observed state of a machine (written by the controller through the status
/// subresource): what its agent reported about it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareStatus {
    /// Attributes observed about the machine, in Tinkerbell's `attributes` shape: `inBand`
    /// (the agent's inventory, from inside the OS) and `outOfBand` (a BMC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<HardwareAttributes>,

    /// When the controller last stored a changed inventory from the machine's agent (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_reported_at: Option<String>,

    /// Who reported `attributes.inBand`: `Agent` (the machine's authenticated agent) or
    /// `Enrollment` (an unknown machine, without credentials, when it was discovered). Only an
    /// `Agent` inventory is trusted for decisions (rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "inventory_source_schema")]
    pub inventory_source: Option<String>,

    /// The last inventory request (annotation `tinkerbell.org/inventory-request`) the machine's
    /// agent answered: the request's id, as the controller derived it from the annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub inventory_request: Option<String>,
}

/// The annotation that asks a machine's agent for a fresh inventory. Its value is free (a date,
/// a ticket number); a new value is a new request. The controller removes it once answered.
pub const INVENTORY_REQUEST_ANNOTATION: &str = "tinkerbell.org/inventory-request";

/// The id of the inventory request that the annotation value `value` makes on the Hardware with
/// `uid` (what `status.inventoryRequest` says once answered): 32 hex characters of SHA-256 over
/// both, so the same text on a re-created Hardware is a new request and the operator's text
/// never travels to the machine.
pub fn inventory_request_id(uid: &str, value: &str) -> String {
    let mut bytes = Vec::with_capacity(uid.len() + value.len() + 1);
    bytes.extend_from_slice(uid.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(value.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `status.inventorySource` of an inventory from the machine's authenticated agent.
pub const INVENTORY_SOURCE_AGENT: &str = "Agent";
/// `status.inventorySource` of an inventory taken at enrollment (no credentials).
pub const INVENTORY_SOURCE_ENROLLMENT: &str = "Enrollment";

fn inventory_source_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": [INVENTORY_SOURCE_AGENT, INVENTORY_SOURCE_ENROLLMENT]})
}

impl HardwareStatus {
    /// The inventory (`attributes.inBand`) when the machine's authenticated agent reported it;
    /// `None` for none, or one taken at enrollment without credentials.
    pub fn authenticated_inventory(&self) -> Option<&serde_json::Value> {
        if self.inventory_source.as_deref() != Some(INVENTORY_SOURCE_AGENT) {
            return None;
        }
        self.attributes.as_ref().and_then(|a| a.in_band.as_ref())
    }
}

/// Tinkerbell's `HardwareAttributes`: one `Attributes` subtree per collection path.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareAttributes {
    /// Attributes collected by the agent from inside the machine (`collectionMethod: agent`):
    /// cpu, memory, blockDevices, networkInterfaces, pciDevices, chassis, baseboard, bios,
    /// product, lastUpdated (the shape of tink-inventory's `Attributes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "attributes_schema")]
    pub in_band: Option<serde_json::Value>,

    /// Attributes collected out of band (a BMC), in the same shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "attributes_schema")]
    pub out_of_band: Option<serde_json::Value>,
}

/// Schema of an `Attributes` subtree: its fields kept as the collector wrote them, with the
/// few that printer columns show typed.
fn attributes_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "lastUpdated": {"type": "string"},
            "collectionMethod": {"type": "string"},
            "cpu": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "totalCores": {"type": "integer"},
                    "totalThreads": {"type": "integer"}
                }
            },
            "memory": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "totalBytes": {"type": "integer"},
                    "usableBytes": {"type": "integer"}
                }
            },
            "product": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "serialNumber": {"type": "string"}
                }
            }
        }
    })
}

/// The desired configuration for a particular network interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// DHCP is the basic network information for serving DHCP requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp: Option<Dhcp>,

    /// DisableDHCP disables DHCP for this interface. Implies DisableNetboot.
    #[serde(default, skip_serializing_if = "is_false")]
    #[schemars(extend("default" = false))]
    pub disable_dhcp: bool,

    /// DisableNetboot disables netbooting for this interface. The interface will still receive
    /// network information specified by DHCP.
    #[serde(default, skip_serializing_if = "is_false")]
    #[schemars(extend("default" = false))]
    pub disable_netboot: bool,
}

impl NetworkInterface {
    /// Whether this interface may netboot (DHCP enabled and netboot not disabled).
    pub fn netboot_allowed(&self) -> bool {
        !self.disable_dhcp && !self.disable_netboot
    }
}

/// Basic network configuration to be served in DHCP OFFER responses; a DHCP reservation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dhcp {
    /// IP is an IPv4 address to serve.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    #[schemars(pattern(patterns::IPV4))]
    pub ip: Option<String>,

    /// Netmask is an IPv4 netmask to serve.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    #[schemars(pattern(patterns::NETMASK))]
    pub netmask: Option<String>,

    /// Gateway is the default gateway address to serve.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    #[schemars(pattern(patterns::IPV4))]
    pub gateway: Option<String>,

    /// Hostname to serve.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    #[schemars(pattern(patterns::HOSTNAME), length(max = 253))]
    pub hostname: Option<String>,

    /// VLANID is a VLAN ID between 0 and 4096 (or a comma-separated list of them).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    #[schemars(pattern(patterns::VLAN_ID))]
    pub vlan_id: Option<String>,

    /// Nameservers to serve: hostnames or IPv4 addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(pattern(patterns::HOST_OR_IPV4)))]
    pub nameservers: Vec<String>,

    /// Timeservers to serve: hostnames or IPv4 addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(pattern(patterns::HOST_OR_IPV4)))]
    pub timeservers: Vec<String>,

    /// LeaseTime to serve, in seconds. 86400 (24h) when not given.
    #[serde(default = "default_lease_time")]
    #[schemars(range(min = 0))]
    pub lease_time: i32,
}

impl Default for Dhcp {
    fn default() -> Self {
        Self {
            ip: None,
            netmask: None,
            gateway: None,
            hostname: None,
            vlan_id: None,
            nameservers: Vec::new(),
            timeservers: Vec::new(),
            lease_time: DEFAULT_LEASE_TIME,
        }
    }
}

/// The OSIE a Hardware netboots: a reference to an [`super::Osie`] object plus kernel
/// parameters. (`OSIE` in the seed; renamed in Rust so it does not clash with the OSIE kind.)
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareOsie {
    /// OSIERef is a reference to an OSIE object.
    #[serde(default, rename = "osieRef", skip_serializing_if = "Option::is_none")]
    pub osie_ref: Option<LocalObjectReference>,

    /// KernelParams passed to the kernel when launching the OSIE. Parameters are joined with a
    /// space.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_params: Vec<String>,
}

/// Overrides for iPXE scripts. At least one option must be specified, and not both.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(
    extend("minProperties" = 1),
    extend("x-kubernetes-validations" = [{"rule": rules::IPXE_ONE_OF, "message": rules::IPXE_ONE_OF_MSG}])
)]
pub struct Ipxe {
    /// Content is an inline iPXE script (`inline` in JSON).
    #[serde(default, rename = "inline", skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,

    /// URL is a URL to a hosted iPXE script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Instance specific data, typically served by an instance metadata service such as Hegel.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// Userdata is data with a structure understood by the producer and consumer of the data.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub userdata: Option<String>,

    /// Vendordata is data with a structure understood by the producer and consumer of the data.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub vendordata: Option<String>,
}

impl HardwareSpec {
    /// Whether this machine may get Workflows: a Hardware a person wrote always may; a
    /// discovered one once `spec.discovery.approved` is true.
    pub fn approved(&self) -> bool {
        self.discovery.as_ref().is_none_or(|d| d.approved)
    }

    /// The interface with this MAC, compared case-insensitively.
    pub fn interface(&self, mac: &str) -> Option<&NetworkInterface> {
        self.network_interfaces
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(mac))
            .map(|(_, v)| v)
    }

    /// All IPv4 addresses served to this machine's interfaces.
    pub fn ips(&self) -> impl Iterator<Item = &str> {
        self.network_interfaces
            .values()
            .filter_map(|i| i.dhcp.as_ref()?.ip.as_deref())
    }
}
