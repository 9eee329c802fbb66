//! The Workflow reconciler: the IO shell around `tink_workflow::step_all`.
//!
//! Read (cache, or the API after a conflict) -> choose the inputs (resume, deletion, the
//! rendered Template, a dispatch when the machine is free, the supervision tick) -> step ->
//! write the status if it changed -> carry out the effects -> requeue at the next deadline.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tink_api::v1alpha2::{Workflow, WorkflowState};
use tink_workflow::{Input, StepContext, agent_verdict, step_all};
use tracing::{Instrument as _, debug};

use crate::boot::{self, Phase};
use crate::dispatch::{BootTurn, Choice, Claim};
use crate::error::{StepError, report};
use crate::keys::{has_finalizer, key_of};
use crate::render;
use crate::term::{Failed, Plan, Stepped, Term};

/// How often a reconcile re-reads and retries after a write conflict before it gives up and
/// requeues.
const CONFLICT_RETRIES: usize = 5;

/// Reconciles one Workflow.
pub(crate) async fn reconcile(obj: Arc<Workflow>, term: Arc<Term>) -> Result<Action, StepError> {
    let key = key_of(&obj);
    let uid = obj.uid().unwrap_or_default();
    let span = tracing::info_span!("reconcile", workflow = %key);
    tink_telemetry::propagation::set_parent(&span, crate::trace::workflow_context(&uid));
    let woken_by_resync = term.wake.take_resync(&key);
    let result = async {
        let first = term.ledger.fresh(&obj);
        let stepped = term
            .step_and_apply(&key, Some(first), CONFLICT_RETRIES, |w, _| decide(&term, w))
            .await
            .map_err(|Failed { error, .. }| error)?;
        match stepped {
            Stepped::Applied {
                transition: t,
                written,
                value: (ctx, claim, boot_wait),
            } => {
                if claim.is_some() && woken_by_resync {
                    term.metrics.resync_dispatches.inc();
                    tracing::warn!(workflow = %key_of(&written), "dispatched by the periodic resync: a wake-up was lost");
                }
                drop(claim);
                if let Some(verdict) = agent_verdict(&t.status, &ctx) {
                    term.effects.publish_verdict(&written, &verdict).await?;
                }
                Ok(requeue(t.requeue_at, boot_wait))
            }
            Stepped::Done(action) => Ok(action),
            Stepped::Gone => Ok(Action::await_change()),
            // The last conflict's Workflow is read once more, so the next look starts from it.
            Stepped::Exhausted => match term.ledger.read(&key).await? {
                Some(_) => Ok(Action::requeue(Duration::from_millis(200))),
                None => Ok(Action::await_change()),
            },
        }
    }
    .instrument(span)
    .await;
    if result.is_err() {
        // The status may be written while an effect was not carried out: the next look
        // resumes (re-emits the effects, all idempotent).
        term.ledger.forget(&uid);
    }
    term.metrics.reconciled(result.is_ok());
    result
}

/// What to do after an error: count it and try again soon.
pub(crate) fn error_policy(_obj: Arc<Workflow>, e: &StepError, term: Arc<Term>) -> Action {
    report(&term.metrics, "reconcile failed; retrying", e);
    Action::requeue(Duration::from_secs(1))
}

/// When to look again after a transition: at its next deadline, or sooner when a boot step
/// waits for its BMC Job (`boot_wait`).
fn requeue(at: Option<Timestamp>, boot_wait: Option<Duration>) -> Action {
    let deadline = at.map(|at| {
        let wait = Timestamp::now().duration_until(at);
        // Whole-second deadlines: a little slack so the tick lands after them.
        Duration::try_from(wait).unwrap_or_default() + Duration::from_millis(20)
    });
    match (deadline, boot_wait) {
        (Some(a), Some(b)) => Action::requeue(a.min(b)),
        (Some(a), None) | (None, Some(a)) => Action::requeue(a),
        (None, None) => Action::await_change(),
    }
}

/// What a reconcile hands back with the written Workflow: the step's context (for the
/// verdict), the claim on the machine of a dispatch (held until the status is written), and
/// how soon to look again for a running boot Job.
type Decided<'a> = (StepContext, Option<Claim<'a>>, Option<Duration>);

/// How soon an active Workflow is looked at again while the events backlog of the term is
/// still being applied.
const BACKLOG_WAIT: Duration = Duration::from_millis(500);

/// What the transition of `w` is (see [`Decided`]).
async fn decide(term: &Term, w: Arc<Workflow>) -> Result<Plan<Decided<'_>, Action>, StepError> {
    let now = Timestamp::now();
    let status = w.status.clone().unwrap_or_default();
    let uid = w.uid().unwrap_or_default();
    if status.state == WorkflowState::Succeeded && !boot::finished(&w, &status) {
        // The steps after success (spec.bootOptions): netboot off, eject, postActions.
        let namespace = w.namespace().unwrap_or_default();
        let hw_ref = ObjectRef::new(&w.spec.hardware_ref.name).within(&namespace);
        if let Some(hw) = term.hardware.get(&hw_ref) {
            let progress = term
                .boot
                .advance(&w, &hw, &status, Phase::Finish, now)
                .await?;
            if !progress.inputs.is_empty() {
                let ctx = term.step_context(&w, now);
                let t = step_all(&status, progress.inputs, &ctx);
                return Ok(Plan::Apply(t, (ctx, None, progress.wait)));
            }
            if let Some(wait) = progress.wait {
                return Ok(Plan::Done(Action::requeue(wait)));
            }
        }
    }
    if status.state.is_terminal() {
        if has_finalizer(&w) {
            term.writes.remove_finalizer(&w).await?;
        }
        return Ok(Plan::Done(Action::await_change()));
    }
    let active = matches!(
        status.state,
        WorkflowState::Scheduled | WorkflowState::Running | WorkflowState::Cancelling
    );
    if active && !term.backlog_applied() {
        // Events stored while no controller ran may end this Workflow: no resume, timeout or
        // verdict acts on it before they are applied.
        return Ok(Plan::Done(Action::requeue(BACKLOG_WAIT)));
    }
    let ctx = term.step_context(&w, now);
    let mut inputs = Vec::with_capacity(5);
    let deleting = w.metadata.deletion_timestamp.is_some();
    if deleting {
        // A start the agent never received is withdrawn from its queue rather than followed
        // by a stop; the stop is for what may have been delivered.
        if status.state == WorkflowState::Scheduled
            && status.received_at.is_none()
            && term.effects.withdraw(&status).await?
        {
            inputs.push(Input::Withdrawn);
        }
        // Deleted before Resume: a resumed Workflow being deleted repeats the stop, never the
        // start.
        inputs.push(Input::Deleted);
    }
    if term.ledger.first_look(&uid) {
        inputs.push(Input::Resume);
    }
    if !deleting && status.state == WorkflowState::Pending && status.actions.is_empty() {
        inputs.push(prepare(term, &w).await);
    }
    inputs.push(Input::Tick);
    let mut t = step_all(&status, inputs.clone(), &ctx);

    // Dispatch in the same status write as the preparation when the machine is free; before
    // it, the boot steps of spec.bootOptions (in the same write when they are done at once).
    let mut claim = None;
    let mut boot_wait = None;
    let due = t.status.next_attempt_at.as_ref().is_none_or(|n| n.0 <= now);
    let runnable = |t: &tink_workflow::Transition| {
        !deleting && t.status.state == WorkflowState::Pending && !t.status.actions.is_empty()
    };
    let mut booted = boot::prepared(&w, &t.status);
    if runnable(&t) && due && !booted {
        match term.boot_turn(&w, &t.status, now) {
            BootTurn::Mine(hw) => {
                let progress = term
                    .boot
                    .advance(&w, &hw, &t.status, Phase::Prepare, now)
                    .await?;
                if !progress.inputs.is_empty() {
                    let tick = inputs.len() - 1;
                    for (i, input) in progress.inputs.into_iter().enumerate() {
                        inputs.insert(tick + i, input);
                    }
                    t = step_all(&status, inputs.clone(), &ctx);
                }
                booted = progress.done;
                boot_wait = progress.wait;
            }
            BootTurn::Wait => {}
            BootTurn::Busy => return Ok(Plan::Done(Action::requeue(Duration::from_millis(200)))),
        }
    }
    if runnable(&t) && due && booted {
        match term.choose_agent(&w, &t.status, now) {
            Choice::Go(agent_id, c) => {
                let tick = inputs.len() - 1;
                inputs.insert(tick, Input::Dispatch { agent_id });
                t = step_all(&status, inputs, &ctx);
                claim = Some(c);
            }
            Choice::Wait => {}
            // Another dispatch to the same machine is being written: look again shortly.
            Choice::Busy => return Ok(Plan::Done(Action::requeue(Duration::from_millis(200)))),
        }
    }
    debug!(state = %t.status.state, outcome = ?t.outcome, effects = t.effects.len(), "stepped");
    Ok(Plan::Apply(t, (ctx, claim, boot_wait)))
}

/// The preparation input: the rendered actions, a render failure, or what is missing.
///
/// Rendering runs on the blocking pool: a Template may legitimately take up to the engine's
/// step limit, and that must not stall the reconcilers and consumers sharing the async workers.
async fn prepare(term: &Term, w: &Workflow) -> Input {
    let namespace = w.namespace().unwrap_or_default();
    let template_name = &w.spec.template_ref.name;
    let hardware_name = &w.spec.hardware_ref.name;
    let Some(template) = term
        .templates
        .get(&ObjectRef::new(template_name).within(&namespace))
    else {
        return Input::Unresolved {
            reason: "TemplateNotFound".into(),
            message: format!("waiting for Template {namespace}/{template_name}"),
        };
    };
    let Some(hardware) = term
        .hardware
        .get(&ObjectRef::new(hardware_name).within(&namespace))
    else {
        return Input::Unresolved {
            reason: "HardwareNotFound".into(),
            message: format!("waiting for Hardware {namespace}/{hardware_name}"),
        };
    };
    if !hardware.spec.approved() {
        return Input::Unresolved {
            reason: "HardwareNotApproved".into(),
            message: format!(
                "Hardware {namespace}/{hardware_name} is a discovered machine waiting for approval (spec.discovery.approved; `tinkctl hardware approve {hardware_name}`)"
            ),
        };
    }
    let span = tracing::info_span!("render", template = %template_name);
    let data = render::template_data(w, &hardware);
    let spec = template.spec.clone();
    let rendered = tokio::task::spawn_blocking(move || {
        let _span = span.entered();
        render::render_actions(&spec, &data).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|join| Err(format!("the template renderer stopped: {join}")));
    match rendered.and_then(|actions| crate::limits::check(&actions).map(|()| actions)) {
        Ok(actions) => Input::Prepared { actions },
        Err(message) => {
            term.metrics.error("render");
            Input::RenderFailed { message }
        }
    }
}
