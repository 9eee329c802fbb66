//! Rendering a Template for one Workflow (pure): the template data and the rendered actions.
//!
//! # Template data
//!
//! | key | value |
//! |---|---|
//! | `.Hardware` | the Hardware, shaped as Tinkerbell templates expect (below) |
//! | `.<key>` | every `spec.templateData` key of the Workflow, at the top level (`{{ .device_1 }}`) |
//! | `.Workflow` | addition: `{Name, Namespace}` of the Workflow |
//!
//! `Hardware` and `Workflow` are reserved: a `templateData` key with either name is shadowed.
//!
//! `.Hardware` is the v1alpha1 view Tinkerbell templates read (`Interfaces[].DHCP.MAC`,
//! `.Arch`, `.UEFI`, `Metadata.Instance...`, `Disks`, lower-case aliases), built in
//! `hardware.rs`; every key is documented in docs/templates.md.
//!
//! # What is rendered
//!
//! Every TemplateSpec string except action names: each action's `image`, `cmd`, `args`, `env`
//! keys and values, `volumes`, `networkNamespace` and `pidNamespace`, and the Template-level `env`
//! and `volumes`. Each string is its own Go template (Tinkerbell's `missingkey=error`, output
//! capped at 256 KiB); a string without `{{` is kept as is. The Template-level `env` and
//! `volumes` are then merged into every action (an action's own variable, or its own volume
//! with the same container path, takes precedence, as seeds/000 says), so `status.actions`
//! holds everything the agent needs. (`timeout` is a typed duration the CRD validates, not a
//! template.) A Template with `v1alpha1Data` (converted from a v1alpha1 Template whose actions
//! depend on the data) is rendered whole and its rendered document parsed, as Tinkerbell does.
//!
//! # Who uses it
//!
//! The controller renders with it when it prepares a Workflow; the console's template preview
//! and `tinkctl template render` call the same functions, so what they show is what the
//! controller writes. It is a library crate of its own so none of them depends on another
//! service (the controller re-exports it as `tink_controller::render`).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tink_api::v1alpha2::{Action, Hardware, TemplateSpec, Workflow};
use tink_template::{RenderOptions, Template};

mod hardware;
pub use hardware::hardware_data;

/// A Template did not render for a Workflow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A field's template did not parse or execute; `field` is its path in the Template.
    #[error("{field}: {message}")]
    Field {
        /// The path, e.g. `spec.actions[1].args[0]`.
        field: String,
        /// The template engine's message (with line and column).
        message: String,
    },
}

/// The data a Template is rendered with (see the module documentation).
pub fn template_data(workflow: &Workflow, hardware: &Hardware) -> Value {
    let mut data = Map::new();
    for (k, v) in &workflow.spec.template_data {
        data.insert(k.clone(), v.clone());
    }
    data.insert("Hardware".into(), hardware_data(hardware));
    data.insert(
        "Workflow".into(),
        json!({
            "Name": workflow.metadata.name.clone().unwrap_or_default(),
            "Namespace": workflow.metadata.namespace.clone().unwrap_or_default(),
        }),
    );
    Value::Object(data)
}

/// Renders every templated field of `template` with `data` and returns the actions, in order,
/// with the Template-level `env` and `volumes` merged in.
pub fn render_actions(template: &TemplateSpec, data: &Value) -> Result<Vec<Action>, RenderError> {
    let opts = RenderOptions::tinkerbell();
    if let Some(text) = &template.v1alpha1_data {
        // A converted Tinkerbell template whose structure depends on the data: rendered whole,
        // then parsed, as Tinkerbell does; its fields are final (not rendered a second time).
        let field = "spec.v1alpha1Data";
        let err = |message: String| RenderError::Field {
            field: field.to_string(),
            message,
        };
        let rendered = Template::parse(field, text)
            .map_err(|e| err(e.to_string()))?
            .render(data, &opts)
            .map_err(|e| err(e.to_string()))?;
        let doc = tink_api::v1alpha1::TemplateDoc::parse(&rendered)
            .map_err(|e| err(format!("the rendered document: {e}")))?;
        let spec = tink_api::conversion::v1alpha1_document_spec(&doc);
        let plain = Renderer {
            data,
            opts,
            verbatim: true,
        };
        return plain.actions(&spec);
    }
    Renderer {
        data,
        opts,
        verbatim: false,
    }
    .actions(template)
}

impl Renderer<'_> {
    fn actions(&self, template: &TemplateSpec) -> Result<Vec<Action>, RenderError> {
        let r = self;
        let global_env = r.map("spec.env", &template.env)?;
        let global_volumes = r.list("spec.volumes", &template.volumes)?;
        let mut actions = Vec::with_capacity(template.actions.len());
        for (i, a) in template.actions.iter().enumerate() {
            let p = format!("spec.actions[{i}]");
            let mut env = r.map(&format!("{p}.env"), &a.env)?;
            for (k, v) in &global_env {
                env.entry(k.clone()).or_insert_with(|| v.clone());
            }
            let mut volumes = r.list(&format!("{p}.volumes"), &a.volumes)?;
            let own: Vec<String> = volumes.iter().map(|v| volume_target(v)).collect();
            for v in &global_volumes {
                if !own.contains(&volume_target(v)) {
                    volumes.push(v.clone());
                }
            }
            actions.push(Action {
                name: a.name.clone(),
                image: r.one(&format!("{p}.image"), &a.image)?,
                cmd: r.opt(&format!("{p}.cmd"), a.cmd.as_deref())?,
                args: r.list(&format!("{p}.args"), &a.args)?,
                env,
                volumes,
                network_namespace: r.opt(
                    &format!("{p}.networkNamespace"),
                    a.network_namespace.as_deref(),
                )?,
                pid_namespace: r.opt(&format!("{p}.pidNamespace"), a.pid_namespace.as_deref())?,
                // A typed duration (the CRD validates its syntax), not a template.
                timeout: a.timeout.clone(),
            });
        }
        if actions.is_empty() {
            return Err(RenderError::Field {
                field: "spec.actions".into(),
                message: "the Template has no actions".into(),
            });
        }
        Ok(actions)
    }
}

/// The container path of a volume (`src:dst[:opts]`), or the whole text when it has no `:`.
fn volume_target(volume: &str) -> String {
    let mut parts = volume.split(':');
    let first = parts.next().unwrap_or_default();
    parts.next().unwrap_or(first).to_string()
}

struct Renderer<'a> {
    data: &'a Value,
    opts: RenderOptions,
    /// Fields are already rendered (a rendered v1alpha1 document): kept as they are.
    verbatim: bool,
}

impl Renderer<'_> {
    fn one(&self, field: &str, text: &str) -> Result<String, RenderError> {
        if self.verbatim || !text.contains("{{") {
            return Ok(text.to_string());
        }
        let err = |message: String| RenderError::Field {
            field: field.to_string(),
            message,
        };
        let t = Template::parse(field, text).map_err(|e| err(e.to_string()))?;
        t.render(self.data, &self.opts)
            .map_err(|e| err(e.to_string()))
    }

    fn opt(&self, field: &str, text: Option<&str>) -> Result<Option<String>, RenderError> {
        text.map(|t| self.one(field, t))
            .transpose()
            .map(|o| o.filter(|s| !s.is_empty()))
    }

    fn list(&self, field: &str, items: &[String]) -> Result<Vec<String>, RenderError> {
        items
            .iter()
            .enumerate()
            .map(|(i, s)| self.one(&format!("{field}[{i}]"), s))
            .collect()
    }

    fn map(
        &self,
        field: &str,
        items: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, RenderError> {
        items
            .iter()
            .map(|(k, v)| {
                let key = self.one(&format!("{field}[{k:?}] (key)"), k)?;
                let value = self.one(&format!("{field}.{k}"), v)?;
                Ok((key, value))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
