//! What can happen to a Workflow: the inputs of [`crate::step`].

use jiff::Timestamp;
use tink_api::v1alpha2::{
    Action, BootOptionsStatus, ConditionSeverity, ConditionStatus, ConditionType,
};

/// One thing that happened to a Workflow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The Template rendered with the Hardware and `templateData`: these are the actions, in
    /// execution order. Applies to a `Pending` Workflow that has no actions yet; the first
    /// rendering wins (a Template edited later does not change a prepared Workflow).
    Prepared {
        /// The rendered actions.
        actions: Vec<Action>,
    },
    /// The Template did not render; the message says where (line and column) and why.
    /// Fails a Workflow that has not been prepared yet.
    RenderFailed {
        /// The render error.
        message: String,
    },
    /// The Template or the Hardware cannot be found (yet). The Workflow stays `Pending` with a
    /// `TemplateRendered=False` (`Warning`) condition saying what it waits for, and proceeds
    /// with [`Input::Prepared`] when the object appears.
    Unresolved {
        /// A CamelCase reason, e.g. `TemplateNotFound`, `HardwareNotFound`.
        reason: String,
        /// What is missing.
        message: String,
    },
    /// The dispatcher chose `agent_id` for this Workflow (see [`crate::pick_dispatches`]).
    /// Applies to a prepared `Pending` Workflow whose next attempt time has come.
    Dispatch {
        /// The agent to run the Workflow.
        agent_id: String,
    },
    /// An event published by an agent.
    Agent(AgentEvent),
    /// Supervision: the controller's requeue time (or any reconcile) came; timeouts are checked
    /// against [`crate::StepContext::now`].
    Tick,
    /// The Workflow has a deletion timestamp: cancel it.
    Deleted,
    /// The queued `StartWorkflow` of the current dispatch was deleted from the agent's queue
    /// before any delivery (`tink_bus::withdraw_command` proved it): the agent can never
    /// receive it. A `Scheduled` Workflow the agent has not confirmed becomes `Canceled`
    /// without a `StopWorkflow` (the controller withdraws only for a deletion; step
    /// `[Withdrawn, Deleted, ...]`).
    Withdrawn,
    /// The controller (re)started and sees this Workflow for the first time: re-emit the
    /// effects an interrupted step may not have carried out (the caller writes the status
    /// before carrying out effects; the bus de-duplicates re-published commands). It may emit
    /// `AddFinalizer`, which Kubernetes refuses on an object being deleted: for an object with
    /// a deletion timestamp, step `[Deleted, Resume]` with [`crate::step_all`] instead (it
    /// never adds the finalizer and repeats the stop or the finalizer removal).
    Resume,
    /// The controller's progress with `spec.bootOptions` (the Hardware's netboot toggle and
    /// the BMC Jobs are the caller's IO, done before this input is stepped): the
    /// `status.bootOptions` record after it and the boot conditions to set. Applies in every
    /// state, terminal ones included (the after-success steps run on a `Succeeded` Workflow),
    /// and changes nothing else; a condition whose status or reason changes is announced with
    /// an Event of the condition's reason.
    Boot {
        /// The new `status.bootOptions`.
        record: BootOptionsStatus,
        /// The conditions to set (`NetbootAllowed`, `BootPrepared`, `BootFinished`).
        conditions: Vec<BootCondition>,
    },
    /// A boot step before dispatch failed for good (the BMC Job failed or timed out, the
    /// Hardware has no BMC): a `Pending` Workflow fails with `reason` and `message`, and its
    /// `BootPrepared` condition says the same.
    BootFailed {
        /// Why.
        reason: BootReason,
        /// The provider's error, or what is missing.
        message: String,
    },
}

/// A condition about the boot steps of `spec.bootOptions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootCondition {
    /// `NetbootAllowed`, `BootPrepared` or `BootFinished`.
    pub type_: ConditionType,
    /// Its status.
    pub status: ConditionStatus,
    /// `Info` while things go as planned, `Error` for a failure.
    pub severity: ConditionSeverity,
    /// Why.
    pub reason: BootReason,
    /// Details: the Job's name and tasks, the provider's error.
    pub message: String,
}

/// The reasons of the boot conditions (and of the Events announcing them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BootReason {
    /// Netboot was allowed on the Hardware's interfaces before the Workflow ran.
    NetbootAllowed,
    /// Netboot was disallowed on the Hardware's interfaces after the Workflow succeeded.
    NetbootDisallowed,
    /// The BMC Job was created and runs.
    BootJobRunning,
    /// Every task of the BMC Job completed.
    BootJobCompleted,
    /// A task of the BMC Job failed (the message is the provider's error).
    BootJobFailed,
    /// The BMC Job did not finish within the controller's limit.
    BootJobTimeout,
    /// The Hardware has no `spec.bmcRef`, so no BMC Job can boot it.
    NoBmc,
}

impl BootReason {
    /// The CamelCase string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NetbootAllowed => "NetbootAllowed",
            Self::NetbootDisallowed => "NetbootDisallowed",
            Self::BootJobRunning => "BootJobRunning",
            Self::BootJobCompleted => "BootJobCompleted",
            Self::BootJobFailed => "BootJobFailed",
            Self::BootJobTimeout => "BootJobTimeout",
            Self::NoBmc => "NoBMC",
        }
    }

    /// Whether it reports a failure.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::BootJobFailed | Self::BootJobTimeout | Self::NoBmc
        )
    }
}

/// An event an agent published about a dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentEvent {
    /// The `workflow_id` of the event: the dispatch id the Workflow was started with.
    pub dispatch_id: String,
    /// The agent that published it, when known. An event from another agent than the one the
    /// Workflow is dispatched to is ignored.
    pub agent_id: Option<String>,
    /// The instance id of the agent process that published it, when known. The first one seen
    /// for a dispatch is recorded in `status.agentInstance`.
    pub instance: Option<String>,
    /// When it happened (the agent's clock, or the time the server stored it). Clamped into
    /// `[latest time in the status, now]`, so status times stay monotonic whatever the clocks.
    pub at: Timestamp,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of agent events (seeds/004 plus the cancel confirmation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The action began executing.
    ActionStarted {
        /// `status.actions[].id`.
        action_id: String,
    },
    /// The action completed successfully.
    ActionSucceeded {
        /// `status.actions[].id`.
        action_id: String,
    },
    /// The action failed; the agent stops the workflow.
    ActionFailed {
        /// `status.actions[].id`.
        action_id: String,
        /// An UpperCamelCase reason (`Timeout` when the agent's action timer tripped).
        reason: Option<String>,
        /// A human readable message.
        message: Option<String>,
    },
    /// The agent refused the workflow (typically: it is already running another one).
    WorkflowRejected {
        /// An UpperCamelCase reason.
        reason: Option<String>,
        /// A human readable message.
        message: Option<String>,
    },
    /// The delivery receipt of a command: the agent has the `StartWorkflow` (or, with `stop`,
    /// the `StopWorkflow`) of this dispatch.
    WorkflowReceived {
        /// The receipt is for a `StopWorkflow`.
        stop: bool,
    },
    /// The agent confirms a `StopWorkflow` took effect and is idle again.
    WorkflowCanceled {
        /// The action that was running and got stopped, if any.
        action_id: Option<String>,
        /// An UpperCamelCase reason.
        reason: Option<String>,
        /// A human readable message.
        message: Option<String>,
    },
}

impl EventKind {
    /// The action the event is about, if any.
    pub fn action_id(&self) -> Option<&str> {
        match self {
            Self::ActionStarted { action_id }
            | Self::ActionSucceeded { action_id }
            | Self::ActionFailed { action_id, .. } => Some(action_id),
            Self::WorkflowCanceled { action_id, .. } => action_id.as_deref(),
            Self::WorkflowRejected { .. } | Self::WorkflowReceived { .. } => None,
        }
    }

    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ActionStarted { .. } => "ActionStarted",
            Self::ActionSucceeded { .. } => "ActionSucceeded",
            Self::ActionFailed { .. } => "ActionFailed",
            Self::WorkflowRejected { .. } => "WorkflowRejected",
            Self::WorkflowCanceled { .. } => "WorkflowCanceled",
            Self::WorkflowReceived { .. } => "WorkflowReceived",
        }
    }
}
