//! Action output on the bus: its subjects and the batch codec (the stream's configuration is
//! in `streams`, publishing a batch in `publish`).
//!
//! | what | name | content |
//! |---|---|---|
//! | logs subject | `tink.logs.<workflow token>.<action token>` | a `LogBatch` (protobuf): consecutive lines of one action |
//! | logs stream | [`crate::LOGS_STREAM`] | limits retention with its own bytes and age limits ([`crate::BusConfig::logs_max_bytes`], [`crate::BusConfig::logs_max_age`]) |
//!
//! A batch is stored with `Nats-Msg-Id` `log.<workflow token>.<action token>.<first>-<last>`
//! (its first and last sequence numbers), so a batch the agent sends again after a server
//! failure is dropped by JetStream within the duplicate window; readers also skip any line
//! whose sequence they have already shown (see [`LogDeduplicator`]).

use bytes::Bytes;
use prost::Message as _;

use crate::error::{CodecError, InvalidMessage};
use crate::token::{TokenError, encode_token, workflow_token};
use tink_proto::workflow::v2::LogBatch;

/// Prefix of the log subjects.
pub const LOGS_PREFIX: &str = "tink.logs";
/// All log subjects (the logs stream's subject).
pub const LOGS_ALL: &str = "tink.logs.*.*";
/// The longest action id accepted in a log batch, in bytes.
pub const MAX_ACTION_ID_LEN: usize = 256;
/// The most lines in one batch.
pub const MAX_BATCH_LINES: usize = 4096;
/// The most text bytes in one batch (its lines together); below NATS's default 1 MiB payload.
pub const MAX_BATCH_BYTES: usize = 512 * 1024;
/// The longest line, in bytes (the agent cuts lines at 16 KiB, plus its marker).
pub const MAX_LINE_BYTES: usize = 17 * 1024;

/// The token of an action id, refusing empty and over-long ids.
pub fn action_token(action_id: &str) -> Result<String, TokenError> {
    if action_id.is_empty() {
        return Err(TokenError::Empty { what: "action id" });
    }
    if action_id.len() > MAX_ACTION_ID_LEN {
        return Err(TokenError::TooLong {
            what: "action id",
            len: action_id.len(),
            max: MAX_ACTION_ID_LEN,
        });
    }
    Ok(encode_token(action_id))
}

/// `tink.logs.<workflow token>.<action token>`.
pub fn logs_subject(workflow_id: &str, action_id: &str) -> Result<String, TokenError> {
    Ok(format!(
        "{LOGS_PREFIX}.{}.{}",
        workflow_token(workflow_id)?,
        action_token(action_id)?
    ))
}

/// `tink.logs.<workflow token>.*`: every action of one workflow (dispatch).
pub fn logs_workflow_filter(workflow_id: &str) -> Result<String, TokenError> {
    Ok(format!("{LOGS_PREFIX}.{}.*", workflow_token(workflow_id)?))
}

/// The workflow and action ids of a log subject, `None` when it is not one.
pub fn ids_from_logs_subject(subject: &str) -> Option<(String, String)> {
    let rest = subject.strip_prefix(LOGS_PREFIX)?.strip_prefix('.')?;
    let (workflow, action) = rest.split_once('.')?;
    if workflow.is_empty() || action.is_empty() || action.contains('.') {
        return None;
    }
    Some((
        crate::token::decode_token(workflow).ok()?,
        crate::token::decode_token(action).ok()?,
    ))
}

fn invalid(field: &str, problem: impl Into<String>) -> InvalidMessage {
    InvalidMessage {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// Checks a batch: ids usable on the bus, 1 to [`MAX_BATCH_LINES`] lines with strictly
/// increasing sequence numbers from 1, at most [`MAX_LINE_BYTES`] each and
/// [`MAX_BATCH_BYTES`] in all.
pub fn validate_log_batch(batch: &LogBatch) -> Result<(), InvalidMessage> {
    workflow_token(&batch.workflow_id).map_err(|e| invalid("batch.workflow_id", e.to_string()))?;
    action_token(&batch.action_id).map_err(|e| invalid("batch.action_id", e.to_string()))?;
    if batch.lines.is_empty() {
        return Err(invalid("batch.lines", "empty"));
    }
    if batch.lines.len() > MAX_BATCH_LINES {
        return Err(invalid(
            "batch.lines",
            format!(
                "{} lines, more than the {MAX_BATCH_LINES} allowed",
                batch.lines.len()
            ),
        ));
    }
    let mut total = 0usize;
    let mut previous = 0u64;
    for (i, line) in batch.lines.iter().enumerate() {
        if line.sequence <= previous {
            return Err(invalid(
                &format!("batch.lines[{i}].sequence"),
                format!(
                    "{} does not follow {previous} (sequences start at 1 and increase)",
                    line.sequence
                ),
            ));
        }
        previous = line.sequence;
        if line.text.len() > MAX_LINE_BYTES {
            return Err(invalid(
                &format!("batch.lines[{i}].text"),
                format!(
                    "{} bytes, more than the {MAX_LINE_BYTES} allowed",
                    line.text.len()
                ),
            ));
        }
        total += line.text.len();
    }
    if total > MAX_BATCH_BYTES {
        return Err(invalid(
            "batch.lines",
            format!("{total} bytes of text, more than the {MAX_BATCH_BYTES} allowed"),
        ));
    }
    Ok(())
}

/// The `Nats-Msg-Id` of a batch: `log.<workflow token>.<action token>.<first>-<last>`.
/// Call on a validated batch.
pub fn log_batch_msg_id(batch: &LogBatch) -> String {
    let first = batch.lines.first().map_or(0, |l| l.sequence);
    let last = batch.lines.last().map_or(0, |l| l.sequence);
    format!(
        "log.{}.{}.{first}-{last}",
        encode_token(&batch.workflow_id),
        encode_token(&batch.action_id)
    )
}

/// Encodes a batch for the logs stream.
pub fn encode_log_batch(batch: &LogBatch) -> Bytes {
    Bytes::from(batch.encode_to_vec())
}

/// Decodes and validates a stored batch.
pub fn decode_log_batch(payload: &[u8]) -> Result<LogBatch, CodecError> {
    let batch = LogBatch::decode(payload)?;
    validate_log_batch(&batch)?;
    Ok(batch)
}

/// Remembers the last sequence shown per action, so a line stored twice (a batch resent after
/// the duplicate window, or re-cut differently) is shown once.
#[derive(Debug, Default)]
pub struct LogDeduplicator {
    last: std::collections::HashMap<(String, String), u64>,
}

impl LogDeduplicator {
    /// Whether line `sequence` of the action is new (and records it).
    pub fn is_new(&mut self, workflow_id: &str, action_id: &str, sequence: u64) -> bool {
        let last = self
            .last
            .entry((workflow_id.to_string(), action_id.to_string()))
            .or_insert(0);
        if sequence > *last {
            *last = sequence;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tink_proto::workflow::v2::LogLine;

    fn batch(seqs: &[u64]) -> LogBatch {
        LogBatch {
            workflow_id: "ns/wf/uid/1".into(),
            action_id: "0-disk".into(),
            lines: seqs
                .iter()
                .map(|s| LogLine {
                    sequence: *s,
                    text: format!("line {s}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn subjects_round_trip() {
        let subject = logs_subject("ns/wf/uid/1", "0-disk.x").unwrap();
        assert_eq!(subject, "tink.logs.ns_2fwf_2fuid_2f1.0-disk_2ex");
        assert_eq!(
            ids_from_logs_subject(&subject),
            Some(("ns/wf/uid/1".into(), "0-disk.x".into()))
        );
        assert_eq!(
            logs_workflow_filter("ns/wf/uid/1").unwrap(),
            "tink.logs.ns_2fwf_2fuid_2f1.*"
        );
        assert!(logs_subject("w", "").is_err());
        assert_eq!(ids_from_logs_subject("tink.events.x"), None);
    }

    #[test]
    fn batches_are_validated_naming_the_field() {
        assert!(validate_log_batch(&batch(&[1, 2, 5])).is_ok());
        let e = validate_log_batch(&batch(&[2, 2])).unwrap_err();
        assert_eq!(e.field, "batch.lines[1].sequence");
        let e = validate_log_batch(&batch(&[0])).unwrap_err();
        assert_eq!(e.field, "batch.lines[0].sequence");
        let e = validate_log_batch(&batch(&[])).unwrap_err();
        assert_eq!(e.field, "batch.lines");
        let mut b = batch(&[1]);
        b.action_id.clear();
        assert_eq!(validate_log_batch(&b).unwrap_err().field, "batch.action_id");
        let mut b = batch(&[1]);
        b.lines[0].text = "x".repeat(MAX_LINE_BYTES + 1);
        assert_eq!(
            validate_log_batch(&b).unwrap_err().field,
            "batch.lines[0].text"
        );
    }

    #[test]
    fn msg_ids_name_the_lines() {
        assert_eq!(
            log_batch_msg_id(&batch(&[3, 4, 9])),
            "log.ns_2fwf_2fuid_2f1.0-disk.3-9"
        );
        let mut d = LogDeduplicator::default();
        assert!(d.is_new("w", "a", 1));
        assert!(d.is_new("w", "a", 2));
        assert!(!d.is_new("w", "a", 2));
        assert!(d.is_new("w", "b", 1));
    }
}
