//! Property tests: random input sequences with duplicates, reordering, stale ids and clock
//! jumps always leave a consistent status.

mod common;

use std::time::Duration;

use common::{AGENT, UID, ts};
use jiff::Timestamp;
use proptest::prelude::*;
use tink_api::Timeout;
use tink_api::v1alpha2::{
    Action, ActionState, ConditionStatus, ConditionType, WorkflowState, WorkflowStatus,
};
use tink_workflow::{
    AgentEvent, Config, DispatchId, Effect, EventKind, Input, Outcome, StepContext, WorkflowRef,
    action_id, step, step_all,
};

#[derive(Clone, Debug)]
enum Op {
    Prepared(usize),
    RenderFailed,
    Unresolved,
    Dispatch,
    Event {
        attempt: u32,
        other_uid: bool,
        other_agent: bool,
        action: usize,
        kind: u8,
        skew: i64,
    },
    Tick,
    Deleted,
    Resume,
    /// Move the controller's clock (mostly forward, sometimes back).
    Advance(i64),
    /// Apply again an input applied earlier (a redelivery).
    Replay(usize),
}

/// Decodes one operation from a random word (cheaper to generate and shrink than a tree of
/// strategies; shrinking towards 0 gives simpler operations). Weights out of 42.
fn decode(word: u64) -> Op {
    let pick = word % 42;
    let r = word / 42;
    match pick {
        0..=1 => Op::Prepared((r % 5) as usize),
        2 => Op::RenderFailed,
        3 => Op::Unresolved,
        4..=7 => Op::Dispatch,
        8..=27 => Op::Event {
            attempt: 1 + (r % 3) as u32,
            other_uid: (r / 3).is_multiple_of(10),
            other_agent: (r / 30).is_multiple_of(20),
            action: ((r / 600) % 5) as usize,
            kind: ((r / 3000) % 5) as u8,
            skew: ((r / 15_000) % 240) as i64 - 120,
        },
        28..=30 => Op::Tick,
        31 => Op::Deleted,
        32 => Op::Resume,
        33..=37 => {
            if r.is_multiple_of(10) {
                Op::Advance(-(((r / 10) % 60) as i64))
            } else {
                Op::Advance(((r / 10) % 400) as i64)
            }
        }
        _ => Op::Replay((r % 1024) as usize),
    }
}

#[derive(Debug)]
struct Setup {
    ctx: StepContext,
    n_actions: usize,
    action_timeouts: Vec<Option<u64>>,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(None), Just(Some(0u64)), (60u64..2000).prop_map(Some)],
        1usize..=4,
        prop::collection::vec(prop::option::of(10u64..600), 4),
        30u64..400,
        30u64..400,
        0u64..60,
    )
        .prop_map(|(timeout, n, action_timeouts, sched, cancel, grace)| {
            let mut ctx = StepContext::new(
                ts(0),
                WorkflowRef::new("default", "wf-1", UID),
                timeout.map(Duration::from_secs),
            );
            ctx.config = Config {
                scheduled_timeout: Duration::from_secs(sched),
                cancelling_timeout: Duration::from_secs(cancel),
                action_timeout_grace: Duration::from_secs(grace),
                ..Config::default()
            };
            Setup {
                ctx,
                n_actions: n,
                action_timeouts,
            }
        })
}

fn make_actions(n: usize, timeouts: &[Option<u64>]) -> Vec<Action> {
    (0..n)
        .map(|i| Action {
            name: format!("action-{i}"),
            image: "busybox".into(),
            timeout: timeouts.get(i).copied().flatten().map(Timeout::from_secs),
            ..Action::default()
        })
        .collect()
}

fn to_input(op: &Op, setup: &Setup, now: Timestamp) -> Input {
    match *op {
        Op::Prepared(n) => Input::Prepared {
            // Mostly the workflow's own actions; sometimes none or another count.
            actions: make_actions(
                if n == 0 { 0 } else { setup.n_actions.max(n) },
                &setup.action_timeouts,
            ),
        },
        Op::RenderFailed => Input::RenderFailed {
            message: "template: wf:1:7: unexpected EOF".into(),
        },
        Op::Unresolved => Input::Unresolved {
            reason: "HardwareNotFound".into(),
            message: "Hardware default/m1 not found".into(),
        },
        Op::Dispatch => Input::Dispatch {
            agent_id: AGENT.into(),
        },
        Op::Event {
            attempt,
            other_uid,
            other_agent,
            action,
            kind,
            skew,
        } => {
            let uid = if other_uid { "another-uid" } else { UID };
            let id = action_id(action, &format!("action-{action}"));
            let kind = match kind {
                0 => EventKind::ActionStarted { action_id: id },
                1 => EventKind::ActionSucceeded { action_id: id },
                2 => EventKind::ActionFailed {
                    action_id: id,
                    reason: Some("ExitCode1".into()),
                    message: Some("exit status 1".into()),
                },
                3 => EventKind::WorkflowRejected {
                    reason: Some("Busy".into()),
                    message: None,
                },
                _ => EventKind::WorkflowCanceled {
                    action_id: Some(id),
                    reason: None,
                    message: None,
                },
            };
            Input::Agent(AgentEvent {
                dispatch_id: format!("default/wf-1/{uid}/{attempt}"),
                agent_id: Some(
                    if other_agent {
                        "aa:bb:cc:dd:ee:99"
                    } else {
                        AGENT
                    }
                    .into(),
                ),
                instance: None,
                at: now + jiff::SignedDuration::from_secs(skew),
                kind,
            })
        }
        Op::Tick => Input::Tick,
        Op::Deleted => Input::Deleted,
        Op::Resume => Input::Resume,
        Op::Advance(_) | Op::Replay(_) => unreachable!("handled by the driver"),
    }
}

fn all_times(s: &WorkflowStatus) -> Vec<Timestamp> {
    let mut v: Vec<Timestamp> = [&s.started_at, &s.last_transition]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .collect();
    for a in &s.actions {
        v.extend(
            [&a.started_at, &a.last_transition]
                .into_iter()
                .flatten()
                .map(|t| t.0),
        );
    }
    v.extend(
        s.conditions
            .iter()
            .filter_map(|c| c.last_transition.as_ref().map(|t| t.0)),
    );
    v
}

fn is_active(s: WorkflowState) -> bool {
    matches!(
        s,
        WorkflowState::Scheduled | WorkflowState::Running | WorkflowState::Cancelling
    )
}

/// Checks one step; returns a description of the first broken invariant.
fn check(
    prev: &WorkflowStatus,
    input: &Input,
    t: &tink_workflow::Transition,
    ctx: &StepContext,
    max_now: Timestamp,
) -> Result<(), String> {
    let s = &t.status;
    macro_rules! ensure {
        ($cond:expr, $($msg:tt)*) => {
            if !$cond {
                return Err(format!($($msg)*));
            }
        };
    }
    // Ignored inputs change nothing and do nothing.
    if let Outcome::Ignored(_) = t.outcome {
        ensure!(s == prev, "ignored input changed the status");
        ensure!(t.effects.is_empty(), "ignored input has effects");
    }
    ensure!(
        (t.outcome == Outcome::Changed) == (s != prev),
        "outcome {:?} disagrees with the status",
        t.outcome
    );
    // Terminal states are absorbing.
    if prev.state.is_terminal() {
        ensure!(s == prev, "a terminal status changed");
    }
    // Finalizer removal: exactly when an end state is first reached, or on Deleted/Resume of an
    // ended workflow; at most once, and last.
    let removes = t
        .effects
        .iter()
        .filter(|e| **e == Effect::RemoveFinalizer)
        .count();
    let first_end = !prev.state.is_terminal() && s.state.is_terminal();
    let ensure_gone = prev.state.is_terminal() && matches!(input, Input::Deleted | Input::Resume);
    ensure!(
        removes == usize::from(first_end || ensure_gone),
        "RemoveFinalizer x{removes}, first_end={first_end}"
    );
    if removes == 1 {
        ensure!(
            t.effects.last() == Some(&Effect::RemoveFinalizer),
            "RemoveFinalizer not last"
        );
    }
    if t.effects.contains(&Effect::AddFinalizer) {
        ensure!(
            !s.state.is_terminal() && s.state != WorkflowState::Cancelling,
            "AddFinalizer in {:?}",
            s.state
        );
    }
    // Action states: Succeeded* then at most one Running/Failed/Canceled then Pending/Canceled.
    let states: Vec<ActionState> = s.actions.iter().map(|a| a.state).collect();
    let first_open = states
        .iter()
        .position(|a| *a != ActionState::Succeeded)
        .unwrap_or(states.len());
    for (i, a) in states.iter().enumerate().skip(first_open + 1) {
        ensure!(
            matches!(a, ActionState::Pending | ActionState::Canceled),
            "action {i} is {a:?} after an unfinished one: {states:?}"
        );
    }
    if s.state == WorkflowState::Succeeded {
        ensure!(
            states.iter().all(|a| *a == ActionState::Succeeded),
            "Succeeded with {states:?}"
        );
    }
    if s.state.is_terminal() {
        ensure!(
            states.iter().all(|a| a.is_terminal()),
            "{:?} with unfinished actions {states:?}",
            s.state
        );
    } else {
        ensure!(
            !states
                .iter()
                .any(|a| matches!(a, ActionState::Failed | ActionState::Canceled)),
            "{:?} with {states:?}",
            s.state
        );
    }
    match s.state {
        WorkflowState::Scheduled => {
            ensure!(
                states.iter().all(|a| *a == ActionState::Pending),
                "Scheduled with {states:?}"
            );
            ensure!(s.started_at.is_none(), "Scheduled with startedAt");
        }
        WorkflowState::Running => ensure!(s.started_at.is_some(), "Running without startedAt"),
        _ => {}
    }
    // Dispatch bookkeeping.
    if is_active(s.state) {
        let id = s
            .dispatch_id
            .as_deref()
            .ok_or("active without a dispatch id")?;
        let id = DispatchId::parse(id).map_err(|e| e.to_string())?;
        ensure!(
            id.attempt() == s.dispatch_attempts,
            "attempt {} != {}",
            id.attempt(),
            s.dispatch_attempts
        );
        ensure!(
            *id.workflow() == ctx.workflow,
            "dispatch id of another object"
        );
        ensure!(
            s.agent_id.as_deref() == Some(AGENT),
            "active without the agent"
        );
        ensure!(!s.actions.is_empty(), "active without actions");
    }
    if s.state == WorkflowState::Pending {
        ensure!(s.dispatch_id.is_none(), "Pending with a dispatch id");
    }
    for e in &t.effects {
        match e {
            Effect::PublishStart {
                dispatch_id,
                agent_id,
            }
            | Effect::RepublishStart {
                dispatch_id,
                agent_id,
            } => {
                ensure!(
                    s.state == WorkflowState::Scheduled,
                    "start in {:?}",
                    s.state
                );
                ensure!(
                    Some(dispatch_id) == s.dispatch_id.as_ref() && agent_id == AGENT,
                    "start with the wrong id"
                );
            }
            Effect::PublishStop { dispatch_id, .. } => {
                ensure!(
                    Some(dispatch_id) == s.dispatch_id.as_ref(),
                    "stop with the wrong id"
                );
            }
            _ => {}
        }
    }
    // Conditions.
    let cond_status = |ty| s.condition(ty).map(|c| c.status);
    match cond_status(ConditionType::Started) {
        Some(st) => ensure!(
            (st == ConditionStatus::True) == s.started_at.is_some(),
            "Started {st:?} vs startedAt {:?}",
            s.started_at
        ),
        None => ensure!(
            *s == WorkflowStatus::default(),
            "a written status without Started"
        ),
    }
    let want = match s.state {
        WorkflowState::Succeeded => Some(ConditionStatus::True),
        WorkflowState::Failed | WorkflowState::Canceled => Some(ConditionStatus::False),
        _ => None,
    };
    ensure!(
        cond_status(ConditionType::Succeeded) == want,
        "Succeeded condition {:?} in {:?}",
        cond_status(ConditionType::Succeeded),
        s.state
    );
    for c in &s.conditions {
        if let Some(old) = prev.condition(c.type_)
            && old.status == c.status
        {
            ensure!(
                old.last_transition == c.last_transition,
                "{:?} time changed without a status change",
                c.type_
            );
        }
    }
    // Times: monotonic, whole seconds, never after the latest now seen.
    let prev_latest = all_times(prev).into_iter().max();
    let latest = all_times(s).into_iter().max();
    ensure!(
        latest >= prev_latest,
        "latest time went back: {prev_latest:?} -> {latest:?}"
    );
    for tm in all_times(s) {
        ensure!(tm <= max_now, "time {tm} after now {max_now}");
        ensure!(tm.subsec_nanosecond() == 0, "sub-second time {tm}");
    }
    if let (Some(a), Some(b)) = (&prev.last_transition, &s.last_transition) {
        ensure!(b.0 >= a.0, "lastTransitioned went back");
    }
    ensure!(
        prev.last_transition.is_none() || s.last_transition.is_some(),
        "lastTransitioned removed"
    );
    if prev.started_at.is_some() {
        ensure!(s.started_at == prev.started_at, "startedAt changed");
    }
    if prev.actions.len() == s.actions.len() {
        for (a, b) in prev.actions.iter().zip(&s.actions) {
            ensure!(a.id == b.id && a.rendered == b.rendered, "actions replaced");
            if a.started_at.is_some() {
                ensure!(b.started_at == a.started_at, "action startedAt changed");
            }
            if let (Some(x), Some(y)) = (&a.last_transition, &b.last_transition) {
                ensure!(y.0 >= x.0, "action lastTransitioned went back");
            }
            if a.state.is_terminal() {
                ensure!(a == b, "a finished action changed");
            }
        }
    } else {
        ensure!(prev.actions.is_empty(), "actions changed after preparation");
    }
    for a in &s.actions {
        if let (Some(st), Some(lt)) = (&a.started_at, &a.last_transition) {
            ensure!(st.0 <= lt.0, "action started after its last transition");
        }
        if matches!(
            a.state,
            ActionState::Running | ActionState::Succeeded | ActionState::Failed
        ) {
            ensure!(
                a.started_at.is_some(),
                "{:?} action without startedAt",
                a.state
            );
        }
    }
    // Requeue: none in end states; always one while a timer must run.
    if s.state.is_terminal() {
        ensure!(t.requeue_at.is_none(), "requeue in an end state");
    }
    if matches!(
        s.state,
        WorkflowState::Scheduled | WorkflowState::Cancelling
    ) {
        ensure!(t.requeue_at.is_some(), "no requeue in {:?}", s.state);
    }
    Ok(())
}

/// Drives one random sequence, checking every step; `observe` sees each applied step.
fn run(
    setup: &Setup,
    words: &[u64],
    mut observe: impl FnMut(&Input, &tink_workflow::Transition),
) -> Result<(), String> {
    let mut status = WorkflowStatus::default();
    let mut now = ts(0);
    let mut max_now = now;
    let mut history: Vec<Input> = Vec::new();
    for op in words.iter().map(|w| decode(*w)) {
        let input = match op {
            Op::Advance(secs) => {
                now += jiff::SignedDuration::from_secs(secs);
                max_now = max_now.max(now);
                continue;
            }
            Op::Replay(i) => match history.len() {
                0 => continue,
                n => history[i % n].clone(),
            },
            other => to_input(&other, setup, now),
        };
        let ctx = StepContext {
            now,
            ..setup.ctx.clone()
        };
        let t = step(&status, input.clone(), &ctx);
        if let Err(broken) = check(&status, &input, &t, &ctx, max_now) {
            return Err(format!(
                "{broken}\ninput: {input:?}\nbefore: {status:#?}\nafter: {:#?}\neffects: {:?}",
                t.status, t.effects
            ));
        }
        observe(&input, &t);
        history.push(input);
        status = t.status;
    }
    Ok(())
}

/// The random sequences reach every state, every ignore reason and every timeout: a guard
/// against a generator that silently stops exploring (a deterministic sample).
#[test]
fn the_generator_covers_the_state_space() {
    use std::collections::BTreeSet;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut states = BTreeSet::new();
    let mut outcomes = BTreeSet::new();
    let mut effects = BTreeSet::new();
    for case in 0..3000u64 {
        let mut ctx = StepContext::new(
            ts(0),
            WorkflowRef::new("default", "wf-1", UID),
            [None, Some(Duration::from_secs(600))][(case % 2) as usize],
        );
        ctx.config.scheduled_timeout = Duration::from_secs(120);
        ctx.config.cancelling_timeout = Duration::from_secs(120);
        let setup = Setup {
            ctx,
            n_actions: 1 + (case % 4) as usize,
            action_timeouts: vec![Some(100), None, Some(200), None],
        };
        let words: Vec<u64> = (0..1 + next() % 60).map(|_| next()).collect();
        run(&setup, &words, |_, t| {
            states.insert(t.status.state.as_str());
            outcomes.insert(format!("{:?}", t.outcome));
            for e in &t.effects {
                effects.insert(match e {
                    Effect::KubeEvent { reason, .. } => reason.to_string(),
                    Effect::PublishStop { reason, .. } => format!("Stop:{reason}"),
                    other => format!("{other:?}")
                        .split([' ', '{'])
                        .next()
                        .unwrap_or("")
                        .to_string(),
                });
            }
        })
        .unwrap();
    }
    assert_eq!(states.len(), 7, "states reached: {states:?}");
    for o in [
        "Changed",
        "Unchanged",
        "Ignored(Terminal)",
        "Ignored(WrongState)",
        "Ignored(AlreadyPrepared)",
        "Ignored(NotPrepared)",
        "Ignored(NotDue)",
        "Ignored(StaleDispatch)",
        "Ignored(OtherAgent)",
        "Ignored(UnknownAction)",
        "Ignored(Outdated)",
    ] {
        assert!(outcomes.contains(o), "{o} never happened: {outcomes:?}");
    }
    for e in [
        "AddFinalizer",
        "RemoveFinalizer",
        "PublishStart",
        "Prepared",
        "RenderFailed",
        "NoActions",
        "Waiting",
        "Scheduled",
        "Rejected",
        "Running",
        "Succeeded",
        "ActionFailed",
        "ScheduledTimeout",
        "WorkflowTimeout",
        "ActionTimeout",
        "AgentCanceled",
        "Cancelling",
        "Canceled",
        "CancelTimeout",
        "Stop:Deleted",
        "Stop:ScheduledTimeout",
        "Stop:WorkflowTimeout",
        "Stop:ActionTimeout",
    ] {
        assert!(effects.contains(e), "{e} never emitted: {effects:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_the_status_consistent(
        setup in setup(),
        words in prop::collection::vec(any::<u64>(), 1..60),
    ) {
        run(&setup, &words, |_, _| {}).map_err(TestCaseError::fail)?;
    }

    /// A complete run of one dispatch, its events duplicated and shuffled, always ends the
    /// same way: Succeeded with every action succeeded, or Failed at the failing action.
    #[test]
    fn any_order_of_a_run_gives_the_same_end(
        n in 1usize..=5,
        fail_at in prop::option::of(0usize..5),
        dups in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        order in any::<u64>(),
    ) {
        let fail_at = fail_at.filter(|k| *k < n);
        let mut ctx = StepContext::new(ts(0), WorkflowRef::new("default", "wf-1", UID), None);
        let actions = make_actions(n, &[]);
        let mut s = step(&WorkflowStatus::default(), Input::Prepared { actions }, &ctx).status;
        s = step(&s, Input::Dispatch { agent_id: AGENT.into() }, &ctx).status;
        let id = s.dispatch_id.clone().unwrap();
        let ev = |kind| Input::Agent(AgentEvent { dispatch_id: id.clone(), agent_id: Some(AGENT.into()), instance: None, at: ts(1), kind });
        let mut events = Vec::new();
        for i in 0..n {
            let aid = action_id(i, &format!("action-{i}"));
            events.push(ev(EventKind::ActionStarted { action_id: aid.clone() }));
            if fail_at == Some(i) {
                events.push(ev(EventKind::ActionFailed { action_id: aid, reason: Some("Boom".into()), message: None }));
                break;
            }
            events.push(ev(EventKind::ActionSucceeded { action_id: aid }));
        }
        for d in &dups {
            let e = events[d.index(events.len())].clone();
            events.push(e);
        }
        // A deterministic shuffle from `order`.
        let mut seed = order | 1;
        for i in (1..events.len()).rev() {
            seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
            events.swap(i, (seed % (i as u64 + 1)) as usize);
        }
        ctx.now = ts(100);
        let end = step_all(&s, events, &ctx).status;
        match fail_at {
            None => {
                prop_assert_eq!(end.state, WorkflowState::Succeeded);
                prop_assert!(end.actions.iter().all(|a| a.state == ActionState::Succeeded));
            }
            Some(k) => {
                prop_assert_eq!(end.state, WorkflowState::Failed);
                for (i, a) in end.actions.iter().enumerate() {
                    let want = match i.cmp(&k) {
                        std::cmp::Ordering::Less => ActionState::Succeeded,
                        std::cmp::Ordering::Equal => ActionState::Failed,
                        std::cmp::Ordering::Greater => ActionState::Canceled,
                    };
                    prop_assert_eq!(a.state, want, "action {}", i);
                }
                prop_assert_eq!(
                    end.condition(ConditionType::Succeeded).and_then(|c| c.reason.clone()),
                    Some("Boom".to_string())
                );
            }
        }
    }
}
