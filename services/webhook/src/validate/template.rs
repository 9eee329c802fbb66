//! Template: every templated field parses as a Go template (the message gives the line and
//! column), images are valid references, volumes are `src:dst[:ro|rw]` and environment names
//! are valid. A field holding `{{` is only checked for template syntax: its value is known after
//! rendering.
//!
//! A v1alpha1 Template's `spec.data` is one Go template (Tinkerbell renders the whole text);
//! its syntax is checked as a whole, then its actions (through crates/api's conversion) are
//! checked like v1alpha2 ones, with paths that name the action in `spec.data`.

use std::collections::BTreeMap;

use serde_json::Value;
use tink_api::v1alpha2::TemplateSpec;

use super::{Reason, Request, Verdict, as_v1alpha2, deny_parse, formats, is_v1alpha1};

/// Checks a Template create or update.
pub fn validate(req: &Request<'_>, v: &mut Verdict) {
    let obj = req.object;
    if is_v1alpha1(obj) {
        let Some(data) = obj.pointer("/spec/data").and_then(Value::as_str) else {
            return;
        };
        if let Err(message) = syntax("spec.data", data) {
            v.deny("spec.data", Reason::Invalid, message);
            return;
        }
        // Data that only parses after rendering converts to no actions: nothing more to check.
        let Ok(converted) = as_v1alpha2(obj) else {
            return;
        };
        let Some(spec) = spec_of(&converted, v) else {
            return;
        };
        let names = spec.actions.iter().map(|a| a.name.clone()).collect();
        check_spec(&spec, &Paths::V1alpha1 { names }, v);
    } else if let Some(spec) = spec_of(obj, v) {
        check_spec(&spec, &Paths::V1alpha2, v);
    }
}

fn spec_of(obj: &Value, v: &mut Verdict) -> Option<TemplateSpec> {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    match tink_api::from_value::<TemplateSpec>(spec) {
        Ok(s) => Some(s),
        Err(mut e) => {
            e.path = format!("spec.{}", e.path.trim_start_matches('.'));
            deny_parse(v, "Template", &e);
            None
        }
    }
}

/// Parses `text` as a Go template; the error gives line and column (1-based) and the parser's
/// message.
pub fn syntax(field: &str, text: &str) -> Result<(), String> {
    match tink_template::Template::parse(field, text) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "Go template syntax error at line {}, column {}: {}; the field must parse as a Go text/template with Tinkerbell's functions (Sprig, formatPartition, ...)",
            e.line,
            e.col + 1,
            e.message
        )),
    }
}

/// How field paths are written.
enum Paths {
    V1alpha2,
    /// Actions named from the converted `spec.data`.
    V1alpha1 {
        names: Vec<String>,
    },
}

impl Paths {
    fn action(&self, i: usize, field: &str) -> String {
        match self {
            Self::V1alpha2 => format!("spec.actions[{i}].{field}"),
            Self::V1alpha1 { names } => {
                let v1_field = if let Some(rest) = field.strip_prefix("args") {
                    format!("command{rest}")
                } else if let Some(rest) = field.strip_prefix("env") {
                    format!("environment{rest}")
                } else {
                    field.to_string()
                };
                let name = names.get(i).map(String::as_str).unwrap_or_default();
                format!("spec.data (action {name:?}).{v1_field}")
            }
        }
    }

    fn global(&self, field: &str) -> String {
        match self {
            Self::V1alpha2 => format!("spec.{field}"),
            Self::V1alpha1 { .. } => {
                let v1_field = if let Some(rest) = field.strip_prefix("env") {
                    format!("environment{rest}")
                } else {
                    field.to_string()
                };
                format!("spec.data (task).{v1_field}")
            }
        }
    }

    fn check_syntax(&self) -> bool {
        // v1alpha1 data was parsed whole; its pieces are not templates of their own.
        matches!(self, Self::V1alpha2)
    }
}

/// A format check of a plain (untemplated) value.
type Format = fn(&str) -> Result<(), String>;

fn templated(text: &str) -> bool {
    text.contains("{{")
}

struct Checker<'a> {
    paths: &'a Paths,
    v: &'a mut Verdict,
}

impl Checker<'_> {
    /// A templated value: syntax only. Otherwise `format`.
    fn field(&mut self, path: String, text: &str, format: Option<Format>) {
        if templated(text) {
            if self.paths.check_syntax()
                && let Err(m) = syntax(&path, text)
            {
                self.v.deny(path, Reason::Invalid, m);
            }
        } else if let Some(f) = format
            && let Err(m) = f(text)
        {
            self.v.deny(path, Reason::Invalid, m);
        }
    }

    fn env(&mut self, path: impl Fn(&str) -> String, env: &BTreeMap<String, String>) {
        for (k, val) in env {
            self.field(path(&format!("[{k}]")), k, Some(formats::env_name));
            self.field(path(&format!("[{k}]")), val, None);
        }
    }
}

fn check_spec(spec: &TemplateSpec, paths: &Paths, v: &mut Verdict) {
    let mut c = Checker { paths, v };
    for (i, a) in spec.actions.iter().enumerate() {
        c.field(
            paths.action(i, "image"),
            &a.image,
            Some(formats::image_reference),
        );
        if let Some(cmd) = &a.cmd {
            c.field(paths.action(i, "cmd"), cmd, None);
        }
        for (j, arg) in a.args.iter().enumerate() {
            c.field(paths.action(i, &format!("args[{j}]")), arg, None);
        }
        c.env(|k| paths.action(i, &format!("env{k}")), &a.env);
        for (j, vol) in a.volumes.iter().enumerate() {
            c.field(
                paths.action(i, &format!("volumes[{j}]")),
                vol,
                Some(formats::volume),
            );
        }
        if let Some(ns) = &a.network_namespace {
            c.field(paths.action(i, "networkNamespace"), ns, None);
        }
    }
    c.env(|k| paths.global(&format!("env{k}")), &spec.env);
    for (j, vol) in spec.volumes.iter().enumerate() {
        c.field(
            paths.global(&format!("volumes[{j}]")),
            vol,
            Some(formats::volume),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Operation;
    use serde_json::json;

    fn check(obj: &Value) -> Verdict {
        let mut v = Verdict::default();
        let req = Request {
            operation: Operation::Create,
            namespace: "ns",
            name: "t",
            object: obj,
            old: None,
        };
        validate(&req, &mut v);
        v
    }

    fn v2(spec: Value) -> Value {
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
            "metadata": {"name": "t", "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn a_good_template_passes() {
        let v = check(&v2(json!({
            "actions": [{
                "name": "stream",
                "image": "quay.io/tinkerbell/actions/image2disk:v1.0.0",
                "args": ["--dest", "{{ index .Hardware.Disks 0 }}"],
                "env": {"DEST_DISK": "{{ formatPartition (index .Hardware.Disks 0) 1 }}", "{{ .key }}": "x"},
                "volumes": ["/dev:/dev", "/var/run/docker.sock:/var/run/docker.sock:ro", "{{ .vol }}"],
                "networkNamespace": "{{ if .host }}host{{ end }}",
            }, {"name": "templated-image", "image": "{{ .registry }}/reboot:{{ .tag }}"}],
            "env": {"PROXY": "http://proxy"},
            "volumes": ["/statedir:/statedir:rw"],
        })));
        assert!(v.allowed(), "{v:?}");
    }

    #[test]
    fn syntax_errors_give_line_and_column() {
        let v = check(&v2(json!({
            "actions": [{"name": "a", "image": "alpine", "args": ["ok", "line1\n  {{ .Hardware.Disks"]}],
        })));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        let x = &v.violations[0];
        assert_eq!(x.field, "spec.actions[0].args[1]");
        assert!(
            x.message
                .starts_with("Go template syntax error at line 2, column "),
            "{}",
            x.message
        );
        let v = check(&v2(
            json!({"actions": [{"name": "a", "image": "alpine", "cmd": "{{ nosuchfunc 1 }}"}]}),
        ));
        assert!(
            v.violations[0]
                .message
                .contains("\"nosuchfunc\" not defined"),
            "{v:?}"
        );
        assert_eq!(v.violations[0].field, "spec.actions[0].cmd");
    }

    #[test]
    fn formats_of_plain_fields() {
        let v = check(&v2(json!({
            "actions": [{"name": "a", "image": "Alpine:Latest", "env": {"1BAD": "x", "GOOD": "{{ end }}"},
                "volumes": ["/dev"]}],
            "env": {"A B": "x"},
            "volumes": ["/a:/b:z"],
        })));
        let fields: Vec<_> = v.violations.iter().map(|x| x.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.actions[0].image",
                "spec.actions[0].env[1BAD]",
                "spec.actions[0].env[GOOD]",
                "spec.actions[0].volumes[0]",
                "spec.env[A B]",
                "spec.volumes[0]",
            ]
        );
        assert!(v.violations[0].message.contains("lower-case"));
        assert!(
            v.violations[2].message.contains("syntax error"),
            "{:?}",
            v.violations[2]
        );
    }

    #[test]
    fn v1alpha1_data_is_one_template() {
        let data = "version: \"0.1\"\nname: t\nglobal_timeout: 60\ntasks:\n- name: os\n  worker: \"{{.device_1}}\"\n  actions:\n  - name: stream\n    image: \"{{ .image \"\n    timeout: 60\n";
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
            "metadata": {"name": "t", "namespace": "ns"}, "spec": {"data": data}});
        let v = check(&obj);
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert_eq!(v.violations[0].field, "spec.data");
        assert!(
            v.violations[0].message.contains("line 9, column "),
            "{}",
            v.violations[0].message
        );

        let data = "version: \"0.1\"\nname: t\nglobal_timeout: 60\ntasks:\n- name: os\n  worker: \"{{.device_1}}\"\n  volumes: [\"/dev\"]\n  actions:\n  - name: stream\n    image: quay.io/X\n    timeout: 60\n    environment:\n      \"BAD NAME\": x\n";
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
            "metadata": {"name": "t", "namespace": "ns"}, "spec": {"data": data}});
        let v = check(&obj);
        let fields: Vec<_> = v.violations.iter().map(|x| x.field.as_str()).collect();
        assert!(
            fields.contains(&"spec.data (action \"stream\").image"),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"spec.data (action \"stream\").environment[BAD NAME]"),
            "{fields:?}"
        );
        assert!(
            fields.iter().any(|f| f.contains("volumes[")),
            "the task volume moves into the action or stays global: {fields:?}"
        );
    }

    #[test]
    fn data_that_only_parses_after_rendering_is_syntax_checked_only() {
        let data = "version: \"0.1\"\nname: t\ntasks:\n- name: os\n  worker: \"{{.device_1}}\"\n  actions:\n{{- range .images }}\n  - name: {{ . }}\n    image: {{ . }}\n{{- end }}\n";
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
            "metadata": {"name": "t", "namespace": "ns"}, "spec": {"data": data}});
        assert!(check(&obj).allowed());
    }
}
