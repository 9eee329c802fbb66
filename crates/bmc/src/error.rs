//! One error type for every provider: which provider, host and operation, and what happened.

use std::time::Duration;

/// A provider call that failed.
#[derive(Debug, thiserror::Error)]
#[error("{provider} {host}: {op}: {kind}")]
pub struct Error {
    /// `redfish`, `ipmitool` or `rpc`.
    pub provider: &'static str,
    /// The BMC's host (or the RPC consumer's URL), as configured: never with credentials.
    pub host: String,
    /// The operation (`power state`, `power on`, `boot once pxe`, ...).
    pub op: String,
    /// What happened.
    pub kind: ErrorKind,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    /// No connection could be made (refused, no route, name not resolved): the request never
    /// reached the BMC.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The host resolves only to addresses outside the allowed networks
    /// ([`crate::Policy::allowed_networks`]): nothing was sent. Not transient.
    #[error("not allowed: {0}")]
    NotAllowed(String),
    /// The BMC did not answer in time (including one that accepted the connection and then
    /// said nothing).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// TLS failed (certificate not trusted, handshake refused).
    #[error("TLS: {0}")]
    Tls(String),
    /// The BMC refused the credentials.
    #[error("credentials refused: {0}")]
    Unauthorized(String),
    /// The BMC answered with an error status.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The BMC's message, shortened.
        message: String,
    },
    /// The BMC answered something this provider cannot read.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// The BMC accepted a boot override and then reported another one.
    #[error("the BMC accepted the boot override to {wanted} but reports {reported} when read back")]
    BootOverrideDropped {
        /// The override sent.
        wanted: String,
        /// What the BMC reports after.
        reported: String,
    },
    /// The provider or this BMC does not offer the operation.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The configuration cannot be used (bad host, missing credentials, unknown option).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A local failure (ipmitool missing, a process that could not start).
    #[error("{0}")]
    Local(String),
}

impl ErrorKind {
    /// Whether trying again may help: connection failures, timeouts, 5xx and 429 answers.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Connect(_) | Self::Timeout(_) => true,
            Self::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// Whether the request provably never reached the BMC (so even a non-idempotent action
    /// may be sent again).
    pub fn never_sent(&self) -> bool {
        matches!(self, Self::Connect(_))
    }
}

/// At most `max` characters of `s` (BMC messages can be whole HTML pages).
pub(crate) fn shorten(s: &str, max: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
