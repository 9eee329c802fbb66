//! Workflow: the spec is immutable once the Workflow left `Pending` (the controller has
//! rendered and dispatched it; a changed spec would describe a run that never happened), and
//! `spec.bootOptions` as soon as the controller acted on them (`status.bootOptions` records a
//! step), even while `Pending`: a BMC Job may already have power-cycled the machine.
//! References that do not resolve yet are warnings, not denials: a Workflow may be created
//! before its Hardware or Template and waits for them.
//!
//! `bootOptions` are checked when created or changed (never on an update that leaves them as
//! they are, so finalizer and status bookkeeping on an older object always pass): the rules of
//! [`BootOptions::problems`] (the CRD's CEL rules, which v1alpha1 requests never meet, and
//! more), a `spec.hardwareRef` to act on, and for v1alpha1 a `bootMode` Tinkerbell knows.
//!
//! A Workflow for a discovered Hardware that is not approved yet (`spec.discovery.approved`
//! false, see [`crate::approval`]) is refused on create and on an update that points
//! `spec.hardwareRef` at one: the machine enrolled itself and nobody said it may run work.
//! A Hardware that does not exist (yet) is only a warning, as before; the index must have
//! listed Hardware (the webhook is not ready before), and the controller checks again before
//! dispatching.

use serde_json::Value;
use tink_api::v1alpha2::{BootOptions, Workflow, WorkflowState, rules};

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
        (Operation::Create, _) => {
            boot_options(req.object, &new, v1, v);
            references(req, &new, index, v);
        }
        (Operation::Update, Some(old_obj)) => {
            // The stored object was admitted before; if it no longer parses, there is no
            // state to protect.
            let mut ignored = Verdict::default();
            let Some(old) = typed(old_obj, &mut ignored) else {
                boot_options(req.object, &new, v1, v);
                return;
            };
            let state = old.status.as_ref().map(|s| s.state).unwrap_or_default();
            if old.spec.boot_options != new.spec.boot_options {
                let acted = old
                    .status
                    .as_ref()
                    .is_some_and(|s| !s.boot_options.is_empty());
                if state != WorkflowState::Pending || acted {
                    v.deny(
                        "spec.bootOptions",
                        Reason::Forbidden,
                        format!(
                            "bootOptions cannot change once the controller acted on them (this Workflow is {state}{}): delete the Workflow and create a new one to boot differently",
                            if acted { " and status.bootOptions records boot steps" } else { "" }
                        ),
                    );
                } else {
                    boot_options(req.object, &new, v1, v);
                }
            }
            if state == WorkflowState::Pending {
                if old.spec.hardware_ref != new.spec.hardware_ref {
                    unapproved_hardware(req, &new, index, v);
                }
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

/// Checks `spec.bootOptions` of a created Workflow or changed boot options. v1alpha1 and
/// v1alpha2 use the same names under `spec.bootOptions`, so the paths hold for both.
fn boot_options(raw: &Value, wf: &Workflow, v1: bool, v: &mut Verdict) {
    if v1 {
        // An unknown mode converts to none (the machine would not be booted at all).
        if let Some(mode) = raw.pointer("/spec/bootOptions/bootMode") {
            let known = mode.is_null()
                || mode
                    .as_str()
                    .is_some_and(|m| m.is_empty() || tink_api::v1alpha1::BOOT_MODES.contains(&m));
            if !known {
                v.deny(
                    "spec.bootOptions.bootMode",
                    Reason::Invalid,
                    format!(
                        "bootMode {mode} is not one of {}",
                        tink_api::v1alpha1::BOOT_MODES.join(", ")
                    ),
                );
            }
        }
    }
    let Some(boot) = wf.spec.boot_options.as_ref() else {
        return;
    };
    for p in boot.problems() {
        let required = p.message == rules::ISO_URL_REQUIRED_MSG
            || p.message == rules::CUSTOMBOOT_CONFIG_REQUIRED_MSG;
        let field = if p.field.is_empty() {
            "spec.bootOptions".to_string()
        } else {
            format!("spec.bootOptions.{}", p.field)
        };
        let reason = if required {
            Reason::Required
        } else {
            Reason::Invalid
        };
        v.deny(field, reason, p.message);
    }
    if wf.spec.hardware_ref.is_empty() && boot != &BootOptions::default() {
        v.deny(
            "spec.hardwareRef",
            Reason::Required,
            "bootOptions act on the Workflow's Hardware: set spec.hardwareRef (its spec.bmcRef names the BMC for bootMode)",
        );
    }
}

/// Refuses a Workflow whose Hardware exists and is a discovered machine not approved yet.
fn unapproved_hardware(req: &Request<'_>, wf: &Workflow, index: &Index, v: &mut Verdict) {
    let ns = req.namespace;
    let hw = &wf.spec.hardware_ref.name;
    if hw.is_empty() || !index.hardware_synced() {
        return;
    }
    if index.hardware_approved(&format!("{ns}/{hw}")) == Some(false) {
        v.deny(
            "spec.hardwareRef",
            Reason::Forbidden,
            format!(
                "Hardware {ns}/{hw} is a discovered machine waiting for approval: it gets no Workflow until someone allowed to approve it runs `tinkctl hardware approve {hw} -n {ns}` (sets spec.discovery.approved; needs the verb approve on hardware.tinkerbell.org)"
            ),
        );
    }
}

fn references(req: &Request<'_>, wf: &Workflow, index: &Index, v: &mut Verdict) {
    unapproved_hardware(req, wf, index, v);
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
    fn workflows_for_unapproved_discovered_hardware_are_refused() {
        let index = Index::default();
        index.mark_synced();
        let hw = |approved: Option<bool>| {
            let mut h = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
                "metadata": {"name": "hw", "namespace": "ns"}, "spec": {}});
            if let Some(a) = approved {
                h["spec"]["discovery"] = json!({"approved": a});
            }
            h
        };
        index.upsert_hardware("ns/hw", &hw(Some(false)));
        let v = check(&index, Operation::Create, &wf(None, "1h"), None);
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert_eq!(v.violations[0].field, "spec.hardwareRef");
        assert_eq!(v.violations[0].reason, Reason::Forbidden);
        assert!(
            v.violations[0].message.starts_with(
                "Hardware ns/hw is a discovered machine waiting for approval: it gets no Workflow until someone allowed to approve it runs `tinkctl hardware approve hw -n ns`"
            ),
            "{v:?}"
        );
        // Pointing a Pending Workflow at it is refused too; other updates are not checked.
        let mut elsewhere = wf(Some("Pending"), "1h");
        elsewhere["spec"]["hardwareRef"]["name"] = json!("other");
        let v = check(&index, Operation::Update, &wf(None, "1h"), Some(&elsewhere));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        let pending = wf(Some("Pending"), "1h");
        let v = check(&index, Operation::Update, &wf(None, "2h"), Some(&pending));
        assert!(v.allowed(), "{v:?}");
        // Approved, or a Hardware a person wrote: accepted.
        for approved in [Some(true), None] {
            index.upsert_hardware("ns/hw", &hw(approved));
            let v = check(&index, Operation::Create, &wf(None, "1h"), None);
            assert!(v.allowed(), "{approved:?}: {v:?}");
        }
        // No such Hardware: a warning, as before.
        index.remove_hardware("ns/hw");
        let v = check(&index, Operation::Create, &wf(None, "1h"), None);
        assert!(v.allowed(), "{v:?}");
        assert!(
            v.warnings.iter().any(|w| w.contains("does not exist")),
            "{v:?}"
        );
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

    fn with_boot(mut w: Value, boot: Value) -> Value {
        w["spec"]["bootOptions"] = boot;
        w
    }

    fn fields(v: &Verdict) -> Vec<(&str, Reason)> {
        v.violations
            .iter()
            .map(|x| (x.field.as_str(), x.reason))
            .collect()
    }

    #[test]
    fn boot_options_are_checked_on_create_with_the_field_named() {
        let index = Index::default();
        let create = |boot: Value| {
            check(
                &index,
                Operation::Create,
                &with_boot(wf(None, "1h"), boot),
                None,
            )
        };
        for ok in [
            json!({"toggleAllowNetboot": true}),
            json!({"bootMode": "netboot"}),
            json!({"bootMode": "isoboot", "isoURL": "http://10.0.0.1:7171/iso/hook.iso"}),
            json!({"bootMode": "customboot", "custombootConfig": {
                "preparingActions": [{"powerAction": "off"},
                    {"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": true}},
                    {"powerAction": "on"}]}}),
        ] {
            let v = create(ok.clone());
            assert!(v.allowed(), "{ok}: {v:?}");
        }
        let table = [
            (
                json!({"bootMode": "isoboot"}),
                "spec.bootOptions.isoURL",
                Reason::Required,
                "required with bootMode isoboot",
            ),
            (
                json!({"bootMode": "isoboot", "isoURL": "ftp://a/b.iso"}),
                "spec.bootOptions.isoURL",
                Reason::Invalid,
                "http or https",
            ),
            (
                json!({"bootMode": "netboot", "isoURL": "http://a/b.iso"}),
                "spec.bootOptions.isoURL",
                Reason::Invalid,
                "only used with bootMode isoboot",
            ),
            (
                json!({"bootMode": "customboot"}),
                "spec.bootOptions.custombootConfig",
                Reason::Required,
                "required with bootMode customboot",
            ),
            (
                json!({"custombootConfig": {"postActions": [{"powerAction": "on"}]}}),
                "spec.bootOptions.custombootConfig",
                Reason::Invalid,
                "only used with bootMode customboot",
            ),
            (
                json!({"bootMode": "customboot", "custombootConfig": {"postActions": [{}]}}),
                "spec.bootOptions.custombootConfig.postActions[0]",
                Reason::Invalid,
                "exactly one of",
            ),
        ];
        for (boot, field, reason, says) in table {
            let v = create(boot.clone());
            assert_eq!(fields(&v), [(field, reason)], "{boot}: {v:?}");
            assert!(v.violations[0].message.contains(says), "{boot}: {v:?}");
        }
        // Boot options act on the Hardware: a v1alpha1 Workflow without one is refused.
        let v1 = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"templateRef": "tpl", "bootOptions": {"toggleAllowNetboot": true}}});
        let v = check(&index, Operation::Create, &v1, None);
        assert_eq!(
            fields(&v),
            [("spec.hardwareRef", Reason::Required)],
            "{v:?}"
        );
    }

    #[test]
    fn v1alpha1_boot_options_use_tinkerbells_spellings() {
        let index = Index::default();
        let v1 = |boot: Value| {
            json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
                "metadata": {"name": "w", "namespace": "ns"},
                "spec": {"templateRef": "tpl", "hardwareRef": "hw", "bootOptions": boot}})
        };
        for ok in [
            json!({"oneTimeNetboot": true}),
            json!({"bootMode": "iso", "isoURL": "https://boot.example.com/hook.iso"}),
            json!({"bootMode": "customboot", "custombootConfig": {"preparingActions": [
                {"bootDevice": {"device": "pxe", "efiBoot": true}}, {"powerAction": "cycle"}]}}),
        ] {
            let v = check(&index, Operation::Create, &v1(ok.clone()), None);
            assert!(v.allowed(), "{ok}: {v:?}");
        }
        let v = check(
            &index,
            Operation::Create,
            &v1(json!({"bootMode": "pxe"})),
            None,
        );
        assert_eq!(
            fields(&v),
            [("spec.bootOptions.bootMode", Reason::Invalid)],
            "{v:?}"
        );
        // A persistent bootDevice has no form the BMC layer runs.
        let v = check(
            &index,
            Operation::Create,
            &v1(
                json!({"bootMode": "customboot", "custombootConfig": {"postActions": [
                {"powerAction": "off"}, {"bootDevice": {"device": "disk", "persistent": true}}]}}),
            ),
            None,
        );
        assert_eq!(
            fields(&v),
            [(
                "spec.bootOptions.custombootConfig.postActions[1]",
                Reason::Invalid
            )],
            "{v:?}"
        );
        assert!(
            v.violations[0].message.contains("persistent bootDevice"),
            "{v:?}"
        );
    }

    #[test]
    fn boot_options_are_immutable_once_acted_on() {
        let index = Index::default();
        let netboot = json!({"bootMode": "netboot"});
        let iso = json!({"bootMode": "isoboot", "isoURL": "http://10.0.0.1/hook.iso"});
        // Pending with nothing recorded: may change (and the new value is checked).
        let old = with_boot(wf(Some("Pending"), "1h"), netboot.clone());
        let v = check(
            &index,
            Operation::Update,
            &with_boot(wf(Some("Pending"), "1h"), iso.clone()),
            Some(&old),
        );
        assert!(v.allowed(), "{v:?}");
        let v = check(
            &index,
            Operation::Update,
            &with_boot(wf(Some("Pending"), "1h"), json!({"bootMode": "isoboot"})),
            Some(&old),
        );
        assert_eq!(
            fields(&v),
            [("spec.bootOptions.isoURL", Reason::Required)],
            "{v:?}"
        );
        // Pending, but the controller recorded a Job: refused.
        let mut acted = old.clone();
        acted["status"]["bootOptions"] = json!({"jobs": {"netboot-w": {"uid": "u1"}}});
        let v = check(
            &index,
            Operation::Update,
            &with_boot(acted.clone(), iso.clone()),
            Some(&acted),
        );
        assert_eq!(
            fields(&v),
            [("spec.bootOptions", Reason::Forbidden)],
            "{v:?}"
        );
        assert!(
            v.violations[0]
                .message
                .contains("status.bootOptions records"),
            "{v:?}"
        );
        // Removing them counts as a change too.
        let mut removed = acted.clone();
        removed["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("bootOptions");
        let v = check(&index, Operation::Update, &removed, Some(&acted));
        assert_eq!(
            fields(&v),
            [("spec.bootOptions", Reason::Forbidden)],
            "{v:?}"
        );
        // Running: refused, with the state named.
        let running = with_boot(wf(Some("Running"), "1h"), netboot.clone());
        let v = check(
            &index,
            Operation::Update,
            &with_boot(running.clone(), iso),
            Some(&running),
        );
        assert_eq!(
            fields(&v),
            [("spec.bootOptions", Reason::Forbidden)],
            "{v:?}"
        );
        assert!(
            v.violations[0].message.contains("this Workflow is Running"),
            "{v:?}"
        );
        // Unchanged boot options are not re-checked: an object admitted before these checks
        // (an isoboot without isoURL) still takes metadata updates such as finalizers.
        let legacy = with_boot(wf(Some("Running"), "1h"), json!({"bootMode": "isoboot"}));
        let mut finalized = legacy.clone();
        finalized["metadata"]["finalizers"] = json!(["tinkerbell.org/workflow"]);
        assert!(check(&index, Operation::Update, &finalized, Some(&legacy)).allowed());
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
