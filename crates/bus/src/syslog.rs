//! Machines' boot logs received by syslog: the stream, its subjects, the stored line and the
//! reader that `tinkctl hardware logs` and the console share.
//!
//! tink-netboot's syslog receiver attributes each datagram to a Hardware by its source address
//! and publishes each accepted line on `tink.syslog.<hardware token>` (the token of
//! `namespace/name`, [`crate::encode_token`]) in stream [`SYSLOG_STREAM`]. The stream is the
//! per-machine ring: at most [`SyslogLimits::lines_per_machine`] lines per subject (the oldest
//! dropped first), each at most [`SyslogLimits::max_line_bytes`] of text, so one machine holds at
//! most about `lines_per_machine x (max_line_bytes + 200)` bytes; the whole stream at most
//! [`SyslogLimits::max_bytes`] and [`SyslogLimits::max_age`].
//!
//! Unlike every other stream, this one is created and updated by its only writer, tink-netboot
//! (its NATS user may create and update `TINK_SYSLOG` and nothing else): the bounds are
//! netboot's flags, and the controller, the servers and their NATS users do not change for it.
//! Readers (the console's user, `tink-admin`) only read it.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::DeliverPolicy, consumer::pull::OrderedConfig, stream};
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};

use crate::error::BusError;
use crate::token::{TokenError, encode_token};

/// The stream of machines' syslog lines (`tink.syslog.*`).
pub const SYSLOG_STREAM: &str = "TINK_SYSLOG";
/// Prefix of the per-Hardware syslog subjects.
pub const SYSLOG_PREFIX: &str = "tink.syslog";
/// Every syslog subject (the stream's subject).
pub const SYSLOG_ALL: &str = "tink.syslog.*";
/// The longest Hardware id (`namespace/name`: 63 + 1 + 253 bytes) a subject is made for.
pub const MAX_HARDWARE_ID_LEN: usize = 317;

/// `tink.syslog.<token of namespace/name>`.
pub fn syslog_subject(namespace: &str, name: &str) -> Result<String, TokenError> {
    let id = format!("{namespace}/{name}");
    if namespace.is_empty() || name.is_empty() {
        return Err(TokenError::Empty {
            what: "Hardware namespace/name",
        });
    }
    if id.len() > MAX_HARDWARE_ID_LEN {
        return Err(TokenError::TooLong {
            what: "Hardware namespace/name",
            len: id.len(),
            max: MAX_HARDWARE_ID_LEN,
        });
    }
    Ok(format!("{SYSLOG_PREFIX}.{}", encode_token(&id)))
}

/// The bounds of [`SYSLOG_STREAM`] (tink-netboot's `--syslog-*` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyslogLimits {
    /// Lines kept per machine (the stream's per-subject limit); the oldest go first.
    pub lines_per_machine: i64,
    /// The longest message text stored, in bytes; longer ones are cut (and marked).
    pub max_line_bytes: usize,
    /// The whole stream's size.
    pub max_bytes: i64,
    /// How long a line is kept.
    pub max_age: Duration,
    /// Stream replicas (3 on deploy/'s NATS cluster).
    pub replicas: usize,
}

impl Default for SyslogLimits {
    fn default() -> Self {
        Self {
            lines_per_machine: 1000,
            max_line_bytes: 1024,
            max_bytes: 256 * 1024 * 1024,
            max_age: Duration::from_secs(7 * 24 * 3600),
            replicas: 1,
        }
    }
}

/// The stream: limits retention, one subject per Hardware holding at most
/// `lines_per_machine` lines, oldest dropped first; a message larger than a line can be refused.
pub fn syslog_stream_config(limits: &SyslogLimits) -> stream::Config {
    stream::Config {
        name: SYSLOG_STREAM.to_string(),
        description: Some(
            "tinkerbell machines' boot logs received by syslog, one subject per Hardware"
                .to_string(),
        ),
        subjects: vec![SYSLOG_ALL.to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_messages_per_subject: limits.lines_per_machine.max(1),
        max_bytes: limits.max_bytes,
        max_age: limits.max_age,
        // The text, escaped as JSON (at most 6 bytes per byte), plus the other fields.
        max_message_size: i32::try_from(limits.max_line_bytes.saturating_mul(6) + 2048)
            .unwrap_or(i32::MAX),
        discard: stream::DiscardPolicy::Old,
        num_replicas: limits.replicas.max(1),
        ..Default::default()
    }
}

/// Creates [`SYSLOG_STREAM`] or updates it to `limits` (tink-netboot at start-up).
pub async fn ensure_syslog_stream(
    js: &jetstream::Context,
    limits: &SyslogLimits,
) -> Result<stream::Stream, BusError> {
    js.create_or_update_stream(syslog_stream_config(limits))
        .await
        .map_err(|source| BusError::Stream {
            stream: SYSLOG_STREAM,
            source,
        })?;
    js.get_stream(SYSLOG_STREAM)
        .await
        .map_err(|source| BusError::GetStream {
            stream: SYSLOG_STREAM,
            source,
        })
}

/// Syslog severities (RFC 5424 6.2.1), by number.
pub const SEVERITY_NAMES: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
];

/// Syslog facilities (RFC 5424 6.2.1), by number.
pub const FACILITY_NAMES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "ntp", "audit", "alert", "clock", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

/// One stored line (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyslogLine {
    /// When the receiver got it (machines' clocks are often wrong while they boot).
    pub received: jiff::Timestamp,
    /// The sender's own timestamp as it wrote it, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// The address it came from.
    pub source: String,
    /// 0-23 (RFC 5424).
    pub facility: u8,
    /// 0 (emerg) to 7 (debug).
    pub severity: u8,
    /// The sender's host name, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The program (RFC 3164 tag, RFC 5424 APP-NAME), when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Its process id, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub procid: Option<String>,
    /// The text (control characters replaced, cut at the receiver's limit).
    pub message: String,
}

impl SyslogLine {
    /// The JSON bytes published.
    pub fn to_bytes(&self) -> bytes::Bytes {
        // A struct of strings and numbers always serialises.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// A stored line, or why not.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The severity's name (`info`, `err`, ...).
    pub fn severity_name(&self) -> &'static str {
        SEVERITY_NAMES
            .get(usize::from(self.severity))
            .copied()
            .unwrap_or("?")
    }

    /// The facility's name (`kern`, `user`, ...).
    pub fn facility_name(&self) -> &'static str {
        FACILITY_NAMES
            .get(usize::from(self.facility))
            .copied()
            .unwrap_or("?")
    }

    /// `TIMESTAMP SEVERITY APP: MESSAGE`, as `tinkctl hardware logs` prints it (the receiver's
    /// time, UTC, to the second).
    pub fn display_line(&self) -> String {
        let app = self.app.as_deref().unwrap_or("-");
        format!(
            "{} {:<7} {app}: {}",
            self.received.strftime("%Y-%m-%dT%H:%M:%SZ"),
            self.severity_name(),
            self.message
        )
    }
}

/// How [`read_syslog`] reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyslogRead {
    /// Only the last this many lines stored (all when `None`).
    pub last: Option<usize>,
    /// After the stored lines, keep delivering new ones until `emit` returns `false`.
    pub follow: bool,
}

/// What a read found besides the lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyslogSummary {
    /// Lines delivered.
    pub lines: u64,
    /// Stored messages that were not a line (skipped).
    pub malformed: u64,
}

/// Reads the lines of Hardware `namespace/name`, oldest first: the stored ones (the last
/// `read.last`), then with `read.follow` every new one, each handed to `emit` (which returns
/// `false` to stop). Without `follow` it returns once the stored lines are delivered.
pub async fn read_syslog<E, EFut>(
    js: &jetstream::Context,
    namespace: &str,
    name: &str,
    read: SyslogRead,
    mut emit: E,
) -> Result<SyslogSummary, SyslogReadError>
where
    E: FnMut(SyslogLine) -> EFut,
    EFut: Future<Output = bool>,
{
    let subject = syslog_subject(namespace, name)?;
    let stream = js.get_stream(SYSLOG_STREAM).await.map_err(|e| {
        if let jetstream::context::GetStreamErrorKind::JetStream(j) = e.kind()
            && j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
        {
            return SyslogReadError::NoStream;
        }
        SyslogReadError::Read(e.to_string())
    })?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: subject,
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| SyslogReadError::Read(e.to_string()))?;
    let mut pending = consumer.cached_info().num_pending;
    // The lines before the last `last` stored are read and skipped (at most the per-machine
    // limit of them).
    let mut skip = match read.last {
        Some(n) => pending.saturating_sub(u64::try_from(n).unwrap_or(u64::MAX)),
        None => 0,
    };
    let mut summary = SyslogSummary::default();
    if pending == 0 && !read.follow {
        return Ok(summary);
    }
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| SyslogReadError::Read(e.to_string()))?;
    loop {
        if pending == 0 && !read.follow {
            break;
        }
        let Some(message) = messages.next().await else {
            break;
        };
        let message = message.map_err(|e| SyslogReadError::Read(e.to_string()))?;
        pending = message.info().map_or(0, |i| i.pending);
        if skip > 0 {
            skip -= 1;
            continue;
        }
        match SyslogLine::from_bytes(&message.payload) {
            Ok(line) => {
                summary.lines += 1;
                if !emit(line).await {
                    break;
                }
            }
            Err(_) => summary.malformed += 1,
        }
    }
    Ok(summary)
}

/// Why [`read_syslog`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SyslogReadError {
    /// The Hardware's namespace or name cannot make a subject.
    #[error("{0}")]
    Subject(#[from] TokenError),
    /// No syslog stream: no tink-netboot with a syslog receiver has run on this NATS.
    #[error(
        "the JetStream stream {SYSLOG_STREAM} does not exist: tink-netboot creates it when it starts with --syslog-addr"
    )]
    NoStream,
    /// Reading failed.
    #[error("reading {SYSLOG_STREAM}: {0}")]
    Read(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_name_the_hardware() {
        assert_eq!(
            syslog_subject("default", "m-1.rack2").unwrap(),
            "tink.syslog.default_2fm-1_2erack2"
        );
        assert!(syslog_subject("", "x").is_err());
        assert!(syslog_subject("ns", "").is_err());
        assert!(syslog_subject("ns", &"a".repeat(400)).is_err());
    }

    #[test]
    fn lines_round_trip_and_display() {
        let line = SyslogLine {
            received: "2026-11-27T13:00:00.5Z".parse().unwrap(),
            timestamp: Some("Nov 27 13:00:00".into()),
            source: "10.0.0.5".into(),
            facility: 0,
            severity: 3,
            hostname: None,
            app: Some("kernel".into()),
            procid: None,
            message: "e1000: link down".into(),
        };
        let back = SyslogLine::from_bytes(&line.to_bytes()).unwrap();
        assert_eq!(back, line);
        assert_eq!(
            back.display_line(),
            "2026-11-27T13:00:00Z err     kernel: e1000: link down"
        );
        assert_eq!(back.facility_name(), "kern");
        let odd = SyslogLine {
            severity: 9,
            facility: 99,
            app: None,
            ..line
        };
        assert_eq!(odd.severity_name(), "?");
        assert_eq!(odd.facility_name(), "?");
        assert!(odd.display_line().contains(" -: "));
    }

    #[test]
    fn the_stream_bounds_each_machine() {
        let c = syslog_stream_config(&SyslogLimits::default());
        assert_eq!(c.max_messages_per_subject, 1000);
        assert_eq!(c.subjects, vec![SYSLOG_ALL.to_string()]);
        assert_eq!(c.discard, stream::DiscardPolicy::Old);
        assert!(c.max_message_size >= 1024);
    }
}
