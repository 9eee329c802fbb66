//! Message codecs (protobuf bytes), validation and de-duplication ids of events and commands
//! (publishing them is `publish`'s).

use std::collections::HashSet;

use bytes::Bytes;
use prost::Message as _;
use tink_proto::workflow::v2::{Event, GetWorkflowsResponse, event, get_workflows_response};

use crate::error::{CodecError, InvalidMessage};
use crate::token::{MAX_AGENT_ID_LEN, workflow_token};

/// The longest action id, event id or failure reason accepted.
const MAX_ID_LEN: usize = 256;
/// The longest failure message accepted (the last lines of an action's output fit).
const MAX_MESSAGE_LEN: usize = 32 * 1024;
/// The most actions in one workflow.
const MAX_ACTIONS: usize = 1000;

/// The kind of an event; its name is the protobuf oneof member in UpperCamelCase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `ActionStarted`
    ActionStarted,
    /// `ActionSucceeded`
    ActionSucceeded,
    /// `ActionFailed`
    ActionFailed,
    /// `WorkflowRejected`
    WorkflowRejected,
    /// `WorkflowCanceled` (extension)
    WorkflowCanceled,
    /// `WorkflowReceived` (extension: a command's delivery receipt)
    WorkflowReceived,
}

impl EventKind {
    /// The UpperCamelCase name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::ActionStarted => "ActionStarted",
            EventKind::ActionSucceeded => "ActionSucceeded",
            EventKind::ActionFailed => "ActionFailed",
            EventKind::WorkflowRejected => "WorkflowRejected",
            EventKind::WorkflowCanceled => "WorkflowCanceled",
            EventKind::WorkflowReceived => "WorkflowReceived",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of an event, `None` when no oneof member is set.
pub fn event_kind(event: &Event) -> Option<EventKind> {
    Some(match event.event.as_ref()? {
        event::Event::ActionStarted(_) => EventKind::ActionStarted,
        event::Event::ActionSucceeded(_) => EventKind::ActionSucceeded,
        event::Event::ActionFailed(_) => EventKind::ActionFailed,
        event::Event::WorkflowRejected(_) => EventKind::WorkflowRejected,
        event::Event::WorkflowCanceled(_) => EventKind::WorkflowCanceled,
        event::Event::WorkflowReceived(_) => EventKind::WorkflowReceived,
    })
}

/// The action an event is about, if any.
fn event_action_id(event: &Event) -> Option<&str> {
    match event.event.as_ref()? {
        event::Event::ActionStarted(e) => Some(&e.action_id),
        event::Event::ActionSucceeded(e) => Some(&e.action_id),
        event::Event::ActionFailed(e) => Some(&e.action_id),
        event::Event::WorkflowRejected(_) => None,
        event::Event::WorkflowCanceled(e) => e.action_id.as_deref(),
        event::Event::WorkflowReceived(_) => None,
    }
}

fn check_id(field: &str, value: &str, max: usize) -> Result<(), InvalidMessage> {
    if value.is_empty() {
        return Err(InvalidMessage::new(field, "must not be empty"));
    }
    check_len(field, value, max)
}

fn check_len(field: &str, value: &str, max: usize) -> Result<(), InvalidMessage> {
    if value.len() > max {
        return Err(InvalidMessage::new(
            field,
            format!("is {} bytes long, more than the {max} allowed", value.len()),
        ));
    }
    if value.chars().any(char::is_control) && field.ends_with("_id") {
        return Err(InvalidMessage::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

fn check_opt(field: &str, value: Option<&String>, max: usize) -> Result<(), InvalidMessage> {
    value.map_or(Ok(()), |v| check_len(field, v, max))
}

fn check_workflow_id(field: &str, workflow_id: &str) -> Result<(), InvalidMessage> {
    workflow_token(workflow_id)
        .map(|_| ())
        .map_err(|e| InvalidMessage::new(field, e.to_string()))?;
    check_len(field, workflow_id, usize::MAX)
}

/// Checks an event against the protocol: a workflow id, a kind, an action id for action events,
/// bounded lengths.
pub fn validate_event(event: &Event) -> Result<(), InvalidMessage> {
    check_workflow_id("event.workflow_id", &event.workflow_id)?;
    check_len("event.event_id", &event.event_id, MAX_ID_LEN)?;
    check_len("event.agent_id", &event.agent_id, MAX_AGENT_ID_LEN)?;
    check_len("event.agent_instance", &event.agent_instance, MAX_ID_LEN)?;
    match &event.event {
        None => return Err(InvalidMessage::new("event.event", "no event kind is set")),
        Some(event::Event::ActionStarted(e)) => {
            check_id("event.action_started.action_id", &e.action_id, MAX_ID_LEN)?;
        }
        Some(event::Event::ActionSucceeded(e)) => {
            check_id("event.action_succeeded.action_id", &e.action_id, MAX_ID_LEN)?;
        }
        Some(event::Event::ActionFailed(e)) => {
            check_id("event.action_failed.action_id", &e.action_id, MAX_ID_LEN)?;
            check_opt(
                "event.action_failed.failure_reason",
                e.failure_reason.as_ref(),
                MAX_ID_LEN,
            )?;
            check_opt(
                "event.action_failed.failure_message",
                e.failure_message.as_ref(),
                MAX_MESSAGE_LEN,
            )?;
        }
        Some(event::Event::WorkflowRejected(e)) => {
            check_opt(
                "event.workflow_rejected.failure_reason",
                e.failure_reason.as_ref(),
                MAX_ID_LEN,
            )?;
            check_len(
                "event.workflow_rejected.failure_message",
                &e.failure_message,
                MAX_MESSAGE_LEN,
            )?;
        }
        Some(event::Event::WorkflowReceived(_)) => {}
        Some(event::Event::WorkflowCanceled(e)) => {
            if let Some(action_id) = &e.action_id {
                check_id("event.workflow_canceled.action_id", action_id, MAX_ID_LEN)?;
            }
            check_opt(
                "event.workflow_canceled.reason",
                e.reason.as_ref(),
                MAX_ID_LEN,
            )?;
            check_opt(
                "event.workflow_canceled.message",
                e.message.as_ref(),
                MAX_MESSAGE_LEN,
            )?;
        }
    }
    Ok(())
}

/// Checks a command against the protocol: a kind; for StartWorkflow a workflow id and at least
/// one action, each with a unique non-empty id and an image; for StopWorkflow a workflow id.
pub fn validate_command(command: &GetWorkflowsResponse) -> Result<(), InvalidMessage> {
    match &command.cmd {
        None => Err(InvalidMessage::new("cmd", "no command is set")),
        Some(get_workflows_response::Cmd::StartWorkflow(start)) => {
            let workflow = start
                .workflow
                .as_ref()
                .ok_or_else(|| InvalidMessage::new("cmd.start_workflow.workflow", "must be set"))?;
            check_workflow_id(
                "cmd.start_workflow.workflow.workflow_id",
                &workflow.workflow_id,
            )?;
            if workflow.actions.is_empty() {
                return Err(InvalidMessage::new(
                    "cmd.start_workflow.workflow.actions",
                    "must hold at least one action",
                ));
            }
            if workflow.actions.len() > MAX_ACTIONS {
                return Err(InvalidMessage::new(
                    "cmd.start_workflow.workflow.actions",
                    format!("more than {MAX_ACTIONS} actions"),
                ));
            }
            let mut seen = HashSet::new();
            for (i, action) in workflow.actions.iter().enumerate() {
                let field = format!("cmd.start_workflow.workflow.actions[{i}]");
                check_id(&format!("{field}.id"), &action.id, MAX_ID_LEN)?;
                if !seen.insert(action.id.as_str()) {
                    return Err(InvalidMessage::new(
                        format!("{field}.id"),
                        format!("duplicate action id `{}`", action.id),
                    ));
                }
                if action.image.trim().is_empty() {
                    return Err(InvalidMessage::new(
                        format!("{field}.image"),
                        "must not be empty",
                    ));
                }
            }
            Ok(())
        }
        Some(get_workflows_response::Cmd::StopWorkflow(stop)) => {
            check_workflow_id("cmd.stop_workflow.workflow_id", &stop.workflow_id)
        }
        // Sent by a server on the stream itself, never stored as a dispatch.
        Some(get_workflows_response::Cmd::RequestInventory(_)) => Err(InvalidMessage::new(
            "cmd.request_inventory",
            "not a dispatch command (a server sends it on the stream)",
        )),
    }
}

/// The workflow a command is about.
pub fn command_workflow_id(command: &GetWorkflowsResponse) -> Option<&str> {
    match command.cmd.as_ref()? {
        get_workflows_response::Cmd::StartWorkflow(start) => {
            start.workflow.as_ref().map(|w| w.workflow_id.as_str())
        }
        get_workflows_response::Cmd::StopWorkflow(stop) => Some(&stop.workflow_id),
        get_workflows_response::Cmd::RequestInventory(_) => None,
    }
}

/// Encodes a command as the protobuf bytes carried on a dispatch subject.
pub fn encode_command(command: &GetWorkflowsResponse) -> Bytes {
    Bytes::from(command.encode_to_vec())
}

/// Decodes and validates a command from a dispatch subject.
pub fn decode_command(payload: &[u8]) -> Result<GetWorkflowsResponse, CodecError> {
    let command = GetWorkflowsResponse::decode(payload)?;
    validate_command(&command)?;
    Ok(command)
}

/// Encodes an event as the protobuf bytes carried on an events subject.
pub fn encode_event(event: &Event) -> Bytes {
    Bytes::from(event.encode_to_vec())
}

/// Decodes and validates an event from an events subject.
pub fn decode_event(payload: &[u8]) -> Result<Event, CodecError> {
    let event = Event::decode(payload)?;
    validate_event(&event)?;
    Ok(event)
}

/// The de-duplication id of an event: `<workflow token>.<event_id>` when the agent set an
/// event id (retries carry the same one); otherwise derived from the content,
/// `<workflow token>.<Kind>.<action id>`, so a repeated identical event within the duplicate
/// window is stored once.
pub fn event_msg_id(event: &Event) -> String {
    let workflow = crate::token::encode_token(&event.workflow_id);
    if !event.event_id.is_empty() {
        return format!("{workflow}.{}", event.event_id);
    }
    let kind = event_kind(event).map_or("None", EventKind::as_str);
    match event_action_id(event) {
        Some(action) => format!("{workflow}.{kind}.{}", crate::token::encode_token(action)),
        None => format!("{workflow}.{kind}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tink_proto::workflow::v2::{Workflow, workflow};

    fn started(workflow_id: &str, action: &str) -> Event {
        Event {
            workflow_id: workflow_id.into(),
            event: Some(event::Event::ActionStarted(event::ActionStarted {
                action_id: action.into(),
            })),
            ..Default::default()
        }
    }

    fn start(actions: &[(&str, &str)]) -> GetWorkflowsResponse {
        GetWorkflowsResponse {
            cmd: Some(get_workflows_response::Cmd::StartWorkflow(
                get_workflows_response::StartWorkflow {
                    workflow: Some(Workflow {
                        workflow_id: "ns/wf".into(),
                        actions: actions
                            .iter()
                            .map(|(id, image)| workflow::Action {
                                id: (*id).into(),
                                name: (*id).into(),
                                image: (*image).into(),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    }),
                },
            )),
            ..Default::default()
        }
    }

    #[test]
    fn events_round_trip_and_validate() {
        let event = started("ns/wf", "a1");
        assert_eq!(decode_event(&encode_event(&event)).unwrap(), event);
        assert_eq!(event_kind(&event), Some(EventKind::ActionStarted));
    }

    #[test]
    fn invalid_events_name_the_field() {
        let cases: Vec<(Event, &str)> = vec![
            (started("", "a1"), "event.workflow_id"),
            (started("ns/wf", ""), "event.action_started.action_id"),
            (
                Event {
                    workflow_id: "ns/wf".into(),
                    ..Default::default()
                },
                "event.event",
            ),
            (
                Event {
                    event_id: "x".repeat(MAX_ID_LEN + 1),
                    ..started("ns/wf", "a1")
                },
                "event.event_id",
            ),
            (
                Event {
                    workflow_id: "ns/wf".into(),
                    event: Some(event::Event::ActionFailed(event::ActionFailed {
                        action_id: "a1".into(),
                        failure_reason: Some("R".into()),
                        failure_message: Some("m".repeat(MAX_MESSAGE_LEN + 1)),
                    })),
                    ..Default::default()
                },
                "event.action_failed.failure_message",
            ),
            (started("ns/wf", "a\n1"), "event.action_started.action_id"),
        ];
        for (event, field) in cases {
            let err = validate_event(&event).expect_err(field);
            assert_eq!(err.field, field, "{err}");
            assert!(matches!(
                decode_event(&encode_event(&event)),
                Err(CodecError::Invalid(_))
            ));
        }
    }

    #[test]
    fn garbage_is_a_decode_error() {
        assert!(matches!(
            decode_event(b"\xff\xff\xff"),
            Err(CodecError::Decode(_))
        ));
        assert!(matches!(
            decode_command(b"\x0a\x05ab"),
            Err(CodecError::Decode(_))
        ));
        // Valid protobuf, no command set.
        assert!(matches!(decode_command(b""), Err(CodecError::Invalid(_))));
    }

    #[test]
    fn commands_validate() {
        let ok = start(&[("a1", "busybox"), ("a2", "busybox")]);
        assert_eq!(decode_command(&encode_command(&ok)).unwrap(), ok);
        assert_eq!(command_workflow_id(&ok), Some("ns/wf"));
        for (cmd, field) in [
            (start(&[]), "cmd.start_workflow.workflow.actions"),
            (
                start(&[("a1", "x"), ("a1", "y")]),
                "cmd.start_workflow.workflow.actions[1].id",
            ),
            (
                start(&[("a1", " ")]),
                "cmd.start_workflow.workflow.actions[0].image",
            ),
            (
                start(&[("", "x")]),
                "cmd.start_workflow.workflow.actions[0].id",
            ),
            (
                GetWorkflowsResponse {
                    cmd: Some(get_workflows_response::Cmd::StopWorkflow(
                        get_workflows_response::StopWorkflow::default(),
                    )),
                    ..Default::default()
                },
                "cmd.stop_workflow.workflow_id",
            ),
        ] {
            assert_eq!(validate_command(&cmd).expect_err(field).field, field);
        }
    }

    #[test]
    fn msg_ids() {
        let mut event = started("ns/wf", "a.1");
        assert_eq!(event_msg_id(&event), "ns_2fwf.ActionStarted.a_2e1");
        event.event_id = "uuid-1".into();
        assert_eq!(event_msg_id(&event), "ns_2fwf.uuid-1");
        let rejected = Event {
            workflow_id: "ns/wf".into(),
            event: Some(event::Event::WorkflowRejected(
                event::WorkflowRejected::default(),
            )),
            ..Default::default()
        };
        assert_eq!(event_msg_id(&rejected), "ns_2fwf.WorkflowRejected");
    }
}
