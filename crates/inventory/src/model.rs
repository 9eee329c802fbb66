//! The inventory a machine reports. JSON names are camelCase, like the Kubernetes objects it
//! ends up in; absent values are omitted. Validation paths ([`crate::validate`]) use these
//! JSON names (`disks[3].serial`).

use serde::{Deserialize, Serialize};

/// Everything the collector read, with the time it was read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// When the collection finished (RFC 3339, UTC).
    pub collected_at: jiff::Timestamp,
    pub cpu: Cpu,
    pub memory: Memory,
    /// Where the firmware identity (BIOS, system, baseboard, chassis, DIMMs) came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smbios: Option<SmbiosSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<Bios>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<System>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseboard: Option<Baseboard>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis: Option<Chassis>,
    /// Populated processor sockets (SMBIOS type 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processors: Vec<ProcessorSocket>,
    /// Block devices (no loop, ram, zram devices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    /// Network interfaces backed by a device (no loopback, bridges, veth, tunnels).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<Nic>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pci_devices: Vec<PciDevice>,
    /// What could not be read, in words (a missing file, a malformed SMBIOS structure, a list
    /// cut at its limit). Collection never fails as a whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Distinct `physical id`s (1 when the kernel does not say).
    pub sockets: u32,
    /// Distinct (`physical id`, `core id`) pairs; the thread count when the kernel does not say.
    pub cores: u32,
    /// Logical processors (`processor` entries).
    pub threads: u32,
    /// Feature flags of the first processor (`flags` on x86, `Features` on Arm).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// `MemTotal` of `/proc/meminfo`: what the kernel can use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usable_bytes: Option<u64>,
    /// Sum of the installed memory devices' sizes (SMBIOS type 17), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_bytes: Option<u64>,
    /// Installed memory devices (empty slots are not listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<MemoryModule>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryModule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bank_locator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// e.g. `DDR4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<String>,
    /// e.g. `DIMM`, `SODIMM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form_factor: Option<String>,
    /// Maximum speed in MT/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mts: Option<u32>,
    /// Configured speed in MT/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configured_speed_mts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_number: Option<String>,
}

/// Which source the firmware identity came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmbiosSource {
    /// `tables` (`/sys/firmware/dmi/tables`) or `dmi-id` (`/sys/class/dmi/id`, the fallback).
    pub source: SmbiosOrigin,
    /// The entry point's version, e.g. `3.0`, when the tables were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmbiosOrigin {
    #[serde(rename = "tables")]
    Tables,
    #[serde(rename = "dmi-id")]
    DmiId,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bios {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// As the firmware writes it (usually `MM/DD/YYYY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_date: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct System {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Lower-case canonical form, byte order per SMBIOS 2.6 (as `dmidecode` prints it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseboard {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_tag: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Chassis {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    /// e.g. `Rack Mount Chassis`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_tag: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessorSocket {
    /// Socket designation, e.g. `CPU1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    /// The processor's name as the firmware reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_speed_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_speed_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// Kernel name, e.g. `nvme0n1`, `sda`, `vda`.
    pub name: String,
    pub size_bytes: u64,
    /// `queue/rotational`: a spinning disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removable: Option<bool>,
    /// `nvme`, `virtio`, `scsi`, `mmc`, `ide`, `xen` (from the name), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// World Wide Name as the kernel spells it (`naa.…`, `eui.…`, `t10.…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_block_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_block_size: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    pub name: String,
    /// Lower-case `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// Kernel driver (`device/driver` link), e.g. `ixgbe`, `virtio_net`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Link speed in Mb/s (absent while the link is down or when the driver does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<u32>,
    /// `operstate`: `up`, `down`, `dormant`, `lowerlayerdown`, `notpresent`, `testing`, `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operstate: Option<String>,
    /// `carrier`: a link is detected (readable only while the interface is up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The PCI function the interface sits on, e.g. `0000:3b:00.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// `vendor:device`, lower-case hex, e.g. `8086:1572`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PciDevice {
    /// `domain:bus:device.function`, e.g. `0000:00:1f.2`.
    pub address: String,
    /// Class code, 6 lower-case hex digits (base class, subclass, programming interface).
    pub class: String,
    /// The base class's name (PCI Code and ID Assignment), e.g. `Network controller`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// Vendor id, 4 lower-case hex digits.
    pub vendor: String,
    /// Device id, 4 lower-case hex digits.
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}
