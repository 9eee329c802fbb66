//! `tinkctl migrate` offline: a directory of real-shaped v1alpha1 manifests (crates/api's
//! corpus of real Tinkerbell objects, plus the shapes that need more than a per-object
//! conversion) becomes v1alpha2 objects and a report.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

fn corpus() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/api/tests/corpus")
}

const EXTRA: &str = r#"
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: sm02, namespace: tink}
spec:
  disks: [{device: /dev/sda}]
  interfaces:
    - dhcp: {mac: "3C:EC:EF:4C:4F:56", arch: aarch64, ip: {address: 10.1.1.12, netmask: 255.255.255.0}, lease_time: 86400}
      netboot: {allowPXE: true, allowWorkflow: true, osie: {baseURL: "http://10.1.1.1:8080/hook/", kernelParams: [console=ttyAMA0]}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: sm03, namespace: tink}
spec:
  interfaces:
    - dhcp: {mac: "3c:ec:ef:4c:4f:57", arch: aarch64, lease_time: 86400}
      netboot: {osie: {baseURL: "http://10.1.1.1:8080/hook"}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: two, namespace: tink}
spec:
  data: |
    version: "0.1"
    name: two
    tasks:
      - name: "Disk Wipe"
        worker: "{{.device_1}}"
        actions: [{name: wipe, image: wipe:v1}]
      - name: install
        worker: "{{.device_2}}"
        actions: [{name: wipe, image: image2disk:v1}]
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: old-style, namespace: tink}
spec:
  templateRef: two-install
  hardwareMap: {device_1: "3c:ec:ef:4c:4f:56"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated, namespace: tink}
data: {a: b}
"#;

#[test]
fn migrates_a_directory_of_v1alpha1_manifests() {
    let dir = tempfile::tempdir().expect("tmp");
    for e in std::fs::read_dir(corpus()).expect("corpus").flatten() {
        std::fs::copy(e.path(), dir.path().join(e.file_name())).expect("copy");
    }
    std::fs::write(dir.path().join("zz-extra.yaml"), EXTRA).expect("write");
    let out = dir.path().join("v1alpha2.out");
    let run = Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .arg("migrate")
        .arg(dir.path())
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run tinkctl");
    let report = String::from_utf8_lossy(&run.stderr).to_string();
    assert!(run.status.success(), "{report}");
    let text = std::fs::read_to_string(&out).expect("output");
    let objs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .collect();
    let find = |kind: &str, name: &str| -> &Value {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in\n{text}"))
    };
    // Every Tinkerbell object is v1alpha2 and parses as its type.
    for o in &objs {
        if o["apiVersion"] == "v1" {
            continue;
        }
        assert_eq!(o["apiVersion"], "tinkerbell.org/v1alpha2", "{o}");
        let ok = match o["kind"].as_str() {
            Some("Hardware") => {
                tink_api::from_value::<tink_api::v1alpha2::Hardware>(o.clone()).is_ok()
            }
            Some("Template") => {
                tink_api::from_value::<tink_api::v1alpha2::Template>(o.clone()).is_ok()
            }
            Some("Workflow") => {
                tink_api::from_value::<tink_api::v1alpha2::Workflow>(o.clone()).is_ok()
            }
            Some("OSIE") => tink_api::from_value::<tink_api::v1alpha2::Osie>(o.clone()).is_ok(),
            _ => false,
        };
        assert!(ok, "{o}");
    }
    // OSIE objects from per-interface settings: Smee's default file names per arch, shared.
    let osie = find("OSIE", "osie-1");
    assert_eq!(
        osie["spec"],
        json!({"kernelUrl": "http://10.1.1.1:8080/hook/vmlinuz-aarch64", "initrdUrl": "http://10.1.1.1:8080/hook/initramfs-aarch64"})
    );
    assert_eq!(osie["metadata"]["namespace"], "tink");
    let sm02 = find("Hardware", "sm02");
    assert_eq!(
        sm02["spec"]["osie"],
        json!({"osieRef": {"name": "osie-1"}, "kernelParams": ["console=ttyAMA0"]})
    );
    assert_eq!(
        find("Hardware", "sm03")["spec"]["osie"]["osieRef"]["name"],
        "osie-1"
    );
    assert!(
        !objs.iter().any(|o| o["metadata"]["name"] == "osie-2"),
        "one OSIE per distinct kernel/initrd"
    );
    // The multi-task template is split per task; each has valid, unique action names.
    for name in ["two-disk-wipe", "two-install"] {
        let t = find("Template", name);
        assert_eq!(
            t["spec"]["actions"].as_array().map(Vec::len),
            Some(1),
            "{t}"
        );
    }
    assert!(
        !objs
            .iter()
            .any(|o| o["kind"] == "Template" && o["metadata"]["name"] == "two")
    );
    // The old-style Workflow gets the Hardware with device_1's MAC.
    assert_eq!(
        find("Workflow", "old-style")["spec"]["hardwareRef"]["name"],
        "sm02"
    );
    // Real manifests: the playground's template keeps pid-less actions, CAPT's gets pidNamespace.
    let capt = find("Template", "capi-md-0-x7k2p");
    assert_eq!(capt["spec"]["actions"][3]["pidNamespace"], "host");
    // Unrelated documents pass through.
    assert_eq!(find("ConfigMap", "unrelated")["data"]["a"], "b");
    // The report says what moved and what the annotation keeps.
    for said in [
        "OSIE osie-1: created from Hardware tink/sm02",
        "Hardware tink/sm02: spec.osie.osieRef: osie-1",
        "Template tink/two: 2 tasks split into one Template each",
        "Workflow tink/old-style: hardwareRef sm02",
        "kept in the tinkerbell.org/conversion-data annotation: ",
        "ConfigMap tink/unrelated: v1 is not v1alpha1: unchanged",
    ] {
        assert!(report.contains(said), "report lacks {said:?}:\n{report}");
    }

    // --drop-unmapped: no annotation, and the report says what was dropped.
    let run = Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .args(["migrate", "--drop-unmapped"])
        .arg(corpus().join("tink-examples-hardware.yaml"))
        .output()
        .expect("run");
    assert!(run.status.success());
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(!stdout.contains("conversion-data"), "{stdout}");
    assert!(String::from_utf8_lossy(&run.stderr).contains("dropped (no v1alpha2 home): "));

    // No input: a clear error.
    let run = Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .arg("migrate")
        .output()
        .expect("run");
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("--in-cluster"));
}
