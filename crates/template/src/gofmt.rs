//! Go's `fmt` printing (`Sprint`, `Sprintln`, `Sprintf`) and `strconv` float and quote formatting,
//! for the value types templates use.

use crate::value::{MAX_VALUE_DEPTH, Value};
use std::fmt::Write as _;

/// `fmt.Sprint`: operands joined, with a space between two operands when neither is a string.
pub fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    let mut prev_string = false;
    for (i, a) in args.iter().enumerate() {
        let is_string = matches!(a, Value::Str(_));
        if i > 0 && !is_string && !prev_string {
            out.push(' ');
        }
        out.push_str(&format_v(a));
        prev_string = is_string;
    }
    out
}

/// `fmt.Sprintln`: operands always separated by spaces, then a newline.
pub fn sprintln(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&format_v(a));
    }
    out.push('\n');
    out
}

/// `fmt.Sprint(v)` for one value (`%v`); a nil or missing value prints `<nil>`.
pub fn format_v(v: &Value) -> String {
    let mut out = String::new();
    print_value(&mut out, v, 'v', &Flags::default(), 0);
    out
}

/// How an action prints its result: like `fmt.Fprint`, but a missing or nil value prints
/// `<no value>`.
pub fn format_action(v: &Value) -> String {
    match v {
        Value::Missing | Value::Nil => "<no value>".to_string(),
        other => format_v(other),
    }
}

#[derive(Clone, Debug, Default)]
struct Flags {
    plus: bool,
    minus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    width: Option<usize>,
    prec: Option<usize>,
}

/// `fmt.Sprintf`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let chars: Vec<char> = format.chars().collect();
    let end = chars.len();
    let mut i = 0;
    let mut arg_num = 0usize;
    let mut reordered = false;
    while i < end {
        let start = i;
        while i < end && chars[i] != '%' {
            i += 1;
        }
        out.extend(&chars[start..i]);
        if i >= end {
            break;
        }
        i += 1; // skip %
        let mut f = Flags::default();
        // flags
        while i < end {
            match chars[i] {
                '#' => f.sharp = true,
                '0' => f.zero = !f.minus,
                '+' => f.plus = true,
                '-' => {
                    f.minus = true;
                    f.zero = false;
                }
                ' ' => f.space = true,
                _ => break,
            }
            i += 1;
        }
        // argument index before width
        let mut bad_index = false;
        let mut after_index = false;
        if i < end && chars[i] == '[' {
            reordered = true;
            match parse_arg_index(&chars, i, args.len()) {
                Some((n, ni)) => {
                    arg_num = n;
                    i = ni;
                    after_index = true;
                }
                None => {
                    bad_index = true;
                    i = skip_bracket(&chars, i);
                }
            }
        }
        // width
        if i < end && chars[i] == '*' {
            i += 1;
            match args.get(arg_num) {
                Some(Value::Int(n)) => {
                    if *n < 0 {
                        f.minus = true;
                        f.zero = false;
                    }
                    let w = n.unsigned_abs() as usize;
                    if w > 1_000_000 {
                        out.push_str("%!(BADWIDTH)");
                    } else {
                        f.width = Some(w);
                    }
                }
                _ => out.push_str("%!(BADWIDTH)"),
            }
            arg_num += 1;
            after_index = false;
        } else {
            let (n, ni) = parse_num(&chars, i);
            if let Some(n) = n {
                if after_index {
                    // "%[3]2d" is malformed: width after an index.
                    bad_index = true;
                }
                f.width = Some(n.min(1_000_000));
            }
            i = ni;
        }
        // precision
        if i < end && chars[i] == '.' {
            i += 1;
            if after_index {
                bad_index = true;
            }
            if i < end && chars[i] == '[' {
                reordered = true;
                match parse_arg_index(&chars, i, args.len()) {
                    Some((n, ni)) => {
                        arg_num = n;
                        i = ni;
                        after_index = true;
                    }
                    None => {
                        bad_index = true;
                        i = skip_bracket(&chars, i);
                    }
                }
            }
            if i < end && chars[i] == '*' {
                i += 1;
                match args.get(arg_num) {
                    Some(Value::Int(n)) if *n >= 0 && *n <= 1_000_000 => f.prec = Some(*n as usize),
                    _ => out.push_str("%!(BADPREC)"),
                }
                arg_num += 1;
                after_index = false;
            } else {
                let (n, ni) = parse_num(&chars, i);
                f.prec = Some(n.unwrap_or(0).min(1_000_000));
                i = ni;
            }
        }
        if !after_index && i < end && chars[i] == '[' {
            reordered = true;
            match parse_arg_index(&chars, i, args.len()) {
                Some((n, ni)) => {
                    arg_num = n;
                    i = ni;
                }
                None => {
                    bad_index = true;
                    i = skip_bracket(&chars, i);
                }
            }
        }
        if i >= end {
            out.push_str("%!(NOVERB)");
            break;
        }
        let verb = chars[i];
        i += 1;
        if verb == '%' {
            out.push('%');
            continue;
        }
        if bad_index {
            let _ = write!(out, "%!{verb}(BADINDEX)");
            continue;
        }
        if arg_num >= args.len() {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        }
        let arg = &args[arg_num];
        arg_num += 1;
        if verb == 'w' {
            let _ = write!(out, "%!w({}=", arg.type_name());
            print_value(&mut out, arg, 'v', &Flags::default(), 0);
            out.push(')');
            continue;
        }
        print_arg(&mut out, arg, verb, &f);
    }
    if !reordered && arg_num < args.len() {
        out.push_str("%!(EXTRA ");
        for (k, a) in args[arg_num..].iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            if a.is_nilish() {
                out.push_str("<nil>");
            } else {
                out.push_str(a.type_name());
                out.push('=');
                print_value(&mut out, a, 'v', &Flags::default(), 0);
            }
        }
        out.push(')');
    }
    out
}

fn parse_num(chars: &[char], mut i: usize) -> (Option<usize>, usize) {
    let start = i;
    let mut n: usize = 0;
    while i < chars.len() && chars[i].is_ascii_digit() {
        n = n
            .saturating_mul(10)
            .saturating_add(chars[i] as usize - '0' as usize);
        i += 1;
    }
    if i == start { (None, i) } else { (Some(n), i) }
}

fn skip_bracket(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i] != ']' {
        i += 1;
    }
    (i + 1).min(chars.len())
}

fn parse_arg_index(chars: &[char], i: usize, nargs: usize) -> Option<(usize, usize)> {
    // chars[i] == '['
    let (n, ni) = parse_num(chars, i + 1);
    let n = n?;
    if ni >= chars.len() || chars[ni] != ']' || n == 0 || n > nargs {
        return None;
    }
    Some((n - 1, ni + 1))
}

fn print_arg(out: &mut String, arg: &Value, verb: char, f: &Flags) {
    if arg.is_nilish() {
        match verb {
            'T' | 'v' => pad(out, "<nil>", f),
            _ => bad_verb(out, verb, arg),
        }
        return;
    }
    if verb == 'T' {
        pad(out, arg.type_name(), f);
        return;
    }
    if verb == 'p' {
        bad_verb(out, verb, arg);
        return;
    }
    print_value(out, arg, verb, f, 0);
}

fn bad_verb(out: &mut String, verb: char, arg: &Value) {
    let _ = write!(out, "%!{verb}(");
    if arg.is_nilish() {
        out.push_str("<nil>");
    } else {
        out.push_str(arg.type_name());
        out.push('=');
        print_value(out, arg, 'v', &Flags::default(), 0);
    }
    out.push(')');
}

fn print_value(out: &mut String, v: &Value, verb: char, f: &Flags, depth: usize) {
    if depth > MAX_VALUE_DEPTH {
        out.push_str("...");
        return;
    }
    match v {
        Value::Missing | Value::Nil => {
            if depth == 0 && verb != 'v' {
                bad_verb(out, verb, v);
            } else {
                pad(out, "<nil>", f);
            }
        }
        Value::Bool(b) => match verb {
            't' | 'v' => pad(out, if *b { "true" } else { "false" }, f),
            _ => bad_verb(out, verb, v),
        },
        Value::Int(i) => fmt_int(out, *i, verb, f, v),
        Value::Float(x) => fmt_float(out, *x, verb, f, v),
        Value::Str(s) => fmt_str(out, s, verb, f, v),
        Value::List(l) => {
            if verb == 'v' && f.sharp {
                out.push_str("[]interface {}{");
                for (k, e) in l.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    print_sharp_elem(out, e, f, depth);
                }
                out.push('}');
                return;
            }
            out.push('[');
            for (k, e) in l.iter().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                print_value(out, e, verb, f, depth + 1);
            }
            out.push(']');
        }
        Value::Map(m) => {
            let m = m.borrow();
            if verb == 'v' && f.sharp {
                out.push_str("map[string]interface {}{");
                for (k, (key, e)) in m.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&quote(key));
                    out.push(':');
                    print_sharp_elem(out, e, f, depth);
                }
                out.push('}');
                return;
            }
            out.push_str("map[");
            for (k, (key, e)) in m.iter().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                fmt_str(out, key, verb, f, &Value::str(key.as_str()));
                out.push(':');
                print_value(out, e, verb, f, depth + 1);
            }
            out.push(']');
        }
    }
}

fn print_sharp_elem(out: &mut String, e: &Value, f: &Flags, depth: usize) {
    match e {
        Value::Missing | Value::Nil => out.push_str("interface {}(nil)"),
        other => print_value(out, other, 'v', f, depth + 1),
    }
}

/// Pads `s` to the flag width (counted in characters), spaces or zeros on the left, or spaces
/// on the right with `-`.
fn pad(out: &mut String, s: &str, f: &Flags) {
    let width = f.width.unwrap_or(0);
    let n = s.chars().count();
    if n >= width {
        out.push_str(s);
        return;
    }
    let fill = width - n;
    if f.minus {
        out.push_str(s);
        out.extend(std::iter::repeat_n(' ', fill));
    } else {
        let c = if f.zero { '0' } else { ' ' };
        out.extend(std::iter::repeat_n(c, fill));
        out.push_str(s);
    }
}

fn fmt_int(out: &mut String, i: i64, verb: char, f: &Flags, v: &Value) {
    match verb {
        'v' | 'd' => fmt_integer(out, i, 10, verb, f, false),
        'b' => fmt_integer(out, i, 2, verb, f, false),
        'o' | 'O' => fmt_integer(out, i, 8, verb, f, false),
        'x' => fmt_integer(out, i, 16, verb, f, false),
        'X' => fmt_integer(out, i, 16, verb, f, true),
        'c' => {
            let c = u32::try_from(i)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{FFFD}');
            pad(out, &c.to_string(), f);
        }
        'q' => {
            let c = u32::try_from(i)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{FFFD}');
            pad(out, &quote_rune(c, f.plus), f);
        }
        'U' => {
            let mut s = format!("U+{:04X}", i);
            if f.sharp
                && let Some(c) = u32::try_from(i).ok().and_then(char::from_u32)
                && is_print(c)
            {
                s.push_str(&format!(" '{c}'"));
            }
            pad(out, &s, f);
        }
        _ => bad_verb(out, verb, v),
    }
}

fn fmt_integer(out: &mut String, i: i64, base: u32, verb: char, f: &Flags, upper: bool) {
    let neg = i < 0;
    let u = i.unsigned_abs();
    let mut digits = match base {
        2 => format!("{u:b}"),
        8 => format!("{u:o}"),
        16 if upper => format!("{u:X}"),
        16 => format!("{u:x}"),
        _ => u.to_string(),
    };
    // Precision is the minimum number of digits; zero with precision 0 prints nothing.
    let mut prec = f.prec;
    if prec.is_none()
        && f.zero
        && !f.minus
        && let Some(w) = f.width
    {
        let mut p = w;
        if neg || f.plus || f.space {
            p = p.saturating_sub(1);
        }
        prec = Some(p);
    }
    if let Some(p) = f.prec
        && p == 0
        && u == 0
    {
        let mut f2 = f.clone();
        f2.zero = false;
        pad(out, "", &f2);
        return;
    }
    if let Some(p) = prec
        && digits.len() < p
    {
        digits = format!("{}{}", "0".repeat(p - digits.len()), digits);
    }
    let mut prefix = String::new();
    if neg {
        prefix.push('-');
    } else if f.plus {
        prefix.push('+');
    } else if f.space {
        prefix.push(' ');
    }
    match (base, verb) {
        (8, 'O') => prefix.push_str("0o"),
        (8, _) if f.sharp && !digits.starts_with('0') => prefix.push('0'),
        (16, _) if f.sharp => prefix.push_str(if upper { "0X" } else { "0x" }),
        (2, _) if f.sharp => prefix.push_str("0b"),
        _ => {}
    }
    let s = format!("{prefix}{digits}");
    let mut f2 = f.clone();
    // zero padding was folded into the precision above
    f2.zero = false;
    pad(out, &s, &f2);
}

fn fmt_float(out: &mut String, x: f64, verb: char, f: &Flags, v: &Value) {
    let (fverb, default_prec): (char, Option<usize>) = match verb {
        'v' => ('g', None),
        'g' | 'G' => (verb, None),
        'e' | 'E' | 'f' | 'F' => (verb, Some(6)),
        _ => {
            bad_verb(out, verb, v);
            return;
        }
    };
    let prec = f.prec.or(default_prec);
    let num = format_float(x, fverb, prec);
    // sign handling as Go's fmt.fmtFloat
    let (sign, body) = if let Some(rest) = num.strip_prefix('-') {
        ("-", rest.to_string())
    } else if let Some(rest) = num.strip_prefix('+') {
        ("+", rest.to_string())
    } else if f.plus {
        ("+", num.clone())
    } else if f.space {
        (" ", num.clone())
    } else {
        ("", num.clone())
    };
    let is_special = body.starts_with("Inf") || body.starts_with("NaN");
    let sign = if body.starts_with("NaN") && !f.plus && !f.space {
        ""
    } else {
        sign
    };
    if f.zero
        && !f.minus
        && !is_special
        && let Some(w) = f.width
    {
        let len = sign.chars().count() + body.chars().count();
        if w > len {
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', w - len));
            out.push_str(&body);
            return;
        }
    }
    let mut f2 = f.clone();
    f2.zero = false;
    pad(out, &format!("{sign}{body}"), &f2);
}

/// `strconv.FormatFloat(x, verb, prec, 64)` with `prec = None` meaning the shortest
/// representation (-1).
pub fn format_float(x: f64, verb: char, prec: Option<usize>) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    let neg = x.is_sign_negative();
    let a = x.abs();
    let upper = verb.is_ascii_uppercase();
    let body = match (verb.to_ascii_lowercase(), prec) {
        ('f', Some(p)) => format!("{a:.p$}"),
        ('f', None) => {
            let (d, dp) = shortest_digits(a);
            let p = (d.len() as i64 - dp as i64).max(0) as usize;
            fmt_f(&d, dp, p)
        }
        ('e', Some(p)) => {
            let (d, dp) = digits_prec(a, p + 1);
            fmt_e(&d, dp, p, upper)
        }
        ('e', None) => {
            let (d, dp) = shortest_digits(a);
            fmt_e(&d, dp, d.len().saturating_sub(1), upper)
        }
        (_, p) => {
            // 'g'
            let (d, dp, mut prec, shortest) = match p {
                None => {
                    let (d, dp) = shortest_digits(a);
                    let n = d.len();
                    (d, dp, n, true)
                }
                Some(p) => {
                    let p = if p == 0 { 1 } else { p };
                    let (mut d, dp) = digits_prec(a, p);
                    while d.len() > 1 && d.ends_with('0') {
                        d.pop();
                    }
                    if d == "0" {
                        d.clear();
                    }
                    (d, dp, p, false)
                }
            };
            let nd = d.len() as i64;
            let mut eprec = prec as i64;
            if eprec > nd && nd >= dp as i64 {
                eprec = nd;
            }
            if shortest {
                eprec = 6;
            }
            let exp = dp as i64 - 1;
            if exp < -4 || exp >= eprec {
                if prec as i64 > nd {
                    prec = nd as usize;
                }
                fmt_e(&d, dp, prec.saturating_sub(1), upper)
            } else {
                if prec as i64 > dp as i64 {
                    prec = nd as usize;
                }
                fmt_f(&d, dp, (prec as i64 - dp as i64).max(0) as usize)
            }
        }
    };
    if neg { format!("-{body}") } else { body }
}

/// The shortest decimal digits that round-trip, and the decimal point position
/// (value = 0.DIGITS * 10^dp). Zero has no digits.
fn shortest_digits(a: f64) -> (String, i32) {
    if a == 0.0 {
        return (String::new(), 0);
    }
    split_exp(&format!("{a:e}"))
}

/// `n` significant digits, correctly rounded.
fn digits_prec(a: f64, n: usize) -> (String, i32) {
    if a == 0.0 {
        return ("0".repeat(n), 1);
    }
    split_exp(&format!("{a:.*e}", n.saturating_sub(1)))
}

fn split_exp(s: &str) -> (String, i32) {
    let (mant, exp) = s.split_once('e').unwrap_or((s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    (digits, exp + 1)
}

fn fmt_e(d: &str, dp: i32, prec: usize, upper: bool) -> String {
    let bytes = d.as_bytes();
    let mut s = String::new();
    s.push(if bytes.is_empty() {
        '0'
    } else {
        bytes[0] as char
    });
    if prec > 0 {
        s.push('.');
        for k in 1..=prec {
            s.push(bytes.get(k).map(|b| *b as char).unwrap_or('0'));
        }
    }
    s.push(if upper { 'E' } else { 'e' });
    let exp = if bytes.is_empty() { 0 } else { dp - 1 };
    if exp < 0 {
        s.push('-');
    } else {
        s.push('+');
    }
    let e = exp.unsigned_abs();
    if e < 10 {
        s.push('0');
    }
    s.push_str(&e.to_string());
    s
}

fn fmt_f(d: &str, dp: i32, prec: usize) -> String {
    let bytes = d.as_bytes();
    let mut s = String::new();
    if dp > 0 {
        for k in 0..dp as usize {
            s.push(bytes.get(k).map(|b| *b as char).unwrap_or('0'));
        }
    } else {
        s.push('0');
    }
    if prec > 0 {
        s.push('.');
        for k in 1..=prec as i64 {
            let j = dp as i64 + k - 1;
            let c = if j >= 0 && (j as usize) < bytes.len() {
                bytes[j as usize] as char
            } else {
                '0'
            };
            s.push(c);
        }
    }
    s
}

/// Go's `%v` for a float64.
pub fn format_float_v(x: f64) -> String {
    format_float(x, 'g', None)
}

fn fmt_str(out: &mut String, s: &str, verb: char, f: &Flags, v: &Value) {
    let truncated: String;
    let s = match f.prec {
        Some(p) if verb != 'x' && verb != 'X' => {
            truncated = s.chars().take(p).collect();
            truncated.as_str()
        }
        _ => s,
    };
    match verb {
        'v' if f.sharp => pad(out, &quote(s), f),
        'v' | 's' => pad(out, s, f),
        'q' => {
            if f.sharp && can_backquote(s) {
                pad(out, &format!("`{s}`"), f)
            } else if f.plus {
                pad(out, &quote_ascii(s), f)
            } else {
                pad(out, &quote(s), f)
            }
        }
        'x' | 'X' => {
            let bytes = s.as_bytes();
            let bytes = match f.prec {
                Some(p) if p < bytes.len() => &bytes[..p],
                _ => bytes,
            };
            let mut h = String::new();
            for (k, b) in bytes.iter().enumerate() {
                if f.space && k > 0 {
                    h.push(' ');
                }
                if f.sharp && (f.space || k == 0) {
                    h.push_str(if verb == 'X' { "0X" } else { "0x" });
                }
                if verb == 'X' {
                    let _ = write!(h, "{b:02X}");
                } else {
                    let _ = write!(h, "{b:02x}");
                }
            }
            pad(out, &h, f)
        }
        _ => bad_verb(out, verb, v),
    }
}

/// Go's `unicode.IsPrint`, approximated: graphic characters and the ASCII space.
pub fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E
        | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF | 0xF0000..=0x10FFFF
        | 0xFFFE | 0xFFFF | 0xD800..=0xDFFF)
}

/// `strconv.Quote`.
pub fn quote(s: &str) -> String {
    quote_with(s, '"', false)
}

/// `strconv.QuoteToASCII`.
pub fn quote_ascii(s: &str) -> String {
    quote_with(s, '"', true)
}

fn quote_rune(c: char, ascii: bool) -> String {
    quote_with(&c.to_string(), '\'', ascii)
}

fn quote_with(s: &str, q: char, ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        if c == q || c == '\\' {
            out.push('\\');
            out.push(c);
            continue;
        }
        if ascii {
            if (c as u32) < 0x80 && is_print(c) {
                out.push(c);
                continue;
            }
        } else if is_print(c) {
            out.push(c);
            continue;
        }
        match c {
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push(q);
    out
}

fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c != '`' && c != '\u{FEFF}' && (c == '\t' || !(c < ' ' || c == '\u{7f}')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_go() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (123456789.0, "1.23456789e+08"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (0.0, "0"),
            (1e21, "1e+21"),
            (std::f64::consts::PI, "3.141592653589793"),
        ];
        for (x, want) in cases {
            assert_eq!(format_float_v(*x), *want, "{x}");
        }
    }

    #[test]
    fn printf_verbs() {
        let s = |x: &str| Value::str(x);
        let cases: Vec<(&str, Vec<Value>, &str)> = vec![
            ("%d", vec![Value::Int(42)], "42"),
            (
                "%5d|%-5d|%05d",
                vec![Value::Int(42), Value::Int(42), Value::Int(-42)],
                "   42|42   |-0042",
            ),
            (
                "%x %X %o %b %#x %#o",
                vec![
                    Value::Int(255),
                    Value::Int(255),
                    Value::Int(8),
                    Value::Int(5),
                    Value::Int(255),
                    Value::Int(8),
                ],
                "ff FF 10 101 0xff 010",
            ),
            ("%s and %q", vec![s("a"), s("b\n")], "a and \"b\\n\""),
            (
                "%v",
                vec![Value::list(vec![Value::Int(1), s("a"), Value::Nil])],
                "[1 a <nil>]",
            ),
            ("%.2f", vec![Value::Float(1.23456)], "1.23"),
            ("%f", vec![Value::Float(1.0)], "1.000000"),
            ("%e", vec![Value::Float(123456.789)], "1.234568e+05"),
            ("%g", vec![Value::Float(0.000012345)], "1.2345e-05"),
            ("%.3g", vec![Value::Float(1.23456)], "1.23"),
            ("%8.3f|", vec![Value::Float(1.23456)], "   1.235|"),
            (
                "%+d %+.1f",
                vec![Value::Int(3), Value::Float(2.0)],
                "+3 +2.0",
            ),
            ("%t", vec![Value::Bool(true)], "true"),
            ("%d", vec![s("x")], "%!d(string=x)"),
            ("%s", vec![Value::Int(1)], "%!s(int=1)"),
            ("%d", vec![], "%!d(MISSING)"),
            ("%d", vec![Value::Int(1), s("x")], "1%!(EXTRA string=x)"),
            ("100%%", vec![], "100%"),
            (
                "%T %T %T",
                vec![Value::Int(1), s("x"), Value::Float(1.0)],
                "int string float64",
            ),
            ("%x", vec![s("hi")], "6869"),
            ("%c%c", vec![Value::Int(72), Value::Int(105)], "Hi"),
            ("%U", vec![Value::Int(0x1F600)], "U+1F600"),
            ("%q", vec![Value::Int(97)], "'a'"),
            ("%[2]s %[1]s", vec![s("a"), s("b")], "b a"),
            ("%*d", vec![Value::Int(4), Value::Int(7)], "   7"),
            ("%.1s", vec![s("abc")], "a"),
            ("%d", vec![Value::Nil], "%!d(<nil>)"),
            ("%v", vec![Value::Nil], "<nil>"),
            ("%z", vec![Value::Int(1)], "%!z(int=1)"),
            ("%", vec![], "%!(NOVERB)"),
            (
                "%d",
                vec![Value::list(vec![Value::Int(1), Value::Int(2)])],
                "[1 2]",
            ),
            ("%#v", vec![s("a")], "\"a\""),
        ];
        for (f, args, want) in cases {
            assert_eq!(sprintf(f, &args), want, "format {f:?}");
        }
    }

    #[test]
    fn sprint_spacing() {
        let v = vec![
            Value::Int(1),
            Value::Int(2),
            Value::str("a"),
            Value::Int(3),
            Value::str("b"),
        ];
        assert_eq!(sprint(&v), "1 2a3b");
        assert_eq!(sprintln(&v), "1 2 a 3 b\n");
    }

    #[test]
    fn quoting() {
        assert_eq!(
            quote("a\"b\\c\u{1}é☺\u{200b}"),
            "\"a\\\"b\\\\c\\x01é☺\\u200b\""
        );
        assert_eq!(quote_ascii("é"), "\"\\u00e9\"");
    }
}
