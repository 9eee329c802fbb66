//! What the controller must do after writing the new status: the effects of a step.

use std::fmt;

use crate::input::BootReason;

/// One thing the controller carries out after it wrote the status of a [`crate::Transition`].
///
/// Every effect is idempotent, so re-emitting it (after a crash, see
/// [`crate::Input::Resume`]) is safe: commands are published with a message id the bus
/// de-duplicates on, and the finalizer effects mean "ensure present" / "ensure absent".
/// Within one transition, effects come in the order to carry them out; `RemoveFinalizer` is
/// always last, since the object may disappear as soon as it is carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Ensure the controller's finalizer is on the Workflow.
    AddFinalizer,
    /// Publish `StartWorkflow` (built from `status.actions`) on the agent's dispatch subject.
    PublishStart {
        /// The agent to run the Workflow.
        agent_id: String,
        /// The `workflow_id` of the command (`status.dispatchId`).
        dispatch_id: String,
    },
    /// After a restart: publish the `StartWorkflow` of the current dispatch again, but only
    /// when it is provably gone: neither waiting in the agent's queue nor received (no event
    /// of the dispatch is stored). A crash between the status write and the first publish is
    /// the case this repairs.
    RepublishStart {
        /// The agent to run the Workflow.
        agent_id: String,
        /// The `workflow_id` of the command (`status.dispatchId`).
        dispatch_id: String,
    },
    /// Publish `StopWorkflow` on the agent's dispatch subject.
    PublishStop {
        /// The agent running the Workflow.
        agent_id: String,
        /// The `workflow_id` of the command.
        dispatch_id: String,
        /// Why: [`EventReason::Deleted`], [`EventReason::WorkflowTimeout`], ...
        reason: EventReason,
        /// A human readable message.
        message: String,
    },
    /// Record a Kubernetes Event on the Workflow so `kubectl describe` tells the story.
    KubeEvent {
        /// `Normal` or `Warning`.
        type_: EventType,
        /// The reason.
        reason: EventReason,
        /// The message, at most [`crate::MAX_EVENT_MESSAGE_LEN`] bytes.
        message: String,
    },
    /// Ensure the controller's finalizer is gone (the Workflow reached an end state).
    RemoveFinalizer,
}

/// The type of a Kubernetes Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Normal progress.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

impl EventType {
    /// The Kubernetes string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reasons the state machine uses, in Kubernetes Events, in `StopWorkflow` and in
/// condition reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    /// The Template rendered; the Workflow is `Pending`.
    Prepared,
    /// The Template did not render.
    RenderFailed,
    /// The rendered Template has no actions.
    NoActions,
    /// The Template or Hardware is missing (the concrete reason is in the condition).
    Waiting,
    /// The Workflow was dispatched to an agent.
    Scheduled,
    /// The dispatch id could not be built (namespace and name too long).
    DispatchFailed,
    /// The agent rejected the Workflow; it goes back to `Pending` with a back-off.
    Rejected,
    /// The first action started; the Workflow is `Running`.
    Running,
    /// All actions succeeded.
    Succeeded,
    /// An action failed.
    ActionFailed,
    /// The agent did not start the Workflow in time.
    ScheduledTimeout,
    /// The Workflow did not finish within its `timeout`.
    WorkflowTimeout,
    /// An action did not finish within its `timeout` (plus grace) and the agent did not report it.
    ActionTimeout,
    /// The agent reported the Workflow canceled although no cancellation was requested.
    AgentCanceled,
    /// The Workflow was deleted: it is being canceled.
    Deleted,
    /// The Workflow is `Cancelling`: the agent was told to stop.
    Cancelling,
    /// Cancellation finished.
    Canceled,
    /// The agent did not confirm the cancellation in time; the Workflow was forced to `Canceled`.
    CancelTimeout,
    /// Agent events the API server refused for good (repeatedly) were dropped.
    EventsDropped,
    /// An event from another agent than the Workflow's (or naming none) was refused.
    ForeignEvent,
    /// On a Hardware, not a Workflow: the operator's `tinkerbell.org/agent-reset` annotation
    /// ended its agents' sessions (a re-installed machine gets a new token).
    AgentSessionReset,
    /// On a Hardware: the Secret its `tinkerbell.org/agent-secret` annotation names is missing
    /// or unusable; its agent is refused until it is fixed.
    AgentSecretUnusable,
    /// On a Hardware: its agent answered the operator's `tinkerbell.org/inventory-request`
    /// annotation with a fresh inventory (the annotation is removed).
    InventoryReported,
    /// On a Hardware and its WorkflowRuleSet: a rule matched the machine's authenticated
    /// inventory and the rule set's Workflow was created (issue 31).
    RuleMatched,
    /// On a Hardware: a WorkflowRuleSet did not fire for it, and why (not approved, no
    /// authenticated inventory, no rule matched, already created for this generation).
    RuleSkipped,
    /// On a WorkflowRuleSet: its patterns do not compile; it is not evaluated.
    RuleInvalid,
    /// A boot step of `spec.bootOptions` (the concrete step is the [`BootReason`]).
    Boot(BootReason),
    /// On a WorkflowSet: a rollout event (the concrete one is the [`RolloutReason`]).
    Rollout(RolloutReason),
}

/// The Events of a WorkflowSet rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RolloutReason {
    /// The set created its first Workflows.
    RolloutStarted,
    /// `spec.paused` was set: no new Workflows.
    RolloutPaused,
    /// `spec.paused` was cleared: creating Workflows again.
    RolloutResumed,
    /// The failure budget is spent: no new Workflows.
    RolloutHalted,
    /// Every selected machine has a finished Workflow.
    RolloutCompleted,
}

impl RolloutReason {
    /// The CamelCase string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RolloutStarted => "RolloutStarted",
            Self::RolloutPaused => "RolloutPaused",
            Self::RolloutResumed => "RolloutResumed",
            Self::RolloutHalted => "RolloutHalted",
            Self::RolloutCompleted => "RolloutCompleted",
        }
    }
}

impl EventReason {
    /// The CamelCase string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prepared => "Prepared",
            Self::RenderFailed => "RenderFailed",
            Self::NoActions => "NoActions",
            Self::Waiting => "Waiting",
            Self::Scheduled => "Scheduled",
            Self::DispatchFailed => "DispatchFailed",
            Self::Rejected => "Rejected",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::ActionFailed => "ActionFailed",
            Self::ScheduledTimeout => "ScheduledTimeout",
            Self::WorkflowTimeout => "WorkflowTimeout",
            Self::ActionTimeout => "ActionTimeout",
            Self::AgentCanceled => "AgentCanceled",
            Self::Deleted => "Deleted",
            Self::Cancelling => "Cancelling",
            Self::Canceled => "Canceled",
            Self::CancelTimeout => "CancelTimeout",
            Self::EventsDropped => "EventsDropped",
            Self::ForeignEvent => "ForeignEvent",
            Self::AgentSessionReset => "AgentSessionReset",
            Self::AgentSecretUnusable => "AgentSecretUnusable",
            Self::InventoryReported => "InventoryReported",
            Self::RuleMatched => "RuleMatched",
            Self::RuleSkipped => "RuleSkipped",
            Self::RuleInvalid => "RuleInvalid",
            Self::Boot(reason) => reason.as_str(),
            Self::Rollout(reason) => reason.as_str(),
        }
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
