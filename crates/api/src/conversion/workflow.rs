//! Workflow field mappings (see the module documentation of [`super`]).

use serde_json::Value;

use super::Mapping;
use super::patch::{keyify_at, str_field, unkeyify_at};
use super::template::timeout_secs;
use crate::Timeout;
use crate::v1alpha1 as a1;
use crate::v1alpha2 as a2;

pub(super) struct WorkflowMapping;

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn state_up(s: &a1::WorkflowState) -> a2::WorkflowState {
    match s {
        a1::WorkflowState::Pending | a1::WorkflowState::Preparing => a2::WorkflowState::Pending,
        a1::WorkflowState::Running => a2::WorkflowState::Running,
        a1::WorkflowState::Success => a2::WorkflowState::Succeeded,
        a1::WorkflowState::Failed | a1::WorkflowState::Timeout => a2::WorkflowState::Failed,
        a1::WorkflowState::Other(_) => a2::WorkflowState::Pending,
    }
}

fn state_down(s: a2::WorkflowState) -> a1::WorkflowState {
    match s {
        a2::WorkflowState::Pending | a2::WorkflowState::Scheduled => a1::WorkflowState::Pending,
        a2::WorkflowState::Running | a2::WorkflowState::Cancelling => a1::WorkflowState::Running,
        a2::WorkflowState::Succeeded => a1::WorkflowState::Success,
        a2::WorkflowState::Failed | a2::WorkflowState::Canceled => a1::WorkflowState::Failed,
    }
}

fn action_state_up(s: Option<&a1::WorkflowState>) -> a2::ActionState {
    match s {
        Some(a1::WorkflowState::Running) => a2::ActionState::Running,
        Some(a1::WorkflowState::Success) => a2::ActionState::Succeeded,
        Some(a1::WorkflowState::Failed | a1::WorkflowState::Timeout) => a2::ActionState::Failed,
        _ => a2::ActionState::Pending,
    }
}

fn action_state_down(s: a2::ActionState) -> a1::WorkflowState {
    match s {
        a2::ActionState::Pending => a1::WorkflowState::Pending,
        a2::ActionState::Running => a1::WorkflowState::Running,
        a2::ActionState::Succeeded => a1::WorkflowState::Success,
        a2::ActionState::Failed | a2::ActionState::Canceled => a1::WorkflowState::Failed,
    }
}

fn status_up(s: &a1::WorkflowStatus) -> a2::WorkflowStatus {
    let agent_id = Some(s.agent_id.as_str())
        .filter(|a| !a.is_empty())
        .or_else(|| {
            s.tasks
                .iter()
                .map(|t| t.agent_id.as_str())
                .find(|a| !a.is_empty())
        })
        .map(str::to_string);
    let actions = s
        .tasks
        .iter()
        .flat_map(|t| t.actions.iter())
        .map(|a| a2::ActionStatus {
            rendered: a2::Action {
                name: a.name.clone(),
                image: a.image.clone(),
                args: a.command.clone(),
                env: a.environment.clone(),
                volumes: a.volumes.clone(),
                pid_namespace: (!a.pid.is_empty()).then(|| a.pid.clone()),
                timeout: u64::try_from(a.timeout)
                    .ok()
                    .filter(|t| *t > 0)
                    .map(Timeout::from_secs),
                ..Default::default()
            },
            id: a.name.clone(),
            started_at: a.started_at.clone().or_else(|| a.execution_start.clone()),
            last_transition: None,
            // Current Tinkerbell releases write `state`, older ones `status`.
            state: action_state_up(a.state.as_ref().or(a.status.as_ref())),
            failure_reason: None,
            failure_message: non_empty(&a.message),
        })
        .collect();
    a2::WorkflowStatus {
        actions,
        started_at: s.time_started.clone(),
        state: s.state.as_ref().map(state_up).unwrap_or_default(),
        agent_id,
        ..Default::default()
    }
}

fn status_down(s: &a2::WorkflowStatus) -> a1::WorkflowStatus {
    let actions: Vec<a1::WorkflowAction> = s
        .actions
        .iter()
        .map(|a| a1::WorkflowAction {
            name: a.rendered.name.clone(),
            image: a.rendered.image.clone(),
            timeout: timeout_secs(a.rendered.timeout.as_ref()),
            command: a.rendered.args.clone(),
            volumes: a.rendered.volumes.clone(),
            environment: a.rendered.env.clone(),
            pid: a.rendered.pid_namespace.clone().unwrap_or_default(),
            status: Some(action_state_down(a.state)),
            started_at: a.started_at.clone(),
            message: a.failure_message.clone().unwrap_or_default(),
            ..Default::default()
        })
        .collect();
    let tasks = if actions.is_empty() {
        Vec::new()
    } else {
        vec![a1::WorkflowTask {
            actions,
            ..Default::default()
        }]
    };
    a1::WorkflowStatus {
        state: Some(state_down(s.state)),
        tasks,
        time_started: s.started_at.clone(),
        agent_id: s.agent_id.clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn by(field: &'static str) -> impl Fn(&Value) -> Option<String> {
    move |v| str_field(v, field).map(str::to_string)
}

impl Mapping for WorkflowMapping {
    type V1 = a1::Workflow;
    type V2 = a2::Workflow;

    fn up(v1: &a1::Workflow, _: &mut Vec<String>) -> a2::Workflow {
        let s = &v1.spec;
        // Tinkerbell copies the Template's global_timeout into status.globalTimeout; its
        // v1alpha2 home is spec.timeout.
        let timeout = v1
            .status
            .as_ref()
            .and_then(|st| u64::try_from(st.global_timeout).ok())
            .filter(|t| *t > 0)
            .map(Timeout::from_secs);
        a2::Workflow {
            metadata: v1.metadata.clone(),
            spec: a2::WorkflowSpec {
                hardware_ref: a2::LocalObjectReference::new(s.hardware_ref.clone()),
                template_ref: a2::LocalObjectReference::new(s.template_ref.clone()),
                template_data: s
                    .hardware_map
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
                timeout,
            },
            status: v1.status.as_ref().map(status_up),
        }
    }

    fn down(v2: &a2::Workflow, _: &mut Vec<String>) -> a1::Workflow {
        let s = &v2.spec;
        let global_timeout = timeout_secs(s.timeout.as_ref());
        let mut status = v2.status.as_ref().map(status_down);
        if global_timeout > 0 {
            status.get_or_insert_with(Default::default).global_timeout = global_timeout;
        }
        a1::Workflow {
            metadata: v2.metadata.clone(),
            spec: a1::WorkflowSpec {
                template_ref: s.template_ref.name.clone(),
                hardware_ref: s.hardware_ref.name.clone(),
                hardware_map: s
                    .template_data
                    .iter()
                    .map(|(k, v)| {
                        let text = match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (k.clone(), text)
                    })
                    .collect(),
                ..Default::default()
            },
            status,
        }
    }

    fn view_v1(v: &mut Value) {
        if let Some(Value::Array(tasks)) = v.pointer_mut("/status/tasks") {
            for task in tasks.iter_mut() {
                keyify_at(task, &["actions"], by("name"));
            }
        }
        keyify_at(v, &["status", "tasks"], by("name"));
    }

    fn unview_v1(v: &mut Value) {
        unkeyify_at(v, &["status", "tasks"]);
        if let Some(Value::Array(tasks)) = v.pointer_mut("/status/tasks") {
            for task in tasks.iter_mut() {
                unkeyify_at(task, &["actions"]);
            }
        }
    }

    fn view_v2(v: &mut Value) {
        keyify_at(v, &["status", "actions"], by("id"));
        keyify_at(v, &["status", "conditions"], by("type"));
    }

    fn unview_v2(v: &mut Value) {
        unkeyify_at(v, &["status", "actions"]);
        unkeyify_at(v, &["status", "conditions"]);
    }
}
