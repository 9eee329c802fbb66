//! CRD structural schema handling: pruning of unknown fields, defaulting, OpenAPI v3 value
//! validation and CEL `x-kubernetes-validations` (through `kube-cel`), with errors phrased the way
//! the Kubernetes API server phrases them.

use std::collections::HashMap;

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::Cause;

/// A compiled `openAPIV3Schema` of one CRD version.
pub struct CompiledVersionSchema {
    raw: Value,
    regexes: HashMap<String, Regex>,
    cel: Option<kube_cel::CompiledSchema>,
    validator: kube_cel::Validator,
    /// Every CEL rule sits under `spec` and passes whenever its value equals the old one, so an
    /// update that leaves `spec` as it was needs no CEL evaluation (see [`spec_rules_ratchet`]).
    ratchet_unchanged_spec: bool,
}

impl std::fmt::Debug for CompiledVersionSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledVersionSchema")
            .field("has_cel", &self.cel.is_some())
            .finish()
    }
}

fn collect_patterns(
    schema: &Value,
    path: &str,
    out: &mut HashMap<String, Regex>,
    errs: &mut Vec<Cause>,
) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if let Some(p) = obj.get("pattern").and_then(Value::as_str)
        && !out.contains_key(p)
    {
        match Regex::new(p) {
            Ok(re) => {
                out.insert(p.to_string(), re);
            }
            Err(e) => errs.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.pattern"),
                format!("Invalid value: {}: {e}", quote(p)),
            )),
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            collect_patterns(v, &format!("{path}.properties[{k}]"), out, errs);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = obj.get(key) {
            collect_patterns(v, &format!("{path}.{key}"), out, errs);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(arr) = obj.get(key).and_then(Value::as_array) {
            for (i, v) in arr.iter().enumerate() {
                collect_patterns(v, &format!("{path}.{key}[{i}]"), out, errs);
            }
        }
    }
}

/// Every `rule` of the `x-kubernetes-validations` in `schema`, at any depth.
fn cel_rules<'a>(schema: &'a Value, out: &mut Vec<&'a str>) {
    match schema {
        Value::Object(m) => {
            if let Some(rules) = m.get("x-kubernetes-validations").and_then(Value::as_array) {
                out.extend(
                    rules
                        .iter()
                        .map(|r| r.get("rule").and_then(Value::as_str).unwrap_or("")),
                );
            }
            m.values().for_each(|v| cel_rules(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| cel_rules(v, out)),
        _ => {}
    }
}

/// Whether an update whose `spec` equals the stored one can skip the CEL rules: the root has
/// no rules of its own, no property but `spec` has any, and every rule under `spec` either does
/// not read `oldSelf` (kube-apiserver ratchets those: an unchanged value is not re-judged) or
/// is one of the transition rules that hold whenever `self == oldSelf` (`self == oldSelf`,
/// `has(self.f) == has(oldSelf.f)`). Status updates and finalizer patches are then as cheap
/// as they are meant to be; the OpenAPI checks still run on the whole object.
fn spec_rules_ratchet(raw: &Value) -> bool {
    let Some(root) = raw.as_object() else {
        return false;
    };
    if root.contains_key("x-kubernetes-validations") {
        return false;
    }
    let Some(props) = root.get("properties").and_then(Value::as_object) else {
        return false;
    };
    let mut outside = Vec::new();
    for (k, v) in props {
        if k != "spec" {
            cel_rules(v, &mut outside);
        }
    }
    // Rules anywhere else in the root (e.g. under allOf) are not accounted for: no shortcut.
    let mut all = Vec::new();
    cel_rules(raw, &mut all);
    let mut under_spec = Vec::new();
    if let Some(spec) = props.get("spec") {
        cel_rules(spec, &mut under_spec);
    }
    outside.is_empty()
        && all.len() == under_spec.len()
        && under_spec.iter().all(|r| holds_when_unchanged(r))
}

fn holds_when_unchanged(rule: &str) -> bool {
    let r: String = rule.chars().filter(|c| !c.is_whitespace()).collect();
    if !r.contains("oldSelf") || r == "self==oldSelf" || r == "oldSelf==self" {
        return true;
    }
    // has(self.f) == has(oldSelf.f)
    let Some(rest) = r.strip_prefix("has(self.") else {
        return false;
    };
    let Some((field, rest)) = rest.split_once(")==has(oldSelf.") else {
        return false;
    };
    rest.strip_suffix(')') == Some(field)
        && !field.is_empty()
        && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn has_cel(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.contains_key("x-kubernetes-validations") || m.values().any(has_cel),
        Value::Array(a) => a.iter().any(has_cel),
        _ => false,
    }
}

/// Go's `%q`-like rendering of a string.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// How the API server renders a value in `Invalid value: X`.
fn render(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        Value::Object(_) => "\"object\"".to_string(),
        Value::Array(_) => "\"array\"".to_string(),
        Value::Null => "\"null\"".to_string(),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl CompiledVersionSchema {
    /// Compiles a schema; invalid patterns and CEL rules that do not compile are reported as
    /// causes against the CRD (`spec.versions[i].schema.openAPIV3Schema...`).
    pub fn compile(raw: &Value, crd_path: &str) -> Result<Self, Vec<Cause>> {
        let mut regexes = HashMap::new();
        let mut errs = Vec::new();
        collect_patterns(raw, crd_path, &mut regexes, &mut errs);
        let cel = if has_cel(raw) {
            let compiled = kube_cel::compile_schema(raw);
            for e in compiled.compilation_errors() {
                errs.push(Cause::new(
                    "FieldValueInvalid",
                    format!("{crd_path}.x-kubernetes-validations"),
                    format!("Invalid value: \"rule\": compilation failed: {e}"),
                ));
            }
            Some(compiled)
        } else {
            None
        };
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Self {
            raw: raw.clone(),
            regexes,
            ratchet_unchanged_spec: cel.is_some() && spec_rules_ratchet(raw),
            cel,
            validator: kube_cel::Validator::new(),
        })
    }

    /// Removes fields the schema does not declare (unless `x-kubernetes-preserve-unknown-fields`)
    /// and applies `default`s. Returns the pruned field paths (for `fieldValidation=Strict`).
    pub fn prune_and_default(&self, obj: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        prune(&self.raw, obj, "", true, &mut pruned);
        *obj = kube_cel::apply_defaults(&self.raw, obj);
        pruned
    }

    /// Validates an object (already pruned and defaulted); `old` is the stored object on update.
    pub fn validate(
        &self,
        obj: &Value,
        old: Option<&Value>,
        api_version: &str,
        group: &str,
        kind: &str,
    ) -> Vec<Cause> {
        let mut causes = Vec::new();
        self.walk(&self.raw, obj, "", true, &mut causes);
        let spec_unchanged = self.ratchet_unchanged_spec
            && old.is_some_and(|old| old.get("spec") == obj.get("spec"));
        if causes.is_empty()
            && !spec_unchanged
            && let Some(cel) = &self.cel
        {
            let ctx = kube_cel::RootContext {
                api_version: api_version.to_string(),
                api_group: group.to_string(),
                kind: kind.to_string(),
            };
            if let Err(errs) =
                self.validator
                    .validate_compiled_with_context(cel, obj, old, Some(&ctx))
            {
                for e in errs.iter() {
                    let value = lookup(obj, &e.field_path)
                        .map(render)
                        .unwrap_or_else(|| "\"object\"".to_string());
                    let (reason, msg) = match e.reason.as_deref() {
                        Some("FieldValueForbidden") => {
                            ("FieldValueForbidden", format!("Forbidden: {}", e.message))
                        }
                        Some("FieldValueRequired") => (
                            "FieldValueRequired",
                            format!("Required value: {}", e.message),
                        ),
                        Some("FieldValueDuplicate") => (
                            "FieldValueDuplicate",
                            format!("Duplicate value: {}", e.message),
                        ),
                        _ => (
                            "FieldValueInvalid",
                            format!("Invalid value: {value}: {}", e.message),
                        ),
                    };
                    causes.push(Cause::new(reason, e.field_path.clone(), msg));
                }
            }
        }
        causes
    }

    fn walk(&self, schema: &Value, v: &Value, path: &str, root: bool, out: &mut Vec<Cause>) {
        let Some(s) = schema.as_object() else { return };
        let shown = if path.is_empty() { "<root>" } else { path };
        if v.is_null() {
            if s.get("nullable").and_then(Value::as_bool) == Some(true) {
                return;
            }
            if let Some(t) = s.get("type").and_then(Value::as_str) {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: \"null\": {shown} in body must be of type {t}: \"null\""
                    ),
                ));
            }
            return;
        }
        let int_or_string =
            s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
        if int_or_string {
            if !(v.is_string() || type_name(v) == "integer") {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {shown} in body must be of type integer or string: {}",
                        quote(type_name(v)),
                        quote(type_name(v))
                    ),
                ));
                return;
            }
        } else if let Some(t) = s.get("type").and_then(Value::as_str) {
            let actual = type_name(v);
            let ok = match t {
                "integer" => actual == "integer" || v.as_f64().is_some_and(|f| f.fract() == 0.0),
                "number" => actual == "integer" || actual == "number",
                other => other == actual,
            };
            if !ok {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {shown} in body must be of type {t}: {}",
                        quote(actual),
                        quote(actual)
                    ),
                ));
                return;
            }
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array)
            && !e.contains(v)
        {
            let supported: Vec<String> = e.iter().map(render).collect();
            out.push(Cause::new(
                "FieldValueNotSupported",
                path,
                format!(
                    "Unsupported value: {}: supported values: {}",
                    render(v),
                    supported.join(", ")
                ),
            ));
        }
        match v {
            Value::String(st) => {
                if let Some(p) = s.get("pattern").and_then(Value::as_str)
                    && let Some(re) = self.regexes.get(p)
                    && !re.is_match(st)
                {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {}: {shown} in body should match '{p}'",
                            quote(st)
                        ),
                    ));
                }
                if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
                    && st.chars().count() as u64 > max
                {
                    out.push(Cause::new(
                        "FieldValueTooLong",
                        path,
                        format!("Too long: may not be more than {max} bytes"),
                    ));
                }
                if let Some(min) = s.get("minLength").and_then(Value::as_u64)
                    && (st.chars().count() as u64) < min
                {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        path,
                        format!("Invalid value: {}: {shown} in body should be at least {min} chars long", quote(st)),
                    ));
                }
            }
            Value::Number(n) => {
                let f = n.as_f64().unwrap_or(0.0);
                if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
                    let excl = s.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
                    if (excl && f <= min) || (!excl && f < min) {
                        let word = if excl {
                            "greater than"
                        } else {
                            "greater than or equal to"
                        };
                        out.push(Cause::new(
                            "FieldValueInvalid",
                            path,
                            format!(
                                "Invalid value: {n}: {shown} in body should be {word} {}",
                                num(min)
                            ),
                        ));
                    }
                }
                if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
                    let excl = s.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
                    if (excl && f >= max) || (!excl && f > max) {
                        let word = if excl {
                            "less than"
                        } else {
                            "less than or equal to"
                        };
                        out.push(Cause::new(
                            "FieldValueInvalid",
                            path,
                            format!(
                                "Invalid value: {n}: {shown} in body should be {word} {}",
                                num(max)
                            ),
                        ));
                    }
                }
                if let Some(m) = s.get("multipleOf").and_then(Value::as_f64)
                    && m > 0.0
                    && (f / m).fract() != 0.0
                {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {n}: {shown} in body should be a multiple of {}",
                            num(m)
                        ),
                    ));
                }
            }
            Value::Array(items) => {
                let len = items.len() as u64;
                if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                    && len > max
                {
                    out.push(Cause::new(
                        "FieldValueTooMany",
                        path,
                        format!("Too many: {len}: must have at most {max} items"),
                    ));
                }
                if let Some(min) = s.get("minItems").and_then(Value::as_u64)
                    && len < min
                {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {len}: {shown} in body should have at least {min} items"
                        ),
                    ));
                }
                let list_type = s.get("x-kubernetes-list-type").and_then(Value::as_str);
                let unique = s.get("uniqueItems").and_then(Value::as_bool) == Some(true);
                if list_type == Some("set") || unique {
                    for (i, it) in items.iter().enumerate() {
                        if items[..i].contains(it) {
                            out.push(Cause::new(
                                "FieldValueDuplicate",
                                format!("{path}[{i}]"),
                                format!("Duplicate value: {}", render(it)),
                            ));
                        }
                    }
                }
                if list_type == Some("map") {
                    let keys: Vec<&str> = s
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let key_of = |it: &Value| {
                        keys.iter()
                            .map(|k| it.get(*k).cloned().unwrap_or(Value::Null))
                            .collect::<Vec<_>>()
                    };
                    for (i, it) in items.iter().enumerate() {
                        let k = key_of(it);
                        if items[..i].iter().any(|o| key_of(o) == k) {
                            let shown_key: Map<String, Value> = keys
                                .iter()
                                .map(|kk| {
                                    (kk.to_string(), it.get(*kk).cloned().unwrap_or(Value::Null))
                                })
                                .collect();
                            out.push(Cause::new(
                                "FieldValueDuplicate",
                                format!("{path}[{i}]"),
                                format!("Duplicate value: {}", Value::Object(shown_key)),
                            ));
                        }
                    }
                }
                if let Some(item_schema) = s.get("items") {
                    for (i, it) in items.iter().enumerate() {
                        self.walk(item_schema, it, &format!("{path}[{i}]"), false, out);
                    }
                }
            }
            Value::Object(m) => {
                let len = m.len() as u64;
                if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
                    && len > max
                {
                    out.push(Cause::new(
                        "FieldValueTooMany",
                        path,
                        format!("Too many: {len}: must have at most {max} items"),
                    ));
                }
                if let Some(min) = s.get("minProperties").and_then(Value::as_u64)
                    && len < min
                {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        path,
                        format!("Invalid value: {len}: {shown} in body should have at least {min} properties"),
                    ));
                }
                if let Some(req) = s.get("required").and_then(Value::as_array) {
                    for r in req.iter().filter_map(Value::as_str) {
                        if !m.contains_key(r) {
                            out.push(Cause::new(
                                "FieldValueRequired",
                                join(path, r),
                                "Required value",
                            ));
                        }
                    }
                }
                let props = s.get("properties").and_then(Value::as_object);
                for (k, val) in m {
                    if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    if let Some(ps) = props.and_then(|p| p.get(k)) {
                        self.walk(ps, val, &join(path, k), false, out);
                    } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object())
                    {
                        self.walk(ap, val, &join(path, k), false, out);
                    }
                }
            }
            Value::Bool(_) | Value::Null => {}
        }
        if let Some(all) = s.get("allOf").and_then(Value::as_array) {
            for sub in all {
                self.walk(sub, v, path, root, out);
            }
        }
        if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
            let mut first = Vec::new();
            let ok = any.iter().enumerate().any(|(i, sub)| {
                let mut errs = Vec::new();
                self.walk(sub, v, path, root, &mut errs);
                if i == 0 {
                    first = errs.clone();
                }
                errs.is_empty()
            });
            if !ok {
                out.extend(first);
            }
        }
        if let Some(one) = s.get("oneOf").and_then(Value::as_array) {
            let passing = one
                .iter()
                .filter(|sub| {
                    let mut errs = Vec::new();
                    self.walk(sub, v, path, root, &mut errs);
                    errs.is_empty()
                })
                .count();
            if passing != 1 {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {}: {shown} in body must validate one and only one schema (oneOf)", render(v)),
                ));
            }
        }
        if let Some(not) = s.get("not") {
            let mut errs = Vec::new();
            self.walk(not, v, path, root, &mut errs);
            if errs.is_empty() {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {shown} in body must not validate the schema (not)",
                        render(v)
                    ),
                ));
            }
        }
    }
}

fn num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(obj);
    }
    let mut cur = obj;
    for seg in path.split('.') {
        let (name, idx) = match seg.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

fn prune(schema: &Value, v: &mut Value, path: &str, root: bool, pruned: &mut Vec<String>) {
    let Some(s) = schema.as_object() else { return };
    let preserve = s
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    let embedded = s
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true);
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s
                .get("additionalProperties")
                .filter(|a| a.is_object() || a.as_bool() == Some(true));
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if (root || embedded) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child = join(path, &k);
                if let Some(ps) = props.and_then(|p| p.get(&k)) {
                    if let Some(cv) = m.get_mut(&k) {
                        prune(ps, cv, &child, false, pruned);
                    }
                } else if let Some(ap) = additional {
                    if let Some(cv) = m.get_mut(&k) {
                        prune(ap, cv, &child, false, pruned);
                    }
                } else if !preserve {
                    m.remove(&k);
                    pruned.push(child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    prune(is, it, &format!("{path}[{i}]"), false, pruned);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8, "minLength": 2},
                        "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                        "state": {"type": "string", "enum": ["A", "B"]},
                        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2, "x-kubernetes-list-type": "set"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"x-kubernetes-int-or-string": true}
                    },
                    "x-kubernetes-validations": [
                        {"rule": "self.replicas <= 5 || self.name != 'small'", "message": "small allows 5 replicas"},
                        {"rule": "!has(oldSelf.name) || self.name == oldSelf.name", "message": "name is immutable"}
                    ]
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        })
    }

    fn check(obj: Value, old: Option<Value>) -> Vec<String> {
        let c =
            CompiledVersionSchema::compile(&schema(), "spec.versions[0].schema.openAPIV3Schema")
                .unwrap();
        let mut obj = obj;
        c.prune_and_default(&mut obj);
        c.validate(&obj, old.as_ref(), "x.io/v1", "x.io", "Thing")
            .iter()
            .map(Cause::render)
            .collect()
    }

    #[test]
    fn prunes_and_defaults() {
        let c = CompiledVersionSchema::compile(&schema(), "s").unwrap();
        let mut obj = json!({"apiVersion": "x/v1", "kind": "T", "metadata": {"name": "a"}, "extra": 1,
            "spec": {"name": "ab", "unknown": true, "free": {"x": {"y": 1}}}});
        let pruned = c.prune_and_default(&mut obj);
        assert_eq!(
            pruned,
            vec!["extra".to_string(), "spec.unknown".to_string()]
        );
        assert_eq!(obj["spec"]["replicas"], json!(1));
        assert_eq!(obj["spec"]["free"]["x"]["y"], json!(1));
        assert_eq!(obj["metadata"]["name"], json!("a"));
    }

    #[test]
    fn openapi_errors_are_phrased_like_the_api_server() {
        let cases: Vec<(Value, &str)> = vec![
            (json!({"spec": {}}), "spec.name: Required value"),
            (
                json!({"spec": {"name": "AB"}}),
                "spec.name: Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'",
            ),
            (
                json!({"spec": {"name": "abcdefghij"}}),
                "spec.name: Too long: may not be more than 8 bytes",
            ),
            (
                json!({"spec": {"name": "a"}}),
                "spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long",
            ),
            (
                json!({"spec": {"name": "ab", "replicas": -1}}),
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ),
            (
                json!({"spec": {"name": "ab", "replicas": 11}}),
                "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
            ),
            (
                json!({"spec": {"name": "ab", "replicas": "x"}}),
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ),
            (
                json!({"spec": {"name": "ab", "state": "C"}}),
                "spec.state: Unsupported value: \"C\": supported values: \"A\", \"B\"",
            ),
            (
                json!({"spec": {"name": "ab", "tags": []}}),
                "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
            ),
            (
                json!({"spec": {"name": "ab", "tags": ["a", "b", "c"]}}),
                "spec.tags: Too many: 3: must have at most 2 items",
            ),
            (
                json!({"spec": {"name": "ab", "tags": ["a", "a"]}}),
                "spec.tags[1]: Duplicate value: \"a\"",
            ),
            (
                json!({"spec": {"name": "ab", "labels": {}}}),
                "spec.labels: Invalid value: 0: spec.labels in body should have at least 1 properties",
            ),
            (
                json!({"spec": {"name": "ab", "labels": {"a": 1}}}),
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
            ),
            (
                json!({"spec": {"name": "ab", "port": true}}),
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer or string: \"boolean\"",
            ),
            (
                json!({"spec": {"name": "small", "replicas": 6}}),
                "spec: Invalid value: \"object\": small allows 5 replicas",
            ),
        ];
        for (obj, want) in cases {
            let got = check(obj.clone(), None);
            assert_eq!(got, vec![want.to_string()], "{obj}");
        }
        assert!(
            check(
                json!({"spec": {"name": "ab", "port": 80, "tags": ["x"]}}),
                None
            )
            .is_empty()
        );
        assert!(check(json!({"spec": {"name": "ab", "port": "http"}}), None).is_empty());
    }

    #[test]
    fn an_unchanged_spec_ratchets_its_rules() {
        let raw = |status_rule: bool| {
            let mut v = json!({
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "message": "name is immutable"}]},
                            "size": {"type": "integer"}
                        },
                        "x-kubernetes-validations": [
                            {"rule": "has(self.name) == has(oldSelf.name)", "message": "name stays"},
                            {"rule": "self.size < 10", "message": "size below 10"}
                        ]
                    },
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }
            });
            if status_rule {
                v["properties"]["status"]["x-kubernetes-validations"] =
                    json!([{"rule": "true", "message": "-"}]);
            }
            v
        };
        let check = |raw: &Value, obj: Value, old: Value| -> Vec<String> {
            let c = CompiledVersionSchema::compile(raw, "s").unwrap();
            c.validate(&obj, Some(&old), "x.io/v1", "x.io", "Thing")
                .iter()
                .map(Cause::render)
                .collect()
        };
        // Stored before the size rule existed: a status update leaves the spec alone, so it is
        // not judged again (kube-apiserver ratchets unchanged values the same way).
        let stored = json!({"spec": {"name": "a", "size": 50}});
        let status_update = json!({"spec": {"name": "a", "size": 50}, "status": {"x": 1}});
        assert!(check(&raw(false), status_update.clone(), stored.clone()).is_empty());
        // A spec change is judged by every rule.
        let errs = check(
            &raw(false),
            json!({"spec": {"name": "b", "size": 50}}),
            stored.clone(),
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        // A rule outside spec turns the shortcut off.
        assert_eq!(check(&raw(true), status_update, stored).len(), 1);
        assert!(holds_when_unchanged("self == oldSelf"));
        assert!(holds_when_unchanged(
            "has(self.templateData) == has(oldSelf.templateData)"
        ));
        assert!(holds_when_unchanged("self.size < 10"));
        assert!(!holds_when_unchanged("self > oldSelf"));
        assert!(!holds_when_unchanged("has(self.a) == has(oldSelf.b)"));
        assert!(!holds_when_unchanged(
            "!has(oldSelf.name) || self.name == oldSelf.name"
        ));
    }

    #[test]
    fn the_workflow_crd_ratchets_status_updates() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/crds/workflows.tinkerbell.org.yaml"
        );
        let crd: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let with_cel: Vec<&Value> = versions
            .iter()
            .map(|v| &v["schema"]["openAPIV3Schema"])
            .filter(|raw| has_cel(raw))
            .collect();
        assert!(!with_cel.is_empty());
        assert!(with_cel.iter().all(|raw| spec_rules_ratchet(raw)));
    }

    #[test]
    fn transition_rules_use_old_self() {
        let old = json!({"spec": {"name": "ab", "replicas": 1}});
        assert_eq!(
            check(json!({"spec": {"name": "cd"}}), Some(old.clone())),
            vec!["spec: Invalid value: \"object\": name is immutable"]
        );
        assert!(check(json!({"spec": {"name": "ab", "replicas": 3}}), Some(old)).is_empty());
    }

    #[test]
    fn bad_patterns_and_rules_are_rejected() {
        let bad =
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}});
        assert!(CompiledVersionSchema::compile(&bad, "s").is_err());
        let bad_cel =
            json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a ==="}]});
        assert!(CompiledVersionSchema::compile(&bad_cel, "s").is_err());
    }
}
