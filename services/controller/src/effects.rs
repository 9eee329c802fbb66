//! The commands and events a transition publishes: StartWorkflow (first publish, and after a
//! restart only when provably gone), StopWorkflow (withdrawing a start the agent never
//! confirmed first), and a verdict about a Workflow's agent as an event of its dispatch.

use jiff::Timestamp;
use kube::ResourceExt as _;
use tink_api::v1alpha2::{Workflow, WorkflowState, WorkflowStatus};
use tink_bus::proto::{GetWorkflowsResponse, event, get_workflows_response, workflow as pw};
use tink_workflow::{EventReason, Verdict};
use tracing::{Instrument as _, debug, info, warn};

use crate::error::StepError;
use crate::keys::key_of;
use crate::metrics::Metrics;

/// The publisher of commands and verdicts.
pub(crate) struct Effects {
    metrics: Metrics,
    /// The streams (publishes, delivery look-ups, withdrawals).
    bus: tink_bus::Bus,
}

impl Effects {
    pub fn new(metrics: Metrics, bus: tink_bus::Bus) -> Self {
        Self { metrics, bus }
    }

    /// Publishes the StartWorkflow of a dispatch just written to `w`'s status.
    pub async fn publish_start(
        &self,
        w: &Workflow,
        status: &WorkflowStatus,
        agent_id: &str,
        dispatch_id: &str,
    ) -> Result<(), StepError> {
        let uid = w.uid().unwrap_or_default();
        let span = tracing::info_span!("dispatch", workflow = %key_of(w), agent = %agent_id, dispatch = %dispatch_id);
        tink_telemetry::propagation::set_parent(&span, crate::trace::workflow_context(&uid));
        let cmd = start_command(dispatch_id, status);
        let cx = span.in_scope(|| crate::trace::command_context(&uid));
        let msg_id = format!("{dispatch_id}/start");
        tink_bus::publish_command(&self.bus.jetstream, agent_id, &cmd, &msg_id, &cx)
            .instrument(span)
            .await?;
        if let Some(created) = w.metadata.creation_timestamp.as_ref() {
            let waited = Timestamp::now().duration_since(created.0);
            self.metrics
                .dispatch_seconds
                .observe(waited.as_secs_f64().max(0.0));
        }
        info!(workflow = %key_of(w), agent = %agent_id, dispatch = %dispatch_id, "dispatched");
        Ok(())
    }

    /// Publishes the StopWorkflow of a dispatch. `before` is the status the transition started
    /// from: a start it shows unconfirmed is withdrawn from the agent's queue first.
    pub async fn publish_stop(
        &self,
        w: &Workflow,
        before: Option<&WorkflowStatus>,
        agent_id: &str,
        dispatch_id: &str,
        reason: EventReason,
        message: &str,
    ) -> Result<(), StepError> {
        let uid = w.uid().unwrap_or_default();
        let unconfirmed =
            before.is_some_and(|s| s.state == WorkflowState::Scheduled && s.received_at.is_none());
        if unconfirmed {
            // A start the agent never confirmed must not reach it after the stop's
            // reason (a timeout, a deletion) ended the workflow: take it out of the
            // queue first. The stop follows in any case, for a start already in
            // flight.
            match tink_bus::withdraw_command(
                &self.bus.dispatch,
                &self.bus.events,
                &self.bus.dispatch_targets,
                agent_id,
                dispatch_id,
            )
            .await
            {
                Ok(outcome) => {
                    debug!(dispatch = %dispatch_id, ?outcome, "start withdrawn before the stop")
                }
                Err(e) => {
                    warn!(dispatch = %dispatch_id, error = %e, "cannot withdraw the start before the stop")
                }
            }
        }
        let cmd = GetWorkflowsResponse {
            cmd: Some(get_workflows_response::Cmd::StopWorkflow(
                get_workflows_response::StopWorkflow {
                    workflow_id: dispatch_id.to_string(),
                    reason: Some(reason.as_str().to_string()),
                    message: Some(message.to_string()),
                },
            )),
            ..Default::default()
        };
        let cx = crate::trace::command_context(&uid);
        let msg_id = format!("{dispatch_id}/stop");
        tink_bus::publish_command(&self.bus.jetstream, agent_id, &cmd, &msg_id, &cx).await?;
        info!(workflow = %key_of(w), agent = %agent_id, %reason, "stop sent");
        Ok(())
    }

    /// Tries to withdraw the queued Start of a Scheduled Workflow's dispatch; `true` when it is
    /// proven the agent can never receive it.
    pub async fn withdraw(&self, status: &WorkflowStatus) -> Result<bool, StepError> {
        let (Some(agent_id), Some(dispatch_id)) = (&status.agent_id, &status.dispatch_id) else {
            return Ok(false);
        };
        let outcome = tink_bus::withdraw_command(
            &self.bus.dispatch,
            &self.bus.events,
            &self.bus.dispatch_targets,
            agent_id,
            dispatch_id,
        )
        .await?;
        debug!(dispatch = %dispatch_id, ?outcome, "withdrawal of a start command");
        Ok(outcome == tink_bus::Withdrawal::Withdrawn)
    }

    /// After a restart: publishes the Start of a Scheduled Workflow again only when it is
    /// provably gone, neither waiting in the agent's queue nor received by any agent process
    /// (no event of the dispatch is stored). This repairs a crash between the status write and
    /// the first publish and never hands a dispatch to an agent twice.
    pub async fn republish_start(
        &self,
        w: &Workflow,
        status: &WorkflowStatus,
        agent_id: &str,
        dispatch_id: &str,
    ) -> Result<(), StepError> {
        let msg_id = format!("{dispatch_id}/start");
        if tink_bus::queued_command(&self.bus.dispatch, agent_id, &msg_id)
            .await?
            .is_some()
        {
            self.metrics.resumed_start("queued");
            debug!(workflow = %key_of(w), dispatch = %dispatch_id, "the start command still waits in the agent's queue");
            return Ok(());
        }
        if tink_bus::dispatch_received(&self.bus.events, dispatch_id).await? {
            self.metrics.resumed_start("received");
            debug!(workflow = %key_of(w), dispatch = %dispatch_id, "an agent received the dispatch; its events decide");
            return Ok(());
        }
        self.metrics.resumed_start("republished");
        let uid = w.uid().unwrap_or_default();
        let cmd = start_command(dispatch_id, status);
        let cx = crate::trace::command_context(&uid);
        tink_bus::publish_command(&self.bus.jetstream, agent_id, &cmd, &msg_id, &cx).await?;
        info!(workflow = %key_of(w), agent = %agent_id, dispatch = %dispatch_id, "start command was never published; published it");
        Ok(())
    }

    /// Publishes a verdict about a Workflow's agent as an event of its dispatch (so it is
    /// applied after everything the agent stored before it). De-duplicated per dispatch and
    /// reason.
    pub async fn publish_verdict(&self, w: &Workflow, verdict: &Verdict) -> Result<(), StepError> {
        let event = verdict_event(verdict);
        let uid = w.uid().unwrap_or_default();
        tink_bus::publish_event(
            &self.bus.jetstream,
            &event,
            &crate::trace::command_context(&uid),
        )
        .await?;
        self.metrics.verdict(verdict.reason.as_str());
        warn!(workflow = %key_of(w), dispatch = %verdict.dispatch_id, reason = verdict.reason.as_str(), message = %verdict.message, "failing the workflow on its agent's behalf");
        Ok(())
    }
}

/// The StartWorkflow command of a dispatch, built from the rendered actions.
pub(crate) fn start_command(dispatch_id: &str, status: &WorkflowStatus) -> GetWorkflowsResponse {
    let actions = status
        .actions
        .iter()
        .map(|a| {
            let r = &a.rendered;
            pw::Action {
                id: a.id.clone(),
                name: r.name.clone(),
                image: r.image.clone(),
                cmd: r.cmd.clone(),
                args: r.args.clone(),
                env: r.env.clone().into_iter().collect(),
                volumes: r.volumes.clone(),
                ns: (r.network_namespace.is_some() || r.pid_namespace.is_some()).then(|| {
                    pw::action::Namespace {
                        pid: r.pid_namespace.clone(),
                        net: r.network_namespace.clone(),
                    }
                }),
                timeout_seconds: a.timeout_limit().map(|d| d.as_secs().max(1)),
            }
        })
        .collect();
    GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StartWorkflow(
            get_workflows_response::StartWorkflow {
                workflow: Some(tink_bus::proto::Workflow {
                    workflow_id: dispatch_id.to_string(),
                    actions,
                    ..Default::default()
                }),
            },
        )),
        ..Default::default()
    }
}

/// The protocol event carrying a verdict (see `tink_workflow::agent_verdict`): its event id
/// names the reason, so a verdict published again is de-duplicated by JetStream.
pub(crate) fn verdict_event(verdict: &Verdict) -> tink_bus::proto::Event {
    let reason = Some(verdict.reason.as_str().to_string());
    let message = Some(verdict.message.clone());
    let kind = match (&verdict.action_id, verdict.cancelling) {
        (Some(action_id), false) => event::Event::ActionFailed(event::ActionFailed {
            action_id: action_id.clone(),
            failure_reason: reason,
            failure_message: message,
        }),
        (action_id, _) => event::Event::WorkflowCanceled(event::WorkflowCanceled {
            action_id: action_id.clone(),
            reason,
            message,
        }),
    };
    tink_bus::proto::Event {
        workflow_id: verdict.dispatch_id.clone(),
        event: Some(kind),
        event_id: format!("verdict-{}", verdict.reason.as_str()),
        agent_id: verdict.agent_id.clone().unwrap_or_default(),
        occurred_at: Some(prost_types::Timestamp::from(std::time::SystemTime::now())),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use tink_api::v1alpha2::{Action, ActionStatus};

    use super::*;

    #[test]
    fn start_commands_carry_both_namespaces() {
        let status = WorkflowStatus {
            actions: vec![
                ActionStatus {
                    id: "0-kexec".into(),
                    rendered: Action {
                        name: "kexec".into(),
                        image: "quay.io/tinkerbell/actions/kexec".into(),
                        pid_namespace: Some("host".into()),
                        ..Action::default()
                    },
                    ..ActionStatus::default()
                },
                ActionStatus {
                    id: "1-plain".into(),
                    rendered: Action {
                        name: "plain".into(),
                        image: "busybox".into(),
                        ..Action::default()
                    },
                    ..ActionStatus::default()
                },
            ],
            ..WorkflowStatus::default()
        };
        let cmd = start_command("ns/wf/uid/1", &status);
        let Some(get_workflows_response::Cmd::StartWorkflow(start)) = cmd.cmd else {
            panic!("a start");
        };
        let actions = start.workflow.expect("workflow").actions;
        let ns = actions[0].ns.as_ref().expect("namespaces");
        assert_eq!(ns.pid.as_deref(), Some("host"));
        assert_eq!(ns.net, None);
        assert_eq!(actions[1].ns, None);
    }
}
