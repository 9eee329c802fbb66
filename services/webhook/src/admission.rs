//! `POST /validate`: AdmissionReview v1 in, AdmissionReview v1 out.
//!
//! A denial is `allowed: false` with `status.code` 422, `reason: Invalid`, a message listing
//! every refused field (`field: what is wrong and what would be accepted`) and one
//! `details.causes` entry per field. Warnings go in `response.warnings` (the API server sends
//! each to the client as a `Warning` header; kubectl prints them): unresolved Workflow
//! references, and what converting a v1alpha1 object to v1alpha2 (the storage version) had to
//! change, such as a `lease_time` clamped to int32; a ConversionReview cannot carry warnings. A body that is not an AdmissionReview is answered with HTTP 400 and a
//! `Status`, or, when it has a `request.uid`, with a refusal carrying that uid.

use std::time::Instant;

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::approval::{self, Approval, Approver, Refusal, UserInfo};
use crate::index::Index;
use crate::metrics::Metrics;
use crate::validate::{self, Operation, Verdict};

const API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: String,
    kind: String,
    request: Request,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    kind: Gvk,
    /// The kind the client used (`kind` is what the object was converted to, if it was).
    #[serde(default)]
    request_kind: Option<Gvk>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    operation: String,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    old_object: Option<Value>,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(default)]
    user_info: UserInfo,
}

#[derive(Deserialize)]
struct Gvk {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    kind: String,
}

/// The kinds this webhook validates (the metric label of anything else is `unknown`).
pub const KINDS: [&str; 9] = [
    "Hardware",
    "Template",
    "Workflow",
    "OSIE",
    "Machine",
    "Job",
    "Task",
    "WorkflowSet",
    // issue 31
    "WorkflowRuleSet",
];

/// The API group of one of [`KINDS`]: the BMC kinds are Rufio's `bmc.tinkerbell.org`.
pub fn group_of(kind: &str) -> &'static str {
    match kind {
        "Machine" | "Job" | "Task" => tink_api::bmc::GROUP,
        _ => tink_api::GROUP,
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "code": code, "reason": reason, "message": message})
}

fn review(response: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})
}

fn refuse(uid: &str, code: u16, reason: &str, message: &str) -> Value {
    review(json!({"uid": uid, "allowed": false,
        "status": {"status": "Failure", "code": code, "reason": reason, "message": message}}))
}

/// An answer: the kind's metric label, the verdict's (`allowed`, `denied`, `error`), the HTTP
/// status and the body.
pub type Answer = (&'static str, &'static str, (StatusCode, Value));

/// What the checks that need no API call decided.
#[derive(Debug)]
pub enum Checked {
    /// The answer.
    Answered(Answer),
    /// Every check passed, but the update approves a discovered Hardware: RBAC decides
    /// ([`crate::approval`]).
    NeedsApproval(Box<PendingApproval>),
}

/// An allowed Hardware update that approves it, waiting for its SubjectAccessReview.
#[derive(Debug)]
pub struct PendingApproval {
    uid: String,
    approval: Approval,
    warnings: Vec<String>,
    /// The Hardware's key and the MACs and IPs to reserve once allowed (none on a dry run).
    reserve: Option<(String, validate::hardware::NewClaims)>,
}

impl PendingApproval {
    /// What is to be approved.
    pub fn approval(&self) -> &Approval {
        &self.approval
    }

    /// The answer once RBAC decided.
    fn resolve(self, decided: Result<(), Refusal>, index: &Index) -> Answer {
        let kind = "Hardware";
        match decided {
            Ok(()) => {
                if let Some((key, claims)) = &self.reserve {
                    index.reserve(key, &claims.macs, &claims.ips);
                }
                (
                    kind,
                    "allowed",
                    (StatusCode::OK, review_allowed(&self.uid, &self.warnings)),
                )
            }
            Err(refusal) => {
                let (reason, verdict) = match refusal.code {
                    403 => ("Forbidden", "denied"),
                    _ => ("ServiceUnavailable", "error"),
                };
                let name = &self.approval.name;
                let group = tink_api::GROUP;
                tracing::info!(user = %self.approval.user.username, namespace = %self.approval.namespace, %name, message = %refusal.message, "approval refused");
                let mut response = json!({"uid": self.uid, "allowed": false, "status": {
                    "status": "Failure", "code": refusal.code, "reason": reason,
                    "message": format!("{kind}.{group} {name:?} is forbidden: {}", refusal.message),
                    "details": {"name": name, "group": group, "kind": kind, "causes": [{
                        "reason": validate::Reason::Forbidden.as_str(),
                        "field": approval::FIELD, "message": refusal.message}]},
                }});
                if !self.warnings.is_empty() {
                    response["warnings"] = json!(self.warnings);
                }
                (kind, verdict, (StatusCode::OK, review(response)))
            }
        }
    }
}

/// Answers one `POST /validate` body without API access: an approval of a discovered Hardware
/// is refused (use [`handle_with`] and an [`Approver`] to check it).
pub fn handle(body: &[u8], index: &Index, metrics: &Metrics) -> (StatusCode, Value) {
    let started = Instant::now();
    let (kind, verdict, answer) = match check(body, index) {
        Checked::Answered(a) => a,
        Checked::NeedsApproval(p) => {
            let refusal = p.approval.unchecked();
            p.resolve(Err(refusal), index)
        }
    };
    metrics.admission(kind, verdict, started.elapsed().as_secs_f64());
    answer
}

/// Answers one `POST /validate` body, asking `approver` (when there is one) about approvals.
pub async fn handle_with(
    body: &[u8],
    index: &Index,
    metrics: &Metrics,
    approver: Option<&Approver>,
) -> (StatusCode, Value) {
    let started = Instant::now();
    finish(check(body, index), index, metrics, approver, started).await
}

/// The answer to what [`check`] decided: an approval is asked of `approver` (refused without
/// one); records the metric (time from `started`).
pub async fn finish(
    checked: Checked,
    index: &Index,
    metrics: &Metrics,
    approver: Option<&Approver>,
    started: Instant,
) -> (StatusCode, Value) {
    let (kind, verdict, answer) = match checked {
        Checked::Answered(a) => a,
        Checked::NeedsApproval(p) => {
            let decided = match approver {
                Some(approver) => approver.check(&p.approval).await,
                None => Err(p.approval.unchecked()),
            };
            p.resolve(decided, index)
        }
    };
    metrics.admission(kind, verdict, started.elapsed().as_secs_f64());
    answer
}

fn malformed(raw: &Value, message: String) -> Answer {
    let message = format!("malformed AdmissionReview: {message}");
    tracing::warn!(%message, "refusing a malformed AdmissionReview");
    let answer = match raw.pointer("/request/uid").and_then(Value::as_str) {
        Some(uid) => (StatusCode::OK, refuse(uid, 400, "BadRequest", &message)),
        None => (StatusCode::BAD_REQUEST, status(400, "BadRequest", &message)),
    };
    ("unknown", "error", answer)
}

/// The checks that need no API call.
pub fn check(body: &[u8], index: &Index) -> Checked {
    let raw: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Checked::Answered(malformed(
                &Value::Null,
                format!("the body is not JSON: {e}"),
            ));
        }
    };
    match answer(&raw, index) {
        Ok(answered) => Checked::Answered(answered),
        Err(pending) => Checked::NeedsApproval(pending),
    }
}

/// The answer, or the approval RBAC must decide before the request is allowed.
fn answer(raw: &Value, index: &Index) -> Result<Answer, Box<PendingApproval>> {
    let review: Review = match serde_json::from_value(raw.clone()) {
        Ok(r) => r,
        Err(e) => return Ok(malformed(raw, e.to_string())),
    };
    if review.api_version != API_VERSION || review.kind != "AdmissionReview" {
        return Ok(malformed(
            raw,
            format!(
                "expected apiVersion {API_VERSION} and kind AdmissionReview, got {:?} {:?}",
                review.api_version, review.kind
            ),
        ));
    }
    let req = review.request;
    let kind: &'static str = match KINDS.iter().find(|k| **k == req.kind.kind) {
        Some(k) if req.kind.group == group_of(k) => k,
        _ => {
            // Not ours (a misconfigured rule): allow, as the webhook has nothing to say.
            return Ok((
                "unknown",
                "allowed",
                (StatusCode::OK, review_allowed(&req.uid, &[])),
            ));
        }
    };
    let operation = match req.operation.as_str() {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        "DELETE" | "CONNECT" => Operation::Other,
        other => {
            return Ok(malformed(
                raw,
                format!("unknown request.operation {other:?}"),
            ));
        }
    };
    if operation == Operation::Other || req.sub_resource.is_some() {
        return Ok((
            kind,
            "allowed",
            (StatusCode::OK, review_allowed(&req.uid, &[])),
        ));
    }
    let Some(object) = req.object.as_ref().filter(|o| o.is_object()) else {
        return Ok(malformed(
            raw,
            format!("request.object is required for {}", req.operation),
        ));
    };
    let old = req.old_object.as_ref().filter(|o| o.is_object());
    if operation == Operation::Update && old.is_none() {
        return Ok(malformed(
            raw,
            "request.oldObject is required for UPDATE".into(),
        ));
    }
    let namespace = req
        .namespace
        .as_deref()
        .or_else(|| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
        })
        .unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .or(req.name.as_deref())
        .unwrap_or_default();
    let request = validate::Request {
        operation,
        namespace,
        name,
        object,
        old,
    };
    let mut verdict = Verdict::default();
    let mut reserve = None;
    match kind {
        "Hardware" => match validate::hardware::validate(&request, index, &mut verdict) {
            Ok(claims) => {
                if !req.dry_run.unwrap_or(false) && !name.is_empty() {
                    reserve = Some((request.key(), claims));
                }
            }
            Err(e) => {
                return Ok((
                    kind,
                    "error",
                    (
                        StatusCode::OK,
                        refuse(&req.uid, 503, "ServiceUnavailable", &e.to_string()),
                    ),
                ));
            }
        },
        "Template" => validate::template::validate(&request, &mut verdict),
        "WorkflowRuleSet" => validate::rules::validate(&request, &mut verdict),
        "Workflow" => validate::workflow::validate(&request, index, &mut verdict),
        "Machine" => validate::bmc::validate_machine(&request, &mut verdict),
        "Job" => validate::bmc::validate_job(&request, &mut verdict),
        "Task" => validate::bmc::validate_task(&request, &mut verdict),
        "WorkflowSet" => validate::rollout::validate(&request, index, &mut verdict),
        _ => validate::osie::validate(&request, &mut verdict),
    }
    // bmc.tinkerbell.org has one version: nothing is converted.
    if group_of(kind) == tink_api::GROUP {
        conversion_warnings(&req, object, old, &mut verdict);
    }
    if !verdict.allowed() {
        return Ok((
            kind,
            "denied",
            (StatusCode::OK, denial(&req.uid, kind, name, &verdict)),
        ));
    }
    if kind == "Hardware"
        && let Some(old) = old
        && approval::approves(old, object)
    {
        return Err(Box::new(PendingApproval {
            uid: req.uid,
            approval: Approval {
                user: req.user_info,
                namespace: namespace.to_string(),
                name: name.to_string(),
            },
            warnings: verdict.warnings,
            reserve,
        }));
    }
    if let Some((key, claims)) = &reserve {
        index.reserve(key, &claims.macs, &claims.ips);
    }
    Ok((
        kind,
        "allowed",
        (StatusCode::OK, review_allowed(&req.uid, &verdict.warnings)),
    ))
}

/// Adds what converting the object to v1alpha2 had to change (a clamped `lease_time`, ...).
/// On UPDATE only what the update introduces: a warning the stored object gives too was given
/// when it was written (Kubernetes' guidance for warnings).
fn conversion_warnings(req: &Request, object: &Value, old: Option<&Value>, verdict: &mut Verdict) {
    let requested_v1alpha1 = req
        .request_kind
        .as_ref()
        .unwrap_or(&req.kind)
        .version
        .eq("v1alpha1");
    let mut warnings = validate::conversion_warnings(object, requested_v1alpha1);
    if warnings.is_empty() {
        return;
    }
    if let Some(old) = old {
        let before = validate::conversion_warnings(old, requested_v1alpha1);
        warnings.retain(|w| !before.contains(w));
    }
    for w in warnings {
        if !verdict.warnings.contains(&w) {
            verdict.warn(w);
        }
    }
}

fn review_allowed(uid: &str, warnings: &[String]) -> Value {
    let mut response = json!({"uid": uid, "allowed": true});
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    review(response)
}

/// The most causes listed in one message (all are in `details.causes`).
const MAX_IN_MESSAGE: usize = 10;

fn denial(uid: &str, kind: &str, name: &str, verdict: &Verdict) -> Value {
    let items: Vec<String> = verdict
        .violations
        .iter()
        .take(MAX_IN_MESSAGE)
        .map(|x| {
            if x.field.is_empty() {
                x.message.clone()
            } else {
                format!("{}: {}", x.field, x.message)
            }
        })
        .collect();
    let mut list = items.join("; ");
    if verdict.violations.len() > MAX_IN_MESSAGE {
        list.push_str(&format!(
            "; and {} more",
            verdict.violations.len() - MAX_IN_MESSAGE
        ));
    }
    let group = group_of(kind);
    let message = format!("{kind}.{group} {name:?} is invalid: {list}");
    let causes: Vec<Value> = verdict
        .violations
        .iter()
        .map(|x| json!({"reason": x.reason.as_str(), "field": x.field, "message": x.message}))
        .collect();
    let mut response = json!({"uid": uid, "allowed": false, "status": {
        "status": "Failure", "code": 422, "reason": "Invalid", "message": message,
        "details": {"name": name, "group": group, "kind": kind, "causes": causes},
    }});
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    review(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(body: &Value, index: &Index) -> (StatusCode, Value) {
        handle(body.to_string().as_bytes(), index, &Metrics::default())
    }

    fn hw(name: &str, mac: &str) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": format!("uid-{name}"),
            "kind": {"group": "tinkerbell.org", "version": "v1alpha2", "kind": "Hardware"},
            "resource": {"group": "tinkerbell.org", "version": "v1alpha2", "resource": "hardware"},
            "namespace": "ns", "name": name, "operation": "CREATE",
            "object": {"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"networkInterfaces": {mac: {}}}},
        }})
    }

    #[test]
    fn allows_then_denies_a_duplicate_through_the_reservation() {
        let index = Index::default();
        index.mark_synced();
        let (code, out) = call(&hw("a", "aa:bb:cc:dd:ee:01"), &index);
        assert_eq!(code, StatusCode::OK);
        assert_eq!(out["response"], json!({"uid": "uid-a", "allowed": true}));
        // No watch event yet: the reservation refuses the second one.
        let (_, out) = call(&hw("b", "aa:bb:cc:dd:ee:01"), &index);
        let r = &out["response"];
        assert_eq!(r["uid"], "uid-b");
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 422);
        let msg = r["status"]["message"].as_str().unwrap();
        assert!(msg.starts_with("Hardware.tinkerbell.org \"b\" is invalid: spec.networkInterfaces[aa:bb:cc:dd:ee:01]: MAC aa:bb:cc:dd:ee:01 is already used by Hardware ns/a"), "{msg}");
        assert_eq!(
            r["status"]["details"]["causes"][0]["reason"],
            "FieldValueDuplicate"
        );
    }

    fn hw_v1alpha1(name: &str, lease_time: i64) -> Value {
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"interfaces": [{"dhcp": {"mac": "aa:bb:cc:dd:ee:10", "lease_time": lease_time,
                "ip": {"address": "10.9.0.1", "netmask": "255.255.255.0"}}}]}})
    }

    fn review_of(op: &str, version: &str, object: &Value, old: Option<&Value>) -> Value {
        let gvk = json!({"group": "tinkerbell.org", "version": version, "kind": "Hardware"});
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u", "kind": gvk, "requestKind": gvk,
            "resource": {"group": "tinkerbell.org", "version": version, "resource": "hardware"},
            "namespace": "ns", "name": object["metadata"]["name"], "operation": op,
            "object": object, "oldObject": old}})
    }

    fn warnings_of(out: &Value) -> Vec<String> {
        assert_eq!(out["response"]["allowed"], true, "{out}");
        serde_json::from_value(out["response"]["warnings"].clone()).unwrap_or_default()
    }

    const CLAMPED: &str = "spec.interfaces[0].dhcp.lease_time: 9999999999 is above the v1alpha2 maximum 2147483647 (int32 seconds); clamped to it";

    #[test]
    fn conversion_warnings_name_the_v1alpha1_field() {
        let index = Index::default();
        index.mark_synced();
        let big = hw_v1alpha1("big", 9_999_999_999);
        let (_, out) = call(&review_of("CREATE", "v1alpha1", &big, None), &index);
        assert_eq!(warnings_of(&out), vec![CLAMPED.to_string()]);
        // A value v1alpha2 holds: nothing to say.
        let fine = hw_v1alpha1("fine", 3600);
        let (_, out) = call(&review_of("CREATE", "v1alpha1", &fine, None), &index);
        assert_eq!(out["response"].get("warnings"), None, "{out}");
        // A denied request carries its warnings too (the API server passes them on).
        let mut dup = hw_v1alpha1("dup", 9_999_999_999);
        let first = dup["spec"]["interfaces"][0].clone();
        if let Some(list) = dup["spec"]["interfaces"].as_array_mut() {
            list.push(first);
        }
        let (_, out) = call(&review_of("CREATE", "v1alpha1", &dup, None), &index);
        assert_eq!(out["response"]["allowed"], false, "{out}");
        assert!(
            out["response"]["warnings"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w.as_str() == Some(CLAMPED))),
            "{out}"
        );
    }

    #[test]
    fn updates_warn_only_about_what_they_introduce() {
        let index = Index::default();
        index.mark_synced();
        let small = hw_v1alpha1("m", 3600);
        let big = hw_v1alpha1("m", 9_999_999_999);
        let (_, out) = call(&review_of("UPDATE", "v1alpha1", &big, Some(&small)), &index);
        assert_eq!(warnings_of(&out), vec![CLAMPED.to_string()]);
        let mut labelled = big.clone();
        labelled["metadata"]["labels"] = json!({"rack": "r1"});
        let (_, out) = call(
            &review_of("UPDATE", "v1alpha1", &labelled, Some(&big)),
            &index,
        );
        assert!(warnings_of(&out).is_empty(), "{out}");
        let mut other = big.clone();
        other["spec"]["interfaces"][0]["dhcp"]["lease_time"] = json!(8_888_888_888i64);
        let (_, out) = call(&review_of("UPDATE", "v1alpha1", &other, Some(&big)), &index);
        assert_eq!(warnings_of(&out).len(), 1, "{out}");
        assert!(warnings_of(&out)[0].contains("8888888888"), "{out}");
    }

    #[test]
    fn a_request_converted_by_the_api_server_still_warns() {
        // matchPolicy Equivalent with only v1alpha2 in the rules: the API server converts the
        // v1alpha1 object (through our conversion) and says so in requestKind.
        let index = Index::default();
        index.mark_synced();
        let big = hw_v1alpha1("big", 9_999_999_999);
        let converted =
            tink_api::conversion::convert(big, tink_api::v1alpha2::API_VERSION).expect("convert");
        let mut review = review_of("CREATE", "v1alpha2", &converted, None);
        review["request"]["requestKind"]["version"] = json!("v1alpha1");
        let (_, out) = call(&review, &index);
        assert_eq!(warnings_of(&out), vec![CLAMPED.to_string()]);
        // The same object written in v1alpha2 by the client: its own value, no warning.
        let (_, out) = call(&review_of("CREATE", "v1alpha2", &converted, None), &index);
        assert!(warnings_of(&out).is_empty(), "{out}");
    }

    #[test]
    fn dry_runs_reserve_nothing() {
        let index = Index::default();
        index.mark_synced();
        let mut dry = hw("a", "aa:bb:cc:dd:ee:01");
        dry["request"]["dryRun"] = json!(true);
        assert_eq!(call(&dry, &index).1["response"]["allowed"], true);
        assert_eq!(
            call(&hw("b", "aa:bb:cc:dd:ee:01"), &index).1["response"]["allowed"],
            true
        );
    }

    #[test]
    fn malformed_reviews_get_an_error_answer() {
        let index = Index::default();
        let (code, out) = handle(b"not json", &index, &Metrics::default());
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(out["message"].as_str().unwrap().contains("not JSON"));
        let (code, out) = call(&json!({"request": {"uid": "u1"}}), &index);
        assert_eq!(code, StatusCode::OK);
        assert_eq!(out["response"]["uid"], "u1");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 400);
        let mut no_object = hw("a", "aa:bb:cc:dd:ee:01");
        no_object["request"]["object"] = Value::Null;
        let (_, out) = call(&no_object, &index);
        assert!(
            out["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .contains("request.object is required")
        );
        let mut wrong_version = hw("a", "aa:bb:cc:dd:ee:01");
        wrong_version["apiVersion"] = json!("admission.k8s.io/v1beta1");
        assert_eq!(
            call(&wrong_version, &index).1["response"]["status"]["code"],
            400
        );
    }

    #[test]
    fn not_synced_is_a_retryable_refusal() {
        let index = Index::default();
        let (_, out) = call(&hw("a", "aa:bb:cc:dd:ee:01"), &index);
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 503);
    }

    #[test]
    fn bmc_kinds_are_checked_and_named_by_their_group() {
        let index = Index::default();
        let machine = |group: &str, ns: &str| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "m-uid",
                "kind": {"group": group, "version": "v1alpha1", "kind": "Machine"},
                "resource": {"group": group, "version": "v1alpha1", "resource": "machines"},
                "namespace": "team-a", "name": "m", "operation": "CREATE",
                "object": {"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
                    "metadata": {"name": "m", "namespace": "team-a"},
                    "spec": {"connection": {"host": "10.0.0.5",
                        "authSecretRef": {"name": "auth", "namespace": ns}}}},
            }})
        };
        let metrics = Metrics::default();
        let run = |review: &Value| handle(review.to_string().as_bytes(), &index, &metrics).1;
        assert_eq!(
            run(&machine("bmc.tinkerbell.org", "team-a"))["response"]["allowed"],
            true
        );
        let out = run(&machine("bmc.tinkerbell.org", "kube-system"));
        let r = &out["response"];
        assert_eq!(r["allowed"], false, "{out}");
        assert_eq!(r["status"]["code"], 422);
        let msg = r["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("Machine.bmc.tinkerbell.org \"m\" is invalid: spec.connection.authSecretRef.namespace: Secret kube-system/auth is not in the Machine's namespace team-a"),
            "{msg}"
        );
        assert_eq!(r["status"]["details"]["group"], "bmc.tinkerbell.org");
        assert_eq!(
            r["status"]["details"]["causes"][0]["reason"],
            "FieldValueForbidden"
        );
        assert_eq!(metrics.admissions_of("Machine", "denied"), 1);
        assert_eq!(metrics.admissions_of("Machine", "allowed"), 1);
        // A Machine of another group is not ours: allowed, unchecked.
        let out = run(&machine("cluster.x-k8s.io", "kube-system"));
        assert_eq!(out["response"]["allowed"], true, "{out}");
        assert_eq!(metrics.admissions_of("unknown", "allowed"), 1);
    }

    fn discovered(approved: Option<bool>) -> Value {
        let mut hw = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "discovery-52-54-00-0b-5e-02", "namespace": "tink"},
            "spec": {"networkInterfaces": {"52:54:00:0b:5e:02": {}}}});
        if let Some(a) = approved {
            hw["spec"]["discovery"] = json!({"approved": a, "address": "10.0.2.15"});
        }
        hw
    }

    fn update_by(user: &str, old: &Value, new: &Value) -> Value {
        let mut r = review_of("UPDATE", "v1alpha2", new, Some(old));
        r["request"]["namespace"] = json!("tink");
        r["request"]["userInfo"] = json!({"username": user, "uid": "u-1",
            "groups": ["system:authenticated"]});
        r
    }

    #[test]
    fn approving_without_api_access_is_refused() {
        let index = Index::default();
        index.mark_synced();
        let waiting = discovered(Some(false));
        let metrics = Metrics::default();
        for new in [discovered(Some(true)), discovered(None)] {
            let (code, out) = handle(
                update_by("alice", &waiting, &new).to_string().as_bytes(),
                &index,
                &metrics,
            );
            assert_eq!(code, StatusCode::OK);
            let r = &out["response"];
            assert_eq!(r["allowed"], false, "{out}");
            assert_eq!(r["status"]["code"], 403);
            assert_eq!(r["status"]["reason"], "Forbidden");
            let msg = r["status"]["message"].as_str().unwrap_or_default();
            assert!(
                msg.starts_with("Hardware.tinkerbell.org \"discovery-52-54-00-0b-5e-02\" is forbidden: spec.discovery.approved: user \"alice\" may not approve hardware \"discovery-52-54-00-0b-5e-02\" in namespace \"tink\": this webhook has no access to the Kubernetes API"),
                "{msg}"
            );
            assert_eq!(
                r["status"]["details"]["causes"][0]["field"],
                "spec.discovery.approved"
            );
        }
        assert_eq!(metrics.admissions_of("Hardware", "denied"), 2);
        // No approval in it: allowed without any check.
        for (old, new) in [
            (discovered(Some(true)), discovered(Some(false))),
            (discovered(Some(false)), discovered(Some(false))),
            (discovered(None), discovered(None)),
            (discovered(Some(true)), discovered(None)),
        ] {
            let (_, out) = call(&update_by("alice", &old, &new), &index);
            assert_eq!(out["response"]["allowed"], true, "{old} -> {new}: {out}");
        }
        // Creating an approved one is as powerful as creating any Hardware.
        let mut create = update_by("alice", &Value::Null, &discovered(Some(true)));
        create["request"]["operation"] = json!("CREATE");
        create["request"]["oldObject"] = Value::Null;
        assert_eq!(call(&create, &index).1["response"]["allowed"], true);
    }

    #[test]
    fn a_v1alpha1_update_cannot_approve_through_the_annotation() {
        let index = Index::default();
        index.mark_synced();
        let v1 = |o: Value| {
            tink_api::conversion::convert(o, tink_api::v1alpha1::API_VERSION).expect("down")
        };
        let old = v1(discovered(Some(false)));
        let annotation = tink_api::CONVERSION_DATA_ANNOTATION;
        let raw = old["metadata"]["annotations"][annotation]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(raw.contains("\"approved\":false"), "{raw}");
        let mut edited = old.clone();
        edited["metadata"]["annotations"][annotation] =
            json!(raw.replace("\"approved\":false", "\"approved\":true"));
        let mut dropped = old.clone();
        dropped["metadata"]["annotations"] = json!({});
        for new in [edited, dropped] {
            let mut r = update_by("alice", &old, &new);
            r["request"]["kind"]["version"] = json!("v1alpha1");
            r["request"]["requestKind"]["version"] = json!("v1alpha1");
            let (_, out) = call(&r, &index);
            assert_eq!(out["response"]["allowed"], false, "{out}");
            assert_eq!(out["response"]["status"]["code"], 403, "{out}");
        }
        // Other edits of a v1alpha1 discovered Hardware keep its annotation and pass.
        let mut labelled = old.clone();
        labelled["metadata"]["labels"] = json!({"rack": "r1"});
        let mut r = update_by("alice", &old, &labelled);
        r["request"]["kind"]["version"] = json!("v1alpha1");
        assert_eq!(call(&r, &index).1["response"]["allowed"], true);
    }

    #[test]
    fn other_kinds_deletes_and_subresources_pass() {
        let index = Index::default();
        let mut other = hw("a", "x");
        other["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
        assert_eq!(call(&other, &index).1["response"]["allowed"], true);
        let mut del = hw("a", "x");
        del["request"]["operation"] = json!("DELETE");
        assert_eq!(call(&del, &index).1["response"]["allowed"], true);
        let mut status = hw("a", "x");
        status["request"]["subResource"] = json!("status");
        assert_eq!(call(&status, &index).1["response"]["allowed"], true);
    }
}
