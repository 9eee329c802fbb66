//! `tinkctl template render`: a Template rendered against a Hardware and data, offline, with the
//! rendering code the controller uses (`tink_render`, pure), so what it prints is what
//! a Workflow's `status.actions` would hold. Errors name the file, line and column.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tink_api::v1alpha2::{Hardware, Template, Workflow, WorkflowSpec};
use tink_render::{self as render, RenderError};

/// `tinkctl template ...`.
#[derive(Subcommand, Debug)]
pub enum TemplateCommand {
    /// Render a Template file against a Hardware file and data; prints the rendered actions.
    Render(RenderArgs),
}

/// Arguments of `tinkctl template render`.
#[derive(Args, Debug, Clone)]
pub struct RenderArgs {
    /// The Template (YAML, `tinkerbell.org/v1alpha2`, or v1alpha1 as Tinkerbell publishes them).
    #[arg(long, short = 't')]
    pub template: PathBuf,
    /// The Hardware (YAML, `tinkerbell.org/v1alpha2`).
    #[arg(long)]
    pub hardware: PathBuf,
    /// A Workflow (YAML) whose name, namespace and `templateData` to use.
    #[arg(long)]
    pub workflow: Option<PathBuf>,
    /// A template data value, `key=value` (repeatable; a value that parses as JSON is used as
    /// JSON, e.g. `disks=["/dev/sda"]`; overrides the Workflow's templateData).
    #[arg(long = "data", value_name = "KEY=VALUE")]
    pub data: Vec<String>,
}

/// Runs a `template` subcommand.
pub fn run(cmd: TemplateCommand) -> anyhow::Result<()> {
    let TemplateCommand::Render(args) = cmd;
    let out = render_files(&args)?;
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(())
}

fn read<T: DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<(T, String)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value = serde_yaml::from_str::<T>(&text).map_err(|e| match e.location() {
        Some(l) => anyhow::anyhow!(
            "{}:{}:{}: not a {what}: {e}",
            path.display(),
            l.line(),
            l.column()
        ),
        None => anyhow::anyhow!("{}: not a {what}: {e}", path.display()),
    })?;
    Ok((value, text))
}

/// The `apiVersion` of a YAML document, when it has one.
fn api_version(text: &str) -> Option<String> {
    let doc: serde_yaml::Value = serde_yaml::from_str(text).ok()?;
    doc.get("apiVersion")?.as_str().map(str::to_owned)
}

/// Is the file a `tinkerbell.org/v1alpha1` object? Those are converted as the conversion
/// webhook converts them (a v1alpha1 Template's `spec.data` is rendered whole, as Tinkerbell
/// does), so published templates render without `tinkctl migrate` first.
fn is_v1alpha1(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| api_version(&t))
        .is_some_and(|v| v == "tinkerbell.org/v1alpha1")
}

/// Renders the files named in `args`; returns the actions as YAML.
pub fn render_files(args: &RenderArgs) -> anyhow::Result<String> {
    let (template, template_text) = if is_v1alpha1(&args.template) {
        let (old, text) = read::<tink_api::v1alpha1::Template>(&args.template, "Template")?;
        (tink_api::conversion::template_to_v1alpha2(&old), text)
    } else {
        read::<Template>(&args.template, "Template")?
    };
    let hardware = if is_v1alpha1(&args.hardware) {
        let (old, _) = read::<tink_api::v1alpha1::Hardware>(&args.hardware, "Hardware")?;
        tink_api::conversion::hardware_to_v1alpha2(&old)
    } else {
        read::<Hardware>(&args.hardware, "Hardware")?.0
    };
    let mut workflow = match &args.workflow {
        Some(p) => read::<Workflow>(p, "Workflow")?.0,
        None => {
            let mut w = Workflow::new("render", WorkflowSpec::default());
            w.metadata.namespace = hardware.metadata.namespace.clone();
            w
        }
    };
    for kv in &args.data {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--data {kv:?}: expected KEY=VALUE"))?;
        if k.is_empty() {
            bail!("--data {kv:?}: the key is empty");
        }
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        workflow.spec.template_data.insert(k.to_string(), value);
    }
    let data = render::template_data(&workflow, &hardware);
    match render::render_actions(&template.spec, &data) {
        Ok(actions) => Ok(serde_yaml::to_string(&actions)?),
        Err(e) => Err(anyhow::anyhow!(locate(
            &args.template,
            &template_text,
            &template.spec_strings(),
            &e
        ))),
    }
}

/// Where a render error is in the Template file: `FILE:LINE:COL: FIELD: MESSAGE` when the
/// failing string can be found in the file, `FILE: FIELD: MESSAGE` otherwise.
fn locate(
    path: &Path,
    text: &str,
    strings: &BTreeMap<String, String>,
    err: &RenderError,
) -> String {
    let RenderError::Field { field, message } = err;
    let plain = format!("{}: {field}: {message}", path.display());
    let Some((line, col)) = template_position(field, message) else {
        return plain;
    };
    let Some(source) = strings.get(field) else {
        return plain;
    };
    let Some(first) = source.lines().next().filter(|l| !l.trim().is_empty()) else {
        return plain;
    };
    let Some(at) = text.find(first) else {
        return plain;
    };
    let (file_line, file_col) = line_col(text, at);
    let (l, c) = if line == 1 {
        (file_line, file_col + col + 1)
    } else {
        // A block scalar: the template's next lines follow in the file, indented alike.
        (file_line + line - 1, file_col + col + 1)
    };
    format!("{}:{l}:{c}: {field}: {message}", path.display())
}

/// The template engine's `LINE:COL` after `template: FIELD:` (0-based column).
fn template_position(field: &str, message: &str) -> Option<(usize, usize)> {
    let rest = message
        .strip_prefix("template: ")?
        .strip_prefix(field)?
        .strip_prefix(':')?;
    let mut parts = rest.splitn(3, ':');
    let line = parts.next()?.parse().ok()?;
    let col = parts.next()?.parse().ok()?;
    Some((line, col))
}

/// 1-based line, 0-based byte column.
fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let before = &text[..pos];
    let line = 1 + before.matches('\n').count();
    let col = before.rfind('\n').map_or(pos, |nl| pos - nl - 1);
    (line, col)
}

/// The Template's strings by the field path the renderer names them with.
trait SpecStrings {
    fn spec_strings(&self) -> BTreeMap<String, String>;
}

impl SpecStrings for Template {
    fn spec_strings(&self) -> BTreeMap<String, String> {
        let spec = &self.spec;
        let mut m = BTreeMap::new();
        let mut list = |p: &str, items: &[String]| {
            for (i, s) in items.iter().enumerate() {
                m.insert(format!("{p}[{i}]"), s.clone());
            }
        };
        list("spec.volumes", &spec.volumes);
        for (i, a) in spec.actions.iter().enumerate() {
            list(&format!("spec.actions[{i}].args"), &a.args);
            list(&format!("spec.actions[{i}].volumes"), &a.volumes);
        }
        for (i, a) in spec.actions.iter().enumerate() {
            let p = format!("spec.actions[{i}]");
            m.insert(format!("{p}.image"), a.image.clone());
            if let Some(c) = &a.cmd {
                m.insert(format!("{p}.cmd"), c.clone());
            }
            if let Some(n) = &a.network_namespace {
                m.insert(format!("{p}.networkNamespace"), n.clone());
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HARDWARE: &str = "apiVersion: tinkerbell.org/v1alpha2\nkind: Hardware\nmetadata: {name: m1, namespace: n}\nspec:\n  storageDevices: [/dev/nvme0n1]\n";

    fn files(template: &str) -> (tempfile::TempDir, RenderArgs) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("t.yaml"), template).expect("write");
        std::fs::write(dir.path().join("h.yaml"), HARDWARE).expect("write");
        let args = RenderArgs {
            template: dir.path().join("t.yaml"),
            hardware: dir.path().join("h.yaml"),
            workflow: None,
            data: vec!["image=http://img/ubuntu.raw".into()],
        };
        (dir, args)
    }

    #[test]
    fn renders_actions_with_hardware_and_data() {
        let (_d, args) = files(
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nmetadata: {name: t}\nspec:\n  actions:\n    - name: write\n      image: busybox\n      args: [\"{{ .image }} to {{ index .Hardware.Disks 0 }} on {{ .Hardware.Name }}\"]\n",
        );
        let out = render_files(&args).expect("render");
        assert!(
            out.contains("http://img/ubuntu.raw to /dev/nvme0n1 on m1"),
            "{out}"
        );
    }

    #[test]
    fn a_render_error_names_the_file_line_and_column() {
        let (_d, args) = files(
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nmetadata: {name: t}\nspec:\n  actions:\n    - name: write\n      image: busybox\n      args:\n        - \"ok {{ .missing }}\"\n",
        );
        let err = render_files(&args).expect_err("missing key").to_string();
        let want = format!(
            "{}:9:18: spec.actions[0].args[0]: template:",
            args.template.display()
        );
        assert!(err.starts_with(&want), "{err}\nwanted prefix {want}");
        assert!(err.contains("missing"), "{err}");
    }

    #[test]
    fn a_bad_yaml_file_names_line_and_column() {
        let (_d, args) =
            files("apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nspec:\n  actions: {\n");
        let err = render_files(&args).expect_err("bad yaml").to_string();
        assert!(err.contains("t.yaml:"), "{err}");
        assert!(err.contains("not a Template"), "{err}");
    }

    #[test]
    fn renders_a_v1alpha1_template_and_hardware_as_tinkerbell_publishes_them() {
        let dir = tempfile::tempdir().unwrap();
        let template = dir.path().join("t.yaml");
        std::fs::write(
            &template,
            "apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: t}\nspec:\n  data: |\n    version: \"0.1\"\n    name: t\n    global_timeout: 600\n    tasks:\n      - name: os\n        worker: \"{{.device_1}}\"\n        actions:\n        {{- range $i, $d := .Hardware.Disks }}\n          - name: wipe-{{ $i }}\n            image: quay.io/tinkerbell/actions/image2disk:latest\n            timeout: 60\n            environment:\n              DEST_DISK: {{ $d }}\n        {{- end }}\n",
        )
        .unwrap();
        let hardware = dir.path().join("h.yaml");
        std::fs::write(
            &hardware,
            "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: h}\nspec:\n  disks: [{device: /dev/sda}, {device: /dev/nvme0n1}]\n  interfaces:\n    - dhcp: {mac: \"3c:ec:ef:4c:4f:54\", arch: x86_64}\n",
        )
        .unwrap();
        let out = render_files(&RenderArgs {
            template,
            hardware,
            workflow: None,
            data: vec!["device_1=3c:ec:ef:4c:4f:54".into()],
        })
        .unwrap();
        assert!(out.contains("name: wipe-0"), "{out}");
        assert!(out.contains("DEST_DISK: /dev/sda"), "{out}");
        assert!(out.contains("DEST_DISK: /dev/nvme0n1"), "{out}");
    }

    #[test]
    fn data_must_be_key_value() {
        let (_d, mut args) = files(
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nmetadata: {name: t}\nspec: {actions: [{name: a, image: b}]}\n",
        );
        args.data = vec!["novalue".into()];
        let err = render_files(&args).expect_err("bad data").to_string();
        assert!(err.contains("expected KEY=VALUE"), "{err}");
    }
}
