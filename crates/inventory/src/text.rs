//! Text from firmware and sysfs: cleaned, bounded, placeholders dropped.

use crate::validate::MAX_STRING_BYTES;

/// Values vendors leave in serial, product and version fields instead of data. Compared
/// case-insensitively after trimming; they read as absent.
const PLACEHOLDERS: &[&str] = &[
    "not specified",
    "not available",
    "not applicable",
    "not present",
    "n/a",
    "na",
    "none",
    "null",
    "unknown",
    "default string",
    "to be filled by o.e.m.",
    "to be filled by oem",
    "o.e.m.",
    "oem",
    "system serial number",
    "system product name",
    "system manufacturer",
    "system version",
    "base board serial number",
    "chassis serial number",
    "0123456789",
    "123456789",
    "0",
    "00000000",
    "ffffffff",
];

/// Decodes (lossy UTF-8), replaces control characters with spaces, trims, truncates to
/// [`MAX_STRING_BYTES`] on a character boundary, and returns `None` for empty or
/// placeholder values.
pub fn clean(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = text.trim();
    if text.is_empty() || PLACEHOLDERS.iter().any(|p| text.eq_ignore_ascii_case(p)) {
        return None;
    }
    Some(truncate(text, MAX_STRING_BYTES).trim_end().to_owned())
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning() {
        assert_eq!(clean(b"  Dell Inc.  "), Some("Dell Inc.".into()));
        assert_eq!(clean(b"To Be Filled By O.E.M."), None);
        assert_eq!(clean(b"NOT SPECIFIED"), None);
        assert_eq!(clean(b""), None);
        assert_eq!(clean(b"a\tb\x01c\n"), Some("a b c".into()));
        assert_eq!(clean(b"\xffok"), Some("\u{fffd}ok".into()));
        let long = "é".repeat(200); // 400 bytes
        let got = clean(long.as_bytes()).expect("text");
        assert_eq!(got.len(), 256);
        assert!(got.chars().all(|c| c == 'é'));
    }
}
