//! v1alpha1 `Template` and the YAML document of its `spec.data`.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Extra;
use crate::serde_util::{lenient_string, lenient_string_map, lenient_string_vec, null_as_default};

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// TemplateSpec defines the desired state of Template: `data` is the YAML document described by
/// [`TemplateDoc`], a Go `text/template` rendered before it is parsed.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha1",
    kind = "Template",
    plural = "templates",
    singular = "template",
    namespaced,
    shortname = "tpl",
    category = "tinkerbell",
    status = "TemplateStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Template is the Schema for the Templates API (Tinkerbell v1alpha1).",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct TemplateSpec {
    /// The template: a YAML document (see [`TemplateDoc`]) with Go template expressions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// TemplateStatus defines the observed state of Template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TemplateStatus {
    /// State (`Ready`, `Error`); unused by Tinkerbell.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The YAML document of a v1alpha1 Template's `spec.data`:
/// `version`, `name`, `global_timeout`, `tasks[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TemplateDoc {
    /// Template format version, `"0.1"`.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "lenient_string"
    )]
    pub version: String,
    /// Template name.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "lenient_string"
    )]
    pub name: String,
    /// Template id (historical).
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "lenient_string"
    )]
    pub id: String,
    /// Timeout of the whole workflow, in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub global_timeout: i64,
    /// Tasks, each run by one worker.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tasks: Vec<TemplateTask>,
    /// Keys this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A task: actions run by one worker.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TemplateTask {
    /// Task name.
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: String,
    /// The worker (agent) that runs the task, usually `{{.device_1}}` from the Workflow's
    /// `hardwareMap`.
    #[serde(default, deserialize_with = "lenient_string")]
    pub worker: String,
    /// Volumes mounted into every action of the task.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient_string_vec"
    )]
    pub volumes: Vec<String>,
    /// Environment of every action of the task.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "lenient_string_map"
    )]
    pub environment: BTreeMap<String, String>,
    /// The actions, run in order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub actions: Vec<TemplateAction>,
    /// Keys this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// An action: one container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TemplateAction {
    /// Action name.
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: String,
    /// OCI image.
    #[serde(default, deserialize_with = "lenient_string")]
    pub image: String,
    /// Timeout in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout: i64,
    /// The container command (Docker `Cmd`: arguments to the image's entrypoint).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient_string_vec"
    )]
    pub command: Vec<String>,
    /// Historical: command to run on timeout.
    #[serde(
        default,
        rename = "on-timeout",
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient_string_vec"
    )]
    pub on_timeout: Vec<String>,
    /// Historical: command to run on failure.
    #[serde(
        default,
        rename = "on-failure",
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient_string_vec"
    )]
    pub on_failure: Vec<String>,
    /// Volumes of the container.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient_string_vec"
    )]
    pub volumes: Vec<String>,
    /// Environment of the container.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "lenient_string_map"
    )]
    pub environment: BTreeMap<String, String>,
    /// PID namespace (`host`).
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "lenient_string"
    )]
    pub pid: String,
    /// Keys this version does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Why a template document did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateDocError {
    /// The YAML does not have the template shape.
    #[error("template data: {path}: {message}")]
    Yaml {
        /// Field path inside the document.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// The template uses control structures (`if`, `range`, ...) that generate YAML structure,
    /// so it has no typed form before rendering.
    #[error(
        "template data uses the control structure {expression:?}; it can only be parsed after rendering"
    )]
    ControlStructure {
        /// The expression.
        expression: String,
    },
    /// A `{{` without its closing `}}`.
    #[error("template data has an unterminated expression at byte {offset}")]
    Unterminated {
        /// Byte offset of the `{{`.
        offset: usize,
    },
}

const CONTROL_KEYWORDS: [&str; 10] = [
    "if", "range", "with", "else", "end", "define", "template", "block", "break", "continue",
];

/// Private-use code points delimit placeholders, so they cannot clash with template text.
const PH_OPEN: char = '\u{E000}';
const PH_CLOSE: char = '\u{E001}';

impl TemplateDoc {
    /// Parses the (unrendered) template document.
    ///
    /// Plain YAML is parsed as is. When that fails and the text holds `{{ ... }}` expressions
    /// outside quotes (as in `DEST_DISK: {{ index .Hardware.Disks 0 }}`, common in Tinkerbell
    /// templates), each expression is parsed as the plain scalar it renders to and kept verbatim
    /// in the resulting strings: the same result as rendering first, with the expressions left
    /// for the v1alpha2 renderer. Control structures (`{{ if }}`, `{{ range }}`, ...) that
    /// generate YAML structure are refused.
    pub fn parse(data: &str) -> Result<Self, TemplateDocError> {
        let direct = parse_yaml(data);
        let Err(direct_err) = direct else {
            return direct;
        };
        if !data.contains("{{") {
            return Err(direct_err);
        }
        let (masked, exprs) = mask_expressions(data)?;
        let doc = parse_yaml(&masked).map_err(|_| direct_err)?;
        let mut json = serde_json::to_value(&doc).map_err(|e| TemplateDocError::Yaml {
            path: ".".into(),
            message: e.to_string(),
        })?;
        unmask(&mut json, &exprs);
        serde_json::from_value(json).map_err(|e| TemplateDocError::Yaml {
            path: ".".into(),
            message: e.to_string(),
        })
    }

    /// Writes the document as YAML (strings are quoted where YAML needs it, so the result
    /// parses back to the same document).
    pub fn to_yaml(&self) -> String {
        // Serializing plain data (strings, numbers, maps, JSON values) to YAML cannot fail.
        serde_yaml::to_string(self).unwrap_or_default()
    }

    /// All actions of all tasks, in order.
    pub fn actions(&self) -> impl Iterator<Item = &TemplateAction> {
        self.tasks.iter().flat_map(|t| t.actions.iter())
    }
}

fn parse_yaml(data: &str) -> Result<TemplateDoc, TemplateDocError> {
    let de = serde_yaml::Deserializer::from_str(data);
    serde_path_to_error::deserialize(de).map_err(|e| TemplateDocError::Yaml {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

fn mask_expressions(data: &str) -> Result<(String, Vec<String>), TemplateDocError> {
    let mut out = String::with_capacity(data.len());
    let mut exprs = Vec::new();
    let mut rest = data;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start..].find("}}") else {
            return Err(TemplateDocError::Unterminated {
                offset: offset + start,
            });
        };
        let expr = &rest[start..start + len + 2];
        let inner = expr[2..expr.len() - 2].trim_start_matches('-').trim_start();
        let word = inner
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or("");
        if CONTROL_KEYWORDS.contains(&word) {
            return Err(TemplateDocError::ControlStructure {
                expression: expr.to_string(),
            });
        }
        out.push_str(&rest[..start]);
        out.push(PH_OPEN);
        out.push_str(&exprs.len().to_string());
        out.push(PH_CLOSE);
        exprs.push(expr.to_string());
        offset += start + len + 2;
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    Ok((out, exprs))
}

fn unmask_str(s: &str, exprs: &[String]) -> String {
    if !s.contains(PH_OPEN) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find(PH_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + PH_OPEN.len_utf8()..];
        match after.find(PH_CLOSE) {
            Some(end) => {
                match after[..end]
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| exprs.get(i))
                {
                    Some(expr) => out.push_str(expr),
                    None => out.push_str(
                        &rest[start..start + PH_OPEN.len_utf8() + end + PH_CLOSE.len_utf8()],
                    ),
                }
                rest = &after[end + PH_CLOSE.len_utf8()..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn unmask(v: &mut serde_json::Value, exprs: &[String]) {
    match v {
        serde_json::Value::String(s) => *s = unmask_str(s, exprs),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|i| unmask(i, exprs)),
        serde_json::Value::Object(map) => {
            let entries = std::mem::take(map);
            for (k, mut val) in entries {
                unmask(&mut val, exprs);
                map.insert(unmask_str(&k, exprs), val);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_unquoted_expressions() {
        let data = "version: \"0.1\"\nname: t\nglobal_timeout: 1800\ntasks:\n  - name: os\n    worker: \"{{.device_1}}\"\n    actions:\n      - name: stream\n        image: img\n        timeout: 600\n        environment:\n          DEST_DISK: {{ index .Hardware.Disks 0 }}\n          PART: {{ formatPartition ( index .Hardware.Disks 0 ) 1 }}\n          COMPRESSED: true\n";
        let doc = TemplateDoc::parse(data).unwrap();
        let env = &doc.tasks[0].actions[0].environment;
        assert_eq!(env["DEST_DISK"], "{{ index .Hardware.Disks 0 }}");
        assert_eq!(
            env["PART"],
            "{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"
        );
        assert_eq!(env["COMPRESSED"], "true");
        assert_eq!(doc.tasks[0].worker, "{{.device_1}}");
        assert_eq!(doc.global_timeout, 1800);
        let again = TemplateDoc::parse(&doc.to_yaml()).unwrap();
        assert_eq!(again, doc);
    }

    #[test]
    fn refuses_control_structures() {
        let data = "tasks:\n{{- range .tasks }}\n  - name: x\n{{ end }}\n";
        assert!(matches!(
            TemplateDoc::parse(data),
            Err(TemplateDocError::ControlStructure { .. })
        ));
    }

    #[test]
    fn errors_name_the_path() {
        let err = TemplateDoc::parse(
            "tasks:\n  - name: a\n    actions:\n      - name: b\n        timeout: soon\n",
        )
        .unwrap_err();
        match err {
            TemplateDocError::Yaml { path, .. } => assert_eq!(path, "tasks[0].actions[0].timeout"),
            other => panic!("unexpected {other:?}"),
        }
    }
}
