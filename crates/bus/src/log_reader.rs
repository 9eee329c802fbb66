//! Reading one workflow's action output back from the logs stream: what the server's
//! `LogService` and `tinkctl workflow logs --nats-url` (administrator mode) share.
//!
//! [`LogSelection`] turns a Workflow's dispatch id and actions into the subject filter and the
//! action names; [`read_logs`] replays the stored lines in order with an ephemeral ordered
//! consumer, then (following) new ones until the caller says the workflow ended and no line
//! came for a moment. Lines a resent batch stored twice are emitted once.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use futures::StreamExt as _;
use tink_proto::workflow::v2::LogLine;

use crate::logs::{LogDeduplicator, decode_log_batch, logs_subject, logs_workflow_filter};
use crate::streams::LOGS_STREAM;
use crate::token::TokenError;

/// gRPC response metadata of `LogService.ReadLogs` when the Workflow has not been dispatched to
/// an agent yet (so it has no output); the stream is then empty.
pub const NOT_DISPATCHED_HEADER: &str = "x-tink-logs-not-dispatched";

/// How long a follower waits for lines in flight once the workflow ended.
const QUIET: Duration = Duration::from_secs(2);

/// The lines to read: one dispatch of a workflow, all its actions or one.
#[derive(Debug, Clone)]
pub struct LogSelection {
    workflow_id: String,
    names: HashMap<String, String>,
    filter: String,
}

/// Why a selection cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum SelectionError {
    /// The wanted action is neither an action name nor an id of the workflow.
    #[error("action {wanted:?}: the workflow has no such action (it has {known})")]
    NoSuchAction {
        /// What was asked for.
        wanted: String,
        /// The workflow's action names, comma separated.
        known: String,
    },
    /// The dispatch or action id cannot be a subject token.
    #[error(transparent)]
    Token(#[from] TokenError),
}

impl LogSelection {
    /// The lines of dispatch `workflow_id` (the protocol's workflow id, the Workflow status's
    /// `dispatchId`) whose actions are `(id, name)`; only action `wanted` (a name or an id)
    /// when given.
    pub fn new(
        workflow_id: &str,
        actions: impl IntoIterator<Item = (String, String)>,
        wanted: Option<&str>,
    ) -> Result<Self, SelectionError> {
        let actions: Vec<(String, String)> = actions.into_iter().collect();
        let filter = match wanted.filter(|w| !w.is_empty()) {
            Some(wanted) => {
                let (id, _) = actions
                    .iter()
                    .find(|(id, name)| name == wanted || id == wanted)
                    .ok_or_else(|| SelectionError::NoSuchAction {
                        wanted: wanted.to_string(),
                        known: actions
                            .iter()
                            .map(|(_, n)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
                logs_subject(workflow_id, id)?
            }
            None => logs_workflow_filter(workflow_id)?,
        };
        Ok(LogSelection {
            workflow_id: workflow_id.to_string(),
            names: actions.into_iter().collect(),
            filter,
        })
    }

    /// The subject filter (`tink.logs.<workflow token>.<action token or *>`).
    pub fn filter(&self) -> &str {
        &self.filter
    }

    /// The name of an action, its id when the workflow does not name it.
    pub fn action_name<'a>(&'a self, action_id: &'a str) -> &'a str {
        self.names.get(action_id).map_or(action_id, String::as_str)
    }
}

/// One line read back, with its action.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadLine {
    /// The action's id.
    pub action_id: String,
    /// The action's name (its id when unknown).
    pub action_name: String,
    /// The line.
    pub line: LogLine,
}

/// How to read.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions {
    /// Only lines stored within this long before now.
    pub since: Option<Duration>,
    /// After the stored lines, wait for new ones until the workflow ended.
    pub follow: bool,
}

/// What a read did besides emitting lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadSummary {
    /// Lines emitted.
    pub lines: u64,
    /// Stored batches that did not decode (skipped).
    pub malformed: u64,
    /// The receiver stopped taking lines (a client that left).
    pub abandoned: bool,
}

/// Reading the logs stream failed.
#[derive(Debug, thiserror::Error)]
pub enum LogReadError {
    /// The stream does not exist or NATS cannot be reached.
    #[error("cannot open the {LOGS_STREAM} stream: {0}")]
    Stream(String),
    /// The consumer failed.
    #[error("cannot read the {LOGS_STREAM} stream: {0}")]
    Read(String),
}

/// Reads the selected lines in order and hands each to `emit` (false from `emit` stops the
/// read: the receiver left). Without `follow` it returns once caught up; with it, it keeps
/// going until `ended` says the workflow ended and no line came for two seconds.
pub async fn read_logs<F, Fut, E, EFut>(
    js: &async_nats::jetstream::Context,
    selection: &LogSelection,
    options: ReadOptions,
    ended: F,
    mut emit: E,
) -> Result<ReadSummary, LogReadError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
    E: FnMut(ReadLine) -> EFut,
    EFut: Future<Output = bool>,
{
    let deliver_policy = match options.since {
        Some(since) => DeliverPolicy::ByStartTime {
            start_time: SystemTime::now()
                .checked_sub(since)
                .unwrap_or(SystemTime::UNIX_EPOCH)
                .into(),
        },
        None => DeliverPolicy::All,
    };
    let stream = js
        .get_stream(LOGS_STREAM)
        .await
        .map_err(|e| LogReadError::Stream(e.to_string()))?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: selection.filter.clone(),
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(|e| LogReadError::Read(e.to_string()))?;
    let mut pending = consumer.cached_info().num_pending;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| LogReadError::Read(e.to_string()))?;
    let mut seen = LogDeduplicator::default();
    let mut summary = ReadSummary::default();
    loop {
        let next = if pending > 0 {
            messages.next().await
        } else if !options.follow {
            break;
        } else if ended().await {
            // Caught up and the workflow ended: a last moment for lines in flight.
            match tokio::time::timeout(QUIET, messages.next()).await {
                Err(_) => break,
                Ok(next) => next,
            }
        } else {
            match tokio::time::timeout(QUIET, messages.next()).await {
                Ok(next) => next,
                Err(_) => continue,
            }
        };
        let Some(message) = next else { break };
        let message = message.map_err(|e| LogReadError::Read(e.to_string()))?;
        pending = message.info().map_or(0, |i| i.pending);
        let batch = match decode_log_batch(&message.payload) {
            Ok(batch) => batch,
            Err(_) => {
                summary.malformed += 1;
                continue;
            }
        };
        if batch.workflow_id != selection.workflow_id {
            continue;
        }
        let name = selection.action_name(&batch.action_id).to_string();
        for line in batch.lines {
            if !seen.is_new(&batch.workflow_id, &batch.action_id, line.sequence) {
                continue;
            }
            let read = ReadLine {
                action_id: batch.action_id.clone(),
                action_name: name.clone(),
                line,
            };
            if !emit(read).await {
                summary.abandoned = true;
                return Ok(summary);
            }
            summary.lines += 1;
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions() -> Vec<(String, String)> {
        vec![
            ("0-wipe".into(), "wipe".into()),
            ("1-image".into(), "image".into()),
        ]
    }

    #[test]
    fn selections_filter_by_action_name_or_id() {
        let all = LogSelection::new("ns/wf/uid/1", actions(), None).unwrap();
        assert_eq!(all.filter(), "tink.logs.ns_2fwf_2fuid_2f1.*");
        assert_eq!(all.action_name("1-image"), "image");
        assert_eq!(all.action_name("9-gone"), "9-gone");
        let by_name = LogSelection::new("ns/wf/uid/1", actions(), Some("image")).unwrap();
        let by_id = LogSelection::new("ns/wf/uid/1", actions(), Some("1-image")).unwrap();
        assert_eq!(by_name.filter(), "tink.logs.ns_2fwf_2fuid_2f1.1-image");
        assert_eq!(by_name.filter(), by_id.filter());
        let empty = LogSelection::new("ns/wf/uid/1", actions(), Some("")).unwrap();
        assert_eq!(empty.filter(), all.filter());
        let e = LogSelection::new("ns/wf/uid/1", actions(), Some("boot")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "action \"boot\": the workflow has no such action (it has wipe, image)"
        );
    }
}
