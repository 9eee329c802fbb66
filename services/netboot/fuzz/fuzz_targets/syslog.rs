//! Any bytes as a syslog datagram: the parser returns a message or a refusal, never a panic,
//! and what it returns holds to its limits: facility and severity in range, every field a
//! part of the datagram within RFC 5424's lengths; the stored line ([`line_of`]) is cut to its
//! limit, carries no control character but tab, and never the value of a secret kernel
//! parameter (`tink_agent_secret=`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tink_netboot::syslog::line_of;
use tink_netboot::syslog::parse::{self, SECRET_PARAMS};

/// Whether `part` lies inside `whole` (the parser borrows, never copies).
fn within(whole: &[u8], part: &[u8]) -> bool {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    part.is_empty() || (p >= w && p + part.len() <= w + whole.len())
}

/// No secret parameter's value survives: each one is followed by `(hidden)`, or by a prefix of
/// it that the length cut ended with `…`.
fn secrets_hidden(text: &str) {
    for param in SECRET_PARAMS {
        for (at, _) in text.match_indices(param) {
            let after = &text[at + param.len()..];
            let cut = after
                .strip_suffix('…')
                .is_some_and(|p| "(hidden)".starts_with(p));
            assert!(
                after.starts_with("(hidden)") || cut,
                "a secret survived: {text:?}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(m) = parse::parse(data) else {
        return;
    };
    assert!(m.facility <= 23 && m.severity <= 7);
    assert!(within(data, m.text));
    for (field, max) in [
        (m.timestamp, 64),
        (m.hostname, 255),
        (m.app, 48),
        (m.procid, 128),
        (m.msgid, 32),
    ] {
        if let Some(f) = field {
            assert!(within(data, f.as_bytes()), "a field not from the datagram");
            assert!(f.len() <= max, "a field over its limit: {f:?}");
        }
    }
    let max = usize::from(data.first().copied().unwrap_or(0)) * 8;
    let line = line_of(&m, "10.0.0.2".parse().expect("ip"), max);
    assert!(
        line.message.len() <= max.max(16),
        "{} > {max}",
        line.message.len()
    );
    for s in [
        Some(&line.message),
        line.hostname.as_ref(),
        line.app.as_ref(),
        line.procid.as_ref(),
        line.timestamp.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        assert!(!s.chars().any(|c| c.is_control() && c != '\t'));
        secrets_hidden(s);
    }
});
