//! Conditional JSON patches: the content of the conversion-data annotation.
//!
//! [`diff`] describes how to turn one JSON value into another as a list of [`Op`]s, each
//! setting (or removing) the value at a path *only if* the value found there is still the one
//! seen when the diff was made. Applied to an unchanged object, the patch restores the original
//! exactly; applied to an object whose mapped fields were edited in the other version, it leaves
//! the edited fields alone (newer values win) and restores only what the other version could
//! not hold.
//!
//! Arrays are diffed as whole values, so arrays whose elements have an identity are first
//! "keyed" ([`keyify`]): turned into objects from element key to element plus an `#order` list,
//! so a patch addresses an element by identity rather than by position.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One conditional set or removal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Op {
    /// Object keys from the root to the value.
    pub path: Vec<String>,
    /// The value expected at `path` (absent: nothing expected there, unless `expectSha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Value>,
    /// Instead of `expect` for long strings (a Template's generated text): the hex SHA-256 of
    /// the expected string, so the annotation does not hold the text a second time.
    #[serde(
        default,
        rename = "expectSha256",
        skip_serializing_if = "Option::is_none"
    )]
    pub expect_sha256: Option<String>,
    /// The value to put at `path` (absent: remove it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// The ops turning `from` into `to`.
pub fn diff(from: &Value, to: &Value) -> Vec<Op> {
    let mut ops = Vec::new();
    diff_at(&mut Vec::new(), Some(from), Some(to), &mut ops);
    ops
}

fn diff_at(path: &mut Vec<String>, from: Option<&Value>, to: Option<&Value>, ops: &mut Vec<Op>) {
    match (from, to) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                path.push(k.clone());
                diff_at(path, a.get(k), b.get(k), ops);
                path.pop();
            }
        }
        (a, b) if a == b => {}
        (Some(Value::String(long)), b) if long.len() > HASH_EXPECT_ABOVE => ops.push(Op {
            path: path.clone(),
            expect: None,
            expect_sha256: Some(sha256_hex(long)),
            value: b.cloned(),
        }),
        (a, b) => ops.push(Op {
            path: path.clone(),
            expect: a.cloned(),
            expect_sha256: None,
            value: b.cloned(),
        }),
    }
}

/// Expected strings longer than this are kept as a digest ([`Op::expect_sha256`]).
pub const HASH_EXPECT_ABOVE: usize = 256;

fn sha256_hex(s: &str) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest.as_ref() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

impl Op {
    /// Whether `found` (the value at the op's path) is what the op expects.
    fn expects(&self, found: Option<&Value>) -> bool {
        match &self.expect_sha256 {
            Some(hash) => matches!(found, Some(Value::String(s)) if &sha256_hex(s) == hash),
            None => found == self.expect.as_ref(),
        }
    }
}

/// Applies `ops` to `target`. An op applies only when its parent object exists and the value at
/// its path equals `expect`; it never creates intermediate objects.
pub fn apply(ops: &[Op], target: &mut Value) {
    for op in ops {
        let Some((last, parents)) = op.path.split_last() else {
            if let (true, Some(v)) = (op.expects(Some(&*target)), &op.value) {
                *target = v.clone();
            }
            continue;
        };
        let Some(parent) = parent_mut(target, parents) else {
            continue;
        };
        if !op.expects(parent.get(last)) {
            continue;
        }
        match &op.value {
            Some(v) => {
                parent.insert(last.clone(), v.clone());
            }
            None => {
                parent.remove(last);
            }
        }
    }
}

fn parent_mut<'a>(v: &'a mut Value, parents: &[String]) -> Option<&'a mut Map<String, Value>> {
    let mut cur = v;
    for p in parents {
        cur = cur.as_object_mut()?.get_mut(p)?;
    }
    cur.as_object_mut()
}

const ORDER: &str = "#order";

/// Turns an array into `{"#order": [keys], key: element, ...}`. Elements whose `key` is
/// `Some` and unique get `k=<key>`, the others `i=<index>`.
pub fn keyify(array: Vec<Value>, key: impl Fn(&Value) -> Option<String>) -> Value {
    let mut map = Map::new();
    let mut order = Vec::with_capacity(array.len());
    for (i, elem) in array.into_iter().enumerate() {
        let k = key(&elem)
            .map(|k| format!("k={k}"))
            .filter(|k| !map.contains_key(k))
            .unwrap_or_else(|| format!("i={i}"));
        order.push(Value::String(k.clone()));
        map.insert(k, elem);
    }
    map.insert(ORDER.to_string(), Value::Array(order));
    Value::Object(map)
}

/// The inverse of [`keyify`]: elements in `#order`, then any others by key. Values that are
/// not keyed objects are returned unchanged.
pub fn unkeyify(value: Value) -> Value {
    let Value::Object(mut map) = value else {
        return value;
    };
    let order = match map.remove(ORDER) {
        Some(Value::Array(order)) => order,
        Some(other) => {
            map.insert(ORDER.to_string(), other);
            return Value::Object(map);
        }
        None => Vec::new(),
    };
    let mut out = Vec::with_capacity(map.len());
    for k in order {
        if let Some(v) = k.as_str().and_then(|k| map.remove(k)) {
            out.push(v);
        }
    }
    out.extend(map.into_iter().map(|(_, v)| v));
    Value::Array(out)
}

/// Applies `f` to the value at `path` if present.
pub fn at_path(value: &mut Value, path: &[&str], f: impl FnOnce(&mut Value)) {
    let mut cur = value;
    for p in path {
        match cur.get_mut(*p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    f(cur);
}

/// Keys the array at `path` (if it is an array) with `key`.
pub fn keyify_at(value: &mut Value, path: &[&str], key: impl Fn(&Value) -> Option<String>) {
    at_path(value, path, |v| {
        if let Value::Array(items) = v {
            let items = std::mem::take(items);
            *v = keyify(items, key);
        }
    });
}

/// Un-keys the value at `path`.
pub fn unkeyify_at(value: &mut Value, path: &[&str]) {
    at_path(value, path, |v| {
        let taken = std::mem::take(v);
        *v = unkeyify(taken);
    });
}

/// A string field of an object, as a key.
pub fn str_field<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_then_apply_restores() {
        let a = json!({"x": 1, "y": {"z": [1, 2], "w": "a"}, "gone": true});
        let b = json!({"x": 2, "y": {"z": [3], "new": {"deep": 1}}, "added": null});
        let ops = diff(&a, &b);
        let mut t = a.clone();
        apply(&ops, &mut t);
        assert_eq!(t, b);
    }

    #[test]
    fn newer_values_win() {
        let hat = json!({"lease": 86400, "name": "a"});
        let orig = json!({"lease": 0, "name": "a", "arch": "x86_64"});
        let ops = diff(&hat, &orig);
        // The other version changed the lease meanwhile: the restore leaves it alone but
        // brings back the field that had no home there.
        let mut edited = json!({"lease": 3600, "name": "a"});
        apply(&ops, &mut edited);
        assert_eq!(
            edited,
            json!({"lease": 3600, "name": "a", "arch": "x86_64"})
        );
    }

    #[test]
    fn ops_never_create_parents() {
        let ops = vec![Op {
            path: vec!["a".into(), "b".into()],
            expect: None,
            expect_sha256: None,
            value: Some(json!(1)),
        }];
        let mut t = json!({});
        apply(&ops, &mut t);
        assert_eq!(t, json!({}));
    }

    #[test]
    fn long_expected_strings_are_hashed() {
        let long_a = "a".repeat(1000);
        let long_b = "b".repeat(1000);
        let from = json!({"text": long_a});
        let to = json!({"text": "orig"});
        let ops = diff(&from, &to);
        assert_eq!(ops[0].expect, None);
        assert!(ops[0].expect_sha256.is_some());
        let mut t = from.clone();
        apply(&ops, &mut t);
        assert_eq!(t, to);
        // Changed meanwhile: not restored.
        let mut edited = json!({"text": long_b});
        apply(&ops, &mut edited);
        assert_eq!(edited, json!({"text": "b".repeat(1000)}));
    }

    #[test]
    fn keyify_round_trips_and_dedups() {
        let arr = vec![
            json!({"n": "b"}),
            json!({"n": "a"}),
            json!({"n": "b"}),
            json!({}),
        ];
        let keyed = keyify(arr.clone(), |v| str_field(v, "n").map(str::to_string));
        assert_eq!(keyed["#order"], json!(["k=b", "k=a", "i=2", "i=3"]));
        assert_eq!(unkeyify(keyed), Value::Array(arr));
    }
}
