//! CustomResourceDefinition handling: validation of the CRD itself, the resource type it
//! registers, and the status the server reports for it.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::Cause;
use crate::registry::{Conversion, CrdInfo, CrdVersion, ResourceType};
use crate::schema::CompiledVersionSchema;

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Parses and validates a CRD, returning the resource type it defines.
pub fn parse(crd: &Value) -> Result<ResourceType, Vec<Cause>> {
    let mut errs = Vec::new();
    let group = s(crd, "/spec/group").to_string();
    let plural = s(crd, "/spec/names/plural").to_string();
    let kind = s(crd, "/spec/names/kind").to_string();
    let name = s(crd, "/metadata/name");
    if group.is_empty() {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.group",
            "Required value",
        ));
    } else if !group.contains('.') {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    }
    if kind.is_empty() {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let namespaced = match s(crd, "/spec/scope") {
        "Namespaced" => true,
        "Cluster" => false,
        other => {
            errs.push(Cause::new(
                "FieldValueNotSupported",
                "spec.scope",
                format!(
                    "Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
                ),
            ));
            true
        }
    };
    let top_schema = crd.pointer("/spec/validation/openAPIV3Schema");
    let top_status = crd.pointer("/spec/subresources/status").is_some();
    let mut versions = Vec::new();
    let mut storage = Vec::new();
    let raw_versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if raw_versions.is_empty() {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in raw_versions.iter().enumerate() {
        let vname = s(v, "/name").to_string();
        if vname.is_empty() {
            errs.push(Cause::new(
                "FieldValueRequired",
                format!("spec.versions[{i}].name"),
                "Required value",
            ));
            continue;
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage.push(vname.clone());
        }
        let schema_path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        let schema = match v.pointer("/schema/openAPIV3Schema").or(top_schema) {
            Some(raw) => match CompiledVersionSchema::compile(raw, &schema_path) {
                Ok(c) => Some(Arc::new(c)),
                Err(mut e) => {
                    errs.append(&mut e);
                    None
                }
            },
            None => None,
        };
        versions.push(CrdVersion {
            name: vname,
            served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
            schema,
            printer_columns: v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            status_subresource: v.pointer("/subresources/status").is_some() || top_status,
        });
    }
    if storage.len() != 1 && !raw_versions.is_empty() {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            format!(
                "Invalid value: {:?}: must have exactly one version marked as storage version",
                storage
            ),
        ));
    }
    let conversion = match s(crd, "/spec/conversion/strategy") {
        "" | "None" => Conversion::None,
        "Webhook" => match crd.pointer("/spec/conversion/webhook/clientConfig") {
            Some(cc) => Conversion::Webhook {
                client_config: cc.clone(),
            },
            None => {
                errs.push(Cause::new(
                    "FieldValueRequired",
                    "spec.conversion.webhook.clientConfig",
                    "Required value: required when strategy is set to Webhook",
                ));
                Conversion::None
            }
        },
        other => {
            errs.push(Cause::new(
                "FieldValueNotSupported",
                "spec.conversion.strategy",
                format!("Unsupported value: \"{other}\": supported values: \"None\", \"Webhook\""),
            ));
            Conversion::None
        }
    };
    if !errs.is_empty() {
        return Err(errs);
    }
    let mut served: Vec<String> = versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.clone())
        .collect();
    served.sort_by(|a, b| {
        crate::registry::version_priority(b).cmp(&crate::registry::version_priority(a))
    });
    let status_any = versions.iter().any(|v| v.status_subresource);
    Ok(ResourceType {
        group,
        versions: served,
        storage_version: storage.remove(0),
        singular: crd
            .pointer("/spec/names/singular")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| kind.to_lowercase()),
        list_kind: crd
            .pointer("/spec/names/listKind")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| format!("{kind}List")),
        short_names: strings(crd.pointer("/spec/names/shortNames")),
        categories: strings(crd.pointer("/spec/names/categories")),
        plural,
        kind,
        namespaced,
        status_subresource: status_any,
        generation: true,
        crd: Some(CrdInfo {
            versions,
            conversion,
        }),
    })
}

/// The status a CRD gets once registered: Established, NamesAccepted, storedVersions.
pub fn established_status(
    crd: &Value,
    rt: &ResourceType,
    now: &str,
    previous: Option<&Value>,
) -> Value {
    let mut stored: Vec<String> = previous
        .map(|p| strings(p.pointer("/status/storedVersions")))
        .unwrap_or_default();
    if !stored.contains(&rt.storage_version) {
        stored.push(rt.storage_version.clone());
    }
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
                ]
            }
        })
    }

    #[test]
    fn parses_a_crd() {
        let rt = parse(&crd()).unwrap();
        assert_eq!(rt.versions, vec!["v1", "v1alpha1"]);
        assert_eq!(rt.storage_version, "v1");
        assert!(rt.has_status("v1"));
        assert!(!rt.has_status("v1alpha1"));
        assert_eq!(rt.short_names, vec!["wd"]);
        let st = established_status(&crd(), &rt, "2024-01-01T00:00:00Z", None);
        assert_eq!(st["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn rejects_bad_crds() {
        let mut c = crd();
        c["metadata"]["name"] = json!("wrong");
        c["spec"]["versions"][0]["storage"] = json!(true);
        let errs = parse(&c).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["metadata.name", "spec.versions"]);
    }
}
