//! Server-side apply of YAML manifests (what `kubectl apply --server-side` does).

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde::Deserialize;

/// The field manager of tinkctl's writes.
pub const FIELD_MANAGER: &str = "tinkctl";

/// The documents of a multi-document YAML stream, empty documents skipped.
pub fn documents(yaml: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let value = serde_json::Value::deserialize(doc)
            .with_context(|| format!("YAML document {}", i + 1))?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject = serde_json::from_value(value)
            .with_context(|| format!("YAML document {}: not a Kubernetes object", i + 1))?;
        if obj.types.is_none() || obj.metadata.name.is_none() {
            bail!(
                "YAML document {}: apiVersion, kind and metadata.name are required",
                i + 1
            );
        }
        out.push(obj);
    }
    Ok(out)
}

/// The `(group, version, kind)` of an object.
pub fn gvk(obj: &DynamicObject) -> anyhow::Result<GroupVersionKind> {
    let types = obj
        .types
        .as_ref()
        .context("object without apiVersion/kind")?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), types.api_version.clone()),
    };
    Ok(GroupVersionKind::gvk(&group, &version, &types.kind))
}

/// The API of an object's kind, in its namespace when the kind is namespaced.
pub async fn api_for(
    client: &kube::Client,
    obj: &DynamicObject,
) -> anyhow::Result<Api<DynamicObject>> {
    let gvk = gvk(obj)?;
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| {
            format!(
                "the cluster does not serve {}/{}",
                gvk.api_version(),
                gvk.kind
            )
        })?;
    Ok(match caps.scope {
        kube::discovery::Scope::Namespaced => {
            let ns = obj.metadata.namespace.as_deref().unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

/// Applies each object in order (server-side apply, conflicts forced: tinkctl owns these
/// objects); returns `kind/name` per object.
pub async fn apply_all(
    client: &kube::Client,
    objects: &[DynamicObject],
) -> anyhow::Result<Vec<String>> {
    let mut applied = Vec::with_capacity(objects.len());
    for obj in objects {
        let api = api_for(client, obj).await?;
        let name = obj.metadata.name.clone().unwrap_or_default();
        let kind = obj
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let mut body = obj.clone();
        body.metadata.resource_version = None;
        body.metadata.managed_fields = None;
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .with_context(|| format!("applying {kind}/{name}"))?;
        applied.push(format!("{}/{name}", kind.to_lowercase()));
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_a_stream_and_skips_empty_documents() {
        let docs = documents("---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: tinkerbell.org/v1alpha2\nkind: Hardware\nmetadata: {name: b, namespace: a}\n").expect("parse");
        assert_eq!(docs.len(), 2);
        assert_eq!(gvk(&docs[0]).expect("gvk").group, "");
        assert_eq!(gvk(&docs[1]).expect("gvk").group, "tinkerbell.org");
        assert_eq!(gvk(&docs[1]).expect("gvk").version, "v1alpha2");
    }

    #[test]
    fn refuses_objects_without_a_name() {
        let err =
            documents("apiVersion: v1\nkind: Namespace\nmetadata: {}\n").expect_err("no name");
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }
}
