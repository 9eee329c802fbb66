//! Go `encoding/json` output for template values (`toJson`, `toPrettyJson`, `toRawJson`):
//! sorted keys, Go's float format, HTML-safe escaping unless raw.

use crate::gofmt::format_float;
use crate::value::{MAX_VALUE_DEPTH, Value};

/// Encodes like `json.Marshal` (`html` escapes `<`, `>` and `&`), or `json.MarshalIndent(v, "",
/// "  ")` when `pretty`.
pub fn encode(v: &Value, html: bool, pretty: bool) -> Result<String, String> {
    let mut out = String::new();
    write_value(&mut out, v, html, pretty, 0)?;
    Ok(out)
}

fn newline(out: &mut String, pretty: bool, depth: usize) {
    if pretty {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    }
}

fn write_value(
    out: &mut String,
    v: &Value,
    html: bool,
    pretty: bool,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_VALUE_DEPTH {
        return Err("json: value nested too deeply".to_string());
    }
    match v {
        Value::Missing | Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) => out.push_str(&float(*f)?),
        Value::Str(s) => write_string(out, s, html),
        Value::List(l) => {
            if l.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (k, e) in l.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                newline(out, pretty, depth + 1);
                write_value(out, e, html, pretty, depth + 1)?;
            }
            newline(out, pretty, depth);
            out.push(']');
        }
        Value::Map(m) => {
            let m = m.borrow();
            if m.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (k, (key, e)) in m.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                newline(out, pretty, depth + 1);
                write_string(out, key, html);
                out.push(':');
                if pretty {
                    out.push(' ');
                }
                write_value(out, e, html, pretty, depth + 1)?;
            }
            newline(out, pretty, depth);
            out.push('}');
        }
    }
    Ok(())
}

/// Go's `floatEncoder`: `%f` style between 1e-6 and 1e21, exponent style outside.
pub fn float(f: f64) -> Result<String, String> {
    if !f.is_finite() {
        return Err(format!(
            "json: unsupported value: {}",
            crate::gofmt::format_float_v(f)
        ));
    }
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let s = format_float(f, 'e', None);
        // clean up e-09 to e-9
        let b = s.as_bytes();
        let n = b.len();
        if n >= 4 && b[n - 4] == b'e' && b[n - 3] == b'-' && b[n - 2] == b'0' {
            return Ok(format!("{}{}", &s[..n - 2], &s[n - 1..]));
        }
        return Ok(s);
    }
    Ok(format_float(f, 'f', None))
}

fn write_string(out: &mut String, s: &str, html: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' if html => out.push_str(&format!("\\u{:04x}", c as u32)),
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_json() {
        let v = Value::from_json(&serde_json::json!({"b": [1, 2.5, "<x>"], "a": null, "c": {}}));
        assert_eq!(
            encode(&v, true, false).ok().as_deref(),
            Some(r#"{"a":null,"b":[1,2.5,"\u003cx\u003e"],"c":{}}"#)
        );
        assert_eq!(
            encode(&v, false, false).ok().as_deref(),
            Some(r#"{"a":null,"b":[1,2.5,"<x>"],"c":{}}"#)
        );
        assert_eq!(
            encode(&v, true, true).ok().as_deref(),
            Some(
                "{\n  \"a\": null,\n  \"b\": [\n    1,\n    2.5,\n    \"\\u003cx\\u003e\"\n  ],\n  \"c\": {}\n}"
            )
        );
        assert_eq!(float(1e21).ok().as_deref(), Some("1e+21"));
        assert_eq!(float(1e-7).ok().as_deref(), Some("1e-7"));
        assert_eq!(float(1000000.0).ok().as_deref(), Some("1000000"));
        assert!(float(f64::NAN).is_err());
    }
}
