//! A minimal OpenAPI v3 document per group/version: one path per resource whose PATCH operation
//! names its group/version/kind and the `fieldValidation` query parameter. That is what kubectl
//! reads to decide that the server validates fields itself (so it skips client-side validation,
//! which would need the full OpenAPI v2 document in protobuf). No schemas are published.

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

/// The document for one group/version.
pub(crate) fn group_version(core: &Core, g: &str, v: &str) -> ApiResult<Value> {
    let types = core.lock().registry.in_group_version(g, v);
    if types.is_empty() {
        return Err(ApiError::no_route());
    }
    let mut paths = serde_json::Map::new();
    for t in types {
        let gvk = json!({"group": t.group, "version": v, "kind": t.kind});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "force", "in": "query", "schema": {"type": "boolean"}}
        ]);
        let op = |action: &str| {
            json!({"operationId": format!("{action}{}", t.kind), "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk, "parameters": params,
                "responses": {"200": {"description": "OK"}}})
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
        "components": {"schemas": {}},
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
