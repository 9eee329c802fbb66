use pretty_assertions::assert_eq;
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Template, Workflow};

use super::*;

fn hardware(disks: &[&str]) -> Hardware {
    tink_api::from_yaml(&format!(
        r##"
apiVersion: tinkerbell.org/v1alpha2
kind: Hardware
metadata:
  name: sm01
  namespace: tink
  labels: {{rack: r1}}
spec:
  networkInterfaces:
    "3c:ec:ef:4c:4f:54":
      dhcp:
        ip: 10.1.1.20
        netmask: 255.255.255.0
        gateway: 10.1.1.1
        hostname: sm01
        nameservers: [1.1.1.1, 8.8.8.8]
    "3c:ec:ef:4c:4f:55":
      disableNetboot: true
      dhcp:
        ip: 10.1.2.20
        netmask: 255.255.0.0
        vlanId: "100"
  instance:
    userdata: "#cloud-config"
  storageDevices: {disks:?}
"##
    ))
    .expect("valid hardware")
}

fn workflow(data: serde_json::Value) -> Workflow {
    let mut wf: Workflow = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2",
        "kind": "Workflow",
        "metadata": {"name": "wf1", "namespace": "tink"},
        "spec": {"hardwareRef": {"name": "sm01"}, "templateRef": {"name": "ubuntu"}},
    }))
    .expect("valid workflow");
    if let serde_json::Value::Object(map) = data {
        wf.spec.template_data = map.into_iter().collect();
    }
    wf
}

fn template(yaml: &str) -> TemplateSpec {
    let t: Template = tink_api::from_yaml(yaml).expect("valid template");
    t.spec
}

/// Tinkerbell's ubuntu-on-bare-metal template (tinkerbell/playground), in v1alpha2 form.
const UBUNTU: &str = r#"
apiVersion: tinkerbell.org/v1alpha2
kind: Template
metadata: {name: ubuntu, namespace: tink}
spec:
  volumes:
    - /dev:/dev
    - /dev/console:/dev/console
    - /lib/firmware:/lib/firmware:ro
  env:
    DEBUG: "false"
  actions:
    - name: stream-ubuntu-image
      image: quay.io/tinkerbell/actions/image2disk:latest
      timeout: 600s
      env:
        DEST_DISK: '{{ index .Hardware.Disks 0 }}'
        IMG_URL: 'http://{{ .artifact_server }}/jammy-server-cloudimg-amd64.raw.gz'
        COMPRESSED: "true"
    - name: grow-partition
      image: quay.io/tinkerbell/actions/cexec:latest
      timeout: 90s
      env:
        BLOCK_DEVICE: '{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}'
        FS_TYPE: ext4
        CHROOT: "y"
        DEFAULT_INTERPRETER: "/bin/sh -c"
        CMD_LINE: "growpart {{ index .Hardware.Disks 0 }} 1 && resize2fs {{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"
    - name: add-netplan
      image: quay.io/tinkerbell/actions/writefile:latest
      volumes:
        - /dev:/host-dev
      env:
        DEST_DISK: '{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}'
        DEST_PATH: /etc/netplan/config.yaml
        CONTENTS: |
          network:
            version: 2
            ethernets:
          {{- range $i, $nic := .Hardware.Interfaces }}
              id{{ $i }}:
                match: {macaddress: {{ $nic.DHCP.MAC }}}
                addresses: [{{ $nic.DHCP.IP.Address }}/{{ netmaskToPrefixLength $nic.DHCP.IP.Netmask }}]
          {{- end }}
    - name: kexec
      image: quay.io/tinkerbell/actions/kexec:latest
      networkNamespace: '{{ if .use_host_net }}host{{ end }}'
      cmd: '{{ .kexec_cmd }}'
      args: ['{{ .Workflow.Name }}', '{{ .Hardware.Name }}']
      env:
        BLOCK_DEVICE: '{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}'
        FS_TYPE: ext4
"#;

#[test]
fn renders_a_real_tinkerbell_template() {
    let data = template_data(
        &workflow(json!({
            "artifact_server": "10.1.1.11:8080",
            "use_host_net": true,
            "kexec_cmd": "",
        })),
        &hardware(&["/dev/nvme0n1", "/dev/sdb"]),
    );
    let actions = render_actions(&template(UBUNTU), &data).expect("renders");
    assert_eq!(actions.len(), 4);

    let a = &actions[0];
    assert_eq!(a.name, "stream-ubuntu-image");
    assert_eq!(a.env["DEST_DISK"], "/dev/nvme0n1");
    assert_eq!(
        a.env["IMG_URL"],
        "http://10.1.1.11:8080/jammy-server-cloudimg-amd64.raw.gz"
    );
    // Template-level env and volumes merged in.
    assert_eq!(a.env["DEBUG"], "false");
    assert_eq!(
        a.volumes,
        vec![
            "/dev:/dev",
            "/dev/console:/dev/console",
            "/lib/firmware:/lib/firmware:ro"
        ]
    );
    assert_eq!(a.timeout.as_ref().map(|t| t.as_str()), Some("600s"));

    let a = &actions[1];
    assert_eq!(a.env["BLOCK_DEVICE"], "/dev/nvme0n1p1");
    assert_eq!(
        a.env["CMD_LINE"],
        "growpart /dev/nvme0n1 1 && resize2fs /dev/nvme0n1p1"
    );
    assert_eq!(
        a.timeout.as_ref().and_then(|t| t.limit()),
        Some(std::time::Duration::from_secs(90))
    );

    let a = &actions[2];
    assert_eq!(
        a.env["CONTENTS"],
        "network:\n  version: 2\n  ethernets:\n    id0:\n      match: {macaddress: 3c:ec:ef:4c:4f:54}\n      addresses: [10.1.1.20/24]\n    id1:\n      match: {macaddress: 3c:ec:ef:4c:4f:55}\n      addresses: [10.1.2.20/16]\n"
    );
    // The action's own /dev mount (another container path) and the global ones.
    assert_eq!(
        a.volumes,
        vec![
            "/dev:/host-dev",
            "/dev:/dev",
            "/dev/console:/dev/console",
            "/lib/firmware:/lib/firmware:ro"
        ]
    );

    let a = &actions[3];
    assert_eq!(a.network_namespace.as_deref(), Some("host"));
    assert_eq!(a.cmd, None, "an empty rendered cmd is unset");
    assert_eq!(a.args, vec!["wf1", "sm01"]);
}

#[test]
fn action_volume_with_the_same_target_wins() {
    let spec = template(
        r#"
apiVersion: tinkerbell.org/v1alpha2
kind: Template
metadata: {name: t}
spec:
  volumes: ["/dev:/dev", "shared:/data"]
  env: {A: global, B: global}
  actions:
    - name: a
      image: busybox
      volumes: ["/dev/sda:/dev:ro"]
      env: {A: own}
"#,
    );
    let data = template_data(&workflow(json!({})), &hardware(&["/dev/sda"]));
    let actions = render_actions(&spec, &data).expect("renders");
    assert_eq!(actions[0].volumes, vec!["/dev/sda:/dev:ro", "shared:/data"]);
    assert_eq!(actions[0].env["A"], "own");
    assert_eq!(actions[0].env["B"], "global");
}

#[test]
fn hardware_data_has_the_tinkerbell_shape() {
    let hw = hardware(&["/dev/sda"]);
    let data = template_data(
        &workflow(json!({"device_1": "3c:ec:ef:4c:4f:54", "Hardware": "shadowed"})),
        &hw,
    );
    assert_eq!(data["device_1"], "3c:ec:ef:4c:4f:54");
    let h = &data["Hardware"];
    assert_eq!(h["Disks"], json!(["/dev/sda"]));
    assert_eq!(h["StorageDevices"], json!(["/dev/sda"]));
    assert_eq!(h["UserData"], "#cloud-config");
    assert_eq!(h["Name"], "sm01");
    assert_eq!(h["Labels"]["rack"], "r1");
    assert_eq!(h["Interfaces"][0]["DHCP"]["MAC"], "3c:ec:ef:4c:4f:54");
    assert_eq!(
        h["Interfaces"][0]["DHCP"]["NameServers"],
        json!(["1.1.1.1", "8.8.8.8"])
    );
    assert_eq!(h["Interfaces"][0]["Netboot"]["AllowPXE"], true);
    assert_eq!(h["Interfaces"][1]["Netboot"]["AllowPXE"], false);
    assert_eq!(h["Interfaces"][1]["DHCP"]["VLANID"], "100");
    assert_eq!(h["Spec"]["storageDevices"], json!(["/dev/sda"]));
    assert_eq!(data["Workflow"]["Namespace"], "tink");
}

fn one_action(field: &str, value: &str) -> TemplateSpec {
    let image = if field == "image" {
        ""
    } else {
        "\n      image: busybox"
    };
    template(&format!(
        "apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nmetadata: {{name: t}}\nspec:\n  actions:\n    - name: a{image}\n      {field}: {value}\n"
    ))
}

#[test]
fn render_errors_name_the_field_with_line_and_column() {
    let data = template_data(&workflow(json!({"n": 1})), &hardware(&[]));
    let cases: &[(&str, &str, &str, &str)] = &[
        // missingkey=error
        (
            "image",
            "'{{ .missing }}'",
            "spec.actions[0].image",
            "map has no entry for key \"missing\"",
        ),
        // a parse error carries line and column
        (
            "cmd",
            "'{{ if }}'",
            "spec.actions[0].cmd",
            "spec.actions[0].cmd:1:",
        ),
        // no disks: index out of range
        (
            "args",
            "['{{ index .Hardware.Disks 0 }}']",
            "spec.actions[0].args[0]",
            "index out of range",
        ),
        // unknown function
        (
            "env",
            "{X: '{{ nosuchfunc 1 }}'}",
            "spec.actions[0].env.X",
            "function \"nosuchfunc\" not defined",
        ),
    ];
    for (field, value, path, needle) in cases {
        let err = render_actions(&one_action(field, value), &data).expect_err(path);
        let text = err.to_string();
        assert!(text.starts_with(path), "{text}");
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
}

#[test]
fn output_is_capped() {
    let data = template_data(&workflow(json!({})), &hardware(&[]));
    let err = render_actions(&one_action("image", "'{{ repeat 300000 \"x\" }}'"), &data)
        .expect_err("too large");
    assert!(err.to_string().contains("exceeds"), "{err}");
}

#[test]
fn plain_strings_are_kept_verbatim() {
    let data = template_data(&workflow(json!({})), &hardware(&[]));
    let actions = render_actions(&one_action("cmd", "'echo }} {'"), &data).expect("renders");
    assert_eq!(actions[0].cmd.as_deref(), Some("echo }} {"));
    assert_eq!(actions[0].image, "busybox");
}

/// A manifest of crates/api's corpus of real Tinkerbell v1alpha1 objects, converted to
/// v1alpha2 as the API server stores it.
fn corpus_v2<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/api/tests/corpus")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("corpus file");
    let v1: Value = serde_yaml::from_str(&text).expect("yaml");
    let v2 = tink_api::conversion::convert(v1, tink_api::v1alpha2::API_VERSION).expect("converts");
    tink_api::from_value(v2).expect("typed v1alpha2")
}

fn tinkerbell_workflow(mac: &str) -> Workflow {
    workflow(json!({"device_1": mac}))
}

#[test]
fn v1alpha1_view_of_a_converted_hardware() {
    let hw: Hardware = corpus_v2("tink-examples-hardware.yaml");
    let h = hardware_data(&hw);
    let nic = &h["Interfaces"][0];
    assert_eq!(nic["DHCP"]["MAC"], "3c:ec:ef:4c:4f:54");
    assert_eq!(
        nic["DHCP"]["Arch"], "x86_64",
        "from the conversion annotation"
    );
    assert_eq!(nic["DHCP"]["UEFI"], true, "from the conversion annotation");
    assert_eq!(nic["DHCP"]["IP"]["Address"], "172.16.10.100");
    assert_eq!(nic["DHCP"]["LeaseTime"], 86400);
    assert_eq!(nic["dhcp"]["lease_time"], 86400, "lower-case alias");
    assert_eq!(nic["Netboot"]["AllowPXE"], true);
    let os = &h["Metadata"]["Instance"]["OperatingSystem"];
    assert_eq!(os["Distro"], "ubuntu");
    assert_eq!(
        h["metadata"]["instance"]["operating_system"]["os_slug"],
        "ubuntu_20_04"
    );
    assert_eq!(h["Metadata"]["Facility"]["FacilityCode"], "onprem");
    assert_eq!(h["Metadata"]["Manufacturer"]["Slug"], "supermicro");
    assert_eq!(
        h["Metadata"]["State"], "",
        "zero value, as a Go struct field"
    );
    assert!(
        h["Annotations"]
            .get(tink_api::CONVERSION_DATA_ANNOTATION)
            .is_none(),
        "the conversion annotation is not template data"
    );
    // Templates reading these keys render under Tinkerbell's missingkey=error.
    let t = tink_template::Template::parse(
        "t",
        "{{ (index .Hardware.Interfaces 0).DHCP.Arch }} {{ (index .Hardware.Interfaces 0).DHCP.UEFI }} {{ .Hardware.Metadata.Instance.OperatingSystem.Distro }} {{ .Hardware.Metadata.Instance.Hostname }} {{ (index .Hardware.Interfaces 0).DHCP.IfaceName }}|",
    )
    .expect("parses");
    let data = template_data(&tinkerbell_workflow("3c:ec:ef:4c:4f:54"), &hw);
    assert_eq!(
        t.render(&data, &RenderOptions::tinkerbell())
            .expect("renders"),
        "x86_64 true ubuntu sm01 |"
    );
}

#[test]
fn playground_ubuntu_and_capt_default_templates_render() {
    let hw: Hardware = corpus_v2("playground-compose-hardware.yaml");
    let wf = tinkerbell_workflow("08:00:27:9e:f5:3a");
    let data = template_data(&wf, &hw);

    let ubuntu: Template = corpus_v2("playground-compose-template-ubuntu.yaml");
    let actions = render_actions(&ubuntu.spec, &data).expect("playground ubuntu renders");
    assert_eq!(actions.len(), 7);
    assert_eq!(actions[0].name, "stream-ubuntu-image");
    assert_eq!(actions[0].env["DEST_DISK"], "/dev/sda");
    assert_eq!(
        actions[1].env["CMD_LINE"],
        "growpart /dev/sda 1 && resize2fs /dev/sda1"
    );
    assert!(actions[0].volumes.contains(&"/dev:/dev".to_string()));

    let capt: Template = corpus_v2("capt-default-template.yaml");
    let actions = render_actions(&capt.spec, &data).expect("CAPT default template renders");
    let names: Vec<&str> = actions.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "stream-image",
            "add-tink-cloud-init-config",
            "add-tink-cloud-init-ds-config",
            "kexec-image"
        ]
    );
    assert_eq!(actions[3].pid_namespace.as_deref(), Some("host"));
    assert_eq!(
        actions[0]
            .timeout
            .as_ref()
            .map(|t| t.to_string())
            .as_deref(),
        Some("600s")
    );
}

#[test]
fn templates_with_actions_under_if_blocks_render_whole() {
    let hw: Hardware = corpus_v2("tink-examples-hardware.yaml");
    let conditional = "version: \"0.1\"\nname: t\ntasks:\n  - name: os\n    worker: \"{{.device_1}}\"\n    volumes: [/dev:/dev]\n    actions:\n{{- if eq .Hardware.Metadata.Instance.OperatingSystem.Distro \"ubuntu\" }}\n      - name: stream-ubuntu\n        image: image2disk:v1.0.0\n        environment:\n          DEST_DISK: {{ index .Hardware.Disks 0 }}\n          LITERAL: \"{{`{{ not rendered twice }}`}}\"\n{{- else }}\n      - name: stream-other\n        image: oci2disk:v1.0.0\n{{- end }}\n{{- range $i, $nic := .Hardware.Interfaces }}\n      - name: nic-{{ $i }}\n        image: writefile:v1.0.0\n        environment: {MAC: \"{{ $nic.DHCP.MAC }}\"}\n{{- end }}\n      - name: kexec\n        image: kexec:v1.0.0\n        pid: host\n";
    let v1 = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template", "metadata": {"name": "t"}, "spec": {"data": conditional}});
    let v2: Template = tink_api::from_value(
        tink_api::conversion::convert(v1, tink_api::v1alpha2::API_VERSION).expect("converts"),
    )
    .expect("typed");
    assert!(v2.spec.actions.is_empty() && v2.spec.v1alpha1_data.is_some());
    let mut hw = hw;
    hw.spec.storage_devices = vec!["/dev/nvme0n1".into()];
    let data = template_data(&tinkerbell_workflow("3c:ec:ef:4c:4f:54"), &hw);
    let actions = render_actions(&v2.spec, &data).expect("renders");
    let names: Vec<&str> = actions.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["stream-ubuntu", "nic-0", "kexec"]);
    assert_eq!(actions[0].env["DEST_DISK"], "/dev/nvme0n1");
    assert_eq!(actions[0].env["LITERAL"], "{{ not rendered twice }}");
    assert_eq!(actions[0].volumes, ["/dev:/dev"]);
    assert_eq!(actions[1].env["MAC"], "3c:ec:ef:4c:4f:54");
    assert_eq!(actions[2].pid_namespace.as_deref(), Some("host"));

    let broken = TemplateSpec {
        v1alpha1_data: Some("tasks: {{ .nope }}".into()),
        ..Default::default()
    };
    let err = render_actions(&broken, &data).expect_err("missing key");
    assert!(err.to_string().starts_with("spec.v1alpha1Data: "), "{err}");
    let empty = TemplateSpec::default();
    assert!(
        render_actions(&empty, &data).is_err(),
        "no actions is an error"
    );
}
