//! Workflow: the spec is immutable once the Workflow left `Pending` (the controller has
//! rendered and dispatched it; a changed spec would describe a run that never happened).
//! References that do not resolve yet are warnings, not denials: a Workflow may be created
//! before its Hardware or Template and waits for them.

use serde_json::Value;
use tink_api::v1alpha2::{Workflow, WorkflowState};

use super::{Operation, Reason, Request, Verdict, as_v1alpha2, deny_parse, is_v1alpha1};
use crate::index::Index;

fn typed(obj: &Value, v: &mut Verdict) -> Option<Workflow> {
    let converted = match as_v1alpha2(obj) {
        Ok(c) => c,
        Err(e) => {
            v.deny(
                "",
                Reason::Invalid,
                format!("{e}; the object must be a valid Workflow"),
            );
            return None;
        }
    };
    match tink_api::from_value::<Workflow>(converted) {
        Ok(w) => Some(w),
        Err(e) => {
            deny_parse(v, "Workflow", &e);
            None
        }
    }
}

/// Checks a Workflow create or update.
pub fn validate(req: &Request<'_>, index: &Index, v: &mut Verdict) {
    let v1 = is_v1alpha1(req.object);
    let Some(new) = typed(req.object, v) else {
        return;
    };
    match (req.operation, req.old) {
        (Operation::Create, _) => references(req, &new, index, v),
        (Operation::Update, Some(old)) => {
            // The stored object was admitted before; if it no longer parses, there is no
            // state to protect.
            let mut ignored = Verdict::default();
            let Some(old) = typed(old, &mut ignored) else {
                return;
            };
            let state = old.status.as_ref().map(|s| s.state).unwrap_or_default();
            if state == WorkflowState::Pending {
                return;
            }
            let changed = [
                (
                    old.spec.hardware_ref != new.spec.hardware_ref,
                    "spec.hardwareRef",
                    "spec.hardwareRef",
                ),
                (
                    old.spec.template_ref != new.spec.template_ref,
                    "spec.templateRef",
                    "spec.templateRef",
                ),
                (
                    old.spec.template_data != new.spec.template_data,
                    "spec.templateData",
                    "spec.hardwareMap",
                ),
                (old.spec.timeout != new.spec.timeout, "spec.timeout", "spec"),
            ];
            for (differs, v2_field, v1_field) in changed {
                if differs {
                    v.deny(
                        if v1 { v1_field } else { v2_field },
                        Reason::Forbidden,
                        format!(
                            "the spec of a Workflow cannot change once it left Pending (this one is {state}); only metadata changes are accepted: delete the Workflow and create a new one to run again"
                        ),
                    );
                }
            }
        }
        _ => {}
    }
}

fn references(req: &Request<'_>, wf: &Workflow, index: &Index, v: &mut Verdict) {
    if !index.synced() {
        return;
    }
    let ns = req.namespace;
    let hw = &wf.spec.hardware_ref.name;
    if !hw.is_empty() && !index.has_hardware(&format!("{ns}/{hw}")) {
        v.warn(format!(
            "spec.hardwareRef: Hardware {ns}/{hw} does not exist (yet); the Workflow waits in Pending until it does"
        ));
    }
    let tpl = &wf.spec.template_ref.name;
    if !tpl.is_empty() && !index.has_template(&format!("{ns}/{tpl}")) {
        v.warn(format!(
            "spec.templateRef: Template {ns}/{tpl} does not exist (yet); the Workflow waits in Pending until it does"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wf(state: Option<&str>, timeout: &str) -> Value {
        let mut w = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"hardwareRef": {"name": "hw"}, "templateRef": {"name": "tpl"}, "timeout": timeout}});
        if let Some(s) = state {
            w["status"] = json!({"state": s});
        }
        w
    }

    fn check(index: &Index, op: Operation, obj: &Value, old: Option<&Value>) -> Verdict {
        let mut v = Verdict::default();
        let req = Request {
            operation: op,
            namespace: "ns",
            name: "w",
            object: obj,
            old,
        };
        validate(&req, index, &mut v);
        v
    }

    #[test]
    fn spec_is_immutable_once_it_left_pending() {
        let index = Index::default();
        let pending = wf(Some("Pending"), "1h");
        assert!(check(&index, Operation::Update, &wf(None, "2h"), Some(&pending)).allowed());
        assert!(
            check(
                &index,
                Operation::Update,
                &wf(None, "2h"),
                Some(&wf(None, "1h"))
            )
            .allowed()
        );
        for state in [
            "Scheduled",
            "Running",
            "Succeeded",
            "Failed",
            "Cancelling",
            "Canceled",
        ] {
            let old = wf(Some(state), "1h");
            let v = check(
                &index,
                Operation::Update,
                &wf(Some(state), "2h"),
                Some(&old),
            );
            assert_eq!(v.violations.len(), 1, "{state}: {v:?}");
            assert_eq!(v.violations[0].field, "spec.timeout");
            assert_eq!(v.violations[0].reason, Reason::Forbidden);
            assert!(
                v.violations[0]
                    .message
                    .contains(&format!("this one is {state}"))
            );
            // Metadata-only updates (finalizers, labels) pass.
            let mut labelled = old.clone();
            labelled["metadata"]["labels"] = json!({"a": "b"});
            assert!(check(&index, Operation::Update, &labelled, Some(&old)).allowed());
        }
    }

    #[test]
    fn v1alpha1_paths() {
        let index = Index::default();
        let old = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"hardwareRef": "hw", "templateRef": "tpl", "hardwareMap": {"device_1": "aa:bb:cc:dd:ee:ff"}},
            "status": {"state": "STATE_RUNNING"}});
        let mut new = old.clone();
        new["spec"]["hardwareMap"]["device_1"] = json!("00:00:00:00:00:01");
        let v = check(&index, Operation::Update, &new, Some(&old));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert_eq!(v.violations[0].field, "spec.hardwareMap");
    }

    #[test]
    fn unresolved_references_warn() {
        let index = Index::default();
        index.mark_synced();
        let v = check(&index, Operation::Create, &wf(None, "1h"), None);
        assert!(v.allowed());
        assert_eq!(v.warnings.len(), 2, "{v:?}");
        assert!(v.warnings[0].contains("Hardware ns/hw does not exist"));
        assert!(v.warnings[1].contains("Template ns/tpl does not exist"));
        index.upsert_hardware("ns/hw", &json!({}));
        index.add_template("ns/tpl");
        let v = check(&index, Operation::Create, &wf(None, "1h"), None);
        assert!(v.warnings.is_empty(), "{v:?}");
    }
}
