//! Validation of received inventories: limits, formats, field paths, size.

use std::path::PathBuf;

use tink_inventory::validate::{
    MAX_DISKS, MAX_MEMORY_MODULES, MAX_NICS, MAX_PCI_DEVICES, MAX_REPORTED_ERRORS,
    MAX_SERIALIZED_BYTES,
};
use tink_inventory::{
    Disk, FieldError, Inventory, InventoryError, MemoryModule, Nic, PciDevice, collect,
};

fn machine_a() -> Inventory {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/machine-a");
    let inv = collect(&root);
    inv.validate().expect("the fixture is valid");
    inv
}

fn errors(inv: &Inventory) -> Vec<String> {
    match inv.validate() {
        Err(InventoryError::Invalid(errs)) => errs.iter().map(ToString::to_string).collect(),
        other => panic!("expected field errors, got {other:?}"),
    }
}

fn disk(i: usize) -> Disk {
    Disk {
        name: format!("sd{i}"),
        size_bytes: 1,
        ..Disk::default()
    }
}

#[test]
fn field_paths_name_the_failing_field() {
    let mut inv = machine_a();
    inv.disks[3].serial = Some("x".repeat(257));
    inv.nics[1].mac = "52:54:00:12:34:5G".into();
    inv.nics[0].pci_id = Some("8086-1572".into());
    inv.nics[0].operstate = Some("sideways".into());
    inv.pci_devices[2].vendor = "1AF4".into();
    inv.pci_devices[4].address = "0000:00:1f".into();
    inv.memory.modules[0].serial = Some("bad\u{0}serial".into());
    inv.system.as_mut().expect("system").uuid = Some("not-a-uuid".into());
    inv.cpu.flags[7] = String::new();
    inv.cpu.cores = 9;
    assert_eq!(
        errors(&inv),
        [
            "cpu.cores: 9 is more than cpu.threads (8)",
            "cpu.flags[7]: empty",
            "memory.modules[0].serial: contains a control character",
            "system.uuid: \"not-a-uuid\" is not a lower-case UUID",
            "disks[3].serial: longer than 256 bytes",
            "nics[0].operstate: \"sideways\" is not a kernel operstate",
            "nics[0].pciId: \"8086-1572\" is not a PCI id vvvv:dddd",
            "nics[1].mac: \"52:54:00:12:34:5G\" is not a lower-case MAC aa:bb:cc:dd:ee:ff",
            "pciDevices[2].vendor: \"1AF4\" is not 4 lower-case hex digits",
            "pciDevices[4].address: \"0000:00:1f\" is not a PCI address dddd:bb:dd.f",
        ]
    );
    // The error's Display joins them, for a status message or a gRPC status.
    let whole = inv.validate().expect_err("invalid").to_string();
    assert!(whole.starts_with("cpu.cores: 9 is more than cpu.threads (8); cpu.flags[7]: empty;"));
}

#[test]
fn string_limit_is_in_bytes_and_exact() {
    let mut inv = machine_a();
    inv.disks[0].model = Some("é".repeat(128)); // 256 bytes
    inv.validate().expect("256 bytes pass");
    inv.disks[0].model = Some(format!("{}a", "é".repeat(128)));
    assert_eq!(errors(&inv), ["disks[0].model: longer than 256 bytes"]);
}

#[test]
fn list_limits() {
    let mut inv = machine_a();
    inv.disks = (0..MAX_DISKS).map(disk).collect();
    inv.validate().expect("256 disks pass");
    inv.disks.push(disk(MAX_DISKS));
    assert_eq!(errors(&inv), ["disks: 257 entries, more than 256"]);

    let mut inv = machine_a();
    inv.nics = (0..=MAX_NICS)
        .map(|i| Nic {
            name: format!("eth{i}"),
            mac: format!("02:00:00:00:{:02x}:{:02x}", i / 256, i % 256),
            ..Nic::default()
        })
        .collect();
    assert_eq!(errors(&inv), ["nics: 257 entries, more than 256"]);

    let mut inv = machine_a();
    inv.pci_devices = (0..=MAX_PCI_DEVICES)
        .map(|i| PciDevice {
            address: format!("0000:{:02x}:{:02x}.0", i / 32, i % 32),
            class: "020000".into(),
            vendor: "8086".into(),
            device: "1572".into(),
            ..PciDevice::default()
        })
        .collect();
    assert_eq!(errors(&inv), ["pciDevices: 1025 entries, more than 1024"]);

    let mut inv = machine_a();
    inv.disks = vec![disk(1), disk(1)];
    assert_eq!(errors(&inv), ["disks[1].name: \"sd1\" appears twice"]);
}

#[test]
fn at_most_32_errors_are_reported() {
    let mut inv = machine_a();
    inv.disks = (0..100)
        .map(|i| Disk {
            serial: Some("s".repeat(300)),
            ..disk(i)
        })
        .collect();
    let errs = errors(&inv);
    assert_eq!(errs.len(), MAX_REPORTED_ERRORS);
    assert_eq!(errs[31], "disks[31].serial: longer than 256 bytes");
}

#[test]
fn serialized_size_is_bounded_even_when_every_list_is_within_its_limit() {
    let mut inv = machine_a();
    let long = "d".repeat(256);
    inv.pci_devices = (0..MAX_PCI_DEVICES)
        .map(|i| PciDevice {
            address: format!("0000:{:02x}:{:02x}.0", i / 32, i % 32),
            class: "020000".into(),
            class_name: Some(long.clone()),
            vendor: "8086".into(),
            device: "1572".into(),
            subsystem_vendor: None,
            subsystem_device: None,
            driver: Some(long.clone()),
        })
        .collect();
    inv.disks = (0..MAX_DISKS)
        .map(|i| Disk {
            model: Some(long.clone()),
            serial: Some(long.clone()),
            vendor: Some(long.clone()),
            ..disk(i)
        })
        .collect();
    inv.memory.modules = (0..MAX_MEMORY_MODULES)
        .map(|_| MemoryModule {
            locator: Some(long.clone()),
            serial: Some(long.clone()),
            part_number: Some(long.clone()),
            ..MemoryModule::default()
        })
        .collect();
    match inv.validate() {
        Err(InventoryError::TooLarge { size, limit }) => {
            assert_eq!(limit, MAX_SERIALIZED_BYTES);
            assert!(size > limit, "{size}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(matches!(
        inv.to_json(),
        Err(InventoryError::TooLarge { .. })
    ));
}

#[test]
fn from_json_checks_size_then_types_then_values() {
    let inv = machine_a();
    let json = inv.to_json().expect("json");
    assert_eq!(Inventory::from_json(&json).expect("round trip"), inv);

    // Too large: refused before parsing.
    let big = vec![b' '; MAX_SERIALIZED_BYTES + 1];
    assert_eq!(
        Inventory::from_json(&big),
        Err(InventoryError::TooLarge {
            size: MAX_SERIALIZED_BYTES + 1,
            limit: MAX_SERIALIZED_BYTES
        })
    );

    // A wrong type names its path.
    let mut value: serde_json::Value = serde_json::from_slice(&json).expect("value");
    value["disks"][2]["sizeBytes"] = serde_json::json!("big");
    let err = Inventory::from_json(&serde_json::to_vec(&value).expect("bytes")).expect_err("type");
    match &err {
        InventoryError::Json { path, message } => {
            assert_eq!(path, "disks[2].sizeBytes");
            assert!(
                message.starts_with("invalid type: string \"big\""),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("disks[2].sizeBytes: invalid type")
    );

    // A missing required field names its parent.
    let mut value: serde_json::Value = serde_json::from_slice(&json).expect("value");
    value["nics"][1].as_object_mut().expect("nic").remove("mac");
    let err =
        Inventory::from_json(&serde_json::to_vec(&value).expect("bytes")).expect_err("missing");
    assert!(
        err.to_string().starts_with("nics[1]: missing field `mac`"),
        "{err}"
    );

    // A value error after a clean parse.
    let mut value: serde_json::Value = serde_json::from_slice(&json).expect("value");
    value["nics"][0]["mac"] = serde_json::json!("3C:FD:FE:A1:B2:C3");
    let err = Inventory::from_json(&serde_json::to_vec(&value).expect("bytes")).expect_err("mac");
    assert_eq!(
        err,
        InventoryError::Invalid(vec![FieldError {
            path: "nics[0].mac".into(),
            problem: "\"3C:FD:FE:A1:B2:C3\" is not a lower-case MAC aa:bb:cc:dd:ee:ff".into()
        }])
    );

    // Not JSON at all.
    let err = Inventory::from_json(b"\x00\xff").expect_err("garbage");
    assert!(matches!(err, InventoryError::Json { .. }), "{err:?}");
}

#[test]
fn the_collector_cuts_lists_at_the_limits_so_its_output_validates() {
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..(MAX_DISKS + 4) {
        let d = dir.path().join(format!("sys/block/sd{i:04}"));
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("size"), "2048\n").expect("size");
    }
    // A serial longer than the limit is cut on a character boundary.
    std::fs::write(
        dir.path().join("sys/block/sd0000/serial"),
        "€".repeat(100), // 300 bytes
    )
    .expect("serial");
    let inv = collect(dir.path());
    assert_eq!(inv.disks.len(), MAX_DISKS);
    assert_eq!(inv.disks[0].serial.as_deref().map(str::len), Some(255));
    assert!(
        inv.warnings
            .iter()
            .any(|w| w == "/sys/block: more than 256 disks, the rest not reported"),
        "{:?}",
        inv.warnings
    );
    inv.validate().expect("valid");
}
