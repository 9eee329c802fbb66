//! The Workflow state machine: one pure function from (status, input) to (status, effects,
//! next deadline).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tink_api::v1alpha2::{
    ActionState, ActionStatus, Condition, ConditionSeverity, ConditionStatus, ConditionType,
    WorkflowState, WorkflowStatus,
};

use crate::config::StepContext;
use crate::effect::{Effect, EventReason, EventType};
use crate::id::{DispatchId, action_id};
use crate::input::{AgentEvent, BootCondition, BootReason, EventKind, Input};

/// The longest message kept in a condition or an action's `failureMessage`, in bytes (the
/// limit of `metav1.Condition.message`). Longer messages (from agents, render errors) are cut.
pub const MAX_MESSAGE_LEN: usize = 32 * 1024;

/// The longest Kubernetes Event message produced, in bytes (the `events.k8s.io` note limit).
pub const MAX_EVENT_MESSAGE_LEN: usize = 1024;

/// The longest failure reason kept from an agent, in bytes.
pub const MAX_REASON_LEN: usize = 128;

/// The reason of a `WorkflowRejected` for a dispatch the agent already ran or is running: it
/// never causes another attempt.
pub const REASON_ALREADY_RUN: &str = "AlreadyRun";

/// The result of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The new status. Write it (when [`Transition::status_changed`]) before carrying out the
    /// effects.
    pub status: WorkflowStatus,
    /// What to do after the status is written, in order.
    pub effects: Vec<Effect>,
    /// When the controller must step this Workflow again with [`Input::Tick`] (a supervision
    /// deadline or the end of a back-off); `None`: only when something happens.
    pub requeue_at: Option<Timestamp>,
    /// Whether the status changed, and if the input was ignored, why.
    pub outcome: Outcome,
}

impl Transition {
    /// Whether the status must be written.
    pub fn status_changed(&self) -> bool {
        self.outcome == Outcome::Changed
    }
}

/// What a step did with its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The status changed.
    Changed,
    /// The input applies but changes nothing in the status (a tick before any deadline, a
    /// resume, a deletion of a finished Workflow); there may be effects.
    Unchanged,
    /// The input was discarded; no status change and no effects.
    Ignored(Ignored),
}

/// Why an input was discarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ignored {
    /// The Workflow already reached an end state.
    Terminal,
    /// The input does not apply in the current state (e.g. a rejection while `Running`, a
    /// dispatch of a `Scheduled` Workflow).
    WrongState,
    /// The Workflow was already prepared (or failed to render).
    AlreadyPrepared,
    /// Dispatch of a Workflow that has no actions yet.
    NotPrepared,
    /// Dispatch before `status.nextAttemptAt`.
    NotDue,
    /// Dispatch to an empty agent id.
    NoAgent,
    /// The event's dispatch id is not `status.dispatchId`: another attempt, or another object
    /// of the same name.
    StaleDispatch,
    /// The event comes from another agent than the one the Workflow is dispatched to, or names
    /// no agent.
    OtherAgent,
    /// The event names an action the Workflow does not have.
    UnknownAction,
    /// The event is behind the status: a duplicate, or late (the action already finished, or
    /// a later action already started).
    Outdated,
}

/// Applies one input to a Workflow status.
///
/// Pure: no IO, no clock (the time is `ctx.now`). Terminal states are absorbing; duplicate,
/// late, reordered and stale inputs change nothing. Times written are whole seconds (what the
/// API server keeps) and never go backwards. See the crate documentation for the table.
pub fn step(status: &WorkflowStatus, input: Input, ctx: &StepContext) -> Transition {
    let mut m = Machine::new(status, ctx);
    if status.state.is_terminal() {
        match input {
            // The object may still carry the finalizer if the step that ended it crashed before
            // removing it, or the user added it back: remove it, change nothing else.
            Input::Deleted | Input::Resume => m.effects.push(Effect::RemoveFinalizer),
            // The after-success boot steps.
            Input::Boot { record, conditions } => m.boot(record, conditions),
            _ => m.ignore(Ignored::Terminal),
        }
        return m.finish();
    }
    match input {
        Input::Prepared { actions } => m.prepared(actions),
        Input::RenderFailed { message } => m.render_failed(&message),
        Input::Unresolved { reason, message } => m.unresolved(&reason, &message),
        Input::Dispatch { agent_id } => m.dispatch(agent_id),
        Input::Agent(event) => m.agent_event(event),
        Input::Tick => m.tick(),
        Input::Deleted => m.deleted(),
        Input::Withdrawn => m.withdrawn(),
        Input::Resume => m.resume(),
        Input::Boot { record, conditions } => m.boot(record, conditions),
        Input::BootFailed { reason, message } => m.boot_failed(reason, &message),
    }
    m.finish()
}

/// Applies several inputs of one Workflow in order and returns one transition: the final
/// status (one write), the effects of every step (identical effects once; `RemoveFinalizer`
/// last, and then no `AddFinalizer`) and the final deadline. For the controller's coalescing of a batch of events.
///
/// The outcome is `Changed` when the final status differs from `status`; otherwise
/// `Unchanged` if any step applied, or the last step's `Ignored` reason if all were ignored.
pub fn step_all(
    status: &WorkflowStatus,
    inputs: impl IntoIterator<Item = Input>,
    ctx: &StepContext,
) -> Transition {
    let mut current = status.clone();
    let mut effects: Vec<Effect> = Vec::new();
    let mut remove_finalizer = false;
    let mut any_applied = false;
    let mut last_ignored = None;
    for input in inputs {
        let t = step(&current, input, ctx);
        match t.outcome {
            Outcome::Ignored(why) => last_ignored = Some(why),
            Outcome::Changed | Outcome::Unchanged => any_applied = true,
        }
        for effect in t.effects {
            if effect == Effect::RemoveFinalizer {
                remove_finalizer = true;
            } else if !effects.contains(&effect) {
                effects.push(effect);
            }
        }
        current = t.status;
    }
    if remove_finalizer {
        // The batch ends with the finalizer gone: adding it first would be a wasted write (and
        // is refused on an object being deleted).
        effects.retain(|e| *e != Effect::AddFinalizer);
        effects.push(Effect::RemoveFinalizer);
    }
    let outcome = if current != *status {
        Outcome::Changed
    } else {
        match last_ignored {
            Some(why) if !any_applied => Outcome::Ignored(why),
            _ => Outcome::Unchanged,
        }
    };
    let requeue_at = next_deadline(&current, ctx);
    Transition {
        status: current,
        effects,
        requeue_at,
        outcome,
    }
}

/// When the controller must next look at this Workflow without any event: the end of the
/// rejection back-off (`Pending`), the scheduled timeout (`Scheduled`), the earlier of the
/// workflow timeout and the running action's timeout plus grace (`Running`), the cancelling
/// timeout (`Cancelling`); `None` in end states or when no timer runs.
pub fn next_deadline(status: &WorkflowStatus, ctx: &StepContext) -> Option<Timestamp> {
    match status.state {
        WorkflowState::Pending => status
            .next_attempt_at
            .as_ref()
            .map(|t| t.0)
            .filter(|t| *t > ctx.now),
        // Until the agent confirms the dispatch, the scheduled timeout; after it, the workflow
        // timeout (counted from the receipt) and the agent's loss.
        WorkflowState::Scheduled if status.received_at.is_none() => status
            .last_transition
            .as_ref()
            .map(|t| add(t.0, ctx.config.scheduled_timeout)),
        WorkflowState::Scheduled => earliest(
            workflow_deadline(status, ctx),
            agent_lost_deadline(status, ctx),
        ),
        WorkflowState::Running => earliest(
            earliest(
                workflow_deadline(status, ctx),
                action_deadline(status, ctx).map(|(_, t)| t),
            ),
            agent_lost_deadline(status, ctx),
        ),
        WorkflowState::Cancelling => status
            .last_transition
            .as_ref()
            .map(|t| add(t.0, ctx.config.cancelling_timeout)),
        WorkflowState::Succeeded | WorkflowState::Failed | WorkflowState::Canceled => None,
    }
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The workflow timeout, counted from the first action's start or, before it, from the
/// agent's receipt of the dispatch.
fn workflow_deadline(status: &WorkflowStatus, ctx: &StepContext) -> Option<Timestamp> {
    let limit = ctx.timeout.filter(|d| !d.is_zero())?;
    let from = status.started_at.as_ref().or(status.received_at.as_ref())?;
    Some(add(from.0, limit))
}

/// When the agent running the workflow counts as lost: its last sign of life plus
/// [`crate::Config::agent_lost_after`]; `None` when the agent has not confirmed the dispatch
/// (it may simply be offline with the command queued) or nothing is known of it.
fn agent_lost_deadline(status: &WorkflowStatus, ctx: &StepContext) -> Option<Timestamp> {
    status.received_at.as_ref()?;
    let seen = ctx.agent.as_ref()?;
    Some(add(seen.last_seen, ctx.config.agent_lost_after))
}

/// What the controller must conclude about the agent of an active Workflow: it restarted (a
/// process with another instance id holds its stream) or it is lost (no sign of life for
/// [`crate::Config::agent_lost_after`]). `None` while neither holds.
///
/// The verdict is an event to publish on the dispatch's events subject, *not* a status change:
/// JetStream orders it after every event the agent stored before, so a workflow that actually
/// finished is applied first and the verdict then changes nothing. Pure; see
/// [`Verdict::event`].
pub fn agent_verdict(status: &WorkflowStatus, ctx: &StepContext) -> Option<Verdict> {
    let active = match status.state {
        WorkflowState::Scheduled => status.received_at.is_some(),
        WorkflowState::Running | WorkflowState::Cancelling => true,
        _ => false,
    };
    if !active {
        return None;
    }
    let dispatch_id = status.dispatch_id.clone()?;
    let agent = status.agent_id.as_deref().unwrap_or("<unknown>");
    let seen = ctx.agent.as_ref()?;
    let (reason, message) = match (&status.agent_instance, &seen.instance) {
        (Some(old), Some(new)) if old != new => (
            VerdictReason::AgentRestarted,
            format!(
                "agent {agent} restarted while the workflow was {} (instance {old} received it; instance {new} is connected now)",
                status.state.as_str().to_lowercase()
            ),
        ),
        _ if status.state != WorkflowState::Cancelling
            && ctx.now >= add(seen.last_seen, ctx.config.agent_lost_after) =>
        {
            (
                VerdictReason::AgentLost,
                format!(
                    "agent {agent} has not been connected since {} (longer than {})",
                    whole_seconds(seen.last_seen),
                    human(ctx.config.agent_lost_after)
                ),
            )
        }
        _ => return None,
    };
    let action_id = status
        .actions
        .iter()
        .find(|a| a.state == ActionState::Running)
        .or_else(|| status.actions.iter().find(|a| !a.state.is_terminal()))
        .map(|a| a.id.clone());
    Some(Verdict {
        dispatch_id,
        agent_id: status.agent_id.clone(),
        reason,
        message,
        action_id,
        cancelling: status.state == WorkflowState::Cancelling,
    })
}

/// Why the controller fails a Workflow on its agent's behalf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerdictReason {
    /// Another process of the agent holds its stream: the one that ran the workflow is gone.
    AgentRestarted,
    /// The agent has not been connected for longer than the configured limit.
    AgentLost,
}

impl VerdictReason {
    /// The UpperCamelCase reason written on the action and the `Succeeded` condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AgentRestarted => "AgentRestarted",
            Self::AgentLost => "AgentLost",
        }
    }
}

/// A conclusion about a Workflow's agent, to publish as an event of its dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The dispatch the verdict is about.
    pub dispatch_id: String,
    /// The agent the workflow is dispatched to (the event carries it, as the agent's would).
    pub agent_id: Option<String>,
    /// Why.
    pub reason: VerdictReason,
    /// A human readable message.
    pub message: String,
    /// The action to fail: the running one, else the first unfinished.
    pub action_id: Option<String>,
    /// The workflow was being canceled: the verdict confirms the cancellation instead.
    pub cancelling: bool,
}

impl Verdict {
    /// The event that carries the verdict: `ActionFailed` (reason `AgentRestarted` or
    /// `AgentLost`) for a running workflow, `WorkflowCanceled` for one being canceled.
    pub fn event(&self, at: Timestamp) -> AgentEvent {
        let reason = Some(self.reason.as_str().to_string());
        let message = Some(self.message.clone());
        let kind = match (&self.action_id, self.cancelling) {
            (Some(action_id), false) => EventKind::ActionFailed {
                action_id: action_id.clone(),
                reason,
                message,
            },
            (action_id, _) => EventKind::WorkflowCanceled {
                action_id: action_id.clone(),
                reason,
                message,
            },
        };
        AgentEvent {
            dispatch_id: self.dispatch_id.clone(),
            agent_id: self.agent_id.clone(),
            instance: None,
            at,
            kind,
        }
    }
}

/// The running action's index and the time its timeout (plus grace) trips.
fn action_deadline(status: &WorkflowStatus, ctx: &StepContext) -> Option<(usize, Timestamp)> {
    let (i, action) = status
        .actions
        .iter()
        .enumerate()
        .find(|(_, a)| a.state == ActionState::Running)?;
    let limit = action.timeout_limit()?;
    let started = action.started_at.as_ref()?.0;
    Some((i, add(add(started, limit), ctx.config.action_timeout_grace)))
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

/// Truncates to whole seconds, what `metav1.Time` keeps on the wire.
fn whole_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// The latest time written anywhere in the status; new times never go before it.
fn latest_time(status: &WorkflowStatus) -> Option<Timestamp> {
    let workflow = [&status.started_at, &status.last_transition];
    let actions = status
        .actions
        .iter()
        .flat_map(|a| [&a.started_at, &a.last_transition]);
    let conditions = status.conditions.iter().map(|c| &c.last_transition);
    workflow
        .into_iter()
        .chain(actions)
        .chain(conditions)
        .filter_map(|t| t.as_ref().map(|t| t.0))
        .max()
}

fn human(d: Duration) -> String {
    tink_api::Timeout::from_duration(d).to_string()
}

fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// An agent-supplied reason if it is a plausible CamelCase word, else `fallback`.
fn clean_reason(reason: Option<&str>, fallback: &str) -> String {
    match reason {
        Some(r)
            if !r.is_empty()
                && r.len() <= MAX_REASON_LEN
                && r.starts_with(|c: char| c.is_ascii_alphabetic())
                && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            r.to_string()
        }
        _ => fallback.to_string(),
    }
}

/// The work area of one step.
struct Machine<'a> {
    old: &'a WorkflowStatus,
    new: WorkflowStatus,
    ctx: &'a StepContext,
    effects: Vec<Effect>,
    ignored: Option<Ignored>,
    /// The floor for new times: the latest time already in the status.
    floor: Option<Timestamp>,
}

impl<'a> Machine<'a> {
    fn new(old: &'a WorkflowStatus, ctx: &'a StepContext) -> Self {
        Self {
            old,
            new: old.clone(),
            ctx,
            effects: Vec::new(),
            ignored: None,
            floor: latest_time(old),
        }
    }

    fn ignore(&mut self, why: Ignored) {
        self.ignored = Some(why);
    }

    /// The time of a transition caused by the controller itself.
    fn now(&self) -> Timestamp {
        self.clamp(self.ctx.now)
    }

    /// The time of a transition caused by an event at `at`: never after `now`, never before
    /// anything already recorded.
    fn event_time(&self, at: Timestamp) -> Timestamp {
        self.clamp(at.min(self.ctx.now))
    }

    fn clamp(&self, t: Timestamp) -> Timestamp {
        let t = whole_seconds(t);
        match self.floor {
            Some(floor) if floor > t => floor,
            _ => t,
        }
    }

    fn agent(&self) -> &str {
        self.new.agent_id.as_deref().unwrap_or("<unknown>")
    }

    fn event(&mut self, type_: EventType, reason: EventReason, message: impl Into<String>) {
        self.effects.push(Effect::KubeEvent {
            type_,
            reason,
            message: cut(message.into(), MAX_EVENT_MESSAGE_LEN),
        });
    }

    fn set_condition(
        &mut self,
        type_: ConditionType,
        status: ConditionStatus,
        severity: ConditionSeverity,
        reason: &str,
        message: &str,
        t: Timestamp,
    ) {
        let cond = Condition::new(type_, status, severity, Time(t))
            .with_reason(reason, cut(message.to_string(), MAX_MESSAGE_LEN));
        self.new.set_condition(cond);
    }

    fn set_state(&mut self, state: WorkflowState, t: Timestamp) {
        if self.new.state != state {
            self.new.state = state;
            self.new.last_transition = Some(Time(t));
        }
    }

    fn stop(&mut self, reason: EventReason, message: &str) {
        if let (Some(agent_id), Some(dispatch_id)) =
            (self.new.agent_id.clone(), self.new.dispatch_id.clone())
        {
            self.effects.push(Effect::PublishStop {
                agent_id,
                dispatch_id,
                reason,
                message: cut(message.to_string(), MAX_EVENT_MESSAGE_LEN),
            });
        }
    }

    /// Marks every unfinished action `Canceled`.
    fn cancel_unfinished_actions(&mut self, t: Timestamp) {
        for a in &mut self.new.actions {
            if !a.state.is_terminal() {
                a.state = ActionState::Canceled;
                a.last_transition = Some(Time(t));
            }
        }
    }

    /// Enters `Failed`: unfinished actions canceled, `Succeeded=False/Error` with the reason and
    /// message, a Warning event, the finalizer removed. Effects pushed before this call (a stop
    /// command) stay before the finalizer removal.
    fn fail(&mut self, reason: &str, event: EventReason, message: &str, t: Timestamp) {
        self.cancel_unfinished_actions(t);
        self.set_state(WorkflowState::Failed, t);
        self.set_condition(
            ConditionType::Succeeded,
            ConditionStatus::False,
            ConditionSeverity::Error,
            reason,
            message,
            t,
        );
        self.event(EventType::Warning, event, message);
        self.effects.push(Effect::RemoveFinalizer);
    }

    /// Enters `Canceled`.
    fn cancel(
        &mut self,
        reason: EventReason,
        severity: ConditionSeverity,
        message: &str,
        t: Timestamp,
    ) {
        self.cancel_unfinished_actions(t);
        self.set_state(WorkflowState::Canceled, t);
        self.set_condition(
            ConditionType::Succeeded,
            ConditionStatus::False,
            severity,
            reason.as_str(),
            message,
            t,
        );
        let type_ = if severity == ConditionSeverity::Error {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.event(type_, reason, message);
        self.effects.push(Effect::RemoveFinalizer);
    }

    fn finish(mut self) -> Transition {
        if self.ignored.is_some() {
            self.new = self.old.clone();
            self.effects.clear();
        } else if self.new != *self.old {
            self.sync_started_condition();
            if self.new.last_transition.is_none() {
                let t = self.now();
                self.new.last_transition = Some(Time(t));
            }
        }
        let outcome = match self.ignored {
            Some(why) => Outcome::Ignored(why),
            None if self.new != *self.old => Outcome::Changed,
            None => Outcome::Unchanged,
        };
        let requeue_at = next_deadline(&self.new, self.ctx);
        Transition {
            status: self.new,
            effects: self.effects,
            requeue_at,
            outcome,
        }
    }

    /// `Started` is `True` (at `startedAt`) once `startedAt` is set, `False` before.
    fn sync_started_condition(&mut self) {
        match self.new.started_at.clone() {
            Some(started) => self.set_condition(
                ConditionType::Started,
                ConditionStatus::True,
                ConditionSeverity::Info,
                "Started",
                "the first action started",
                started.0,
            ),
            None => {
                let t = self.now();
                self.set_condition(
                    ConditionType::Started,
                    ConditionStatus::False,
                    ConditionSeverity::Info,
                    "NotStarted",
                    "no action has started yet",
                    t,
                );
            }
        }
    }

    // ---- preparation ----

    fn pending_unprepared(&mut self) -> bool {
        if self.new.state != WorkflowState::Pending {
            self.ignore(Ignored::WrongState);
            return false;
        }
        if !self.new.actions.is_empty() {
            self.ignore(Ignored::AlreadyPrepared);
            return false;
        }
        true
    }

    fn prepared(&mut self, actions: Vec<tink_api::v1alpha2::Action>) {
        if !self.pending_unprepared() {
            return;
        }
        let t = self.now();
        if actions.is_empty() {
            let msg = "the rendered Template has no actions";
            self.set_condition(
                ConditionType::TemplateRendered,
                ConditionStatus::False,
                ConditionSeverity::Error,
                EventReason::NoActions.as_str(),
                msg,
                t,
            );
            self.fail(
                EventReason::NoActions.as_str(),
                EventReason::NoActions,
                msg,
                t,
            );
            return;
        }
        let names: Vec<String> = actions.iter().map(|a| a.name.clone()).collect();
        self.new.actions = actions
            .into_iter()
            .enumerate()
            .map(|(i, rendered)| ActionStatus {
                id: action_id(i, &rendered.name),
                rendered,
                state: ActionState::Pending,
                ..ActionStatus::default()
            })
            .collect();
        self.new.last_transition.get_or_insert(Time(t));
        self.set_condition(
            ConditionType::TemplateRendered,
            ConditionStatus::True,
            ConditionSeverity::Info,
            "Rendered",
            &format!("{} actions: {}", names.len(), names.join(", ")),
            t,
        );
        self.effects.push(Effect::AddFinalizer);
        self.event(
            EventType::Normal,
            EventReason::Prepared,
            format!(
                "Template rendered, {} actions: {}",
                names.len(),
                names.join(", ")
            ),
        );
    }

    fn render_failed(&mut self, message: &str) {
        if !self.pending_unprepared() {
            return;
        }
        let t = self.now();
        let message = if message.is_empty() {
            "the Template did not render"
        } else {
            message
        };
        self.set_condition(
            ConditionType::TemplateRendered,
            ConditionStatus::False,
            ConditionSeverity::Error,
            EventReason::RenderFailed.as_str(),
            message,
            t,
        );
        self.fail(
            EventReason::RenderFailed.as_str(),
            EventReason::RenderFailed,
            message,
            t,
        );
    }

    fn unresolved(&mut self, reason: &str, message: &str) {
        if !self.pending_unprepared() {
            return;
        }
        let t = self.now();
        let reason = clean_reason(Some(reason), EventReason::Waiting.as_str());
        self.new.last_transition.get_or_insert(Time(t));
        self.set_condition(
            ConditionType::TemplateRendered,
            ConditionStatus::False,
            ConditionSeverity::Warning,
            &reason,
            message,
            t,
        );
        if self.new.condition(ConditionType::TemplateRendered)
            != self.old.condition(ConditionType::TemplateRendered)
        {
            self.event(
                EventType::Warning,
                EventReason::Waiting,
                format!("{reason}: {message}"),
            );
        }
    }

    // ---- boot options ----

    fn boot(
        &mut self,
        record: tink_api::v1alpha2::BootOptionsStatus,
        conditions: Vec<BootCondition>,
    ) {
        let t = self.now();
        self.new.boot_options = record;
        for c in conditions {
            let before = self.new.condition(c.type_).cloned();
            self.set_condition(
                c.type_,
                c.status,
                c.severity,
                c.reason.as_str(),
                &c.message,
                t,
            );
            let changed = before.is_none_or(|b| {
                b.status != c.status || b.reason.as_deref() != Some(c.reason.as_str())
            });
            if changed {
                let type_ = if c.reason.is_failure() {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                self.event(type_, EventReason::Boot(c.reason), c.message.clone());
            }
        }
    }

    fn boot_failed(&mut self, reason: BootReason, message: &str) {
        if self.new.state != WorkflowState::Pending {
            return self.ignore(Ignored::WrongState);
        }
        let t = self.now();
        self.set_condition(
            ConditionType::BootPrepared,
            ConditionStatus::False,
            ConditionSeverity::Error,
            reason.as_str(),
            message,
            t,
        );
        self.fail(reason.as_str(), EventReason::Boot(reason), message, t);
    }

    // ---- dispatch ----

    fn dispatch(&mut self, agent_id: String) {
        if self.new.state != WorkflowState::Pending {
            return self.ignore(Ignored::WrongState);
        }
        if self.new.actions.is_empty() {
            return self.ignore(Ignored::NotPrepared);
        }
        if self
            .new
            .next_attempt_at
            .as_ref()
            .is_some_and(|t| t.0 > self.ctx.now)
        {
            return self.ignore(Ignored::NotDue);
        }
        if agent_id.is_empty() {
            return self.ignore(Ignored::NoAgent);
        }
        let t = self.now();
        let attempt = self.new.dispatch_attempts.saturating_add(1);
        let id = match DispatchId::new(self.ctx.workflow.clone(), attempt) {
            Ok(id) => id.to_string(),
            Err(e) => {
                let msg = format!("cannot dispatch: {e}");
                return self.fail(
                    EventReason::DispatchFailed.as_str(),
                    EventReason::DispatchFailed,
                    &msg,
                    t,
                );
            }
        };
        self.new.dispatch_attempts = attempt;
        self.new.dispatch_id = Some(id.clone());
        self.new.received_at = None;
        self.new.agent_instance = None;
        self.new.agent_id = Some(agent_id.clone());
        self.new.next_attempt_at = None;
        self.set_state(WorkflowState::Scheduled, t);
        self.effects.push(Effect::PublishStart {
            agent_id: agent_id.clone(),
            dispatch_id: id,
        });
        self.event(
            EventType::Normal,
            EventReason::Scheduled,
            format!("dispatched to agent {agent_id} (attempt {attempt})"),
        );
    }

    // ---- agent events ----

    fn agent_event(&mut self, ev: AgentEvent) {
        if self.new.dispatch_id.as_deref() != Some(ev.dispatch_id.as_str()) {
            return self.ignore(Ignored::StaleDispatch);
        }
        // Only the agent the dispatch went to: the server stamps every event with the agent it
        // authenticated, so an event without one (or from another) is refused.
        match (ev.agent_id.as_deref(), self.new.agent_id.as_deref()) {
            (Some(from), Some(to))
                if crate::normalize_agent_id(from) == crate::normalize_agent_id(to) => {}
            _ => return self.ignore(Ignored::OtherAgent),
        }
        if !matches!(
            self.new.state,
            WorkflowState::Scheduled | WorkflowState::Running | WorkflowState::Cancelling
        ) {
            return self.ignore(Ignored::WrongState);
        }
        let t = self.event_time(ev.at);
        if self.new.received_at.is_none() {
            // The first event of a dispatch proves the agent has it (the receipt, or for agents
            // that send none, whatever comes first).
            self.new.received_at = Some(Time(t));
            self.new.agent_instance = ev.instance.clone().filter(|i| !i.is_empty());
        }
        match ev.kind {
            EventKind::ActionStarted { action_id } => self.action_started(&action_id, t),
            EventKind::ActionSucceeded { action_id } => self.action_succeeded(&action_id, t),
            EventKind::ActionFailed {
                action_id,
                reason,
                message,
            } => self.action_failed(&action_id, reason.as_deref(), message.as_deref(), t),
            EventKind::WorkflowRejected { reason, message } => {
                self.rejected(reason.as_deref(), message.as_deref(), t)
            }
            // A receipt changes no state: the agent has the command.
            EventKind::WorkflowReceived { .. } => {}
            EventKind::WorkflowCanceled {
                action_id,
                reason,
                message,
            } => self.canceled_by_agent(
                action_id.as_deref(),
                reason.as_deref(),
                message.as_deref(),
                t,
            ),
        }
    }

    /// The index of `action_id` if an event about it can still move it forward: it has not
    /// finished and no later action has started. Ignores the step otherwise.
    fn live_action(&mut self, action_id: &str) -> Option<usize> {
        let Some(i) = self.new.actions.iter().position(|a| a.id == action_id) else {
            self.ignore(Ignored::UnknownAction);
            return None;
        };
        let later_started = self.new.actions[i + 1..]
            .iter()
            .any(|a| a.state != ActionState::Pending);
        if self.new.actions[i].state.is_terminal() || later_started {
            self.ignore(Ignored::Outdated);
            return None;
        }
        Some(i)
    }

    /// Action `i` is (or was) executing at `t`: the actions before it succeeded (the agent runs
    /// them in order and stops at the first failure), it has a start time, and the Workflow
    /// has started.
    fn reach_action(&mut self, i: usize, t: Timestamp) {
        for a in &mut self.new.actions[..i] {
            if a.state != ActionState::Succeeded {
                a.started_at.get_or_insert(Time(t));
                a.state = ActionState::Succeeded;
                a.last_transition = Some(Time(t));
            }
        }
        let a = &mut self.new.actions[i];
        a.started_at.get_or_insert(Time(t));
        self.new.started_at.get_or_insert(Time(t));
        if self.new.state == WorkflowState::Scheduled {
            self.set_state(WorkflowState::Running, t);
            let name = self.new.actions[i].rendered.name.clone();
            let agent = self.agent().to_string();
            self.event(
                EventType::Normal,
                EventReason::Running,
                format!("agent {agent} started action {name}"),
            );
        }
    }

    fn action_started(&mut self, action_id: &str, t: Timestamp) {
        let Some(i) = self.live_action(action_id) else {
            return;
        };
        if self.new.actions[i].state == ActionState::Running {
            return self.ignore(Ignored::Outdated);
        }
        self.reach_action(i, t);
        let a = &mut self.new.actions[i];
        a.state = ActionState::Running;
        a.last_transition = Some(Time(t));
    }

    fn action_succeeded(&mut self, action_id: &str, t: Timestamp) {
        let Some(i) = self.live_action(action_id) else {
            return;
        };
        self.reach_action(i, t);
        let a = &mut self.new.actions[i];
        a.state = ActionState::Succeeded;
        a.last_transition = Some(Time(t));
        if i + 1 == self.new.actions.len() {
            let n = self.new.actions.len();
            let msg = format!("all {n} actions succeeded");
            self.set_state(WorkflowState::Succeeded, t);
            self.set_condition(
                ConditionType::Succeeded,
                ConditionStatus::True,
                ConditionSeverity::Info,
                "Succeeded",
                &msg,
                t,
            );
            self.event(EventType::Normal, EventReason::Succeeded, msg);
            self.effects.push(Effect::RemoveFinalizer);
        }
    }

    fn action_failed(
        &mut self,
        action_id: &str,
        reason: Option<&str>,
        message: Option<&str>,
        t: Timestamp,
    ) {
        let Some(i) = self.live_action(action_id) else {
            return;
        };
        self.reach_action(i, t);
        let name = self.new.actions[i].rendered.name.clone();
        let reason = clean_reason(reason, EventReason::ActionFailed.as_str());
        let message = match message.filter(|m| !m.is_empty()) {
            Some(m) => cut(m.to_string(), MAX_MESSAGE_LEN),
            None => format!("action {name} failed"),
        };
        let a = &mut self.new.actions[i];
        a.state = ActionState::Failed;
        a.last_transition = Some(Time(t));
        a.failure_reason = Some(reason.clone());
        a.failure_message = Some(message.clone());
        // The condition carries the action's reason and message (seeds/000); the event names
        // the action too.
        self.cancel_unfinished_actions(t);
        self.set_state(WorkflowState::Failed, t);
        self.set_condition(
            ConditionType::Succeeded,
            ConditionStatus::False,
            ConditionSeverity::Error,
            &reason,
            &message,
            t,
        );
        self.event(
            EventType::Warning,
            EventReason::ActionFailed,
            format!("action {name} failed: {reason}: {message}"),
        );
        self.effects.push(Effect::RemoveFinalizer);
    }

    fn rejected(&mut self, reason: Option<&str>, message: Option<&str>, t: Timestamp) {
        if self.new.state != WorkflowState::Scheduled {
            return self.ignore(Ignored::WrongState);
        }
        if reason == Some(REASON_ALREADY_RUN) {
            // The agent ran (or runs) this very dispatch: its own events tell the outcome. A
            // new attempt would run the actions a second time.
            return self.ignore(Ignored::Outdated);
        }
        let attempt = self.new.dispatch_attempts;
        let wait = self.ctx.config.backoff(attempt);
        let next = whole_seconds(add(t, wait));
        self.new.dispatch_id = None;
        self.new.received_at = None;
        self.new.agent_instance = None;
        self.new.next_attempt_at = Some(Time(next));
        self.set_state(WorkflowState::Pending, t);
        let agent = self.agent().to_string();
        let reason = clean_reason(reason, "Rejected");
        let detail = message.filter(|m| !m.is_empty()).unwrap_or("no message");
        self.event(
            EventType::Warning,
            EventReason::Rejected,
            format!(
                "agent {agent} rejected attempt {attempt} ({reason}: {detail}); next attempt in {} at {next}",
                human(wait)
            ),
        );
    }

    fn canceled_by_agent(
        &mut self,
        action_id: Option<&str>,
        reason: Option<&str>,
        message: Option<&str>,
        t: Timestamp,
    ) {
        // The action that was stopped was executing: record that it started.
        if let Some(i) = action_id.and_then(|id| self.new.actions.iter().position(|a| a.id == id))
            && !self.new.actions[i].state.is_terminal()
            && self.new.actions[i + 1..]
                .iter()
                .all(|a| a.state == ActionState::Pending)
        {
            self.reach_action(i, t);
        }
        // `reach_action` moves Scheduled to Running: decide on the state before it.
        let agent = self.agent().to_string();
        let detail = match (reason, message.filter(|m| !m.is_empty())) {
            (_, Some(m)) => format!(": {m}"),
            (Some(r), None) if !r.is_empty() => format!(": {r}"),
            _ => String::new(),
        };
        if self.old.state == WorkflowState::Cancelling {
            // reach_action does not touch Cancelling.
            let msg = format!("agent {agent} stopped the workflow{detail}");
            self.cancel(EventReason::Canceled, ConditionSeverity::Warning, &msg, t);
        } else {
            let msg = format!(
                "agent {agent} reported the workflow canceled although no cancellation was requested{detail}"
            );
            self.fail(
                EventReason::AgentCanceled.as_str(),
                EventReason::AgentCanceled,
                &msg,
                t,
            );
        }
    }

    // ---- supervision ----

    fn tick(&mut self) {
        let now = self.ctx.now;
        match self.new.state {
            WorkflowState::Scheduled if self.new.received_at.is_some() => {
                if workflow_deadline(&self.new, self.ctx).is_some_and(|d| now >= d) {
                    let t = self.now();
                    self.workflow_timeout(t);
                }
            }
            WorkflowState::Scheduled => {
                let Some(deadline) = next_deadline(&self.new, self.ctx) else {
                    return;
                };
                if now >= deadline {
                    let t = self.now();
                    let msg = format!(
                        "agent {} did not start the workflow within {}",
                        self.agent(),
                        human(self.ctx.config.scheduled_timeout)
                    );
                    self.stop(EventReason::ScheduledTimeout, &msg);
                    self.fail(
                        EventReason::ScheduledTimeout.as_str(),
                        EventReason::ScheduledTimeout,
                        &msg,
                        t,
                    );
                }
            }
            WorkflowState::Running => {
                let workflow = workflow_deadline(&self.new, self.ctx).filter(|d| now >= *d);
                let action = action_deadline(&self.new, self.ctx).filter(|(_, d)| now >= *d);
                let t = self.now();
                match (workflow, action) {
                    (Some(w), Some((_, a))) if w <= a => self.workflow_timeout(t),
                    (Some(_), None) => self.workflow_timeout(t),
                    (_, Some((i, _))) => self.action_timeout(i, t),
                    (None, None) => {}
                }
            }
            WorkflowState::Cancelling => {
                let Some(deadline) = next_deadline(&self.new, self.ctx) else {
                    return;
                };
                if now >= deadline {
                    let t = self.now();
                    let msg = format!(
                        "agent {} did not confirm the cancellation within {}",
                        self.agent(),
                        human(self.ctx.config.cancelling_timeout)
                    );
                    self.cancel(
                        EventReason::CancelTimeout,
                        ConditionSeverity::Error,
                        &msg,
                        t,
                    );
                }
            }
            WorkflowState::Pending
            | WorkflowState::Succeeded
            | WorkflowState::Failed
            | WorkflowState::Canceled => {}
        }
    }

    fn workflow_timeout(&mut self, t: Timestamp) {
        let limit = self.ctx.timeout.unwrap_or_default();
        let msg = format!(
            "the workflow did not finish within its timeout of {}",
            human(limit)
        );
        self.stop(EventReason::WorkflowTimeout, &msg);
        self.fail(
            EventReason::WorkflowTimeout.as_str(),
            EventReason::WorkflowTimeout,
            &msg,
            t,
        );
    }

    fn action_timeout(&mut self, i: usize, t: Timestamp) {
        let a = &self.new.actions[i];
        let msg = format!(
            "action {} did not finish within its timeout of {} (the agent did not report it either)",
            a.rendered.name,
            human(a.timeout_limit().unwrap_or_default())
        );
        let reason = EventReason::ActionTimeout.as_str();
        let a = &mut self.new.actions[i];
        a.state = ActionState::Failed;
        a.last_transition = Some(Time(t));
        a.failure_reason = Some(reason.to_string());
        a.failure_message = Some(msg.clone());
        self.stop(EventReason::ActionTimeout, &msg);
        self.fail(reason, EventReason::ActionTimeout, &msg, t);
    }

    // ---- cancellation and restart ----

    fn deleted(&mut self) {
        match self.new.state {
            WorkflowState::Pending => {
                let t = self.now();
                self.cancel(
                    EventReason::Canceled,
                    ConditionSeverity::Warning,
                    "the Workflow was deleted before it was dispatched",
                    t,
                );
            }
            WorkflowState::Scheduled | WorkflowState::Running => {
                let t = self.now();
                self.set_state(WorkflowState::Cancelling, t);
                let msg = format!(
                    "the Workflow was deleted; agent {} was told to stop it",
                    self.agent()
                );
                self.stop(EventReason::Deleted, "the Workflow was deleted");
                self.event(EventType::Normal, EventReason::Cancelling, msg);
            }
            // Already cancelling: the stop was sent; the timer runs.
            WorkflowState::Cancelling => {}
            WorkflowState::Succeeded | WorkflowState::Failed | WorkflowState::Canceled => {}
        }
    }

    fn withdrawn(&mut self) {
        if self.new.state != WorkflowState::Scheduled || self.new.received_at.is_some() {
            return self.ignore(Ignored::WrongState);
        }
        let t = self.now();
        let msg = format!(
            "the Workflow was deleted before agent {} received it; its StartWorkflow was withdrawn from the agent's queue",
            self.agent()
        );
        self.cancel(EventReason::Canceled, ConditionSeverity::Warning, &msg, t);
    }

    fn resume(&mut self) {
        match self.new.state {
            WorkflowState::Pending => {
                if !self.new.actions.is_empty() {
                    self.effects.push(Effect::AddFinalizer);
                }
            }
            WorkflowState::Scheduled => {
                self.effects.push(Effect::AddFinalizer);
                if let (Some(agent_id), Some(dispatch_id), None) = (
                    self.new.agent_id.clone(),
                    self.new.dispatch_id.clone(),
                    &self.new.received_at,
                ) {
                    // Only if the command is provably gone (never published): the controller
                    // checks both streams before it publishes again.
                    self.effects.push(Effect::RepublishStart {
                        agent_id,
                        dispatch_id,
                    });
                }
            }
            WorkflowState::Running => self.effects.push(Effect::AddFinalizer),
            // The object is being deleted: no finalizer may be added; repeat the stop.
            WorkflowState::Cancelling => {
                self.stop(EventReason::Deleted, "the Workflow was deleted")
            }
            WorkflowState::Succeeded | WorkflowState::Failed | WorkflowState::Canceled => {}
        }
    }
}
