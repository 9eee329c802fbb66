//! The resource types the server knows: the built-in ones and those registered by CRDs.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::schema::CompiledVersionSchema;

/// How a CRD converts between versions.
#[derive(Debug, Clone, PartialEq)]
pub enum Conversion {
    /// Only `apiVersion` changes.
    None,
    /// A ConversionReview webhook.
    Webhook {
        /// `spec.conversion.webhook.clientConfig`.
        client_config: Value,
    },
}

/// One version of a CRD.
#[derive(Debug, Clone)]
pub struct CrdVersion {
    /// `v1alpha2`.
    pub name: String,
    /// Whether it is served.
    pub served: bool,
    /// The compiled `openAPIV3Schema`, if any.
    pub schema: Option<Arc<CompiledVersionSchema>>,
    /// `additionalPrinterColumns`.
    pub printer_columns: Vec<Value>,
    /// Whether `subresources.status` is set for this version.
    pub status_subresource: bool,
}

/// A resource type.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group (`""` for core).
    pub group: String,
    /// Served versions, in the order discovery prefers them.
    pub versions: Vec<String>,
    /// The version objects are stored in.
    pub storage_version: String,
    /// `configmaps`.
    pub plural: String,
    /// `configmap`.
    pub singular: String,
    /// `ConfigMap`.
    pub kind: String,
    /// `ConfigMapList`.
    pub list_kind: String,
    /// `cm`.
    pub short_names: Vec<String>,
    /// `all`, ...
    pub categories: Vec<String>,
    /// Namespaced or cluster scoped.
    pub namespaced: bool,
    /// Whether `/status` exists and the main resource ignores `.status`.
    pub status_subresource: bool,
    /// Whether `metadata.generation` is maintained.
    pub generation: bool,
    /// CRD-only data: per-version schemas and conversion.
    pub crd: Option<CrdInfo>,
}

/// CRD-specific data of a resource type.
#[derive(Debug, Clone)]
pub struct CrdInfo {
    /// Per version.
    pub versions: Vec<CrdVersion>,
    /// Conversion strategy.
    pub conversion: Conversion,
}

impl ResourceType {
    /// `group/version` for a version.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The CRD version entry for `version`.
    pub fn crd_version(&self, version: &str) -> Option<&CrdVersion> {
        self.crd
            .as_ref()
            .and_then(|c| c.versions.iter().find(|v| v.name == version))
    }

    /// Whether `/status` exists for this version.
    pub fn has_status(&self, version: &str) -> bool {
        match &self.crd {
            Some(_) => self
                .crd_version(version)
                .is_some_and(|v| v.status_subresource),
            None => self.status_subresource,
        }
    }

    /// The discovery `APIResource` entries (resource and subresources) for `version`.
    pub fn api_resources(&self, version: &str) -> Vec<Value> {
        let create_only = matches!(
            self.plural.as_str(),
            "tokenreviews" | "subjectaccessreviews"
        ) && self.crd.is_none();
        let verbs = if create_only {
            json!(["create"])
        } else {
            json!([
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ])
        };
        let mut main = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "storageVersionHash": "",
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            main["categories"] = json!(self.categories);
        }
        let mut out = vec![main];
        if self.has_status(version) {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
    generation: bool,
) -> ResourceType {
    ResourceType {
        group: group.to_string(),
        versions: vec![version.to_string()],
        storage_version: version.to_string(),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        kind: kind.to_string(),
        list_kind: format!("{kind}List"),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        namespaced,
        status_subresource: status,
        generation,
        crd: None,
    }
}

/// The built-in resource types.
pub fn builtins() -> Vec<ResourceType> {
    let mut types = vec![
        builtin(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            true,
            false,
        ),
        builtin(
            "",
            "v1",
            "configmaps",
            "ConfigMap",
            true,
            &["cm"],
            false,
            false,
        ),
        builtin("", "v1", "secrets", "Secret", true, &[], false, false),
        builtin("", "v1", "events", "Event", true, &["ev"], false, false),
        builtin("", "v1", "services", "Service", true, &["svc"], true, false),
        builtin(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            false,
            false,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            true,
            &["ev"],
            false,
            false,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            false,
            false,
        ),
        builtin(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            &["deploy"],
            true,
            true,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
            true,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            &[],
            false,
            true,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            &[],
            false,
            true,
        ),
        builtin(
            crate::auth::RBAC_GROUP,
            "v1",
            "roles",
            "Role",
            true,
            &[],
            false,
            false,
        ),
        builtin(
            crate::auth::RBAC_GROUP,
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            false,
            false,
        ),
        builtin(
            crate::auth::RBAC_GROUP,
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            false,
            false,
        ),
        builtin(
            crate::auth::RBAC_GROUP,
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            false,
            false,
        ),
        // Create-only reviews, answered by `crate::auth` (never stored).
        builtin(
            "authentication.k8s.io",
            "v1",
            "tokenreviews",
            "TokenReview",
            false,
            &[],
            false,
            false,
        ),
        builtin(
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
            &[],
            false,
            false,
        ),
    ];
    for t in &mut types {
        if matches!(t.plural.as_str(), "services" | "deployments") {
            t.categories = vec!["all".into()];
        }
    }
    types
}

/// Group -> plural -> type.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    types: BTreeMap<(String, String), Arc<ResourceType>>,
}

impl Registry {
    /// A registry with the built-in types.
    pub fn new() -> Self {
        let mut r = Self::default();
        for t in builtins() {
            r.insert(t);
        }
        r
    }

    /// Adds or replaces a type.
    pub fn insert(&mut self, t: ResourceType) {
        self.types
            .insert((t.group.clone(), t.plural.clone()), Arc::new(t));
    }

    /// Removes a type.
    pub fn remove(&mut self, group: &str, plural: &str) {
        self.types.remove(&(group.to_string(), plural.to_string()));
    }

    /// Looks up a type served at `group/version` by plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_string(), plural.to_string()))
            .filter(|t| t.versions.iter().any(|v| v == version))
            .cloned()
    }

    /// Looks up a type by group and plural regardless of version.
    pub fn get_any(&self, group: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_string(), plural.to_string()))
            .cloned()
    }

    /// Groups with their served versions (preferred first), core group excluded.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in self.types.values() {
            if t.group.is_empty() {
                continue;
            }
            let vs = groups.entry(t.group.clone()).or_default();
            for v in &t.versions {
                if !vs.contains(v) {
                    vs.push(v.clone());
                }
            }
        }
        groups
            .into_iter()
            .map(|(g, mut vs)| {
                vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
                (g, vs)
            })
            .collect()
    }

    /// Types served at `group/version`.
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.types
            .values()
            .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
            .cloned()
            .collect()
    }
}

/// Kubernetes version priority: GA > beta > alpha, then by numbers (`v2` > `v1`, `v1beta2` > `v1beta1`).
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major: u32 = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    (level, major, num.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_order() {
        let mut vs = vec!["v1alpha1", "v1", "v1beta1", "v2", "v1alpha2", "v2beta1"];
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(
            vs,
            ["v2", "v1", "v2beta1", "v1beta1", "v1alpha2", "v1alpha1"]
        );
    }

    #[test]
    fn builtins_are_found() {
        let r = Registry::new();
        assert!(r.get("", "v1", "configmaps").is_some());
        assert!(r.get("", "v2", "configmaps").is_none());
        assert!(r.groups().iter().any(|(g, _)| g == "coordination.k8s.io"));
    }
}
