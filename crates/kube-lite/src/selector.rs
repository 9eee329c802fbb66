//! Label selectors (`a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`) and field selectors
//! (`metadata.name`, `metadata.namespace`, plus any other dotted path compared as a string).

use serde_json::Value;

/// A parse error; its text becomes the 400 message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

fn valid_key(k: &str) -> bool {
    let name = match k.rsplit_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty()
                || prefix.len() > 253
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            {
                return false;
            }
            name
        }
        None => k,
    };
    valid_value(name) && !name.is_empty()
}

fn valid_value(v: &str) -> bool {
    if v.is_empty() {
        return true;
    }
    let bytes = v.as_bytes();
    v.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError(format!("unbalanced parenthesis in {s:?}")));
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError(format!("unbalanced parenthesis in {s:?}")));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            SelectorError(format!("{whole:?}: expected a parenthesised set of values"))
        })?;
    let mut vals = Vec::new();
    for v in inner.split(',') {
        let v = v.trim();
        if !valid_value(v) {
            return Err(SelectorError(format!(
                "{whole:?}: invalid label value {v:?}"
            )));
        }
        vals.push(v.to_string());
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in split_top(s)? {
            let p = part.trim();
            if p.is_empty() {
                return Err(SelectorError(format!("empty requirement in {s:?}")));
            }
            let req = if let Some(key) = p.strip_prefix('!') {
                Requirement {
                    key: key.trim().to_string(),
                    op: Op::NotExists,
                }
            } else if let Some((k, v)) = p.split_once("!=") {
                Requirement {
                    key: k.trim().to_string(),
                    op: Op::NotEq(v.trim().to_string()),
                }
            } else if let Some((k, v)) = p.split_once("==") {
                Requirement {
                    key: k.trim().to_string(),
                    op: Op::Eq(v.trim().to_string()),
                }
            } else if let Some((k, v)) = p.split_once('=') {
                Requirement {
                    key: k.trim().to_string(),
                    op: Op::Eq(v.trim().to_string()),
                }
            } else if let Some(idx) = p.find(" notin ").or_else(|| p.find(" notin(")) {
                Requirement {
                    key: p[..idx].trim().to_string(),
                    op: Op::NotIn(parse_set(&p[idx + 6..], p)?),
                }
            } else if let Some(idx) = p.find(" in ").or_else(|| p.find(" in(")) {
                Requirement {
                    key: p[..idx].trim().to_string(),
                    op: Op::In(parse_set(&p[idx + 3..], p)?),
                }
            } else {
                Requirement {
                    key: p.to_string(),
                    op: Op::Exists,
                }
            };
            if !valid_key(&req.key) {
                return Err(SelectorError(format!(
                    "{p:?}: invalid label key {:?}",
                    req.key
                )));
            }
            if let Op::Eq(v) | Op::NotEq(v) = &req.op
                && !valid_value(v)
            {
                return Err(SelectorError(format!("{p:?}: invalid label value {v:?}")));
            }
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    /// Builds a selector from a `metav1.LabelSelector` JSON value (matchLabels + matchExpressions),
    /// as webhook configurations carry.
    pub fn from_json(v: &Value) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in m {
                reqs.push(Requirement {
                    key: k.clone(),
                    op: Op::Eq(val.as_str().unwrap_or_default().to_string()),
                });
            }
        }
        if let Some(exprs) = v.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = match e
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                {
                    "In" => Op::In(values),
                    "NotIn" => Op::NotIn(values),
                    "Exists" => Op::Exists,
                    "DoesNotExist" => Op::NotExists,
                    other => {
                        return Err(SelectorError(format!(
                            "{other:?} is not a valid label selector operator"
                        )));
                    }
                };
                reqs.push(Requirement { key, op });
            }
        }
        Ok(Self { reqs })
    }

    /// Whether the labels (a JSON object of strings, or null) match.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match &r.op {
            Op::Eq(v) => get(&r.key) == Some(v.as_str()),
            Op::NotEq(v) => get(&r.key) != Some(v.as_str()),
            Op::In(vs) => get(&r.key).is_some_and(|x| vs.iter().any(|v| v == x)),
            Op::NotIn(vs) => get(&r.key).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Op::Exists => get(&r.key).is_some(),
            Op::NotExists => get(&r.key).is_none(),
        })
    }

    /// Whether this selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma separated.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
    /// The fields a type exposes to selectors, computed from the object (the object itself when
    /// unset).
    view: Option<fn(&Value) -> Value>,
}

impl PartialEq for FieldSelector {
    /// Selectors are equal when their requirements are (the views are not comparable).
    fn eq(&self, other: &Self) -> bool {
        self.reqs == other.reqs && self.view.is_some() == other.view.is_some()
    }
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter. Supported fields: `metadata.name`,
    /// `metadata.namespace`, and for any other dotted path the string form of that field.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs, view: None });
        }
        for part in s.split(',') {
            let p = part.trim();
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError(format!(
                    "invalid field selector {p:?}: expected field=value"
                )));
            };
            let k = k.trim();
            if k.is_empty()
                || !k
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
            {
                return Err(SelectorError(format!("invalid field selector key {k:?}")));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(Self { reqs, view: None })
    }

    /// Renames (or refuses, with the error) each requirement's field label.
    pub fn map_fields(
        mut self,
        f: impl Fn(&str) -> Result<String, SelectorError>,
    ) -> Result<Self, SelectorError> {
        for r in &mut self.reqs {
            r.0 = f(&r.0)?;
        }
        Ok(self)
    }

    /// Matches against `view(object)` instead of the object (a type's selectable fields).
    pub fn with_view(mut self, view: fn(&Value) -> Value) -> Self {
        self.view = Some(view);
        self
    }

    /// Whether the object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let computed = self.view.map(|v| v(obj));
        let obj = computed.as_ref().unwrap_or(obj);
        self.reqs.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }

    /// The `metadata.name` the selector pins, if any (kubectl's `wait` and `get NAME -w` use it).
    pub fn pinned_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(p, eq, _)| p == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_operators() {
        let labels = json!({"app": "web", "tier": "front", "env": "prod"});
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("tier in (front,back)", true),
            ("tier in (back)", false),
            ("tier notin (back)", true),
            ("tier notin (front)", false),
            ("missing notin (front)", true),
            ("env", true),
            ("missing", false),
            ("!missing", true),
            ("!env", false),
            ("app=web,tier in (front, back),!missing", true),
            ("app=web,env=dev", false),
            ("example.com/role", false),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(Some(&labels)), want, "{sel}");
        }
        assert!(LabelSelector::parse("!x").unwrap().matches(None));
    }

    #[test]
    fn label_errors() {
        for bad in [
            "app in front",
            "a=(",
            "=x",
            "app in (a",
            "a,,b",
            "bad key=x",
            "a=-x",
            "a in (b,-c)",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn label_from_json() {
        let s = LabelSelector::from_json(&json!({
            "matchLabels": {"a": "1"},
            "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}, {"key": "c", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        assert!(s.matches(Some(&json!({"a": "1", "b": "y"}))));
        assert!(!s.matches(Some(&json!({"a": "1", "c": "y"}))));
        assert!(
            LabelSelector::from_json(
                &json!({"matchExpressions": [{"key": "b", "operator": "Nope"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn fields() {
        let obj = json!({"metadata": {"name": "n1", "namespace": "ns"}, "spec": {"replicas": 2}});
        assert!(
            FieldSelector::parse("metadata.name=n1")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.name==n1,metadata.namespace=ns")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=n1")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("spec.replicas=2")
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=n1")
                .unwrap()
                .pinned_name(),
            Some("n1")
        );
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("a b=c").is_err());
    }
}
