//! Every transition of seeds/000 and seeds/004: state x input -> state, effects, conditions.

mod common;

use common::*;
use pretty_assertions::assert_eq;
use tink_api::v1alpha2::{ConditionType, WorkflowState, WorkflowStatus};
use tink_workflow::{Ignored, Input, Outcome, step};

use WorkflowState::*;

struct Row {
    name: &'static str,
    from: fn() -> WorkflowStatus,
    input: Input,
    at: i64,
    outcome: Outcome,
    state: WorkflowState,
    effects: &'static [&'static str],
    /// The `Succeeded` condition after the step: (status, severity, reason).
    succeeded: Option<(&'static str, &'static str, &'static str)>,
}

fn unprepared() -> WorkflowStatus {
    WorkflowStatus::default()
}

fn dispatch() -> Input {
    Input::Dispatch {
        agent_id: AGENT.into(),
    }
}

fn prepared() -> Input {
    Input::Prepared { actions: actions() }
}

fn render_failed() -> Input {
    Input::RenderFailed {
        message: "template: wf:3:14: executing \"wf\" at <.device_1>: map has no entry for key \"device_1\"".into(),
    }
}

fn unresolved() -> Input {
    Input::Unresolved {
        reason: "TemplateNotFound".into(),
        message: "Template default/ubuntu not found".into(),
    }
}

const C: Outcome = Outcome::Changed;
const U: Outcome = Outcome::Unchanged;
const fn ig(why: Ignored) -> Outcome {
    Outcome::Ignored(why)
}

fn rows() -> Vec<Row> {
    let row = |name, from, input, at, outcome, state, effects, succeeded| Row {
        name,
        from,
        input,
        at,
        outcome,
        state,
        effects,
        succeeded,
    };
    let fail_err = |reason| Some(("False", "Error", reason));
    vec![
        // ---- Pending, not prepared ----
        row(
            "unprepared+Prepared",
            unprepared,
            prepared(),
            0,
            C,
            Pending,
            &["AddFinalizer", "Normal:Prepared"],
            None,
        ),
        row(
            "unprepared+Prepared(none)",
            unprepared,
            Input::Prepared { actions: vec![] },
            0,
            C,
            Failed,
            &["Warning:NoActions", "RemoveFinalizer"],
            fail_err("NoActions"),
        ),
        row(
            "unprepared+RenderFailed",
            unprepared,
            render_failed(),
            0,
            C,
            Failed,
            &["Warning:RenderFailed", "RemoveFinalizer"],
            fail_err("RenderFailed"),
        ),
        row(
            "unprepared+Unresolved",
            unprepared,
            unresolved(),
            0,
            C,
            Pending,
            &["Warning:Waiting"],
            None,
        ),
        row(
            "unprepared+Dispatch",
            unprepared,
            dispatch(),
            0,
            ig(Ignored::NotPrepared),
            Pending,
            &[],
            None,
        ),
        row(
            "unprepared+Deleted",
            unprepared,
            Input::Deleted,
            0,
            C,
            Canceled,
            &["Normal:Canceled", "RemoveFinalizer"],
            Some(("False", "Warning", "Canceled")),
        ),
        row(
            "unprepared+Tick",
            unprepared,
            Input::Tick,
            0,
            U,
            Pending,
            &[],
            None,
        ),
        row(
            "unprepared+Resume",
            unprepared,
            Input::Resume,
            0,
            U,
            Pending,
            &[],
            None,
        ),
        row(
            "unprepared+event",
            unprepared,
            event(1, 0, started(0)),
            0,
            ig(Ignored::StaleDispatch),
            Pending,
            &[],
            None,
        ),
        // ---- Pending, prepared ----
        row(
            "pending+Prepared",
            pending,
            prepared(),
            5,
            ig(Ignored::AlreadyPrepared),
            Pending,
            &[],
            None,
        ),
        row(
            "pending+RenderFailed",
            pending,
            render_failed(),
            5,
            ig(Ignored::AlreadyPrepared),
            Pending,
            &[],
            None,
        ),
        row(
            "pending+Unresolved",
            pending,
            unresolved(),
            5,
            ig(Ignored::AlreadyPrepared),
            Pending,
            &[],
            None,
        ),
        row(
            "pending+Dispatch",
            pending,
            dispatch(),
            10,
            C,
            Scheduled,
            &["Start", "Normal:Scheduled"],
            None,
        ),
        row(
            "pending+Dispatch(no agent)",
            pending,
            Input::Dispatch {
                agent_id: String::new(),
            },
            10,
            ig(Ignored::NoAgent),
            Pending,
            &[],
            None,
        ),
        row(
            "pending+Deleted",
            pending,
            Input::Deleted,
            10,
            C,
            Canceled,
            &["Normal:Canceled", "RemoveFinalizer"],
            Some(("False", "Warning", "Canceled")),
        ),
        row(
            "pending+Tick",
            pending,
            Input::Tick,
            10,
            U,
            Pending,
            &[],
            None,
        ),
        row(
            "pending+Resume",
            pending,
            Input::Resume,
            10,
            U,
            Pending,
            &["AddFinalizer"],
            None,
        ),
        row(
            "pending+event",
            pending,
            event(1, 10, started(0)),
            10,
            ig(Ignored::StaleDispatch),
            Pending,
            &[],
            None,
        ),
        // ---- Pending, backing off after a rejection (next attempt at 20) ----
        row(
            "backoff+Dispatch(early)",
            backing_off,
            dispatch(),
            19,
            ig(Ignored::NotDue),
            Pending,
            &[],
            None,
        ),
        row(
            "backoff+Dispatch(due)",
            backing_off,
            dispatch(),
            20,
            C,
            Scheduled,
            &["Start", "Normal:Scheduled"],
            None,
        ),
        row(
            "backoff+late event of attempt 1",
            backing_off,
            event(1, 16, started(0)),
            16,
            ig(Ignored::StaleDispatch),
            Pending,
            &[],
            None,
        ),
        row(
            "backoff+Deleted",
            backing_off,
            Input::Deleted,
            16,
            C,
            Canceled,
            &["Normal:Canceled", "RemoveFinalizer"],
            Some(("False", "Warning", "Canceled")),
        ),
        // ---- Scheduled (dispatched at 10) ----
        row(
            "scheduled+ActionStarted",
            scheduled,
            event(1, 20, started(0)),
            20,
            C,
            Running,
            &["Normal:Running"],
            None,
        ),
        row(
            "scheduled+ActionSucceeded(first)",
            scheduled,
            event(1, 20, succeeded(0)),
            20,
            C,
            Running,
            &["Normal:Running"],
            None,
        ),
        row(
            "scheduled+ActionSucceeded(last)",
            scheduled,
            event(1, 20, succeeded(2)),
            20,
            C,
            Succeeded,
            &["Normal:Running", "Normal:Succeeded", "RemoveFinalizer"],
            Some(("True", "Info", "Succeeded")),
        ),
        row(
            "scheduled+ActionFailed",
            scheduled,
            event(1, 20, failed(0)),
            20,
            C,
            Failed,
            &["Normal:Running", "Warning:ActionFailed", "RemoveFinalizer"],
            fail_err("ExitCode2"),
        ),
        row(
            "scheduled+Rejected",
            scheduled,
            event(1, 15, rejected()),
            15,
            C,
            Pending,
            &["Warning:Rejected"],
            None,
        ),
        row(
            "scheduled+Canceled(unrequested)",
            scheduled,
            event(1, 15, canceled(None)),
            15,
            C,
            Failed,
            &["Warning:AgentCanceled", "RemoveFinalizer"],
            fail_err("AgentCanceled"),
        ),
        row(
            "scheduled+Tick(before)",
            scheduled,
            Input::Tick,
            309,
            U,
            Scheduled,
            &[],
            None,
        ),
        row(
            "scheduled+Tick(timeout)",
            scheduled,
            Input::Tick,
            310,
            C,
            Failed,
            &[
                "Stop:ScheduledTimeout",
                "Warning:ScheduledTimeout",
                "RemoveFinalizer",
            ],
            fail_err("ScheduledTimeout"),
        ),
        row(
            "scheduled+Deleted",
            scheduled,
            Input::Deleted,
            15,
            C,
            Cancelling,
            &["Stop:Deleted", "Normal:Cancelling"],
            None,
        ),
        row(
            "scheduled+Resume",
            scheduled,
            Input::Resume,
            15,
            U,
            Scheduled,
            &["AddFinalizer", "Restart"],
            None,
        ),
        row(
            "scheduled+Dispatch",
            scheduled,
            dispatch(),
            15,
            ig(Ignored::WrongState),
            Scheduled,
            &[],
            None,
        ),
        row(
            "scheduled+Prepared",
            scheduled,
            prepared(),
            15,
            ig(Ignored::WrongState),
            Scheduled,
            &[],
            None,
        ),
        row(
            "scheduled+other attempt",
            scheduled,
            event(2, 15, started(0)),
            15,
            ig(Ignored::StaleDispatch),
            Scheduled,
            &[],
            None,
        ),
        // ---- Running (first action started at 20) ----
        row(
            "running+ActionStarted(dup)",
            running,
            event(1, 25, started(0)),
            25,
            ig(Ignored::Outdated),
            Running,
            &[],
            None,
        ),
        row(
            "running+ActionSucceeded",
            running,
            event(1, 25, succeeded(0)),
            25,
            C,
            Running,
            &[],
            None,
        ),
        row(
            "running+ActionStarted(next)",
            running,
            event(1, 25, started(1)),
            25,
            C,
            Running,
            &[],
            None,
        ),
        row(
            "running+ActionSucceeded(last)",
            running,
            event(1, 25, succeeded(2)),
            25,
            C,
            Succeeded,
            &["Normal:Succeeded", "RemoveFinalizer"],
            Some(("True", "Info", "Succeeded")),
        ),
        row(
            "running+ActionFailed",
            running,
            event(1, 25, failed(0)),
            25,
            C,
            Failed,
            &["Warning:ActionFailed", "RemoveFinalizer"],
            fail_err("ExitCode2"),
        ),
        row(
            "running+Rejected",
            running,
            event(1, 25, rejected()),
            25,
            ig(Ignored::WrongState),
            Running,
            &[],
            None,
        ),
        row(
            "running+Canceled(unrequested)",
            running,
            event(1, 25, canceled(Some(0))),
            25,
            C,
            Failed,
            &["Warning:AgentCanceled", "RemoveFinalizer"],
            fail_err("AgentCanceled"),
        ),
        row(
            "running+unknown action",
            running,
            event(
                1,
                25,
                tink_workflow::EventKind::ActionStarted {
                    action_id: "9-nope".into(),
                },
            ),
            25,
            ig(Ignored::UnknownAction),
            Running,
            &[],
            None,
        ),
        row(
            "running+Tick(before)",
            running,
            Input::Tick,
            649,
            U,
            Running,
            &[],
            None,
        ),
        // The first action has a 10m timeout, plus 30s grace: trips at 20 + 630 = 650.
        row(
            "running+Tick(action timeout)",
            running,
            Input::Tick,
            650,
            C,
            Failed,
            &[
                "Stop:ActionTimeout",
                "Warning:ActionTimeout",
                "RemoveFinalizer",
            ],
            fail_err("ActionTimeout"),
        ),
        // The second action has no timeout; the workflow's 1h runs from 20: trips at 3620.
        row(
            "running2+Tick(before)",
            running_second,
            Input::Tick,
            3619,
            U,
            Running,
            &[],
            None,
        ),
        row(
            "running2+Tick(workflow timeout)",
            running_second,
            Input::Tick,
            3620,
            C,
            Failed,
            &[
                "Stop:WorkflowTimeout",
                "Warning:WorkflowTimeout",
                "RemoveFinalizer",
            ],
            fail_err("WorkflowTimeout"),
        ),
        row(
            "running2+late ActionStarted(first)",
            running_second,
            event(1, 101, started(0)),
            101,
            ig(Ignored::Outdated),
            Running,
            &[],
            None,
        ),
        row(
            "running2+late ActionFailed(first)",
            running_second,
            event(1, 101, failed(0)),
            101,
            ig(Ignored::Outdated),
            Running,
            &[],
            None,
        ),
        row(
            "running+Deleted",
            running,
            Input::Deleted,
            30,
            C,
            Cancelling,
            &["Stop:Deleted", "Normal:Cancelling"],
            None,
        ),
        row(
            "running+Resume",
            running,
            Input::Resume,
            30,
            U,
            Running,
            &["AddFinalizer"],
            None,
        ),
        row(
            "running+Dispatch",
            running,
            dispatch(),
            30,
            ig(Ignored::WrongState),
            Running,
            &[],
            None,
        ),
        // ---- Cancelling (entered at 30) ----
        row(
            "cancelling+Canceled",
            cancelling,
            event(1, 40, canceled(Some(0))),
            40,
            C,
            Canceled,
            &["Normal:Canceled", "RemoveFinalizer"],
            Some(("False", "Warning", "Canceled")),
        ),
        row(
            "cancelling+Tick(before)",
            cancelling,
            Input::Tick,
            149,
            U,
            Cancelling,
            &[],
            None,
        ),
        row(
            "cancelling+Tick(timeout)",
            cancelling,
            Input::Tick,
            150,
            C,
            Canceled,
            &["Warning:CancelTimeout", "RemoveFinalizer"],
            Some(("False", "Error", "CancelTimeout")),
        ),
        row(
            "cancelling+Deleted",
            cancelling,
            Input::Deleted,
            40,
            U,
            Cancelling,
            &[],
            None,
        ),
        row(
            "cancelling+Resume",
            cancelling,
            Input::Resume,
            40,
            U,
            Cancelling,
            &["Stop:Deleted"],
            None,
        ),
        row(
            "cancelling+ActionSucceeded",
            cancelling,
            event(1, 40, succeeded(0)),
            40,
            C,
            Cancelling,
            &[],
            None,
        ),
        row(
            "cancelling+ActionSucceeded(last)",
            cancelling,
            event(1, 40, succeeded(2)),
            40,
            C,
            Succeeded,
            &["Normal:Succeeded", "RemoveFinalizer"],
            Some(("True", "Info", "Succeeded")),
        ),
        row(
            "cancelling+ActionFailed",
            cancelling,
            event(1, 40, failed(0)),
            40,
            C,
            Failed,
            &["Warning:ActionFailed", "RemoveFinalizer"],
            fail_err("ExitCode2"),
        ),
        row(
            "cancelling+Rejected",
            cancelling,
            event(1, 40, rejected()),
            40,
            ig(Ignored::WrongState),
            Cancelling,
            &[],
            None,
        ),
        row(
            "cancelling+stale Canceled",
            cancelling,
            event(2, 40, canceled(None)),
            40,
            ig(Ignored::StaleDispatch),
            Cancelling,
            &[],
            None,
        ),
    ]
}

/// End states are absorbing: only `Deleted` and `Resume` do anything (remove the finalizer).
fn terminal_rows() -> Vec<Row> {
    let mut out = Vec::new();
    let ends: [(fn() -> WorkflowStatus, WorkflowState); 3] = [
        (succeeded_wf, Succeeded),
        (failed_wf, Failed),
        (canceled_wf, Canceled),
    ];
    for (from, state) in ends {
        let inputs = [
            prepared(),
            render_failed(),
            unresolved(),
            dispatch(),
            event(1, 70, started(0)),
            event(1, 70, succeeded(2)),
            event(1, 70, failed(1)),
            event(1, 70, rejected()),
            event(1, 70, canceled(None)),
            Input::Tick,
        ];
        for input in inputs {
            out.push(Row {
                name: "terminal+input",
                from,
                input,
                at: 100_000,
                outcome: ig(Ignored::Terminal),
                state,
                effects: &[],
                succeeded: None,
            });
        }
        for input in [Input::Deleted, Input::Resume] {
            out.push(Row {
                name: "terminal+Deleted/Resume",
                from,
                input,
                at: 100_000,
                outcome: U,
                state,
                effects: &["RemoveFinalizer"],
                succeeded: None,
            });
        }
    }
    out
}

#[test]
fn every_transition() {
    let rows = rows();
    let terminal = terminal_rows();
    let mut checked = 0;
    for r in rows.iter().chain(&terminal) {
        let from = (r.from)();
        let t = step(&from, r.input.clone(), &ctx(r.at));
        let label = format!("{} ({:?} at {})", r.name, r.input, r.at);
        assert_eq!(t.outcome, r.outcome, "{label}: outcome");
        assert_eq!(t.status.state, r.state, "{label}: state");
        assert_eq!(kinds(&t.effects), r.effects, "{label}: effects");
        match t.outcome {
            Outcome::Changed => assert_ne!(t.status, from, "{label}: Changed but equal"),
            _ => assert_eq!(t.status, from, "{label}: status must not change"),
        }
        if r.outcome == C {
            let got = cond(&t.status, ConditionType::Succeeded);
            let want = r
                .succeeded
                .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
            assert_eq!(got, want, "{label}: Succeeded condition");
            // Started is True exactly when startedAt is set.
            let started = cond(&t.status, ConditionType::Started).map(|c| c.0);
            let want_started = if t.status.started_at.is_some() {
                "True"
            } else {
                "False"
            };
            assert_eq!(started.as_deref(), Some(want_started), "{label}: Started");
        }
        checked += 1;
    }
    assert_eq!(checked, rows.len() + terminal.len());
    assert!(checked > 90, "only {checked} rows");
}

#[test]
fn prepared_writes_actions_conditions_and_times() {
    let t = step(&WorkflowStatus::default(), prepared(), &ctx(0));
    let s = &t.status;
    assert_eq!(s.actions.len(), 3);
    assert_eq!(
        s.actions.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        ["0-stream-image", "1-write-config", "2-reboot"]
    );
    assert!(
        s.actions
            .iter()
            .all(|a| a.state == tink_api::v1alpha2::ActionState::Pending)
    );
    assert_eq!(s.last_transition.as_ref().map(|t| t.0), Some(ts(0)));
    assert_eq!(s.started_at, None);
    assert_eq!(
        cond(s, ConditionType::Started),
        Some(("False".into(), "Info".into(), "NotStarted".into()))
    );
    assert_eq!(
        cond(s, ConditionType::TemplateRendered),
        Some(("True".into(), "Info".into(), "Rendered".into()))
    );
    assert_eq!(s.condition(ConditionType::Succeeded), None);
    assert_eq!(t.requeue_at, None);
}

#[test]
fn render_failure_keeps_line_and_column_in_the_conditions() {
    let t = step(&WorkflowStatus::default(), render_failed(), &ctx(0));
    for ty in [ConditionType::TemplateRendered, ConditionType::Succeeded] {
        let c = t.status.condition(ty).unwrap();
        assert_eq!(c.reason.as_deref(), Some("RenderFailed"));
        assert!(c.message.as_deref().unwrap().contains("wf:3:14"), "{ty:?}");
    }
}

#[test]
fn unresolved_waits_and_reports_once() {
    let first = step(&WorkflowStatus::default(), unresolved(), &ctx(0));
    assert_eq!(
        cond(&first.status, ConditionType::TemplateRendered),
        Some(("False".into(), "Warning".into(), "TemplateNotFound".into()))
    );
    // The same observation again: no change, no second Kubernetes Event.
    let again = step(&first.status, unresolved(), &ctx(30));
    assert_eq!(again.outcome, Outcome::Unchanged);
    assert!(again.effects.is_empty());
    // The Template appears: prepared, the condition turns True.
    let ok = step(&first.status, prepared(), &ctx(60));
    assert_eq!(ok.outcome, Outcome::Changed);
    let c = ok
        .status
        .condition(ConditionType::TemplateRendered)
        .unwrap();
    assert_eq!(c.last_transition.as_ref().map(|t| t.0), Some(ts(60)));
}

#[test]
fn dispatch_sets_the_id_agent_attempts_and_start_command() {
    let t = step(&pending(), dispatch(), &ctx(10));
    let s = &t.status;
    assert_eq!(s.dispatch_id.as_deref(), Some(dispatch_id(1).as_str()));
    assert_eq!(s.agent_id.as_deref(), Some(AGENT));
    assert_eq!(s.dispatch_attempts, 1);
    assert_eq!(s.last_transition.as_ref().map(|t| t.0), Some(ts(10)));
    assert_eq!(
        t.effects[0],
        tink_workflow::Effect::PublishStart {
            agent_id: AGENT.into(),
            dispatch_id: dispatch_id(1)
        }
    );
    // Supervision: the scheduled timeout (5 minutes by default).
    assert_eq!(t.requeue_at, Some(ts(310)));
}

#[test]
fn running_records_start_times_and_the_started_condition() {
    let s = running();
    assert_eq!(s.started_at.as_ref().map(|t| t.0), Some(ts(20)));
    assert_eq!(s.actions[0].started_at.as_ref().map(|t| t.0), Some(ts(20)));
    let c = s.condition(ConditionType::Started).unwrap();
    assert_eq!(c.last_transition.as_ref().map(|t| t.0), Some(ts(20)));
    assert_eq!(format!("{:?}", c.status), "True");
    // Later steps keep the condition's time: it changes only with its status.
    let s2 = running_second();
    assert_eq!(s2.condition(ConditionType::Started), Some(c));
    assert_eq!(s2.started_at, s.started_at);
}

#[test]
fn success_before_start_implies_the_start_and_earlier_actions() {
    // The agent's events arrive out of order: the last action's success first.
    let t = step(&scheduled(), event(1, 50, succeeded(2)), &ctx(60));
    let s = &t.status;
    assert_eq!(s.state, Succeeded);
    for a in &s.actions {
        assert_eq!(
            a.state,
            tink_api::v1alpha2::ActionState::Succeeded,
            "{}",
            a.id
        );
        assert_eq!(a.started_at.as_ref().map(|t| t.0), Some(ts(50)));
    }
    // The earlier events arrive afterwards: nothing changes.
    for input in [
        event(1, 20, started(0)),
        event(1, 30, succeeded(0)),
        event(1, 40, started(1)),
    ] {
        assert_eq!(
            step(s, input, &ctx(61)).outcome,
            Outcome::Ignored(Ignored::Terminal)
        );
    }
}

#[test]
fn action_failure_propagates_reason_and_message_and_cancels_the_rest() {
    let t = step(&running_second(), event(1, 120, failed(1)), &ctx(120));
    let s = &t.status;
    let states: Vec<_> = s.actions.iter().map(|a| a.state.as_str()).collect();
    assert_eq!(states, ["Succeeded", "Failed", "Canceled"]);
    assert_eq!(s.actions[1].failure_reason.as_deref(), Some("ExitCode2"));
    assert_eq!(
        s.actions[1].failure_message.as_deref(),
        Some("dd: /dev/sda: no space left")
    );
    let c = s.condition(ConditionType::Succeeded).unwrap();
    assert_eq!(c.reason.as_deref(), Some("ExitCode2"));
    assert_eq!(c.message.as_deref(), Some("dd: /dev/sda: no space left"));
    assert_eq!(t.requeue_at, None);
}

#[test]
fn action_failure_without_reason_gets_defaults_and_bad_reasons_are_replaced() {
    let kind = |reason: Option<&str>| tink_workflow::EventKind::ActionFailed {
        action_id: action_ids()[0].clone(),
        reason: reason.map(String::from),
        message: None,
    };
    for (reason, want) in [
        (None, "ActionFailed"),
        (Some(""), "ActionFailed"),
        (Some("has spaces"), "ActionFailed"),
        (Some("9Lives"), "ActionFailed"),
        (Some("Timeout"), "Timeout"),
    ] {
        let s = step(&running(), event(1, 30, kind(reason)), &ctx(30)).status;
        assert_eq!(
            s.actions[0].failure_reason.as_deref(),
            Some(want),
            "{reason:?}"
        );
        assert_eq!(
            s.actions[0].failure_message.as_deref(),
            Some("action stream-image failed")
        );
    }
}

#[test]
fn long_messages_are_cut_on_a_char_boundary() {
    let kind = tink_workflow::EventKind::ActionFailed {
        action_id: action_ids()[0].clone(),
        reason: Some("Oops".into()),
        message: Some("é".repeat(40_000)),
    };
    let t = step(&running(), event(1, 30, kind), &ctx(30));
    let m = t.status.actions[0].failure_message.as_deref().unwrap();
    assert!(m.len() <= tink_workflow::MAX_MESSAGE_LEN);
    assert!(m.len() > tink_workflow::MAX_MESSAGE_LEN - 2);
    for e in &t.effects {
        if let tink_workflow::Effect::KubeEvent { message, .. } = e {
            assert!(message.len() <= tink_workflow::MAX_EVENT_MESSAGE_LEN);
        }
    }
}

#[test]
fn rejection_returns_to_pending_and_drops_the_dispatch_id() {
    let t = step(&scheduled(), event(1, 15, rejected()), &ctx(15));
    let s = &t.status;
    assert_eq!(s.state, Pending);
    assert_eq!(s.dispatch_id, None);
    assert_eq!(s.dispatch_attempts, 1);
    assert_eq!(s.agent_id.as_deref(), Some(AGENT));
    assert_eq!(s.next_attempt_at.as_ref().map(|t| t.0), Some(ts(20)));
    assert_eq!(t.requeue_at, Some(ts(20)));
    // Once the back-off passed there is nothing to wait for.
    assert_eq!(step(s, Input::Tick, &ctx(20)).requeue_at, None);
}

#[test]
fn cancellation_while_running_then_confirmation() {
    let c = step(&running(), Input::Deleted, &ctx(30));
    assert_eq!(
        c.effects[0],
        tink_workflow::Effect::PublishStop {
            agent_id: AGENT.into(),
            dispatch_id: dispatch_id(1),
            reason: tink_workflow::EventReason::Deleted,
            message: "the Workflow was deleted".into(),
        }
    );
    assert_eq!(c.requeue_at, Some(ts(150)));
    let done = step(&c.status, event(1, 40, canceled(Some(0))), &ctx(40));
    let states: Vec<_> = done
        .status
        .actions
        .iter()
        .map(|a| a.state.as_str())
        .collect();
    assert_eq!(states, ["Canceled", "Canceled", "Canceled"]);
    assert_eq!(done.status.state, Canceled);
    assert_eq!(done.requeue_at, None);
}

#[test]
fn a_recreated_workflow_ignores_the_old_objects_events() {
    // Same namespace and name, another uid: its dispatch id differs in the uid.
    let mut c = ctx(10);
    c.workflow.uid = "0b7e2e7e-1111-2222-3333-444444444444".into();
    let new = step(&pending(), dispatch(), &c).status;
    assert_ne!(new.dispatch_id.as_deref(), Some(dispatch_id(1).as_str()));
    for kind in [
        started(0),
        succeeded(2),
        failed(0),
        rejected(),
        canceled(None),
    ] {
        let t = step(&new, event(1, 20, kind), &ctx(20));
        assert_eq!(t.outcome, Outcome::Ignored(Ignored::StaleDispatch));
        assert_eq!(t.status, new);
        assert!(t.effects.is_empty());
    }
}

#[test]
fn events_from_another_agent_are_ignored_case_insensitively_matched() {
    let s = scheduled();
    let mut other = event(1, 20, started(0));
    if let Input::Agent(e) = &mut other {
        e.agent_id = Some("aa:bb:cc:dd:ee:02".into());
    }
    assert_eq!(
        step(&s, other, &ctx(20)).outcome,
        Outcome::Ignored(Ignored::OtherAgent)
    );
    let mut upper = event(1, 20, started(0));
    if let Input::Agent(e) = &mut upper {
        e.agent_id = Some(AGENT.to_uppercase());
    }
    assert_eq!(step(&s, upper, &ctx(20)).outcome, Outcome::Changed);
    // An event naming no agent never passes (the server stamps every event it accepts with
    // the agent it authenticated).
    let mut anonymous = event(1, 20, started(0));
    if let Input::Agent(e) = &mut anonymous {
        e.agent_id = None;
    }
    assert_eq!(
        step(&s, anonymous, &ctx(20)).outcome,
        Outcome::Ignored(Ignored::OtherAgent)
    );
}

#[test]
fn dispatch_fails_the_workflow_when_its_id_cannot_be_built() {
    let mut c = ctx(10);
    c.workflow.name = "n".repeat(400);
    let t = step(&pending(), dispatch(), &c);
    assert_eq!(t.status.state, Failed);
    assert_eq!(
        kinds(&t.effects),
        ["Warning:DispatchFailed", "RemoveFinalizer"]
    );
    let msg = t
        .status
        .condition(ConditionType::Succeeded)
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(msg.contains("384"), "{msg}");
}
