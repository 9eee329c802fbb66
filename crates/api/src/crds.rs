//! The CustomResourceDefinitions: both versions merged, v1alpha2 stored, webhook conversion.

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
    JSONSchemaPropsOrBool, JSONSchemaPropsOrStringArray, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::{MergeError, merge_crds};

use crate::{bmc, capi, v1alpha1, v1alpha2};

/// Where the API server sends ConversionReviews (a Service in the cluster).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionWebhook {
    /// Namespace of the webhook Service.
    pub namespace: String,
    /// Name of the webhook Service.
    pub name: String,
    /// URL path of the conversion endpoint.
    pub path: String,
    /// Service port.
    pub port: i32,
    /// PEM CA bundle that signed the webhook's serving certificate; usually injected at deploy
    /// time (e.g. by cert-manager's CA injector), so `None` here.
    pub ca_bundle: Option<Vec<u8>>,
}

impl Default for ConversionWebhook {
    /// `tink-system/tink-webhook`, path `/convert`, port 443.
    fn default() -> Self {
        Self {
            namespace: "tink-system".into(),
            name: "tink-webhook".into(),
            path: "/convert".into(),
            port: 443,
            ca_bundle: None,
        }
    }
}

/// A CRD could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// kube's version merge refused the definitions.
    #[error("merging the versions of {kind}: {source}")]
    Merge {
        /// The kind.
        kind: &'static str,
        /// The merge error.
        source: MergeError,
    },
    /// A CRD did not serialize to YAML.
    #[error("rendering {name}: {message}")]
    Render {
        /// CRD name.
        name: String,
        /// The serializer's message.
        message: String,
    },
}

fn with_webhook(
    mut crd: CustomResourceDefinition,
    webhook: &ConversionWebhook,
) -> CustomResourceDefinition {
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            client_config: Some(WebhookClientConfig {
                ca_bundle: webhook.ca_bundle.clone().map(ByteString),
                service: Some(ServiceReference {
                    namespace: webhook.namespace.clone(),
                    name: webhook.name.clone(),
                    path: Some(webhook.path.clone()),
                    port: Some(webhook.port),
                }),
                url: None,
            }),
            conversion_review_versions: vec!["v1".into()],
        }),
    });
    crd
}

fn merged(
    kind: &'static str,
    v2: CustomResourceDefinition,
    v1: CustomResourceDefinition,
    webhook: &ConversionWebhook,
) -> Result<CustomResourceDefinition, CrdError> {
    let mut crd = merge_crds(vec![v2, v1], v1alpha2::VERSION)
        .map_err(|source| CrdError::Merge { kind, source })?;
    // Tinkerbell's v1alpha1 `spec` is `omitempty`: objects without one exist and stay valid.
    for v in crd.spec.versions.iter_mut() {
        if v.name != v1alpha1::VERSION {
            continue;
        }
        if let Some(schema) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            && let Some(required) = schema.required.as_mut()
        {
            required.retain(|r| r != "spec");
            if required.is_empty() {
                schema.required = None;
            }
        }
    }
    Ok(with_webhook(crd, webhook))
}

/// A Cluster API provider CRD, labelled with the contract versions it satisfies.
fn capi_crd(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let labels = crd.metadata.labels.get_or_insert_with(Default::default);
    for (k, v) in [capi::CONTRACT_LABEL, capi::CONTRACT_LABEL_V1BETA1] {
        labels.insert(k.into(), v.into());
    }
    crd
}

/// A CRD whose objects `clusterctl move` carries to a new management cluster (Rufio labels
/// its Machine CRD so).
fn clusterctl_moved(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let labels = crd.metadata.labels.get_or_insert_with(Default::default);
    for k in [
        "clusterctl.cluster.x-k8s.io",
        "clusterctl.cluster.x-k8s.io/move",
    ] {
        labels.insert(k.into(), String::new());
    }
    crd
}

/// A doc comment as one paragraph per blank-line-separated block, the way controller-gen writes
/// descriptions: the hard line breaks of the source's wrapping become spaces (else `kubectl
/// explain` prints sentences broken mid-line). A line that starts a list item (`- `, `* `, `1. `)
/// or is indented (code) keeps its line break.
pub fn join_wrapped_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_before = false;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            blank_before = true;
            continue;
        }
        if i > 0 && !out.is_empty() {
            let keeps_break =
                line.starts_with(' ') || line.starts_with('\t') || is_list_item(trimmed);
            out.push_str(if blank_before {
                "\n\n"
            } else if keeps_break {
                "\n"
            } else {
                " "
            });
        }
        blank_before = false;
        out.push_str(
            if !out.is_empty() && (line.starts_with(' ') || line.starts_with('\t')) {
                line.trim_end()
            } else {
                trimmed
            },
        );
    }
    out
}

fn is_list_item(line: &str) -> bool {
    if line.starts_with("- ") || line.starts_with("* ") {
        return true;
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && line[digits..].starts_with(". ")
}

/// [`join_wrapped_lines`] on every description of a schema, nested ones included.
fn join_descriptions(schema: &mut JSONSchemaProps) {
    if let Some(d) = schema.description.as_mut() {
        *d = join_wrapped_lines(d);
    }
    let maps = [
        schema.properties.as_mut(),
        schema.pattern_properties.as_mut(),
        schema.definitions.as_mut(),
    ];
    for map in maps.into_iter().flatten() {
        map.values_mut().for_each(join_descriptions);
    }
    for list in [
        schema.all_of.as_mut(),
        schema.any_of.as_mut(),
        schema.one_of.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        list.iter_mut().for_each(join_descriptions);
    }
    if let Some(not) = schema.not.as_deref_mut() {
        join_descriptions(not);
    }
    for nested in [
        schema.additional_properties.as_mut(),
        schema.additional_items.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        if let JSONSchemaPropsOrBool::Schema(s) = nested {
            join_descriptions(s);
        }
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(s)) => join_descriptions(s),
        Some(JSONSchemaPropsOrArray::Schemas(list)) => list.iter_mut().for_each(join_descriptions),
        None => {}
    }
    for dep in schema.dependencies.iter_mut().flat_map(|d| d.values_mut()) {
        if let JSONSchemaPropsOrStringArray::Schema(s) = dep {
            join_descriptions(s);
        }
    }
}

/// Every version's schema of `crd` with its descriptions joined.
fn with_joined_descriptions(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            join_descriptions(schema);
        }
    }
    crd
}

/// The ten CRDs: Hardware, Template and Workflow serve v1alpha1 and v1alpha2 (stored) with
/// webhook conversion; OSIE exists only in v1alpha2 (no conversion); the Cluster API provider's
/// TinkerbellCluster, TinkerbellMachine and TinkerbellMachineTemplate serve v1beta1; Rufio's
/// Machine, Job and Task serve `bmc.tinkerbell.org/v1alpha1`; WorkflowRuleSet (issue 31) serves
/// v1alpha2 only.
pub fn crds(webhook: &ConversionWebhook) -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let crds = vec![
        capi_crd(capi::v1beta1::TinkerbellCluster::crd()),
        capi_crd(capi::v1beta1::TinkerbellMachine::crd()),
        capi_crd(capi::v1beta1::TinkerbellMachineTemplate::crd()),
        merged(
            "Hardware",
            v1alpha2::Hardware::crd(),
            v1alpha1::Hardware::crd(),
            webhook,
        )?,
        v1alpha2::Osie::crd(),
        merged(
            "Template",
            v1alpha2::Template::crd(),
            v1alpha1::Template::crd(),
            webhook,
        )?,
        merged(
            "Workflow",
            v1alpha2::Workflow::crd(),
            v1alpha1::Workflow::crd(),
            webhook,
        )?,
        // Rollouts: v1alpha2 only (no v1alpha1 counterpart, no conversion).
        v1alpha2::WorkflowSet::crd(),
        // WorkflowRuleSet (issue 31): v1alpha2 only, no conversion.
        v1alpha2::WorkflowRuleSet::crd(),
        clusterctl_moved(bmc::Machine::crd()),
        bmc::Job::crd(),
        bmc::Task::crd(),
    ];
    Ok(crds.into_iter().map(with_joined_descriptions).collect())
}

/// The command that regenerates `deploy/crds/`.
pub const REGENERATE_COMMAND: &str = "cargo run -p tinkctl -- crds --out deploy/crds";

/// The CRDs as `(file name, YAML)`: `<plural>.<group>.yaml`, each starting with a comment that
/// says it is generated and how to regenerate it.
pub fn render_crds(webhook: &ConversionWebhook) -> Result<Vec<(String, String)>, CrdError> {
    crds(webhook)?
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let yaml = serde_yaml::to_string(&crd).map_err(|e| CrdError::Render {
                name: name.clone(),
                message: e.to_string(),
            })?;
            let text = format!(
                "# Generated from the Rust types in crates/api by `{REGENERATE_COMMAND}`.\n# Do not edit.\n{yaml}"
            );
            Ok((format!("{name}.yaml"), text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::join_wrapped_lines;

    #[test]
    fn wrapped_lines_join_and_paragraphs_stay() {
        assert_eq!(
            join_wrapped_lines(
                "for each network\ninterface, keyed by MAC.\n\nSecond paragraph\ngoes on."
            ),
            "for each network interface, keyed by MAC.\n\nSecond paragraph goes on."
        );
        assert_eq!(
            join_wrapped_lines(
                "States:\n- Pending: waits\n- Running: runs\n1. first\n   code line"
            ),
            "States:\n- Pending: waits\n- Running: runs\n1. first\n   code line"
        );
        assert_eq!(join_wrapped_lines("one line"), "one line");
        assert_eq!(join_wrapped_lines("\n  trailing  \n\n"), "trailing");
    }
}
