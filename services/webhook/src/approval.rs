//! Approving a discovered machine is an RBAC permission of its own: the verb `approve` on
//! `hardware.tinkerbell.org` (the Hardware's name, in its namespace), as Kubernetes' CSR
//! approval needs `approve` on `signers`. `update` alone edits a Hardware but cannot make a
//! discovered one approved.
//!
//! A Hardware the controller created for a machine that enrolled itself has `spec.discovery`
//! with `approved: false`; it gets no Workflow until approved. An UPDATE whose old object is not
//! approved and whose new object is (`spec.discovery.approved` set true, or `spec.discovery`
//! removed: a Hardware without it needs no approval) is allowed only if a SubjectAccessReview
//! for the request's `userInfo` (user name, uid, groups, extra) says `approve` is granted. Both
//! objects are compared in their v1alpha2 form (a v1alpha1 object's discovery lives in the
//! conversion annotation), so a v1alpha1 client cannot approve by editing or dropping that
//! annotation. Un-approving and creating need no special permission (whoever may create a
//! Hardware may create an approved one). Without API access ([`crate::AppState::approver`]
//! unset) or when the review cannot be made, approval is refused: never allowed by default.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tink_kube_access::{Access, AccessError, Permission, User};

use crate::validate::as_v1alpha2;

/// The verb approving needs.
pub const APPROVE_VERB: &str = "approve";
/// The resource it is checked on (group `tinkerbell.org`).
pub const HARDWARE_RESOURCE: &str = "hardware";
/// The field approval is.
pub const FIELD: &str = "spec.discovery.approved";

/// AdmissionReview `request.userInfo`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name.
    #[serde(default)]
    pub username: String,
    /// The uid.
    #[serde(default)]
    pub uid: String,
    /// The groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes (scopes, the credential's id).
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Whether a Hardware object (either version) is approved, read in its v1alpha2 form: true
/// without `spec.discovery`, else `spec.discovery.approved`. `None` when it does not convert
/// or its discovery does not read.
pub fn approved(obj: &Value) -> Option<bool> {
    let v2 = as_v1alpha2(obj).ok()?;
    match v2.pointer("/spec/discovery") {
        None | Some(Value::Null) => Some(true),
        Some(d) => serde_json::from_value::<tink_api::v1alpha2::Discovery>(d.clone())
            .ok()
            .map(|d| d.approved),
    }
}

/// Whether an UPDATE from `old` to `new` approves the Hardware. Fails closed: a new object
/// whose approval does not read counts as approved, an old one as not approved.
pub fn approves(old: &Value, new: &Value) -> bool {
    !approved(old).unwrap_or(false) && approved(new).unwrap_or(true)
}

/// An approval waiting for its SubjectAccessReview.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    /// Who asked.
    pub user: UserInfo,
    /// The Hardware's namespace.
    pub namespace: String,
    /// The Hardware's name.
    pub name: String,
}

/// Why an approval was refused: the message, and whether retrying may help (503) or not (403).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status code of the denial.
    pub code: u16,
    /// The message, starting with [`FIELD`].
    pub message: String,
}

impl Approval {
    fn what(&self) -> String {
        format!(
            "user {:?} may not approve hardware {:?} in namespace {:?}",
            self.user.username, self.name, self.namespace
        )
    }

    /// The refusal when the webhook has no access to the Kubernetes API.
    pub fn unchecked(&self) -> Refusal {
        Refusal {
            code: 403,
            message: format!(
                "{FIELD}: {}: this webhook has no access to the Kubernetes API to check RBAC (started without an approver), so approving discovered machines is refused",
                self.what()
            ),
        }
    }
}

/// Checks approvals with SubjectAccessReviews.
pub struct Approver {
    access: Access,
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approver").finish_non_exhaustive()
    }
}

impl Approver {
    /// Asks `client`'s API server (the webhook's own identity creates the reviews: it needs
    /// `create` on `subjectaccessreviews`), remembering granted permissions for `ttl`.
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        Approver {
            access: Access::new(client, ttl),
        }
    }

    /// Allowed when RBAC grants the user `approve` on the Hardware; the refusal otherwise.
    pub async fn check(&self, approval: &Approval) -> Result<(), Refusal> {
        let user = &approval.user;
        if user.username.is_empty() && user.groups.is_empty() {
            return Err(Refusal {
                code: 403,
                message: format!(
                    "{FIELD}: the AdmissionReview names no user (request.userInfo is empty), so approving hardware {:?} in namespace {:?} is refused",
                    approval.name, approval.namespace
                ),
            });
        }
        let permission = Permission::tink(
            APPROVE_VERB,
            HARDWARE_RESOURCE,
            &approval.namespace,
            &approval.name,
        );
        let subject = User {
            name: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
        };
        match self.access.authorize(&subject, &permission).await {
            Ok(()) => Ok(()),
            Err(AccessError::Forbidden { reason, .. }) => Err(Refusal {
                code: 403,
                message: format!(
                    "{FIELD}: {}: approving a discovered machine needs the verb {APPROVE_VERB} on {HARDWARE_RESOURCE}.{} (RBAC), not only update{reason}",
                    approval.what(),
                    tink_kube_access::GROUP
                ),
            }),
            Err(e) => Err(Refusal {
                code: 503,
                message: format!(
                    "{FIELD}: cannot check whether user {:?} may approve hardware {:?} in namespace {:?}, so the approval is refused: {e}",
                    user.username, approval.name, approval.namespace
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v2(discovery: Option<Value>) -> Value {
        let mut o = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "d", "namespace": "ns"}, "spec": {}});
        if let Some(d) = discovery {
            o["spec"]["discovery"] = d;
        }
        o
    }

    #[test]
    fn approving_is_not_approved_to_approved() {
        let waiting = v2(Some(json!({"approved": false, "address": "10.0.0.9"})));
        let defaulted = v2(Some(json!({"address": "10.0.0.9"})));
        let yes = v2(Some(json!({"approved": true})));
        let plain = v2(None);
        assert!(approves(&waiting, &yes));
        assert!(approves(&defaulted, &yes));
        // Removing spec.discovery approves too.
        assert!(approves(&waiting, &plain));
        assert!(!approves(&yes, &waiting), "un-approving");
        assert!(!approves(&yes, &yes));
        assert!(!approves(&plain, &plain));
        assert!(!approves(&waiting, &waiting));
        // A discovery that does not read is not approved before, approved after (fail closed).
        let broken = v2(Some(json!({"approved": "yes"})));
        assert_eq!(approved(&broken), None);
        assert!(approves(&broken, &yes));
        assert!(approves(&waiting, &broken));
    }

    #[test]
    fn v1alpha1_objects_are_read_through_their_annotation() {
        let waiting = v2(Some(json!({"approved": false})));
        let v1 = tink_api::conversion::convert(waiting.clone(), tink_api::v1alpha1::API_VERSION)
            .expect("down");
        assert_eq!(v1["apiVersion"], "tinkerbell.org/v1alpha1");
        assert_eq!(approved(&v1), Some(false));
        // Dropping the annotation drops the discovery: that approves.
        let mut bare = v1.clone();
        bare["metadata"]["annotations"] = json!({});
        assert_eq!(approved(&bare), Some(true));
        assert!(approves(&v1, &bare));
    }
}
