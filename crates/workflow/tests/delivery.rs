//! Delivery receipts, withdrawal of an undelivered dispatch, `AlreadyRun` rejections and the
//! agent-loss verdicts (`AgentRestarted`, `AgentLost`).

mod common;

use std::time::Duration;

use common::*;
use tink_api::v1alpha2::{ActionState, ConditionType, WorkflowState, WorkflowStatus};
use tink_workflow::{
    AgentEvent, AgentSeen, Effect, EventKind, Ignored, Input, Outcome, StepContext, VerdictReason,
    agent_verdict, next_deadline, step, step_all,
};

fn receipt(attempt: u32, at: i64, instance: &str) -> Input {
    Input::Agent(AgentEvent {
        dispatch_id: dispatch_id(attempt),
        agent_id: Some(AGENT.to_string()),
        instance: Some(instance.to_string()),
        at: ts(at),
        kind: EventKind::WorkflowReceived { stop: false },
    })
}

fn received() -> WorkflowStatus {
    apply(&scheduled(), receipt(1, 12, "i-1"), 12).status
}

fn seen(ctx: &mut StepContext, instance: Option<&str>, last_seen: i64) {
    ctx.agent = Some(AgentSeen {
        instance: instance.map(str::to_string),
        last_seen: ts(last_seen),
    });
}

#[test]
fn a_receipt_records_the_instance_and_ends_the_scheduled_timeout() {
    let s = received();
    assert_eq!(s.state, WorkflowState::Scheduled);
    assert_eq!(s.received_at.as_ref().map(|t| t.0), Some(ts(12)));
    assert_eq!(s.agent_instance.as_deref(), Some("i-1"));
    // The scheduled timeout (300 s after dispatch at 10) no longer applies; the workflow
    // timeout (1 h) counts from the receipt.
    assert_eq!(next_deadline(&s, &ctx(13)), Some(ts(12 + 3600)));
    let t = step(&s, Input::Tick, &ctx(400));
    assert_eq!(
        t.status.state,
        WorkflowState::Scheduled,
        "no ScheduledTimeout"
    );
    let t = step(&s, Input::Tick, &ctx(12 + 3600));
    assert_eq!(t.status.state, WorkflowState::Failed);
    assert_eq!(
        cond(&t.status, ConditionType::Succeeded).map(|c| c.2),
        Some("WorkflowTimeout".into())
    );
    // A second receipt (redelivery) changes nothing.
    let t = step(&s, receipt(1, 13, "i-1"), &ctx(13));
    assert_eq!(t.status, s);
}

#[test]
fn an_agent_without_receipts_is_received_at_its_first_event() {
    let s = running();
    assert_eq!(s.received_at.as_ref().map(|t| t.0), Some(ts(20)));
    assert_eq!(s.agent_instance, None);
}

#[test]
fn a_new_dispatch_forgets_the_previous_receipt() {
    let s = apply(&received(), event(1, 15, rejected()), 15).status;
    assert_eq!(s.received_at, None);
    let s = apply(
        &s,
        Input::Dispatch {
            agent_id: AGENT.into(),
        },
        25,
    )
    .status;
    assert_eq!(s.state, WorkflowState::Scheduled);
    assert_eq!(s.received_at, None);
    assert_eq!(s.agent_instance, None);
}

#[test]
fn already_run_never_causes_another_attempt() {
    let rejected_already_run = EventKind::WorkflowRejected {
        reason: Some("AlreadyRun".into()),
        message: Some("dispatch ran before".into()),
    };
    let t = step(&received(), event(1, 15, rejected_already_run), &ctx(15));
    assert_eq!(t.outcome, Outcome::Ignored(Ignored::Outdated));
    assert_eq!(t.status.state, WorkflowState::Scheduled);
    assert_eq!(t.status.dispatch_attempts, 1);
    assert!(t.effects.is_empty());
}

#[test]
fn a_withdrawn_dispatch_is_canceled_without_a_stop() {
    let t = step_all(
        &scheduled(),
        [Input::Withdrawn, Input::Deleted, Input::Resume],
        &ctx(15),
    );
    assert_eq!(t.status.state, WorkflowState::Canceled);
    assert!(
        !t.effects
            .iter()
            .any(|e| matches!(e, Effect::PublishStop { .. } | Effect::PublishStart { .. })),
        "{:?}",
        kinds(&t.effects)
    );
    assert_eq!(t.effects.last(), Some(&Effect::RemoveFinalizer));
    assert!(
        t.status
            .actions
            .iter()
            .all(|a| a.state == ActionState::Canceled)
    );
    // Once the agent confirmed it, a withdrawal does not apply: deletion stops it instead.
    let t = step(&received(), Input::Withdrawn, &ctx(15));
    assert_eq!(t.outcome, Outcome::Ignored(Ignored::WrongState));
}

#[test]
fn deletion_while_scheduled_stops_and_never_restarts() {
    // The controller steps Deleted before Resume: a stop, and no start queued before it.
    let t = step_all(&scheduled(), [Input::Deleted, Input::Resume], &ctx(15));
    assert_eq!(t.status.state, WorkflowState::Cancelling);
    let k = kinds(&t.effects);
    assert!(k.contains(&"Stop:Deleted".to_string()), "{k:?}");
    assert!(!k.iter().any(|e| e.contains("Start")), "{k:?}");
}

#[test]
fn resume_republishes_only_what_no_agent_confirmed() {
    let t = step(&scheduled(), Input::Resume, &ctx(15));
    assert!(
        t.effects
            .iter()
            .any(|e| matches!(e, Effect::RepublishStart { .. }))
    );
    let t = step(&received(), Input::Resume, &ctx(15));
    assert!(
        !t.effects.iter().any(|e| matches!(
            e,
            Effect::RepublishStart { .. } | Effect::PublishStart { .. }
        )),
        "{:?}",
        kinds(&t.effects)
    );
}

#[test]
fn a_restarted_agent_is_a_verdict_not_a_silent_running_workflow() {
    // Running, received by instance i-1.
    let s = apply(&received(), event(1, 20, started(0)), 20).status;
    assert_eq!(s.agent_instance.as_deref(), Some("i-1"));
    let mut c = ctx(30);
    seen(&mut c, Some("i-1"), 29);
    assert_eq!(agent_verdict(&s, &c), None, "same instance: no verdict");
    seen(&mut c, Some("i-2"), 29);
    let v = agent_verdict(&s, &c).expect("a new instance is a restart");
    assert_eq!(v.reason, VerdictReason::AgentRestarted);
    assert_eq!(v.action_id.as_deref(), Some(action_ids()[0].as_str()));
    // Applied as the event it is, it fails the running action with the reason.
    let t = step(&s, Input::Agent(v.event(ts(30))), &c);
    assert_eq!(t.status.state, WorkflowState::Failed);
    assert_eq!(
        t.status.actions[0].failure_reason.as_deref(),
        Some("AgentRestarted")
    );
    assert_eq!(
        cond(&t.status, ConditionType::Succeeded).map(|c| c.2),
        Some("AgentRestarted".into())
    );
    // Had the workflow finished first (its events were stored before the restart), the
    // verdict arrives after them and changes nothing.
    let done = apply(&s, event(1, 25, succeeded(2)), 25).status;
    assert_eq!(done.state, WorkflowState::Succeeded);
    let t = step(&done, Input::Agent(v.event(ts(30))), &c);
    assert_eq!(t.outcome, Outcome::Ignored(Ignored::Terminal));
}

#[test]
fn a_restart_while_cancelling_confirms_the_cancellation() {
    let s = apply(&received(), event(1, 20, started(0)), 20).status;
    let s = apply(&s, Input::Deleted, 21).status;
    assert_eq!(s.state, WorkflowState::Cancelling);
    let mut c = ctx(30);
    seen(&mut c, Some("i-2"), 29);
    let v = agent_verdict(&s, &c).expect("verdict");
    let t = step(&s, Input::Agent(v.event(ts(30))), &c);
    assert_eq!(t.status.state, WorkflowState::Canceled);
}

#[test]
fn an_agent_gone_longer_than_the_limit_is_lost() {
    let s = running();
    let mut c = ctx(100);
    c.config.agent_lost_after = Duration::from_secs(60);
    seen(&mut c, None, 50);
    assert_eq!(agent_verdict(&s, &c), None, "within the limit");
    // The deadline includes the agent's loss.
    assert_eq!(next_deadline(&s, &c), Some(ts(110)));
    let mut late = c.clone();
    late.now = ts(110);
    let v = agent_verdict(&s, &late).expect("lost");
    assert_eq!(v.reason, VerdictReason::AgentLost);
    let t = step(&s, Input::Agent(v.event(ts(110))), &late);
    assert_eq!(t.status.state, WorkflowState::Failed);
    assert_eq!(
        cond(&t.status, ConditionType::Succeeded).map(|c| c.2),
        Some("AgentLost".into())
    );
}

#[test]
fn no_verdict_for_a_dispatch_the_agent_never_confirmed() {
    // The command may simply wait in the queue of an agent that is offline.
    let s = scheduled();
    let mut c = ctx(10_000);
    seen(&mut c, Some("i-9"), 0);
    assert_eq!(agent_verdict(&s, &c), None);
    // Nor for an agent that sends no instance ids and is connected.
    let s = running();
    let mut c = ctx(30);
    seen(&mut c, None, 29);
    assert_eq!(agent_verdict(&s, &c), None);
}
