//! The boot inputs of `spec.bootOptions`: progress recorded in any state (the after-success
//! steps run on a `Succeeded` Workflow), a failure before dispatch fails a `Pending` one.

mod common;

use common::*;
use tink_api::v1alpha2::{
    BootJobStatus, BootOptionsStatus, ConditionSeverity, ConditionStatus, ConditionType,
    WorkflowState,
};
use tink_workflow::{
    BootCondition, BootReason, Effect, EventReason, EventType, Ignored, Input, Outcome, step,
};

fn job_running() -> (BootOptionsStatus, BootCondition) {
    let mut record = BootOptionsStatus::default();
    record.allow_netboot.toggled_true = true;
    record.jobs.insert(
        "netboot-wf".into(),
        BootJobStatus {
            uid: Some("u-1".into()),
            ..BootJobStatus::default()
        },
    );
    let c = BootCondition {
        type_: ConditionType::BootPrepared,
        status: ConditionStatus::False,
        severity: ConditionSeverity::Info,
        reason: BootReason::BootJobRunning,
        message: "BMC Job netboot-wf runs".into(),
    };
    (record, c)
}

fn boot_events(t: &tink_workflow::Transition) -> Vec<(EventType, &'static str)> {
    t.effects
        .iter()
        .filter_map(|e| match e {
            Effect::KubeEvent { type_, reason, .. } => Some((*type_, reason.as_str())),
            _ => None,
        })
        .collect()
}

#[test]
fn progress_is_recorded_on_a_pending_workflow_and_announced_once() {
    let (record, c) = job_running();
    let t = apply(
        &pending(),
        Input::Boot {
            record: record.clone(),
            conditions: vec![c.clone()],
        },
        5,
    );
    assert_eq!(t.outcome, Outcome::Changed);
    assert_eq!(t.status.state, WorkflowState::Pending);
    assert_eq!(t.status.boot_options, record);
    let cond = t
        .status
        .condition(ConditionType::BootPrepared)
        .expect("BootPrepared");
    assert_eq!(cond.reason.as_deref(), Some("BootJobRunning"));
    assert_eq!(
        boot_events(&t),
        [(
            EventType::Normal,
            EventReason::Boot(BootReason::BootJobRunning).as_str()
        )]
    );
    // The same progress again changes nothing and announces nothing.
    let again = step(
        &t.status,
        Input::Boot {
            record,
            conditions: vec![c],
        },
        &ctx(6),
    );
    assert_ne!(again.outcome, Outcome::Changed);
    assert!(boot_events(&again).is_empty());
}

#[test]
fn a_failed_boot_fails_a_pending_workflow_with_the_providers_reason() {
    let t = apply(
        &pending(),
        Input::BootFailed {
            reason: BootReason::BootJobFailed,
            message: "BMC Job netboot-wf failed: 401 Unauthorized".into(),
        },
        7,
    );
    assert_eq!(t.status.state, WorkflowState::Failed);
    let succeeded = t
        .status
        .condition(ConditionType::Succeeded)
        .expect("Succeeded");
    assert_eq!(succeeded.reason.as_deref(), Some("BootJobFailed"));
    assert!(
        succeeded
            .message
            .as_deref()
            .is_some_and(|m| m.contains("401 Unauthorized"))
    );
    let boot = t
        .status
        .condition(ConditionType::BootPrepared)
        .expect("BootPrepared");
    assert_eq!(boot.status, ConditionStatus::False);
    assert_eq!(boot.severity, ConditionSeverity::Error);
    assert!(t.effects.contains(&Effect::RemoveFinalizer));
    assert_eq!(boot_events(&t), [(EventType::Warning, "BootJobFailed")]);
    // Not once the Workflow left Pending: a running Workflow is never failed by it.
    let r = step(
        &running(),
        Input::BootFailed {
            reason: BootReason::BootJobTimeout,
            message: "late".into(),
        },
        &ctx(30),
    );
    assert_eq!(r.outcome, Outcome::Ignored(Ignored::WrongState));
}

#[test]
fn after_success_steps_are_recorded_on_a_succeeded_workflow_and_change_nothing_else() {
    let done = succeeded_wf();
    let mut record = done.boot_options.clone();
    record.allow_netboot.toggled_false = true;
    let t = apply(
        &done,
        Input::Boot {
            record: record.clone(),
            conditions: vec![BootCondition {
                type_: ConditionType::NetbootAllowed,
                status: ConditionStatus::False,
                severity: ConditionSeverity::Info,
                reason: BootReason::NetbootDisallowed,
                message: "netboot disallowed".into(),
            }],
        },
        70,
    );
    assert_eq!(t.status.state, WorkflowState::Succeeded);
    assert_eq!(t.status.boot_options, record);
    assert_eq!(t.status.actions, done.actions);
    assert_eq!(
        t.status.condition(ConditionType::Succeeded),
        done.condition(ConditionType::Succeeded)
    );
    assert!(!t.effects.iter().any(|e| matches!(
        e,
        Effect::PublishStart { .. } | Effect::PublishStop { .. } | Effect::RemoveFinalizer
    )));
    // Other inputs stay ignored on the terminal Workflow.
    assert_eq!(
        step(&t.status, Input::Tick, &ctx(80)).outcome,
        Outcome::Ignored(Ignored::Terminal)
    );
}
