//! Bounds and validation for an inventory that arrives from a machine.
//!
//! Whoever receives an inventory (the server from an agent, the controller before it writes
//! the Hardware status) calls [`Inventory::from_json`]: the size is checked before parsing,
//! a type error names the field path, and [`Inventory::validate`] checks the limits below and
//! the formats (MAC, PCI address, UUID, hex ids), naming each field path as JSON spells it
//! (`disks[3].serial: longer than 256 bytes`). The collector cuts its lists at the same
//! limits, so an honest machine always produces a valid inventory.

use crate::model::Inventory;

/// Longest accepted string (any field), in bytes.
pub const MAX_STRING_BYTES: usize = 256;
pub const MAX_DISKS: usize = 256;
pub const MAX_NICS: usize = 256;
pub const MAX_PCI_DEVICES: usize = 1024;
pub const MAX_MEMORY_MODULES: usize = 512;
pub const MAX_PROCESSORS: usize = 64;
pub const MAX_CPU_FLAGS: usize = 512;
pub const MAX_WARNINGS: usize = 64;
/// Highest accepted logical processor count.
pub const MAX_THREADS: u32 = 65536;
/// Largest accepted serialized inventory (JSON), in bytes. A Kubernetes object must stay
/// under 1.5 MiB; a large real machine (2 sockets, 48 DIMMs, 24 disks, 300 PCI functions)
/// serializes to about 100 KiB.
pub const MAX_SERIALIZED_BYTES: usize = 1 << 20;
/// At most this many field errors are reported (the first ones in field order).
pub const MAX_REPORTED_ERRORS: usize = 32;

/// One field that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct FieldError {
    /// JSON path, e.g. `disks[3].serial`.
    pub path: String,
    pub problem: String,
}

/// Why an inventory was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    #[error("inventory is {size} bytes, above the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("{path}: {message}")]
    Json { path: String, message: String },
    #[error("{}", join(.0))]
    Invalid(Vec<FieldError>),
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Inventory {
    /// Parses and validates an inventory received from elsewhere.
    pub fn from_json(bytes: &[u8]) -> Result<Inventory, InventoryError> {
        if bytes.len() > MAX_SERIALIZED_BYTES {
            return Err(InventoryError::TooLarge {
                size: bytes.len(),
                limit: MAX_SERIALIZED_BYTES,
            });
        }
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let inventory: Inventory = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            InventoryError::Json {
                path: if path == "." { "(root)".into() } else { path },
                message: e.into_inner().to_string(),
            }
        })?;
        inventory.validate()?;
        Ok(inventory)
    }

    /// Serializes to JSON, refusing an inventory that [`Inventory::validate`] refuses.
    pub fn to_json(&self) -> Result<Vec<u8>, InventoryError> {
        self.validate()?;
        serde_json::to_vec(self).map_err(|e| InventoryError::Json {
            path: "(root)".into(),
            message: e.to_string(),
        })
    }

    /// Checks the limits and formats; all failing fields (up to [`MAX_REPORTED_ERRORS`]) are
    /// reported with their paths.
    pub fn validate(&self) -> Result<(), InventoryError> {
        let mut v = Validator::default();
        v.inventory(self);
        if !v.errors.is_empty() {
            return Err(InventoryError::Invalid(v.errors));
        }
        // Only a structurally valid inventory is measured: its size is then bounded anyway.
        let size = serde_json::to_vec(self)
            .map(|b| b.len())
            .unwrap_or(usize::MAX);
        if size > MAX_SERIALIZED_BYTES {
            return Err(InventoryError::TooLarge {
                size,
                limit: MAX_SERIALIZED_BYTES,
            });
        }
        Ok(())
    }
}

/// `aa:bb:cc:dd:ee:ff`, lower case.
pub fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| is_lower_hex(p, 2))
}

/// `dddd:bb:dd.f`, lower-case hex (domain may have 4 or more digits on some platforms).
pub fn is_pci_address(s: &str) -> bool {
    let Some((rest, function)) = s.rsplit_once('.') else {
        return false;
    };
    let parts: Vec<&str> = rest.split(':').collect();
    parts.len() == 3
        && (4..=8).contains(&parts[0].len())
        && parts[0]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && is_lower_hex(parts[1], 2)
        && is_lower_hex(parts[2], 2)
        && function.len() == 1
        && matches!(function.as_bytes()[0], b'0'..=b'7')
}

/// Canonical lower-case UUID `8-4-4-4-12`.
pub fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    parts.len() == 5 && parts.iter().zip(lens).all(|(p, n)| is_lower_hex(p, n))
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
}

/// The kernel's `operstate` values (RFC 2863 names, lower case).
pub const OPERSTATES: &[&str] = &[
    "unknown",
    "notpresent",
    "down",
    "lowerlayerdown",
    "testing",
    "dormant",
    "up",
];

impl Validator {
    fn fail(&mut self, path: impl Into<String>, problem: impl Into<String>) {
        if self.errors.len() < MAX_REPORTED_ERRORS {
            self.errors.push(FieldError {
                path: path.into(),
                problem: problem.into(),
            });
        }
    }

    fn string(&mut self, path: &str, s: &str) {
        if s.len() > MAX_STRING_BYTES {
            self.fail(path, format!("longer than {MAX_STRING_BYTES} bytes"));
        } else if s.chars().any(char::is_control) {
            self.fail(path, "contains a control character");
        }
    }

    fn opt(&mut self, path: &str, s: &Option<String>) {
        if let Some(s) = s {
            self.string(path, s);
        }
    }

    fn nonempty(&mut self, path: &str, s: &str) {
        if s.is_empty() {
            self.fail(path, "empty");
        } else {
            self.string(path, s);
        }
    }

    fn format(&mut self, path: &str, s: &str, ok: bool, what: &str) {
        if !ok {
            // Echo a bounded prefix only: the value came from elsewhere.
            let shown = crate::text::truncate(s, 64);
            self.fail(path, format!("{shown:?} is not {what}"));
        }
    }

    fn count(&mut self, path: &str, len: usize, max: usize) -> bool {
        if len > max {
            self.fail(path, format!("{len} entries, more than {max}"));
            false
        } else {
            true
        }
    }

    fn inventory(&mut self, inv: &Inventory) {
        let cpu = &inv.cpu;
        self.opt("cpu.model", &cpu.model);
        self.opt("cpu.vendor", &cpu.vendor);
        if cpu.threads > MAX_THREADS {
            self.fail(
                "cpu.threads",
                format!("{} is more than {MAX_THREADS}", cpu.threads),
            );
        }
        if cpu.cores > cpu.threads {
            self.fail(
                "cpu.cores",
                format!("{} is more than cpu.threads ({})", cpu.cores, cpu.threads),
            );
        }
        if cpu.sockets > cpu.cores {
            self.fail(
                "cpu.sockets",
                format!("{} is more than cpu.cores ({})", cpu.sockets, cpu.cores),
            );
        }
        if self.count("cpu.flags", cpu.flags.len(), MAX_CPU_FLAGS) {
            for (i, f) in cpu.flags.iter().enumerate() {
                self.nonempty(&format!("cpu.flags[{i}]"), f);
            }
        }

        let mem = &inv.memory;
        if self.count("memory.modules", mem.modules.len(), MAX_MEMORY_MODULES) {
            for (i, m) in mem.modules.iter().enumerate() {
                let p = |f: &str| format!("memory.modules[{i}].{f}");
                self.opt(&p("locator"), &m.locator);
                self.opt(&p("bankLocator"), &m.bank_locator);
                self.opt(&p("memoryType"), &m.memory_type);
                self.opt(&p("formFactor"), &m.form_factor);
                self.opt(&p("manufacturer"), &m.manufacturer);
                self.opt(&p("serial"), &m.serial);
                self.opt(&p("partNumber"), &m.part_number);
            }
        }

        if let Some(b) = &inv.bios {
            self.opt("bios.vendor", &b.vendor);
            self.opt("bios.version", &b.version);
            self.opt("bios.releaseDate", &b.release_date);
        }
        if let Some(s) = &inv.system {
            self.opt("system.manufacturer", &s.manufacturer);
            self.opt("system.product", &s.product);
            self.opt("system.version", &s.version);
            self.opt("system.serial", &s.serial);
            self.opt("system.sku", &s.sku);
            self.opt("system.family", &s.family);
            if let Some(u) = &s.uuid {
                self.format("system.uuid", u, is_uuid(u), "a lower-case UUID");
            }
        }
        if let Some(b) = &inv.baseboard {
            self.opt("baseboard.manufacturer", &b.manufacturer);
            self.opt("baseboard.product", &b.product);
            self.opt("baseboard.version", &b.version);
            self.opt("baseboard.serial", &b.serial);
            self.opt("baseboard.assetTag", &b.asset_tag);
        }
        if let Some(c) = &inv.chassis {
            self.opt("chassis.manufacturer", &c.manufacturer);
            self.opt("chassis.type", &c.kind);
            self.opt("chassis.version", &c.version);
            self.opt("chassis.serial", &c.serial);
            self.opt("chassis.assetTag", &c.asset_tag);
        }
        if let Some(s) = &inv.smbios {
            self.opt("smbios.version", &s.version);
        }
        if self.count("processors", inv.processors.len(), MAX_PROCESSORS) {
            for (i, p) in inv.processors.iter().enumerate() {
                self.opt(&format!("processors[{i}].socket"), &p.socket);
                self.opt(&format!("processors[{i}].manufacturer"), &p.manufacturer);
                self.opt(&format!("processors[{i}].version"), &p.version);
                self.opt(&format!("processors[{i}].serial"), &p.serial);
            }
        }

        if self.count("disks", inv.disks.len(), MAX_DISKS) {
            let mut seen = std::collections::HashSet::new();
            for (i, d) in inv.disks.iter().enumerate() {
                let p = |f: &str| format!("disks[{i}].{f}");
                self.nonempty(&p("name"), &d.name);
                if d.name.contains('/') {
                    self.fail(p("name"), "contains '/'");
                }
                if !seen.insert(d.name.as_str()) {
                    self.fail(
                        p("name"),
                        format!("{:?} appears twice", crate::text::truncate(&d.name, 64)),
                    );
                }
                self.opt(&p("controller"), &d.controller);
                self.opt(&p("vendor"), &d.vendor);
                self.opt(&p("model"), &d.model);
                self.opt(&p("serial"), &d.serial);
                self.opt(&p("wwn"), &d.wwn);
            }
        }

        if self.count("nics", inv.nics.len(), MAX_NICS) {
            let mut seen = std::collections::HashSet::new();
            for (i, n) in inv.nics.iter().enumerate() {
                let p = |f: &str| format!("nics[{i}].{f}");
                self.nonempty(&p("name"), &n.name);
                if !seen.insert(n.name.as_str()) {
                    self.fail(
                        p("name"),
                        format!("{:?} appears twice", crate::text::truncate(&n.name, 64)),
                    );
                }
                self.format(
                    &p("mac"),
                    &n.mac,
                    is_mac(&n.mac),
                    "a lower-case MAC aa:bb:cc:dd:ee:ff",
                );
                self.opt(&p("driver"), &n.driver);
                if let Some(s) = &n.operstate {
                    self.format(
                        &p("operstate"),
                        s,
                        OPERSTATES.contains(&s.as_str()),
                        "a kernel operstate",
                    );
                }
                if let Some(a) = &n.pci_address {
                    self.format(
                        &p("pciAddress"),
                        a,
                        is_pci_address(a),
                        "a PCI address dddd:bb:dd.f",
                    );
                }
                if let Some(id) = &n.pci_id {
                    let ok = id
                        .split_once(':')
                        .is_some_and(|(v, d)| is_lower_hex(v, 4) && is_lower_hex(d, 4));
                    self.format(&p("pciId"), id, ok, "a PCI id vvvv:dddd");
                }
            }
        }

        if self.count("pciDevices", inv.pci_devices.len(), MAX_PCI_DEVICES) {
            for (i, d) in inv.pci_devices.iter().enumerate() {
                let p = |f: &str| format!("pciDevices[{i}].{f}");
                self.format(
                    &p("address"),
                    &d.address,
                    is_pci_address(&d.address),
                    "a PCI address dddd:bb:dd.f",
                );
                self.format(
                    &p("class"),
                    &d.class,
                    is_lower_hex(&d.class, 6),
                    "6 lower-case hex digits",
                );
                self.format(
                    &p("vendor"),
                    &d.vendor,
                    is_lower_hex(&d.vendor, 4),
                    "4 lower-case hex digits",
                );
                self.format(
                    &p("device"),
                    &d.device,
                    is_lower_hex(&d.device, 4),
                    "4 lower-case hex digits",
                );
                if let Some(s) = &d.subsystem_vendor {
                    self.format(
                        &p("subsystemVendor"),
                        s,
                        is_lower_hex(s, 4),
                        "4 lower-case hex digits",
                    );
                }
                if let Some(s) = &d.subsystem_device {
                    self.format(
                        &p("subsystemDevice"),
                        s,
                        is_lower_hex(s, 4),
                        "4 lower-case hex digits",
                    );
                }
                self.opt(&p("className"), &d.class_name);
                self.opt(&p("driver"), &d.driver);
            }
        }

        if self.count("warnings", inv.warnings.len(), MAX_WARNINGS) {
            for (i, w) in inv.warnings.iter().enumerate() {
                self.string(&format!("warnings[{i}]"), w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert!(is_mac("02:fc:00:00:00:01"));
        assert!(!is_mac("02:FC:00:00:00:01"));
        assert!(!is_mac("02:fc:00:00:00"));
        assert!(!is_mac("02:fc:00:00:00:01:02"));
        assert!(!is_mac("02-fc-00-00-00-01"));
        assert!(is_pci_address("0000:00:1f.2"));
        assert!(is_pci_address("10000:3b:00.7"));
        assert!(!is_pci_address("0000:00:1f.8"));
        assert!(!is_pci_address("0000:00:1F.2"));
        assert!(!is_pci_address("00:1f.2"));
        assert!(!is_pci_address("0000:00:1f"));
        assert!(is_uuid("4c4c4544-0042-3510-8052-b7c04f4e3532"));
        assert!(!is_uuid("4C4C4544-0042-3510-8052-B7C04F4E3532"));
        assert!(!is_uuid("4c4c4544004235108052b7c04f4e3532"));
    }
}
