//! The inventory in Tinkerbell's `attributes` shape.
//!
//! Upstream Tinkerbell (tinkerbell/tinkerbell, `api/v1alpha1/tinkerbell/hardware.go`) stores
//! what it observes about a machine in `Hardware.status.attributes`, split by who collected
//! it: `inBand` (the agent, from inside the OS) and `outOfBand` (the BMC). Each subtree is an
//! `Attributes` object. [`Attributes`] reproduces that type's JSON field names so templates and
//! tools written for upstream read ours unchanged; [`Inventory::to_attributes`] fills it with
//! `collectionMethod: "agent"`.
//!
//! Mapping notes, where upstream's in-band collector (ghw) and ours differ in spelling:
//! - `blockDevices[].driveType`: `HDD` (rotational) or `SSD`; `controllerType` is ghw's
//!   spelling (`NVMe`, `virtio`, `SCSI`, `MMC`, `IDE`).
//! - `pciDevices[]`: `vendor` and `model` are the hex ids (`8086`, `1572`): the OSIE carries no
//!   pci.ids name database. `class` is the base class name.
//! - `networkInterfaces[]`: one entry per interface with one port, as upstream's in-band
//!   collector reports them; `linkStatus` is the kernel operstate.
//! - `memory.modules[].speedMHz` carries SMBIOS's speed in MT/s (the configured speed, else the
//!   maximum), as dmidecode and ghw long reported it under "MHz".
//! - `memory.modules` is filled from SMBIOS type 17 (upstream documents it as out-of-band only;
//!   the SMBIOS tables give it in band too).

use serde::{Deserialize, Serialize};

use crate::model::Inventory;

/// `Hardware.status.attributes`: one subtree per collection path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HardwareAttributes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_band: Option<Attributes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_band: Option<Attributes>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attributes {
    /// RFC 3339 time of the collection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub collection_method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_devices: Vec<BlockDevice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pci_devices: Vec<PciDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis: Option<Chassis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseboard: Option<Baseboard>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<Bios>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<Product>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_cores: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_threads: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<CpuSocket>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuSocket {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cores: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub threads: u32,
    #[serde(rename = "clockSpeedMHz", default, skip_serializing_if = "is_zero")]
    pub clock_speed_mhz: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub total_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub usable_bytes: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<MemoryModule>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryModule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_number: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub size_bytes: u64,
    #[serde(rename = "speedMHz", default, skip_serializing_if = "is_zero")]
    pub speed_mhz: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form_factor: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(rename = "wwn", default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub size_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub physical_block_size_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<NetworkPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub speed_mbps: u32,
    #[serde(rename = "mtu", default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_status: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PciDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Chassis {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseboard {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware_version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bios {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_date: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Product {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_zero64(v: &u64) -> bool {
    *v == 0
}

/// ghw's storage controller spelling.
fn controller_type(ours: &str) -> String {
    match ours {
        "nvme" => "NVMe".into(),
        "scsi" => "SCSI".into(),
        "mmc" => "MMC".into(),
        "ide" => "IDE".into(),
        other => other.into(),
    }
}

impl Inventory {
    /// The in-band `Attributes` subtree (`Hardware.status.attributes.inBand`).
    pub fn to_attributes(&self) -> Attributes {
        let flags = self.cpu.flags.clone();
        let mut sockets: Vec<CpuSocket> = self
            .processors
            .iter()
            .map(|p| CpuSocket {
                slot: p.socket.clone(),
                vendor: p.manufacturer.clone(),
                model: p.version.clone(),
                cores: p.cores.unwrap_or(0),
                threads: p.threads.unwrap_or(0),
                clock_speed_mhz: p.current_speed_mhz.or(p.max_speed_mhz).unwrap_or(0),
                serial_number: p.serial.clone(),
                capabilities: flags.clone(),
            })
            .collect();
        // Without SMBIOS sockets, one entry per /proc/cpuinfo socket would repeat the same
        // model; one entry carries the model and flags.
        if sockets.is_empty() && (self.cpu.model.is_some() || !flags.is_empty()) {
            sockets.push(CpuSocket {
                slot: None,
                vendor: self.cpu.vendor.clone(),
                model: self.cpu.model.clone(),
                cores: if self.cpu.sockets == 1 {
                    self.cpu.cores
                } else {
                    0
                },
                threads: if self.cpu.sockets == 1 {
                    self.cpu.threads
                } else {
                    0
                },
                clock_speed_mhz: 0,
                serial_number: None,
                capabilities: flags,
            });
        }
        let cpu = Cpu {
            total_cores: self.cpu.cores,
            total_threads: self.cpu.threads,
            sockets,
        };
        let memory = Memory {
            total_bytes: self
                .memory
                .installed_bytes
                .or(self.memory.usable_bytes)
                .unwrap_or(0),
            usable_bytes: self.memory.usable_bytes.unwrap_or(0),
            modules: self
                .memory
                .modules
                .iter()
                .map(|m| MemoryModule {
                    slot: m.locator.clone(),
                    vendor: m.manufacturer.clone(),
                    serial_number: m.serial.clone(),
                    part_number: m.part_number.clone(),
                    size_bytes: m.size_bytes.unwrap_or(0),
                    speed_mhz: m.configured_speed_mts.or(m.speed_mts).unwrap_or(0),
                    form_factor: m.form_factor.clone(),
                })
                .collect(),
        };
        let block_devices = self
            .disks
            .iter()
            .map(|d| BlockDevice {
                name: Some(d.name.clone()),
                controller_type: d.controller.as_deref().map(controller_type),
                drive_type: d
                    .rotational
                    .map(|r| if r { "HDD" } else { "SSD" }.to_owned()),
                vendor: d.vendor.clone(),
                model: d.model.clone(),
                serial_number: d.serial.clone(),
                wwn: d.wwn.clone(),
                size_bytes: d.size_bytes,
                physical_block_size_bytes: d.physical_block_size.map(u64::from).unwrap_or(0),
            })
            .collect();
        let network_interfaces = self
            .nics
            .iter()
            .map(|n| {
                let (vendor, model) = match n.pci_id.as_deref().and_then(|id| id.split_once(':')) {
                    Some((v, d)) => (Some(v.to_owned()), Some(d.to_owned())),
                    None => (None, None),
                };
                NetworkInterface {
                    name: Some(n.name.clone()),
                    vendor,
                    model,
                    ports: vec![NetworkPort {
                        mac: Some(n.mac.clone()),
                        speed_mbps: n.speed_mbps.unwrap_or(0),
                        mtu: n.mtu.unwrap_or(0),
                        link_status: n.operstate.clone(),
                    }],
                }
            })
            .collect();
        let pci_devices = self
            .pci_devices
            .iter()
            .map(|p| PciDevice {
                vendor: Some(p.vendor.clone()),
                model: Some(p.device.clone()),
                class: Some(p.class_name.clone().unwrap_or_else(|| p.class.clone())),
                driver: p.driver.clone(),
            })
            .collect();
        let chassis = self.chassis.as_ref().map(|c| Chassis {
            vendor: c.manufacturer.clone(),
            model: c.kind.clone(),
            serial_number: c.serial.clone(),
        });
        let baseboard = self.baseboard.as_ref().map(|b| Baseboard {
            vendor: b.manufacturer.clone(),
            model: b.product.clone(),
            serial_number: b.serial.clone(),
            // SMBIOS's board version is a hardware revision, not firmware.
            firmware_version: None,
        });
        let bios = self.bios.as_ref().map(|b| Bios {
            vendor: b.vendor.clone(),
            firmware_version: b.version.clone(),
            release_date: b.release_date.clone(),
        });
        let product = self.system.as_ref().map(|s| Product {
            name: s.product.clone(),
            vendor: s.manufacturer.clone(),
            model: s.sku.clone(),
            serial_number: s.serial.clone(),
        });
        Attributes {
            // Whole seconds, as a Kubernetes `metav1.Time` holds it.
            last_updated: Some(format!("{:.0}", self.collected_at)),
            collection_method: "agent".into(),
            cpu: Some(cpu),
            memory: Some(memory),
            block_devices,
            network_interfaces,
            pci_devices,
            chassis,
            baseboard,
            bios,
            product,
        }
    }
}
