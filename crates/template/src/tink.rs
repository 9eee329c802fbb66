//! Tinkerbell's own template functions (`formatPartition`, `netmaskToPrefixLength`, `toYaml`,
//! `fromYaml`), with the behaviour of tinkerbell/tinkerbell `pkg/template/funcmap`.

use crate::funcdef::{Table, Ty, add};
use crate::value::{MAX_VALUE_DEPTH, Value};
use std::sync::LazyLock;

/// `formatPartition("/dev/sda", 1)` = `/dev/sda1`; a device ending in a digit gets `p`
/// (`/dev/nvme0n1p1`); anything under `/dev/disk/` gets `-part` (`/dev/disk/by-id/x-part1`).
pub fn format_partition(dev: &str, partition: i64) -> String {
    if dev.starts_with("/dev/disk/") {
        return format!("{dev}-part{partition}");
    }
    if dev.as_bytes().last().is_some_and(|b| b.is_ascii_digit()) {
        return format!("{dev}p{partition}");
    }
    format!("{dev}{partition}")
}

/// `255.255.255.0` -> `24`. A non-contiguous mask counts as 0, as Go's `IPMask.Size` does.
pub fn netmask_to_prefix_length(netmask: &str) -> Result<String, String> {
    let ip: std::net::IpAddr = netmask
        .parse()
        .map_err(|_| format!("invalid netmask format: {netmask}"))?;
    let v4 = match ip {
        std::net::IpAddr::V4(v4) => v4,
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .ok_or_else(|| format!("netmask must be IPv4: {netmask}"))?,
    };
    let bits = u32::from(v4);
    let ones = bits.leading_ones();
    let canonical = ones == 32 || bits << ones == 0;
    Ok(if canonical {
        ones.to_string()
    } else {
        "0".to_string()
    })
}

/// `toYaml`: the value as YAML in the style of `sigs.k8s.io/yaml` (go-yaml v2), without the
/// trailing newline.
pub fn to_yaml(v: &Value) -> Result<String, String> {
    let lines = block(v, 0)?;
    Ok(lines.join("\n"))
}

/// `fromYaml`: parses YAML into a value; an empty input is an error.
pub fn from_yaml(s: &str) -> Result<Value, String> {
    if s.is_empty() {
        return Err("fromYaml: empty YAML input".to_string());
    }
    let v: serde_json::Value = serde_yaml::from_str(s).map_err(|e| format!("fromYaml: {e}"))?;
    Ok(Value::from_json(&v))
}

static INT_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[-+]?(0b[01_]+|0x[0-9a-fA-F_]+|0o?[0-7_]+|[0-9][0-9_]*)$")
        .expect("constant regex compiles")
});
static FLOAT_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?$")
        .expect("constant regex compiles")
});
static BASE60_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
        .expect("constant regex compiles")
});
static DATE_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}").expect("constant regex compiles")
});

/// True when a plain scalar with this text would read back as something other than a string.
fn resolves_to_non_string(s: &str) -> bool {
    matches!(
        s,
        "" | "~"
            | "null"
            | "Null"
            | "NULL"
            | "y"
            | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
            | ".nan"
            | ".NaN"
            | ".NAN"
            | ".inf"
            | ".Inf"
            | ".INF"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
            | "<<"
    ) || INT_RE.is_match(s)
        || FLOAT_RE.is_match(s)
        || BASE60_RE.is_match(s)
        || DATE_RE.is_match(s)
}

fn plain_allowed(s: &str) -> bool {
    if s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    if s.starts_with([' ', '\t']) || s.ends_with([' ', '\t']) {
        return false;
    }
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_ws = chars.get(i + 1).is_none_or(|n| *n == ' ' || *n == '\t');
        let preceded_by_ws = i > 0 && (chars[i - 1] == ' ' || chars[i - 1] == '\t');
        if c.is_control() || c == '\u{feff}' {
            return false;
        }
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => {
                    return false;
                }
                '?' | ':' | '-' if followed_by_ws => return false,
                _ => {}
            }
        } else {
            if c == ':' && followed_by_ws {
                return false;
            }
            if c == '#' && preceded_by_ws {
                return false;
            }
        }
    }
    true
}

fn double_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => out.push_str(&format!("\\x{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A scalar on one line; `None` for a multi-line string (emitted as a literal block).
fn scalar(v: &Value) -> Result<Option<String>, String> {
    Ok(Some(match v {
        Value::Missing | Value::Nil => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(format!(
                    "toYaml: json: unsupported value: {}",
                    crate::gofmt::format_float_v(*f)
                ));
            }
            crate::gofmt::format_float(*f, 'g', None)
        }
        Value::Str(s) => {
            if s.contains('\n') {
                return Ok(None);
            }
            string_scalar(s)
        }
        Value::List(l) if l.is_empty() => "[]".to_string(),
        Value::Map(m) if m.borrow().is_empty() => "{}".to_string(),
        _ => return Ok(None),
    }))
}

fn string_scalar(s: &str) -> String {
    if resolves_to_non_string(s) {
        double_quote(s)
    } else if plain_allowed(s) {
        s.to_string()
    } else if s.chars().any(|c| c.is_control()) {
        double_quote(s)
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

fn literal(s: &str) -> Vec<String> {
    let chomp = if !s.ends_with('\n') {
        "-"
    } else if s.ends_with("\n\n") {
        "+"
    } else {
        ""
    };
    let indicator = if s.starts_with(' ') { "2" } else { "" };
    let mut lines = vec![format!("|{indicator}{chomp}")];
    let body = s.strip_suffix('\n').unwrap_or(s);
    for l in body.split('\n') {
        if l.is_empty() {
            lines.push(String::new());
        } else {
            lines.push(format!("  {l}"));
        }
    }
    lines
}

/// The YAML lines of `v` at indentation 0.
fn block(v: &Value, depth: usize) -> Result<Vec<String>, String> {
    if depth > MAX_VALUE_DEPTH {
        return Err("toYaml: value nested too deeply".to_string());
    }
    if let Some(s) = scalar(v)? {
        return Ok(vec![s]);
    }
    let mut out = Vec::new();
    match v {
        Value::Str(s) => out.extend(literal(s)),
        Value::List(l) => {
            for item in l.iter() {
                let lines = block(item, depth + 1)?;
                for (k, line) in lines.into_iter().enumerate() {
                    if k == 0 {
                        out.push(format!("- {line}"));
                    } else if line.is_empty() {
                        out.push(line);
                    } else {
                        out.push(format!("  {line}"));
                    }
                }
            }
        }
        Value::Map(m) => {
            for (key, val) in m.borrow().iter() {
                let k = string_scalar(key);
                match scalar(val)? {
                    Some(s) => out.push(format!("{k}: {s}")),
                    None => {
                        let lines = block(val, depth + 1)?;
                        match val {
                            Value::Str(_) => {
                                let mut it = lines.into_iter();
                                out.push(format!("{k}: {}", it.next().unwrap_or_default()));
                                out.extend(it);
                            }
                            Value::List(_) => {
                                out.push(format!("{k}:"));
                                out.extend(lines);
                            }
                            _ => {
                                out.push(format!("{k}:"));
                                out.extend(
                                    lines
                                        .into_iter()
                                        .map(|l| if l.is_empty() { l } else { format!("  {l}") }),
                                );
                            }
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(out)
}

pub(crate) fn register(t: &mut Table) {
    use Ty::*;
    add(t, "formatPartition", &[Str, Int], None, |_, a| {
        let dev = a[0].as_str().unwrap_or_default();
        let n = match a[1] {
            Value::Int(i) => i,
            _ => 0,
        };
        Ok(Value::str(format_partition(dev, n)))
    });
    add(t, "netmaskToPrefixLength", &[Str], None, |_, a| {
        netmask_to_prefix_length(a[0].as_str().unwrap_or_default()).map(Value::str)
    });
    add(t, "toYaml", &[Any], None, |_, a| {
        to_yaml(&a[0]).map(Value::str)
    });
    add(t, "fromYaml", &[Str], None, |_, a| {
        from_yaml(a[0].as_str().unwrap_or_default())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions() {
        for (dev, n, want) in [
            ("/dev/disk/by-id/foobar", 1, "/dev/disk/by-id/foobar-part1"),
            ("/dev/disk/other", 2, "/dev/disk/other-part2"),
            ("/dev/nvme0n1", 1, "/dev/nvme0n1p1"),
            ("/dev/nvme0n1", 5, "/dev/nvme0n1p5"),
            ("/dev/sda", 1, "/dev/sda1"),
            ("/dev/sda", 2, "/dev/sda2"),
            ("/dev/loop0", 3, "/dev/loop0p3"),
            ("/dev/loop", 4, "/dev/loop4"),
            ("", 1, "1"),
        ] {
            assert_eq!(format_partition(dev, n), want);
        }
    }

    #[test]
    fn netmasks() {
        for (m, want) in [
            ("255.255.255.0", Some("24")),
            ("255.255.0.0", Some("16")),
            ("255.0.0.0", Some("8")),
            ("255.255.255.255", Some("32")),
            ("0.0.0.0", Some("0")),
            ("255.255.255.240", Some("28")),
            ("255.255.255.252", Some("30")),
            ("255.0.255.0", Some("0")),
            ("invalid", None),
            ("", None),
            ("255.255.255", None),
            ("256.255.255.0", None),
            ("::1", None),
            ("2001:0db8:85a3:0000:0000:8a2e:0370:7334", None),
        ] {
            assert_eq!(netmask_to_prefix_length(m).ok().as_deref(), want, "{m}");
        }
        assert_eq!(
            netmask_to_prefix_length("::1").err().as_deref(),
            Some("netmask must be IPv4: ::1")
        );
    }

    #[test]
    fn yaml_out() {
        let v = Value::from_json(&serde_json::json!({
            "name": "bob", "age": 25, "items": ["a", "true", "1.5", "x: y"],
            "nested": {"city": "wonderland", "empty": {}, "list": []},
            "text": "line1\nline2", "nothing": null, "people": [{"a": 1, "b": 2}]
        }));
        let want = "age: 25\nitems:\n- a\n- \"true\"\n- \"1.5\"\n- 'x: y'\nname: bob\nnested:\n  city: wonderland\n  empty: {}\n  list: []\nnothing: null\npeople:\n- a: 1\n  b: 2\ntext: |-\n  line1\n  line2";
        assert_eq!(to_yaml(&v).ok().as_deref(), Some(want));
        assert_eq!(to_yaml(&Value::Nil).ok().as_deref(), Some("null"));
        assert_eq!(to_yaml(&Value::str("hello")).ok().as_deref(), Some("hello"));
        assert_eq!(
            to_yaml(&Value::map(Default::default())).ok().as_deref(),
            Some("{}")
        );
    }

    #[test]
    fn yaml_in() {
        let v = from_yaml("name: alice\nage: 30\nl: [1, 2]").unwrap_or(Value::Nil);
        assert_eq!(crate::gofmt::format_v(&v), "map[age:30 l:[1 2] name:alice]");
        assert!(from_yaml("").is_err());
        assert!(from_yaml(":\n  :\n  - :\n  invalid:: yaml:: content").is_err());
    }
}
