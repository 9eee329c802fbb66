//! The HTTP API: routing, discovery, and the REST verbs over the store.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use serde_json::{Value, json};

use crate::admission::{self, Operation};
use crate::error::{ApiError, ApiResult, Cause};
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::Core;
use crate::store::{Gr, ObjKey, State, meta_str};

/// Largest accepted request body, as the API server's default.
const MAX_BODY: usize = 3 * 1024 * 1024;
/// How often a patch or unconditional update is retried when the object changed underneath.
const MAX_RETRIES: usize = 16;
/// The Kubernetes version the server reports.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// The axum router.
pub(crate) fn router(core: Arc<Core>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(core)
}

/// Default namespaces, created at startup when missing.
pub(crate) fn bootstrap(state: &mut State) {
    let gr: Gr = (String::new(), "namespaces".into());
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let key: ObjKey = (String::new(), ns.to_string());
        if state.get(&gr, &key).is_none() {
            let obj = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now(),
                    "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            state.put(&gr, &key, obj);
        }
    }
}

/// RFC 3339 with seconds, as Kubernetes timestamps.
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn handle(
    axum::extract::State(core): axum::extract::State<Arc<Core>>,
    req: http::Request<Body>,
) -> Response {
    let requester = crate::auth::requester(&core.tokens, req.headers());
    let (result, warnings) =
        crate::warnings::collect(crate::auth::as_requester(requester, route(core, req))).await;
    let mut response = match result {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    crate::warnings::write(response.headers_mut(), &warnings);
    response
}

/// Parsed query string.
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(q.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }
    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }
    pub(crate) fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
    fn dry_run(&self) -> ApiResult<bool> {
        match self.get("dryRun") {
            None => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "Invalid dryRun value {other:?}: supported values: \"All\""
            ))),
        }
    }
}

pub(crate) fn json_response(code: StatusCode, v: &Value) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    if accept.trim().is_empty() {
        return true;
    }
    accept.split(',').any(|part| {
        let mt = part.split(';').next().unwrap_or_default().trim();
        matches!(
            mt,
            "application/json"
                | "application/*"
                | "*/*"
                | "application/yaml"
                | "application/json-seq"
        )
    })
}

fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Decodes a request body (JSON or YAML) into a JSON object.
pub fn decode_body(content_type: &str, body: &[u8]) -> ApiResult<Value> {
    let v: Value = match content_type {
        "" | "application/json" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request could not be decoded as JSON: {e}"
            ))
        })?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| {
                ApiError::bad_request(format!(
                    "the body of the request could not be decoded as YAML: {e}"
                ))
            })?,
        "application/vnd.kubernetes.protobuf" => {
            crate::proto::decode(body).map_err(|e| match e {
                crate::proto::ProtoError::Malformed(m) => ApiError::bad_request(format!(
                    "the body of the request could not be decoded as protobuf: {m}"
                )),
                unsupported => ApiError::new(415, "UnsupportedMediaType", unsupported.to_string()),
            })?
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    Ok(v)
}

async fn route(core: Arc<Core>, req: http::Request<Body>) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    if !accepts_json(&parts.headers) && parts.uri.path() != "/openapi/v2" {
        return Err(ApiError::not_acceptable());
    }
    let q = Query::parse(parts.uri.query());
    let path = parts.uri.path().to_string();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let read_body = async {
        axum::body::to_bytes(body, MAX_BODY)
            .await
            .map_err(|_| ApiError::too_large())
    };
    let get = parts.method == Method::GET;
    match segs.as_slice() {
        ["version"] if get => Ok(json_response(StatusCode::OK, &version_info())),
        ["healthz" | "livez" | "readyz", ..] if get => Ok((StatusCode::OK, "ok").into_response()),
        ["api"] if get => Ok(json_response(
            StatusCode::OK,
            &json!({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": core.addr.to_string()}]
            }),
        )),
        ["apis"] if get => Ok(json_response(StatusCode::OK, &group_list(&core))),
        ["api", "v1"] if get => Ok(json_response(
            StatusCode::OK,
            &resource_list(&core, "", "v1")?,
        )),
        ["apis", g] if get => group_info(&core, g).map(|v| json_response(StatusCode::OK, &v)),
        ["apis", g, v] if get => Ok(json_response(StatusCode::OK, &resource_list(&core, g, v)?)),
        ["openapi", "v3"] if get => Ok(json_response(StatusCode::OK, &crate::openapi::root(&core))),
        ["openapi", "v3", "api", "v1"] if get => crate::openapi::group_version(&core, "", "v1")
            .map(|v| json_response(StatusCode::OK, &v)),
        ["openapi", "v3", "apis", g, v] if get => {
            crate::openapi::group_version(&core, g, v).map(|v| json_response(StatusCode::OK, &v))
        }
        ["openapi", "v2"] if get => Ok(crate::openapi::v2(&core, &parts.headers)),
        ["openapi", ..] => Err(ApiError::no_route()),
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"]
        | ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
            if parts.method != Method::POST {
                return Err(ApiError::method_not_allowed(format!(
                    "{} is create-only",
                    segs[3]
                )));
            }
            // Counted like resource requests (kube-apiserver's apiserver_request_total counts
            // reviews as `create` on them).
            let answer = async {
                let review = decode_body(&media_type(&parts.headers), &read_body.await?)?;
                if segs[3] == "tokenreviews" {
                    crate::auth::token_review(&core, review)
                } else {
                    crate::auth::subject_access_review(&core, review)
                }
            }
            .await;
            core.requests.add(crate::metrics::RequestKey {
                verb: "create",
                group: segs[1].to_string(),
                resource: segs[3].to_string(),
                subresource: String::new(),
                code: answer.as_ref().map_or_else(|e| e.code, |_| 201),
            });
            Ok(json_response(StatusCode::CREATED, &answer?))
        }
        ["metrics"] if get => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            core.requests.render(),
        )
            .into_response()),
        ["api", "v1", rest @ ..] => {
            let t = target(&core, "", "v1", rest)?;
            counted(core, t, parts.method, &parts.headers, q, read_body).await
        }
        ["apis", g, v, rest @ ..] if !rest.is_empty() => {
            let t = target(&core, g, v, rest)?;
            counted(core, t, parts.method, &parts.headers, q, read_body).await
        }
        _ => Err(ApiError::no_route()),
    }
}

fn version_info() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": KUBERNETES_VERSION, "gitCommit": "kube-lite",
        "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "rust",
        "compiler": "rustc", "platform": "linux/amd64"
    })
}

fn group_json(g: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(json!({}))})
}

fn group_list(core: &Core) -> Value {
    let groups = core.lock().registry.groups();
    let items: Vec<Value> = groups.iter().map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": items})
}

fn group_info(core: &Core, g: &str) -> ApiResult<Value> {
    let groups = core.lock().registry.groups();
    groups
        .iter()
        .find(|(name, _)| name == g)
        .map(|(name, vs)| group_json(name, vs))
        .ok_or_else(ApiError::no_route)
}

fn resource_list(core: &Core, g: &str, v: &str) -> ApiResult<Value> {
    let types = core.lock().registry.in_group_version(g, v);
    if types.is_empty() {
        return Err(ApiError::no_route());
    }
    let resources: Vec<Value> = types.iter().flat_map(|t| t.api_resources(v)).collect();
    let gv = if g.is_empty() {
        v.to_string()
    } else {
        format!("{g}/{v}")
    };
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// What a resource path names.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub rt: Arc<ResourceType>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

impl Target {
    /// The store key of the resource (both Event resources share one).
    pub(crate) fn gr(&self) -> Gr {
        if crate::events::is_event(&self.rt) {
            return crate::events::storage_gr();
        }
        (self.rt.group.clone(), self.rt.plural.clone())
    }
    fn key(&self) -> ObjKey {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
        )
    }
    fn not_found(&self) -> ApiError {
        ApiError::not_found(
            &self.rt.group,
            &self.rt.plural,
            self.name.as_deref().unwrap_or_default(),
        )
    }
    pub(crate) fn api_version(&self) -> String {
        self.rt.api_version(&self.version)
    }
}

fn target(core: &Core, g: &str, v: &str, rest: &[&str]) -> ApiResult<Target> {
    let reg = &core.lock().registry;
    let lookup = |plural: &str| reg.get(g, v, plural).ok_or_else(ApiError::no_route);
    let t = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => {
            let rt = lookup(plural)?;
            if !rt.namespaced {
                return Err(ApiError::no_route());
            }
            let (name, sub) = match tail {
                [] => (None, None),
                [n] => (Some(n.to_string()), None),
                [n, s] => (Some(n.to_string()), Some(s.to_string())),
                _ => return Err(ApiError::no_route()),
            };
            Target {
                rt,
                version: v.to_string(),
                namespace: Some(ns.to_string()),
                name,
                sub,
            }
        }
        [plural] => Target {
            rt: lookup(plural)?,
            version: v.to_string(),
            namespace: None,
            name: None,
            sub: None,
        },
        [plural, name] | [plural, name, _] => {
            let rt = lookup(plural)?;
            if rt.namespaced {
                return Err(ApiError::no_route());
            }
            let sub = rest.get(2).map(|s| s.to_string());
            Target {
                rt,
                version: v.to_string(),
                namespace: None,
                name: Some(name.to_string()),
                sub,
            }
        }
        _ => return Err(ApiError::no_route()),
    };
    if let Some(sub) = &t.sub {
        let ok = sub == "status" && t.rt.has_status(&t.version)
            || (sub == "finalize" && t.rt.plural == "namespaces");
        if !ok {
            return Err(ApiError::no_route());
        }
    }
    Ok(t)
}

/// [`resource`], counted in [`Core::requests`] by verb, resource and answer code.
async fn counted(
    core: Arc<Core>,
    t: Target,
    method: Method,
    headers: &HeaderMap,
    q: Query,
    body: impl std::future::Future<Output = ApiResult<Bytes>>,
) -> ApiResult<Response> {
    let mut key = crate::metrics::RequestKey {
        verb: crate::metrics::verb(&method, t.name.is_some(), q.flag("watch")),
        group: t.rt.group.clone(),
        resource: t.rt.plural.clone(),
        subresource: t.sub.clone().unwrap_or_default(),
        code: 0,
    };
    let requests = core.clone();
    let result = resource(core, t, method, headers, q, body).await;
    key.code = match &result {
        Ok(r) => r.status().as_u16(),
        Err(e) => e.code,
    };
    requests.requests.add(key);
    result
}

async fn resource(
    core: Arc<Core>,
    t: Target,
    method: Method,
    headers: &HeaderMap,
    q: Query,
    body: impl std::future::Future<Output = ApiResult<Bytes>>,
) -> ApiResult<Response> {
    let ct = media_type(headers);
    let table = crate::table::wanted(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
        .then(|| q.get("includeObject").unwrap_or("Metadata").to_string());
    match (method, t.name.is_some()) {
        (Method::GET, false) if q.flag("watch") => crate::watch::watch(core, t, q, table).await,
        (Method::GET, false) => {
            let mut v = list(&core, &t, &q).await?;
            if let Some(include) = &table {
                let items = v["items"].as_array().cloned().unwrap_or_default();
                v = crate::table::table(&t.rt, &t.version, &items, v["metadata"].take(), include);
            }
            Ok(json_response(StatusCode::OK, &v))
        }
        (Method::GET, true) if q.flag("watch") => {
            // The old per-object watch path: the collection watch pinned to the name.
            let name = t.name.clone().unwrap_or_default();
            let mut q = q;
            let fs = match q.get("fieldSelector") {
                Some(f) => format!("{f},metadata.name={name}"),
                None => format!("metadata.name={name}"),
            };
            q.0.insert("fieldSelector".into(), fs);
            crate::watch::watch(core, Target { name: None, ..t }, q, table).await
        }
        (Method::GET, true) => {
            let mut v = get(&core, &t).await?;
            if let Some(include) = &table {
                let rv = v
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null);
                v = crate::table::table(
                    &t.rt,
                    &t.version,
                    &[v],
                    json!({"resourceVersion": rv}),
                    include,
                );
            }
            Ok(json_response(StatusCode::OK, &v))
        }
        (Method::POST, false) => {
            let body = decode_body(&ct, &body.await?)?;
            let (code, v) = create(&core, &t, &q, body).await?;
            Ok(json_response(code, &v))
        }
        (Method::PUT, true) => {
            let body = decode_body(&ct, &body.await?)?;
            let (code, v) = update(&core, &t, &q, body).await?;
            Ok(json_response(code, &v))
        }
        (Method::PATCH, true) => {
            let body = body.await?;
            let (code, v) = patch(&core, &t, &q, &ct, &body).await?;
            Ok(json_response(code, &v))
        }
        (Method::DELETE, true) => {
            let body = body.await?;
            let opts = if body.iter().all(u8::is_ascii_whitespace) {
                json!({})
            } else {
                decode_body(&ct, &body)?
            };
            delete(&core, &t, &q, &opts)
                .await
                .map(|v| json_response(StatusCode::OK, &v))
        }
        (Method::DELETE, false) => delete_collection(&core, &t, &q)
            .await
            .map(|v| json_response(StatusCode::OK, &v)),
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource: {m}"
        ))),
    }
}

/// Converts a stored object to the requested version.
pub(crate) async fn to_version(
    core: &Core,
    rt: &ResourceType,
    version: &str,
    obj: Value,
) -> ApiResult<Value> {
    let want = rt.api_version(version);
    if obj.get("apiVersion").and_then(Value::as_str) == Some(want.as_str()) {
        return Ok(obj);
    }
    if crate::events::is_event(rt) {
        return Ok(crate::events::convert(obj, &want));
    }
    let mut out = admission::convert(core, rt, vec![obj], &want).await?;
    out.pop()
        .ok_or_else(|| ApiError::internal("conversion returned no object"))
}

/// Converts an object in a request's version to the form it is stored in.
async fn to_storage(core: &Core, rt: &ResourceType, obj: Value) -> ApiResult<Value> {
    if crate::events::is_event(rt) {
        return Ok(crate::events::convert(
            obj,
            crate::events::STORAGE_API_VERSION,
        ));
    }
    to_version(core, rt, &rt.storage_version, obj).await
}

async fn get(core: &Core, t: &Target) -> ApiResult<Value> {
    let obj = core
        .lock()
        .get(&t.gr(), &t.key())
        .ok_or_else(|| t.not_found())?;
    to_version(core, &t.rt, &t.version, (*obj).clone()).await
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    ns: String,
    name: String,
}

pub(crate) fn selectors(t: &Target, q: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    let ls = LabelSelector::parse(q.get("labelSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {}", e.0)))?;
    let mut fs = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(e.0))?;
    if crate::events::is_event(&t.rt) {
        fs = crate::events::field_selector(&t.rt.group, fs)
            .map_err(|e| ApiError::bad_request(e.0))?;
    }
    Ok((ls, fs))
}

pub(crate) fn matches(ls: &LabelSelector, fs: &FieldSelector, obj: &Value) -> bool {
    ls.matches(obj.pointer("/metadata/labels")) && fs.matches(obj)
}

async fn list(core: &Core, t: &Target, q: &Query) -> ApiResult<Value> {
    let (ls, fs) = selectors(t, q)?;
    let limit: usize = match q.get("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        None => 0,
    };
    let start = match q.get("continue") {
        Some(c) => {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .map_err(|_| {
                    ApiError::bad_request("continue key is not valid: illegal base64 data")
                })?;
            let tok: ContinueToken = serde_json::from_slice(&raw)
                .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
            Some((tok.ns, tok.name))
        }
        None => None,
    };
    let (items, rv) = {
        let st = core.lock();
        if q.get("resourceVersionMatch") == Some("Exact")
            && let Some(want) = q.get("resourceVersion")
            && want != st.rv.to_string()
        {
            return Err(ApiError::gone(format!(
                "too old resource version: {want} ({})",
                st.rv
            )));
        }
        (st.list(&t.gr(), t.namespace.as_deref()), st.rv)
    };
    let mut selected = Vec::new();
    let mut remaining = 0usize;
    let mut next = None;
    for obj in items {
        let key = (
            meta_str(&obj, "namespace").unwrap_or_default().to_string(),
            meta_str(&obj, "name").unwrap_or_default().to_string(),
        );
        if let Some(s) = &start
            && key <= *s
        {
            continue;
        }
        if !matches(&ls, &fs, &obj) {
            continue;
        }
        if limit > 0 && selected.len() >= limit {
            remaining += 1;
            continue;
        }
        if limit > 0 && selected.len() + 1 == limit {
            next = Some(key);
        }
        selected.push(obj);
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if remaining > 0
        && let Some((ns, name)) = next
    {
        let tok = serde_json::to_vec(&ContinueToken { ns, name }).unwrap_or_default();
        meta["continue"] = json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tok));
        meta["remainingItemCount"] = json!(remaining);
    }
    let objs: Vec<Value> = selected.iter().map(|o| (**o).clone()).collect();
    let want = t.api_version();
    let items = if objs
        .iter()
        .all(|o| o.get("apiVersion").and_then(Value::as_str) == Some(want.as_str()))
    {
        objs
    } else if crate::events::is_event(&t.rt) {
        objs.into_iter()
            .map(|o| crate::events::convert(o, &want))
            .collect()
    } else {
        admission::convert(core, &t.rt, objs, &want).await?
    };
    Ok(json!({"kind": t.rt.list_kind, "apiVersion": want, "metadata": meta, "items": items}))
}

fn valid_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !p.starts_with('-')
                && !p.ends_with('-')
        })
}

fn valid_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && valid_subdomain(name)
}

/// Checks the metadata every object shares.
fn validate_meta(t: &Target, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = meta_str(obj, "name").unwrap_or_default();
    let ok = if t.rt.plural == "namespaces" {
        valid_label(name)
    } else {
        valid_subdomain(name)
    };
    if !ok {
        let what = if t.rt.plural == "namespaces" {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        };
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: {}: {what}", json!(name)),
        ));
    }
    for (field, check_values) in [("labels", true), ("annotations", false)] {
        match obj.pointer(&format!("/metadata/{field}")) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let Some(s) = v.as_str() else {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            format!("metadata.{field}"),
                            format!("Invalid value: {v}: must be a string"),
                        ));
                        continue;
                    };
                    if check_values && LabelSelector::parse(&format!("{k}={s}")).is_err() {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            format!("metadata.{field}"),
                            format!("Invalid value: {}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character", json!(s)),
                        ));
                    }
                }
            }
            Some(_) => causes.push(Cause::new(
                "FieldValueInvalid",
                format!("metadata.{field}"),
                "Invalid value: must be a map of strings",
            )),
        }
    }
    if let Some(f) = obj.pointer("/metadata/finalizers")
        && !f.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.finalizers",
            "Invalid value: must be a list of strings",
        ));
    }
    causes
}

/// Type-specific normalisation and validation; also CRD schema pruning, defaulting and checks.
fn validate_object(
    t: &Target,
    obj: &mut Value,
    old: Option<&Value>,
    strict: bool,
) -> ApiResult<()> {
    let name = meta_str(obj, "name").unwrap_or_default().to_string();
    let mut causes = validate_meta(t, obj);
    match (t.rt.group.as_str(), t.rt.plural.as_str()) {
        ("", "secrets") => {
            if obj
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                obj["type"] = json!("Opaque");
            }
            if let Some(sd) = obj.get("stringData").cloned() {
                if let Some(m) = sd.as_object() {
                    let data = obj.as_object_mut().and_then(|o| {
                        o.entry("data").or_insert_with(|| json!({}));
                        o.get_mut("data")
                    });
                    if let Some(Value::Object(d)) = data {
                        for (k, v) in m {
                            d.insert(
                                k.clone(),
                                json!(
                                    base64::engine::general_purpose::STANDARD
                                        .encode(v.as_str().unwrap_or_default())
                                ),
                            );
                        }
                    }
                }
                if let Some(o) = obj.as_object_mut() {
                    o.remove("stringData");
                }
            }
            if let Some(d) = obj.get("data").and_then(Value::as_object) {
                for (k, v) in d {
                    let ok = v.as_str().is_some_and(|s| {
                        base64::engine::general_purpose::STANDARD.decode(s).is_ok()
                    });
                    if !ok {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            format!("data[{k}]"),
                            "Invalid value: must be base64 encoded",
                        ));
                    }
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            if let Err(mut e) = crate::crd::parse(obj) {
                causes.append(&mut e);
            }
        }
        _ => {}
    }
    if let Some(schema) = t.rt.crd_version(&t.version).and_then(|v| v.schema.clone()) {
        let pruned = schema.prune_and_default(obj);
        if strict && !pruned.is_empty() {
            let list: Vec<String> = pruned
                .iter()
                .map(|p| format!("unknown field {:?}", p))
                .collect();
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )));
        }
        if causes.is_empty() {
            causes = schema.validate(obj, old, &t.api_version(), &t.rt.group, &t.rt.kind);
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&t.rt.group, &t.rt.kind, &name, causes))
    }
}

fn check_kind(t: &Target, obj: &mut Value) -> ApiResult<()> {
    let want_av = t.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(want_av),
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => obj["kind"] = json!(t.rt.kind),
        Some(k) if k == t.rt.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                t.rt.kind
            )));
        }
    }
    if !obj.get("metadata").is_some_and(Value::is_object) {
        if obj.get("metadata").is_some_and(|m| !m.is_null()) {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
        obj["metadata"] = json!({});
    }
    Ok(())
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let u = uuid::Uuid::new_v4();
    u.as_bytes()
        .iter()
        .take(5)
        .map(|b| CHARS[(*b as usize) % CHARS.len()] as char)
        .collect()
}

fn set_meta(obj: &mut Value, k: &str, v: Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if v.is_null() {
            m.remove(k);
        } else {
            m.insert(k.to_string(), v);
        }
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn strict(q: &Query) -> bool {
    q.get("fieldValidation") == Some("Strict")
}

pub(crate) async fn create(
    core: &Core,
    t: &Target,
    q: &Query,
    mut obj: Value,
) -> ApiResult<(StatusCode, Value)> {
    if t.sub.is_some() {
        return Err(ApiError::method_not_allowed(
            "create is not allowed on a subresource",
        ));
    }
    let dry = q.dry_run()?;
    check_kind(t, &mut obj)?;
    let ns = t.namespace.clone();
    match (&ns, meta_str(&obj, "namespace")) {
        (Some(want), Some(got)) if want != got && !got.is_empty() => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(want), _) => set_meta(&mut obj, "namespace", json!(want)),
        (None, _) => set_meta(&mut obj, "namespace", Value::Null),
    }
    if meta_str(&obj, "name").unwrap_or_default().is_empty() {
        match meta_str(&obj, "generateName").filter(|g| !g.is_empty()) {
            Some(g) => {
                let name = format!("{g}{}", random_suffix());
                set_meta(&mut obj, "name", json!(name));
            }
            None => {
                return Err(ApiError::invalid(
                    &t.rt.group,
                    &t.rt.kind,
                    "",
                    vec![Cause::new(
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )],
                ));
            }
        }
    }
    let name = meta_str(&obj, "name").unwrap_or_default().to_string();
    for k in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        set_meta(&mut obj, k, Value::Null);
    }
    set_meta(&mut obj, "uid", json!(uuid::Uuid::new_v4().to_string()));
    set_meta(&mut obj, "creationTimestamp", json!(now()));
    if t.rt.generation {
        set_meta(&mut obj, "generation", json!(1));
    } else {
        set_meta(&mut obj, "generation", Value::Null);
    }
    if t.rt.has_status(&t.version)
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    if t.rt.plural == "namespaces" && t.rt.group.is_empty() {
        obj["status"] = json!({"phase": "Active"});
        let labels = obj["metadata"]
            .as_object_mut()
            .map(|m| m.entry("labels").or_insert_with(|| json!({})));
        if let Some(Value::Object(l)) = labels {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
    validate_object(t, &mut obj, None, strict(q))?;
    let t_named = Target {
        name: Some(name.clone()),
        ..t.clone()
    };
    let (obj, mutated) =
        admission::admit(core, &t_named, Operation::Create, Some(obj), None, dry).await?;
    let mut obj = obj.unwrap_or_default();
    if mutated {
        validate_object(t, &mut obj, None, false)?;
    }
    let mut stored = to_storage(core, &t.rt, obj).await?;
    let key: ObjKey = (ns.clone().unwrap_or_default(), name.clone());
    let gr = t.gr();
    let result = {
        let mut st = core.lock();
        if st.get(&gr, &key).is_some() {
            return Err(ApiError::already_exists(&t.rt.group, &t.rt.plural, &name));
        }
        if let Some(ns) = &ns {
            match st.get(
                &(String::new(), "namespaces".into()),
                &(String::new(), ns.clone()),
            ) {
                None => return Err(ApiError::not_found("", "namespaces", ns)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::forbidden(
                        &t.rt.group,
                        &t.rt.plural,
                        &name,
                        &format!(
                            "unable to create new content in namespace {ns} because it is being terminated"
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        if gr.1 == "customresourcedefinitions"
            && let Ok(rt) = crate::crd::parse(&stored)
        {
            if st
                .registry
                .get_any(&rt.group, &rt.plural)
                .is_some_and(|e| e.crd.is_none())
            {
                return Err(ApiError::invalid(
                    &t.rt.group,
                    &t.rt.kind,
                    &name,
                    vec![Cause::new(
                        "FieldValueInvalid",
                        "spec.names.plural",
                        "Invalid value: the resource is built in",
                    )],
                ));
            }
            stored["status"] = crate::crd::established_status(&stored, &rt, &now(), None);
            if !dry {
                st.registry.insert(rt);
            }
        }
        if dry {
            stored
        } else {
            let r = (*st.put(&gr, &key, stored)).clone();
            drop(st);
            core.persist_soon();
            r
        }
    };
    let out = to_version(core, &t.rt, &t.version, result).await?;
    Ok((StatusCode::CREATED, out))
}

/// Everything but metadata and status, to decide whether `generation` changes.
fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    o
}

/// The object without what a no-op write may change: resourceVersion and managedFields times.
fn without_rv(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
            for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                e.remove("time");
            }
        }
    }
    o
}

/// The core of PUT, PATCH and apply: `make` turns the current object (in the request version)
/// into the desired one; `create` handles a missing object (apply creates).
async fn modify(
    core: &Core,
    t: &Target,
    q: &Query,
    make: &(dyn Fn(&Value) -> ApiResult<Value> + Sync),
    create_missing: Option<&(dyn Fn() -> ApiResult<Value> + Sync)>,
) -> ApiResult<(StatusCode, Value)> {
    let dry = q.dry_run()?;
    let gr = t.gr();
    let key = t.key();
    let status_sub = t.sub.as_deref() == Some("status");
    for _ in 0..MAX_RETRIES {
        let Some(current) = core.lock().get(&gr, &key) else {
            return match create_missing {
                Some(f) if !status_sub => {
                    create(
                        core,
                        &Target {
                            name: None,
                            ..t.clone()
                        },
                        q,
                        f()?,
                    )
                    .await
                }
                _ => Err(t.not_found()),
            };
        };
        let current_rv = meta_str(&current, "resourceVersion")
            .unwrap_or_default()
            .to_string();
        let cur = to_version(core, &t.rt, &t.version, (*current).clone()).await?;
        let mut desired = make(&cur)?;
        check_kind(t, &mut desired)?;
        let precondition = meta_str(&desired, "resourceVersion")
            .filter(|s| !s.is_empty())
            .map(String::from);
        if let Some(p) = &precondition
            && *p != current_rv
        {
            return Err(ApiError::stale(
                &t.rt.group,
                &t.rt.plural,
                t.name.as_deref().unwrap_or_default(),
            ));
        }
        if let Some(n) = meta_str(&desired, "name")
            && !n.is_empty()
            && Some(n) != t.name.as_deref()
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({})",
                t.name.as_deref().unwrap_or_default()
            )));
        }
        if let (Some(want), Some(got)) = (&t.namespace, meta_str(&desired, "namespace"))
            && !got.is_empty()
            && want != got
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut new = if status_sub {
            let mut n = cur.clone();
            if let Some(mf) = desired.pointer("/metadata/managedFields") {
                set_meta(&mut n, "managedFields", mf.clone());
            }
            match desired.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(o) = n.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            n
        } else {
            let mut n = desired;
            if t.rt.has_status(&t.version) {
                match cur.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Some(o) = n.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            n
        };
        // Server-owned metadata.
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            set_meta(
                &mut new,
                k,
                cur.pointer(&format!("/metadata/{k}"))
                    .cloned()
                    .unwrap_or(Value::Null),
            );
        }
        set_meta(&mut new, "resourceVersion", json!(current_rv));
        if cur.pointer("/metadata/deletionTimestamp").is_some() {
            let old_f = finalizers(&cur);
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !old_f.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &t.rt.group,
                    &t.rt.kind,
                    t.name.as_deref().unwrap_or_default(),
                    vec![Cause::new(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        if t.rt.generation && spec_part(&new) != spec_part(&cur) {
            let g = cur
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            set_meta(&mut new, "generation", json!(g + 1));
        }
        validate_object(t, &mut new, Some(&cur), strict(q))?;
        if without_rv(&new) == without_rv(&cur) {
            return Ok((StatusCode::OK, cur));
        }
        let (new, mutated) = admission::admit(
            core,
            t,
            Operation::Update,
            Some(new),
            Some(cur.clone()),
            dry,
        )
        .await?;
        let mut new = new.unwrap_or_default();
        if mutated {
            validate_object(t, &mut new, Some(&cur), false)?;
        }
        let mut stored = to_storage(core, &t.rt, new).await?;
        let result = {
            let mut st = core.lock();
            let latest = st.get(&gr, &key);
            let latest_rv = latest
                .as_ref()
                .and_then(|l| meta_str(l, "resourceVersion").map(String::from));
            if latest_rv.as_deref() != Some(current_rv.as_str()) {
                if precondition.is_some() {
                    return Err(ApiError::stale(
                        &t.rt.group,
                        &t.rt.plural,
                        t.name.as_deref().unwrap_or_default(),
                    ));
                }
                continue;
            }
            if gr.1 == "customresourcedefinitions"
                && let Ok(rt) = crate::crd::parse(&stored)
            {
                stored["status"] =
                    crate::crd::established_status(&stored, &rt, &now(), Some(&current));
                if !dry {
                    st.registry.insert(rt);
                }
            }
            if dry {
                stored
            } else {
                let r = st.put(&gr, &key, stored);
                if r.pointer("/metadata/deletionTimestamp").is_some() && finalizers(&r).is_empty() {
                    crate::lifecycle::after_update(&mut st, &gr, &key);
                }
                drop(st);
                core.persist_soon();
                (*r).clone()
            }
        };
        let out = to_version(core, &t.rt, &t.version, result).await?;
        return Ok((StatusCode::OK, out));
    }
    Err(ApiError::conflict(
        &t.rt.group,
        &t.rt.plural,
        t.name.as_deref().unwrap_or_default(),
        "the object kept changing while the request was applied; please retry",
    ))
}

async fn update(core: &Core, t: &Target, q: &Query, body: Value) -> ApiResult<(StatusCode, Value)> {
    let make = move |_: &Value| Ok(body.clone());
    modify(core, t, q, &make, None).await
}

/// Applies a JSON patch the way the API server's library does: a `test` of `null` passes
/// when the path does not exist (kube-runtime's finalizer helper relies on it).
fn json_patch_apply(doc: &mut Value, p: &json_patch::Patch) -> ApiResult<()> {
    for op in p.iter() {
        if let json_patch::PatchOperation::Test(t) = op
            && t.value.is_null()
            && doc.pointer(t.path.as_str()).is_none()
        {
            continue;
        }
        json_patch::patch(doc, std::slice::from_ref(op)).map_err(patch_error)?;
    }
    Ok(())
}

fn patch_error(e: json_patch::PatchError) -> ApiError {
    ApiError::new(
        422,
        "Invalid",
        format!("the server rejected our request due to an error in our request: {e}"),
    )
}

async fn patch(
    core: &Core,
    t: &Target,
    q: &Query,
    ct: &str,
    body: &[u8],
) -> ApiResult<(StatusCode, Value)> {
    match ct {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            let strategic = ct == "application/strategic-merge-patch+json";
            let make = move |cur: &Value| {
                let mut n = cur.clone();
                if strategic {
                    crate::smp::merge(&mut n, &p);
                } else {
                    json_patch::merge(&mut n, &p);
                }
                if !n.is_object() {
                    return Err(ApiError::bad_request("the patch removed the whole object"));
                }
                // A resourceVersion in the patch is a precondition; otherwise none applies.
                if p.pointer("/metadata/resourceVersion").is_none() {
                    set_meta(&mut n, "resourceVersion", Value::Null);
                }
                Ok(n)
            };
            modify(core, t, q, &make, None).await
        }
        "application/json-patch+json" => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let make = move |cur: &Value| {
                let mut n = cur.clone();
                let before_rv = meta_str(cur, "resourceVersion").map(String::from);
                json_patch_apply(&mut n, &p)?;
                if meta_str(&n, "resourceVersion").map(String::from) == before_rv {
                    set_meta(&mut n, "resourceVersion", Value::Null);
                }
                Ok(n)
            };
            modify(core, t, q, &make, None).await
        }
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            let manager = q.get("fieldManager").ok_or_else(|| {
                ApiError::bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
            })?;
            let mut applied: Value = serde_yaml::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            if !applied.is_object() {
                return Err(ApiError::bad_request("an apply patch must be an object"));
            }
            check_kind(t, &mut applied)?;
            if let Some(n) = meta_str(&applied, "name")
                && Some(n) != t.name.as_deref()
            {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({})",
                    t.name.as_deref().unwrap_or_default()
                )));
            }
            let manager = manager.to_string();
            let api_version = t.api_version();
            let sub = t.sub.clone();
            let skip_status = t.rt.has_status(&t.version) && sub.is_none();
            let a1 = applied.clone();
            let (m1, av1, sub1) = (manager.clone(), api_version.clone(), sub.clone());
            let make = move |cur: &Value| {
                let mut n = crate::apply::apply(
                    Some(cur),
                    &a1,
                    &m1,
                    &av1,
                    &now(),
                    sub1.as_deref(),
                    skip_status,
                );
                if a1.pointer("/metadata/resourceVersion").is_none() {
                    set_meta(&mut n, "resourceVersion", Value::Null);
                }
                Ok(n)
            };
            let a2 = applied.clone();
            let name = t.name.clone().unwrap_or_default();
            let create_missing = move || {
                let mut n = crate::apply::apply(
                    None,
                    &a2,
                    &manager,
                    &api_version,
                    &now(),
                    None,
                    skip_status,
                );
                set_meta(&mut n, "name", json!(name));
                Ok(n)
            };
            modify(core, t, q, &make, Some(&create_missing)).await
        }
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// Deletion propagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    Background,
    Foreground,
    Orphan,
}

async fn delete(core: &Core, t: &Target, q: &Query, opts: &Value) -> ApiResult<Value> {
    if t.sub.is_some() {
        return Err(ApiError::method_not_allowed(
            "delete is not allowed on a subresource",
        ));
    }
    let dry = q.dry_run()?
        || opts
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"));
    let policy = match q
        .get("propagationPolicy")
        .or_else(|| opts.get("propagationPolicy").and_then(Value::as_str))
    {
        None | Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy {other:?} is not supported: Background, Foreground, Orphan"
            )));
        }
    };
    let gr = t.gr();
    let key = t.key();
    let current = core.lock().get(&gr, &key).ok_or_else(|| t.not_found())?;
    let name = t.name.as_deref().unwrap_or_default();
    if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str)
        && Some(uid) != meta_str(&current, "uid")
    {
        return Err(ApiError::conflict(
            &t.rt.group,
            &t.rt.plural,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&current, "uid").unwrap_or_default()
            ),
        ));
    }
    if let Some(rv) = opts
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        && Some(rv) != meta_str(&current, "resourceVersion")
    {
        return Err(ApiError::conflict(
            &t.rt.group,
            &t.rt.plural,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(&current, "resourceVersion").unwrap_or_default()
            ),
        ));
    }
    let cur_v = to_version(core, &t.rt, &t.version, (*current).clone()).await?;
    admission::admit(core, t, Operation::Delete, None, Some(cur_v.clone()), dry).await?;
    let success = || {
        let mut details = json!({"name": name, "kind": t.rt.plural, "uid": meta_str(&current, "uid").unwrap_or_default()});
        if !t.rt.group.is_empty() {
            details["group"] = json!(t.rt.group);
        }
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
    };
    if dry {
        return Ok(if finalizers(&current).is_empty() {
            success()
        } else {
            cur_v
        });
    }
    let outcome = {
        let mut st = core.lock();
        let o = crate::lifecycle::delete(&mut st, &gr, &key, policy);
        drop(st);
        core.persist_soon();
        o
    };
    match outcome {
        crate::lifecycle::Outcome::Pending(obj) => {
            to_version(core, &t.rt, &t.version, (*obj).clone()).await
        }
        crate::lifecycle::Outcome::Deleted => Ok(success()),
        crate::lifecycle::Outcome::Missing => Err(t.not_found()),
    }
}

async fn delete_collection(core: &Core, t: &Target, q: &Query) -> ApiResult<Value> {
    if t.rt.plural == "namespaces" && t.rt.group.is_empty() {
        return Err(ApiError::method_not_allowed(
            "namespaces cannot be deleted as a collection",
        ));
    }
    let listed = list(
        core,
        t,
        &Query(
            q.0.iter()
                .filter(|(k, _)| *k != "limit" && *k != "continue")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
    )
    .await?;
    let mut items = Vec::new();
    for item in listed["items"].as_array().cloned().unwrap_or_default() {
        let tn = Target {
            name: meta_str(&item, "name").map(String::from),
            namespace: meta_str(&item, "namespace")
                .map(String::from)
                .filter(|s| !s.is_empty()),
            ..t.clone()
        };
        match delete(core, &tn, q, &json!({})).await {
            Ok(_) => items.push(item),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(
        json!({"kind": t.rt.list_kind, "apiVersion": t.api_version(), "metadata": {}, "items": items}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_decoding() {
        assert!(decode_body("application/json", b"{\"a\":1}").is_ok());
        assert!(decode_body("application/yaml", b"a: 1\n").is_ok());
        assert_eq!(decode_body("application/json", b"{").unwrap_err().code, 400);
        assert_eq!(
            decode_body("application/json", b"[1]").unwrap_err().code,
            400
        );
        assert_eq!(
            decode_body("application/vnd.kubernetes.protobuf", b"x")
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            decode_body("application/x-protobuf", b"x")
                .unwrap_err()
                .code,
            415
        );
    }

    #[test]
    fn json_patch_test_of_null_passes_on_missing_paths() {
        let p: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
        ]))
        .unwrap();
        let mut doc = json!({"metadata": {"name": "x"}});
        json_patch_apply(&mut doc, &p).unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["f"]));
        assert_eq!(json_patch_apply(&mut doc, &p).unwrap_err().code, 422);
    }

    #[test]
    fn names() {
        assert!(valid_subdomain("a.b-c"));
        assert!(!valid_subdomain("A"));
        assert!(!valid_subdomain("-a"));
        assert!(!valid_subdomain(""));
        assert!(valid_label("abc-1"));
        assert!(!valid_label("a.b"));
    }
}
