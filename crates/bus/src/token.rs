//! Safe, reversible tokens for ids used in subjects, KV keys and consumer names.
//!
//! Encoding: every byte of the id's UTF-8 form that is an ASCII letter, digit or `-` is kept;
//! every other byte (including `_` itself, `.`, `:`, `/`, `*`, `>`, spaces, non-ASCII) becomes
//! `_` followed by two lower-case hex digits. So `aa:bb:cc:dd:ee:ff` becomes
//! `aa_3abb_3acc_3add_3aee_3aff` and `default/wf-1` becomes `default_2fwf-1`.
//!
//! Properties: the token alphabet `[A-Za-z0-9_-]` is valid in a NATS subject token, a JetStream
//! KV key and a consumer name; the mapping is injective (ids differ => tokens differ) and
//! [`decode_token`] inverts it. Empty ids and ids over the length limits are refused, so a
//! token never exceeds 3 x the limit.

/// The longest agent id accepted, in bytes. Keeps a name made of a token (`agent_` + token, at
/// most 6 + 3 x 80 = 246 bytes, as the per-agent consumers of earlier versions were named)
/// below the 255-byte file name limit of the JetStream file store.
pub use tink_api::MAX_AGENT_ID_LEN;

/// The longest workflow id accepted, in bytes. The controller sends dispatch ids
/// `{namespace}/{name}/{uid}/{attempt}`: at most 63 + 1 + 253 + 1 + 36 + 1 + 10 = 365 bytes.
pub const MAX_WORKFLOW_ID_LEN: usize = 384;

/// An id that cannot become a token, or a string that is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The id is empty.
    #[error("the {what} is empty")]
    Empty {
        /// What the id identifies (`agent id`, `workflow id`).
        what: &'static str,
    },
    /// The id is longer than allowed.
    #[error("the {what} is {len} bytes long, more than the {max} allowed")]
    TooLong {
        /// What the id identifies.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The string is not a valid token.
    #[error("`{0}` is not a valid token")]
    Malformed(String),
    /// The agent id is not in its one canonical form ([`tink_api::AgentId`]): an id spelled
    /// otherwise would name a second agent with none of the first one's credentials.
    #[error(transparent)]
    Agent(#[from] tink_api::AgentIdError),
}

/// Encodes any non-empty id as a token (see the module documentation).
pub fn encode_token(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push('_');
            out.push(hex_digit(byte >> 4));
            out.push(hex_digit(byte & 0x0f));
        }
    }
    out
}

/// The token of an agent id, refusing ids that are not in canonical form
/// ([`tink_api::AgentId::parse`]): every subject, key and consumer of an agent has one spelling.
pub fn agent_token(agent_id: &str) -> Result<String, TokenError> {
    let id = tink_api::AgentId::parse(agent_id)?;
    Ok(encode_token(id.as_str()))
}

/// The token of a workflow id, refusing empty and over-long ids.
pub fn workflow_token(workflow_id: &str) -> Result<String, TokenError> {
    checked("workflow id", workflow_id, MAX_WORKFLOW_ID_LEN)
}

fn checked(what: &'static str, id: &str, max: usize) -> Result<String, TokenError> {
    if id.is_empty() {
        return Err(TokenError::Empty { what });
    }
    if id.len() > max {
        return Err(TokenError::TooLong {
            what,
            len: id.len(),
            max,
        });
    }
    Ok(encode_token(id))
}

/// Decodes a token made by [`encode_token`].
pub fn decode_token(token: &str) -> Result<String, TokenError> {
    let malformed = || TokenError::Malformed(token.to_string());
    let mut bytes = Vec::with_capacity(token.len());
    let mut input = token.bytes();
    while let Some(byte) = input.next() {
        if byte == b'_' {
            let hi = input.next().and_then(hex_value).ok_or_else(malformed)?;
            let lo = input.next().and_then(hex_value).ok_or_else(malformed)?;
            let decoded = (hi << 4) | lo;
            // Canonical form only: a byte that is kept verbatim must not appear escaped.
            if decoded.is_ascii_alphanumeric() || decoded == b'-' {
                return Err(malformed());
            }
            bytes.push(decoded);
        } else if byte.is_ascii_alphanumeric() || byte == b'-' {
            bytes.push(byte);
        } else {
            return Err(malformed());
        }
    }
    String::from_utf8(bytes).map_err(|_| malformed())
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(nibble & 0x0f)])
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        for (id, token) in [
            ("aa:bb:cc:dd:ee:ff", "aa_3abb_3acc_3add_3aee_3aff"),
            ("default/wf-1", "default_2fwf-1"),
            ("a.b*c>d e", "a_2eb_2ac_3ed_20e"),
            ("under_score", "under_5fscore"),
            ("Ünï", "_c3_9cn_c3_af"),
            ("plain-ID-42", "plain-ID-42"),
        ] {
            assert_eq!(encode_token(id), token, "{id}");
            assert_eq!(decode_token(token).as_deref(), Ok(id), "{token}");
        }
    }

    #[test]
    fn limits() {
        assert_eq!(
            agent_token(""),
            Err(TokenError::Agent(tink_api::AgentIdError::Empty))
        );
        assert!(agent_token(&"a".repeat(MAX_AGENT_ID_LEN)).is_ok());
        assert!(matches!(
            agent_token(&"a".repeat(MAX_AGENT_ID_LEN + 1)),
            Err(TokenError::Agent(tink_api::AgentIdError::TooLong { .. }))
        ));
        // One spelling per agent: the others name no subject, key or consumer.
        assert_eq!(
            agent_token("aa:bb:cc:00:00:07").as_deref(),
            Ok("aa_3abb_3acc_3a00_3a00_3a07")
        );
        for other in [
            "AA:BB:CC:00:00:07",
            " aa:bb:cc:00:00:07",
            "aa-bb-cc-00-00-07",
        ] {
            assert!(
                matches!(
                    agent_token(other),
                    Err(TokenError::Agent(
                        tink_api::AgentIdError::NotCanonical { .. }
                    ))
                ),
                "{other:?}"
            );
        }
        assert!(workflow_token(&"w".repeat(MAX_WORKFLOW_ID_LEN)).is_ok());
        assert!(workflow_token(&"w".repeat(MAX_WORKFLOW_ID_LEN + 1)).is_err());
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for bad in ["a.b", "a_", "a_4", "a_zz", "a_41", "a_2F", "a b", "_ff"] {
            assert!(decode_token(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn round_trips_and_stays_in_the_alphabet(id in ".{1,60}") {
            let token = encode_token(&id);
            prop_assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            prop_assert_eq!(decode_token(&token), Ok(id));
        }

        #[test]
        fn injective(a in ".{1,20}", b in ".{1,20}") {
            prop_assume!(a != b);
            prop_assert_ne!(encode_token(&a), encode_token(&b));
        }
    }
}
