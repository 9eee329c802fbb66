//! Back-off, timeouts and requeue deadlines, clock skew, coalescing, restart.

mod common;

use std::time::Duration;

use common::*;
use pretty_assertions::assert_eq;
use tink_api::v1alpha2::{ActionState, ConditionType, WorkflowState, WorkflowStatus};
use tink_workflow::{
    Config, Effect, EventReason, Ignored, Input, Outcome, StepContext, next_deadline, step,
    step_all,
};

fn dispatch() -> Input {
    Input::Dispatch {
        agent_id: AGENT.into(),
    }
}

#[test]
fn backoff_grows_with_each_rejection_up_to_the_cap() {
    let mut s = pending();
    let mut now = 0;
    let mut waits = Vec::new();
    for attempt in 1..=9u32 {
        let d = step(&s, dispatch(), &ctx(now));
        assert_eq!(d.outcome, Outcome::Changed, "attempt {attempt}");
        assert_eq!(d.status.dispatch_attempts, attempt);
        assert_eq!(
            d.status.dispatch_id.as_deref(),
            Some(dispatch_id(attempt).as_str())
        );
        s = d.status;
        now += 1;
        let r = step(&s, event(attempt, now, rejected()), &ctx(now));
        assert_eq!(r.status.state, WorkflowState::Pending);
        let next = r.status.next_attempt_at.as_ref().unwrap().0;
        waits.push(next.as_second() - ts(now).as_second());
        assert_eq!(r.requeue_at, Some(next));
        // One second early: not due.
        let early = step(
            &r.status,
            dispatch(),
            &StepContext {
                now: next - jiff::SignedDuration::from_secs(1),
                ..ctx(0)
            },
        );
        assert_eq!(early.outcome, Outcome::Ignored(Ignored::NotDue));
        s = r.status;
        now = next.as_second() - T0;
    }
    assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
}

#[test]
fn configured_backoff_is_used() {
    let mut c = ctx(15);
    c.config = Config {
        backoff_base: Duration::from_secs(1),
        backoff_max: Duration::from_secs(3),
        ..Config::default()
    };
    let r = step(&scheduled(), event(1, 15, rejected()), &c);
    assert_eq!(r.status.next_attempt_at.as_ref().map(|t| t.0), Some(ts(16)));
}

#[test]
fn a_rejection_of_an_older_attempt_is_stale() {
    // Attempt 1 rejected, attempt 2 scheduled; a duplicate of the first rejection arrives.
    let s = backing_off();
    let s2 = step(&s, dispatch(), &ctx(20)).status;
    assert_eq!(s2.dispatch_attempts, 2);
    let dup = step(&s2, event(1, 21, rejected()), &ctx(21));
    assert_eq!(dup.outcome, Outcome::Ignored(Ignored::StaleDispatch));
    // A late start of attempt 1 is stale too; attempt 2's start applies.
    assert_eq!(
        step(&s2, event(1, 21, started(0)), &ctx(21)).outcome,
        Outcome::Ignored(Ignored::StaleDispatch)
    );
    assert_eq!(
        step(&s2, event(2, 21, started(0)), &ctx(21)).status.state,
        WorkflowState::Running
    );
}

#[test]
fn scheduled_timeout_follows_the_configuration() {
    let mut c = ctx(10);
    c.config.scheduled_timeout = Duration::from_secs(30);
    let s = step(&pending(), dispatch(), &c);
    assert_eq!(s.requeue_at, Some(ts(40)));
    c.now = ts(39);
    assert_eq!(step(&s.status, Input::Tick, &c).outcome, Outcome::Unchanged);
    c.now = ts(40);
    let t = step(&s.status, Input::Tick, &c);
    assert_eq!(t.status.state, WorkflowState::Failed);
    let msg = t
        .status
        .condition(ConditionType::Succeeded)
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert_eq!(
        msg,
        format!("agent {AGENT} did not start the workflow within 30s")
    );
    // The stop countermands a start command the agent may still receive.
    assert!(
        matches!(&t.effects[0], Effect::PublishStop { reason: EventReason::ScheduledTimeout, dispatch_id: id, .. } if *id == dispatch_id(1))
    );
    assert!(
        t.status
            .actions
            .iter()
            .all(|a| a.state == ActionState::Canceled)
    );
}

#[test]
fn running_deadline_is_the_earlier_of_workflow_and_action_timeouts() {
    // Running since 20; the first action (10m timeout) since 20: 650 < 3620.
    let s = running();
    assert_eq!(next_deadline(&s, &ctx(30)), Some(ts(650)));
    // The second action has no timeout: only the workflow timeout.
    assert_eq!(next_deadline(&running_second(), &ctx(100)), Some(ts(3620)));
    // A short workflow timeout wins over the action's.
    let mut c = ctx(30);
    c.timeout = Some(Duration::from_secs(60));
    assert_eq!(next_deadline(&s, &c), Some(ts(80)));
    let t = step(
        &s,
        Input::Tick,
        &StepContext {
            now: ts(80),
            ..c.clone()
        },
    );
    assert_eq!(
        t.status
            .condition(ConditionType::Succeeded)
            .unwrap()
            .reason
            .as_deref(),
        Some("WorkflowTimeout")
    );
    // The running action is canceled, not failed: the workflow, not the action, ran out.
    assert_eq!(t.status.actions[0].state, ActionState::Canceled);
    // No workflow timeout and no action timeout: no deadline at all.
    let mut none = ctx(100);
    none.timeout = None;
    assert_eq!(next_deadline(&running_second(), &none), None);
    // A zero timeout means none.
    none.timeout = Some(Duration::ZERO);
    assert_eq!(next_deadline(&running_second(), &none), None);
}

#[test]
fn action_timeout_fails_the_action_with_its_reason() {
    let t = step(&running(), Input::Tick, &ctx(650));
    let a = &t.status.actions[0];
    assert_eq!(a.state, ActionState::Failed);
    assert_eq!(a.failure_reason.as_deref(), Some("ActionTimeout"));
    let c = t.status.condition(ConditionType::Succeeded).unwrap();
    assert_eq!(c.reason.as_deref(), Some("ActionTimeout"));
    assert_eq!(c.message, a.failure_message);
    assert!(c.message.as_deref().unwrap().contains("10m"));
    // The grace is configurable.
    let mut c = ctx(620);
    c.config.action_timeout_grace = Duration::ZERO;
    assert_eq!(
        step(&running(), Input::Tick, &c).status.state,
        WorkflowState::Failed
    );
}

#[test]
fn cancelling_timeout_forces_canceled_with_a_reason() {
    let s = cancelling();
    assert_eq!(next_deadline(&s, &ctx(31)), Some(ts(150)));
    let mut c = ctx(90);
    c.config.cancelling_timeout = Duration::from_secs(60);
    let t = step(&s, Input::Tick, &c);
    assert_eq!(t.status.state, WorkflowState::Canceled);
    let cond = t.status.condition(ConditionType::Succeeded).unwrap();
    assert_eq!(cond.reason.as_deref(), Some("CancelTimeout"));
    assert_eq!(
        cond.message.as_deref(),
        Some(format!("agent {AGENT} did not confirm the cancellation within 1m").as_str())
    );
    assert_eq!(t.effects.last(), Some(&Effect::RemoveFinalizer));
}

#[test]
fn event_times_are_clamped_between_the_status_and_now() {
    // An agent clock far ahead: the time written is the controller's now.
    let t = step(&scheduled(), event(1, 10_000, started(0)), &ctx(20));
    assert_eq!(t.status.started_at.as_ref().map(|t| t.0), Some(ts(20)));
    // An agent clock behind the last recorded time (dispatch at 10): never before it.
    let t = step(&scheduled(), event(1, -500, started(0)), &ctx(20));
    assert_eq!(t.status.started_at.as_ref().map(|t| t.0), Some(ts(10)));
    // A controller clock that went backwards (another replica): still not before the status.
    let t = step(&running(), event(1, 5, succeeded(0)), &ctx(5));
    assert_eq!(
        t.status.actions[0].last_transition.as_ref().map(|t| t.0),
        Some(ts(20))
    );
    // Sub-second times are written as whole seconds (what metav1.Time keeps).
    let mut c = ctx(20);
    c.now = ts(20) + jiff::SignedDuration::from_millis(900);
    let t = step(&scheduled(), event(1, 20, started(0)), &c);
    assert_eq!(t.status.started_at.as_ref().map(|t| t.0), Some(ts(20)));
}

#[test]
fn step_all_coalesces_a_batch_into_one_write() {
    let batch = vec![
        event(1, 20, started(0)),
        event(1, 30, succeeded(0)),
        event(1, 30, succeeded(0)), // duplicate
        event(1, 31, started(1)),
        event(2, 31, started(2)), // stale
        event(1, 40, succeeded(1)),
        event(1, 41, started(2)),
        event(1, 50, succeeded(2)),
    ];
    let all = step_all(&scheduled(), batch.clone(), &ctx(60));
    // The same final status as stepping one by one.
    let mut s = scheduled();
    for input in batch {
        s = step(&s, input, &ctx(60)).status;
    }
    assert_eq!(all.status, s);
    assert_eq!(all.status.state, WorkflowState::Succeeded);
    assert_eq!(all.outcome, Outcome::Changed);
    assert_eq!(
        kinds(&all.effects),
        ["Normal:Running", "Normal:Succeeded", "RemoveFinalizer"]
    );
    assert_eq!(all.requeue_at, None);
}

#[test]
fn step_all_outcomes() {
    // Only ignored inputs: the last reason.
    let t = step_all(
        &running(),
        [event(2, 30, started(0)), event(1, 30, started(0))],
        &ctx(30),
    );
    assert_eq!(t.outcome, Outcome::Ignored(Ignored::Outdated));
    assert!(t.effects.is_empty());
    // An applied input that changes nothing: Unchanged.
    let t = step_all(
        &running(),
        [event(2, 30, started(0)), Input::Tick],
        &ctx(30),
    );
    assert_eq!(t.outcome, Outcome::Unchanged);
    // Nothing at all.
    let t = step_all(&running(), [], &ctx(30));
    assert_eq!(t.outcome, Outcome::Unchanged);
    assert_eq!(t.requeue_at, Some(ts(650)));
    // A finish then a deletion in the same batch: the finalizer removal once, last.
    let t = step_all(
        &running(),
        [event(1, 40, failed(0)), Input::Deleted],
        &ctx(40),
    );
    assert_eq!(
        kinds(&t.effects),
        ["Warning:ActionFailed", "RemoveFinalizer"]
    );
    // Prepared then deleted in one batch: no finalizer added just to be removed.
    let t = step_all(
        &WorkflowStatus::default(),
        [Input::Prepared { actions: actions() }, Input::Deleted],
        &ctx(0),
    );
    assert_eq!(t.status.state, WorkflowState::Canceled);
    assert_eq!(
        kinds(&t.effects),
        ["Normal:Prepared", "Normal:Canceled", "RemoveFinalizer"]
    );
    // Prepared and dispatched in one batch (an idle agent is waiting): one status write,
    // the finalizer before the start command.
    let t = step_all(
        &WorkflowStatus::default(),
        [Input::Prepared { actions: actions() }, dispatch()],
        &ctx(0),
    );
    assert_eq!(t.status.state, WorkflowState::Scheduled);
    assert_eq!(
        kinds(&t.effects),
        [
            "AddFinalizer",
            "Normal:Prepared",
            "Start",
            "Normal:Scheduled"
        ]
    );
}

#[test]
fn resume_repairs_an_interrupted_step() {
    // The controller wrote Scheduled and crashed before publishing: Resume asks to publish
    // again, with the same dispatch id, only if the command is provably gone (the controller
    // checks the streams).
    let s = scheduled();
    let r = step(&s, Input::Resume, &ctx(12));
    assert!(r.effects.contains(&Effect::RepublishStart {
        agent_id: AGENT.into(),
        dispatch_id: dispatch_id(1)
    }));
    assert_eq!(r.status, s);
    assert_eq!(r.requeue_at, Some(ts(310)));
    // Wrote Cancelling and crashed before the stop: Resume stops again.
    let r = step(&cancelling(), Input::Resume, &ctx(31));
    assert!(matches!(
        &r.effects[..],
        [Effect::PublishStop {
            reason: EventReason::Deleted,
            ..
        }]
    ));
    // Wrote Failed and crashed before removing the finalizer.
    let r = step(&failed_wf(), Input::Resume, &ctx(41));
    assert_eq!(r.effects, [Effect::RemoveFinalizer]);
}

#[test]
fn the_started_condition_tracks_started_at_through_a_whole_run() {
    let mut s = WorkflowStatus::default();
    let steps = [
        (Input::Prepared { actions: actions() }, 0),
        (dispatch(), 10),
        (event(1, 20, started(0)), 20),
        (event(1, 30, succeeded(0)), 30),
        (event(1, 40, started(1)), 40),
        (event(1, 50, succeeded(1)), 50),
        (event(1, 60, started(2)), 60),
        (event(1, 70, succeeded(2)), 70),
    ];
    let mut started_lt = Vec::new();
    for (input, at) in steps {
        s = step(&s, input, &ctx(at)).status;
        let c = s.condition(ConditionType::Started).unwrap();
        assert_eq!(format!("{:?}", c.status) == "True", s.started_at.is_some());
        started_lt.push(c.last_transition.as_ref().unwrap().0.as_second() - T0);
    }
    // False at 0 (prepared), True from 20 on, the time never touched again.
    assert_eq!(started_lt, [0, 0, 20, 20, 20, 20, 20, 20]);
    assert_eq!(s.state, WorkflowState::Succeeded);
    let times: Vec<_> = s
        .actions
        .iter()
        .map(|a| {
            (
                a.started_at.as_ref().unwrap().0.as_second() - T0,
                a.last_transition.as_ref().unwrap().0.as_second() - T0,
            )
        })
        .collect();
    assert_eq!(times, [(20, 30), (40, 50), (60, 70)]);
    assert_eq!(s.last_transition.as_ref().unwrap().0, ts(70));
}

#[test]
fn restart_of_a_deleting_workflow_never_adds_the_finalizer() {
    // The rule for objects with a deletion timestamp: step [Deleted, Resume].
    type Case = (
        fn() -> WorkflowStatus,
        WorkflowState,
        &'static [&'static str],
    );
    let cases: [Case; 6] = [
        (
            pending,
            WorkflowState::Canceled,
            &["Normal:Canceled", "RemoveFinalizer"],
        ),
        (
            scheduled,
            WorkflowState::Cancelling,
            &["Stop:Deleted", "Normal:Cancelling"],
        ),
        (
            running,
            WorkflowState::Cancelling,
            &["Stop:Deleted", "Normal:Cancelling"],
        ),
        (cancelling, WorkflowState::Cancelling, &["Stop:Deleted"]),
        (failed_wf, WorkflowState::Failed, &["RemoveFinalizer"]),
        (succeeded_wf, WorkflowState::Succeeded, &["RemoveFinalizer"]),
    ];
    for (from, state, effects) in cases {
        let t = step_all(&from(), [Input::Deleted, Input::Resume], &ctx(100));
        assert_eq!(t.status.state, state);
        assert_eq!(kinds(&t.effects), effects, "from {:?}", from().state);
    }
}
