//! One workflow at a time: commands in, events out.
//!
//! - `StartWorkflow` while idle: the workflow runs, action after action, until one fails or all
//!   succeed. Each action is `ActionStarted` then `ActionSucceeded` or `ActionFailed`.
//! - `StartWorkflow` for another workflow while busy: `WorkflowRejected` with reason `AgentBusy`.
//!   The same workflow again (a redelivered command): ignored.
//! - `StopWorkflow` for the running workflow: its container is stopped, then `WorkflowCanceled`
//!   confirms it and the agent is idle. For a workflow that is not running: `WorkflowCanceled`
//!   at once, so the controller never waits on an agent that has nothing to stop.
//! - Shutdown: the running action is stopped and reported `ActionFailed` with reason
//!   `AgentShutdown`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tink_proto::workflow::v2::{
    Event, GetWorkflowsResponse, Workflow, event, get_workflows_response,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, warn};

use crate::client::{Outgoing, trace_context};
use crate::convert::action_spec;
use crate::metrics::{Metrics, OutcomeLabel};
use crate::reason::{Failure, FailureReason};
use crate::runtime::{ActionOutcome, DockerRunner};

/// The reason of a `WorkflowRejected` sent while another workflow runs.
pub const REASON_AGENT_BUSY: &str = "AgentBusy";
/// The reason of an `ActionFailed` for an action stopped because the agent shuts down.
pub const REASON_AGENT_SHUTDOWN: &str = "AgentShutdown";
/// The reason of a `WorkflowCanceled`.
pub const REASON_CANCELED: &str = "Canceled";

#[derive(Debug, Clone)]
enum StopCause {
    Stop {
        reason: Option<String>,
        message: Option<String>,
    },
    Shutdown,
}

struct Running {
    workflow_id: String,
    cancel: CancellationToken,
    cause: Arc<Mutex<Option<StopCause>>>,
    /// Resolves to whether the task itself confirmed a cancellation.
    handle: JoinHandle<bool>,
}

/// What the workflow tasks share.
#[derive(Clone)]
pub struct Executor {
    agent_id: String,
    runner: DockerRunner,
    outbox: mpsc::Sender<Outgoing>,
    metrics: Metrics,
}

impl Executor {
    /// An executor publishing events through `outbox`.
    pub fn new(
        agent_id: String,
        runner: DockerRunner,
        outbox: mpsc::Sender<Outgoing>,
        metrics: Metrics,
    ) -> Self {
        Self {
            agent_id,
            runner,
            outbox,
            metrics,
        }
    }

    /// Handles commands until `shutdown` (or until the command source closes), then stops the
    /// running workflow, if any, and returns once its events are queued.
    pub async fn run(
        self,
        mut commands: mpsc::Receiver<GetWorkflowsResponse>,
        shutdown: CancellationToken,
    ) {
        let mut current: Option<Running> = None;
        loop {
            let finished = async {
                match current.as_mut() {
                    Some(r) => (&mut r.handle).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                joined = finished => {
                    if let Some(r) = current.take() {
                        self.finished(r, joined.unwrap_or(false)).await;
                    }
                }
                command = commands.recv() => match command {
                    Some(command) => self.handle(command, &mut current).await,
                    None => break,
                },
            }
        }
        if let Some(r) = current.take() {
            info!(workflow_id = %r.workflow_id, "shutting down: stopping the running workflow");
            if let Ok(mut cause) = r.cause.lock() {
                cause.get_or_insert(StopCause::Shutdown);
            }
            r.cancel.cancel();
            if let Err(e) = r.handle.await {
                warn!(error = %e, "the workflow task failed");
            }
            self.metrics.busy.set(0);
        }
    }

    async fn finished(&self, r: Running, confirmed: bool) {
        self.metrics.busy.set(0);
        let stop = r.cause.lock().ok().and_then(|c| c.clone());
        if let (Some(StopCause::Stop { reason, message }), false) = (stop, confirmed) {
            // Stopped after its last action ended: still confirm, the controller waits for it.
            self.emit(
                &r.workflow_id,
                event::Event::WorkflowCanceled(event::WorkflowCanceled {
                    action_id: None,
                    reason: Some(REASON_CANCELED.to_owned()),
                    message: Some(cancel_message(
                        reason.as_deref(),
                        message.as_deref(),
                        "the workflow had already finished",
                    )),
                }),
                &HashMap::new(),
            )
            .await;
        }
        info!(workflow_id = %r.workflow_id, "idle");
    }

    async fn handle(&self, command: GetWorkflowsResponse, current: &mut Option<Running>) {
        let trace = command.trace_context;
        match command.cmd {
            Some(get_workflows_response::Cmd::StartWorkflow(start)) => {
                let Some(workflow) = start.workflow else {
                    warn!("ignoring a StartWorkflow without a workflow");
                    return;
                };
                match current {
                    Some(r) if r.workflow_id == workflow.workflow_id => {
                        info!(workflow_id = %workflow.workflow_id, "ignoring a repeated StartWorkflow for the running workflow");
                    }
                    Some(r) => {
                        info!(workflow_id = %workflow.workflow_id, running = %r.workflow_id, "rejecting a workflow: busy");
                        self.metrics.workflows_rejected.inc();
                        let message = format!(
                            "agent {} is running workflow {}",
                            self.agent_id, r.workflow_id
                        );
                        self.emit(
                            &workflow.workflow_id,
                            event::Event::WorkflowRejected(event::WorkflowRejected {
                                failure_reason: Some(REASON_AGENT_BUSY.to_owned()),
                                failure_message: message,
                            }),
                            &trace,
                        )
                        .await;
                    }
                    None => *current = Some(self.start(workflow, trace)),
                }
            }
            Some(get_workflows_response::Cmd::StopWorkflow(stop)) => match current {
                Some(r) if r.workflow_id == stop.workflow_id => {
                    info!(workflow_id = %stop.workflow_id, reason = ?stop.reason, "stopping the workflow");
                    if let Ok(mut cause) = r.cause.lock() {
                        cause.get_or_insert(StopCause::Stop {
                            reason: stop.reason,
                            message: stop.message,
                        });
                    }
                    r.cancel.cancel();
                }
                _ => {
                    info!(workflow_id = %stop.workflow_id, "StopWorkflow for a workflow not running here; confirming");
                    self.emit(
                        &stop.workflow_id,
                        event::Event::WorkflowCanceled(event::WorkflowCanceled {
                            action_id: None,
                            reason: Some(REASON_CANCELED.to_owned()),
                            message: Some(cancel_message(
                                stop.reason.as_deref(),
                                stop.message.as_deref(),
                                "the workflow was not running on this agent",
                            )),
                        }),
                        &trace,
                    )
                    .await;
                }
            },
            None => warn!("ignoring a command of an unknown kind (a newer server?)"),
        }
    }

    fn start(&self, workflow: Workflow, trace: HashMap<String, String>) -> Running {
        let workflow_id = workflow.workflow_id.clone();
        info!(workflow_id = %workflow_id, actions = workflow.actions.len(), "starting a workflow");
        self.metrics.busy.set(1);
        let cancel = CancellationToken::new();
        let cause = Arc::new(Mutex::new(None));
        let span =
            tracing::info_span!("workflow", workflow_id = %workflow_id, agent_id = %self.agent_id);
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&trace));
        tink_telemetry::propagation::set_parent(&span, parent);
        let task = {
            let this = self.clone();
            let (cancel, cause) = (cancel.clone(), cause.clone());
            async move { this.run_workflow(workflow, trace, cancel, cause).await }.instrument(span)
        };
        Running {
            workflow_id,
            cancel,
            cause,
            handle: tokio::spawn(task),
        }
    }

    /// Runs the actions in order; returns whether a cancellation was confirmed.
    async fn run_workflow(
        &self,
        workflow: Workflow,
        trace: HashMap<String, String>,
        cancel: CancellationToken,
        cause: Arc<Mutex<Option<StopCause>>>,
    ) -> bool {
        let wf = workflow.workflow_id.as_str();
        for action in &workflow.actions {
            if cancel.is_cancelled() {
                return self.report_stop(wf, None, &cause, &trace).await;
            }
            let span = tracing::info_span!(
                "action",
                workflow_id = wf,
                action_id = %action.id,
                action_name = %action.name,
                image = %action.image,
                outcome = tracing::field::Empty,
            );
            let outcome = async {
                let trace = trace_context(&trace);
                self.emit(
                    wf,
                    event::Event::ActionStarted(event::ActionStarted {
                        action_id: action.id.clone(),
                    }),
                    &trace,
                )
                .await;
                let outcome = match action_spec(&workflow, action) {
                    Ok(spec) => self.runner.run(wf, &spec, &cancel).await,
                    Err(failure) => ActionOutcome::Failed(failure),
                };
                let label = match &outcome {
                    ActionOutcome::Succeeded => "Succeeded".to_owned(),
                    ActionOutcome::Failed(f) => f.reason.to_string(),
                };
                tracing::Span::current().record("outcome", label.as_str());
                self.metrics
                    .actions
                    .get_or_create(&OutcomeLabel { outcome: label })
                    .inc();
                (outcome, trace)
            }
            .instrument(span.clone())
            .await;
            let (outcome, action_trace) = outcome;
            match outcome {
                ActionOutcome::Succeeded => {
                    info!(parent: &span, "action succeeded");
                    self.emit(
                        wf,
                        event::Event::ActionSucceeded(event::ActionSucceeded {
                            action_id: action.id.clone(),
                        }),
                        &action_trace,
                    )
                    .await;
                }
                ActionOutcome::Failed(Failure {
                    reason: FailureReason::Canceled,
                    ..
                }) => {
                    return self
                        .report_stop(wf, Some(&action.id), &cause, &action_trace)
                        .await;
                }
                ActionOutcome::Failed(failure) => {
                    warn!(parent: &span, reason = %failure.reason, message = %failure.message, "action failed");
                    self.emit(
                        wf,
                        event::Event::ActionFailed(event::ActionFailed {
                            action_id: action.id.clone(),
                            failure_reason: Some(failure.reason.to_string()),
                            failure_message: Some(failure.message),
                        }),
                        &action_trace,
                    )
                    .await;
                    return false;
                }
            }
        }
        info!("workflow finished: every action succeeded");
        false
    }

    /// After the runner stopped because of `cancel`: confirm a `StopWorkflow`, or report the
    /// interrupted action on shutdown.
    async fn report_stop(
        &self,
        workflow_id: &str,
        action_id: Option<&str>,
        cause: &Mutex<Option<StopCause>>,
        trace: &HashMap<String, String>,
    ) -> bool {
        let cause = cause.lock().ok().and_then(|c| c.clone());
        match (cause, action_id) {
            (Some(StopCause::Shutdown), Some(action_id)) => {
                self.emit(
                    workflow_id,
                    event::Event::ActionFailed(event::ActionFailed {
                        action_id: action_id.to_owned(),
                        failure_reason: Some(REASON_AGENT_SHUTDOWN.to_owned()),
                        failure_message: Some(
                            "the agent shut down while the action ran; its container was stopped"
                                .to_owned(),
                        ),
                    }),
                    trace,
                )
                .await;
                false
            }
            (Some(StopCause::Shutdown), None) => false,
            (stop, action_id) => {
                let (reason, message) = match stop {
                    Some(StopCause::Stop { reason, message }) => (reason, message),
                    _ => (None, None),
                };
                let what = match action_id {
                    Some(id) => format!("action {id} was stopped"),
                    None => "no action was running".to_owned(),
                };
                info!(workflow_id, action_id, "workflow canceled");
                self.emit(
                    workflow_id,
                    event::Event::WorkflowCanceled(event::WorkflowCanceled {
                        action_id: action_id.map(str::to_owned),
                        reason: Some(REASON_CANCELED.to_owned()),
                        message: Some(cancel_message(reason.as_deref(), message.as_deref(), &what)),
                    }),
                    trace,
                )
                .await;
                true
            }
        }
    }

    async fn emit(&self, workflow_id: &str, kind: event::Event, trace: &HashMap<String, String>) {
        let event = Event {
            workflow_id: workflow_id.to_owned(),
            event: Some(kind),
            ..Default::default()
        };
        self.metrics.events_queued.inc();
        if self
            .outbox
            .send(Outgoing::new(event, &self.agent_id, trace.clone()))
            .await
            .is_err()
        {
            self.metrics.events_queued.dec();
            self.metrics.events_dropped.inc();
            warn!(workflow_id, "the event publisher is gone; event dropped");
        }
    }
}

/// `"<what>; stop reason: <reason>: <message>"`, leaving out what was not given.
fn cancel_message(reason: Option<&str>, message: Option<&str>, what: &str) -> String {
    match (reason, message) {
        (Some(r), Some(m)) => format!("{what}; stop reason {r}: {m}"),
        (Some(r), None) => format!("{what}; stop reason {r}"),
        (None, Some(m)) => format!("{what}; {m}"),
        (None, None) => what.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::cancel_message;

    #[test]
    fn cancel_messages() {
        assert_eq!(cancel_message(None, None, "x"), "x");
        assert_eq!(
            cancel_message(Some("Deleted"), Some("by user"), "x"),
            "x; stop reason Deleted: by user"
        );
        assert_eq!(
            cancel_message(Some("Deleted"), None, "x"),
            "x; stop reason Deleted"
        );
        assert_eq!(cancel_message(None, Some("m"), "x"), "x; m");
    }
}
