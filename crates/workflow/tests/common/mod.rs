//! Fixtures shared by the integration tests: a clock, a Workflow with three actions, and
//! helpers that drive the machine into each state through its own inputs.
#![allow(dead_code)]

use std::time::Duration;

use jiff::Timestamp;
use tink_api::Timeout;
use tink_api::v1alpha2::{Action, ConditionType, WorkflowStatus};
use tink_workflow::{
    AgentEvent, Effect, EventKind, Input, Outcome, StepContext, Transition, WorkflowRef, step,
};

/// Seconds since an arbitrary epoch (2023-11-14T22:13:20Z).
pub const T0: i64 = 1_700_000_000;

pub const AGENT: &str = "aa:bb:cc:dd:ee:01";
pub const UID: &str = "6f1c1a52-8f6f-4c2e-9d7c-2a4b1e0d9c01";

pub fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(T0 + secs).unwrap()
}

pub fn wf_ref() -> WorkflowRef {
    WorkflowRef::new("default", "wf-1", UID)
}

/// A context at `T0 + secs` with a one hour workflow timeout.
pub fn ctx(secs: i64) -> StepContext {
    StepContext::new(ts(secs), wf_ref(), Some(Duration::from_secs(3600)))
}

/// Three actions; the first has a 10 minute timeout.
pub fn actions() -> Vec<Action> {
    ["stream-image", "write-config", "reboot"]
        .iter()
        .enumerate()
        .map(|(i, name)| Action {
            name: (*name).to_string(),
            image: format!("quay.io/tinkerbell/{name}:v1"),
            timeout: (i == 0).then(|| Timeout::parse("10m").unwrap()),
            ..Action::default()
        })
        .collect()
}

pub fn action_ids() -> Vec<String> {
    actions()
        .iter()
        .enumerate()
        .map(|(i, a)| tink_workflow::action_id(i, &a.name))
        .collect()
}

pub fn dispatch_id(attempt: u32) -> String {
    format!("default/wf-1/{UID}/{attempt}")
}

pub fn event(attempt: u32, at: i64, kind: EventKind) -> Input {
    Input::Agent(AgentEvent {
        dispatch_id: dispatch_id(attempt),
        agent_id: Some(AGENT.to_string()),
        instance: None,
        at: ts(at),
        kind,
    })
}

pub fn started(i: usize) -> EventKind {
    EventKind::ActionStarted {
        action_id: action_ids()[i].clone(),
    }
}

pub fn succeeded(i: usize) -> EventKind {
    EventKind::ActionSucceeded {
        action_id: action_ids()[i].clone(),
    }
}

pub fn failed(i: usize) -> EventKind {
    EventKind::ActionFailed {
        action_id: action_ids()[i].clone(),
        reason: Some("ExitCode2".into()),
        message: Some("dd: /dev/sda: no space left".into()),
    }
}

pub fn rejected() -> EventKind {
    EventKind::WorkflowRejected {
        reason: Some("Busy".into()),
        message: Some("already running another workflow".into()),
    }
}

pub fn canceled(action: Option<usize>) -> EventKind {
    EventKind::WorkflowCanceled {
        action_id: action.map(|i| action_ids()[i].clone()),
        reason: Some("Canceled".into()),
        message: Some("stopped on request".into()),
    }
}

/// Applies `input` at `secs` and asserts it applied (not ignored).
pub fn apply(status: &WorkflowStatus, input: Input, secs: i64) -> Transition {
    let t = step(status, input.clone(), &ctx(secs));
    assert!(
        !matches!(t.outcome, Outcome::Ignored(_)),
        "{input:?} was ignored: {:?}",
        t.outcome
    );
    t
}

// The states, reached through the machine itself. Times: prepared at 0, dispatched at 10,
// first action at 20, second action at 100.

pub fn pending() -> WorkflowStatus {
    apply(
        &WorkflowStatus::default(),
        Input::Prepared { actions: actions() },
        0,
    )
    .status
}

pub fn scheduled() -> WorkflowStatus {
    apply(
        &pending(),
        Input::Dispatch {
            agent_id: AGENT.into(),
        },
        10,
    )
    .status
}

pub fn running() -> WorkflowStatus {
    apply(&scheduled(), event(1, 20, started(0)), 20).status
}

/// Running, the first action succeeded, the second started.
pub fn running_second() -> WorkflowStatus {
    let s = apply(&running(), event(1, 90, succeeded(0)), 90).status;
    apply(&s, event(1, 100, started(1)), 100).status
}

/// Pending again after the first dispatch was rejected at 15 (next attempt at 20).
pub fn backing_off() -> WorkflowStatus {
    apply(&scheduled(), event(1, 15, rejected()), 15).status
}

pub fn cancelling() -> WorkflowStatus {
    apply(&running(), Input::Deleted, 30).status
}

pub fn succeeded_wf() -> WorkflowStatus {
    let mut s = running();
    s = apply(&s, event(1, 40, succeeded(0)), 40).status;
    s = apply(&s, event(1, 50, succeeded(1)), 50).status;
    apply(&s, event(1, 60, succeeded(2)), 60).status
}

pub fn failed_wf() -> WorkflowStatus {
    apply(&running(), event(1, 40, failed(0)), 40).status
}

pub fn canceled_wf() -> WorkflowStatus {
    apply(&cancelling(), event(1, 40, canceled(Some(0))), 40).status
}

/// A compact, comparable rendering of effects.
pub fn kinds(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .map(|e| match e {
            Effect::AddFinalizer => "AddFinalizer".to_string(),
            Effect::RemoveFinalizer => "RemoveFinalizer".to_string(),
            Effect::PublishStart { .. } => "Start".to_string(),
            Effect::RepublishStart { .. } => "Restart".to_string(),
            Effect::PublishStop { reason, .. } => format!("Stop:{reason}"),
            Effect::KubeEvent { type_, reason, .. } => format!("{type_}:{reason}"),
        })
        .collect()
}

/// `(status, severity, reason)` of a condition, as strings.
pub fn cond(s: &WorkflowStatus, t: ConditionType) -> Option<(String, String, String)> {
    s.condition(t).map(|c| {
        (
            format!("{:?}", c.status),
            format!("{:?}", c.severity),
            c.reason.clone().unwrap_or_default(),
        )
    })
}
