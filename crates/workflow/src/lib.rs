//! The pure Workflow state machine: (status, input) -> (status, effects, next deadline), and
//! the pure dispatch choice.
//!
//! No IO, no async, no Kubernetes client: the controller reads the Workflow, calls [`step`]
//! (or [`step_all`] for a batch of events of one Workflow), writes the returned status when
//! [`Transition::status_changed`], then carries out [`Transition::effects`] in order, and
//! requeues the Workflow at [`Transition::requeue_at`] with [`Input::Tick`]. A crash between
//! the status write and the effects is repaired by stepping [`Input::Resume`] after a restart
//! (every effect is idempotent).
//!
//! ```
//! use std::time::Duration;
//! use jiff::Timestamp;
//! use tink_api::v1alpha2::{Action, WorkflowStatus, WorkflowState};
//! use tink_workflow::{DispatchId, Effect, EventKind, AgentEvent, Input, StepContext, WorkflowRef, step, step_all};
//!
//! let now = Timestamp::from_second(1_700_000_000).unwrap();
//! let ctx = StepContext::new(now, WorkflowRef::new("default", "wf-1", "4b2d8f0e"), Some(Duration::from_secs(3600)));
//! let actions = vec![Action { name: "stream".into(), image: "quay.io/tinkerbell/image2disk".into(), ..Action::default() }];
//!
//! // Rendered and dispatched to an idle agent in one status write.
//! let t = step_all(&WorkflowStatus::default(),
//!     [Input::Prepared { actions }, Input::Dispatch { agent_id: "aa:bb:cc:dd:ee:ff".into() }], &ctx);
//! assert!(t.status_changed());
//! assert_eq!(t.status.state, WorkflowState::Scheduled);
//! // ... write t.status, then carry out t.effects in order:
//! assert!(matches!(&t.effects[..], [Effect::AddFinalizer, Effect::KubeEvent { .. }, Effect::PublishStart { .. }, Effect::KubeEvent { .. }]));
//! // ... and requeue with Input::Tick at t.requeue_at (the scheduled timeout).
//! assert_eq!(t.requeue_at, Some(now + jiff::SignedDuration::from_secs(300)));
//!
//! // An event arrives: its workflow_id names the object and the attempt.
//! let workflow_id = t.status.dispatch_id.clone().unwrap();
//! let key = DispatchId::parse(&workflow_id).unwrap().key(); // look the Workflow up by key
//! assert_eq!(key.to_string(), "default/wf-1");
//! let event = Input::Agent(AgentEvent {
//!     dispatch_id: workflow_id,
//!     agent_id: Some("aa:bb:cc:dd:ee:ff".into()),
//!     instance: None,
//!     at: now,
//!     kind: EventKind::ActionSucceeded { action_id: t.status.actions[0].id.clone() },
//! });
//! let done = step(&t.status, event, &ctx);
//! assert_eq!(done.status.state, WorkflowState::Succeeded);
//! assert_eq!(done.effects.last(), Some(&Effect::RemoveFinalizer));
//! ```
//!
//! # Transitions (seeds/000 and seeds/004)
//!
//! | state | input | new state | effects |
//! |---|---|---|---|
//! | Pending (no actions) | `Prepared` | Pending, actions set, `TemplateRendered=True` | AddFinalizer, Event |
//! | Pending (no actions) | `Prepared` with no actions | Failed (`NoActions`) | Event, RemoveFinalizer |
//! | Pending (no actions) | `RenderFailed` | Failed, `TemplateRendered=False` (`RenderFailed`) | Event, RemoveFinalizer |
//! | Pending (no actions) | `Unresolved` | Pending, `TemplateRendered=False/Warning` | Event when it changed |
//! | Pending (prepared, due) | `Dispatch` | Scheduled, new dispatch id, attempts + 1 | PublishStart, Event |
//! | Scheduled | `ActionStarted` / `ActionSucceeded` | Running, `startedAt`, `Started=True` | Event |
//! | Scheduled, Running | last `ActionSucceeded` | Succeeded, `Succeeded=True/Info` | Event, RemoveFinalizer |
//! | Scheduled, Running | `ActionFailed` | Failed, `Succeeded=False/Error` with the action's reason and message | Event, RemoveFinalizer |
//! | Scheduled | `WorkflowRejected` | Pending, `nextAttemptAt` = now + back-off | Event |
//! | Scheduled, Running | `WorkflowCanceled` (unrequested) | Failed (`AgentCanceled`) | Event, RemoveFinalizer |
//! | Scheduled | `Tick` after the scheduled timeout | Failed (`ScheduledTimeout`) | PublishStop, Event, RemoveFinalizer |
//! | Running | `Tick` after `spec.timeout` from `startedAt` | Failed (`WorkflowTimeout`) | PublishStop, Event, RemoveFinalizer |
//! | Running | `Tick` after an action's timeout + grace | Failed (`ActionTimeout`, on the action too) | PublishStop, Event, RemoveFinalizer |
//! | Pending | `Deleted` | Canceled, `Succeeded=False/Warning` | Event, RemoveFinalizer |
//! | Scheduled, Running | `Deleted` | Cancelling | PublishStop, Event |
//! | Cancelling | `WorkflowCanceled` | Canceled, `Succeeded=False/Warning` | Event, RemoveFinalizer |
//! | Cancelling | `Tick` after the cancelling timeout | Canceled (`CancelTimeout`), `Succeeded=False/Error` | Event, RemoveFinalizer |
//! | Cancelling | action events | actions recorded; the last success ends `Succeeded`, a failure `Failed` (the race against the stop was lost) | as above |
//! | Succeeded, Failed, Canceled | `Deleted`, `Resume` | unchanged | RemoveFinalizer |
//! | Succeeded, Failed, Canceled | anything else | unchanged (ignored) | none |
//! | Scheduled, not received | `Withdrawn` (its StartWorkflow was deleted before delivery) | Canceled, `Succeeded=False/Warning` | Event, RemoveFinalizer |
//! | Scheduled | first agent event of the dispatch (the `WorkflowReceived` receipt, or any) | `receivedAt`, `agentInstance` set; the scheduled timeout stops, the workflow timeout counts from here | none |
//! | Scheduled | `WorkflowRejected` with reason `AlreadyRun` | unchanged (ignored: the run's own events decide) | none |
//! | Scheduled (received) | `Tick` after `spec.timeout` from `receivedAt` | Failed (`WorkflowTimeout`) | PublishStop, Event, RemoveFinalizer |
//! | Pending / Scheduled / Running / Cancelling | `Resume` | unchanged | AddFinalizer (not while Cancelling); RepublishStart (Scheduled, not received); PublishStop (Cancelling) |
//!
//! Events apply only with the current dispatch id (and from the dispatched agent): another
//! attempt's events, or those of a deleted Workflow re-created under the same name, are
//! [`Ignored::StaleDispatch`]. Duplicates and late events are [`Ignored::Outdated`]. An event
//! about action *k* implies actions before *k* succeeded (the agent runs actions in order and
//! stops at the first failure), so `ActionSucceeded` before its `ActionStarted`, or a missed
//! event, still leaves a consistent status. On any failure or cancellation, unfinished actions
//! become `Canceled`.
//!
//! Times: every time written is in whole seconds (what `metav1.Time` keeps), never after
//! `now` and never before the latest time already in the status. Conditions: `Started`
//! (`False` until `startedAt` is set, then `True` at `startedAt`), `Succeeded` (set at the end
//! state), `TemplateRendered`; a condition's `lastTransitionTime` changes only when its status
//! changes.
#![forbid(unsafe_code)]

mod config;
mod dispatch;
mod effect;
mod id;
mod input;
mod machine;

pub use config::{AgentSeen, Config, StepContext};
pub use dispatch::{Candidate, agent_ids, normalize_agent_id, pick_dispatches};
pub use effect::{Effect, EventReason, EventType, RolloutReason};
pub use id::{
    DispatchId, DispatchIdError, MAX_DISPATCH_ID_LEN, WorkflowKey, WorkflowRef, action_id,
};
pub use input::{AgentEvent, BootCondition, BootReason, EventKind, Input};
pub use machine::{
    Ignored, MAX_EVENT_MESSAGE_LEN, MAX_MESSAGE_LEN, MAX_REASON_LEN, Outcome, REASON_ALREADY_RUN,
    Transition, Verdict, VerdictReason, agent_verdict, next_deadline, step, step_all,
};
