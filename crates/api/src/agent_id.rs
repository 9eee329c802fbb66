//! The one spelling of an agent id.
//!
//! An agent id names the machine an agent runs on. It is usually the MAC of the machine's
//! provisioning interface, which is how a Hardware names its machine (the keys of
//! `spec.networkInterfaces`, lower-case and colon-separated by the CRD's rule). Every credential
//! and every NATS subject, KV key and consumer of an agent is derived from its id, so two
//! spellings of one id must never both be accepted: `AA:BB:CC:00:00:07` or ` aa:bb:cc:00:00:07`
//! would otherwise be a second agent with no session, no pre-shared secret and no history,
//! while the controller (which compares ids canonically) takes it for the first one.
//!
//! So there is exactly one canonical form, and the edges that receive an id from the network
//! ([`AgentId::parse`]) refuse every other spelling, saying which one to use. Inputs an operator
//! or the machine itself controls (a certificate's subject alternative name, the `worker_id`
//! kernel parameter, a flag) may be put into canonical form first ([`AgentId::normalize`]).
//!
//! The canonical form is either
//! - a MAC address: six pairs of lower-case hex digits separated by `:`
//!   (`aa:bb:cc:00:00:07`); or
//! - a name: 1 to [`MAX_AGENT_ID_LEN`] bytes of lower-case ASCII letters, digits, `-`, `.` and
//!   `_`, starting and ending with a letter or a digit, and not a MAC in another spelling
//!   (`aabbcc000007`, `aabb.cc00.0007` and `aa-bb-cc-00-00-07` are MACs, spelled otherwise).

use std::fmt;

/// The longest agent id accepted, in bytes (it becomes NATS subject tokens and a JetStream
/// consumer name of at most 3 x 80 bytes; see `tink_bus`'s tokens).
pub const MAX_AGENT_ID_LEN: usize = 80;

/// An agent id in its canonical form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(String);

/// Why a string is not an agent id in canonical form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgentIdError {
    /// Empty (or only white space).
    #[error("the agent id is empty")]
    Empty,
    /// Longer than [`MAX_AGENT_ID_LEN`].
    #[error("the agent id is {len} bytes long, more than the {MAX_AGENT_ID_LEN} allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The id of a valid agent, spelled otherwise than its canonical form.
    #[error(
        "`{given}` is not in canonical form: send `{canonical}` (lower case, MACs colon-separated, no spaces)"
    )]
    NotCanonical {
        /// What was given.
        given: String,
        /// The canonical spelling of the same id.
        canonical: String,
    },
    /// No spelling of any agent id.
    #[error("`{given}` is not an agent id: {reason}")]
    Invalid {
        /// What was given.
        given: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl AgentId {
    /// The id exactly as given, which must be canonical: the check at every edge that receives
    /// an id from the network.
    pub fn parse(id: &str) -> Result<Self, AgentIdError> {
        let canonical = Self::normalize(id)?;
        if canonical.0 != id {
            return Err(AgentIdError::NotCanonical {
                given: shorten(id),
                canonical: canonical.0,
            });
        }
        Ok(canonical)
    }

    /// Puts an id into canonical form: trims white space, lower-cases, writes a MAC in any of
    /// its usual spellings (`AA-BB-CC-00-00-07`, `aabb.cc00.0007`, `AABBCC000007`) with colons.
    /// For inputs an operator or the machine itself controls, never for ids that a request
    /// claims.
    pub fn normalize(id: &str) -> Result<Self, AgentIdError> {
        let trimmed = id.trim();
        if trimmed.is_empty() {
            return Err(AgentIdError::Empty);
        }
        if trimmed.len() > MAX_AGENT_ID_LEN {
            return Err(AgentIdError::TooLong { len: trimmed.len() });
        }
        if let Some(mac) = mac_digits(trimmed) {
            let pairs: Vec<String> = mac
                .chunks(2)
                .map(|p| p.iter().map(|&b| char::from(b)).collect())
                .collect();
            return Ok(AgentId(pairs.join(":")));
        }
        let lower = trimmed.to_ascii_lowercase();
        let bytes = lower.as_bytes();
        if !bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err(AgentIdError::Invalid {
                given: shorten(id),
                reason: "a MAC address (aa:bb:cc:dd:ee:ff) or a name of letters, digits, `-`, `.` and `_`",
            });
        }
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
        if !edge(bytes.first()) || !edge(bytes.last()) {
            return Err(AgentIdError::Invalid {
                given: shorten(id),
                reason: "a name starts and ends with a letter or a digit",
            });
        }
        Ok(AgentId(lower))
    }

    /// The canonical spelling.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical spelling, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Whether this id is a MAC address.
    pub fn is_mac(&self) -> bool {
        self.0.len() == 17 && mac_digits(&self.0).is_some()
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for AgentId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for AgentId {
    type Err = AgentIdError;

    /// [`AgentId::parse`]: only the canonical form.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl From<AgentId> for String {
    fn from(id: AgentId) -> String {
        id.0
    }
}

/// The twelve lower-case hex digits of a MAC written as `xx:xx:xx:xx:xx:xx` or
/// `xx-xx-xx-xx-xx-xx` (any case), `xxxx.xxxx.xxxx`, or twelve digits without separators.
fn mac_digits(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let groups: Vec<&[u8]> = match b.len() {
        17 => {
            let sep = b[2];
            if sep != b':' && sep != b'-' {
                return None;
            }
            let parts: Vec<&[u8]> = b.split(|&c| c == sep).collect();
            if parts.len() != 6 || parts.iter().any(|p| p.len() != 2) {
                return None;
            }
            parts
        }
        14 => {
            let parts: Vec<&[u8]> = b.split(|&c| c == b'.').collect();
            if parts.len() != 3 || parts.iter().any(|p| p.len() != 4) {
                return None;
            }
            parts
        }
        12 => vec![b],
        _ => return None,
    };
    let digits: Vec<u8> = groups.concat();
    digits
        .iter()
        .all(u8::is_ascii_hexdigit)
        .then(|| digits.iter().map(u8::to_ascii_lowercase).collect())
}

/// An id quoted back in an error, cut to a readable length.
fn shorten(id: &str) -> String {
    if id.len() <= 2 * MAX_AGENT_ID_LEN {
        return id.to_string();
    }
    let mut end = 2 * MAX_AGENT_ID_LEN;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &id[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAC: &str = "aa:bb:cc:00:00:07";

    #[test]
    fn canonical_ids_parse_as_they_are() {
        for id in [
            MAC,
            "02:00:00:00:0e:01",
            "bench-agent-000001",
            "node1.rack2",
            "a",
        ] {
            assert_eq!(
                AgentId::parse(id).map(|a| a.into_string()).as_deref(),
                Ok(id)
            );
        }
        assert!(AgentId::parse(MAC).unwrap().is_mac());
        assert!(!AgentId::parse("bench-agent-1").unwrap().is_mac());
    }

    #[test]
    fn other_spellings_of_a_mac_are_refused_naming_the_canonical_one() {
        for given in [
            "AA:BB:CC:00:00:07",
            " aa:bb:cc:00:00:07",
            "aa:bb:cc:00:00:07\n",
            "aa-bb-cc-00-00-07",
            "AA-BB-CC-00-00-07",
            "aabb.cc00.0007",
            "aabbcc000007",
            "AaBbCc000007",
        ] {
            match AgentId::parse(given) {
                Err(AgentIdError::NotCanonical { canonical, .. }) => {
                    assert_eq!(canonical, MAC, "{given:?}")
                }
                other => panic!("{given:?}: {other:?}"),
            }
            assert_eq!(AgentId::normalize(given).unwrap().as_str(), MAC);
        }
    }

    #[test]
    fn other_spellings_of_a_name_are_refused() {
        assert!(matches!(
            AgentId::parse("Node-1"),
            Err(AgentIdError::NotCanonical { canonical, .. }) if canonical == "node-1"
        ));
        assert!(matches!(
            AgentId::parse("node-1 "),
            Err(AgentIdError::NotCanonical { .. })
        ));
    }

    #[test]
    fn non_ids_are_refused() {
        assert_eq!(AgentId::parse(""), Err(AgentIdError::Empty));
        assert_eq!(AgentId::parse("  "), Err(AgentIdError::Empty));
        assert!(matches!(
            AgentId::parse(&"a".repeat(MAX_AGENT_ID_LEN + 1)),
            Err(AgentIdError::TooLong { .. })
        ));
        assert!(AgentId::parse(&"a".repeat(MAX_AGENT_ID_LEN)).is_ok());
        for bad in [
            "aa:bb",
            "a b",
            "a/b",
            "a*",
            "tink.>",
            "-a",
            "a-",
            ".a",
            "ü",
            "aa:bb:cc:00:00:0g",
            "aa:bb-cc:00:00:07",
        ] {
            assert!(
                matches!(AgentId::parse(bad), Err(AgentIdError::Invalid { .. })),
                "{bad:?}: {:?}",
                AgentId::parse(bad)
            );
        }
        let long = format!("{}!", "x".repeat(500));
        let message = AgentId::normalize(&long[..79]).map(|_| ()).err();
        assert_eq!(message, None);
        assert!(AgentId::parse(&long).unwrap_err().to_string().len() < 200);
    }

    proptest! {
        /// Canonical forms are fixed points, and any two ids that normalise alike are refused
        /// by `parse` unless they are that canonical form.
        #[test]
        fn one_spelling_per_id(id in "[ a-zA-Z0-9:._-]{1,24}") {
            if let Ok(canonical) = AgentId::normalize(&id) {
                prop_assert_eq!(AgentId::parse(canonical.as_str()), Ok(canonical.clone()));
                prop_assert_eq!(AgentId::normalize(canonical.as_str()), Ok(canonical.clone()));
                match AgentId::parse(&id) {
                    Ok(parsed) => prop_assert_eq!(parsed.as_str(), id.as_str()),
                    Err(AgentIdError::NotCanonical { canonical: c, .. }) => prop_assert_eq!(c, canonical.into_string()),
                    Err(e) => prop_assert!(false, "normalizes but parse says {}", e),
                }
            } else {
                prop_assert!(AgentId::parse(&id).is_err());
            }
        }

        #[test]
        fn macs_in_any_spelling_meet(bytes in proptest::array::uniform6(any::<u8>()), upper in any::<bool>(), style in 0..4u8) {
            let hex: Vec<String> = bytes.iter().map(|b| if upper { format!("{b:02X}") } else { format!("{b:02x}") }).collect();
            let spelled = match style {
                0 => hex.join(":"),
                1 => hex.join("-"),
                2 => format!("{}{}.{}{}.{}{}", hex[0], hex[1], hex[2], hex[3], hex[4], hex[5]),
                _ => hex.concat(),
            };
            let canonical: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(AgentId::normalize(&spelled).unwrap().into_string(), canonical.join(":"));
        }
    }
}
