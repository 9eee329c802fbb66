//! The collector against fixture trees (tests/fixtures/README.md): synthetic /proc and /sys,
//! real QEMU SMBIOS 2.8 and 3.0 tables, the /sys/class/dmi/id fallback and a broken table.

use std::path::PathBuf;

use tink_inventory::{Inventory, SmbiosOrigin, collect};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The values `capture-smbios.py` gave QEMU.
fn assert_qemu_identity(inv: &Inventory, product_version: &str) {
    let bios = inv.bios.as_ref().expect("bios");
    assert_eq!(bios.vendor.as_deref(), Some("SeaBIOS-Fixture"));
    assert_eq!(bios.version.as_deref(), Some("1.16.2-fixture"));
    assert_eq!(bios.release_date.as_deref(), Some("04/01/2014"));
    let sys = inv.system.as_ref().expect("system");
    assert_eq!(sys.manufacturer.as_deref(), Some("Example Systems"));
    assert_eq!(sys.product.as_deref(), Some("Rack Server 9000"));
    assert_eq!(sys.version.as_deref(), Some("R1"));
    assert_eq!(sys.serial.as_deref(), Some("ABC123"));
    assert_eq!(sys.sku.as_deref(), Some("SKU-42"));
    assert_eq!(sys.family.as_deref(), Some("Racks"));
    // `-uuid 4c4c4544-0042-3510-8052-b7c04f4e3532`: QEMU stores the first three fields
    // little-endian (SMBIOS >= 2.6); reading them big-endian would give 44454c4c-4200-1035-...
    assert_eq!(
        sys.uuid.as_deref(),
        Some("4c4c4544-0042-3510-8052-b7c04f4e3532")
    );
    let board = inv.baseboard.as_ref().expect("baseboard");
    assert_eq!(board.manufacturer.as_deref(), Some("Example Boards"));
    assert_eq!(board.product.as_deref(), Some("MB-77"));
    assert_eq!(board.version.as_deref(), Some("2.0"));
    assert_eq!(board.serial.as_deref(), Some("BB-998877"));
    assert_eq!(board.asset_tag.as_deref(), Some("ASSET-1"));
    let chassis = inv.chassis.as_ref().expect("chassis");
    assert_eq!(chassis.manufacturer.as_deref(), Some("Example Chassis"));
    assert_eq!(chassis.serial.as_deref(), Some("CH-5555"));
    assert_eq!(chassis.kind.as_deref(), Some("Other"));
    assert_eq!(inv.processors.len(), 1);
    let p = &inv.processors[0];
    assert_eq!(p.socket.as_deref(), Some("CPU 0"));
    assert_eq!(p.manufacturer.as_deref(), Some("QEMU"));
    assert_eq!(p.version.as_deref(), Some(product_version));
    assert_eq!((p.cores, p.threads), (Some(2), Some(2)), "-smp 2");
    // -m 2048: one 2 GiB device; the type 17 values of -smbios type=17,...
    assert_eq!(inv.memory.modules.len(), 1);
    let m = &inv.memory.modules[0];
    assert_eq!(m.locator.as_deref(), Some("DIMM 0"));
    assert_eq!(m.bank_locator.as_deref(), Some("BANK"));
    assert_eq!(m.size_bytes, Some(2 << 30));
    assert_eq!(m.speed_mts, Some(3200));
    assert_eq!(m.manufacturer.as_deref(), Some("Example Memory"));
    assert_eq!(m.serial.as_deref(), Some("DIMMSER1"));
    assert_eq!(m.part_number.as_deref(), Some("PN-123"));
    assert_eq!(m.memory_type.as_deref(), Some("RAM"));
    assert_eq!(m.form_factor.as_deref(), Some("DIMM"));
    assert_eq!(inv.memory.installed_bytes, Some(2 << 30));
}

#[test]
fn machine_a_everything() {
    let inv = collect(&fixture("machine-a"));
    assert_eq!(inv.warnings, Vec::<String>::new());
    inv.validate().expect("valid");

    // /proc
    assert_eq!((inv.cpu.sockets, inv.cpu.cores, inv.cpu.threads), (2, 4, 8));
    assert_eq!(
        inv.cpu.model.as_deref(),
        Some("Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz")
    );
    assert_eq!(inv.cpu.vendor.as_deref(), Some("GenuineIntel"));
    assert!(inv.cpu.flags.iter().any(|f| f == "avx512f"));
    assert_eq!(inv.cpu.flags.len(), 18);
    assert_eq!(inv.memory.usable_bytes, Some(2_030_000 * 1024));

    // SMBIOS 2.8 tables
    let smbios = inv.smbios.as_ref().expect("smbios");
    assert_eq!(smbios.source, SmbiosOrigin::Tables);
    assert_eq!(smbios.version.as_deref(), Some("2.8"));
    assert_qemu_identity(&inv, "pc-i440fx-7.2");

    // Block devices: loop0, zram0, ram0 and dm-0 skipped; sorted by name.
    let names: Vec<&str> = inv.disks.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["nvme0n1", "sda", "sr0", "vda"]);
    let nvme = &inv.disks[0];
    assert_eq!(nvme.size_bytes, 1_953_525_168 * 512);
    assert_eq!(nvme.rotational, Some(false));
    assert_eq!(nvme.controller.as_deref(), Some("nvme"));
    assert_eq!(nvme.model.as_deref(), Some("Samsung SSD 970 EVO Plus 1TB"));
    assert_eq!(nvme.serial.as_deref(), Some("S4EWNX0N123456"));
    assert_eq!(nvme.wwn.as_deref(), Some("eui.0025388b91b3e1a2"));
    let sda = &inv.disks[1];
    assert_eq!(sda.rotational, Some(true));
    assert_eq!(sda.vendor.as_deref(), Some("ATA"));
    assert_eq!(sda.model.as_deref(), Some("WDC WD40EFRX-68N"));
    assert_eq!(
        sda.serial.as_deref(),
        Some("WD-WCC7K4XXXXXX"),
        "VPD page 0x80"
    );
    assert_eq!(sda.wwn.as_deref(), Some("naa.50014ee2b5e0c9a1"));
    assert_eq!(sda.physical_block_size, Some(4096));
    assert_eq!(sda.logical_block_size, Some(512));
    assert_eq!(inv.disks[2].removable, Some(true), "sr0");
    let vda = &inv.disks[3];
    assert_eq!(vda.serial.as_deref(), Some("vd-serial-1"));
    assert_eq!(vda.vendor, None, "virtio's 0x1af4 is not a disk vendor");
    assert_eq!(vda.controller.as_deref(), Some("virtio"));

    // NICs: lo and br0 have no device link.
    let nics: Vec<(&str, &str)> = inv
        .nics
        .iter()
        .map(|n| (n.name.as_str(), n.mac.as_str()))
        .collect();
    assert_eq!(
        nics,
        [
            ("eno1", "3c:fd:fe:a1:b2:c3"),
            ("eth1", "52:54:00:12:34:56"),
            ("eth2", "de:ad:be:ef:00:02")
        ]
    );
    let eno1 = &inv.nics[0];
    assert_eq!(eno1.driver.as_deref(), Some("i40e"));
    assert_eq!(eno1.speed_mbps, Some(10000));
    assert_eq!(eno1.operstate.as_deref(), Some("up"));
    assert_eq!(eno1.carrier, Some(true));
    assert_eq!(eno1.mtu, Some(9000));
    assert_eq!(eno1.pci_address.as_deref(), Some("0000:00:03.0"));
    assert_eq!(eno1.pci_id.as_deref(), Some("8086:1572"));
    let eth1 = &inv.nics[1];
    assert_eq!(eth1.driver.as_deref(), Some("virtio_net"));
    assert_eq!(eth1.speed_mbps, None, "speed -1 while down");
    assert_eq!(eth1.operstate.as_deref(), Some("down"));
    assert_eq!(eth1.carrier, None);
    assert_eq!(
        eth1.pci_address.as_deref(),
        Some("0000:00:04.0"),
        "virtio: the PCI function is the parent of virtio1"
    );
    assert_eq!(eth1.pci_id.as_deref(), Some("1af4:1000"));
    // A SoC NIC on the platform bus: no PCI function; "unknown" is a real operstate.
    let eth2 = &inv.nics[2];
    assert_eq!(eth2.driver.as_deref(), Some("rk_gmac-dwmac"));
    assert_eq!(
        (eth2.pci_address.as_deref(), eth2.pci_id.as_deref()),
        (None, None)
    );
    assert_eq!(eth2.operstate.as_deref(), Some("unknown"));
    assert_eq!(eth2.speed_mbps, None, "no speed file");

    // PCI
    let pci: Vec<(&str, &str, &str, &str, Option<&str>)> = inv
        .pci_devices
        .iter()
        .map(|p| {
            (
                p.address.as_str(),
                p.class.as_str(),
                p.vendor.as_str(),
                p.device.as_str(),
                p.driver.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        pci,
        [
            ("0000:00:00.0", "060000", "8086", "1237", None),
            ("0000:00:03.0", "020000", "8086", "1572", Some("i40e")),
            ("0000:00:04.0", "020000", "1af4", "1000", Some("virtio-pci")),
            ("0000:00:05.0", "010802", "144d", "a808", Some("nvme")),
            ("0000:00:1f.2", "010601", "8086", "a352", Some("ahci")),
            ("0000:3b:00.0", "030200", "10de", "1eb8", None),
        ]
    );
    assert_eq!(
        inv.pci_devices[3].class_name.as_deref(),
        Some("Mass storage controller")
    );
    assert_eq!(inv.pci_devices[5].subsystem_device.as_deref(), Some("12a2"));
}

#[test]
fn q35_smbios_3_entry_point() {
    let inv = collect(&fixture("q35-smbios3"));
    let smbios = inv.smbios.as_ref().expect("smbios");
    assert_eq!(smbios.source, SmbiosOrigin::Tables);
    assert_eq!(smbios.version.as_deref(), Some("3.0"));
    assert_qemu_identity(&inv, "pc-q35-7.2");
    assert_eq!(inv.cpu.vendor.as_deref(), Some("AuthenticAMD"));
    assert_eq!((inv.cpu.sockets, inv.cpu.cores, inv.cpu.threads), (1, 1, 1));
    // No /sys/block, /sys/class/net, /sys/bus/pci in this tree: said, not fatal.
    assert_eq!(inv.warnings.len(), 3, "{:?}", inv.warnings);
    assert!(inv.warnings[0].starts_with("/sys/block: "));
    inv.validate().expect("valid");
}

#[test]
fn dmi_id_fallback_when_the_tables_are_missing() {
    let inv = collect(&fixture("dmi-id"));
    let smbios = inv.smbios.as_ref().expect("smbios");
    assert_eq!(smbios.source, SmbiosOrigin::DmiId);
    assert_eq!(smbios.version, None);
    assert!(
        inv.warnings[0].starts_with("/sys/firmware/dmi/tables/DMI: ")
            && inv.warnings[0].ends_with("using /sys/class/dmi/id"),
        "{:?}",
        inv.warnings
    );
    let bios = inv.bios.as_ref().expect("bios");
    assert_eq!(bios.vendor.as_deref(), Some("American Megatrends Inc."));
    assert_eq!(bios.version.as_deref(), Some("2.1.7"));
    assert_eq!(bios.release_date.as_deref(), Some("03/12/2021"));
    let sys = inv.system.as_ref().expect("system");
    assert_eq!(sys.manufacturer.as_deref(), Some("Dell Inc."));
    assert_eq!(sys.product.as_deref(), Some("PowerEdge R640"));
    assert_eq!(sys.serial, None, "\"To Be Filled By O.E.M.\" is no serial");
    assert_eq!(
        sys.uuid.as_deref(),
        Some("4c4c4544-0042-3510-8052-b7c04f4e3532"),
        "the kernel's canonical UUID, lower-cased"
    );
    let board = inv.baseboard.as_ref().expect("baseboard");
    assert_eq!(board.product.as_deref(), Some("0H28RR"));
    assert_eq!(board.serial.as_deref(), Some(".7XYZ123.CNCMS0012345."));
    let chassis = inv.chassis.as_ref().expect("chassis");
    assert_eq!(chassis.serial.as_deref(), Some("7XYZ123"));
    assert_eq!(
        chassis.kind.as_deref(),
        Some("Rack Mount Chassis"),
        "type 23"
    );
    assert_eq!(chassis.asset_tag, None, "\"Not Specified\"");
    assert!(inv.memory.modules.is_empty(), "no DIMMs without the tables");
    inv.validate().expect("valid");
}

#[test]
fn broken_tables_keep_what_came_before_and_say_why() {
    let inv = collect(&fixture("broken-smbios"));
    let smbios = inv.smbios.as_ref().expect("smbios");
    assert_eq!(smbios.source, SmbiosOrigin::Tables);
    assert_eq!(smbios.version, None, "the entry point's checksum is wrong");
    // Everything before the memory device structure survived, UUID in the 2.6+ order.
    assert_eq!(
        inv.system.as_ref().and_then(|s| s.uuid.as_deref()),
        Some("4c4c4544-0042-3510-8052-b7c04f4e3532")
    );
    assert_eq!(
        inv.system.as_ref().and_then(|s| s.serial.as_deref()),
        Some("ABC123")
    );
    assert!(inv.memory.modules.is_empty());
    let has = |needle: &str| inv.warnings.iter().any(|w| w.contains(needle));
    assert!(
        has("checksum does not add up to zero"),
        "{:?}",
        inv.warnings
    );
    assert!(
        has("SMBIOS table: structure at offset 369: formatted area of 40 bytes runs past the end"),
        "{:?}",
        inv.warnings
    );
    assert!(has("/proc/cpuinfo: "), "no cpuinfo in this tree");
    inv.validate().expect("valid");
}

#[test]
fn a_missing_root_yields_an_empty_valid_inventory_with_warnings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inv = collect(dir.path());
    assert_eq!(inv.cpu.threads, 0);
    assert!(inv.disks.is_empty() && inv.nics.is_empty() && inv.pci_devices.is_empty());
    assert_eq!(inv.smbios, None);
    assert!(inv.warnings.len() >= 6, "{:?}", inv.warnings);
    inv.validate().expect("valid");
    // And it round-trips through the receiving side.
    let json = inv.to_json().expect("json");
    assert_eq!(Inventory::from_json(&json).expect("parse"), inv);
}

#[test]
fn attributes_use_upstream_field_names() {
    let inv = collect(&fixture("machine-a"));
    let attrs = serde_json::to_value(inv.to_attributes()).expect("json");
    let at = |ptr: &str| {
        attrs
            .pointer(ptr)
            .cloned()
            .unwrap_or_else(|| panic!("{ptr} missing in {attrs:#}"))
    };
    assert_eq!(at("/collectionMethod"), "agent");
    let updated = at("/lastUpdated");
    let updated = updated.as_str().expect("string");
    assert!(
        updated.ends_with('Z') && !updated.contains('.'),
        "whole-second RFC 3339: {updated}"
    );
    assert_eq!(at("/cpu/totalCores"), 4);
    assert_eq!(at("/cpu/totalThreads"), 8);
    assert_eq!(at("/cpu/sockets/0/slot"), "CPU 0");
    assert_eq!(at("/cpu/sockets/0/clockSpeedMHz"), 2000);
    assert_eq!(at("/cpu/sockets/0/capabilities/0"), "fpu");
    assert_eq!(at("/memory/totalBytes"), 2u64 << 30);
    assert_eq!(at("/memory/usableBytes"), 2_030_000u64 * 1024);
    assert_eq!(at("/memory/modules/0/slot"), "DIMM 0");
    assert_eq!(at("/memory/modules/0/speedMHz"), 3200);
    assert_eq!(at("/memory/modules/0/serialNumber"), "DIMMSER1");
    assert_eq!(at("/memory/modules/0/partNumber"), "PN-123");
    assert_eq!(at("/blockDevices/0/name"), "nvme0n1");
    assert_eq!(at("/blockDevices/0/controllerType"), "NVMe");
    assert_eq!(at("/blockDevices/0/driveType"), "SSD");
    assert_eq!(at("/blockDevices/1/driveType"), "HDD");
    assert_eq!(at("/blockDevices/1/wwn"), "naa.50014ee2b5e0c9a1");
    assert_eq!(at("/blockDevices/1/serialNumber"), "WD-WCC7K4XXXXXX");
    assert_eq!(at("/blockDevices/1/physicalBlockSizeBytes"), 4096);
    assert_eq!(at("/networkInterfaces/0/name"), "eno1");
    assert_eq!(at("/networkInterfaces/0/vendor"), "8086");
    assert_eq!(at("/networkInterfaces/0/ports/0/mac"), "3c:fd:fe:a1:b2:c3");
    assert_eq!(at("/networkInterfaces/0/ports/0/speedMbps"), 10000);
    assert_eq!(at("/networkInterfaces/0/ports/0/linkStatus"), "up");
    assert_eq!(at("/pciDevices/1/class"), "Network controller");
    assert_eq!(at("/pciDevices/1/model"), "1572");
    assert_eq!(at("/pciDevices/1/driver"), "i40e");
    assert_eq!(at("/bios/firmwareVersion"), "1.16.2-fixture");
    assert_eq!(at("/bios/releaseDate"), "04/01/2014");
    assert_eq!(at("/baseboard/model"), "MB-77");
    assert_eq!(at("/baseboard/serialNumber"), "BB-998877");
    assert_eq!(at("/chassis/serialNumber"), "CH-5555");
    assert_eq!(at("/product/name"), "Rack Server 9000");
    assert_eq!(at("/product/vendor"), "Example Systems");
    assert_eq!(at("/product/serialNumber"), "ABC123");
    // Empty values are omitted, as Go's omitempty does.
    assert_eq!(attrs.pointer("/pciDevices/0/driver"), None);
    assert_eq!(
        attrs.pointer("/networkInterfaces/1/ports/0/speedMbps"),
        None
    );
}
