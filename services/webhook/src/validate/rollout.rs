//! WorkflowSet (rollouts): what the CRD schema cannot say or says only as a bare bound.
//!
//! - `metadata.name` is at most 63 characters: it is the value of the
//!   `tinkerbell.org/workflow-set` label on every Workflow of the set.
//! - `spec.hardwareSelector` selects something on purpose: not empty (a rollout over every
//!   machine of the namespace must say so, e.g. with an `Exists` expression), label keys and
//!   values well formed, operators `In`, `NotIn` (with values), `Exists`, `DoesNotExist`
//!   (without). A selector the controller could not evaluate would select nothing or, worse,
//!   everything.
//! - `spec.maxConcurrent` at least 1, `spec.maxFailures` at least 1 when given (the API server
//!   checks the same bounds from the schema; the webhook says why, with the field path).
//! - `spec.templateRef.name` non-empty; a Template that does not exist (yet) is a warning.
//!
//! Only v1alpha2 exists, so nothing is converted.

use serde_json::Value;
use tink_api::v1alpha2::WorkflowSet;

use super::{Reason, Request, Verdict, deny_parse};
use crate::index::Index;

/// The longest label value, and so the longest set name.
const MAX_LABEL_VALUE: usize = 63;

/// Checks a WorkflowSet create or update.
pub fn validate(req: &Request<'_>, index: &Index, v: &mut Verdict) {
    let set = match tink_api::from_value::<WorkflowSet>(req.object.clone()) {
        Ok(s) => s,
        Err(e) => {
            deny_parse(v, "WorkflowSet", &e);
            return;
        }
    };
    if req.name.len() > MAX_LABEL_VALUE {
        v.deny(
            "metadata.name",
            Reason::Invalid,
            format!(
                "a WorkflowSet name is at most {MAX_LABEL_VALUE} characters (it is {}): it labels each of the set's Workflows (tinkerbell.org/workflow-set)",
                req.name.len()
            ),
        );
    }
    selector(req.object, v);
    if set.spec.max_concurrent < 1 {
        v.deny(
            "spec.maxConcurrent",
            Reason::Invalid,
            format!(
                "must be at least 1 (got {}): the most Workflows of the set running at once",
                set.spec.max_concurrent
            ),
        );
    }
    if let Some(n) = set.spec.max_failures
        && n < 1
    {
        v.deny(
            "spec.maxFailures",
            Reason::Invalid,
            format!(
                "must be at least 1 (got {n}): the number of failed Workflows at which the rollout halts; leave it out for 1"
            ),
        );
    }
    let tpl = &set.spec.template_ref.name;
    if tpl.is_empty() {
        v.deny(
            "spec.templateRef.name",
            Reason::Required,
            "the Template every Workflow of the set runs is required",
        );
    } else if index.synced() && !index.has_template(&format!("{}/{tpl}", req.namespace)) {
        v.warn(format!(
            "spec.templateRef: Template {}/{tpl} does not exist (yet); the set's Workflows wait in Pending until it does",
            req.namespace
        ));
    }
}

/// The selector, checked on the raw object so paths name the exact entry.
fn selector(obj: &Value, v: &mut Verdict) {
    let base = "spec.hardwareSelector";
    let labels = obj
        .pointer("/spec/hardwareSelector/matchLabels")
        .and_then(Value::as_object);
    let exprs = obj
        .pointer("/spec/hardwareSelector/matchExpressions")
        .and_then(Value::as_array);
    if labels.is_none_or(|m| m.is_empty()) && exprs.is_none_or(|a| a.is_empty()) {
        v.deny(
            base,
            Reason::Required,
            "an empty selector would select every Hardware of the namespace: give matchLabels or matchExpressions (for every machine on purpose: {key: tinkerbell.org/rollout, operator: DoesNotExist} or a label all of them carry)",
        );
        return;
    }
    for (k, val) in labels.into_iter().flatten() {
        let path = format!("{base}.matchLabels[{k}]");
        if let Err(m) = label_key(k) {
            v.deny(&path, Reason::Invalid, m);
        }
        match val.as_str() {
            Some(s) => {
                if let Err(m) = label_value(s) {
                    v.deny(&path, Reason::Invalid, m);
                }
            }
            None => v.deny(&path, Reason::Invalid, "must be a string"),
        }
    }
    for (i, e) in exprs.into_iter().flatten().enumerate() {
        let path = format!("{base}.matchExpressions[{i}]");
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        if let Err(m) = label_key(key) {
            v.deny(format!("{path}.key"), Reason::Invalid, m);
        }
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let op = e
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match op {
            "In" | "NotIn" => {
                if values.is_empty() {
                    v.deny(
                        format!("{path}.values"),
                        Reason::Required,
                        format!("operator {op} needs at least one value"),
                    );
                }
                for (j, s) in values.iter().enumerate() {
                    if let Err(m) = label_value(s) {
                        v.deny(format!("{path}.values[{j}]"), Reason::Invalid, m);
                    }
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    v.deny(
                        format!("{path}.values"),
                        Reason::Invalid,
                        format!("operator {op} takes no values"),
                    );
                }
            }
            other => v.deny(
                format!("{path}.operator"),
                Reason::Invalid,
                format!("unknown operator {other:?}: use In, NotIn, Exists or DoesNotExist"),
            ),
        }
    }
}

/// A label name part: 1 to 63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain of at most 253 characters.
fn label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    if prefix_ok && name_part(name) {
        Ok(())
    } else {
        Err(format!(
            "{k:?} is not a label key: an optional DNS prefix and '/', then 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (such as rack or example.com/rack)"
        ))
    }
}

/// A label value: empty, or a label name part.
fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || name_part(s) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Operation;
    use serde_json::json;

    fn check(name: &str, spec: Value) -> Verdict {
        let obj = json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
            "metadata": {"name": name}, "spec": spec});
        let mut v = Verdict::default();
        let req = Request {
            operation: Operation::Create,
            namespace: "ns",
            name,
            object: &obj,
            old: None,
        };
        validate(&req, &Index::default(), &mut v);
        v
    }

    fn fields(v: &Verdict) -> Vec<(&str, Reason)> {
        v.violations
            .iter()
            .map(|x| (x.field.as_str(), x.reason))
            .collect()
    }

    fn good() -> Value {
        json!({"hardwareSelector": {"matchLabels": {"rack": "r1"}},
            "templateRef": {"name": "install"}, "maxConcurrent": 5})
    }

    #[test]
    fn a_good_set_is_allowed() {
        assert!(check("rack1", good()).allowed());
        let mut s = good();
        s["hardwareSelector"] = json!({"matchExpressions": [
            {"key": "example.com/rack", "operator": "In", "values": ["r1", "r2"]},
            {"key": "broken", "operator": "DoesNotExist"}]});
        s["maxFailures"] = json!(3);
        assert!(check("rack1", s).allowed());
    }

    #[test]
    fn bounds_are_refused_with_the_field_path() {
        let mut s = good();
        s["maxConcurrent"] = json!(0);
        s["maxFailures"] = json!(-1);
        let v = check("rack1", s);
        assert_eq!(
            fields(&v),
            [
                ("spec.maxConcurrent", Reason::Invalid),
                ("spec.maxFailures", Reason::Invalid)
            ]
        );
        assert!(v.violations[1].message.contains("got -1"));
    }

    #[test]
    fn bad_selectors_are_refused() {
        let mut s = good();
        s["hardwareSelector"] = json!({});
        assert_eq!(
            fields(&check("rack1", s.clone())),
            [("spec.hardwareSelector", Reason::Required)]
        );
        s["hardwareSelector"] = json!({"matchLabels": {"-bad": "x y"}, "matchExpressions": [
            {"key": "rack", "operator": "Has", "values": ["a"]},
            {"key": "rack", "operator": "In"},
            {"key": "rack", "operator": "Exists", "values": ["a"]}]});
        assert_eq!(
            fields(&check("rack1", s)),
            [
                ("spec.hardwareSelector.matchLabels[-bad]", Reason::Invalid),
                ("spec.hardwareSelector.matchLabels[-bad]", Reason::Invalid),
                (
                    "spec.hardwareSelector.matchExpressions[0].operator",
                    Reason::Invalid
                ),
                (
                    "spec.hardwareSelector.matchExpressions[1].values",
                    Reason::Required
                ),
                (
                    "spec.hardwareSelector.matchExpressions[2].values",
                    Reason::Invalid
                ),
            ]
        );
    }

    #[test]
    fn names_types_and_references() {
        let v = check(&"r".repeat(64), good());
        assert_eq!(fields(&v), [("metadata.name", Reason::Invalid)]);
        let mut s = good();
        s["maxConcurrent"] = json!("five");
        let v = check("rack1", s);
        assert_eq!(fields(&v), [("spec.maxConcurrent", Reason::Invalid)]);
        let mut s = good();
        s["templateRef"] = json!({"name": ""});
        assert_eq!(
            fields(&check("rack1", s)),
            [("spec.templateRef.name", Reason::Required)]
        );
    }
}
