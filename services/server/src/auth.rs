//! Who is calling: every decision about an agent's identity in one place.
//!
//! An agent is named by its agent id in one canonical spelling ([`tink_api::AgentId`]): a
//! request that names an agent in any other spelling (`AA:BB:..`, a leading space) is refused
//! with INVALID_ARGUMENT before anything is looked up, since another spelling would be another
//! agent with none of the first one's credentials.
//!
//! Then the caller proves it is that agent:
//! - **Certificate (mutual TLS).** A client certificate names its agent in a URI subject
//!   alternative name `spiffe://<trust domain>/agent/<agent id>` (any trust domain; the agent id
//!   put into canonical form, e.g. `spiffe://tinkerbell/agent/aa:bb:cc:dd:ee:ff`). A stream or
//!   event for another agent id is refused with `PERMISSION_DENIED`.
//! - **Session token.** The first stream of an agent id with no live session gets a random token
//!   in the response metadata [`TOKEN_HEADER`]; every later stream and `PublishEvent` for that
//!   agent must present it in the same header. A stream without it while the session is alive
//!   is refused (`PERMISSION_DENIED`) instead of taking over. The session (its SHA-256 is kept in
//!   the agent's presence entry) ends with its stream, when the server replica holding it has
//!   not stored its heartbeat for the presence TTL, or when an operator resets it
//!   (`tinkctl agent reset <agent id>` deletes the entry).
//! - **Boot secret** ([`crate::secrets`]): for machines whose Hardware names one, needed to
//!   create a session (a stream without a certificate that does not present the live session's
//!   token), once: the replica records its exchange and refuses it afterwards. Streams with the
//!   live token or a certificate, events and log batches need none.
//! - **Dispatch target.** An event (or log batch) is about a dispatch; the replica that forwarded
//!   the dispatch's StartWorkflow recorded which agent it went to ([`crate::targets`]), and an
//!   event from any other agent is refused (`PERMISSION_DENIED`): no agent can confirm, fail or
//!   own the output of another machine's workflow.
//! - **Compatibility.** `--allow-unauthenticated-agents` admits agents that present neither a
//!   certificate nor a token (an agent generated from the seeds/004 protocol alone, which also
//!   sends no agent id in its events): their stream takes over as before, and an event without
//!   credentials is recorded for the agent its dispatch went to when that dispatch went to a
//!   stream that presented no credentials either (an event naming another agent is refused), or,
//!   for a dispatch with no recorded target, for the agent it names. So in that mode whoever
//!   knows such a dispatch id can report for it; dispatches to agents that authenticate stay
//!   theirs. Off by default; logged as a warning at start and shown by `/readyz`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use tink_api::AgentId;
use tink_bus::Presence;
use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tracing::warn;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::session::Shared;

/// The metadata key of the session token, in responses (issued) and requests (presented).
pub const TOKEN_HEADER: &str = "x-tink-agent-token";

/// The trailer of a refused stream of an unknown agent id when enrollment is on (value
/// `open`): the agent may report its inventory without credentials to enroll.
pub const ENROLLMENT_TRAILER: &str = "x-tink-enrollment";

/// The agent id a client certificate names (the first URI SAN of the form
/// `spiffe://<domain>/agent/<id>`), in canonical form (the CA vouches for the name, whatever its
/// spelling).
pub fn agent_of_certificate(der: &[u8]) -> Option<AgentId> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|name| match name {
        GeneralName::URI(uri) => agent_of_uri(uri),
        _ => None,
    })
}

fn agent_of_uri(uri: &str) -> Option<AgentId> {
    let rest = uri.strip_prefix("spiffe://")?;
    let (_domain, path) = rest.split_once('/')?;
    let id = path.strip_prefix("agent/")?;
    if id.is_empty() || id.contains('/') {
        return None;
    }
    AgentId::normalize(id).ok()
}

/// The agent id a request names in `field`, which must be canonical.
pub(crate) fn claimed_agent(field: &str, id: &str) -> Result<AgentId, Status> {
    AgentId::parse(id).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
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

/// How a request authenticated its agent.
#[derive(Debug, Clone, Default)]
pub(crate) struct Auth {
    /// The agent id its client certificate names.
    pub certificate: Option<AgentId>,
    /// The session token it presented.
    pub token: Option<String>,
    /// The machine's boot secret it presented (required only to create a session of an agent
    /// that has one).
    pub secret: Option<String>,
}

impl Auth {
    /// The credentials a request carries: the agent its client certificate names, the session
    /// token and the pre-shared secret in its metadata.
    pub(crate) fn of<T>(request: &tonic::Request<T>) -> Auth {
        let certificate = request
            .peer_certs()
            .and_then(|certs| certs.first().and_then(|c| agent_of_certificate(c)));
        Auth {
            certificate,
            token: presented_token(request.metadata()),
            secret: crate::secrets::AgentSecrets::presented(request.metadata()),
        }
    }

    /// Whether the request presented a certificate or a session token.
    pub(crate) fn presented_credentials(&self) -> bool {
        self.certificate.is_some() || self.token.is_some()
    }
}

/// Who sent an event: an agent that proved its identity, or (with unauthenticated agents
/// allowed) a caller without credentials.
pub(crate) enum Caller {
    Agent(AgentId),
    Anonymous(Option<AgentId>),
}

/// What [`Shared::authorize_stream`] grants a new stream.
pub(crate) struct StreamGrant {
    /// The hex SHA-256 of the session's token (empty for a certificate session).
    pub token_sha256: String,
    /// A newly issued token, for the response metadata.
    pub issued: Option<String>,
    /// The hash of the boot secret the new session is created with, to record as exchanged
    /// ([`crate::secrets::AgentSecrets::exchange`]) before the stream is answered.
    pub exchange: Option<crate::secrets::Exchange>,
}

/// How long a session token hash read from presence is reused.
const TOKEN_CACHE_TTL: Duration = Duration::from_secs(2);
/// The most cached token hashes.
const TOKEN_CACHE_MAX: usize = 65_536;

/// Token hashes of sessions held by other replicas, read from presence (agent token -> hash,
/// when read); bounded, entries reused for [`TOKEN_CACHE_TTL`].
#[derive(Debug, Default)]
pub(crate) struct TokenCache(Mutex<HashMap<String, (String, Instant)>>);

impl Shared {
    /// The agent an event (or log batch) about dispatch `dispatch_id` is recorded for: the
    /// authenticated agent, which must be the dispatch's target; or, with unauthenticated
    /// agents allowed, the target of a dispatch that went to a stream without credentials.
    /// Errors are statuses for the caller.
    pub(crate) async fn authenticate_event(
        &self,
        auth: &Auth,
        field: &str,
        claimed: &str,
        dispatch_id: &str,
    ) -> Result<AgentId, Status> {
        let caller = self.authenticate_identity(auth, field, claimed).await?;
        let anonymous = matches!(caller, Caller::Anonymous(_));
        let dispatch_field = field.replace("agent_id", "workflow_id");
        // Only an event that names no agent needs the record to be attributed at all: look
        // twice for it (a replicated bucket may answer from a follower a moment behind).
        let unattributed = matches!(caller, Caller::Anonymous(None));
        let target = self
            .targets
            .lookup(dispatch_id, unattributed)
            .await
            .inspect_err(|_| self.metrics.error("dispatch_target"))?;
        let agent = match (caller, target) {
            (Caller::Agent(agent), Some(target)) if target.agent_id != agent.as_str() => {
                self.metrics.error("not_dispatch_target");
                return Err(Status::permission_denied(format!(
                    "{dispatch_field}: workflow {dispatch_id} was dispatched to agent {}, not {agent}",
                    target.agent_id
                )));
            }
            // No target recorded (a dispatch forwarded before targets were recorded, or one
            // aged out): the controller still applies events only from the assigned agent.
            (Caller::Agent(agent), _) => agent,
            (Caller::Anonymous(claimed), Some(target)) if !target.authenticated => {
                let agent = claimed_agent("dispatch target", &target.agent_id)?;
                if claimed.as_ref().is_some_and(|c| *c != agent) {
                    self.metrics.error("not_dispatch_target");
                    return Err(Status::permission_denied(format!(
                        "{dispatch_field}: workflow {dispatch_id} was dispatched to agent {agent}, not {}",
                        claimed.map(|c| c.into_string()).unwrap_or_default()
                    )));
                }
                agent
            }
            (Caller::Anonymous(_), Some(target)) => {
                self.metrics.error("unauthenticated_event");
                return Err(Status::permission_denied(format!(
                    "{dispatch_field}: workflow {dispatch_id} went to agent {}'s authenticated stream: present its session token in `{TOKEN_HEADER}` or its client certificate",
                    target.agent_id
                )));
            }
            // No target recorded: an event that names its agent is taken as before (the
            // controller applies it only from the Workflow's assigned agent); one that names
            // none cannot be attributed.
            (Caller::Anonymous(Some(claimed)), None) => claimed,
            (Caller::Anonymous(None), None) => {
                self.metrics.error("unauthenticated_event");
                return Err(Status::permission_denied(format!(
                    "{dispatch_field}: no StartWorkflow of workflow {dispatch_id} went to a stream without credentials, and {field} is empty: present the agent's session token in `{TOKEN_HEADER}` or a client certificate"
                )));
            }
        };
        let token = tink_bus::agent_token(agent.as_str())
            .map_err(|e| Status::invalid_argument(format!("{field}: {e}")))?;
        self.check_admitted(&agent, &token)?;
        // The agent proved its identity with its session token or certificate: its boot secret
        // was needed only to create the session. Without credentials (unauthenticated agents
        // allowed), a machine with a boot secret is never spoken for.
        if anonymous && self.secrets.entry(&token)?.is_some() {
            self.metrics.error("agent_secret_refused");
            return Err(Status::permission_denied(format!(
                "agent {agent} has a boot secret: its events need its session token in `{TOKEN_HEADER}` (or its client certificate)"
            )));
        }
        if let Some(limiter) = &self.agent_calls
            && limiter.check_key(&token).is_err()
        {
            self.metrics.error("agent_rate_limited");
            return Err(Status::resource_exhausted(format!(
                "agent {agent} sends more than {} events and log batches per second; retry after a pause",
                self.limits.agent_calls_per_second
            )));
        }
        Ok(agent)
    }

    /// Refuses an agent id that no Hardware names (the admitted agents bucket the controller
    /// fills), unless unknown agents are admitted.
    pub(crate) fn check_admitted(&self, agent: &AgentId, token: &str) -> Result<(), Status> {
        if self.limits.admit_unknown {
            return Ok(());
        }
        if !self.admitted.is_loaded() {
            return Err(Status::unavailable(
                "this server replica has not loaded the admitted agents yet; retry",
            ));
        }
        if self.admitted.contains(token) {
            return Ok(());
        }
        self.metrics.error("agent_not_admitted");
        if self.limits.enrollment {
            let mut metadata = MetadataMap::new();
            metadata.insert(
                ENROLLMENT_TRAILER,
                tonic::metadata::MetadataValue::from_static("open"),
            );
            return Err(Status::with_metadata(
                Code::PermissionDenied,
                format!(
                    "agent {agent} is not admitted: no Hardware names it in spec.networkInterfaces; enrollment is open: report the inventory (ReportInventory, no credentials) and a discovered Hardware is made for this machine, which may connect then and gets work once approved"
                ),
                metadata,
            ));
        }
        Err(Status::permission_denied(format!(
            "agent {agent} is not admitted: no Hardware names it in spec.networkInterfaces (a new Hardware is admitted within seconds, once the controller has published it)"
        )))
    }

    pub(crate) async fn authenticate_identity(
        &self,
        auth: &Auth,
        field: &str,
        claimed: &str,
    ) -> Result<Caller, Status> {
        let claimed = if claimed.is_empty() {
            None
        } else {
            Some(claimed_agent(field, claimed).inspect_err(|_| {
                self.metrics.error("invalid_agent_id");
            })?)
        };
        if let Some(agent) = &auth.certificate {
            if let Some(claimed) = &claimed
                && claimed != agent
            {
                self.metrics.error("forged_event");
                return Err(Status::permission_denied(format!(
                    "{field}: the client certificate names agent {agent}, not {claimed}"
                )));
            }
            return Ok(Caller::Agent(agent.clone()));
        }
        let Some(presented) = &auth.token else {
            if self.allow_unauthenticated {
                return Ok(Caller::Anonymous(claimed));
            }
            self.metrics.error("unauthenticated_event");
            return Err(Status::unauthenticated(format!(
                "present the agent's session token in `{TOKEN_HEADER}` (issued on its GetWorkflows stream) or a client certificate"
            )));
        };
        let Some(claimed) = claimed else {
            self.metrics.error("invalid_event");
            return Err(Status::invalid_argument(format!(
                "{field}: must be set (the agent id of its GetWorkflows stream)"
            )));
        };
        let token = tink_bus::agent_token(claimed.as_str())
            .map_err(|e| Status::invalid_argument(format!("{field}: {e}")))?;
        let presented = token_hash(presented);
        let expected = match self.local_token_hash(&token) {
            Some(hash) => Some(hash),
            None => self.remote_token_hash(&token, &presented).await?,
        };
        match expected {
            Some(hash) if same_hash(&hash, &presented) => Ok(Caller::Agent(claimed)),
            _ => {
                self.metrics.error("forged_event");
                Err(Status::permission_denied(format!(
                    "{field}: the session token is not agent {claimed}'s (its session may have ended: open a GetWorkflows stream for a new one)"
                )))
            }
        }
    }

    /// The token hash of a session held by another replica, from presence (cached briefly; a
    /// cached hash that does not match is read again).
    async fn remote_token_hash(
        &self,
        token: &str,
        presented: &str,
    ) -> Result<Option<String>, Status> {
        {
            let cache = self.token_cache.0.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((hash, at)) = cache.get(token)
                && at.elapsed() < TOKEN_CACHE_TTL
                && same_hash(hash, presented)
            {
                return Ok(Some(hash.clone()));
            }
        }
        let hash = self
            .live_presence(token)
            .await?
            .map(|p| p.token_sha256)
            .filter(|h| !h.is_empty());
        if let Some(hash) = &hash {
            let mut cache = self.token_cache.0.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= TOKEN_CACHE_MAX {
                cache.clear();
            }
            cache.insert(token.to_string(), (hash.clone(), Instant::now()));
        }
        Ok(hash)
    }

    /// Decides whether a new `GetWorkflows` stream for `agent` (canonical, with bus token
    /// `token`) may open: the certificate's agent, or the live session's token; a new session
    /// (and token) only when none is alive, and, for a machine with a boot secret, only with
    /// that secret (whose exchange the caller records before answering). `live` is the agent's
    /// live presence entry.
    pub(crate) fn authorize_stream(
        &self,
        agent: &AgentId,
        token: &str,
        auth: &Auth,
        live: Option<&Presence>,
    ) -> Result<StreamGrant, Status> {
        if let Some(named) = &auth.certificate
            && named != agent
        {
            self.metrics.error("impostor_stream");
            return Err(Status::permission_denied(format!(
                "agent_id: the client certificate names agent {named}, not {agent}"
            )));
        }
        self.check_admitted(agent, token)?;
        let presents_live_token = |p: &Presence| {
            auth.token
                .as_deref()
                .is_some_and(|t| same_hash(&token_hash(t), &p.token_sha256))
        };
        let authorized = auth.certificate.is_some()
            || match live {
                Some(p) if p.certificate => false,
                Some(p) if !p.token_sha256.is_empty() => presents_live_token(p),
                // No live session: trust on first use.
                _ => true,
            };
        if !authorized {
            if !self.allow_unauthenticated {
                self.metrics.error("impostor_stream");
                warn!(agent_id = %agent, "refusing a stream without the live session's credentials");
                return Err(Status::permission_denied(format!(
                    "agent {agent} has a live session on server replica {}: present its token in `{TOKEN_HEADER}` (or its client certificate); an operator resets a re-installed machine with `tinkctl agent reset {agent}`",
                    live.map(|p| p.server.as_str()).unwrap_or_default(),
                )));
            }
            warn!(agent_id = %agent, "admitting a stream without credentials over a live session (--allow-unauthenticated-agents)");
        }
        if auth.certificate.is_some() {
            return Ok(StreamGrant {
                token_sha256: String::new(),
                issued: None,
                exchange: None,
            });
        }
        if let Some(p) = live
            && authorized
            && presents_live_token(p)
        {
            return Ok(StreamGrant {
                token_sha256: p.token_sha256.clone(),
                issued: None,
                exchange: None,
            });
        }
        // A new session. A machine with a boot secret: not without it, not even the first.
        let exchange = self
            .secrets
            .check(token, agent.as_str(), auth.secret.as_deref())
            .inspect_err(|_| {
                self.metrics.error("agent_secret_refused");
                warn!(agent_id = %agent, "refusing a new session without the machine's boot secret");
            })?;
        let issued =
            new_token().map_err(|_| Status::internal("cannot generate a session token"))?;
        Ok(StreamGrant {
            token_sha256: token_hash(&issued),
            issued: Some(issued),
            exchange,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_agents() {
        for spelled in [
            "aa:bb:cc:dd:ee:ff",
            "AA:BB:CC:DD:EE:FF",
            "aa-bb-cc-dd-ee-ff",
        ] {
            assert_eq!(
                agent_of_uri(&format!("spiffe://tinkerbell/agent/{spelled}"))
                    .map(AgentId::into_string)
                    .as_deref(),
                Some("aa:bb:cc:dd:ee:ff")
            );
        }
        assert_eq!(agent_of_uri("spiffe://x/agent/a b"), None);
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
    }
}
