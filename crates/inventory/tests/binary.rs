//! The `tink-inventory` binary: JSON an operator (and `Inventory::from_json`) can read.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tink-inventory"))
        .args(args)
        .output()
        .expect("run tink-inventory")
}

fn machine_a() -> String {
    format!("{}/tests/fixtures/machine-a", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn prints_a_valid_inventory_for_a_root() {
    let out = run(&["--root", &machine_a()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inv = tink_inventory::Inventory::from_json(&out.stdout).expect("valid inventory JSON");
    assert_eq!(inv.system.and_then(|s| s.serial).as_deref(), Some("ABC123"));
    assert_eq!(inv.nics.len(), 3);
}

#[test]
fn prints_attributes() {
    let out = run(&["--root", &machine_a(), "--attributes"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["collectionMethod"], "agent");
    assert_eq!(v["product"]["serialNumber"], "ABC123");
}

#[test]
fn refuses_unknown_arguments() {
    let out = run(&["--nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: tink-inventory"));
    let out = run(&["--root"]);
    assert_eq!(out.status.code(), Some(2));
}
