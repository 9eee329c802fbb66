//! The CustomResourceDefinitions: both versions merged, v1alpha2 stored, webhook conversion.

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::{MergeError, merge_crds};

use crate::{capi, v1alpha1, v1alpha2};

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

/// The seven CRDs: Hardware, Template and Workflow serve v1alpha1 and v1alpha2 (stored) with
/// webhook conversion; OSIE exists only in v1alpha2 (no conversion); the Cluster API provider's
/// TinkerbellCluster, TinkerbellMachine and TinkerbellMachineTemplate serve v1beta1.
pub fn crds(webhook: &ConversionWebhook) -> Result<Vec<CustomResourceDefinition>, CrdError> {
    Ok(vec![
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
    ])
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
