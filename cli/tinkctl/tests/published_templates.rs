//! Tinkerbell's published example templates render unchanged (issue 28, Build 4).
//!
//! Each file of `tests/fixtures/published/` is a template as Tinkerbell publishes it, copied
//! verbatim under a header naming its repository, path and commit. Each goes through the real
//! binaries the way a user's would: `tinkctl migrate` (v1alpha1 to v1alpha2, the conversion
//! `kubectl apply` of a v1alpha1 object gets from the webhook) and `tinkctl template render`
//! with a Hardware (also written as v1alpha1 and migrated, so `.Hardware.Interfaces[].DHCP.Arch`
//! has its value) and the data the template reads. Then:
//!
//! - it renders, and no `{{` is left in any rendered string;
//! - the rendered actions have the source's names, images and environment keys, in order (the
//!   expectations below are read off the source; each name and image is also checked to occur
//!   in the fixture's text, so a typo in an expectation cannot pass);
//! - the templated values are what Tinkerbell renders (disks, partitions, data; `MODE: 0600`
//!   stays `0600`);
//! - with `quay.io/tinkerbell/actions/` rewritten to `<registry>/tinkerbell/actions/`, every
//!   image names one of our action images; the images that are not Tinkerbell actions at all
//!   (waitdaemon, alpine) are listed per template and must be exactly those.
//!
//! Templates that are not valid YAML as published (tab indentation, a misindented key) are
//! kept too: they must fail with the document's YAML error, and an independent YAML parser
//! must reject the same text, so the failure is the document's and not ours.
//!
//! A template document that is not a Kubernetes object (a docs snippet, CAPT's
//! `templateOverride`, a README's `actions:` list) is put into a v1alpha1 Template's
//! `spec.data` by the test (an `actions:` list into one task first), as CAPT and users do; the
//! fixture's text is not changed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use tink_api::v1alpha2::Action;

/// Our action images (docs/actions.md, scripts/images.sh).
const OUR_ACTIONS: &[&str] = &[
    "image2disk",
    "oci2disk",
    "qemuimg2disk",
    "archive2disk",
    "writefile",
    "cexec",
    "kexec",
    "grub2disk",
];
const QUAY: &str = "quay.io/tinkerbell/actions/";
const REGISTRY: &str = "192.168.2.50:5000";
const MAC: &str = "52:54:00:12:34:56";

const WRITEFILE: &[&str] = &[
    "CONTENTS",
    "DEST_DISK",
    "DEST_PATH",
    "DIRMODE",
    "FS_TYPE",
    "GID",
    "MODE",
    "UID",
];
const CEXEC_SH: &[&str] = &[
    "BLOCK_DEVICE",
    "CHROOT",
    "CMD_LINE",
    "DEFAULT_INTERPRETER",
    "FS_TYPE",
];
const WAITDAEMON: &[&str] = &["BLOCK_DEVICE", "FS_TYPE", "IMAGE", "WAIT_SECONDS"];

/// How the fixture's text becomes a v1alpha1 Template.
#[derive(Clone, Copy)]
enum Form {
    /// A `tinkerbell.org/v1alpha1` Template object, used as it is.
    Object,
    /// A template document (`version`, `tasks`): the Template's `spec.data`.
    Document,
    /// A CAPT TinkerbellMachineTemplate: its `spec.template.spec.templateOverride` is the
    /// Template's `spec.data` (what CAPT creates).
    CaptOverride,
    /// An `actions:` list from an action's README: one task of a document.
    ActionsList,
}

#[derive(Clone, Copy)]
struct Expect {
    name: &'static str,
    image: &'static str,
    env: &'static [&'static str],
}

/// An expected action (a macro, so `&[a!(..)]` is a constant promoted to `'static`).
macro_rules! a {
    ($name:expr, $image:expr, $env:expr $(,)?) => {
        Expect {
            name: $name,
            image: $image,
            env: $env,
        }
    };
}

struct Case {
    file: &'static str,
    form: Form,
    arch: &'static str,
    data: &'static [(&'static str, &'static str)],
    /// Task-level environment keys (merged into every action).
    task_env: &'static [&'static str],
    actions: &'static [Expect],
    /// Images that are not Tinkerbell actions (after the rewrite), in the order they appear.
    foreign: &'static [&'static str],
    /// Rendered values to check: (action index, variable, value).
    values: &'static [(usize, &'static str, &'static str)],
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/published")
}

fn tinkctl(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .args(args)
        .output()
        .expect("run tinkctl")
}

/// The fixture's text without its header comment (the lines before the copied text).
fn source_text(file: &str) -> String {
    let text = std::fs::read_to_string(fixtures().join(file)).expect("fixture");
    let body: Vec<&str> = text.lines().skip_while(|l| l.starts_with("# ")).collect();
    let mut s = body.join("\n");
    s.push('\n');
    assert!(
        text.starts_with("# Published example template, copied verbatim"),
        "{file}: the header is missing"
    );
    for key in ["# repo: ", "# path: ", "# commit: "] {
        assert!(text.contains(key), "{file}: the header has no {key:?}");
    }
    s
}

/// The v1alpha1 Template (YAML) a user would apply for this fixture.
fn v1alpha1_template(case: &Case) -> String {
    let text = source_text(case.file);
    let data = match case.form {
        Form::Object => return text,
        Form::Document => text,
        Form::CaptOverride => {
            let v: Value = serde_yaml::from_str(&text).expect("CAPT manifest");
            v.pointer("/spec/template/spec/templateOverride")
                .and_then(Value::as_str)
                .expect("templateOverride")
                .to_string()
        }
        Form::ActionsList => {
            let mut doc = String::from(
                "version: \"0.1\"\nname: readme\nglobal_timeout: 1800\ntasks:\n  - name: readme\n    worker: \"{{.device_1}}\"\n",
            );
            for l in text.lines() {
                doc.push_str("    ");
                doc.push_str(l);
                doc.push('\n');
            }
            doc
        }
    };
    let name = case.file.trim_end_matches(".yaml");
    serde_yaml::to_string(&json!({
        "apiVersion": "tinkerbell.org/v1alpha1",
        "kind": "Template",
        "metadata": {"name": name, "namespace": "tink"},
        "spec": {"data": data},
    }))
    .expect("yaml")
}

fn v1alpha1_hardware(arch: &str) -> String {
    format!(
        "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {{name: m1, namespace: tink}}\nspec:\n  disks: [{{device: /dev/nvme0n1}}]\n  interfaces:\n    - dhcp: {{mac: \"{MAC}\", arch: {arch}, hostname: m1, ip: {{address: 192.168.2.21, netmask: 255.255.255.0, gateway: 192.168.2.1}}, lease_time: 86400}}\n      netboot: {{allowPXE: true, allowWorkflow: true}}\n"
    )
}

/// `tinkctl migrate` of the Template and a Hardware, then `tinkctl template render`.
/// Ok: the rendered actions; Err: the failing command's stderr.
fn render(case: &Case) -> Result<Vec<Action>, String> {
    let dir = tempfile::tempdir().expect("tmp");
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("template.yaml"), v1alpha1_template(case)).expect("write");
    std::fs::write(p("hardware.yaml"), v1alpha1_hardware(case.arch)).expect("write");
    let out = tinkctl(&[
        "migrate".as_ref(),
        p("hardware.yaml").as_os_str(),
        p("template.yaml").as_os_str(),
        "--out".as_ref(),
        p("v1alpha2.yaml").as_os_str(),
    ]);
    if !out.status.success() {
        return Err(format!(
            "tinkctl migrate: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(p("v1alpha2.yaml")).expect("migrated");
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .collect();
    let of_kind = |kind: &str| -> Value {
        let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(
            found.len(),
            1,
            "{}: one {kind} expected:\n{text}",
            case.file
        );
        assert_eq!(found[0]["apiVersion"], "tinkerbell.org/v1alpha2", "{text}");
        found[0].clone()
    };
    for (kind, file) in [("Hardware", "hw2.yaml"), ("Template", "tpl2.yaml")] {
        std::fs::write(
            p(file),
            serde_yaml::to_string(&of_kind(kind)).expect("yaml"),
        )
        .expect("w");
    }
    let mut args: Vec<std::ffi::OsString> = vec![
        "template".into(),
        "render".into(),
        "-t".into(),
        p("tpl2.yaml").into(),
        "--hardware".into(),
        p("hw2.yaml").into(),
        "--data".into(),
        format!("device_1={MAC}").into(),
    ];
    for (k, v) in case.data {
        args.push("--data".into());
        args.push(format!("{k}={v}").into());
    }
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_os_str()).collect();
    let out = tinkctl(&refs);
    if !out.status.success() {
        return Err(format!(
            "tinkctl template render: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(serde_yaml::from_str(&stdout).unwrap_or_else(|e| panic!("render output: {e}\n{stdout}")))
}

/// `quay.io/tinkerbell/actions/NAME[:TAG]` -> `<registry>/tinkerbell/actions/NAME[:TAG]`.
fn rewrite(image: &str) -> String {
    match image.strip_prefix(QUAY) {
        Some(rest) => format!("{REGISTRY}/tinkerbell/actions/{rest}"),
        None => image.to_string(),
    }
}

/// The action an image of our registry names, if it is one of ours.
fn our_action(image: &str) -> Option<&'static str> {
    let rest = image.strip_prefix(&format!("{REGISTRY}/tinkerbell/actions/"))?;
    let name = rest.split(':').next()?;
    OUR_ACTIONS.iter().copied().find(|a| *a == name)
}

fn check(case: &Case) {
    let file = case.file;
    let source = source_text(file);
    let actions = render(case).unwrap_or_else(|e| panic!("{file}: {e}"));

    let got: Vec<(&str, &str)> = actions
        .iter()
        .map(|a| (a.name.as_str(), a.image.as_str()))
        .collect();
    let want: Vec<(&str, &str)> = case.actions.iter().map(|e| (e.name, e.image)).collect();
    assert_eq!(got, want, "{file}: action names and images");
    for (e, act) in case.actions.iter().zip(&actions) {
        assert!(
            source.contains(e.name),
            "{file}: {:?} not in the source",
            e.name
        );
        assert!(
            source.contains(e.image),
            "{file}: {:?} not in the source",
            e.image
        );
        let mut keys: Vec<&str> = e.env.iter().chain(case.task_env).copied().collect();
        keys.sort_unstable();
        let got: Vec<&str> = act.env.keys().map(String::as_str).collect();
        assert_eq!(got, keys, "{file}: environment keys of {:?}", e.name);
        for k in e.env {
            assert!(
                source.contains(&format!("{k}:")),
                "{file}: {k} not in the source"
            );
        }
    }
    for a in &actions {
        let strings = std::iter::once(&a.image)
            .chain(a.args.iter())
            .chain(a.env.values())
            .chain(a.volumes.iter());
        for s in strings {
            assert!(
                !s.contains("{{"),
                "{file}: {:?} left a template: {s}",
                a.name
            );
        }
    }
    for (i, k, v) in case.values {
        assert_eq!(
            actions[*i].env.get(*k).map(String::as_str),
            Some(*v),
            "{file}: {k} of {:?}",
            actions[*i].name
        );
    }

    // Only the registry host changes: every image is then one of ours, except the images
    // that are not Tinkerbell actions at all (listed per case).
    let mut foreign = Vec::new();
    for a in &actions {
        let image = rewrite(&a.image);
        if our_action(&image).is_none() {
            foreign.push(image.clone());
        }
        // waitdaemon runs the action named by IMAGE: that one must be ours.
        if let Some(inner) = a.env.get("IMAGE").filter(|i| i.starts_with(QUAY)) {
            assert!(
                our_action(&rewrite(inner)).is_some(),
                "{file}: IMAGE {inner} of {:?} is not one of our actions",
                a.name
            );
        }
    }
    assert_eq!(foreign, case.foreign, "{file}: images that are not ours");
}

/// A published document that is not valid YAML: our pipeline fails with a YAML error, and so
/// does an independent parse of the same text (the template expressions it holds are inside
/// quoted strings, so rendering does not change what the parser sees).
fn check_invalid_yaml(case: &Case, want: &str) {
    let source = source_text(case.file);
    let err = render(case).expect_err("invalid YAML must not render");
    assert!(err.contains(want), "{}: {err}", case.file);
    let doc = match case.form {
        Form::ActionsList => source.clone(),
        _ => source.replace("{{.device_1}}", MAC),
    };
    assert!(
        serde_yaml::from_str::<Value>(&doc).is_err(),
        "{}: the source parses as YAML, so the failure is ours: {err}",
        case.file
    );
}

#[test]
fn tinkerbell_org_full_example_ubuntu() {
    check(&Case {
        file: "tinkerbell-org-ubuntu.yaml",
        form: Form::Object,
        arch: "x86_64",
        data: &[
            ("artifact_server_ip_port", "192.168.2.50:8080"),
            ("tootles_ip_port", "192.168.2.50:7080"),
        ],
        task_env: &["GLOBAL_VALUE"],
        actions: &[
            a!(
                "stream image",
                "quay.io/tinkerbell/actions/image2disk:latest",
                &["COMPRESSED", "DEST_DISK", "IMG_URL"],
            ),
            a!(
                "add cloud init config",
                "quay.io/tinkerbell/actions/writefile:latest",
                WRITEFILE,
            ),
            a!(
                "add cloud-init ds config",
                "quay.io/tinkerbell/actions/writefile:latest",
                WRITEFILE,
            ),
            a!(
                "write netplan",
                "quay.io/tinkerbell/actions/writefile:latest",
                WRITEFILE,
            ),
        ],
        foreign: &[],
        values: &[
            (0, "DEST_DISK", "/dev/nvme0n1"),
            (
                0,
                "IMG_URL",
                "http://192.168.2.50:8080/jammy-server-cloudimg-amd64.raw.gz",
            ),
            (0, "COMPRESSED", "true"),
            (0, "GLOBAL_VALUE", "my global value"),
            (1, "DEST_DISK", "/dev/nvme0n1p1"),
            (
                1,
                "CONTENTS",
                "datasource:\n  Ec2:\n    metadata_urls: [\"http://192.168.2.50:7080\"]\n    strict_id: false\nmanage_etc_hosts: localhost\nwarnings:\n  dsid_missing_source: off\n",
            ),
            (2, "MODE", "0600"),
            (2, "DIRMODE", "0700"),
            (2, "UID", "0"),
            (3, "MODE", "0644"),
        ],
    });
}

const PLAYGROUND_COMMON: [Expect; 7] = [
    a!(
        "stream ubuntu image",
        "quay.io/tinkerbell/actions/image2disk:latest",
        &["COMPRESSED", "DEST_DISK", "IMG_URL"],
    ),
    a!(
        "grow-partition",
        "quay.io/tinkerbell/actions/cexec:latest",
        CEXEC_SH,
    ),
    a!(
        "install openssl",
        "quay.io/tinkerbell/actions/cexec:latest",
        CEXEC_SH,
    ),
    a!(
        "create user",
        "quay.io/tinkerbell/actions/cexec:latest",
        CEXEC_SH,
    ),
    a!(
        "enable ssh",
        "quay.io/tinkerbell/actions/cexec:latest",
        CEXEC_SH,
    ),
    a!(
        "disable apparmor",
        "quay.io/tinkerbell/actions/cexec:latest",
        CEXEC_SH,
    ),
    a!(
        "write netplan",
        "quay.io/tinkerbell/actions/writefile:latest",
        WRITEFILE,
    ),
];

#[test]
fn playground_ubuntu_on_x86_64_kexecs() {
    const ACTIONS: &[Expect] = &{
        let [a0, a1, a2, a3, a4, a5, a6] = PLAYGROUND_COMMON;
        [
            a0,
            a1,
            a2,
            a3,
            a4,
            a5,
            a6,
            a!(
                "kexec into os",
                "ghcr.io/jacobweinstock/waitdaemon:latest",
                WAITDAEMON,
            ),
        ]
    };
    check(&Case {
        file: "playground-ubuntu.yaml",
        form: Form::Object,
        arch: "x86_64",
        data: &[],
        task_env: &[],
        actions: ACTIONS,
        foreign: &["ghcr.io/jacobweinstock/waitdaemon:latest"],
        values: &[
            (0, "DEST_DISK", "/dev/nvme0n1"),
            // Left for the playground's envsubst, before kubectl apply.
            (
                0,
                "IMG_URL",
                "http://$TINKERBELL_HOST_IP:7173/jammy-server-cloudimg-$TINKERBELL_CLIENT_PLATFORM.raw.gz",
            ),
            (1, "BLOCK_DEVICE", "/dev/nvme0n1p1"),
            (
                1,
                "CMD_LINE",
                "sleep 5 && growpart /dev/nvme0n1 1 && resize2fs /dev/nvme0n1p1",
            ),
            (6, "MODE", "0644"),
            (7, "IMAGE", "quay.io/tinkerbell/actions/kexec:latest"),
            (7, "WAIT_SECONDS", "5"),
        ],
    });
}

#[test]
fn playground_ubuntu_on_aarch64_reboots() {
    const ACTIONS: &[Expect] = &{
        let [a0, a1, a2, a3, a4, a5, a6] = PLAYGROUND_COMMON;
        [
            a0,
            a1,
            a2,
            a3,
            a4,
            a5,
            a6,
            a!(
                "reboot into os",
                "ghcr.io/jacobweinstock/waitdaemon:latest",
                WAITDAEMON,
            ),
        ]
    };
    let case = Case {
        file: "playground-ubuntu.yaml",
        form: Form::Object,
        arch: "aarch64",
        data: &[],
        task_env: &[],
        actions: ACTIONS,
        foreign: &["ghcr.io/jacobweinstock/waitdaemon:latest"],
        values: &[(7, "IMAGE", "alpine:latest")],
    };
    check(&case);
    let actions = render(&case).expect("render");
    assert_eq!(
        actions[7].args,
        [
            "sh",
            "-c",
            "echo 1 > /proc/sys/kernel/sysrq && echo b > /proc/sysrq-trigger"
        ]
    );
    assert_eq!(actions[7].pid_namespace.as_deref(), Some("host"));
}

#[test]
fn capt_quick_start_ubuntu_override() {
    check(&Case {
        file: "capt-quickstart-ubuntu.yaml",
        form: Form::CaptOverride,
        arch: "x86_64",
        data: &[],
        task_env: &[],
        actions: &[
            a!(
                "stream image",
                "quay.io/tinkerbell/actions/oci2disk",
                &["COMPRESSED", "DEST_DISK", "IMG_URL"],
            ),
            a!(
                "add tink cloud-init config",
                "quay.io/tinkerbell/actions/writefile",
                WRITEFILE,
            ),
            a!(
                "add tink cloud-init ds-config",
                "quay.io/tinkerbell/actions/writefile",
                WRITEFILE,
            ),
            a!(
                "kexec image",
                "ghcr.io/jacobweinstock/waitdaemon:latest",
                WAITDAEMON,
            ),
        ],
        foreign: &["ghcr.io/jacobweinstock/waitdaemon:latest"],
        values: &[
            (0, "DEST_DISK", "/dev/nvme0n1"),
            (
                0,
                "IMG_URL",
                "ghcr.io/tinkerbell/cluster-api-provider-tinkerbell/ubuntu:2404-v1.35.2-amd64.gz",
            ),
            (1, "DEST_DISK", "/dev/nvme0n1p3"),
            (1, "MODE", "0600"),
            (3, "BLOCK_DEVICE", "/dev/nvme0n1p1"),
            (3, "IMAGE", "quay.io/tinkerbell/actions/kexec"),
        ],
    });
}

#[test]
fn actions_grub2disk_readme_template() {
    check(&Case {
        file: "actions-grub2disk-readme.yaml",
        form: Form::Document,
        arch: "x86_64",
        data: &[],
        task_env: &[],
        actions: &[a!(
            "grub_2_disk",
            "quay.io/tinkerbell/actions/grub2disk:latest",
            &["FS_TYPE", "GRUB_DISK", "GRUB_INSTALL_PATH"],
        )],
        foreign: &[],
        values: &[(0, "GRUB_INSTALL_PATH", "/dev/sda")],
    });
}

fn readme(file: &'static str, actions: &'static [Expect]) -> Case {
    Case {
        file,
        form: Form::ActionsList,
        arch: "x86_64",
        data: &[],
        task_env: &[],
        actions,
        foreign: &[],
        values: &[],
    }
}

#[test]
fn actions_readme_examples() {
    const IMAGE2DISK: &[Expect] = &[a!(
        "stream ubuntu",
        "quay.io/tinkerbell/actions/image2disk:latest",
        &["COMPRESSED", "DEST_DISK", "IMG_URL"],
    )];
    const ARCHIVE: &str = "quay.io/tinkerbell/actions/archive2disk:latest";
    const CEXEC: &str = "quay.io/tinkerbell/actions/cexec:latest";
    let cases = [
        readme("actions-image2disk-readme-1.yaml", IMAGE2DISK),
        readme("actions-image2disk-readme-2.yaml", IMAGE2DISK),
        readme(
            "actions-qemuimg2disk-readme-1.yaml",
            &[a!(
                "stream ubuntu",
                "quay.io/tinkerbell/actions/qemuimg2disk:latest",
                &["DEST_DISK", "IMG_URL"],
            )],
        ),
        readme(
            "actions-archive2disk-readme-1.yaml",
            &[a!(
                "expand-ubuntu-filesystem-to-root",
                ARCHIVE,
                &[
                    "ARCHIVE_TYPE",
                    "ARCHIVE_URL",
                    "DEST_DISK",
                    "DEST_PATH",
                    "FS_TYPE",
                    "HTTP_CLIENT_TIMEOUT_MINUTES",
                    "TARFILE_CHECKSUM",
                ],
            )],
        ),
        readme(
            "actions-archive2disk-readme-2.yaml",
            &[a!(
                "expand-ubuntu-filesystem-to-root",
                ARCHIVE,
                &[
                    "ARCHIVE_TYPE",
                    "ARCHIVE_URL",
                    "DEST_DISK",
                    "DEST_PATH",
                    "FS_TYPE",
                    "TARFILE_CHECKSUM",
                ],
            )],
        ),
        readme(
            "actions-archive2disk-readme-3.yaml",
            &[a!(
                "expand-ubuntu-filesystem-to-root",
                ARCHIVE,
                &[
                    "ARCHIVE_TYPE",
                    "ARCHIVE_URL",
                    "DEST_DISK",
                    "DEST_PATH",
                    "FS_TYPE",
                    "INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION",
                ],
            )],
        ),
        readme(
            "actions-writefile-readme-1.yaml",
            &[a!(
                "expand ubuntu filesystem to root",
                "quay.io/tinkerbell/actions/writefile:latest",
                WRITEFILE,
            )],
        ),
        readme(
            "actions-cexec-readme-1.yaml",
            &[a!(
                "Install Grub",
                CEXEC,
                &["BLOCK_DEVICE", "CHROOT", "CMD_LINE", "FS_TYPE"],
            )],
        ),
        readme(
            "actions-cexec-readme-2.yaml",
            &[a!(
                "Update packages",
                CEXEC,
                &[
                    "BLOCK_DEVICE",
                    "CHROOT",
                    "CMD_LINE",
                    "DEBIAN_FRONTEND",
                    "DEFAULT_INTERPRETER",
                    "FS_TYPE",
                    "UPDATE_RESOLV_CONF",
                ],
            )],
        ),
        readme(
            "actions-kexec-readme-1.yaml",
            &[a!(
                "kexec ubuntu",
                "quay.io/tinkerbell/actions/kexec:latest",
                &[
                    "BLOCK_DEVICE",
                    "CMD_LINE",
                    "FS_TYPE",
                    "INITRD_PATH",
                    "KERNEL_PATH",
                ],
            )],
        ),
    ];
    for case in &cases {
        check(case);
    }
    // Values as written: a YAML bool or number keeps its text.
    let c = &cases[1];
    let actions = render(c).expect("render");
    assert_eq!(actions[0].env["COMPRESSED"], "true");
    let c = &cases[6];
    let actions = render(c).expect("render");
    assert_eq!(actions[0].env["MODE"], "0600");
    assert_eq!(actions[0].env["CONTENTS"], "hello-world");
}

#[test]
fn published_documents_that_are_not_valid_yaml_fail_as_in_tinkerbell() {
    let broken = |file| Case {
        file,
        form: Form::Document,
        arch: "x86_64",
        data: &[],
        task_env: &[],
        actions: &[],
        foreign: &[],
        values: &[],
    };
    // Tab indentation: YAML forbids tabs there (line 6 is the first, `\tworker:`); Go's YAML
    // parser, which Tinkerbell uses, fails with the same words.
    const TAB: &str = "found character that cannot start any token at line 6 column 1";
    check_invalid_yaml(&broken("tinkerbell-docs-ubuntu.yaml"), TAB);
    check_invalid_yaml(&broken("tinkerbell-docs-debian.yaml"), TAB);
    // `image:` indented under `- name:` (line 9 of the task the test wraps it in).
    let mut oci = broken("actions-oci2disk-readme-1.yaml");
    oci.form = Form::ActionsList;
    check_invalid_yaml(&oci, "did not find expected key");
}

/// Every fixture is used by a test above (a new fixture without expectations fails here).
#[test]
fn every_fixture_is_checked() {
    let this = include_str!("published_templates.rs");
    let mut files: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    assert!(files.len() >= 17, "{files:?}");
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !this.contains(&format!("\"{f}\"")))
        .collect();
    assert!(missing.is_empty(), "fixtures no test reads: {missing:?}");
}
