//! A syslog datagram parser: RFC 5424 (`<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG`) and
//! RFC 3164 (`<PRI>Mmm dd hh:mm:ss HOST TAG[PID]: MSG`, with the host name optional as
//! busybox `syslogd -R` and `logger` send it, and an RFC 3339 timestamp accepted in place of
//! the BSD one, as rsyslog sends it).
//!
//! Hand-written (no crate): a datagram is bytes from an untrusted network, and the parser is a
//! few index walks that never allocate more than the text they return and never panic (a
//! property test feeds it arbitrary bytes; `fuzz/` has a cargo-fuzz target).
//!
//! Refused ([`ParseError`]): an empty datagram, a `<PRI>` that is not 1-3 digits up to 191, and
//! a datagram that says it is RFC 5424 (`1 ` after the PRI) whose header or structured data is
//! incomplete. Everything else is read as RFC 3164, leniently, as RFC 3164 section 4.3 asks of
//! a receiver: a datagram without a PRI is `user.notice` and all message.

/// The wire format a datagram was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// RFC 5424.
    Rfc5424,
    /// RFC 3164 (BSD syslog), or no header at all.
    Rfc3164,
}

/// A parsed datagram; the fields borrow from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    /// How it was read.
    pub format: Format,
    /// 0-23.
    pub facility: u8,
    /// 0-7.
    pub severity: u8,
    /// The sender's timestamp, as it wrote it.
    pub timestamp: Option<&'a str>,
    /// The sender's host name.
    pub hostname: Option<&'a str>,
    /// APP-NAME or the RFC 3164 tag.
    pub app: Option<&'a str>,
    /// PROCID or the tag's `[pid]`.
    pub procid: Option<&'a str>,
    /// RFC 5424 MSGID.
    pub msgid: Option<&'a str>,
    /// The message, not yet cleaned ([`clean`]).
    pub text: &'a [u8],
}

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing but white space.
    #[error("empty datagram")]
    Empty,
    /// `<` not followed by 1-3 digits (at most 191) and `>`.
    #[error("invalid <PRI>")]
    Priority,
    /// An RFC 5424 header with a field missing or too long.
    #[error("incomplete RFC 5424 header")]
    Header,
    /// RFC 5424 structured data that does not end.
    #[error("unterminated RFC 5424 structured data")]
    StructuredData,
}

/// RFC 5424 field limits (section 6).
const MAX_HOSTNAME: usize = 255;
const MAX_APP: usize = 48;
const MAX_PROCID: usize = 128;
const MAX_MSGID: usize = 32;
const MAX_TIMESTAMP: usize = 64;

/// `user.notice`, for a datagram without a PRI (RFC 3164 4.3.3).
const DEFAULT_PRI: u8 = 13;

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Parses one datagram.
pub fn parse(datagram: &[u8]) -> Result<Message<'_>, ParseError> {
    let data = trim_end(datagram);
    let data = trim_start(data);
    if data.is_empty() {
        return Err(ParseError::Empty);
    }
    let (pri, rest) = if data.first() == Some(&b'<') {
        priority(data)?
    } else {
        (DEFAULT_PRI, data)
    };
    let (facility, severity) = (pri / 8, pri % 8);
    if let Some(after) = rest.strip_prefix(b"1 ") {
        return rfc5424(facility, severity, after);
    }
    Ok(rfc3164(facility, severity, rest))
}

/// `<PRI>`: the value and what follows.
fn priority(data: &[u8]) -> Result<(u8, &[u8]), ParseError> {
    let mut value: u16 = 0;
    for (i, &b) in data.iter().enumerate().skip(1).take(4) {
        match b {
            b'>' if i > 1 => {
                let pri = u8::try_from(value).map_err(|_| ParseError::Priority)?;
                if pri > 191 {
                    return Err(ParseError::Priority);
                }
                return Ok((pri, data.get(i + 1..).unwrap_or_default()));
            }
            b'0'..=b'9' if i <= 3 => value = value * 10 + u16::from(b - b'0'),
            _ => return Err(ParseError::Priority),
        }
    }
    Err(ParseError::Priority)
}

/// The next space-separated field and the rest after the space (`None` at the end).
fn field(data: &[u8]) -> Option<(&[u8], &[u8])> {
    if data.is_empty() {
        return None;
    }
    match data.iter().position(|&b| b == b' ') {
        Some(i) => Some((data.get(..i)?, data.get(i + 1..)?)),
        None => Some((data, &[])),
    }
}

/// An RFC 5424 header field: printable US-ASCII up to `max` bytes, `-` for none.
fn header_field(value: &[u8], max: usize) -> Result<Option<&str>, ParseError> {
    if value.is_empty() || value.len() > max || !value.iter().all(|b| (33..=126).contains(b)) {
        return Err(ParseError::Header);
    }
    if value == b"-" {
        return Ok(None);
    }
    std::str::from_utf8(value)
        .map(Some)
        .map_err(|_| ParseError::Header)
}

fn rfc5424(facility: u8, severity: u8, data: &[u8]) -> Result<Message<'_>, ParseError> {
    let (timestamp, data) = field(data).ok_or(ParseError::Header)?;
    let (hostname, data) = field(data).ok_or(ParseError::Header)?;
    let (app, data) = field(data).ok_or(ParseError::Header)?;
    let (procid, data) = field(data).ok_or(ParseError::Header)?;
    let (msgid, data) = field(data).ok_or(ParseError::Header)?;
    let timestamp = header_field(timestamp, MAX_TIMESTAMP)?;
    let hostname = header_field(hostname, MAX_HOSTNAME)?;
    let app = header_field(app, MAX_APP)?;
    let procid = header_field(procid, MAX_PROCID)?;
    let msgid = header_field(msgid, MAX_MSGID)?;
    let text = structured_data(data)?;
    let text = text.strip_prefix(b" ").unwrap_or(text);
    // A UTF-8 message starts with a byte order mark (section 6.4).
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    Ok(Message {
        format: Format::Rfc5424,
        facility,
        severity,
        timestamp,
        hostname,
        app,
        procid,
        msgid,
        text,
    })
}

/// Skips STRUCTURED-DATA (`-`, or `[id param="value"...]` elements, `\"`, `\\` and `\]`
/// escaped inside values); returns what follows.
fn structured_data(data: &[u8]) -> Result<&[u8], ParseError> {
    match data.first() {
        // A message with nothing after MSGID: no structured data, no text.
        None => return Ok(&[]),
        Some(b'-') => return Ok(data.get(1..).unwrap_or_default()),
        Some(b'[') => {}
        Some(_) => return Err(ParseError::StructuredData),
    }
    let mut i = 0;
    while data.get(i) == Some(&b'[') {
        i += 1;
        let mut quoted = false;
        loop {
            match data.get(i) {
                None => return Err(ParseError::StructuredData),
                Some(b'\\') if quoted => i += 2,
                Some(b'"') => {
                    quoted = !quoted;
                    i += 1;
                }
                Some(b']') if !quoted => {
                    i += 1;
                    break;
                }
                Some(_) => i += 1,
            }
        }
    }
    Ok(data.get(i..).unwrap_or_default())
}

fn rfc3164(facility: u8, severity: u8, data: &[u8]) -> Message<'_> {
    let (timestamp, rest) = bsd_timestamp(data)
        .or_else(|| rfc3339_timestamp(data))
        .map_or((None, data), |(t, r)| (Some(t), r));
    // HOSTNAME is optional in what busybox, glibc's syslog(3) and logger send: a first word
    // that is a tag (`kernel:`, `dhcp[12]:`) means there is none.
    let (hostname, app, procid, text) = match field(rest) {
        Some((first, after)) if tag(first).is_some() => {
            let (app, procid) = tag(first).unwrap_or_default();
            (None, Some(app), procid, after)
        }
        Some((first, after)) if timestamp.is_some() && is_hostname(first) => {
            match field(after).and_then(|(second, text)| tag(second).map(|t| (t, text))) {
                Some(((app, procid), text)) => (str_of(first), Some(app), procid, text),
                None => (str_of(first), None, None, after),
            }
        }
        _ => (None, None, None, rest),
    };
    Message {
        format: Format::Rfc3164,
        facility,
        severity,
        timestamp,
        hostname,
        app,
        procid,
        msgid: None,
        text,
    }
}

/// `TAG:` or `TAG[PID]:` (RFC 3164 5.3): the tag and the pid.
fn tag(word: &[u8]) -> Option<(&str, Option<&str>)> {
    let word = word.strip_suffix(b":")?;
    let (name, pid) = match word.iter().position(|&b| b == b'[') {
        Some(i) => {
            let pid = word.get(i + 1..)?.strip_suffix(b"]")?;
            (word.get(..i)?, Some(pid))
        }
        None => (word, None),
    };
    let name_ok = !name.is_empty()
        && name.len() <= MAX_APP
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-_./".contains(&b));
    let pid_ok = pid.is_none_or(|p| {
        !p.is_empty() && p.len() <= 20 && p.iter().all(|&b| (33..=126).contains(&b) && b != b']')
    });
    if !name_ok || !pid_ok {
        return None;
    }
    Some((str_of(name)?, pid.and_then(str_of)))
}

fn is_hostname(word: &[u8]) -> bool {
    !word.is_empty()
        && word.len() <= MAX_HOSTNAME
        && word
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-.:_".contains(&b))
}

/// `Mmm dd hh:mm:ss ` (the day space-padded): the timestamp and the rest.
fn bsd_timestamp(data: &[u8]) -> Option<(&str, &[u8])> {
    let t = data.get(..15)?;
    let rest = data.get(15..)?;
    let month = t.get(..3)?;
    let ok = MONTHS.iter().any(|m| m.as_slice() == month)
        && t.get(3) == Some(&b' ')
        && matches!(t.get(4), Some(b' ' | b'0'..=b'3'))
        && t.get(5).is_some_and(u8::is_ascii_digit)
        && t.get(6) == Some(&b' ')
        && digits(t.get(7..9)?)
        && t.get(9) == Some(&b':')
        && digits(t.get(10..12)?)
        && t.get(12) == Some(&b':')
        && digits(t.get(13..15)?);
    if !ok {
        return None;
    }
    let rest = match rest.first() {
        None => rest,
        Some(b' ') => rest.get(1..)?,
        Some(_) => return None,
    };
    Some((str_of(t)?, rest))
}

/// `YYYY-MM-DDThh:mm:ss[.frac](Z|+hh:mm) `: the timestamp and the rest.
fn rfc3339_timestamp(data: &[u8]) -> Option<(&str, &[u8])> {
    let (word, rest) = field(data)?;
    let ok = word.len() >= 20
        && word.len() <= MAX_TIMESTAMP
        && digits(word.get(..4)?)
        && word.get(4) == Some(&b'-')
        && word.get(10) == Some(&b'T')
        && word
            .iter()
            .all(|&b| b.is_ascii_digit() || b"-T:.Z+".contains(&b));
    if !ok {
        return None;
    }
    Some((str_of(word)?, rest))
}

fn digits(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(u8::is_ascii_digit)
}

fn str_of(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

fn trim_end(mut b: &[u8]) -> &[u8] {
    while let Some((last, rest)) = b.split_last() {
        if matches!(last, b'\n' | b'\r' | b'\0' | b' ' | b'\t') {
            b = rest;
        } else {
            break;
        }
    }
    b
}

fn trim_start(mut b: &[u8]) -> &[u8] {
    while let Some((first, rest)) = b.split_first() {
        if matches!(first, b'\n' | b'\r' | b'\0' | b' ' | b'\t') {
            b = rest;
        } else {
            break;
        }
    }
    b
}

/// The message as stored: invalid UTF-8 replaced, control characters (but tab) made spaces,
/// trailing white space removed, cut to at most `max` bytes on a character boundary with `…`
/// at the end when cut, and the values of kernel parameters that carry secrets hidden
/// ([`redact`]).
pub fn clean(text: &[u8], max: usize) -> String {
    let lossy = String::from_utf8_lossy(text);
    let mut out: String = lossy
        .chars()
        .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
        .collect();
    out = redact(&out);
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    if out.len() > max {
        let marker = '…';
        let mut cut = max.saturating_sub(marker.len_utf8());
        while cut > 0 && !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push(marker);
    }
    out
}

/// Kernel parameters whose values are secrets: the kernel prints its command line at boot
/// (`Kernel command line: ... tink_agent_secret=...`), and klogd forwards it.
pub const SECRET_PARAMS: [&str; 1] = ["tink_agent_secret="];

/// `text` with the value of every [`SECRET_PARAMS`] parameter replaced by `(hidden)`, as
/// osie/init prints the command line.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'outer: loop {
        for param in SECRET_PARAMS {
            if let Some(at) = rest.find(param) {
                let (before, after) = rest.split_at(at + param.len());
                out.push_str(before);
                out.push_str("(hidden)");
                let end = after
                    .find(|c: char| c.is_whitespace())
                    .unwrap_or(after.len());
                rest = after.get(end..).unwrap_or_default();
                continue 'outer;
            }
        }
        out.push_str(rest);
        return out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc5424_with_structured_data() {
        let m = parse(b"<165>1 2026-11-27T13:00:00.003Z m1.example evntslog 1370 ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"App\\]lication\"][x@1 a=\"b\"] \xEF\xBB\xBFAn application event\n").unwrap();
        assert_eq!(m.format, Format::Rfc5424);
        assert_eq!((m.facility, m.severity), (20, 5));
        assert_eq!(m.timestamp, Some("2026-11-27T13:00:00.003Z"));
        assert_eq!(m.hostname, Some("m1.example"));
        assert_eq!(m.app, Some("evntslog"));
        assert_eq!(m.procid, Some("1370"));
        assert_eq!(m.msgid, Some("ID47"));
        assert_eq!(m.text, b"An application event");
    }

    #[test]
    fn rfc5424_with_nil_values() {
        let m = parse(b"<14>1 - - - - - - hello world").unwrap();
        assert_eq!(m.format, Format::Rfc5424);
        assert_eq!((m.facility, m.severity), (1, 6));
        assert_eq!(
            (m.timestamp, m.hostname, m.app, m.procid, m.msgid),
            (None, None, None, None, None)
        );
        assert_eq!(m.text, b"hello world");
        let m = parse(b"<14>1 - host app - - -").unwrap();
        assert_eq!(m.text, b"");
    }

    #[test]
    fn rfc5424_refusals() {
        assert_eq!(parse(b"<14>1 - host app"), Err(ParseError::Header));
        assert_eq!(
            parse(b"<14>1 - host app - - [unterminated a=\"]\"x"),
            Err(ParseError::StructuredData)
        );
        assert_eq!(
            parse(b"<14>1 - host app - - oops"),
            Err(ParseError::StructuredData)
        );
        let long_app = format!("<14>1 - host {} - - - x", "a".repeat(49));
        assert_eq!(parse(long_app.as_bytes()), Err(ParseError::Header));
    }

    #[test]
    fn busybox_and_klogd_lines_have_no_host_name() {
        let m = parse(b"<6>Nov 27 13:00:00 kernel: [    0.000000] Linux version 6.1.0-27-amd64\n")
            .unwrap();
        assert_eq!(m.format, Format::Rfc3164);
        assert_eq!((m.facility, m.severity), (0, 6));
        assert_eq!(m.timestamp, Some("Nov 27 13:00:00"));
        assert_eq!(m.hostname, None);
        assert_eq!(m.app, Some("kernel"));
        assert_eq!(m.text, b"[    0.000000] Linux version 6.1.0-27-amd64");
        let m = parse(b"<13>Nov  7 01:02:03 tink-osie: network: eth0").unwrap();
        assert_eq!(m.timestamp, Some("Nov  7 01:02:03"));
        assert_eq!(m.app, Some("tink-osie"));
        assert_eq!(m.text, b"network: eth0");
    }

    #[test]
    fn rfc3164_with_host_and_pid() {
        let m = parse(b"<34>Oct 11 22:14:15 mymachine su[230]: 'su root' failed").unwrap();
        assert_eq!((m.facility, m.severity), (4, 2));
        assert_eq!(m.hostname, Some("mymachine"));
        assert_eq!(m.app, Some("su"));
        assert_eq!(m.procid, Some("230"));
        assert_eq!(m.text, b"'su root' failed");
        // rsyslog's RFC 3339 timestamp in a BSD line.
        let m = parse(b"<30>2026-11-27T13:00:00.123+00:00 m1 dhcpcd[9]: leased").unwrap();
        assert_eq!(m.timestamp, Some("2026-11-27T13:00:00.123+00:00"));
        assert_eq!(m.hostname, Some("m1"));
        assert_eq!(m.app, Some("dhcpcd"));
        // A host name and no tag: all message after the host.
        let m = parse(b"<30>Nov 27 13:00:00 m1 plain words").unwrap();
        assert_eq!(m.hostname, Some("m1"));
        assert_eq!(m.app, None);
        assert_eq!(m.text, b"plain words");
    }

    #[test]
    fn lenient_rfc3164() {
        let m = parse(b"no header at all").unwrap();
        assert_eq!((m.facility, m.severity), (1, 5));
        assert_eq!(m.text, b"no header at all");
        let m = parse(b"<0>").unwrap();
        assert_eq!(m.text, b"");
        let m = parse(b"<191>Nov 27 13:00:00").unwrap();
        assert_eq!((m.facility, m.severity), (23, 7));
        assert_eq!(m.timestamp, Some("Nov 27 13:00:00"));
        // Not a timestamp: kept in the message.
        let m = parse(b"<13>Foo 27 13:00:00 x").unwrap();
        assert_eq!(m.timestamp, None);
        assert_eq!(m.text, b"Foo 27 13:00:00 x");
    }

    #[test]
    fn refusals() {
        assert_eq!(parse(b""), Err(ParseError::Empty));
        assert_eq!(parse(b" \r\n\0"), Err(ParseError::Empty));
        assert_eq!(parse(b"<>x"), Err(ParseError::Priority));
        assert_eq!(parse(b"<192>x"), Err(ParseError::Priority));
        assert_eq!(parse(b"<1000>x"), Err(ParseError::Priority));
        assert_eq!(parse(b"<12"), Err(ParseError::Priority));
        assert_eq!(parse(b"<a>x"), Err(ParseError::Priority));
    }

    #[test]
    fn cleaning_cuts_replaces_and_hides_secrets() {
        assert_eq!(clean(b"a\x01b\tc \n", 100), "a b\tc");
        assert_eq!(clean(b"\xff ok", 100), "\u{fffd} ok");
        let cut = clean("ééééé".as_bytes(), 6);
        assert!(cut.len() <= 6, "{cut:?}");
        assert!(cut.ends_with('…'));
        assert_eq!(
            clean(b"Kernel command line: worker_id=x tink_agent_secret=s3cr3t console=tty0 tink_agent_secret=again", 1000),
            "Kernel command line: worker_id=x tink_agent_secret=(hidden) console=tty0 tink_agent_secret=(hidden)"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Any bytes: a result or a refusal, never a panic; what is read lies within bounds.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(m) = parse(&data) {
                prop_assert!(m.facility <= 23);
                prop_assert!(m.severity <= 7);
                prop_assert!(m.text.len() <= data.len());
                prop_assert!(m.app.is_none_or(|a| a.len() <= MAX_APP));
                let text = clean(m.text, 64);
                prop_assert!(text.len() <= 64);
                prop_assert!(!text.chars().any(|c| c.is_control() && c != '\t'));
            }
        }

        /// Syslog-shaped input with random edits (the interesting inputs for the header code).
        #[test]
        fn edited_lines_never_panic(
            base in prop_oneof![
                Just(b"<165>1 2026-11-27T13:00:00Z h a 1 m [i a=\"b\\\"]\"] text".to_vec()),
                Just(b"<6>Nov 27 13:00:00 kernel: [ 0.1] x".to_vec()),
                Just(b"<34>Oct 11 22:14:15 host su[230]: msg".to_vec()),
            ],
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<bool>()), 0..8),
        ) {
            let mut data = base;
            for (at, byte, insert) in edits {
                let at = at % (data.len() + 1);
                if insert || at == data.len() {
                    data.insert(at, byte);
                } else {
                    data[at] = byte;
                }
            }
            let _ = parse(&data).map(|m| clean(m.text, 1024));
        }

        /// Well-formed RFC 5424 lines read back their fields.
        #[test]
        fn rfc5424_round_trip(
            pri in 0u8..=191,
            host in "[a-z][a-z0-9.-]{0,30}",
            app in "[a-z][a-z0-9_-]{0,20}",
            text in "[ -~]{0,80}",
        ) {
            let line = format!("<{pri}>1 2026-11-27T13:00:00Z {host} {app} - - - {text}");
            let m = parse(line.as_bytes()).unwrap();
            prop_assert_eq!(m.facility * 8 + m.severity, pri);
            prop_assert_eq!(m.hostname, Some(host.as_str()));
            prop_assert_eq!(m.app, Some(app.as_str()));
            prop_assert_eq!(clean(m.text, 1024), text.trim_end());
        }
    }
}
