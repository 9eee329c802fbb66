//! A minimal OpenAPI v3 document per group/version: one path per resource whose PATCH operation
//! names its group/version/kind and the `fieldValidation` query parameter. That is what kubectl
//! reads to decide that the server validates fields itself (so it skips client-side validation).
//!
//! Custom resources' schemas are published as kube-apiserver publishes them: the CRD version's
//! `openAPIV3Schema` under `components.schemas` (v3) and `definitions` (v2 JSON), named by the
//! reversed group (`org.tinkerbell.v1alpha2.Workflow`) and tagged with
//! `x-kubernetes-group-version-kind`, which is how `kubectl explain workflow.spec` finds it.
//! Built-in kinds have no schema here. `/openapi/v2` in protobuf (what kubectl asks for first)
//! stays an empty Swagger 2.0 document: kubectl falls back to it for kinds the server does not
//! know, and with no schema it validates nothing and reports the missing kind as a real server
//! makes it do.

use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::server::Core;

fn gv_path(g: &str, v: &str) -> String {
    if g.is_empty() {
        format!("api/{v}")
    } else {
        format!("apis/{g}/{v}")
    }
}

/// The schema name kube-apiserver gives a custom resource: the group reversed, then version and
/// kind (`tinkerbell.org`, `v1alpha2`, `Workflow` -> `org.tinkerbell.v1alpha2.Workflow`).
fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').collect();
    parts.reverse();
    format!("{}.{version}.{kind}", parts.join("."))
}

/// The published schemas of the custom resources of one group/version (`name -> schema`).
fn crd_schemas(core: &Core, g: &str, v: &str) -> serde_json::Map<String, Value> {
    let state = core.lock();
    let crds: crate::store::Gr = (
        "apiextensions.k8s.io".into(),
        "customresourcedefinitions".into(),
    );
    let mut out = serde_json::Map::new();
    for t in state.registry.in_group_version(g, v) {
        if t.crd.is_none() {
            continue;
        }
        let Some(crd) = state.get(&crds, &(String::new(), format!("{}.{}", t.plural, t.group)))
        else {
            continue;
        };
        let schema = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| {
                vs.iter()
                    .find(|x| x.get("name").and_then(Value::as_str) == Some(v))
            })
            .and_then(|x| x.pointer("/schema/openAPIV3Schema"));
        let Some(Value::Object(schema)) = schema else {
            continue;
        };
        let mut schema = schema.clone();
        schema.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": t.group, "version": v, "kind": t.kind}]),
        );
        out.insert(schema_name(&t.group, v, &t.kind), Value::Object(schema));
    }
    out
}

/// The document for one group/version.
pub(crate) fn group_version(core: &Core, g: &str, v: &str) -> ApiResult<Value> {
    let types = core.lock().registry.in_group_version(g, v);
    if types.is_empty() {
        return Err(ApiError::no_route());
    }
    let schemas = crd_schemas(core, g, v);
    let mut paths = serde_json::Map::new();
    for t in types {
        let gvk = json!({"group": t.group, "version": v, "kind": t.kind});
        let name = schema_name(&t.group, v, &t.kind);
        let content = if schemas.contains_key(&name) {
            json!({"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}})
        } else {
            json!({})
        };
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "force", "in": "query", "schema": {"type": "boolean"}}
        ]);
        let op = |action: &str| {
            json!({"operationId": format!("{action}{}", t.kind), "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk, "parameters": params,
                "responses": {"200": {"description": "OK", "content": content}}})
        };
        let base = if t.namespaced {
            format!("/{}/namespaces/{{namespace}}/{}", gv_path(g, v), t.plural)
        } else {
            format!("/{}/{}", gv_path(g, v), t.plural)
        };
        paths.insert(format!("{base}/{{name}}"), json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}));
        paths.insert(base, json!({"get": op("list"), "post": op("post")}));
    }
    Ok(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::api::KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `/openapi/v3`: the index of group/version documents, with a hash that changes with them.
pub(crate) fn root(core: &Core) -> Value {
    let mut gvs: Vec<(String, String)> = vec![(String::new(), "v1".into())];
    for (g, vs) in core.lock().registry.groups() {
        for v in vs {
            gvs.push((g.clone(), v));
        }
    }
    let mut paths = serde_json::Map::new();
    for (g, v) in gvs {
        let doc = group_version(core, &g, &v).unwrap_or(Value::Null);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        doc.to_string().hash(&mut h);
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={:016X}", h.finish())}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v2`: the custom resources' schemas as `definitions` (JSON); an empty Swagger 2.0
/// document in protobuf.
pub(crate) fn v2(core: &Core, headers: &http::HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse;
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if accept.contains("application/com.github.proto-openapi.spec.v2") {
        // openapi_v2.Document { swagger: "2.0" } in protobuf wire format.
        let body: &'static [u8] = b"\x0a\x032.0";
        return (
            http::StatusCode::OK,
            [(
                http::header::CONTENT_TYPE,
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )],
            body,
        )
            .into_response();
    }
    let mut definitions = serde_json::Map::new();
    let groups = core.lock().registry.groups();
    for (g, vs) in groups {
        for v in vs {
            definitions.extend(crd_schemas(core, &g, &v));
        }
    }
    let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": crate::api::KUBERNETES_VERSION}, "paths": {}, "definitions": definitions});
    crate::api::json_response(http::StatusCode::OK, &doc)
}

#[cfg(test)]
mod tests {
    use super::schema_name;

    #[test]
    fn schema_names_reverse_the_group() {
        assert_eq!(
            schema_name("tinkerbell.org", "v1alpha2", "Workflow"),
            "org.tinkerbell.v1alpha2.Workflow"
        );
        assert_eq!(
            schema_name(
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "TinkerbellMachine"
            ),
            "io.x-k8s.cluster.infrastructure.v1beta1.TinkerbellMachine"
        );
    }
}
