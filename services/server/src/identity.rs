//! Who an agent is: from its client certificate, or from the session token the server issued
//! to the first stream of its agent id. Never from the request body alone.
//!
//! - **Certificate (mutual TLS).** A client certificate names its agent in a URI subject
//!   alternative name `spiffe://<trust domain>/agent/<agent id>` (any trust domain; the agent id
//!   as the agent presents it, e.g. the MAC `spiffe://tinkerbell/agent/aa:bb:cc:dd:ee:ff`). A
//!   stream or event for another agent id is refused with `PERMISSION_DENIED`.
//! - **Session token.** The first stream of an agent id with no live session gets a random token
//!   in the response metadata [`TOKEN_HEADER`]; every later stream and `PublishEvent` for that
//!   agent must present it in the same header. A stream without it while the session is alive
//!   is refused (`PERMISSION_DENIED`) instead of taking over. The session (its SHA-256 is kept in
//!   the agent's presence entry) ends when the presence entry expires or an operator resets it
//!   (`tinkctl agent reset <agent id>` deletes the entry).
//! - **Compatibility.** `--allow-unauthenticated-agents` admits agents that present neither (an
//!   agent generated from the seeds/004 protocol alone): their stream takes over as before and
//!   their events are trusted. Off by default; logged as a warning when on.

use base64::Engine as _;
use tonic::metadata::MetadataMap;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// The metadata key of the session token, in responses (issued) and requests (presented).
pub const TOKEN_HEADER: &str = "x-tink-agent-token";

/// The agent id a client certificate names (the first URI SAN of the form
/// `spiffe://<domain>/agent/<id>`).
pub fn agent_of_certificate(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|name| match name {
        GeneralName::URI(uri) => agent_of_uri(uri),
        _ => None,
    })
}

fn agent_of_uri(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("spiffe://")?;
    let (_domain, path) = rest.split_once('/')?;
    let id = path.strip_prefix("agent/")?;
    (!id.is_empty() && !id.contains('/')).then(|| id.to_string())
}

/// A new random session token (256 bits, URL-safe base64).
pub fn new_token() -> Result<String, ring::error::Unspecified> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The hex SHA-256 of a token (what presence keeps; the token itself is never stored).
pub fn token_hash(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two hashes in constant time.
pub fn same_hash(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The token a request presents, if any.
pub fn presented_token(metadata: &MetadataMap) -> Option<String> {
    metadata
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .filter(|t| !t.is_empty() && t.len() <= 128)
}

/// Whether two agent ids name the same agent (MACs in any case or separator style).
pub fn same_agent(a: &str, b: &str) -> bool {
    normalize(a) == normalize(b)
}

fn normalize(id: &str) -> String {
    id.trim().to_ascii_lowercase().replace('-', ":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_agents() {
        assert_eq!(
            agent_of_uri("spiffe://tinkerbell/agent/aa:bb:cc:dd:ee:ff").as_deref(),
            Some("aa:bb:cc:dd:ee:ff")
        );
        assert_eq!(agent_of_uri("spiffe://x/agent/"), None);
        assert_eq!(agent_of_uri("spiffe://x/agent/a/b"), None);
        assert_eq!(agent_of_uri("https://x/agent/a"), None);
        assert_eq!(agent_of_uri("spiffe://x/server/a"), None);
    }

    #[test]
    fn tokens_are_random_and_hashed() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(token_hash(&a).len(), 64);
        assert!(same_hash(&token_hash(&a), &token_hash(&a)));
        assert!(!same_hash(&token_hash(&a), &token_hash(&b)));
        assert!(same_agent("AA-BB-CC-DD-EE-FF", "aa:bb:cc:dd:ee:ff"));
    }
}
