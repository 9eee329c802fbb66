//! A minimal OpenAPI v3 document per group/version: one path per resource whose PATCH operation
//! names its group/version/kind and the `fieldValidation` query parameter. That is what kubectl
//! reads to decide that the server validates fields itself (so it skips client-side validation).
//! No schemas are published. `/openapi/v2` is an empty Swagger 2.0 document (protobuf when asked
//! for), which kubectl falls back to for kinds the server does not know: with no schema it
//! validates nothing and reports the missing kind as a real server makes it do.

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

/// `/openapi/v2`: an empty Swagger 2.0 document.
pub(crate) fn v2(headers: &http::HeaderMap) -> axum::response::Response {
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
    let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": crate::api::KUBERNETES_VERSION}, "paths": {}, "definitions": {}});
    crate::api::json_response(http::StatusCode::OK, &doc)
}
