//! Server-side apply, simplified: the applied configuration is merged into the live object (maps
//! merge, lists and scalars replace) and the fields a manager applied are recorded in
//! `managedFields` (FieldsV1 format, lists as single leaves). Fields the same manager applied
//! before and no longer applies are removed, unless another applier also applies them.
//! Conflicts with other managers are never reported.

use serde_json::{Map, Value, json};

/// The FieldsV1 set of an applied configuration: `{"f:spec": {"f:size": {}}}`.
pub fn field_set(applied: &Value, status_only: bool, skip_status: bool) -> Value {
    let mut out = Map::new();
    let Some(obj) = applied.as_object() else {
        return json!({});
    };
    for (k, v) in obj {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if skip_status => {}
            "metadata" => {
                if status_only {
                    continue;
                }
                let mut meta = Map::new();
                for mk in ["labels", "annotations"] {
                    if let Some(m) = v.get(mk) {
                        meta.insert(format!("f:{mk}"), leaves(m));
                    }
                }
                for mk in ["finalizers", "ownerReferences"] {
                    if v.get(mk).is_some() {
                        meta.insert(format!("f:{mk}"), json!({}));
                    }
                }
                if !meta.is_empty() {
                    out.insert("f:metadata".into(), Value::Object(meta));
                }
            }
            _ if status_only && k != "status" => {}
            _ => {
                out.insert(format!("f:{k}"), leaves(v));
            }
        }
    }
    Value::Object(out)
}

fn leaves(v: &Value) -> Value {
    match v.as_object() {
        Some(m) if !m.is_empty() => Value::Object(
            m.iter()
                .map(|(k, c)| (format!("f:{k}"), leaves(c)))
                .collect(),
        ),
        _ => json!({}),
    }
}

/// Removes from `live` what `prev` names and `now` does not, unless one of `others` names it.
pub fn remove_dropped(live: &mut Value, prev: &Value, now: &Value, others: &[&Value]) {
    let (Some(prev), Some(live_map)) = (prev.as_object(), live.as_object_mut()) else {
        return;
    };
    for (fk, psub) in prev {
        let Some(key) = fk.strip_prefix("f:") else {
            continue;
        };
        let others_here: Vec<&Value> = others.iter().filter_map(|o| o.get(fk)).collect();
        match now.get(fk) {
            None if psub.as_object().is_some_and(|m| !m.is_empty()) => {
                // Remove the leaves this manager applied, then the map if nothing is left in it.
                if let Some(child) = live_map.get_mut(key) {
                    remove_dropped(child, psub, &json!({}), &others_here);
                    if child.as_object().is_some_and(Map::is_empty)
                        && key != "metadata"
                        && others_here.is_empty()
                    {
                        live_map.remove(key);
                    }
                }
            }
            None => {
                if others_here.is_empty() {
                    live_map.remove(key);
                }
            }
            Some(nsub) => {
                if psub.as_object().is_some_and(|m| !m.is_empty())
                    && let Some(child) = live_map.get_mut(key)
                {
                    remove_dropped(child, psub, nsub, &others_here);
                }
            }
        }
    }
}

/// Applies `applied` for `manager` to `live` (the current object, or `None` when creating).
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    now: &str,
    sub: Option<&str>,
    skip_status: bool,
) -> Value {
    let status_only = sub == Some("status");
    let fields = field_set(applied, status_only, skip_status);
    let mut out = live.cloned().unwrap_or_else(|| json!({}));
    let mut entries: Vec<Value> = live
        .and_then(|l| l.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_mine = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("subresource").and_then(Value::as_str) == sub
    };
    let prev = entries
        .iter()
        .find(|e| is_mine(e))
        .and_then(|e| e.get("fieldsV1"))
        .cloned();
    if let Some(prev) = prev {
        let others: Vec<&Value> = entries
            .iter()
            .filter(|e| !is_mine(e) && e.get("operation").and_then(Value::as_str) == Some("Apply"))
            .filter_map(|e| e.get("fieldsV1"))
            .collect();
        remove_dropped(&mut out, &prev, &fields, &others);
    }
    merge(&mut out, applied);
    entries.retain(|e| !is_mine(e));
    let mut entry = json!({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": fields});
    if let Some(s) = sub {
        entry["subresource"] = json!(s);
    }
    entries.push(entry);
    if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("managedFields".into(), Value::Array(entries));
    }
    out
}

/// Maps merge recursively; everything else replaces; explicit nulls remove.
pub fn merge(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    l.remove(k);
                } else if let Some(lv) = l.get_mut(k)
                    && lv.is_object()
                    && v.is_object()
                {
                    merge(lv, v);
                } else {
                    l.insert(k.clone(), v.clone());
                }
            }
        }
        (l, a) => *l = a.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_objects_and_replaces_lists() {
        let mut live = json!({"spec": {"a": 1, "b": {"c": 2}, "l": [1, 2]}, "status": {"x": 1}});
        merge(&mut live, &json!({"spec": {"b": {"d": 3}, "l": [3]}}));
        assert_eq!(
            live,
            json!({"spec": {"a": 1, "b": {"c": 2, "d": 3}, "l": [3]}, "status": {"x": 1}})
        );
    }

    #[test]
    fn fields_dropped_by_the_same_manager_are_removed() {
        let base = json!({"metadata": {"name": "x"}, "spec": {"keep": 1}});
        let first = apply(
            Some(&base),
            &json!({"spec": {"a": 1, "b": {"c": 2}}, "metadata": {"labels": {"l": "1"}}}),
            "m",
            "v1",
            "t",
            None,
            true,
        );
        assert_eq!(first["spec"], json!({"keep": 1, "a": 1, "b": {"c": 2}}));
        assert_eq!(
            first["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:a": {}, "f:b": {"f:c": {}}}, "f:metadata": {"f:labels": {"f:l": {}}}})
        );
        let other = apply(
            Some(&first),
            &json!({"spec": {"b": {"c": 2}}}),
            "other",
            "v1",
            "t",
            None,
            true,
        );
        let second = apply(
            Some(&other),
            &json!({"spec": {"b": {}}}),
            "m",
            "v1",
            "t",
            None,
            true,
        );
        // `a` and the label are dropped; b.c stays because `other` applies it too; `keep` was never applied.
        assert_eq!(second["spec"], json!({"keep": 1, "b": {"c": 2}}));
        assert!(
            second["metadata"]
                .get("labels")
                .is_none_or(|l| l.get("l").is_none())
        );
        assert_eq!(
            second["metadata"]["managedFields"].as_array().map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn status_applies_are_tracked_apart() {
        let base = json!({"metadata": {"name": "x"}, "spec": {"a": 1}, "status": {"p": 1, "q": 2}});
        let s1 = apply(
            Some(&base),
            &json!({"status": {"p": 1, "q": 2}}),
            "ctl",
            "v1",
            "t",
            Some("status"),
            false,
        );
        let s2 = apply(
            Some(&s1),
            &json!({"status": {"p": 3}, "spec": {"a": 9}}),
            "ctl",
            "v1",
            "t",
            Some("status"),
            false,
        );
        assert_eq!(s2["status"], json!({"p": 3}));
        assert_eq!(
            s2["metadata"]["managedFields"][0]["subresource"],
            json!("status")
        );
    }
}
