//! Reading a machine: `/proc`, `/sys` and the SMBIOS tables under a root directory.
//!
//! Every source is optional: a file that is missing or unreadable leaves its fields absent and
//! adds a warning, so a container, a VM without SMBIOS or a kernel without some attribute
//! still yields an inventory. Every read is bounded ([`read_limited`]), every list is cut at
//! its validation limit (with a warning), so what the collector produces always passes
//! [`crate::Inventory::validate`] and a machine with 4,000 SR-IOV functions still enrolls.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::model::{
    Baseboard, Bios, Chassis, Cpu, Disk, Inventory, Memory, Nic, PciDevice, SmbiosOrigin,
    SmbiosSource, System,
};
use crate::smbios;
use crate::text::clean;
use crate::validate::{
    MAX_CPU_FLAGS, MAX_DISKS, MAX_MEMORY_MODULES, MAX_NICS, MAX_PCI_DEVICES, MAX_PROCESSORS,
    MAX_THREADS, MAX_WARNINGS, OPERSTATES, is_mac, is_pci_address,
};

/// `/proc/cpuinfo` of a 512-thread machine is about 1 MiB.
const CPUINFO_LIMIT: u64 = 8 << 20;
/// SMBIOS 2.x tables are at most 64 KiB; 3.x tables seen in the wild stay well under 1 MiB.
const DMI_TABLE_LIMIT: u64 = 4 << 20;
/// sysfs attributes are at most a page.
const ATTR_LIMIT: u64 = 4096;
/// Directory entries read per directory before giving up on the rest.
const DIR_LIMIT: usize = 16384;

/// Reads a file, at most `limit` bytes.
pub fn read_limited(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_end(&mut out)?;
    Ok(out)
}

struct Ctx {
    root: PathBuf,
    warnings: Vec<String>,
}

impl Ctx {
    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn warn(&mut self, msg: String) {
        if self.warnings.len() < MAX_WARNINGS - 1 {
            // File names and OS errors go in: keep the text printable and bounded.
            let msg: String = msg
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            self.warnings
                .push(crate::text::truncate(&msg, 256).to_owned());
        } else if self.warnings.len() == MAX_WARNINGS - 1 {
            self.warnings.push("further warnings dropped".into());
        }
    }

    /// A small sysfs attribute, trimmed; `None` when missing, unreadable or empty.
    fn attr(&self, path: &Path) -> Option<String> {
        let raw = read_limited(path, ATTR_LIMIT).ok()?;
        let s = String::from_utf8_lossy(&raw).trim().to_owned();
        (!s.is_empty()).then_some(s)
    }

    /// A text attribute through [`clean`] (placeholders dropped, bounded).
    fn text(&self, path: &Path) -> Option<String> {
        read_limited(path, ATTR_LIMIT).ok().and_then(|b| clean(&b))
    }

    fn number<T: std::str::FromStr>(&self, path: &Path) -> Option<T> {
        self.attr(path)?.parse().ok()
    }

    /// Sorted entry names of a directory, at most [`DIR_LIMIT`].
    fn entries(&mut self, rel: &str) -> Vec<String> {
        let dir = self.path(rel);
        let read = match std::fs::read_dir(&dir) {
            Ok(r) => r,
            Err(e) => {
                self.warn(format!("/{rel}: {e}"));
                return Vec::new();
            }
        };
        let mut names: Vec<String> = read
            .filter_map(|e| e.ok())
            .take(DIR_LIMIT)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }
}

/// Base name of a symlink's target (`device/driver` -> `ixgbe`).
fn link_name(path: &Path) -> Option<String> {
    let target = std::fs::read_link(path).ok()?;
    let name = target.file_name()?.to_str()?;
    clean(name.as_bytes())
}

/// Collects the inventory of the machine whose `/proc` and `/sys` are under `root`
/// (`/` for this machine).
pub fn collect(root: &Path) -> Inventory {
    let mut ctx = Ctx {
        root: root.to_path_buf(),
        warnings: Vec::new(),
    };
    let cpu = cpu(&mut ctx);
    let mut memory = Memory {
        usable_bytes: mem_total(&mut ctx),
        ..Memory::default()
    };
    let firmware = firmware(&mut ctx);
    if !firmware.modules.is_empty() {
        let sizes: Option<Vec<u64>> = firmware.modules.iter().map(|m| m.size_bytes).collect();
        memory.installed_bytes = sizes.map(|s| s.iter().fold(0u64, |a, b| a.saturating_add(*b)));
        memory.modules = firmware.modules;
    }
    let disks = disks(&mut ctx);
    let nics = nics(&mut ctx);
    let pci_devices = pci_devices(&mut ctx);
    Inventory {
        collected_at: jiff::Timestamp::now(),
        cpu,
        memory,
        smbios: firmware.source,
        bios: firmware.bios,
        system: firmware.system,
        baseboard: firmware.baseboard,
        chassis: firmware.chassis,
        processors: firmware.processors,
        disks,
        nics,
        pci_devices,
        warnings: ctx.warnings,
    }
}

// ---------------------------------------------------------------------------------------------
// CPU and memory

fn cpu(ctx: &mut Ctx) -> Cpu {
    match read_limited(&ctx.path("proc/cpuinfo"), CPUINFO_LIMIT) {
        Ok(raw) => {
            let mut cpu = parse_cpuinfo(&String::from_utf8_lossy(&raw));
            if cpu.threads == 0 {
                ctx.warn("/proc/cpuinfo: no processor entries".into());
            }
            if cpu.threads > MAX_THREADS {
                ctx.warn(format!(
                    "/proc/cpuinfo: {} processors, reported as {MAX_THREADS}",
                    cpu.threads
                ));
                cpu.threads = MAX_THREADS;
            }
            cpu.cores = cpu.cores.min(cpu.threads);
            cpu.sockets = cpu.sockets.min(cpu.cores);
            cpu
        }
        Err(e) => {
            ctx.warn(format!("/proc/cpuinfo: {e}"));
            Cpu::default()
        }
    }
}

/// Parses `/proc/cpuinfo` (x86, Arm, POWER, RISC-V spellings).
pub fn parse_cpuinfo(text: &str) -> Cpu {
    let mut threads = 0u32;
    let mut sockets = BTreeSet::new();
    let mut cores = BTreeSet::new();
    let mut any_core_id = false;
    let mut cpu = Cpu::default();
    for block in text.split("\n\n") {
        let mut physical: Option<&str> = None;
        let mut core: Option<&str> = None;
        let mut is_processor = false;
        for line in block.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "processor" if value.parse::<u32>().is_ok() => is_processor = true,
                "physical id" => physical = Some(value),
                "core id" => core = Some(value),
                "model name" | "cpu model" | "uarch" | "cpu" if cpu.model.is_none() => {
                    cpu.model = clean(value.as_bytes());
                }
                "vendor_id" | "vendor" | "mvendorid" if cpu.vendor.is_none() => {
                    cpu.vendor = clean(value.as_bytes());
                }
                "flags" | "Features" | "isa" if cpu.flags.is_empty() => {
                    cpu.flags = value
                        .split_whitespace()
                        .take(MAX_CPU_FLAGS)
                        .filter_map(|f| clean(f.as_bytes()))
                        .collect();
                }
                _ => {}
            }
        }
        if is_processor {
            threads += 1;
            let socket = physical.unwrap_or("0");
            sockets.insert(socket.to_owned());
            if let Some(core) = core {
                any_core_id = true;
                cores.insert((socket.to_owned(), core.to_owned()));
            }
        }
    }
    cpu.threads = threads;
    cpu.sockets = if threads == 0 {
        0
    } else {
        sockets.len() as u32
    };
    cpu.cores = if any_core_id {
        cores.len() as u32
    } else {
        threads
    };
    cpu
}

fn mem_total(ctx: &mut Ctx) -> Option<u64> {
    let raw = match read_limited(&ctx.path("proc/meminfo"), 64 << 10) {
        Ok(r) => r,
        Err(e) => {
            ctx.warn(format!("/proc/meminfo: {e}"));
            return None;
        }
    };
    let total = parse_mem_total(&String::from_utf8_lossy(&raw));
    if total.is_none() {
        ctx.warn("/proc/meminfo: no MemTotal line".into());
    }
    total
}

/// `MemTotal:  24684096 kB` -> bytes.
pub fn parse_mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Firmware (SMBIOS)

struct Firmware {
    source: Option<SmbiosSource>,
    bios: Option<Bios>,
    system: Option<System>,
    baseboard: Option<Baseboard>,
    chassis: Option<Chassis>,
    processors: Vec<crate::model::ProcessorSocket>,
    modules: Vec<crate::model::MemoryModule>,
}

fn firmware(ctx: &mut Ctx) -> Firmware {
    match smbios_tables(ctx) {
        Some(f) => f,
        None => dmi_id(ctx),
    }
}

/// The raw tables; `None` (after a warning) when they are missing, unreadable or hold no
/// structure, so the caller falls back to `/sys/class/dmi/id`.
fn smbios_tables(ctx: &mut Ctx) -> Option<Firmware> {
    let table_path = ctx.path("sys/firmware/dmi/tables/DMI");
    let table = match read_limited(&table_path, DMI_TABLE_LIMIT) {
        Ok(t) => t,
        Err(e) => {
            ctx.warn(format!(
                "/sys/firmware/dmi/tables/DMI: {e}; using /sys/class/dmi/id"
            ));
            return None;
        }
    };
    let entry = read_limited(&ctx.path("sys/firmware/dmi/tables/smbios_entry_point"), 256)
        .map_err(|e| e.to_string())
        .and_then(|b| smbios::parse_entry_point(&b).map_err(|e| e.to_string()));
    let version = match entry {
        Ok(ep) => Some(ep.version),
        Err(e) => {
            ctx.warn(format!(
                "/sys/firmware/dmi/tables/smbios_entry_point: {e}; UUID read in the 2.6+ byte order"
            ));
            None
        }
    };
    let mut decoded = smbios::decode(&table, version);
    if let Some(problem) = &decoded.problem {
        ctx.warn(format!("SMBIOS table: {problem}"));
    }
    if decoded.structures == 0 {
        ctx.warn("SMBIOS table: no structure; using /sys/class/dmi/id".into());
        return None;
    }
    if decoded.processors.len() > MAX_PROCESSORS {
        ctx.warn(format!(
            "SMBIOS: {} processor sockets, reported the first {MAX_PROCESSORS}",
            decoded.processors.len()
        ));
        decoded.processors.truncate(MAX_PROCESSORS);
    }
    if decoded.memory_modules.len() > MAX_MEMORY_MODULES {
        ctx.warn(format!(
            "SMBIOS: {} memory devices, reported the first {MAX_MEMORY_MODULES}",
            decoded.memory_modules.len()
        ));
        decoded.memory_modules.truncate(MAX_MEMORY_MODULES);
    }
    Some(Firmware {
        source: Some(SmbiosSource {
            source: SmbiosOrigin::Tables,
            version: version.map(|v| v.to_string()),
        }),
        bios: decoded.bios,
        system: decoded.system,
        baseboard: decoded.baseboard,
        chassis: decoded.chassis,
        processors: decoded.processors,
        modules: decoded.memory_modules,
    })
}

/// The kernel's decoded copy in `/sys/class/dmi/id` (no DIMMs, no sockets; the UUID already in
/// canonical order).
fn dmi_id(ctx: &mut Ctx) -> Firmware {
    let dir = ctx.path("sys/class/dmi/id");
    let none = Firmware {
        source: None,
        bios: None,
        system: None,
        baseboard: None,
        chassis: None,
        processors: Vec::new(),
        modules: Vec::new(),
    };
    if !dir.is_dir() {
        ctx.warn("/sys/class/dmi/id: missing; no firmware identity".into());
        return none;
    }
    let t = |name: &str| ctx.text(&dir.join(name));
    let bios = Bios {
        vendor: t("bios_vendor"),
        version: t("bios_version"),
        release_date: t("bios_date"),
    };
    let system = System {
        manufacturer: t("sys_vendor"),
        product: t("product_name"),
        version: t("product_version"),
        serial: t("product_serial"),
        uuid: t("product_uuid")
            .map(|u| u.to_ascii_lowercase())
            .filter(|u| crate::validate::is_uuid(u)),
        sku: t("product_sku"),
        family: t("product_family"),
    };
    let baseboard = Baseboard {
        manufacturer: t("board_vendor"),
        product: t("board_name"),
        version: t("board_version"),
        serial: t("board_serial"),
        asset_tag: t("board_asset_tag"),
    };
    let chassis = Chassis {
        manufacturer: t("chassis_vendor"),
        // The kernel writes the type byte in decimal.
        kind: t("chassis_type")
            .and_then(|v| v.parse::<u8>().ok())
            .and_then(|v| smbios::chassis_type(v & 0x7F))
            .map(str::to_owned),
        version: t("chassis_version"),
        serial: t("chassis_serial"),
        asset_tag: t("chassis_asset_tag"),
    };
    let some = |present: bool| present.then_some(());
    Firmware {
        source: Some(SmbiosSource {
            source: SmbiosOrigin::DmiId,
            version: None,
        }),
        bios: some(bios != Bios::default()).map(|_| bios),
        system: some(system != System::default()).map(|_| system),
        baseboard: some(baseboard != Baseboard::default()).map(|_| baseboard),
        chassis: some(chassis != Chassis::default()).map(|_| chassis),
        processors: Vec::new(),
        modules: Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Block devices

/// Virtual block devices that are not disks.
const SKIP_BLOCK: &[&str] = &["loop", "ram", "zram", "dm-", "md", "nbd"];

fn disks(ctx: &mut Ctx) -> Vec<Disk> {
    let names = ctx.entries("sys/block");
    let mut out = Vec::new();
    for name in names {
        if SKIP_BLOCK.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        if out.len() == MAX_DISKS {
            ctx.warn(format!(
                "/sys/block: more than {MAX_DISKS} disks, the rest not reported"
            ));
            break;
        }
        if let Some(d) = disk(ctx, &name) {
            out.push(d);
        }
    }
    out
}

fn controller(name: &str) -> Option<&'static str> {
    Some(match name {
        n if n.starts_with("nvme") => "nvme",
        n if n.starts_with("vd") => "virtio",
        n if n.starts_with("sd") || n.starts_with("sr") => "scsi",
        n if n.starts_with("mmcblk") => "mmc",
        n if n.starts_with("hd") => "ide",
        n if n.starts_with("xvd") => "xen",
        _ => return None,
    })
}

fn disk(ctx: &mut Ctx, name: &str) -> Option<Disk> {
    let dir = ctx.path("sys/block").join(name);
    let Some(sectors) = ctx.number::<u64>(&dir.join("size")) else {
        ctx.warn(format!("/sys/block/{name}/size: unreadable; disk skipped"));
        return None;
    };
    let controller = controller(name);
    let flag = |p: &str| ctx.number::<u8>(&dir.join(p)).map(|v| v != 0);
    let dev = dir.join("device");
    // virtio's device/vendor is the virtio vendor id, not a disk vendor.
    let vendor = if controller == Some("virtio") {
        None
    } else {
        ctx.text(&dev.join("vendor"))
    };
    let serial = ctx
        .text(&dir.join("serial"))
        .or_else(|| ctx.text(&dev.join("serial")))
        .or_else(|| {
            read_limited(&dev.join("vpd_pg80"), ATTR_LIMIT)
                .ok()
                .and_then(|b| vpd_serial(&b))
        });
    let wwn = ctx
        .text(&dir.join("wwid"))
        .or_else(|| ctx.text(&dev.join("wwid")));
    Some(Disk {
        name: name.to_owned(),
        size_bytes: sectors.saturating_mul(512),
        rotational: flag("queue/rotational"),
        removable: flag("removable"),
        controller: controller.map(str::to_owned),
        vendor,
        model: ctx.text(&dev.join("model")),
        serial,
        wwn,
        physical_block_size: ctx.number(&dir.join("queue/physical_block_size")),
        logical_block_size: ctx.number(&dir.join("queue/logical_block_size")),
    })
}

/// The Unit Serial Number VPD page (0x80): 4-byte header (page code at 1, big-endian length
/// at 2..4), then the serial.
pub fn vpd_serial(page: &[u8]) -> Option<String> {
    if page.get(1) != Some(&0x80) {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([*page.get(2)?, *page.get(3)?]));
    let body = page.get(4..)?;
    clean(body.get(..len).unwrap_or(body))
}

// ---------------------------------------------------------------------------------------------
// Network interfaces

fn nics(ctx: &mut Ctx) -> Vec<Nic> {
    let names = ctx.entries("sys/class/net");
    let mut out = Vec::new();
    for name in names {
        let dir = ctx.path("sys/class/net").join(&name);
        // Only interfaces backed by a device: no lo, bridges, bonds, veth, tunnels.
        if std::fs::symlink_metadata(dir.join("device")).is_err() {
            continue;
        }
        if out.len() == MAX_NICS {
            ctx.warn(format!(
                "/sys/class/net: more than {MAX_NICS} NICs, the rest not reported"
            ));
            break;
        }
        let mac = ctx
            .attr(&dir.join("address"))
            .map(|m| m.to_ascii_lowercase());
        let Some(mac) = mac.filter(|m| is_mac(m)) else {
            ctx.warn(format!(
                "/sys/class/net/{name}/address: not a 6-byte MAC; interface skipped"
            ));
            continue;
        };
        let (pci_address, pci_id) = match nic_pci(ctx, &dir.join("device")) {
            Some((addr, id)) => (Some(addr), id),
            None => (None, None),
        };
        out.push(Nic {
            driver: link_name(&dir.join("device/driver")),
            // `speed` reads -1 or fails (EINVAL) while the link is down.
            speed_mbps: ctx
                .number::<i64>(&dir.join("speed"))
                .filter(|s| *s > 0)
                .and_then(|s| u32::try_from(s).ok()),
            // Through `attr`, not `text`: "unknown" is a real operstate, not a placeholder.
            operstate: ctx
                .attr(&dir.join("operstate"))
                .filter(|s| OPERSTATES.contains(&s.as_str())),
            carrier: ctx.number::<u8>(&dir.join("carrier")).map(|c| c != 0),
            mtu: ctx.number(&dir.join("mtu")),
            pci_address,
            pci_id,
            name,
            mac,
        });
    }
    out
}

/// The PCI function under a NIC's `device` link: the link itself for a PCI NIC, a parent for
/// virtio (`…/0000:00:03.0/virtio2`). Only paths that stay under the root count.
fn nic_pci(ctx: &Ctx, device: &Path) -> Option<(String, Option<String>)> {
    let root = std::fs::canonicalize(&ctx.root).ok()?;
    let mut dir = std::fs::canonicalize(device).ok()?;
    for _ in 0..4 {
        if !dir.starts_with(&root) {
            return None;
        }
        if let Some(name) = dir.file_name().and_then(|n| n.to_str())
            && is_pci_address(name)
        {
            let vendor = ctx.attr(&dir.join("vendor")).and_then(|v| hex_id(&v, 4));
            let devid = ctx.attr(&dir.join("device")).and_then(|v| hex_id(&v, 4));
            let id = vendor.zip(devid).map(|(v, d)| format!("{v}:{d}"));
            return Some((name.to_owned(), id));
        }
        dir = dir.parent()?.to_path_buf();
    }
    None
}

/// `0x8086` -> `8086` (lower case, exactly `digits` hex digits).
fn hex_id(raw: &str, digits: usize) -> Option<String> {
    let s = raw.trim();
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let v = u32::from_str_radix(s, 16).ok()?;
    let out = format!("{v:0digits$x}");
    (out.len() == digits).then_some(out)
}

// ---------------------------------------------------------------------------------------------
// PCI

fn pci_devices(ctx: &mut Ctx) -> Vec<PciDevice> {
    let names = ctx.entries("sys/bus/pci/devices");
    let mut out = Vec::new();
    for name in names {
        if !is_pci_address(&name) {
            ctx.warn(format!(
                "/sys/bus/pci/devices/{name}: not a PCI address; skipped"
            ));
            continue;
        }
        if out.len() == MAX_PCI_DEVICES {
            ctx.warn(format!(
                "/sys/bus/pci/devices: more than {MAX_PCI_DEVICES} devices, the rest not reported"
            ));
            break;
        }
        let dir = ctx.path("sys/bus/pci/devices").join(&name);
        let hex =
            |file: &str, digits: usize| ctx.attr(&dir.join(file)).and_then(|v| hex_id(&v, digits));
        let ids = (hex("class", 6), hex("vendor", 4), hex("device", 4));
        let subsystem_vendor = hex("subsystem_vendor", 4);
        let subsystem_device = hex("subsystem_device", 4);
        let (Some(class), Some(vendor), Some(device)) = ids else {
            ctx.warn(format!(
                "/sys/bus/pci/devices/{name}: class, vendor or device unreadable; skipped"
            ));
            continue;
        };
        out.push(PciDevice {
            class_name: u8::from_str_radix(&class[..2], 16)
                .ok()
                .and_then(pci_class_name)
                .map(str::to_owned),
            class,
            vendor,
            device,
            subsystem_vendor,
            subsystem_device,
            driver: link_name(&dir.join("driver")),
            address: name,
        });
    }
    out
}

/// PCI base class names, as pci.ids spells them.
fn pci_class_name(base: u8) -> Option<&'static str> {
    Some(match base {
        0x00 => "Unclassified device",
        0x01 => "Mass storage controller",
        0x02 => "Network controller",
        0x03 => "Display controller",
        0x04 => "Multimedia controller",
        0x05 => "Memory controller",
        0x06 => "Bridge",
        0x07 => "Communication controller",
        0x08 => "Generic system peripheral",
        0x09 => "Input device controller",
        0x0a => "Docking station",
        0x0b => "Processor",
        0x0c => "Serial bus controller",
        0x0d => "Wireless controller",
        0x0e => "Intelligent controller",
        0x0f => "Satellite communications controller",
        0x10 => "Encryption controller",
        0x11 => "Signal processing controller",
        0x12 => "Processing accelerators",
        0x13 => "Non-Essential Instrumentation",
        0x40 => "Coprocessor",
        0xff => "Unassigned class",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_x86_two_sockets_with_hyperthreads() {
        let mut text = String::new();
        let mut n = 0;
        for socket in 0..2 {
            for core in 0..4 {
                for _ht in 0..2 {
                    text.push_str(&format!(
                        "processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon X\nphysical id\t: {socket}\ncore id\t\t: {core}\nflags\t\t: fpu vme sse2\n\n"
                    ));
                    n += 1;
                }
            }
        }
        let cpu = parse_cpuinfo(&text);
        assert_eq!((cpu.sockets, cpu.cores, cpu.threads), (2, 8, 16));
        assert_eq!(cpu.model.as_deref(), Some("Xeon X"));
        assert_eq!(cpu.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(cpu.flags, vec!["fpu", "vme", "sse2"]);
    }

    #[test]
    fn cpuinfo_arm_without_topology() {
        let text = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm\nCPU implementer\t: 0x41\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm\n\n";
        let cpu = parse_cpuinfo(text);
        assert_eq!((cpu.sockets, cpu.cores, cpu.threads), (1, 2, 2));
        assert_eq!(cpu.flags, vec!["fp", "asimd", "evtstrm"]);
        assert_eq!(cpu.model, None);
        assert_eq!(parse_cpuinfo("").threads, 0);
        assert_eq!(parse_cpuinfo("").sockets, 0);
    }

    #[test]
    fn meminfo() {
        assert_eq!(
            parse_mem_total("MemTotal:       24684096 kB\nMemFree: 1 kB\n"),
            Some(24684096 * 1024)
        );
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: x kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: 1 MB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: 99999999999999999999 kB\n"), None);
    }

    #[test]
    fn vpd_page_80() {
        assert_eq!(
            vpd_serial(b"\x00\x80\x00\x08ZA1B2C3D").as_deref(),
            Some("ZA1B2C3D")
        );
        assert_eq!(
            vpd_serial(b"\x00\x80\x00\x20short").as_deref(),
            Some("short")
        );
        assert_eq!(vpd_serial(b"\x00\x83\x00\x02ab"), None);
        assert_eq!(vpd_serial(b"\x00\x80"), None);
    }

    #[test]
    fn hex_ids() {
        assert_eq!(hex_id("0x8086\n", 4).as_deref(), Some("8086"));
        assert_eq!(hex_id("0x020000", 6).as_deref(), Some("020000"));
        assert_eq!(hex_id("0x1AF4", 4).as_deref(), Some("1af4"));
        assert_eq!(hex_id("0x12345", 4), None);
        assert_eq!(hex_id("zz", 4), None);
    }
}
