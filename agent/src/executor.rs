//! One workflow at a time: commands in, events out.
//!
//! - Every command is confirmed first with a `WorkflowReceived` receipt (again for a redelivered
//!   one); a workflow runs no action before a server confirmed its receipt.
//! - `StartWorkflow` while idle: the workflow runs, action after action, until one fails or all
//!   succeed. Each action is `ActionStarted` (sent once its image is present, so a pull never
//!   counts against the action's timeout) then `ActionSucceeded` or `ActionFailed`.
//! - `StartWorkflow` for another workflow while busy: `WorkflowRejected` with reason `AgentBusy`.
//!   The same workflow again (a redelivered command): only the receipt again.
//! - `StartWorkflow` for a dispatch this process already ran: `WorkflowRejected` with reason
//!   `AlreadyRun` (the last [`crate::AgentConfig::remembered_dispatches`] are remembered).
//! - The power contract: an action that succeeded may have written `/tinkerbell/power`; once the
//!   whole workflow succeeded and every event is confirmed, the configured command runs.
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
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, warn};

use crate::client::{Outgoing, trace_context};
use crate::config::PowerCommands;
use crate::convert::action_spec;
use crate::metrics::{Metrics, OutcomeLabel};
use crate::reason::{Failure, FailureReason};
use crate::runtime::PowerAction;
use crate::runtime::{ActionOutcome, DockerRunner};

/// The reason of a `WorkflowRejected` sent while another workflow runs.
pub const REASON_AGENT_BUSY: &str = "AgentBusy";
/// The reason of an `ActionFailed` for an action stopped because the agent shuts down.
pub const REASON_AGENT_SHUTDOWN: &str = "AgentShutdown";
/// The reason of a `WorkflowCanceled`.
pub const REASON_CANCELED: &str = "Canceled";
/// The reason of a `WorkflowRejected` for a dispatch this process already ran.
pub const REASON_ALREADY_RUN: &str = "AlreadyRun";

/// The dispatch ids this process ran or runs, the most recent `max`.
#[derive(Debug, Default)]
struct Remembered {
    order: std::collections::VecDeque<String>,
    set: std::collections::HashSet<String>,
    max: usize,
}

impl Remembered {
    /// Records `id`; `false` when it was already there.
    fn insert(&mut self, id: &str) -> bool {
        if self.set.contains(id) {
            return false;
        }
        self.set.insert(id.to_owned());
        self.order.push_back(id.to_owned());
        while self.order.len() > self.max.max(1) {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

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
    instance_id: String,
    runner: DockerRunner,
    outbox: mpsc::Sender<Outgoing>,
    metrics: Metrics,
    remembered: Arc<Mutex<Remembered>>,
    power: PowerCommands,
}

impl Executor {
    /// An executor publishing events through `outbox`, with a random instance id, 4096
    /// remembered dispatches and the default power commands.
    pub fn new(
        agent_id: String,
        runner: DockerRunner,
        outbox: mpsc::Sender<Outgoing>,
        metrics: Metrics,
    ) -> Self {
        Self {
            agent_id,
            instance_id: uuid::Uuid::new_v4().to_string(),
            runner,
            outbox,
            metrics,
            remembered: Arc::new(Mutex::new(Remembered {
                max: 4096,
                ..Remembered::default()
            })),
            power: PowerCommands::default(),
        }
    }

    /// Takes the instance id, the memory size and the power commands from `config`.
    pub fn configured(mut self, config: &crate::AgentConfig) -> Self {
        self.instance_id = config.instance_id.clone();
        self.power = config.power_commands.clone();
        if let Ok(mut r) = self.remembered.lock() {
            r.max = config.remembered_dispatches;
        }
        self
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
                let id = workflow.workflow_id.clone();
                let receipt = self.receipt(&id, false, &trace).await;
                match current {
                    Some(r) if r.workflow_id == id => {
                        info!(workflow_id = %id, "a repeated StartWorkflow for the running workflow: receipt sent again");
                    }
                    _ if !self.remember(&id) => {
                        info!(workflow_id = %id, "refusing a dispatch this agent already ran");
                        self.metrics.workflows_rejected.inc();
                        self.emit(
                            &id,
                            event::Event::WorkflowRejected(event::WorkflowRejected {
                                failure_reason: Some(REASON_ALREADY_RUN.to_owned()),
                                failure_message: format!(
                                    "agent {} already ran dispatch {id}; it never runs one twice",
                                    self.agent_id
                                ),
                            }),
                            &trace,
                        )
                        .await;
                    }
                    Some(r) => {
                        info!(workflow_id = %id, running = %r.workflow_id, "rejecting a workflow: busy");
                        // Not run: it may be dispatched again.
                        self.forget(&id);
                        self.metrics.workflows_rejected.inc();
                        let message = format!(
                            "agent {} is running workflow {}",
                            self.agent_id, r.workflow_id
                        );
                        self.emit(
                            &id,
                            event::Event::WorkflowRejected(event::WorkflowRejected {
                                failure_reason: Some(REASON_AGENT_BUSY.to_owned()),
                                failure_message: message,
                            }),
                            &trace,
                        )
                        .await;
                    }
                    None => *current = Some(self.start(workflow, trace, receipt)),
                }
            }
            Some(get_workflows_response::Cmd::StopWorkflow(stop)) => {
                drop(self.receipt(&stop.workflow_id, true, &trace).await);
                self.stop(stop, current, &trace).await;
            }
            // The command stream hands inventory requests to the inventory task.
            Some(get_workflows_response::Cmd::RequestInventory(_)) => {}
            None => warn!("ignoring a command of an unknown kind (a newer server?)"),
        }
    }

    async fn stop(
        &self,
        stop: get_workflows_response::StopWorkflow,
        current: &mut Option<Running>,
        trace: &HashMap<String, String>,
    ) {
        match current {
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
                    trace,
                )
                .await;
            }
        }
    }

    fn start(
        &self,
        workflow: Workflow,
        trace: HashMap<String, String>,
        receipt: oneshot::Receiver<()>,
    ) -> Running {
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
            async move {
                // No action before a server confirmed the receipt: a command that never
                // reached the bus as received may be delivered again to another process.
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        return this.report_stop(&workflow.workflow_id, None, &cause, &trace).await;
                    }
                    confirmed = receipt => if confirmed.is_err() {
                        // The publisher gave up (shutdown): run nothing.
                        return false;
                    }
                }
                this.run_workflow(workflow, trace, cancel, cause).await
            }
            .instrument(span)
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
        let mut power: Option<PowerAction> = None;
        let mut last_confirmed: Option<oneshot::Receiver<()>> = None;
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
                let spec = action_spec(&workflow, action);
                // The image first: a pull is outside the action's timeout on both sides, so
                // ActionStarted goes out once the image is present.
                let pulled = match &spec {
                    Ok(spec) => tokio::select! {
                        biased;
                        () = cancel.cancelled() => Err(crate::reason::Failure {
                            reason: FailureReason::Canceled,
                            message: "the workflow was canceled before the action started".to_owned(),
                        }),
                        r = self.runner.ensure_image(&spec.image) => r,
                    },
                    Err(_) => Ok(()),
                };
                let outcome = match (spec, pulled) {
                    (Ok(spec), Ok(())) => {
                        self.emit(
                            wf,
                            event::Event::ActionStarted(event::ActionStarted {
                                action_id: action.id.clone(),
                            }),
                            &trace,
                        )
                        .await;
                        let run = self.runner.run_action(wf, &spec, &cancel).await;
                        if let Some(p) = run.power {
                            info!(power = ?p, "the action asks for a power action after the workflow");
                            power = Some(p);
                        }
                        run.outcome
                    }
                    (Ok(_), Err(failure)) | (Err(failure), _) => ActionOutcome::Failed(failure),
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
                    last_confirmed = Some(
                        self.emit_confirmed(
                            wf,
                            event::Event::ActionSucceeded(event::ActionSucceeded {
                                action_id: action.id.clone(),
                            }),
                            &action_trace,
                        )
                        .await,
                    );
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
        if let (Some(action), Some(confirmed)) = (power, last_confirmed) {
            // Only once the workflow's success is stored: the events go in order, so the last
            // one confirmed means all were.
            tokio::select! {
                () = cancel.cancelled() => {
                    info!(?action, "not carrying out the power action: the agent is stopping");
                    return false;
                }
                r = confirmed => if r.is_err() {
                    warn!(?action, "the workflow's last event was never confirmed; no power action");
                    return false;
                }
            }
            self.power_action(action).await;
        }
        false
    }

    /// Runs the configured command of a power action.
    async fn power_action(&self, action: PowerAction) {
        let command = match action {
            PowerAction::Reboot => &self.power.reboot,
            PowerAction::Kexec => &self.power.kexec,
            PowerAction::Poweroff => &self.power.poweroff,
        };
        let Some((program, args)) = command.split_first() else {
            warn!(?action, "no command is configured for this power action");
            return;
        };
        info!(
            ?action,
            program, "the workflow succeeded and is stored: carrying out its power action"
        );
        match tokio::process::Command::new(program)
            .args(args)
            .status()
            .await
        {
            Ok(status) if status.success() => {}
            Ok(status) => warn!(?action, %status, "the power command failed"),
            Err(e) => warn!(?action, error = %e, "cannot run the power command"),
        }
    }

    /// Remembers a dispatch as run; `false` when it already was.
    fn remember(&self, id: &str) -> bool {
        self.remembered.lock().map_or(true, |mut r| r.insert(id))
    }

    /// Forgets a dispatch that was not run after all (rejected while busy).
    fn forget(&self, id: &str) {
        if let Ok(mut r) = self.remembered.lock() {
            r.set.remove(id);
            r.order.retain(|o| o != id);
        }
    }

    /// Sends the receipt of a command; the receiver is told once a server confirmed it.
    async fn receipt(
        &self,
        workflow_id: &str,
        stop: bool,
        trace: &HashMap<String, String>,
    ) -> oneshot::Receiver<()> {
        use event::workflow_received::Command;
        let mut received = event::WorkflowReceived::default();
        received.set_command(if stop { Command::Stop } else { Command::Start });
        self.emit_confirmed(workflow_id, event::Event::WorkflowReceived(received), trace)
            .await
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
        drop(self.emit_confirmed(workflow_id, kind, trace).await);
    }

    /// Queues an event; the receiver is told once a server confirmed it (never, if the
    /// publisher gave up on it).
    async fn emit_confirmed(
        &self,
        workflow_id: &str,
        kind: event::Event,
        trace: &HashMap<String, String>,
    ) -> oneshot::Receiver<()> {
        let event = Event {
            workflow_id: workflow_id.to_owned(),
            event: Some(kind),
            ..Default::default()
        };
        let (tx, rx) = oneshot::channel();
        let mut outgoing = Outgoing::new(event, &self.agent_id, &self.instance_id, trace.clone());
        outgoing.confirmed = Some(tx);
        self.metrics.events_queued.inc();
        if self.outbox.send(outgoing).await.is_err() {
            self.metrics.events_queued.dec();
            self.metrics.events_dropped.inc();
            warn!(workflow_id, "the event publisher is gone; event dropped");
        }
        rx
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
