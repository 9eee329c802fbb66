//! [`Timeout`]: a duration written by hand in Go / Kubernetes (`metav1.Duration`) syntax.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The pattern a [`Timeout`] must match: `0`, or one or more `<number><unit>` pairs with the
/// units of Go's `time.ParseDuration` (`h`, `m`, `s`, `ms`, `us`/`µs`, `ns`), no sign.
pub const TIMEOUT_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$";

/// A non-negative duration in the syntax Kubernetes users already write for `metav1.Duration`
/// and Go's `time.ParseDuration`: `90m`, `1h30m`, `45s`, `1.5h`, `500ms`. `0` (or `0s`) means
/// "no timeout".
///
/// The text is kept exactly as written, so a value read from the API server and written back is
/// byte-for-byte unchanged; [`Timeout::duration`] gives the parsed value. Deserializing rejects
/// anything that does not parse (the CRD schema carries the same rule as [`TIMEOUT_PATTERN`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timeout {
    text: String,
    duration: Duration,
}

/// Why a [`Timeout`] did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text is empty.
    #[error("empty duration; write e.g. \"90m\", \"1h30m\" or \"0\" for none")]
    Empty,
    /// A number is missing or malformed at the given byte offset.
    #[error("invalid number at byte {offset} in duration {text:?}")]
    InvalidNumber {
        /// The whole text.
        text: String,
        /// Byte offset of the problem.
        offset: usize,
    },
    /// A unit is missing or unknown.
    #[error(
        "missing or unknown unit at byte {offset} in duration {text:?}; expected one of h, m, s, ms, us, ns"
    )]
    InvalidUnit {
        /// The whole text.
        text: String,
        /// Byte offset of the problem.
        offset: usize,
    },
    /// The value does not fit in a `std::time::Duration`.
    #[error("duration {text:?} is too large")]
    Overflow {
        /// The whole text.
        text: String,
    },
}

impl Timeout {
    /// No timeout (`0`).
    pub fn none() -> Self {
        Self {
            text: "0".to_string(),
            duration: Duration::ZERO,
        }
    }

    /// Parses Go duration syntax (see the type documentation).
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        let duration = parse_go_duration(text)?;
        Ok(Self {
            text: text.to_string(),
            duration,
        })
    }

    /// Whole seconds, written as `<n>s` (the form conversion from v1alpha1 produces).
    pub fn from_secs(secs: u64) -> Self {
        Self {
            text: format!("{secs}s"),
            duration: Duration::from_secs(secs),
        }
    }

    /// A duration written in its shortest Go form, e.g. `1h30m`, `45s`, `1.5s`, `0`.
    pub fn from_duration(d: Duration) -> Self {
        Self {
            text: format_go_duration(d),
            duration: d,
        }
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parsed duration (zero means no timeout).
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The timeout to enforce: `None` when it is zero (no timeout).
    pub fn limit(&self) -> Option<Duration> {
        (!self.duration.is_zero()).then_some(self.duration)
    }
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Timeout {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl From<Duration> for Timeout {
    fn from(d: Duration) -> Self {
        Self::from_duration(d)
    }
}

impl Serialize for Timeout {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Timeout {
    fn schema_name() -> Cow<'static, str> {
        "Timeout".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": TIMEOUT_PATTERN,
            "description": "A duration in Go syntax such as 90m, 1h30m or 45s; 0 means no timeout."
        })
    }
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        _ => return None,
    })
}

fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut total: u128 = 0;
    let overflow = || DurationError::Overflow {
        text: text.to_string(),
    };
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(DurationError::InvalidNumber {
                text: text.to_string(),
                offset: start,
            });
        }
        let int_part = &text[start..i];
        let mut frac_part = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let fstart = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i == fstart {
                return Err(DurationError::InvalidNumber {
                    text: text.to_string(),
                    offset: fstart,
                });
            }
            frac_part = &text[fstart..i];
        }
        let ustart = i;
        while i < bytes.len() && !bytes[i].is_ascii_digit() && bytes[i] != b'.' {
            i += 1;
        }
        let unit = &text[ustart..i];
        let scale = unit_nanos(unit).ok_or_else(|| DurationError::InvalidUnit {
            text: text.to_string(),
            offset: ustart,
        })?;
        let int: u128 = int_part.parse().map_err(|_| overflow())?;
        let mut nanos = int.checked_mul(scale).ok_or_else(overflow)?;
        // Fractional part: value = frac / 10^len, scaled; digits beyond nanosecond precision
        // are truncated like Go does.
        let mut div: u128 = 1;
        let mut frac: u128 = 0;
        for c in frac_part.bytes().take(30) {
            frac = frac * 10 + u128::from(c - b'0');
            div *= 10;
        }
        nanos = nanos
            .checked_add(frac.checked_mul(scale).ok_or_else(overflow)? / div)
            .ok_or_else(overflow)?;
        total = total.checked_add(nanos).ok_or_else(overflow)?;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| overflow())?;
    // The remainder is below 10^9 and fits a u32.
    let sub = u32::try_from(total % 1_000_000_000).map_err(|_| overflow())?;
    Ok(Duration::new(secs, sub))
}

/// Formats like Go's `time.Duration.String` but without the trailing zero units
/// (`1h30m` rather than `1h30m0s`).
fn format_go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0".to_string();
    }
    let total_secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if total_secs == 0 {
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", nanos / 1_000_000)
        } else if nanos.is_multiple_of(1_000) {
            format!("{}us", nanos / 1_000)
        } else {
            format!("{nanos}ns")
        };
    }
    let h = total_secs / 3600;
    let m = (total_secs % 3600) / 60;
    let s = total_secs % 60;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || nanos > 0 {
        if nanos > 0 {
            let frac = format!("{nanos:09}");
            out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
        } else {
            out.push_str(&format!("{s}s"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_forms() {
        let cases = [
            ("0", 0u64, 0u32),
            ("0s", 0, 0),
            ("90m", 5400, 0),
            ("1h30m", 5400, 0),
            ("1.5h", 5400, 0),
            ("45s", 45, 0),
            ("500ms", 0, 500_000_000),
            ("1m0.5s", 60, 500_000_000),
            ("2us", 0, 2_000),
            ("3µs", 0, 3_000),
            ("7ns", 0, 7),
        ];
        for (text, secs, nanos) in cases {
            let t = Timeout::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(t.duration(), Duration::new(secs, nanos), "{text}");
            assert_eq!(t.as_str(), text);
        }
    }

    #[test]
    fn rejects_bad_forms() {
        for text in [
            "", "10", "-5m", "5 m", "h", "1.h", ".5h", "1d", "1h30", "1e3s",
        ] {
            assert!(Timeout::parse(text).is_err(), "{text} should not parse");
        }
        assert!(matches!(
            Timeout::parse("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow { .. })
        ));
    }

    #[test]
    fn formats_shortest() {
        assert_eq!(
            Timeout::from_duration(Duration::from_secs(5400)).as_str(),
            "1h30m"
        );
        assert_eq!(
            Timeout::from_duration(Duration::from_secs(45)).as_str(),
            "45s"
        );
        assert_eq!(
            Timeout::from_duration(Duration::from_millis(1500)).as_str(),
            "1.5s"
        );
        assert_eq!(
            Timeout::from_duration(Duration::from_millis(20)).as_str(),
            "20ms"
        );
        assert_eq!(Timeout::from_duration(Duration::ZERO).as_str(), "0");
        for secs in [1u64, 59, 60, 61, 3599, 3600, 86_400, 1_000_000] {
            let t = Timeout::from_duration(Duration::from_secs(secs));
            assert_eq!(
                Timeout::parse(t.as_str()).map(|p| p.duration()),
                Ok(Duration::from_secs(secs))
            );
        }
    }

    #[test]
    fn limit_is_none_for_zero() {
        assert_eq!(Timeout::none().limit(), None);
        assert_eq!(Timeout::from_secs(3).limit(), Some(Duration::from_secs(3)));
    }
}
