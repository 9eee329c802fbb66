//! WorkflowRuleSet: the patterns must compile (tink-rules), so a rule set that could never be
//! evaluated, or would silently never match (a misspelt attribute path, `min` above `max`, an
//! empty prefix), is refused at admission with the field path of each problem
//! (`spec.rules[2].match.blockDevices.count.min`). The controller compiles the same way and
//! reports a rule set stored past this webhook as `Valid: False`, so the two never disagree.
//!
//! The Template named in `spec.workflow.templateRef` is not required to exist yet (rule sets and
//! Templates are applied together, in any order); a Workflow created before it exists waits for
//! it with reason `TemplateNotFound`.

use tink_api::v1alpha2::WorkflowRuleSet;

use super::{Reason, Request, Verdict, deny_parse};

/// Checks a WorkflowRuleSet create or update.
pub fn validate(req: &Request<'_>, v: &mut Verdict) {
    let rs: WorkflowRuleSet = match tink_api::from_value(req.object.clone()) {
        Ok(rs) => rs,
        Err(e) => {
            deny_parse(v, "WorkflowRuleSet", &e);
            return;
        }
    };
    if let Err(errors) = tink_rules::compile(&rs.spec) {
        for e in errors {
            v.deny(e.path, Reason::Invalid, e.message);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::validate::Operation;

    fn check(rules: Value) -> Verdict {
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowRuleSet",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"rules": rules, "workflow": {"templateRef": {"name": "t"}}}});
        let mut v = Verdict::default();
        let req = Request {
            operation: Operation::Create,
            namespace: "ns",
            name: "r",
            object: &obj,
            old: None,
        };
        validate(&req, &mut v);
        v
    }

    #[test]
    fn valid_and_invalid_patterns() {
        assert!(
            check(json!([{"match": {"chassis.vendor": {"prefix": "Dell"}, "blockDevices": {"count": {"min": 2}}}}]))
                .allowed()
        );
        let v = check(json!([
            {"match": {"chassis.vendor": {"prefix": "Dell"}}},
            {"match": {"cpu.totalThreads": {"min": 4}}},
            {"match": {"blockDevices": {"count": {"min": 3, "max": 2}}}},
        ]));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert_eq!(
            v.violations[0].field,
            "spec.rules[2].match.blockDevices.count.min"
        );
        assert_eq!(v.violations[0].reason, Reason::Invalid);
        // A mistyped field: the parse error names it.
        let v = check(json!([{"match": {"cpu.totalThreads": {"min": "four"}}}]));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0].field.starts_with("spec.rules[0].match"),
            "{v:?}"
        );
    }
}
