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
//! `.Hardware` holds:
//! - `Disks`: `spec.storageDevices` (what Tinkerbell templates use, `{{ index .Hardware.Disks 0 }}`);
//! - `StorageDevices`: the same list under its v1alpha2 name;
//! - `Interfaces`: one entry per `spec.networkInterfaces` key (sorted by MAC) in Tinkerbell's
//!   v1alpha1 shape: `{DHCP: {MAC, Hostname, IP: {Address, Netmask, Gateway}, NameServers,
//!   TimeServers, VLANID, LeaseTime}, Netboot: {AllowPXE, AllowWorkflow}, DisableDHCP}`;
//! - `UserData`, `VendorData`: `spec.instance.userdata` / `vendordata` (empty when unset);
//! - `Name`, `Namespace`, `Labels`, `Annotations`: from the Hardware's metadata;
//! - `Spec`: the raw v1alpha2 `spec` as JSON (camelCase keys), for anything else.
//!
//! # What is rendered
//!
//! Every TemplateSpec string except action names: each action's `image`, `cmd`, `args`, `env`
//! keys and values, `volumes` and `networkNamespace`, and the Template-level `env`
//! and `volumes`. Each string is its own Go template (Tinkerbell's `missingkey=error`, output
//! capped at 256 KiB); a string without `{{` is kept as is. The Template-level `env` and
//! `volumes` are then merged into every action (an action's own variable, or its own volume
//! with the same container path, takes precedence, as seeds/000 says), so `status.actions`
//! holds everything the agent needs. (`timeout` is a typed duration the CRD validates, not a
//! template.)

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tink_api::v1alpha2::{Action, Hardware, TemplateSpec, Workflow};
use tink_template::{RenderOptions, Template};

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

/// `.Hardware`.
pub fn hardware_data(hardware: &Hardware) -> Value {
    let spec = &hardware.spec;
    let interfaces: Vec<Value> = spec
        .network_interfaces
        .iter()
        .map(|(mac, nic)| {
            let dhcp = nic.dhcp.clone().unwrap_or_default();
            json!({
                "DHCP": {
                    "MAC": mac,
                    "Hostname": dhcp.hostname.unwrap_or_default(),
                    "IP": {
                        "Address": dhcp.ip.unwrap_or_default(),
                        "Netmask": dhcp.netmask.unwrap_or_default(),
                        "Gateway": dhcp.gateway.unwrap_or_default(),
                    },
                    "NameServers": dhcp.nameservers,
                    "TimeServers": dhcp.timeservers,
                    "VLANID": dhcp.vlan_id.unwrap_or_default(),
                    "LeaseTime": dhcp.lease_time,
                },
                "Netboot": {
                    "AllowPXE": nic.netboot_allowed(),
                    "AllowWorkflow": true,
                },
                "DisableDHCP": nic.disable_dhcp,
            })
        })
        .collect();
    let instance = spec.instance.clone().unwrap_or_default();
    let meta = &hardware.metadata;
    json!({
        "Disks": spec.storage_devices,
        "StorageDevices": spec.storage_devices,
        "Interfaces": interfaces,
        "UserData": instance.userdata.unwrap_or_default(),
        "VendorData": instance.vendordata.unwrap_or_default(),
        "Name": meta.name.clone().unwrap_or_default(),
        "Namespace": meta.namespace.clone().unwrap_or_default(),
        "Labels": meta.labels.clone().unwrap_or_default(),
        "Annotations": meta.annotations.clone().unwrap_or_default(),
        "Spec": serde_json::to_value(spec).unwrap_or(Value::Null),
    })
}

/// Renders every templated field of `template` with `data` and returns the actions, in order,
/// with the Template-level `env` and `volumes` merged in.
pub fn render_actions(template: &TemplateSpec, data: &Value) -> Result<Vec<Action>, RenderError> {
    let r = Renderer {
        data,
        opts: RenderOptions::tinkerbell(),
    };
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
            // A typed duration (the CRD validates its syntax), not a template.
            timeout: a.timeout.clone(),
        });
    }
    Ok(actions)
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
}

impl Renderer<'_> {
    fn one(&self, field: &str, text: &str) -> Result<String, RenderError> {
        if !text.contains("{{") {
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
