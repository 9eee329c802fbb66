//! Go's `text/template` built-in functions (`and`, `or`, `not`, `len`, `index`, `eq`..`ge`,
//! `print*`, `html`, `js`, `urlquery`, `call`), with Go's argument checks and error messages.

use crate::funcdef::{FnCtx, Table, Ty, add};
use crate::gofmt;
use crate::value::Value;

/// Registers Go's built-ins. `slice` is not among them: Tinkerbell gives text/template Sprig's
/// functions, and a function given to a template replaces the built-in of the same name, so a
/// Tinkerbell template's `slice` is always Sprig's (see `sprig::slice_impl`).
pub(crate) fn register(t: &mut Table) {
    use Ty::*;
    let builtin = |t: &mut Table, name, params, variadic, imp| {
        add(t, name, params, variadic, imp).builtin = true;
    };
    // and/or are evaluated by the executor (short-circuit); the impl is never reached.
    builtin(t, "and", &[Reflect], Some(Reflect), |_, a| {
        Ok(a.into_iter().last().unwrap_or(Value::Missing))
    });
    builtin(t, "or", &[Reflect], Some(Reflect), |_, a| {
        Ok(a.into_iter().last().unwrap_or(Value::Missing))
    });
    builtin(t, "call", &[Reflect], Some(Reflect), |_, _| {
        Err("call of nil".to_string())
    });
    builtin(t, "not", &[Reflect], None, |_, a| {
        Ok(Value::Bool(!a[0].truth()))
    });
    builtin(t, "len", &[Reflect], None, |_, a| match &a[0] {
        Value::Str(s) => Ok(Value::Int(s.len() as i64)),
        Value::List(l) => Ok(Value::Int(l.len() as i64)),
        Value::Map(m) => Ok(Value::Int(m.borrow().len() as i64)),
        Value::Missing | Value::Nil => Err("len of nil pointer".to_string()),
        other => Err(format!("len of type {}", other.type_name())),
    });
    builtin(t, "index", &[Reflect], Some(Reflect), index);
    builtin(t, "eq", &[Reflect], Some(Reflect), |_, a| {
        eq(&a[0], &a[1..]).map(Value::Bool)
    });
    builtin(t, "ne", &[Reflect, Reflect], None, |_, a| {
        eq(&a[0], &a[1..]).map(|b| Value::Bool(!b))
    });
    builtin(t, "lt", &[Reflect, Reflect], None, |_, a| {
        lt(&a[0], &a[1]).map(Value::Bool)
    });
    builtin(t, "le", &[Reflect, Reflect], None, |_, a| {
        le(&a[0], &a[1]).map(Value::Bool)
    });
    builtin(t, "gt", &[Reflect, Reflect], None, |_, a| {
        le(&a[0], &a[1]).map(|b| Value::Bool(!b))
    });
    builtin(t, "ge", &[Reflect, Reflect], None, |_, a| {
        lt(&a[0], &a[1]).map(|b| Value::Bool(!b))
    });
    builtin(t, "print", &[], Some(Any), |_, a| {
        Ok(Value::str(gofmt::sprint(&a)))
    });
    builtin(t, "println", &[], Some(Any), |_, a| {
        Ok(Value::str(gofmt::sprintln(&a)))
    });
    builtin(t, "printf", &[Str], Some(Any), |_, a| {
        let f = a[0].as_str().unwrap_or_default().to_string();
        Ok(Value::str(gofmt::sprintf(&f, &a[1..])))
    });
    builtin(t, "html", &[], Some(Any), |_, a| {
        Ok(Value::str(html_escape(&eval_args(&a))))
    });
    builtin(t, "js", &[], Some(Any), |_, a| {
        Ok(Value::str(js_escape(&eval_args(&a))))
    });
    builtin(t, "urlquery", &[], Some(Any), |_, a| {
        Ok(Value::str(query_escape(&eval_args(&a))))
    });
}

/// Go's `evalArgs` for html/js/urlquery: a lone string as is, otherwise `fmt.Sprint` with nil
/// printed as `<no value>`.
fn eval_args(a: &[Value]) -> String {
    if let [Value::Str(s)] = a {
        return s.to_string();
    }
    let mapped: Vec<Value> = a
        .iter()
        .map(|v| {
            if v.is_nilish() {
                Value::str("<no value>")
            } else {
                v.clone()
            }
        })
        .collect();
    gofmt::sprint(&mapped)
}

/// `template.HTMLEscapeString`.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push('\u{FFFD}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// `template.JSEscapeString`.
pub fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if (c as u32) < 0x80 => out.push(c),
            c if gofmt::is_print(c) => out.push(c),
            c => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{:04X}", u));
                }
            }
        }
    }
    out
}

/// `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn index(_: &FnCtx, a: Vec<Value>) -> Result<Value, String> {
    let mut item = a[0].clone();
    if item.is_nilish() {
        return Err("index of untyped nil".to_string());
    }
    for idx in &a[1..] {
        item = match &item {
            Value::Nil => return Err("index of nil pointer".to_string()),
            Value::List(_) | Value::Str(_) => {
                let len = match &item {
                    Value::List(l) => l.len(),
                    Value::Str(s) => s.len(),
                    _ => 0,
                };
                let x = match idx {
                    Value::Int(i) => *i,
                    Value::Missing | Value::Nil => {
                        return Err("cannot index slice/array with nil".to_string());
                    }
                    other => {
                        return Err(format!(
                            "cannot index slice/array with type {}",
                            other.type_name()
                        ));
                    }
                };
                if x < 0 || x as u64 > len as u64 {
                    return Err(format!("index out of range: {x}"));
                }
                let x = x as usize;
                if x == len {
                    return Err("reflect: slice index out of range".to_string());
                }
                match &item {
                    Value::List(l) => l[x].clone(),
                    Value::Str(s) => Value::Int(i64::from(s.as_bytes()[x])),
                    _ => Value::Missing,
                }
            }
            Value::Map(m) => {
                let key = match idx {
                    Value::Str(s) => s.to_string(),
                    Value::Missing | Value::Nil => {
                        return Err("value is nil; should be of type string".to_string());
                    }
                    other => {
                        return Err(format!(
                            "value has type {}; should be string",
                            other.type_name()
                        ));
                    }
                };
                m.borrow().get(&key).cloned().unwrap_or(Value::Nil)
            }
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(item)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum BasicKind {
    Invalid,
    Bool,
    Int,
    Float,
    Str,
    Other,
}

fn basic_kind(v: &Value) -> BasicKind {
    match v {
        Value::Missing | Value::Nil => BasicKind::Invalid,
        Value::Bool(_) => BasicKind::Bool,
        Value::Int(_) => BasicKind::Int,
        Value::Float(_) => BasicKind::Float,
        Value::Str(_) => BasicKind::Str,
        _ => BasicKind::Other,
    }
}

const ERR_BAD_COMPARISON: &str = "incompatible types for comparison";
const ERR_BAD_COMPARISON_TYPE: &str = "invalid type for comparison";

fn eq(a: &Value, rest: &[Value]) -> Result<bool, String> {
    if rest.is_empty() {
        return Err("missing argument for comparison".to_string());
    }
    let k1 = basic_kind(a);
    for b in rest {
        let k2 = basic_kind(b);
        let truth = if k1 != k2 {
            if !a.is_nilish() && !b.is_nilish() {
                return Err(ERR_BAD_COMPARISON.to_string());
            }
            false
        } else {
            match (a, b) {
                (Value::Bool(x), Value::Bool(y)) => x == y,
                (Value::Int(x), Value::Int(y)) => x == y,
                (Value::Float(x), Value::Float(y)) => x == y,
                (Value::Str(x), Value::Str(y)) => x == y,
                (x, y) if x.is_nilish() && y.is_nilish() => true,
                (x, _) => {
                    return Err(format!(
                        "non-comparable type {}: {}",
                        gofmt::format_v(x),
                        x.type_name()
                    ));
                }
            }
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lt(a: &Value, b: &Value) -> Result<bool, String> {
    let k1 = basic_kind(a);
    if matches!(k1, BasicKind::Invalid | BasicKind::Other) {
        return Err(ERR_BAD_COMPARISON_TYPE.to_string());
    }
    let k2 = basic_kind(b);
    if matches!(k2, BasicKind::Invalid | BasicKind::Other) {
        return Err(ERR_BAD_COMPARISON_TYPE.to_string());
    }
    if k1 != k2 {
        return Err(ERR_BAD_COMPARISON.to_string());
    }
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x < y),
        (Value::Float(x), Value::Float(y)) => Ok(x < y),
        (Value::Str(x), Value::Str(y)) => Ok(x < y),
        _ => Err(ERR_BAD_COMPARISON_TYPE.to_string()),
    }
}

fn le(a: &Value, b: &Value) -> Result<bool, String> {
    let l = lt(a, b)?;
    if l {
        return Ok(true);
    }
    eq(a, std::slice::from_ref(b))
}
