//! Sprig v3's hermetic text functions (`sprig.HermeticTxtFuncMap()`), as Tinkerbell exposes them.
//!
//! Left out on purpose (a template that uses one fails to parse with `function "x" not
//! defined`): everything that reads the clock (`now`, `date*`, `ago`, `toDate`, `unixEpoch`,
//! `dateModify`, `htmlDate*`, `durationRound`), randomness (`rand*`, `shuffle`, `uuidv4`,
//! `bcrypt`, `htpasswd`, `genPrivateKey`, `genCA*`, `genSelfSignedCert*`, `genSignedCert*`,
//! `buildCustomCert`, `encryptAES`, `decryptAES`, `derivePassword`), the environment and network
//! (`env`, `expandenv`, `getHostByName`), `semver`/`semverCompare` and `urlParse`/`urlJoin`.

use crate::funcdef::{FnCtx, Table, Ty, add};
use crate::gofmt;
use crate::hash;
use crate::value::{MAX_VALUE_DEPTH, Value};
use base64::Engine as _;
use std::collections::BTreeMap;

type Res = Result<Value, String>;

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn i(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        _ => 0,
    }
}

/// spf13/cast `ToInt64`: numbers truncated, strings parsed (base prefixes allowed), else 0.
pub fn to_int64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::Float(f) if f.is_finite() => *f as i64,
        Value::Bool(b) => i64::from(*b),
        Value::Str(s) => parse_go_int(&trim_zero_decimal(s)).unwrap_or(0),
        _ => 0,
    }
}

/// spf13/cast `ToFloat64`.
pub fn to_float64(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::Str(s) => s
            .parse::<f64>()
            .ok()
            .filter(|_| !s.contains('_'))
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

fn trim_zero_decimal(s: &str) -> String {
    if let Some((int, frac)) = s.split_once('.')
        && !int.is_empty()
        && !frac.is_empty()
        && frac.bytes().all(|b| b == b'0')
    {
        return int.to_string();
    }
    s.to_string()
}

/// `strconv.ParseInt(s, 0, 64)`.
fn parse_go_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let digits: String = if radix != 10 || body.len() > 1 && body.starts_with('0') {
        if digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
            return None;
        }
        digits.replace('_', "")
    } else {
        if digits.contains('_') {
            return None;
        }
        digits.to_string()
    };
    let u = u64::from_str_radix(&digits, radix).ok()?;
    if neg {
        if u <= i64::MAX as u64 + 1 {
            Some((u as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        i64::try_from(u).ok()
    }
}

/// Sprig's `strval`: strings as is, everything else `%v`.
pub fn strval(v: &Value) -> String {
    match v {
        Value::Str(s) => s.to_string(),
        other => gofmt::format_v(other),
    }
}

/// Sprig's `empty`.
pub fn empty(v: &Value) -> bool {
    !v.truth()
}

fn as_list(v: &Value, what: &str) -> Result<Vec<Value>, String> {
    match v {
        Value::List(l) => Ok(l.iter().cloned().collect()),
        Value::Missing | Value::Nil => Err(format!("Cannot {what} on type invalid")),
        other => Err(format!("Cannot {what} on type {}", other.kind_name())),
    }
}

fn strslice(v: &Value) -> Vec<String> {
    match v {
        Value::List(l) => l.iter().filter(|x| !x.is_nilish()).map(strval).collect(),
        Value::Missing | Value::Nil => Vec::new(),
        other => vec![strval(other)],
    }
}

fn byte_str(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn slice_bounds_err(lo: i64, hi: i64, cap: usize) -> String {
    if hi > cap as i64 || hi < 0 {
        format!("runtime error: slice bounds out of range [:{hi}] with length {cap}")
    } else {
        format!("runtime error: slice bounds out of range [{lo}:{hi}]")
    }
}

/// Sprig's `slice`/`mustSlice`.
pub fn slice_impl(list: &Value, indices: &[Value]) -> Res {
    let l = match list {
        Value::List(l) => l,
        Value::Missing | Value::Nil => {
            return Err("list should be type of slice or array but invalid".to_string());
        }
        other => {
            return Err(format!(
                "list should be type of slice or array but {}",
                other.kind_name()
            ));
        }
    };
    let len = l.len();
    if len == 0 {
        return Ok(Value::Nil);
    }
    let start = indices.first().map(to_int64).unwrap_or(0);
    let end = if indices.len() < 2 {
        len as i64
    } else {
        to_int64(&indices[1])
    };
    if start < 0 || end < start || end > len as i64 {
        // Sprig calls `reflect.Value.Slice`, whose panic text this is.
        return Err("reflect.Value.Slice: slice index out of bounds".to_string());
    }
    Ok(Value::list(l[start as usize..end as usize].to_vec()))
}

fn go_split(orig: &str, sep: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if sep.is_empty() {
        let chars: Vec<String> = orig.chars().map(|c| c.to_string()).collect();
        if n > 0 && (n as usize) < chars.len() {
            let mut head: Vec<String> = chars[..n as usize - 1].to_vec();
            let consumed: usize = head.iter().map(|c| c.len()).sum();
            head.push(orig[consumed..].to_string());
            return head;
        }
        return chars;
    }
    if n < 0 {
        orig.split(sep).map(str::to_string).collect()
    } else {
        orig.splitn(n as usize, sep).map(str::to_string).collect()
    }
}

fn split_map(parts: Vec<String>) -> Value {
    Value::map(
        parts
            .into_iter()
            .enumerate()
            .map(|(k, v)| (format!("_{k}"), Value::str(v)))
            .collect(),
    )
}

fn until_step(ctx: &FnCtx, start: i64, stop: i64, step: i64) -> Res {
    let count: i128 = if stop < start {
        if step >= 0 {
            0
        } else {
            ((start as i128 - stop as i128) + (-step as i128) - 1) / (-step as i128)
        }
    } else if step <= 0 {
        0
    } else {
        ((stop as i128 - start as i128) + step as i128 - 1) / step as i128
    };
    ctx.check_size(usize::try_from(count).unwrap_or(usize::MAX))?;
    let mut v = Vec::with_capacity(count as usize);
    let mut x = start as i128;
    for _ in 0..count {
        v.push(Value::Int(x as i64));
        x += step as i128;
    }
    Ok(Value::list(v))
}

fn seq(ctx: &FnCtx, p: &[Value]) -> Res {
    let p: Vec<i64> = p.iter().map(i).collect();
    let list = match p.len() {
        0 => return Ok(Value::str("")),
        1 => {
            let (start, end) = (1, p[0]);
            let inc = if end < start { -1 } else { 1 };
            until_step(ctx, start, end.saturating_add(inc), inc)?
        }
        2 => {
            let (start, end) = (p[0], p[1]);
            let step = if end < start { -1 } else { 1 };
            until_step(ctx, start, end.saturating_add(step), step)?
        }
        3 => {
            let (start, step, end) = (p[0], p[1], p[2]);
            let mut inc = 1;
            if end < start {
                inc = -1;
                if step > 0 {
                    return Ok(Value::str(""));
                }
            }
            until_step(ctx, start, end.saturating_add(inc), step)?
        }
        _ => return Ok(Value::str("")),
    };
    let Value::List(l) = list else {
        return Ok(Value::str(""));
    };
    Ok(Value::str(
        l.iter()
            .map(|v| i(v).to_string())
            .collect::<Vec<_>>()
            .join(" "),
    ))
}

/// Rounds to 15 significant digits: Sprig does float math through shopspring/decimal, so
/// `addf 0.1 0.2` is exactly `0.3`.
fn decimal_round(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    format!("{x:.14e}").parse::<f64>().unwrap_or(x)
}

fn regex(p: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(p).map_err(|e| {
        let msg = e.to_string();
        let last = msg
            .lines()
            .last()
            .unwrap_or("invalid regex")
            .trim()
            .to_string();
        format!(
            "error parsing regexp: {} in `{p}`",
            last.trim_start_matches("error: ")
        )
    })
}

/// Go's `regexp.Regexp.Split`.
fn regex_split(re: &regex::Regex, s: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if !re.as_str().is_empty() && s.is_empty() {
        return vec![String::new()];
    }
    let matches: Vec<(usize, usize)> = if n < 0 {
        re.find_iter(s).map(|m| (m.start(), m.end())).collect()
    } else {
        re.find_iter(s)
            .take(n as usize)
            .map(|m| (m.start(), m.end()))
            .collect()
    };
    let mut out = Vec::new();
    let (mut beg, mut end) = (0usize, 0usize);
    for (ms, me) in matches {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        end = ms;
        if me != 0 {
            out.push(s[beg..end].to_string());
        }
        beg = me;
    }
    if end != s.len() {
        out.push(s[beg..].to_string());
    }
    out
}

/// Go's `regexp.QuoteMeta`.
fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Go's `path.Clean`.
pub fn path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".to_string();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

fn path_base(p: &str) -> String {
    if p.is_empty() {
        return ".".to_string();
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/".to_string();
    }
    t.rsplit('/').next().unwrap_or(t).to_string()
}

fn path_dir(p: &str) -> String {
    let dir = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    path_clean(dir)
}

fn path_ext(p: &str) -> String {
    for (idx, c) in p.char_indices().rev() {
        if c == '/' {
            break;
        }
        if c == '.' {
            return p[idx..].to_string();
        }
    }
    String::new()
}

fn go_title(s: &str) -> String {
    let is_sep = |c: char| {
        if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else if c.is_alphabetic() || c.is_numeric() {
            false
        } else {
            c.is_whitespace()
        }
    };
    let mut prev = ' ';
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_sep(prev) {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev = c;
    }
    out
}

fn untitle(s: &str) -> String {
    let mut next = true;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_whitespace() {
            next = true;
            out.push(c);
        } else if next {
            out.extend(c.to_lowercase());
            next = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn swapcase(s: &str) -> String {
    let mut ws = true;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_uppercase() {
            out.extend(c.to_lowercase());
            ws = false;
        } else if c.is_lowercase() {
            if ws {
                out.extend(c.to_uppercase());
                ws = false;
            } else {
                out.extend(c.to_uppercase());
            }
        } else {
            ws = c.is_whitespace();
            out.push(c);
        }
    }
    out
}

fn initials(s: &str) -> String {
    let mut gap = true;
    let mut out = String::new();
    for c in s.chars() {
        if c.is_whitespace() {
            gap = true;
        } else if gap {
            out.push(c);
            gap = false;
        }
    }
    out
}

fn words_for_case(s: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = s.chars().collect();
    for (k, &c) in chars.iter().enumerate() {
        if c == '_' || c == '-' || c == '.' || c.is_whitespace() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c.is_uppercase() && !cur.is_empty() {
            let prev = chars[k - 1];
            let next_lower = chars.get(k + 1).is_some_and(|n| n.is_lowercase());
            if prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower) {
                words.push(std::mem::take(&mut cur));
            }
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// xstrings v1.5 `ToPascalCase` (Sprig v3.3's `camelcase`): words separated by `_`, `-` or
/// white space are joined, each capitalised; leading, trailing and repeated separators are
/// kept but one (`_complex__case_` -> `_Complex_Case_`); an all-upper word is lower-cased
/// after its first letter (`GOLANG_IS_GREAT` -> `GolangIsGreat`).
fn camelcase(s: &str) -> String {
    let is_conn = |c: char| c == '_' || c == '-' || c.is_whitespace();
    let upper = |c: char| c.to_uppercase().next().unwrap_or(c);
    let lower = |c: char| c.to_lowercase().next().unwrap_or(c);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    let mut r0 = None;
    for c in chars.by_ref() {
        if !is_conn(c) {
            r0 = Some(c);
            break;
        }
        out.push(c);
    }
    let Some(first) = r0 else {
        return out;
    };
    let mut word_upper = first.is_uppercase();
    let mut r0 = upper(first);
    for c in chars {
        let r1 = r0;
        r0 = c;
        if is_conn(r0) && is_conn(r1) {
            out.push(r1);
            continue;
        }
        if is_conn(r1) {
            word_upper = r0.is_uppercase();
            r0 = upper(r0);
        } else {
            if word_upper {
                if r0.is_uppercase() {
                    r0 = lower(r0);
                } else {
                    word_upper = false;
                }
            }
            out.push(r1);
        }
    }
    out.push(r0);
    out
}

fn wrap_custom(s: &str, len: i64, nl: &str, wrap_long: bool) -> String {
    if s.is_empty() {
        return String::new();
    }
    let nl = if nl.is_empty() { "\n" } else { nl };
    let len = len.max(1) as usize;
    let b = s.as_bytes();
    let total = b.len();
    let mut offset = 0usize;
    let mut out: Vec<u8> = Vec::with_capacity(total + total / len + 1);
    while total - offset > len {
        if b[offset] == b' ' {
            offset += 1;
            continue;
        }
        let end = (len + offset + 1).min(total);
        let space = b[offset..end]
            .iter()
            .rposition(|c| *c == b' ')
            .map(|p| p + offset);
        match space {
            Some(sp) => {
                out.extend_from_slice(&b[offset..sp]);
                out.extend_from_slice(nl.as_bytes());
                offset = sp + 1;
            }
            None => {
                if wrap_long {
                    let end = len + offset;
                    out.extend_from_slice(&b[offset..end]);
                    out.extend_from_slice(nl.as_bytes());
                    offset += len;
                } else {
                    let end = len + offset;
                    match b[end..].iter().position(|c| *c == b' ') {
                        None => {
                            out.extend_from_slice(&b[offset..]);
                            offset = total;
                        }
                        Some(ix) => {
                            let sp = ix + end;
                            out.extend_from_slice(&b[offset..sp]);
                            out.extend_from_slice(nl.as_bytes());
                            offset = sp + 1;
                        }
                    }
                }
            }
        }
    }
    out.extend_from_slice(&b[offset..]);
    byte_str(&out)
}

fn abbreviate_full(s: &str, offset: i64, max: i64) -> String {
    let b = s.as_bytes();
    let n = b.len() as i64;
    if s.is_empty() || max < 4 || n <= max {
        return s.to_string();
    }
    let mut offset = offset.min(n);
    if n - offset < max - 3 {
        offset = n - (max - 3);
    }
    if offset <= 4 {
        return format!("{}...", byte_str(&b[..(max - 3) as usize]));
    }
    if max < 7 {
        return s.to_string();
    }
    if offset + max - 3 < n {
        return format!(
            "...{}",
            abbreviate_full(&byte_str(&b[offset as usize..]), 0, max - 3)
        );
    }
    format!("...{}", byte_str(&b[(n - (max - 3)) as usize..]))
}

fn merge_into(
    dst: &crate::value::MapRef,
    src: &Value,
    overwrite: bool,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_VALUE_DEPTH {
        return Err("merge nested too deeply".to_string());
    }
    let Value::Map(src) = src else {
        return Ok(());
    };
    if std::rc::Rc::ptr_eq(dst, src) {
        return Ok(());
    }
    let entries: Vec<(String, Value)> = src
        .borrow()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in entries {
        if v.contains_map(dst, 0) {
            return Err("cannot merge a dict into itself".to_string());
        }
        let existing = dst.borrow().get(&k).cloned();
        match existing {
            Some(Value::Map(dm)) if matches!(v, Value::Map(_)) => {
                merge_into(&dm, &v, overwrite, depth + 1)?
            }
            Some(e) => {
                if (overwrite && !empty(&v)) || (!overwrite && empty(&e)) {
                    dst.borrow_mut().insert(k, v);
                }
            }
            None => {
                dst.borrow_mut().insert(k, v);
            }
        }
    }
    Ok(())
}

fn dig(keys: &[Value], def: &Value, d: &Value) -> Res {
    let mut cur = d.clone();
    for (n, k) in keys.iter().enumerate() {
        let key = match k {
            Value::Str(s) => s.to_string(),
            other => {
                return Err(format!(
                    "interface conversion: interface {{}} is {}, not string",
                    other.type_name()
                ));
            }
        };
        let next = match &cur {
            Value::Map(m) => m.borrow().get(&key).cloned(),
            _ => {
                return Err(
                    "interface conversion: interface {} is not map[string]interface {}".to_string(),
                );
            }
        };
        match next {
            Some(v) => {
                if n == keys.len() - 1 {
                    return Ok(v);
                }
                cur = v;
            }
            None => return Ok(def.clone()),
        }
    }
    Ok(def.clone())
}

/// Go's `time.Duration.String` for whole seconds.
fn duration_string(secs: i64) -> String {
    if secs == 0 {
        return "0s".to_string();
    }
    let neg = secs < 0;
    let u = secs.unsigned_abs();
    let (h, m, s) = (u / 3600, (u / 60) % 60, u % 60);
    let body = if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    };
    if neg { format!("-{body}") } else { body }
}

pub(crate) fn register(t: &mut Table) {
    use Ty::*;
    add(t, "hello", &[], None, |_, _| Ok(Value::str("Hello!")));

    // strings
    add(t, "abbrev", &[Int, Str], None, |_, a| {
        let w = i(&a[0]);
        if w < 4 {
            return Ok(a[1].clone());
        }
        Ok(Value::str(abbreviate_full(s(&a[1]), 0, w)))
    });
    add(t, "abbrevboth", &[Int, Int, Str], None, |_, a| {
        let (l, r) = (i(&a[0]), i(&a[1]));
        if r < 4 || (l > 0 && r < 7) {
            return Ok(a[2].clone());
        }
        Ok(Value::str(abbreviate_full(s(&a[2]), l, r)))
    });
    add(t, "trunc", &[Int, Str], None, |_, a| {
        let c = i(&a[0]);
        let b = s(&a[1]).as_bytes();
        let n = b.len() as i64;
        if c < 0 && n + c > 0 {
            return Ok(Value::str(byte_str(&b[(n + c) as usize..])));
        }
        if c >= 0 && n > c {
            return Ok(Value::str(byte_str(&b[..c as usize])));
        }
        Ok(a[1].clone())
    });
    add(t, "trim", &[Str], None, |_, a| {
        Ok(Value::str(s(&a[0]).trim()))
    });
    add(t, "upper", &[Str], None, |_, a| {
        Ok(Value::str(s(&a[0]).to_uppercase()))
    });
    add(t, "lower", &[Str], None, |_, a| {
        Ok(Value::str(s(&a[0]).to_lowercase()))
    });
    add(t, "title", &[Str], None, |_, a| {
        Ok(Value::str(go_title(s(&a[0]))))
    });
    add(t, "untitle", &[Str], None, |_, a| {
        Ok(Value::str(untitle(s(&a[0]))))
    });
    add(t, "substr", &[Int, Int, Str], None, |_, a| {
        let (start, end) = (i(&a[0]), i(&a[1]));
        let b = s(&a[2]).as_bytes();
        let n = b.len() as i64;
        let (lo, hi) = if start < 0 {
            (0, end)
        } else if end < 0 || end > n {
            (start, n)
        } else {
            (start, end)
        };
        if hi < 0 || hi > n || lo > hi {
            return Err(slice_bounds_err(lo, hi, b.len()));
        }
        Ok(Value::str(byte_str(&b[lo as usize..hi as usize])))
    });
    add(t, "repeat", &[Int, Str], None, |ctx, a| {
        let c = i(&a[0]);
        if c < 0 {
            return Err("strings: negative Repeat count".to_string());
        }
        let str = s(&a[1]);
        ctx.check_size(str.len().saturating_mul(c as usize))?;
        Ok(Value::str(str.repeat(c as usize)))
    });
    for name in ["trimall", "trimAll"] {
        add(t, name, &[Str, Str], None, |_, a| {
            let cut = s(&a[0]);
            Ok(Value::str(s(&a[1]).trim_matches(|c| cut.contains(c))))
        });
    }
    add(t, "trimSuffix", &[Str, Str], None, |_, a| {
        Ok(Value::str(
            s(&a[1]).strip_suffix(s(&a[0])).unwrap_or(s(&a[1])),
        ))
    });
    add(t, "trimPrefix", &[Str, Str], None, |_, a| {
        Ok(Value::str(
            s(&a[1]).strip_prefix(s(&a[0])).unwrap_or(s(&a[1])),
        ))
    });
    add(t, "nospace", &[Str], None, |_, a| {
        Ok(Value::str(
            s(&a[0])
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>(),
        ))
    });
    add(t, "initials", &[Str], None, |_, a| {
        Ok(Value::str(initials(s(&a[0]))))
    });
    add(t, "swapcase", &[Str], None, |_, a| {
        Ok(Value::str(swapcase(s(&a[0]))))
    });
    add(t, "snakecase", &[Str], None, |_, a| {
        Ok(Value::str(
            words_for_case(s(&a[0]))
                .iter()
                .map(|w| w.to_lowercase())
                .collect::<Vec<_>>()
                .join("_"),
        ))
    });
    add(t, "kebabcase", &[Str], None, |_, a| {
        Ok(Value::str(
            words_for_case(s(&a[0]))
                .iter()
                .map(|w| w.to_lowercase())
                .collect::<Vec<_>>()
                .join("-"),
        ))
    });
    add(t, "camelcase", &[Str], None, |_, a| {
        Ok(Value::str(camelcase(s(&a[0]))))
    });
    add(t, "wrap", &[Int, Str], None, |_, a| {
        Ok(Value::str(wrap_custom(s(&a[1]), i(&a[0]), "", false)))
    });
    add(t, "wrapWith", &[Int, Str, Str], None, |_, a| {
        Ok(Value::str(wrap_custom(s(&a[2]), i(&a[0]), s(&a[1]), true)))
    });
    add(t, "contains", &[Str, Str], None, |_, a| {
        Ok(Value::Bool(s(&a[1]).contains(s(&a[0]))))
    });
    add(t, "hasPrefix", &[Str, Str], None, |_, a| {
        Ok(Value::Bool(s(&a[1]).starts_with(s(&a[0]))))
    });
    add(t, "hasSuffix", &[Str, Str], None, |_, a| {
        Ok(Value::Bool(s(&a[1]).ends_with(s(&a[0]))))
    });
    add(t, "quote", &[], Some(Any), |_, a| {
        let parts: Vec<String> = a
            .iter()
            .filter(|v| !v.is_nilish())
            .map(|v| gofmt::quote(&strval(v)))
            .collect();
        Ok(Value::str(parts.join(" ")))
    });
    add(t, "squote", &[], Some(Any), |_, a| {
        let parts: Vec<String> = a
            .iter()
            .filter(|v| !v.is_nilish())
            .map(|v| format!("'{}'", gofmt::format_v(v)))
            .collect();
        Ok(Value::str(parts.join(" ")))
    });
    add(t, "cat", &[], Some(Any), |_, a| {
        let parts: Vec<String> = a
            .iter()
            .filter(|v| !v.is_nilish())
            .map(gofmt::format_v)
            .collect();
        Ok(Value::str(parts.join(" ")))
    });
    add(t, "indent", &[Int, Str], None, |ctx, a| {
        indent(ctx, i(&a[0]), s(&a[1])).map(Value::str)
    });
    add(t, "nindent", &[Int, Str], None, |ctx, a| {
        indent(ctx, i(&a[0]), s(&a[1])).map(|x| Value::str(format!("\n{x}")))
    });
    add(t, "replace", &[Str, Str, Str], None, |ctx, a| {
        let (old, new, src) = (s(&a[0]), s(&a[1]), s(&a[2]));
        let count = if old.is_empty() {
            src.chars().count() + 1
        } else {
            src.matches(old).count()
        };
        ctx.check_size(src.len().saturating_add(count.saturating_mul(new.len())))?;
        Ok(Value::str(src.replace(old, new)))
    });
    add(t, "plural", &[Str, Str, Int], None, |_, a| {
        Ok(if i(&a[2]) == 1 {
            a[0].clone()
        } else {
            a[1].clone()
        })
    });
    add(t, "sha1sum", &[Str], None, |_, a| {
        Ok(Value::str(hash::hex(&hash::sha1(s(&a[0]).as_bytes()))))
    });
    add(t, "sha256sum", &[Str], None, |_, a| {
        Ok(Value::str(hash::hex(&hash::sha256(s(&a[0]).as_bytes()))))
    });
    add(t, "sha512sum", &[Str], None, |_, a| {
        Ok(Value::str(hash::hex(&hash::sha512(s(&a[0]).as_bytes()))))
    });
    add(t, "adler32sum", &[Str], None, |_, a| {
        Ok(Value::str(hash::adler32(s(&a[0]).as_bytes()).to_string()))
    });
    add(t, "toString", &[Any], None, |_, a| {
        Ok(Value::str(strval(&a[0])))
    });

    // conversions
    add(t, "atoi", &[Str], None, |_, a| {
        let v = s(&a[0]);
        let ok = !v.is_empty()
            && v.trim_start_matches(['+', '-'])
                .bytes()
                .all(|b| b.is_ascii_digit());
        Ok(Value::Int(if ok {
            v.parse::<i64>().unwrap_or(0)
        } else {
            0
        }))
    });
    add(t, "int64", &[Any], None, |_, a| {
        Ok(Value::Int(to_int64(&a[0])))
    });
    add(t, "int", &[Any], None, |_, a| {
        Ok(Value::Int(to_int64(&a[0])))
    });
    add(t, "float64", &[Any], None, |_, a| {
        Ok(Value::Float(to_float64(&a[0])))
    });
    add(t, "seq", &[], Some(Int), |ctx, a| seq(ctx, &a));
    add(t, "toDecimal", &[Any], None, |_, a| {
        Ok(Value::Int(
            i64::from_str_radix(&gofmt::format_v(&a[0]), 8).unwrap_or(0),
        ))
    });
    add(t, "split", &[Str, Str], None, |_, a| {
        Ok(split_map(go_split(s(&a[1]), s(&a[0]), -1)))
    });
    add(t, "splitList", &[Str, Str], None, |_, a| {
        Ok(Value::from(go_split(s(&a[1]), s(&a[0]), -1)))
    });
    add(t, "splitn", &[Str, Int, Str], None, |_, a| {
        Ok(split_map(go_split(s(&a[2]), s(&a[0]), i(&a[1]))))
    });
    add(t, "toStrings", &[Any], None, |_, a| {
        Ok(Value::from(strslice(&a[0])))
    });
    add(t, "until", &[Int], None, |ctx, a| {
        let c = i(&a[0]);
        until_step(ctx, 0, c, if c < 0 { -1 } else { 1 })
    });
    add(t, "untilStep", &[Int, Int, Int], None, |ctx, a| {
        until_step(ctx, i(&a[0]), i(&a[1]), i(&a[2]))
    });

    // integer math
    add(t, "add1", &[Any], None, |_, a| {
        Ok(Value::Int(to_int64(&a[0]).wrapping_add(1)))
    });
    add(t, "add", &[], Some(Any), |_, a| {
        Ok(Value::Int(
            a.iter().fold(0i64, |acc, v| acc.wrapping_add(to_int64(v))),
        ))
    });
    add(t, "sub", &[Any, Any], None, |_, a| {
        Ok(Value::Int(to_int64(&a[0]).wrapping_sub(to_int64(&a[1]))))
    });
    add(t, "div", &[Any, Any], None, |_, a| {
        let d = to_int64(&a[1]);
        if d == 0 {
            return Err("runtime error: integer divide by zero".to_string());
        }
        Ok(Value::Int(to_int64(&a[0]).wrapping_div(d)))
    });
    add(t, "mod", &[Any, Any], None, |_, a| {
        let d = to_int64(&a[1]);
        if d == 0 {
            return Err("runtime error: integer divide by zero".to_string());
        }
        Ok(Value::Int(to_int64(&a[0]).wrapping_rem(d)))
    });
    add(t, "mul", &[Any], Some(Any), |_, a| {
        Ok(Value::Int(a[1..].iter().fold(to_int64(&a[0]), |acc, v| {
            acc.wrapping_mul(to_int64(v))
        })))
    });
    add(t, "add1f", &[Any], None, |_, a| {
        Ok(Value::Float(decimal_round(to_float64(&a[0]) + 1.0)))
    });
    add(t, "addf", &[], Some(Any), |_, a| {
        Ok(Value::Float(decimal_round(
            a.iter().fold(0.0, |acc, v| acc + to_float64(v)),
        )))
    });
    add(t, "subf", &[Any], Some(Any), |_, a| {
        Ok(Value::Float(decimal_round(
            a[1..]
                .iter()
                .fold(to_float64(&a[0]), |acc, v| acc - to_float64(v)),
        )))
    });
    add(t, "mulf", &[Any], Some(Any), |_, a| {
        Ok(Value::Float(decimal_round(
            a[1..]
                .iter()
                .fold(to_float64(&a[0]), |acc, v| acc * to_float64(v)),
        )))
    });
    add(t, "divf", &[Any], Some(Any), |_, a| {
        let mut acc = to_float64(&a[0]);
        for v in &a[1..] {
            let d = to_float64(v);
            if d == 0.0 {
                return Err("decimal division by 0".to_string());
            }
            acc /= d;
        }
        Ok(Value::Float(decimal_round(acc)))
    });
    for name in ["biggest", "max"] {
        add(t, name, &[Any], Some(Any), |_, a| {
            Ok(Value::Int(
                a[1..].iter().map(to_int64).fold(to_int64(&a[0]), i64::max),
            ))
        });
    }
    add(t, "min", &[Any], Some(Any), |_, a| {
        Ok(Value::Int(
            a[1..].iter().map(to_int64).fold(to_int64(&a[0]), i64::min),
        ))
    });
    add(t, "maxf", &[Any], Some(Any), |_, a| {
        Ok(Value::Float(
            a[1..]
                .iter()
                .map(to_float64)
                .fold(to_float64(&a[0]), f64::max),
        ))
    });
    add(t, "minf", &[Any], Some(Any), |_, a| {
        Ok(Value::Float(
            a[1..]
                .iter()
                .map(to_float64)
                .fold(to_float64(&a[0]), f64::min),
        ))
    });
    add(t, "ceil", &[Any], None, |_, a| {
        Ok(Value::Float(to_float64(&a[0]).ceil()))
    });
    add(t, "floor", &[Any], None, |_, a| {
        Ok(Value::Float(to_float64(&a[0]).floor()))
    });
    add(t, "round", &[Any, Int], Some(Float), |_, a| {
        let round_on = a.get(2).map(to_float64).unwrap_or(0.5);
        let val = to_float64(&a[0]);
        let pow = 10f64.powf(i(&a[1]) as f64);
        let digit = pow * val;
        let frac = digit.fract();
        let r = if frac >= round_on {
            digit.ceil()
        } else {
            digit.floor()
        };
        Ok(Value::Float(r / pow))
    });

    // string slices
    add(t, "join", &[Str, Any], None, |_, a| {
        Ok(Value::str(strslice(&a[1]).join(s(&a[0]))))
    });
    add(t, "sortAlpha", &[Any], None, |_, a| match &a[0] {
        Value::List(_) => {
            let mut v = strslice(&a[0]);
            v.sort();
            Ok(Value::from(v))
        }
        other => Ok(Value::from(vec![strval(other)])),
    });

    // defaults
    add(t, "default", &[Any], Some(Any), |_, a| {
        if a.len() < 2 || empty(&a[1]) {
            Ok(a[0].clone())
        } else {
            Ok(a[1].clone())
        }
    });
    add(t, "empty", &[Any], None, |_, a| {
        Ok(Value::Bool(empty(&a[0])))
    });
    add(t, "coalesce", &[], Some(Any), |_, a| {
        Ok(a.iter().find(|v| !empty(v)).cloned().unwrap_or(Value::Nil))
    });
    add(t, "all", &[], Some(Any), |_, a| {
        Ok(Value::Bool(a.iter().all(|v| !empty(v))))
    });
    add(t, "any", &[], Some(Any), |_, a| {
        Ok(Value::Bool(a.iter().any(|v| !empty(v))))
    });
    for name in ["compact", "mustCompact"] {
        add(t, name, &[Any], None, |_, a| {
            Ok(Value::list(
                as_list(&a[0], "compact")?
                    .into_iter()
                    .filter(|v| !empty(v))
                    .collect(),
            ))
        });
    }
    add(t, "fromJson", &[Str], None, |_, a| {
        Ok(from_json(s(&a[0])).unwrap_or(Value::Nil))
    });
    add(t, "mustFromJson", &[Str], None, |_, a| from_json(s(&a[0])));
    add(t, "toJson", &[Any], None, |_, a| {
        Ok(Value::str(
            crate::json::encode(&a[0], true, false).unwrap_or_default(),
        ))
    });
    add(t, "mustToJson", &[Any], None, |_, a| {
        crate::json::encode(&a[0], true, false).map(Value::str)
    });
    add(t, "toPrettyJson", &[Any], None, |_, a| {
        Ok(Value::str(
            crate::json::encode(&a[0], true, true).unwrap_or_default(),
        ))
    });
    add(t, "mustToPrettyJson", &[Any], None, |_, a| {
        crate::json::encode(&a[0], true, true).map(Value::str)
    });
    add(t, "toRawJson", &[Any], None, |_, a| {
        Ok(Value::str(
            crate::json::encode(&a[0], false, false).unwrap_or_default(),
        ))
    });
    add(t, "mustToRawJson", &[Any], None, |_, a| {
        crate::json::encode(&a[0], false, false).map(Value::str)
    });
    add(t, "ternary", &[Any, Any, Bool], None, |_, a| {
        Ok(if matches!(a[2], Value::Bool(true)) {
            a[0].clone()
        } else {
            a[1].clone()
        })
    });
    add(t, "deepCopy", &[Any], None, |_, a| Ok(a[0].deep_copy(0)));
    add(
        t,
        "mustDeepCopy",
        &[Any],
        None,
        |_, a| Ok(a[0].deep_copy(0)),
    );

    // reflection
    add(t, "typeOf", &[Any], None, |_, a| {
        Ok(Value::str(a[0].type_name()))
    });
    add(t, "typeIs", &[Str, Any], None, |_, a| {
        Ok(Value::Bool(s(&a[0]) == a[1].type_name()))
    });
    add(t, "typeIsLike", &[Str, Any], None, |_, a| {
        let tn = a[1].type_name();
        Ok(Value::Bool(
            s(&a[0]) == tn || format!("*{}", s(&a[0])) == tn,
        ))
    });
    add(t, "kindOf", &[Any], None, |_, a| {
        Ok(Value::str(a[0].kind_name()))
    });
    add(t, "kindIs", &[Str, Any], None, |_, a| {
        Ok(Value::Bool(s(&a[0]) == a[1].kind_name()))
    });
    add(t, "deepEqual", &[Any, Any], None, |_, a| {
        Ok(Value::Bool(a[0].deep_equal(&a[1])))
    });

    // paths (path and path/filepath behave the same on Linux)
    for name in ["base", "osBase"] {
        add(t, name, &[Str], None, |_, a| {
            Ok(Value::str(path_base(s(&a[0]))))
        });
    }
    for name in ["dir", "osDir"] {
        add(t, name, &[Str], None, |_, a| {
            Ok(Value::str(path_dir(s(&a[0]))))
        });
    }
    for name in ["clean", "osClean"] {
        add(t, name, &[Str], None, |_, a| {
            Ok(Value::str(path_clean(s(&a[0]))))
        });
    }
    for name in ["ext", "osExt"] {
        add(t, name, &[Str], None, |_, a| {
            Ok(Value::str(path_ext(s(&a[0]))))
        });
    }
    for name in ["isAbs", "osIsAbs"] {
        add(t, name, &[Str], None, |_, a| {
            Ok(Value::Bool(s(&a[0]).starts_with('/')))
        });
    }

    // encoding
    add(t, "b64enc", &[Str], None, |_, a| {
        Ok(Value::str(
            base64::engine::general_purpose::STANDARD.encode(s(&a[0]).as_bytes()),
        ))
    });
    add(t, "b64dec", &[Str], None, |_, a| {
        Ok(Value::str(
            match base64::engine::general_purpose::STANDARD.decode(s(&a[0]).as_bytes()) {
                Ok(b) => byte_str(&b),
                Err(e) => go_base64_error(&e, s(&a[0])),
            },
        ))
    });
    add(t, "b32enc", &[Str], None, |_, a| {
        Ok(Value::str(hash::base32_encode(s(&a[0]).as_bytes())))
    });
    add(t, "b32dec", &[Str], None, |_, a| {
        Ok(Value::str(match hash::base32_decode(s(&a[0])) {
            Ok(b) => byte_str(&b),
            Err(pos) => format!("illegal base32 data at input byte {pos}"),
        }))
    });

    // data structures
    for name in ["tuple", "list"] {
        add(t, name, &[], Some(Any), |_, a| Ok(Value::list(a)));
    }
    add(t, "dict", &[], Some(Any), |_, a| {
        let mut m = BTreeMap::new();
        let mut k = 0;
        while k < a.len() {
            let key = strval(&a[k]);
            let v = a.get(k + 1).cloned().unwrap_or_else(|| Value::str(""));
            m.insert(key, v);
            k += 2;
        }
        Ok(Value::map(m))
    });
    add(t, "get", &[Map, Str], None, |_, a| {
        let Value::Map(m) = &a[0] else {
            return Ok(Value::str(""));
        };
        Ok(m.borrow()
            .get(s(&a[1]))
            .cloned()
            .unwrap_or_else(|| Value::str("")))
    });
    add(t, "set", &[Map, Str, Any], None, |_, a| {
        let Value::Map(m) = &a[0] else {
            return Ok(a[0].clone());
        };
        if a[2].contains_map(m, 0) {
            return Err("cannot store a dict inside itself".to_string());
        }
        m.borrow_mut().insert(s(&a[1]).to_string(), a[2].clone());
        Ok(a[0].clone())
    });
    add(t, "unset", &[Map, Str], None, |_, a| {
        if let Value::Map(m) = &a[0] {
            m.borrow_mut().remove(s(&a[1]));
        }
        Ok(a[0].clone())
    });
    add(t, "hasKey", &[Map, Str], None, |_, a| {
        let Value::Map(m) = &a[0] else {
            return Ok(Value::Bool(false));
        };
        Ok(Value::Bool(m.borrow().contains_key(s(&a[1]))))
    });
    add(t, "pluck", &[Str], Some(Map), |_, a| {
        let key = s(&a[0]);
        Ok(Value::list(
            a[1..]
                .iter()
                .filter_map(|d| match d {
                    Value::Map(m) => m.borrow().get(key).cloned(),
                    _ => None,
                })
                .collect(),
        ))
    });
    add(t, "keys", &[], Some(Map), |_, a| {
        let mut k: Vec<String> = Vec::new();
        for d in &a {
            if let Value::Map(m) = d {
                k.extend(m.borrow().keys().cloned());
            }
        }
        Ok(Value::from(k))
    });
    add(t, "values", &[Map], None, |_, a| {
        let Value::Map(m) = &a[0] else {
            return Ok(Value::list(Vec::new()));
        };
        Ok(Value::list(m.borrow().values().cloned().collect()))
    });
    add(t, "pick", &[Map], Some(Str), |_, a| {
        let Value::Map(m) = &a[0] else {
            return Ok(Value::map(BTreeMap::new()));
        };
        let m = m.borrow();
        let mut out = BTreeMap::new();
        for k in &a[1..] {
            if let Some(v) = m.get(s(k)) {
                out.insert(s(k).to_string(), v.clone());
            }
        }
        Ok(Value::map(out))
    });
    add(t, "omit", &[Map], Some(Str), |_, a| {
        let Value::Map(m) = &a[0] else {
            return Ok(Value::map(BTreeMap::new()));
        };
        let omit: Vec<&str> = a[1..].iter().map(s).collect();
        Ok(Value::map(
            m.borrow()
                .iter()
                .filter(|(k, _)| !omit.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ))
    });
    for (name, overwrite) in [
        ("merge", false),
        ("mustMerge", false),
        ("mergeOverwrite", true),
        ("mustMergeOverwrite", true),
    ] {
        let imp: crate::funcdef::FuncImpl = if overwrite {
            |_, a| {
                let Value::Map(dst) = &a[0] else {
                    return Ok(a[0].clone());
                };
                for src in &a[1..] {
                    merge_into(dst, src, true, 0)?;
                }
                Ok(a[0].clone())
            }
        } else {
            |_, a| {
                let Value::Map(dst) = &a[0] else {
                    return Ok(a[0].clone());
                };
                for src in &a[1..] {
                    merge_into(dst, src, false, 0)?;
                }
                Ok(a[0].clone())
            }
        };
        add(t, name, &[Map], Some(Map), imp);
    }
    for name in ["append", "push", "mustAppend", "mustPush"] {
        add(t, name, &[Any, Any], None, |_, a| {
            let mut l = as_list(&a[0], "push")?;
            l.push(a[1].clone());
            Ok(Value::list(l))
        });
    }
    for name in ["prepend", "mustPrepend"] {
        add(t, name, &[Any, Any], None, |_, a| {
            let mut l = vec![a[1].clone()];
            l.extend(as_list(&a[0], "prepend")?);
            Ok(Value::list(l))
        });
    }
    for name in ["first", "mustFirst"] {
        add(t, name, &[Any], None, |_, a| {
            Ok(as_list(&a[0], "find first")?
                .first()
                .cloned()
                .unwrap_or(Value::Nil))
        });
    }
    for name in ["last", "mustLast"] {
        add(t, name, &[Any], None, |_, a| {
            Ok(as_list(&a[0], "find last")?
                .last()
                .cloned()
                .unwrap_or(Value::Nil))
        });
    }
    for name in ["rest", "mustRest"] {
        add(t, name, &[Any], None, |_, a| {
            let l = as_list(&a[0], "find rest")?;
            if l.is_empty() {
                // Sprig returns a nil `[]interface{}`, which prints `[]`.
                return Ok(Value::list(Vec::new()));
            }
            Ok(Value::list(l[1..].to_vec()))
        });
    }
    for name in ["initial", "mustInitial"] {
        add(t, name, &[Any], None, |_, a| {
            let l = as_list(&a[0], "find initial")?;
            if l.is_empty() {
                // Sprig returns a nil `[]interface{}`, which prints `[]`.
                return Ok(Value::list(Vec::new()));
            }
            Ok(Value::list(l[..l.len() - 1].to_vec()))
        });
    }
    for name in ["reverse", "mustReverse"] {
        add(t, name, &[Any], None, |_, a| {
            let mut l = as_list(&a[0], "find reverse")?;
            l.reverse();
            Ok(Value::list(l))
        });
    }
    for name in ["uniq", "mustUniq"] {
        add(t, name, &[Any], None, |_, a| {
            let mut out: Vec<Value> = Vec::new();
            for v in as_list(&a[0], "find uniq")? {
                if !out.iter().any(|o| o.deep_equal(&v)) {
                    out.push(v);
                }
            }
            Ok(Value::list(out))
        });
    }
    for name in ["without", "mustWithout"] {
        add(t, name, &[Any], Some(Any), |_, a| {
            let omit = &a[1..];
            Ok(Value::list(
                as_list(&a[0], "find without")?
                    .into_iter()
                    .filter(|v| !omit.iter().any(|o| o.deep_equal(v)))
                    .collect(),
            ))
        });
    }
    for name in ["has", "mustHas"] {
        add(t, name, &[Any, Any], None, |_, a| {
            if a[1].is_nilish() {
                return Ok(Value::Bool(false));
            }
            Ok(Value::Bool(
                as_list(&a[1], "find has")?
                    .iter()
                    .any(|v| v.deep_equal(&a[0])),
            ))
        });
    }
    for name in ["slice", "mustSlice"] {
        add(t, name, &[Any], Some(Any), |_, a| {
            slice_impl(&a[0], &a[1..])
        });
    }
    add(t, "concat", &[], Some(Any), |ctx, a| {
        let mut out = Vec::new();
        for l in &a {
            match l {
                Value::List(l) => out.extend(l.iter().cloned()),
                other => return Err(format!("Cannot concat type {} as list", other.kind_name())),
            }
        }
        ctx.check_size(out.len())?;
        Ok(Value::list(out))
    });
    add(t, "dig", &[Any], Some(Any), |_, a| {
        if a.len() < 3 {
            return Err("dig needs at least three arguments".to_string());
        }
        let n = a.len();
        dig(&a[..n - 2], &a[n - 2], &a[n - 1])
    });
    for name in ["chunk", "mustChunk"] {
        add(t, name, &[Int, Any], None, |_, a| {
            let size = i(&a[0]);
            let l = as_list(&a[1], "chunk")?;
            if size <= 0 {
                return Err("runtime error: integer divide by zero".to_string());
            }
            Ok(Value::list(
                l.chunks(size as usize)
                    .map(|c| Value::list(c.to_vec()))
                    .collect(),
            ))
        });
    }

    // flow control
    add(t, "fail", &[Str], None, |_, a| Err(s(&a[0]).to_string()));

    // regular expressions
    add(t, "regexMatch", &[Str, Str], None, |_, a| {
        Ok(Value::Bool(
            regex(s(&a[0]))
                .map(|r| r.is_match(s(&a[1])))
                .unwrap_or(false),
        ))
    });
    add(t, "mustRegexMatch", &[Str, Str], None, |_, a| {
        Ok(Value::Bool(regex(s(&a[0]))?.is_match(s(&a[1]))))
    });
    for name in ["regexFindAll", "mustRegexFindAll"] {
        add(t, name, &[Str, Str, Int], None, |_, a| {
            let r = regex(s(&a[0]))?;
            let n = i(&a[2]);
            let it = r.find_iter(s(&a[1])).map(|m| m.as_str().to_string());
            let v: Vec<String> = if n < 0 {
                it.collect()
            } else {
                it.take(n as usize).collect()
            };
            Ok(Value::from(v))
        });
    }
    for name in ["regexFind", "mustRegexFind"] {
        add(t, name, &[Str, Str], None, |_, a| {
            Ok(Value::str(
                regex(s(&a[0]))?
                    .find(s(&a[1]))
                    .map(|m| m.as_str())
                    .unwrap_or(""),
            ))
        });
    }
    for name in ["regexReplaceAll", "mustRegexReplaceAll"] {
        add(t, name, &[Str, Str, Str], None, |_, a| {
            Ok(Value::str(
                regex(s(&a[0]))?
                    .replace_all(s(&a[1]), s(&a[2]))
                    .into_owned(),
            ))
        });
    }
    for name in ["regexReplaceAllLiteral", "mustRegexReplaceAllLiteral"] {
        add(t, name, &[Str, Str, Str], None, |_, a| {
            Ok(Value::str(
                regex(s(&a[0]))?
                    .replace_all(s(&a[1]), regex::NoExpand(s(&a[2])))
                    .into_owned(),
            ))
        });
    }
    for name in ["regexSplit", "mustRegexSplit"] {
        add(t, name, &[Str, Str, Int], None, |_, a| {
            Ok(Value::from(regex_split(
                &regex(s(&a[0]))?,
                s(&a[1]),
                i(&a[2]),
            )))
        });
    }
    add(t, "regexQuoteMeta", &[Str], None, |_, a| {
        Ok(Value::str(quote_meta(s(&a[0]))))
    });

    // durations (pure arithmetic, no clock)
    add(t, "duration", &[Any], None, |_, a| {
        let n = match &a[0] {
            Value::Str(s) => s.parse::<i64>().unwrap_or(0),
            Value::Int(i) => *i,
            _ => 0,
        };
        Ok(Value::str(duration_string(n)))
    });
}

fn indent(ctx: &FnCtx, spaces: i64, v: &str) -> Result<String, String> {
    if spaces < 0 {
        return Err("strings: negative Repeat count".to_string());
    }
    let pad = spaces as usize;
    let lines = v.matches('\n').count() + 1;
    ctx.check_size(v.len().saturating_add(lines.saturating_mul(pad)))?;
    let p = " ".repeat(pad);
    Ok(format!("{p}{}", v.replace('\n', &format!("\n{p}"))))
}

fn from_json(s: &str) -> Res {
    let v: serde_json::Value = serde_json::from_str(s).map_err(|e| e.to_string())?;
    Ok(Value::from_json(&v))
}

fn go_base64_error(e: &base64::DecodeError, input: &str) -> String {
    let pos = match e {
        base64::DecodeError::InvalidByte(p, _) | base64::DecodeError::InvalidLastSymbol(p, _) => *p,
        base64::DecodeError::InvalidLength(n) => *n - (*n % 4),
        base64::DecodeError::InvalidPadding => input.len().saturating_sub(1),
    };
    format!("illegal base64 data at input byte {pos}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(path_clean("a//b/../c/."), "a/c");
        assert_eq!(path_clean("/../x"), "/x");
        assert_eq!(path_base("/a/b/"), "b");
        assert_eq!(path_dir("/a/b/c"), "/a/b");
        assert_eq!(path_ext("a/b.tar.gz"), ".gz");
        assert_eq!(go_title("hello wOrld-foo_bar"), "Hello WOrld-Foo_bar");
        assert_eq!(
            wrap_custom("hello world foo", 5, "", false),
            "hello\nworld\nfoo"
        );
        assert_eq!(abbreviate_full("hello world", 0, 5), "he...");
        assert_eq!(to_int64(&Value::str("0x10")), 16);
        assert_eq!(to_int64(&Value::str("12.0")), 12);
        assert_eq!(to_int64(&Value::str("abc")), 0);
        assert_eq!(duration_string(3661), "1h1m1s");
        assert_eq!(
            words_for_case("HTTPServerName"),
            vec!["HTTP", "Server", "Name"]
        );
        assert_eq!(go_split("a,b,c", ",", 2), vec!["a", "b,c"]);
        assert_eq!(go_split("abc", "", -1), vec!["a", "b", "c"]);
    }

    #[test]
    fn regex_split_like_go() {
        let r = regex::Regex::new("a").unwrap_or_else(|_| unreachable!());
        assert_eq!(regex_split(&r, "banana", -1), vec!["b", "n", "n", ""]);
        assert_eq!(regex_split(&r, "banana", 2), vec!["b", "nana"]);
        let z = regex::Regex::new("z+").unwrap_or_else(|_| unreachable!());
        assert_eq!(regex_split(&z, "pizza", -1), vec!["pi", "a"]);
    }
}
