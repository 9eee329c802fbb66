//! Strategic merge patch for built-in types, as `kubectl apply` sends it: lists of objects merge
//! by their merge key (taken from a table of the Kubernetes API's `patchMergeKey`s by field
//! name), `$patch: delete|replace`, `$setElementOrder/…`, `$deleteFromPrimitiveList/…` and
//! `$retainKeys`; other lists replace, maps merge, `null` deletes. Custom resources do not
//! accept strategic merge patches on a real server; here they get the same treatment.

use serde_json::{Map, Value};

/// The merge key of a list field, by field name (Kubernetes `patchMergeKey`).
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    let has = |k: &str| items.iter().any(|i| i.get(k).is_some());
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => "name",
        "ports" if has("containerPort") => "containerPort",
        "ports" => "port",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        "ownerReferences" => "uid",
        _ => return None,
    })
}

/// Primitive lists with the `merge` strategy.
fn merges_primitives(field: &str) -> bool {
    field == "finalizers"
}

fn key_of<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key)
}

fn merge_list(field: &str, live: &mut Vec<Value>, patch: &[Value], order: Option<&Vec<Value>>) {
    if patch.iter().chain(live.iter()).all(Value::is_object)
        && let Some(key) = merge_key(field, patch)
    {
        for p in patch {
            let Some(k) = key_of(p, key).cloned() else {
                live.push(strip(p));
                continue;
            };
            let pos = live.iter().position(|l| key_of(l, key) == Some(&k));
            match (p.get("$patch").and_then(Value::as_str), pos) {
                (Some("delete"), Some(i)) => {
                    live.remove(i);
                }
                (Some("delete"), None) => {}
                (Some("replace"), Some(i)) => live[i] = strip(p),
                (_, Some(i)) => merge(&mut live[i], p),
                (_, None) => live.push(strip(p)),
            }
        }
        if let Some(order) = order {
            let rank = |v: &Value| {
                order
                    .iter()
                    .position(|o| key_of(o, key) == key_of(v, key))
                    .unwrap_or(usize::MAX)
            };
            live.sort_by_key(rank);
        }
        return;
    }
    if merges_primitives(field) {
        for p in patch {
            if !live.contains(p) {
                live.push(p.clone());
            }
        }
        return;
    }
    *live = patch.iter().map(strip).collect();
}

/// A copy without directives.
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
        other => other.clone(),
    }
}

/// Applies a strategic merge patch to `live`.
pub fn merge(live: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *live = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *live = strip(patch);
        return;
    }
    if !live.is_object() {
        *live = Value::Object(Map::new());
    }
    let Some(l) = live.as_object_mut() else {
        return;
    };
    for (k, v) in p {
        if k.starts_with('$') {
            if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
                && let (Some(Value::Array(list)), Some(del)) = (l.get_mut(field), v.as_array())
            {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        match v {
            Value::Null => {
                l.remove(k);
            }
            Value::Object(_) => match l.get_mut(k) {
                Some(lv) if lv.is_object() => merge(lv, v),
                _ => {
                    l.insert(k.clone(), strip(v));
                }
            },
            Value::Array(items) => {
                let order = p
                    .get(&format!("$setElementOrder/{k}"))
                    .and_then(Value::as_array);
                match l.get_mut(k) {
                    Some(Value::Array(existing)) => merge_list(k, existing, items, order),
                    _ => {
                        let mut fresh = Vec::new();
                        merge_list(k, &mut fresh, items, order);
                        l.insert(k.clone(), Value::Array(fresh));
                    }
                }
            }
            other => {
                l.insert(k.clone(), other.clone());
            }
        }
    }
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        l.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k.as_str())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_merge_by_name() {
        let mut live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "b:1"}
        ]}}}});
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}, {"name": "c"}],
            "containers": [{"name": "a", "image": "a:2"}, {"name": "c", "image": "c:1"}]
        }}}});
        merge(&mut live, &patch);
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "b", "image": "b:1"}, {"name": "a", "image": "a:2", "ports": [{"containerPort": 80}]}, {"name": "c", "image": "c:1"}])
        );
    }

    #[test]
    fn directives() {
        let mut live = json!({"metadata": {"finalizers": ["x", "y"]}, "spec": {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "args": ["1", "2"], "sel": {"a": 1, "b": 2}}});
        let patch = json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "finalizers": ["z"]},
            "spec": {"env": [{"name": "A", "$patch": "delete"}], "args": ["3"], "sel": {"$patch": "replace", "c": 3}}
        });
        merge(&mut live, &patch);
        assert_eq!(live["metadata"]["finalizers"], json!(["y", "z"]));
        assert_eq!(live["spec"]["env"], json!([{"name": "B", "value": "2"}]));
        assert_eq!(live["spec"]["args"], json!(["3"]));
        assert_eq!(live["spec"]["sel"], json!({"c": 3}));
        let mut obj = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        merge(
            &mut obj,
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(obj["spec"]["strategy"], json!({"type": "Recreate"}));
    }
}
