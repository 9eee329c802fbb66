//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), which
//! `kubectl get` asks for: a CRD's `additionalPrinterColumns` (simple JSONPath: `.a.b`,
//! `.a[0]`, `.a[*].b`, `.a.*.b`; the first match is shown, `date` columns as an age), and
//! kubectl's usual columns for the built-in types.

use serde_json::{Value, json};

use crate::registry::ResourceType;

#[derive(Debug, Clone)]
enum Cell {
    Name,
    Age,
    Path(String),
    Count(&'static [&'static str]),
    Ready,
}

#[derive(Debug, Clone)]
struct Column {
    name: String,
    ty: String,
    priority: i64,
    description: String,
    cell: Cell,
}

fn col(name: &str, ty: &str, cell: Cell) -> Column {
    Column {
        name: name.into(),
        ty: ty.into(),
        priority: 0,
        description: String::new(),
        cell,
    }
}

fn columns(rt: &ResourceType, version: &str) -> Vec<Column> {
    let mut cols = vec![Column {
        name: "Name".into(),
        ty: "string".into(),
        priority: 0,
        description: "Name must be unique within a namespace.".into(),
        cell: Cell::Name,
    }];
    if let Some(v) = rt.crd_version(version) {
        if v.printer_columns.is_empty() {
            cols.push(col("Age", "date", Cell::Age));
        }
        for c in &v.printer_columns {
            cols.push(Column {
                name: c
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                ty: c
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("string")
                    .into(),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                description: c
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                cell: Cell::Path(
                    c.get("jsonPath")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                ),
            });
        }
        return cols;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") => {
            cols.push(col("Status", "string", Cell::Path(".status.phase".into())))
        }
        ("", "configmaps") => {
            cols.push(col("Data", "string", Cell::Count(&["data", "binaryData"])))
        }
        ("", "secrets") => {
            cols.push(col("Type", "string", Cell::Path(".type".into())));
            cols.push(col("Data", "string", Cell::Count(&["data"])));
        }
        ("apps", "deployments") => {
            cols.push(col("Ready", "string", Cell::Ready));
            cols.push(col(
                "Up-to-date",
                "integer",
                Cell::Path(".status.updatedReplicas".into()),
            ));
            cols.push(col(
                "Available",
                "integer",
                Cell::Path(".status.availableReplicas".into()),
            ));
        }
        ("coordination.k8s.io", "leases") => cols.push(col(
            "Holder",
            "string",
            Cell::Path(".spec.holderIdentity".into()),
        )),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            cols.push(col(
                "Created At",
                "date",
                Cell::Path(".metadata.creationTimestamp".into()),
            ));
            return cols;
        }
        _ => {}
    }
    cols.push(col("Age", "date", Cell::Age));
    cols
}

/// Evaluates a simple JSONPath and returns every match.
pub fn jsonpath<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut cur = vec![obj];
    let mut rest = path;
    while !rest.is_empty() {
        let (seg, index, tail) = if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], None, &r[end..])
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Vec::new();
            };
            let inner = &r[..end];
            if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                // A filter as CRD printer columns use them: `[?(@.type=="Ready")]`.
                let Some((field, want)) = parse_filter(filter) else {
                    return Vec::new();
                };
                rest = &r[end + 1..];
                cur = cur
                    .into_iter()
                    .filter_map(|v| v.as_array())
                    .flatten()
                    .filter(|e| jsonpath(e, field).first().and_then(|x| x.as_str()) == Some(want))
                    .collect();
                continue;
            }
            ("", Some(inner.trim_matches(['\'', '"'])), &r[end + 1..])
        } else {
            return Vec::new();
        };
        rest = tail;
        let mut next = Vec::new();
        for v in cur {
            match (seg, index) {
                ("*", None) => match v {
                    Value::Object(m) => next.extend(m.values()),
                    Value::Array(a) => next.extend(a.iter()),
                    _ => {}
                },
                ("", Some("*")) => {
                    if let Value::Array(a) = v {
                        next.extend(a.iter());
                    }
                }
                ("", Some(i)) => match (v, i.parse::<usize>()) {
                    (Value::Array(a), Ok(n)) => next.extend(a.get(n)),
                    (Value::Object(m), _) => next.extend(m.get(i)),
                    _ => {}
                },
                (key, _) if !key.is_empty() => next.extend(v.get(key)),
                _ => {}
            }
        }
        cur = next;
    }
    cur
}

/// `@.path=="value"` (or single quotes) -> (`.path`, `value`).
fn parse_filter(filter: &str) -> Option<(&str, &str)> {
    let (lhs, rhs) = filter.split_once("==")?;
    let field = lhs.trim().strip_prefix('@')?;
    let rhs = rhs.trim();
    let want = rhs
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| rhs.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))?;
    Some((field, want))
}

/// Kubernetes' `HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(ts: Option<&Value>) -> Value {
    let Some(s) = ts.and_then(Value::as_str) else {
        return json!("<unknown>");
    };
    match s.parse::<jiff::Timestamp>() {
        Ok(t) => json!(human_duration(
            jiff::Timestamp::now().as_second() - t.as_second()
        )),
        Err(_) => json!("<invalid>"),
    }
}

fn cell(c: &Column, obj: &Value) -> Value {
    match &c.cell {
        Cell::Name => obj
            .pointer("/metadata/name")
            .cloned()
            .unwrap_or(Value::Null),
        Cell::Age => age(obj.pointer("/metadata/creationTimestamp")),
        Cell::Count(fields) => {
            json!(
                fields
                    .iter()
                    .filter_map(|f| obj.get(*f).and_then(Value::as_object))
                    .map(|m| m.len())
                    .sum::<usize>()
            )
        }
        Cell::Ready => {
            let ready = obj
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = obj
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            json!(format!("{ready}/{want}"))
        }
        Cell::Path(p) => match jsonpath(obj, p).first() {
            None => Value::Null,
            Some(v) if c.ty == "date" && c.name != "Created At" => age(Some(v)),
            Some(Value::String(s)) => json!(s),
            Some(v) if c.ty == "string" => json!(v.to_string()),
            Some(v) => (*v).clone(),
        },
    }
}

/// Whether the Accept header asks for a Table.
pub fn wanted(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .next()
            .is_some_and(|first| first.split(';').any(|p| p.trim() == "as=Table"))
    })
}

/// One row.
fn row(cols: &[Column], obj: &Value, include: &str) -> Value {
    let cells: Vec<Value> = cols.iter().map(|c| cell(c, obj)).collect();
    let mut r = json!({"cells": cells});
    match include {
        "None" => {}
        "Object" => r["object"] = obj.clone(),
        _ => {
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
        }
    }
    r
}

/// A Table of objects.
pub fn table(
    rt: &ResourceType,
    version: &str,
    objs: &[Value],
    list_meta: Value,
    include: &str,
) -> Value {
    let cols = columns(rt, version);
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| {
            let mut d = json!({"name": c.name, "type": if c.ty == "date" { "string" } else { c.ty.as_str() },
                "format": "", "description": c.description, "priority": c.priority});
            if matches!(c.cell, Cell::Name) {
                d["format"] = json!("name");
            }
            d
        })
        .collect();
    let rows: Vec<Value> = objs.iter().map(|o| row(&cols, o, include)).collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let o = json!({"spec": {"nics": {"aa": {"ip": "1.2.3.4"}, "bb": {"ip": "5.6.7.8"}}, "list": [{"n": 1}, {"n": 2}]}});
        assert_eq!(
            jsonpath(&o, ".spec.nics.*.ip"),
            vec![&json!("1.2.3.4"), &json!("5.6.7.8")]
        );
        assert_eq!(jsonpath(&o, ".spec.list[1].n"), vec![&json!(2)]);
        assert_eq!(jsonpath(&o, ".spec.list[*].n"), vec![&json!(1), &json!(2)]);
        assert_eq!(jsonpath(&o, "{.spec.list[0].n}"), vec![&json!(1)]);
        assert!(jsonpath(&o, ".spec.missing.x").is_empty());
        assert!(jsonpath(&o, "spec").is_empty());
        // Filters, as CRD printer columns use them.
        let j = json!({"status": {"conditions": [
            {"type": "Running", "status": "False"}, {"type": "Completed", "status": "True"}]}});
        assert_eq!(
            jsonpath(&j, r#".status.conditions[?(@.type=="Completed")].status"#),
            vec![&json!("True")]
        );
        assert_eq!(
            jsonpath(&j, ".status.conditions[?(@.type=='Running')].status"),
            vec![&json!("False")]
        );
        assert!(jsonpath(&j, r#".status.conditions[?(@.type=="Failed")].status"#).is_empty());
        assert!(jsonpath(&j, r#".status.conditions[?(@.type)].status"#).is_empty());
    }

    #[test]
    fn durations_read_like_kubectl() {
        for (s, want) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
        ] {
            assert_eq!(human_duration(s), want);
        }
    }

    #[test]
    fn accept_detection() {
        assert!(wanted(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        )));
        assert!(!wanted(Some("application/json")));
        assert!(!wanted(None));
    }
}
