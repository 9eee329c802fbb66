//! `TokenReview` and `SubjectAccessReview`: authentication answered from a static token file,
//! authorization evaluated against the RBAC objects kube-lite stores.
//!
//! These serve *other* components that delegate authentication and authorization to the API
//! server (as tink-server does for log reading). kube-lite itself still authorizes nothing:
//! every request it receives is allowed as if admin. The token file does name the user of a
//! request whose `Authorization: Bearer <token>` it knows, in the `userInfo` of the
//! AdmissionReviews that request causes ([`requester`]), so an admission webhook can ask a
//! SubjectAccessReview about that user (as tink-webhook does for approving a discovered
//! Hardware); a request with no token, an unknown token or the admin token is
//! [`ADMIN_USER`] in `system:masters`. For tests and the development stack only.
//!
//! The token file has kube-apiserver's `--token-auth-file` format: one CSV line per token,
//! `token,user,uid[,"group1,group2"]`; blank lines and lines starting with `#` are skipped.
//! An authenticated user also gets the group `system:authenticated`, as kube-apiserver adds it.
//! The token of the kubeconfig kube-lite writes ([`ADMIN_TOKEN`]) is always known, as the user
//! [`ADMIN_USER`] in `system:masters` (unless the token file names it otherwise): whoever holds
//! that kubeconfig is admin anyway, and so tools that delegate to kube-lite accept it.
//!
//! The evaluator follows kube-apiserver's RBAC authorizer (`pkg/registry/rbac/validation`):
//! ClusterRoleBindings grant their ClusterRole everywhere; RoleBindings grant their Role or
//! ClusterRole in their namespace; rules match on `apiGroups`, `resources` (`*`,
//! `resource/subresource`, `*/subresource`), `verbs` and `resourceNames`, or on
//! `nonResourceURLs` (exact, or a prefix ending in `*`). Subjects are `User`, `Group` and
//! `ServiceAccount` (the user `system:serviceaccount:<namespace>:<name>`). The group
//! `system:masters` is allowed everything. ClusterRole aggregation is not implemented.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::server::Core;

/// The group of users allowed everything, as in kube-apiserver.
pub const MASTERS_GROUP: &str = "system:masters";
/// The group every authenticated user belongs to.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The bearer token of the kubeconfig kube-lite writes.
pub const ADMIN_TOKEN: &str = "kube-lite";
/// The user [`ADMIN_TOKEN`] authenticates as.
pub const ADMIN_USER: &str = "kube-lite-admin";

/// A user the token file names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name.
    pub name: String,
    /// The user's uid.
    pub uid: String,
    /// The groups from the file (without `system:authenticated`).
    pub groups: Vec<String>,
}

/// The tokens of a token file, by token.
#[derive(Debug, Clone, Default)]
pub struct Tokens(HashMap<String, UserInfo>);

/// A malformed token file.
#[derive(Debug, thiserror::Error)]
#[error("token file {path}: {message}")]
pub struct TokenFileError {
    /// The file.
    pub path: String,
    /// What is wrong (with the line number).
    pub message: String,
}

impl Tokens {
    /// Reads a token file.
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| TokenFileError {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::parse(&text).map_err(|message| TokenFileError {
            path: path.display().to_string(),
            message,
        })
    }

    /// Parses the CSV text of a token file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut tokens = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = csv_fields(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            if fields.len() < 3 {
                return Err(format!(
                    "line {}: expected token,user,uid[,\"group1,group2\"], got {} fields",
                    i + 1,
                    fields.len()
                ));
            }
            if fields[0].is_empty() || fields[1].is_empty() {
                return Err(format!("line {}: empty token or user", i + 1));
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let user = UserInfo {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
            };
            if tokens.insert(fields[0].clone(), user).is_some() {
                return Err(format!("line {}: duplicate token", i + 1));
            }
        }
        Ok(Tokens(tokens))
    }

    /// These tokens plus [`ADMIN_TOKEN`] as [`ADMIN_USER`] in `system:masters`, unless they
    /// name that token already.
    pub fn with_admin(mut self) -> Self {
        self.0
            .entry(ADMIN_TOKEN.to_string())
            .or_insert_with(|| UserInfo {
                name: ADMIN_USER.into(),
                uid: ADMIN_USER.into(),
                groups: vec![MASTERS_GROUP.into()],
            });
        self
    }

    /// The user of a token.
    pub fn user(&self, token: &str) -> Option<&UserInfo> {
        self.0.get(token)
    }
}

/// The user an AdmissionReview names for a request: the user of its bearer token when the token
/// file maps the token to one, with `system:authenticated` added; [`ADMIN_USER`] in
/// `system:masters` for the admin token (unless the token file names it otherwise) and for a
/// request with no token or a token the file does not know. kube-lite authorizes nothing
/// itself: this only tells admission webhooks who asked, so they can ask a SubjectAccessReview.
pub(crate) fn requester(tokens: &Tokens, headers: &http::HeaderMap) -> Requester {
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty());
    match token.and_then(|t| tokens.user(t)) {
        Some(user) => {
            let mut groups = user.groups.clone();
            if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
                groups.push(AUTHENTICATED_GROUP.to_string());
            }
            Requester {
                name: user.name.clone(),
                uid: user.uid.clone(),
                groups,
            }
        }
        None => Requester::admin(),
    }
}

/// Who made the request being served (the `userInfo` of its AdmissionReviews).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requester {
    /// The user name.
    pub(crate) name: String,
    /// The uid (empty when unknown).
    pub(crate) uid: String,
    /// The groups, `system:authenticated` included.
    pub(crate) groups: Vec<String>,
}

impl Requester {
    /// [`ADMIN_USER`] in `system:masters`: what kube-lite treats every request as.
    pub(crate) fn admin() -> Self {
        Requester {
            name: ADMIN_USER.to_string(),
            uid: String::new(),
            groups: vec![MASTERS_GROUP.to_string(), AUTHENTICATED_GROUP.to_string()],
        }
    }

    /// AdmissionReview `request.userInfo`.
    pub(crate) fn user_info(&self) -> Value {
        let mut info = json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = json!(self.uid);
        }
        info
    }
}

tokio::task_local! {
    static REQUESTER: Requester;
}

/// Runs `f` (one request) as `requester`; [`current_requester`] reads it.
pub(crate) async fn as_requester<T>(requester: Requester, f: impl Future<Output = T>) -> T {
    REQUESTER.scope(requester, f).await
}

/// The user of the request being served; admin outside [`as_requester`].
pub(crate) fn current_requester() -> Requester {
    REQUESTER
        .try_with(Requester::clone)
        .unwrap_or_else(|_| Requester::admin())
}

/// Splits one CSV line (fields may be double-quoted, `""` is a quote inside one).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            (false, '"') => return Err("a quote inside an unquoted field".into()),
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err("an unterminated quote".into());
    }
    fields.push(field);
    Ok(fields)
}

/// What a SubjectAccessReview asks about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// The user name.
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// The verb (`get`, `list`, ...).
    pub verb: String,
    /// The API group (`""` for core).
    pub group: String,
    /// The resource (`workflows`); empty for a non-resource request.
    pub resource: String,
    /// The subresource (`log`), or empty.
    pub subresource: String,
    /// The namespace, empty for cluster-scoped resources or all namespaces.
    pub namespace: String,
    /// The object's name, or empty.
    pub name: String,
    /// The path of a non-resource request (`/healthz`), when `resource` is empty.
    pub path: Option<String>,
}

/// The RBAC objects a decision reads.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Every Role.
    pub roles: Vec<Role>,
    /// Every ClusterRole.
    pub cluster_roles: Vec<ClusterRole>,
    /// Every RoleBinding.
    pub role_bindings: Vec<RoleBinding>,
    /// Every ClusterRoleBinding.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

/// An authorization answer: allowed, with the reason (what allowed it, or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// The binding and role that allowed it, or a note that none did.
    pub reason: String,
}

impl Policy {
    /// Decides `attrs`.
    pub fn authorize(&self, attrs: &Attributes) -> Decision {
        if attrs.groups.iter().any(|g| g == MASTERS_GROUP) {
            return Decision {
                allowed: true,
                reason: format!("allowed: member of the group {MASTERS_GROUP}"),
            };
        }
        for binding in &self.cluster_role_bindings {
            let binding_name = binding.metadata.name.as_deref().unwrap_or_default();
            if binding.role_ref.kind != "ClusterRole" {
                continue;
            }
            let Some(subject) = binding
                .subjects
                .iter()
                .flatten()
                .find(|s| applies_to(s, attrs, ""))
            else {
                continue;
            };
            if self.cluster_role_allows(&binding.role_ref.name, attrs) {
                return Decision {
                    allowed: true,
                    reason: format!(
                        "RBAC: allowed by ClusterRoleBinding \"{binding_name}\" of ClusterRole \"{}\" to {} \"{}\"",
                        binding.role_ref.name, subject.kind, subject.name
                    ),
                };
            }
        }
        if !attrs.namespace.is_empty() {
            for binding in &self.role_bindings {
                let ns = binding.metadata.namespace.as_deref().unwrap_or_default();
                if ns != attrs.namespace {
                    continue;
                }
                let Some(subject) = binding
                    .subjects
                    .iter()
                    .flatten()
                    .find(|s| applies_to(s, attrs, ns))
                else {
                    continue;
                };
                let role = &binding.role_ref;
                let allows = match role.kind.as_str() {
                    "ClusterRole" => self.cluster_role_allows(&role.name, attrs),
                    "Role" => self.roles.iter().any(|r| {
                        r.metadata.namespace.as_deref() == Some(ns)
                            && r.metadata.name.as_deref() == Some(role.name.as_str())
                            && rules_allow(r.rules.iter().flatten(), attrs)
                    }),
                    _ => false,
                };
                if allows {
                    return Decision {
                        allowed: true,
                        reason: format!(
                            "RBAC: allowed by RoleBinding \"{}/{ns}\" of {} \"{}\" to {} \"{}\"",
                            binding.metadata.name.as_deref().unwrap_or_default(),
                            role.kind,
                            role.name,
                            subject.kind,
                            subject.name
                        ),
                    };
                }
            }
        }
        Decision {
            allowed: false,
            reason: "no RBAC binding grants it".into(),
        }
    }

    fn cluster_role_allows(&self, name: &str, attrs: &Attributes) -> bool {
        self.cluster_roles.iter().any(|r| {
            r.metadata.name.as_deref() == Some(name) && rules_allow(r.rules.iter().flatten(), attrs)
        })
    }
}

/// Whether a binding's subject is the user of `attrs`; `namespace` is the binding's (the
/// default namespace of a ServiceAccount subject in a RoleBinding).
fn applies_to(subject: &Subject, attrs: &Attributes, namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == attrs.user,
        "Group" => attrs.groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = subject
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            !ns.is_empty() && attrs.user == format!("system:serviceaccount:{ns}:{}", subject.name)
        }
        _ => false,
    }
}

fn rules_allow<'a>(mut rules: impl Iterator<Item = &'a PolicyRule>, attrs: &Attributes) -> bool {
    rules.any(|rule| rule_allows(rule, attrs))
}

fn has(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v == "*" || v == wanted)
}

/// One rule against one request, as kube-apiserver's `RuleAllows`.
fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !has(&rule.verbs, &attrs.verb) {
        return false;
    }
    if attrs.resource.is_empty() {
        let Some(path) = &attrs.path else {
            return false;
        };
        return rule.non_resource_urls.iter().flatten().any(|url| {
            url == "*"
                || url == path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        });
    }
    if !has(rule.api_groups.as_deref().unwrap_or_default(), &attrs.group) {
        return false;
    }
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let resource_ok = rule.resources.iter().flatten().any(|r| {
        r == "*"
            || *r == combined
            || (!attrs.subresource.is_empty()
                && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
    });
    if !resource_ok {
        return false;
    }
    match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => !attrs.name.is_empty() && names.contains(&attrs.name),
    }
}

/// Reads the stored RBAC objects (objects that do not decode as their type are skipped).
fn policy(core: &Core) -> Policy {
    fn all<T: serde::de::DeserializeOwned>(state: &crate::store::State, plural: &str) -> Vec<T> {
        state
            .list(&(RBAC_GROUP.to_string(), plural.to_string()), None)
            .iter()
            .filter_map(|v| serde_json::from_value(Value::clone(v)).ok())
            .collect()
    }
    let state = core.lock();
    Policy {
        roles: all(&state, "roles"),
        cluster_roles: all(&state, "clusterroles"),
        role_bindings: all(&state, "rolebindings"),
        cluster_role_bindings: all(&state, "clusterrolebindings"),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn str_at<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or_default()
}

/// POST `/apis/authentication.k8s.io/v1/tokenreviews`.
pub(crate) fn token_review(core: &Core, review: Value) -> ApiResult<Value> {
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let status = match core.tokens.user(token) {
        Some(user) if !token.is_empty() => {
            let mut groups = user.groups.clone();
            groups.push(AUTHENTICATED_GROUP.to_string());
            json!({
                "authenticated": true,
                "user": {"username": user.name, "uid": user.uid, "groups": groups},
                "audiences": review["spec"]["audiences"].clone(),
            })
        }
        _ => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    Ok(answer(
        review,
        "authentication.k8s.io/v1",
        "TokenReview",
        status,
    ))
}

/// POST `/apis/authorization.k8s.io/v1/subjectaccessreviews`.
pub(crate) fn subject_access_review(core: &Core, review: Value) -> ApiResult<Value> {
    let spec = &review["spec"];
    let user = str_at(spec, "user");
    let groups = strings(&spec["groups"]);
    if user.is_empty() && groups.is_empty() {
        return Err(ApiError::bad_request(
            "SubjectAccessReview.authorization.k8s.io is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let resource = &spec["resourceAttributes"];
    let non_resource = &spec["nonResourceAttributes"];
    let attrs = if resource.is_object() {
        Attributes {
            verb: str_at(resource, "verb").to_string(),
            group: str_at(resource, "group").to_string(),
            resource: str_at(resource, "resource").to_string(),
            subresource: str_at(resource, "subresource").to_string(),
            namespace: str_at(resource, "namespace").to_string(),
            name: str_at(resource, "name").to_string(),
            ..Default::default()
        }
    } else if non_resource.is_object() {
        Attributes {
            verb: str_at(non_resource, "verb").to_string(),
            path: Some(str_at(non_resource, "path").to_string()),
            ..Default::default()
        }
    } else {
        return Err(ApiError::bad_request(
            "SubjectAccessReview.authorization.k8s.io is invalid: spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    };
    let attrs = Attributes {
        user: user.to_string(),
        groups,
        ..attrs
    };
    let decision = policy(core).authorize(&attrs);
    let status = json!({"allowed": decision.allowed, "reason": decision.reason});
    Ok(answer(
        review,
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        status,
    ))
}

fn answer(mut review: Value, api_version: &str, kind: &str, status: Value) -> Value {
    review["apiVersion"] = json!(api_version);
    review["kind"] = json!(kind);
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = status;
    review
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy_from(yaml: &str) -> Policy {
        let mut p = Policy::default();
        for doc in yaml.split("\n---\n") {
            let v: Value = serde_yaml::from_str(doc).expect("yaml");
            match v["kind"].as_str() {
                Some("Role") => p.roles.push(serde_json::from_value(v).expect("role")),
                Some("ClusterRole") => p
                    .cluster_roles
                    .push(serde_json::from_value(v).expect("cluster role")),
                Some("RoleBinding") => p
                    .role_bindings
                    .push(serde_json::from_value(v).expect("binding")),
                Some("ClusterRoleBinding") => p
                    .cluster_role_bindings
                    .push(serde_json::from_value(v).expect("cluster binding")),
                other => panic!("unexpected kind {other:?}"),
            }
        }
        p
    }

    const POLICY: &str = r#"
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: log-reader}
rules:
- apiGroups: [tinkerbell.org]
  resources: [workflows, workflows/log]
  verbs: [get]
---
kind: RoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: alice-logs, namespace: a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: log-reader}
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
- {kind: Group, name: operators, apiGroup: rbac.authorization.k8s.io}
- {kind: ServiceAccount, name: robot}
---
kind: Role
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: one-workflow, namespace: b}
rules:
- apiGroups: [tinkerbell.org]
  resources: [workflows/log]
  resourceNames: [wf1]
  verbs: [get]
- apiGroups: ["*"]
  resources: ["*/status"]
  verbs: [list]
---
kind: RoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: bob-one, namespace: b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: one-workflow}
subjects:
- {kind: User, name: bob}
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: everything}
rules:
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["*"]
- nonResourceURLs: ["/healthz", "/logs/*"]
  verbs: [get]
---
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: root}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: everything}
subjects:
- {kind: ServiceAccount, name: admin, namespace: kube-system}
"#;

    fn log(user: &str, groups: &[&str], ns: &str, name: &str) -> Attributes {
        Attributes {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            verb: "get".into(),
            group: "tinkerbell.org".into(),
            resource: "workflows".into(),
            subresource: "log".into(),
            namespace: ns.into(),
            name: name.into(),
            path: None,
        }
    }

    #[test]
    fn bindings_grant_only_their_subjects_in_their_namespace() {
        let p = policy_from(POLICY);
        let cases = [
            (log("alice", &[], "a", "wf1"), true),
            (log("alice", &[], "b", "wf1"), false),
            (log("carol", &["operators"], "a", "x"), true),
            (log("carol", &["developers"], "a", "x"), false),
            (log("system:serviceaccount:a:robot", &[], "a", "x"), true),
            (log("system:serviceaccount:b:robot", &[], "b", "x"), false),
            (log("system:serviceaccount:b:robot", &[], "a", "x"), false),
            (log("bob", &[], "b", "wf1"), true),
            (log("bob", &[], "b", "wf2"), false),
            (log("bob", &[], "b", ""), false),
            (log("bob", &[], "a", "wf1"), false),
            (
                log("system:serviceaccount:kube-system:admin", &[], "z", "q"),
                true,
            ),
            (log("nobody", &[MASTERS_GROUP], "z", "q"), true),
            (log("nobody", &[], "z", "q"), false),
        ];
        for (attrs, want) in cases {
            let d = p.authorize(&attrs);
            assert_eq!(d.allowed, want, "{attrs:?}: {}", d.reason);
        }
    }

    #[test]
    fn rules_match_verbs_groups_and_subresources() {
        let p = policy_from(POLICY);
        let alice = log("alice", &[], "a", "wf1");
        // The subresource is its own resource: `workflows` alone does not grant `workflows/log`.
        let status = Attributes {
            subresource: "status".into(),
            ..alice.clone()
        };
        assert!(!p.authorize(&status).allowed);
        let whole = Attributes {
            subresource: String::new(),
            ..alice.clone()
        };
        assert!(p.authorize(&whole).allowed);
        let list = Attributes {
            verb: "list".into(),
            ..alice.clone()
        };
        assert!(!p.authorize(&list).allowed);
        let other_group = Attributes {
            group: "apps".into(),
            ..alice.clone()
        };
        assert!(!p.authorize(&other_group).allowed);
        // `*/status` matches any resource's status subresource, not the resource itself.
        let bob_status = Attributes {
            verb: "list".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            subresource: "status".into(),
            name: String::new(),
            ..log("bob", &[], "b", "")
        };
        assert!(p.authorize(&bob_status).allowed);
        let bob_main = Attributes {
            subresource: String::new(),
            ..bob_status.clone()
        };
        assert!(!p.authorize(&bob_main).allowed);
        let d = p.authorize(&alice);
        assert!(
            d.reason.contains("RoleBinding \"alice-logs/a\"") && d.reason.contains("log-reader"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let p = policy_from(POLICY);
        let admin = |path: &str| Attributes {
            user: "system:serviceaccount:kube-system:admin".into(),
            verb: "get".into(),
            path: Some(path.into()),
            ..Default::default()
        };
        assert!(p.authorize(&admin("/healthz")).allowed);
        assert!(p.authorize(&admin("/logs/x")).allowed);
        assert!(!p.authorize(&admin("/metrics")).allowed);
        let alice = Attributes {
            user: "alice".into(),
            ..admin("/healthz")
        };
        assert!(!p.authorize(&alice).allowed);
    }

    fn admin_name(t: &Tokens) -> String {
        t.user(ADMIN_TOKEN)
            .map(|u| u.name.clone())
            .unwrap_or_default()
    }

    #[test]
    fn token_files_parse_like_kube_apiserver() {
        let t =
            Tokens::parse("# comment\n\nt1,alice,u1\nt2,bob,u2,\"ops,dev\"\nt3,carol,u3,solo\n")
                .expect("parses");
        assert_eq!(
            t.user("t2"),
            Some(&UserInfo {
                name: "bob".into(),
                uid: "u2".into(),
                groups: vec!["ops".into(), "dev".into()]
            })
        );
        assert_eq!(t.user("t1").map(|u| u.groups.len()), Some(0));
        assert_eq!(
            t.user("t3").map(|u| u.groups.clone()),
            Some(vec!["solo".into()])
        );
        assert_eq!(t.user("nope"), None);
        assert_eq!(t.user(ADMIN_TOKEN), None);
        let admin = t.with_admin();
        assert_eq!(
            admin.user(ADMIN_TOKEN).map(|u| u.groups.clone()),
            Some(vec![MASTERS_GROUP.to_string()])
        );
        let named = Tokens::parse("kube-lite,someone,u\n").unwrap().with_admin();
        assert_eq!(admin_name(&named), "someone");
        assert!(Tokens::parse("t1,alice").unwrap_err().contains("line 1"));
        assert!(
            Tokens::parse("t1,alice,u\nt1,bob,u")
                .unwrap_err()
                .contains("duplicate")
        );
        assert!(
            Tokens::parse("t1,alice,u,\"ops")
                .unwrap_err()
                .contains("quote")
        );
    }
}
