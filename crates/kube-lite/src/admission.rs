//! Admission webhooks (Mutating then Validating, AdmissionReview v1) and CRD conversion
//! webhooks (ConversionReview v1).

use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::api::Target;
use crate::error::{ApiError, ApiResult};
use crate::registry::{Conversion, ResourceType};
use crate::selector::LabelSelector;
use crate::server::Core;
use crate::store::meta_str;

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// CREATE.
    Create,
    /// UPDATE.
    Update,
    /// DELETE.
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
        }
    }
    fn options_kind(self) -> &'static str {
        match self {
            Self::Create => "CreateOptions",
            Self::Update => "UpdateOptions",
            Self::Delete => "DeleteOptions",
        }
    }
}

fn strs(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn rule_matches(rule: &Value, t: &Target, op: Operation) -> bool {
    let ops = strs(rule.get("operations"));
    let groups = strs(rule.get("apiGroups"));
    let versions = strs(rule.get("apiVersions"));
    let resources = strs(rule.get("resources"));
    let full = match &t.sub {
        Some(s) => format!("{}/{s}", t.rt.plural),
        None => t.rt.plural.clone(),
    };
    let res_ok = resources.iter().any(|r| {
        *r == full
            || (*r == "*" && t.sub.is_none())
            || *r == "*/*"
            || r.strip_suffix("/*")
                .is_some_and(|p| p == t.rt.plural && t.sub.is_some())
            || r.strip_prefix("*/")
                .is_some_and(|s| t.sub.as_deref() == Some(s))
    });
    let scope_ok = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Namespaced" => t.rt.namespaced,
        "Cluster" => !t.rt.namespaced,
        _ => true,
    };
    ops.iter().any(|o| *o == "*" || *o == op.as_str())
        && groups.iter().any(|g| *g == "*" || *g == t.rt.group)
        && versions.iter().any(|v| *v == "*" || *v == t.version)
        && res_ok
        && scope_ok
}

fn selector_matches(sel: Option<&Value>, labels: Option<&Value>) -> ApiResult<bool> {
    match sel {
        None | Some(Value::Null) => Ok(true),
        Some(s) => {
            let ls = LabelSelector::from_json(s).map_err(|e| ApiError::internal(e.0))?;
            Ok(ls.matches(labels))
        }
    }
}

fn status_reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        _ => "",
    }
}

/// Runs the mutating then the validating webhooks that match. Returns the (possibly mutated)
/// object and whether a mutation happened.
pub async fn admit(
    core: &Core,
    t: &Target,
    op: Operation,
    mut obj: Option<Value>,
    old: Option<Value>,
    dry_run: bool,
) -> ApiResult<(Option<Value>, bool)> {
    if t.rt.group == "admissionregistration.k8s.io" {
        return Ok((obj, false));
    }
    let (mutating, validating, ns_labels) = {
        let st = core.lock();
        let m = st.list(
            &(
                "admissionregistration.k8s.io".into(),
                "mutatingwebhookconfigurations".into(),
            ),
            None,
        );
        let v = st.list(
            &(
                "admissionregistration.k8s.io".into(),
                "validatingwebhookconfigurations".into(),
            ),
            None,
        );
        if m.is_empty() && v.is_empty() {
            return Ok((obj, false));
        }
        let ns_labels = t
            .namespace
            .as_ref()
            .and_then(|ns| {
                st.get(
                    &(String::new(), "namespaces".into()),
                    &(String::new(), ns.clone()),
                )
            })
            .and_then(|n| n.pointer("/metadata/labels").cloned());
        (m, v, ns_labels)
    };
    let mut mutated = false;
    for (configs, is_mutating) in [(mutating, true), (validating, false)] {
        for cfg in configs {
            for wh in cfg
                .get("webhooks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
            {
                let current = obj.as_ref().or(old.as_ref());
                if !wh
                    .get("rules")
                    .and_then(Value::as_array)
                    .is_some_and(|rs| rs.iter().any(|r| rule_matches(r, t, op)))
                {
                    continue;
                }
                let ns_sel_labels = if t.rt.plural == "namespaces" && t.rt.group.is_empty() {
                    current.and_then(|o| o.pointer("/metadata/labels")).cloned()
                } else if t.rt.namespaced {
                    ns_labels.clone()
                } else {
                    None
                };
                if (t.rt.namespaced || t.rt.plural == "namespaces")
                    && !selector_matches(wh.get("namespaceSelector"), ns_sel_labels.as_ref())?
                {
                    continue;
                }
                // An absent object (old on create, new on delete) never matches a selector.
                let obj_sel = wh.get("objectSelector");
                let labels_of =
                    |o: &Option<Value>| o.as_ref().map(|o| o.pointer("/metadata/labels").cloned());
                let obj_match = match obj_sel {
                    None | Some(Value::Null) => true,
                    Some(_) => {
                        let mut any = false;
                        for labels in [labels_of(&obj), labels_of(&old)].into_iter().flatten() {
                            any |= selector_matches(obj_sel, labels.as_ref())?;
                        }
                        any
                    }
                };
                if !obj_match {
                    continue;
                }
                if let Some(patched) = call_admission(
                    core,
                    t,
                    op,
                    &wh,
                    obj.as_ref(),
                    old.as_ref(),
                    dry_run,
                    is_mutating,
                )
                .await?
                {
                    obj = Some(patched);
                    mutated = true;
                }
            }
        }
    }
    Ok((obj, mutated))
}

#[allow(clippy::too_many_arguments)]
async fn call_admission(
    core: &Core,
    t: &Target,
    op: Operation,
    wh: &Value,
    obj: Option<&Value>,
    old: Option<&Value>,
    dry_run: bool,
    mutating: bool,
) -> ApiResult<Option<Value>> {
    let name = wh.get("name").and_then(Value::as_str).unwrap_or_default();
    let ignore = wh.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
    let timeout = Duration::from_secs(
        wh.get("timeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(10)
            .clamp(1, 30),
    );
    let uid = uuid::Uuid::new_v4().to_string();
    let gvk = json!({"group": t.rt.group, "version": t.version, "kind": t.rt.kind});
    let gvr = json!({"group": t.rt.group, "version": t.version, "resource": t.rt.plural});
    let mut request = json!({
        "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": t.name.clone().or_else(|| obj.and_then(|o| meta_str(o, "name")).map(String::from)).unwrap_or_default(),
        "operation": op.as_str(),
        "userInfo": crate::auth::current_requester().user_info(),
        "object": obj.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": op.options_kind()},
    });
    if let Some(ns) = &t.namespace {
        request["namespace"] = json!(ns);
    }
    if let Some(s) = &t.sub {
        request["subResource"] = json!(s);
    }
    let review =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let fail = |msg: String| -> ApiResult<Option<Value>> {
        if ignore {
            tracing::warn!(webhook = name, error = %msg, "admission webhook failed; failurePolicy Ignore");
            Ok(None)
        } else {
            Err(ApiError::internal(format!(
                "failed calling webhook \"{name}\": {msg}"
            )))
        }
    };
    let target = match crate::webhook::resolve(
        wh.get("clientConfig").unwrap_or(&Value::Null),
        &core.services(),
    ) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let answer = match crate::webhook::call(&target, &review, timeout).await {
        Ok(a) => a,
        Err(e) => return fail(e.to_string()),
    };
    let Some(resp) = answer.get("response") else {
        return fail("the response has no \"response\" field".into());
    };
    if resp.get("uid").and_then(Value::as_str) != Some(uid.as_str()) {
        return fail(format!(
            "expected response.uid={uid:?}, got {:?}",
            resp.get("uid")
        ));
    }
    // As kube-apiserver: the webhook's warnings reach the client whether it allowed or not.
    for w in resp
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        crate::warnings::add(w);
    }
    if resp.get("allowed").and_then(Value::as_bool) != Some(true) {
        let status = resp.get("status").cloned().unwrap_or(Value::Null);
        let code = status
            .get("code")
            .and_then(Value::as_u64)
            .filter(|c| (400..600).contains(c))
            .unwrap_or(400) as u16;
        let message = status
            .get("message")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .unwrap_or("without explanation");
        return Err(ApiError::new(
            code,
            status_reason(code),
            format!("admission webhook \"{name}\" denied the request: {message}"),
        ));
    }
    if !mutating {
        return Ok(None);
    }
    let (Some(patch_b64), Some(obj)) = (resp.get("patch").and_then(Value::as_str), obj) else {
        return Ok(None);
    };
    if resp.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
        return fail("patchType must be JSONPatch".into());
    }
    let raw = match base64::engine::general_purpose::STANDARD.decode(patch_b64) {
        Ok(r) => r,
        Err(e) => return fail(format!("patch is not base64: {e}")),
    };
    let patch: json_patch::Patch = match serde_json::from_slice(&raw) {
        Ok(p) => p,
        Err(e) => return fail(format!("patch is not a JSON patch: {e}")),
    };
    let mut out = obj.clone();
    if let Err(e) = json_patch::patch(&mut out, &patch) {
        return fail(format!("applying the webhook's patch: {e}"));
    }
    Ok(Some(out))
}

/// Converts objects of a type to `api_version` (`group/version`).
pub async fn convert(
    core: &Core,
    rt: &ResourceType,
    objs: Vec<Value>,
    api_version: &str,
) -> ApiResult<Vec<Value>> {
    let conversion = rt
        .crd
        .as_ref()
        .map(|c| c.conversion.clone())
        .unwrap_or(Conversion::None);
    let needs: Vec<usize> = objs
        .iter()
        .enumerate()
        .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(api_version))
        .map(|(i, _)| i)
        .collect();
    if needs.is_empty() {
        return Ok(objs);
    }
    let mut objs = objs;
    match conversion {
        Conversion::None => {
            for i in needs {
                objs[i]["apiVersion"] = json!(api_version);
            }
            Ok(objs)
        }
        Conversion::Webhook { client_config } => {
            let fail = |msg: String| {
                ApiError::internal(format!(
                    "conversion webhook for {}, Kind={} failed: {msg}",
                    api_version, rt.kind
                ))
            };
            let uid = uuid::Uuid::new_v4().to_string();
            let to_convert: Vec<Value> = needs.iter().map(|i| objs[*i].clone()).collect();
            let review = json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": uid, "desiredAPIVersion": api_version, "objects": to_convert},
            });
            let target = crate::webhook::resolve(&client_config, &core.services())
                .map_err(|e| fail(e.to_string()))?;
            let answer = crate::webhook::call(&target, &review, Duration::from_secs(30))
                .await
                .map_err(|e| fail(e.to_string()))?;
            let resp = answer
                .get("response")
                .ok_or_else(|| fail("no response in the ConversionReview".into()))?;
            if resp.get("uid").and_then(Value::as_str) != Some(uid.as_str()) {
                return Err(fail(format!("expected response.uid={uid:?}")));
            }
            if resp.pointer("/result/status").and_then(Value::as_str) != Some("Success") {
                let msg = resp
                    .pointer("/result/message")
                    .and_then(Value::as_str)
                    .unwrap_or("conversion failed");
                return Err(fail(msg.to_string()));
            }
            let converted = resp
                .get("convertedObjects")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if converted.len() != needs.len() {
                return Err(fail(format!(
                    "expected {} converted objects, got {}",
                    needs.len(),
                    converted.len()
                )));
            }
            for (i, c) in needs.into_iter().zip(converted) {
                if c.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
                    return Err(fail(format!(
                        "invalid apiVersion {:?} in a converted object",
                        c.get("apiVersion")
                    )));
                }
                if meta_str(&c, "uid") != meta_str(&objs[i], "uid")
                    || meta_str(&c, "name") != meta_str(&objs[i], "name")
                {
                    return Err(fail(
                        "the webhook changed metadata other than labels and annotations".into(),
                    ));
                }
                objs[i] = c;
            }
            Ok(objs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn target(sub: Option<&str>) -> Target {
        let rt = crate::registry::builtins()
            .into_iter()
            .find(|t| t.plural == "deployments")
            .unwrap();
        Target {
            rt: Arc::new(rt),
            version: "v1".into(),
            namespace: Some("ns".into()),
            name: Some("d".into()),
            sub: sub.map(String::from),
        }
    }

    #[test]
    fn rules() {
        let rule = json!({"operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]});
        assert!(rule_matches(&rule, &target(None), Operation::Create));
        assert!(!rule_matches(&rule, &target(None), Operation::Delete));
        assert!(!rule_matches(
            &rule,
            &target(Some("status")),
            Operation::Update
        ));
        let star = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"], "scope": "Namespaced"});
        assert!(rule_matches(
            &star,
            &target(Some("status")),
            Operation::Delete
        ));
        let cluster = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"});
        assert!(!rule_matches(&cluster, &target(None), Operation::Create));
        let status = json!({"operations": ["*"], "apiGroups": ["apps"], "apiVersions": ["*"], "resources": ["deployments/status"]});
        assert!(rule_matches(
            &status,
            &target(Some("status")),
            Operation::Update
        ));
        assert!(!rule_matches(&status, &target(None), Operation::Update));
    }
}
