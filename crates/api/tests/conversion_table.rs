//! Table tests of every conversion mapping, both ways, on realistic fixtures.

mod common;

use common::{assert_table, fixture, fixture_text};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tink_api::conversion::{self, ConversionError};
use tink_api::{CONVERSION_DATA_ANNOTATION, v1alpha1, v1alpha2};

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("serialize")
}

fn annotation<K: kube::Resource>(obj: &K) -> Option<&String> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(CONVERSION_DATA_ANNOTATION)
}

const MAC1: &str = "3c:ec:ef:4c:4f:54";

#[test]
fn hardware_v1alpha1_to_v1alpha2() {
    let v1: v1alpha1::Hardware = fixture("v1alpha1/hardware.yaml");
    let v2 = conversion::hardware_to_v1alpha2(&v1);
    let j = to_json(&v2);
    let i1 = format!("/spec/networkInterfaces/{MAC1}");
    let i2 = "/spec/networkInterfaces/3c:ec:ef:4c:4f:55";
    assert_table(
        "hardware up",
        &j,
        &[
            ("/apiVersion", json!("tinkerbell.org/v1alpha2")),
            ("/metadata/name", json!("sm01")),
            ("/metadata/labels/rack", json!("r12")),
            // interfaces[] -> networkInterfaces keyed by lower-case MAC
            (&format!("{i1}/dhcp/ip"), json!("192.168.2.148")),
            (&format!("{i1}/dhcp/netmask"), json!("255.255.255.0")),
            (&format!("{i1}/dhcp/gateway"), json!("192.168.2.1")),
            (&format!("{i1}/dhcp/hostname"), json!("sm01")),
            (&format!("{i1}/dhcp/vlanId"), json!("10")),
            (
                &format!("{i1}/dhcp/nameservers"),
                json!(["1.1.1.1", "8.8.8.8"]),
            ),
            (&format!("{i1}/dhcp/leaseTime"), json!(86400)),
            (&format!("{i1}/disableNetboot"), Value::Null),
            (&format!("{i2}/dhcp/ip"), json!("10.0.7.148")),
            (&format!("{i2}/dhcp/leaseTime"), json!(3600)),
            (
                &format!("{i2}/dhcp/timeservers"),
                json!(["ntp.example.com"]),
            ),
            // netboot.allowPXE: false -> disableNetboot
            (&format!("{i2}/disableNetboot"), json!(true)),
            // disks -> storageDevices
            ("/spec/storageDevices", json!(["/dev/nvme0n1", "/dev/sda"])),
            // userData / vendorData -> instance
            (
                "/spec/instance/userdata",
                json!("#cloud-config\nhostname: sm01\n"),
            ),
            ("/spec/instance/vendordata", json!("vendor: data")),
            ("/spec/bmcRef", json!({"name": "bmc-sm01"})),
            // per-interface OSIE has no v1alpha2 home: annotation only
            ("/spec/osie", Value::Null),
            ("/spec/ipxe", Value::Null),
            ("/spec/metadata", Value::Null),
        ],
    );
    assert_eq!(v2.spec.network_interfaces.len(), 2);
    let data = annotation(&v2).expect("conversion data for v1alpha1-only fields");
    for kept in [
        "osie",
        "vmlinuz-x86_64",
        "futureField",
        "facility_code",
        "uefi",
    ] {
        assert!(data.contains(kept), "annotation should keep {kept}: {data}");
    }
    // and back: exactly the original
    assert_eq!(conversion::hardware_to_v1alpha1(&v2), v1);
}

#[test]
fn hardware_v1alpha2_to_v1alpha1() {
    let v2: v1alpha2::Hardware = fixture("v1alpha2/hardware.yaml");
    let v1 = conversion::hardware_to_v1alpha1(&v2);
    let j = to_json(&v1);
    assert_table(
        "hardware down",
        &j,
        &[
            ("/apiVersion", json!("tinkerbell.org/v1alpha1")),
            ("/spec/interfaces/0/dhcp/mac", json!("3c:ec:ef:4c:4f:56")),
            ("/spec/interfaces/0/dhcp/ip/address", json!("192.168.2.149")),
            ("/spec/interfaces/0/dhcp/ip/netmask", json!("255.255.255.0")),
            ("/spec/interfaces/0/dhcp/ip/gateway", json!("192.168.2.1")),
            ("/spec/interfaces/0/dhcp/ip/family", json!(4)),
            ("/spec/interfaces/0/dhcp/hostname", json!("sm02")),
            ("/spec/interfaces/0/dhcp/vlan_id", json!("10")),
            ("/spec/interfaces/0/dhcp/lease_time", json!(7200)),
            (
                "/spec/interfaces/0/dhcp/name_servers",
                json!(["1.1.1.1", "dns.example.com"]),
            ),
            (
                "/spec/interfaces/0/dhcp/time_servers",
                json!(["ntp.example.com"]),
            ),
            ("/spec/interfaces/0/netboot/allowPXE", json!(true)),
            ("/spec/interfaces/0/netboot/allowWorkflow", json!(true)),
            (
                "/spec/interfaces/0/netboot/ipxe/url",
                json!("http://192.168.2.111/custom.ipxe"),
            ),
            // disableNetboot -> allowPXE: false
            ("/spec/interfaces/1/dhcp/mac", json!("3c:ec:ef:4c:4f:57")),
            ("/spec/interfaces/1/netboot/allowPXE", json!(false)),
            // disableDhcp implies no netboot
            ("/spec/interfaces/2/netboot/allowPXE", json!(false)),
            (
                "/spec/disks",
                json!([{"device": "/dev/nvme0n1"}, {"device": "/dev/sda"}]),
            ),
            ("/spec/userData", json!("#cloud-config\nhostname: sm02\n")),
            ("/spec/vendorData", json!("{}")),
            (
                "/spec/bmcRef",
                json!({"apiGroup": "bmc.tinkerbell.org", "kind": "Machine", "name": "bmc-sm02"}),
            ),
        ],
    );
    let data = annotation(&v1).expect("conversion data for v1alpha2-only fields");
    for kept in ["hook-latest", "disableDhcp"] {
        assert!(data.contains(kept), "annotation should keep {kept}: {data}");
    }
    assert_eq!(conversion::hardware_to_v1alpha2(&v1), v2);
}

#[test]
fn hardware_newer_values_win_and_homeless_fields_return() {
    let v1: v1alpha1::Hardware = fixture("v1alpha1/hardware.yaml");
    let mut v2 = conversion::hardware_to_v1alpha2(&v1);
    // Edit in v1alpha2: new IP and lease on the first interface, a new third interface.
    let ni = v2.spec.network_interfaces.get_mut(MAC1).expect("interface");
    let dhcp = ni.dhcp.as_mut().expect("dhcp");
    dhcp.ip = Some("192.168.2.200".into());
    dhcp.lease_time = 600;
    v2.spec.network_interfaces.insert(
        "aa:bb:cc:dd:ee:ff".into(),
        v1alpha2::NetworkInterface::default(),
    );
    let back = conversion::hardware_to_v1alpha1(&v2);
    let first = &back.spec.interfaces[0];
    let d = first.dhcp.as_ref().expect("dhcp");
    assert_eq!(
        d.ip.as_ref().map(|i| i.address.as_str()),
        Some("192.168.2.200"),
        "newer IP wins"
    );
    assert_eq!(d.lease_time, 600, "newer lease wins");
    assert_eq!(d.arch, "x86_64", "v1alpha1-only field restored");
    assert!(d.uefi);
    let osie = first
        .netboot
        .as_ref()
        .and_then(|n| n.osie.as_ref())
        .expect("per-interface OSIE restored");
    assert_eq!(osie.kernel, "vmlinuz-x86_64");
    assert_eq!(back.spec.interfaces.len(), 3);
    assert_eq!(
        back.spec.interfaces[1].extra.get("futureField"),
        Some(&json!("kept"))
    );
    assert!(back.spec.metadata.is_some(), "metadata restored");
}

#[test]
fn template_v1alpha1_to_v1alpha2() {
    let v1: v1alpha1::Template = fixture("v1alpha1/template-ubuntu.yaml");
    let v2 = conversion::template_to_v1alpha2(&v1);
    let j = to_json(&v2);
    assert_table(
        "template up",
        &j,
        &[
            ("/spec/actions/0/name", json!("stream-ubuntu-image")),
            (
                "/spec/actions/0/image",
                json!("quay.io/tinkerbell/actions/image2disk:latest"),
            ),
            ("/spec/actions/0/timeout", json!("600s")),
            (
                "/spec/actions/0/env/DEST_DISK",
                json!("{{ index .Hardware.Disks 0 }}"),
            ),
            ("/spec/actions/0/env/COMPRESSED", json!("true")),
            ("/spec/actions/1/name", json!("grow-partition")),
            (
                "/spec/actions/1/env/BLOCK_DEVICE",
                json!("{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"),
            ),
            (
                "/spec/actions/1/env/CMD_LINE",
                json!(
                    "growpart {{ index .Hardware.Disks 0 }} 1 && resize2fs {{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"
                ),
            ),
            ("/spec/actions/2/env/MODE", json!("0600")),
            ("/spec/actions/3/name", json!("kexec-ubuntu")),
            // command -> args (Docker Cmd), no entrypoint override
            ("/spec/actions/3/args", json!(["kexec"])),
            ("/spec/actions/3/cmd", Value::Null),
            (
                "/spec/actions/3/volumes",
                json!(["/var/run/docker.sock:/var/run/docker.sock"]),
            ),
            // the single task's volumes -> template volumes
            (
                "/spec/volumes",
                json!([
                    "/dev:/dev",
                    "/dev/console:/dev/console",
                    "/lib/firmware:/lib/firmware:ro"
                ]),
            ),
            ("/spec/env", Value::Null),
        ],
    );
    assert_eq!(v2.spec.actions.len(), 4);
    let data = annotation(&v2).expect("conversion data");
    for kept in ["global_timeout", "ubuntu_jammy", "os-installation"] {
        assert!(data.contains(kept), "annotation should keep {kept}");
    }
    let back = conversion::template_to_v1alpha1(&v2);
    assert_eq!(back, v1, "the YAML text comes back byte for byte");
}

#[test]
fn template_edit_in_v1alpha2_regenerates_data_and_restores_homeless_fields() {
    let v1: v1alpha1::Template = fixture("v1alpha1/template-ubuntu.yaml");
    let mut v2 = conversion::template_to_v1alpha2(&v1);
    v2.spec.actions[0].image = "quay.io/tinkerbell/actions/image2disk:v2".into();
    let back = conversion::template_to_v1alpha1(&v2);
    let doc =
        v1alpha1::TemplateDoc::parse(back.spec.data.as_deref().expect("data")).expect("parses");
    assert_eq!(doc.name, "ubuntu_jammy");
    assert_eq!(doc.global_timeout, 1800);
    assert_eq!(doc.tasks.len(), 1);
    assert_eq!(doc.tasks[0].name, "os-installation");
    assert_eq!(doc.tasks[0].worker, "{{.device_1}}");
    assert_eq!(
        doc.tasks[0].actions[0].image, "quay.io/tinkerbell/actions/image2disk:v2",
        "newer image wins"
    );
    assert_eq!(doc.tasks[0].actions[3].pid, "host", "pid restored");
    assert_eq!(
        doc.tasks[0].actions[1].environment["BLOCK_DEVICE"],
        "{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"
    );
}

#[test]
fn template_v1alpha2_to_v1alpha1() {
    let v2: v1alpha2::Template = fixture("v1alpha2/template.yaml");
    let v1 = conversion::template_to_v1alpha1(&v2);
    let doc = v1alpha1::TemplateDoc::parse(v1.spec.data.as_deref().expect("data"))
        .expect("generated data parses");
    let j = serde_json::to_value(&doc).expect("json");
    assert_table(
        "template down",
        &j,
        &[
            ("/version", json!("0.1")),
            ("/name", json!("ubuntu-noble")),
            ("/tasks/0/name", json!("ubuntu-noble")),
            ("/tasks/0/worker", json!("{{.device_1}}")),
            (
                "/tasks/0/volumes",
                json!(["/dev:/dev", "/lib/firmware:/lib/firmware:ro"]),
            ),
            (
                "/tasks/0/environment/IMG_HOST",
                json!("http://192.168.2.111:8080"),
            ),
            ("/tasks/0/actions/0/name", json!("stream-image")),
            ("/tasks/0/actions/0/timeout", json!(600)),
            (
                "/tasks/0/actions/0/environment/DEST_DISK",
                json!("{{ index .Hardware.Disks 0 }}"),
            ),
            ("/tasks/0/actions/1/timeout", json!(90)),
            (
                "/tasks/0/actions/1/command",
                json!(["-c", "growpart {{ index .Hardware.Disks 0 }} 1"]),
            ),
            ("/tasks/0/actions/2/timeout", json!(90)),
            (
                "/tasks/0/actions/2/volumes",
                json!(["/var/run/docker.sock:/var/run/docker.sock"]),
            ),
        ],
    );
    let data = annotation(&v1).expect("cmd, networkNamespace and 1m30s have no v1alpha1 home");
    for kept in ["/bin/sh", "networkNamespace", "1m30s"] {
        assert!(data.contains(kept), "annotation should keep {kept}");
    }
    assert_eq!(conversion::template_to_v1alpha2(&v1), v2);
}

#[test]
fn multi_task_and_unparseable_templates() {
    let multi = "version: '0.1'\nname: two\nglobal_timeout: 60\ntasks:\n  - name: a\n    worker: '{{.device_1}}'\n    volumes: [/dev:/dev, /x:/data]\n    environment: {A: task, B: task}\n    actions:\n      - {name: one, image: img1, volumes: ['/y:/data'], environment: {B: action}}\n  - name: b\n    worker: '{{.device_2}}'\n    actions:\n      - {name: two, image: img2}\n";
    let v1 = v1alpha1::Template {
        metadata: Default::default(),
        spec: v1alpha1::TemplateSpec {
            data: Some(multi.into()),
            extra: Default::default(),
        },
        status: None,
    };
    let v2 = conversion::template_to_v1alpha2(&v1);
    let names: Vec<_> = v2.spec.actions.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["one", "two"], "all tasks' actions, in task order");
    let one = &v2.spec.actions[0];
    assert_eq!(
        one.env["A"], "task",
        "task environment moves into its actions"
    );
    assert_eq!(one.env["B"], "action", "the action's own value wins");
    assert_eq!(
        one.volumes,
        ["/dev:/dev", "/y:/data"],
        "the action's volume for /data wins"
    );
    assert!(v2.spec.actions[1].env.is_empty());
    assert_eq!(conversion::template_to_v1alpha1(&v2), v1);

    let templated =
        "version: '0.1'\ntasks:\n{{- range .tasks }}\n  - name: {{ .name }}\n{{- end }}\n";
    let v1 = v1alpha1::Template {
        metadata: Default::default(),
        spec: v1alpha1::TemplateSpec {
            data: Some(templated.into()),
            extra: Default::default(),
        },
        status: None,
    };
    let v2 = conversion::template_to_v1alpha2(&v1);
    assert!(
        v2.spec.actions.is_empty(),
        "only parses after rendering: no actions"
    );
    assert_eq!(
        v2.spec.v1alpha1_data.as_deref(),
        Some(templated),
        "rendered whole per Workflow, as Tinkerbell does"
    );
    assert_eq!(conversion::template_to_v1alpha1(&v2), v1);
}

#[test]
fn workflow_v1alpha1_to_v1alpha2() {
    let v1: v1alpha1::Workflow = fixture("v1alpha1/workflow.yaml");
    let v2 = conversion::workflow_to_v1alpha2(&v1);
    assert_table(
        "workflow up",
        &to_json(&v2),
        &[
            ("/spec/hardwareRef/name", json!("sm01")),
            ("/spec/templateRef/name", json!("ubuntu-jammy")),
            // hardwareMap -> templateData, so {{.device_1}} still renders
            ("/spec/templateData/device_1", json!(MAC1)),
            (
                "/spec/templateData/img_url",
                json!("http://192.168.2.111:8080/jammy.raw.gz"),
            ),
            ("/status/state", json!("Running")),
            ("/status/startedAt", json!("2024-05-01T10:00:00Z")),
            ("/status/actions/0/id", json!("stream-ubuntu-image")),
            ("/status/actions/0/state", json!("Succeeded")),
            ("/status/actions/0/startedAt", json!("2024-05-01T10:00:05Z")),
            ("/status/actions/0/rendered/timeout", json!("600s")),
            (
                "/status/actions/0/rendered/env/DEST_DISK",
                json!("/dev/nvme0n1"),
            ),
            ("/status/actions/1/state", json!("Running")),
        ],
    );
    assert!(
        annotation(&v2).is_some_and(|a| a.contains("toggleAllowNetboot") && a.contains("seconds"))
    );
    assert_eq!(conversion::workflow_to_v1alpha1(&v2), v1);
}

#[test]
fn workflow_v1alpha2_to_v1alpha1() {
    let v2: v1alpha2::Workflow = fixture("v1alpha2/workflow.yaml");
    let v1 = conversion::workflow_to_v1alpha1(&v2);
    assert_table(
        "workflow down",
        &to_json(&v1),
        &[
            ("/spec/hardwareRef", json!("sm02")),
            ("/spec/templateRef", json!("ubuntu-noble")),
            ("/spec/hardwareMap/device_1", json!("3c:ec:ef:4c:4f:56")),
            ("/spec/hardwareMap/retries", json!("3")),
            ("/status/state", json!("STATE_RUNNING")),
            ("/status/timeStarted", json!("2024-05-01T10:00:00Z")),
            ("/status/tasks/0/actions/0/name", json!("stream-image")),
            ("/status/tasks/0/actions/0/status", json!("STATE_SUCCESS")),
            ("/status/tasks/0/actions/0/timeout", json!(600)),
            ("/status/tasks/0/actions/1/status", json!("STATE_RUNNING")),
            // bootOptions: same names in both versions
            ("/spec/bootOptions/toggleAllowNetboot", json!(true)),
            ("/spec/bootOptions/bootMode", json!("customboot")),
            (
                "/spec/bootOptions/custombootConfig/preparingActions/1",
                json!({"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": true}}),
            ),
            (
                "/spec/bootOptions/custombootConfig/postActions/1",
                json!({"powerAction": "reset"}),
            ),
            (
                "/status/bootOptions/allowNetboot",
                json!({"toggledTrue": true}),
            ),
            (
                "/status/bootOptions/jobs/customboot-preparing-sm02-noble/uid",
                json!("0b6d5d1e-4a8c-4d55-9b1e-6f0e4d0e9d59"),
            ),
        ],
    );
    let data = annotation(&v1).expect("dispatch fields and conditions have no v1alpha1 home");
    assert!(
        !data.contains("bootOptions"),
        "bootOptions have a v1alpha1 home: {data}"
    );
    for kept in ["dispatchId", "TemplateRendered"] {
        assert!(data.contains(kept), "annotation should keep {kept}");
    }
    assert_eq!(conversion::workflow_to_v1alpha2(&v1), v2);
}

/// `bootOptions` both ways: Tinkerbell's spellings (`iso`, `oneTimeNetboot`, a one-time
/// `bootDevice`) map to their v1alpha2 meaning and come back as written; what has no v1alpha2
/// form is refused material (an empty action, no mode) with a warning naming the field.
#[test]
fn workflow_boot_options_both_ways() {
    let wf = |boot: Value, status: Value| {
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"templateRef": "t", "hardwareRef": "h", "bootOptions": boot},
            "status": status})
    };
    let up = |v1: &Value| {
        conversion::convert_with_warnings(v1.clone(), v1alpha2::API_VERSION).expect("up")
    };
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "netboot with toggle",
            json!({"toggleAllowNetboot": true, "bootMode": "netboot"}),
            json!({"toggleAllowNetboot": true, "bootMode": "netboot"}),
        ),
        (
            "oneTimeNetboot is netboot",
            json!({"oneTimeNetboot": true}),
            json!({"bootMode": "netboot"}),
        ),
        (
            "bootMode wins over oneTimeNetboot",
            json!({"oneTimeNetboot": true, "bootMode": "customboot",
                   "custombootConfig": {"preparingActions": [{"powerAction": "cycle"}]}}),
            json!({"bootMode": "customboot",
                   "custombootConfig": {"preparingActions": [{"powerAction": "cycle"}]}}),
        ),
        (
            "iso is isoboot",
            json!({"bootMode": "iso", "isoURL": "http://10.0.0.1:7171/iso/hook.iso"}),
            json!({"bootMode": "isoboot", "isoURL": "http://10.0.0.1:7171/iso/hook.iso"}),
        ),
        (
            "customboot with a one-time bootDevice",
            json!({"bootMode": "customboot", "custombootConfig": {
                "preparingActions": [{"powerAction": "off"},
                    {"bootDevice": {"device": "pxe", "efiBoot": true}},
                    {"powerAction": "on"}],
                "postActions": [{"virtualMediaAction": {"mediaURL": "", "kind": "CD"}},
                    {"oneTimeBootDeviceAction": {"device": ["disk"]}}]}}),
            json!({"bootMode": "customboot", "custombootConfig": {
                "preparingActions": [{"powerAction": "off"},
                    {"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": true}},
                    {"powerAction": "on"}],
                "postActions": [{"virtualMediaAction": {"kind": "CD"}},
                    {"oneTimeBootDeviceAction": {"device": ["disk"]}}]}}),
        ),
    ];
    for (what, boot, want) in cases {
        let v1 = wf(boot, json!({"state": "STATE_PENDING"}));
        let c = up(&v1);
        assert_eq!(c.object["spec"]["bootOptions"], want, "{what}");
        assert!(c.warnings.is_empty(), "{what}: {:?}", c.warnings);
        let typed: v1alpha2::Workflow = tink_api::from_value(c.object.clone()).expect(what);
        let b = typed.spec.boot_options.expect("bootOptions");
        assert!(b.problems().is_empty(), "{what}: {:?}", b.problems());
        assert_eq!(
            conversion::convert(c.object, v1alpha1::API_VERSION).expect("down"),
            v1,
            "{what} comes back as written"
        );
    }

    // No v1alpha2 form: a persistent bootDevice and an unknown mode.
    let v1 = wf(
        json!({"bootMode": "customboot", "custombootConfig": {"postActions": [
            {"bootDevice": {"device": "disk", "persistent": true, "efiBoot": true}},
            {"powerAction": "reset"}]}}),
        json!({}),
    );
    let c = up(&v1);
    assert_eq!(
        c.object["spec"]["bootOptions"]["custombootConfig"]["postActions"],
        json!([{}, {"powerAction": "reset"}])
    );
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].starts_with(
            "spec.bootOptions.custombootConfig.postActions[0]: a persistent bootDevice"
        ),
        "{:?}",
        c.warnings
    );
    let typed: v1alpha2::Workflow = tink_api::from_value(c.object.clone()).expect("typed");
    let problems = typed.spec.boot_options.expect("boot").problems();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].field, "custombootConfig.postActions[0]");
    assert_eq!(
        conversion::convert(c.object, v1alpha1::API_VERSION).expect("down"),
        v1
    );
    let v1 = wf(json!({"bootMode": "pxe"}), json!({}));
    let c = up(&v1);
    assert_eq!(c.object["spec"]["bootOptions"], json!({}));
    assert!(
        c.warnings[0].contains("spec.bootOptions.bootMode: \"pxe\""),
        "{:?}",
        c.warnings
    );

    // status.bootOptions field for field, both ways.
    let status = json!({"state": "STATE_SUCCESS", "bootOptions": {
        "allowNetboot": {"toggledTrue": true, "toggledFalse": true},
        "jobs": {"netboot-w": {"uid": "0b6d5d1e", "complete": true, "existingJobDeleted": true},
                 "iso-eject-w": {"uid": "77aa"}}}});
    let v1 = wf(json!({"bootMode": "netboot"}), status.clone());
    let c = up(&v1);
    assert_eq!(c.object["status"]["bootOptions"], status["bootOptions"]);
    assert!(
        annotation_paths(&c.object)
            .iter()
            .all(|p| !p.contains("bootOptions")),
        "{:?}",
        annotation_paths(&c.object)
    );
    let back = conversion::convert(c.object.clone(), v1alpha1::API_VERSION).expect("down");
    assert_eq!(back, v1);
    let typed: v1alpha2::Workflow = tink_api::from_value(c.object).expect("typed");
    let st = typed.status.expect("status").boot_options;
    assert!(st.allow_netboot.toggled_true && st.allow_netboot.toggled_false);
    assert_eq!(st.jobs["netboot-w"].uid.as_deref(), Some("0b6d5d1e"));
    assert!(st.jobs["netboot-w"].existing_job_deleted);
    assert!(!st.jobs["iso-eject-w"].complete);
}

fn annotation_paths(obj: &Value) -> Vec<String> {
    conversion::conversion_data_paths(obj)
}

#[test]
fn workflow_state_mapping_table() {
    let up = [
        ("STATE_PENDING", "Pending"),
        ("STATE_PREPARING", "Pending"),
        ("STATE_RUNNING", "Running"),
        ("STATE_SUCCESS", "Succeeded"),
        ("STATE_FAILED", "Failed"),
        ("STATE_TIMEOUT", "Failed"),
    ];
    for (from, to) in up {
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
            "spec": {"templateRef": "t", "hardwareRef": "h"}, "status": {"state": from}});
        let out = conversion::convert(obj.clone(), "tinkerbell.org/v1alpha2").expect("converts");
        assert_eq!(out["status"]["state"], json!(to), "{from}");
        assert_eq!(
            conversion::convert(out, "tinkerbell.org/v1alpha1").expect("back"),
            obj,
            "{from} round trip"
        );
    }
    let down = [
        ("Pending", "STATE_PENDING"),
        ("Scheduled", "STATE_PENDING"),
        ("Running", "STATE_RUNNING"),
        ("Succeeded", "STATE_SUCCESS"),
        ("Failed", "STATE_FAILED"),
        ("Cancelling", "STATE_RUNNING"),
        ("Canceled", "STATE_FAILED"),
    ];
    for (from, to) in down {
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow", "metadata": {"name": "w"},
            "spec": {"templateRef": {"name": "t"}, "hardwareRef": {"name": "h"}},
            "status": {"state": from, "actions": [], "conditions": []}});
        let out = conversion::convert(obj.clone(), "tinkerbell.org/v1alpha1").expect("converts");
        assert_eq!(out["status"]["state"], json!(to), "{from}");
        assert_eq!(
            conversion::convert(out, "tinkerbell.org/v1alpha2").expect("back"),
            obj,
            "{from} round trip"
        );
    }
}

#[test]
fn value_api_matches_typed_api_and_reports_errors() {
    let raw: Value = serde_yaml::from_str(&fixture_text("v1alpha1/hardware.yaml")).expect("yaml");
    let typed: v1alpha1::Hardware = fixture("v1alpha1/hardware.yaml");
    let up = conversion::convert(raw.clone(), "tinkerbell.org/v1alpha2").expect("up");
    assert_eq!(
        up["spec"],
        to_json(&conversion::hardware_to_v1alpha2(&typed))["spec"]
    );
    // The raw form comes back exactly, explicit zero values (`tinkVersion: 0`) included, which
    // the typed form cannot tell from absent ones.
    assert_eq!(
        conversion::convert(up, "tinkerbell.org/v1alpha1").expect("down"),
        raw
    );
    // already in the desired version: unchanged
    assert_eq!(
        conversion::convert(raw.clone(), "tinkerbell.org/v1alpha1").expect("same"),
        raw
    );

    let osie: Value = serde_yaml::from_str(&fixture_text("v1alpha2/osie.yaml")).expect("yaml");
    assert!(matches!(
        conversion::convert(osie, "tinkerbell.org/v1alpha1"),
        Err(ConversionError::UnsupportedKind { .. })
    ));
    assert!(matches!(
        conversion::convert(json!({"kind": "Hardware"}), "tinkerbell.org/v1alpha2"),
        Err(ConversionError::MissingTypeField("apiVersion"))
    ));
    assert!(matches!(
        conversion::convert(raw.clone(), "tinkerbell.org/v9"),
        Err(ConversionError::UnsupportedApiVersion(_))
    ));
    let mut bad = raw;
    bad["spec"]["interfaces"][1]["dhcp"]["lease_time"] = json!("forever");
    match conversion::convert(bad, "tinkerbell.org/v1alpha2") {
        Err(ConversionError::Invalid { source, .. }) => {
            assert_eq!(
                source.path, "spec.interfaces[1].dhcp.lease_time",
                "{source}"
            )
        }
        other => panic!("expected an invalid-object error, got {other:?}"),
    }
}

#[test]
fn malformed_conversion_data_is_ignored() {
    let typed: v1alpha1::Hardware = fixture("v1alpha1/hardware.yaml");
    let mut v2 = conversion::hardware_to_v1alpha2(&typed);
    v2.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONVERSION_DATA_ANNOTATION.into(), "{not json".into());
    let back = conversion::hardware_to_v1alpha1(&v2);
    let mut without = v2.clone();
    without.metadata.annotations = None;
    assert_eq!(
        back,
        conversion::hardware_to_v1alpha1(&without),
        "plain mapping used"
    );
    assert_eq!(back.spec.interfaces.len(), 2);
}

#[test]
fn conversion_review_converts_every_object_in_order() {
    let hw: Value = serde_yaml::from_str(&fixture_text("v1alpha1/hardware.yaml")).expect("yaml");
    let wf: Value = serde_yaml::from_str(&fixture_text("v1alpha1/workflow.yaml")).expect("yaml");
    let review: kube::core::conversion::ConversionReview = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "705ab4f5", "desiredAPIVersion": "tinkerbell.org/v1alpha2", "objects": [hw, wf]}
    }))
    .expect("review");
    let out = serde_json::to_value(conversion::review(review)).expect("json");
    assert_eq!(out["response"]["uid"], json!("705ab4f5"));
    assert_eq!(out["response"]["result"]["status"], json!("Success"));
    let objs = out["response"]["convertedObjects"]
        .as_array()
        .expect("objects");
    assert_eq!(objs.len(), 2);
    assert_eq!(objs[0]["kind"], json!("Hardware"));
    assert_eq!(objs[1]["apiVersion"], json!("tinkerbell.org/v1alpha2"));

    let mut bad = wf.clone();
    bad["spec"]["hardwareMap"] = json!("not a map");
    let review: kube::core::conversion::ConversionReview = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u2", "desiredAPIVersion": "tinkerbell.org/v1alpha2", "objects": [wf, bad]}
    }))
    .expect("review");
    let out = serde_json::to_value(conversion::review(review)).expect("json");
    assert_eq!(out["response"]["result"]["status"], json!("Failure"));
    let msg = out["response"]["result"]["message"]
        .as_str()
        .expect("message");
    assert!(
        msg.contains("objects[1]") && msg.contains("spec.hardwareMap"),
        "{msg}"
    );
}
