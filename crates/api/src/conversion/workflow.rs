//! Workflow field mappings (see the module documentation of [`super`]).

use serde_json::Value;

use super::Mapping;
use super::patch::{keyify_at, str_field, unkeyify_at};
use super::template::timeout_secs;
use crate::Timeout;
use crate::bmc;
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

/// `bootOptions` up: `bootMode` (`iso` is the older spelling of `isoboot`; an empty one with
/// `oneTimeNetboot: true` is `netboot`, as Tinkerbell treated it), `isoURL`, `custombootConfig`.
fn boot_up(b: &a1::BootOpts, warnings: &mut Vec<String>) -> a2::BootOptions {
    let boot_mode = match b.boot_mode.as_str() {
        "netboot" => Some(a2::BootMode::Netboot),
        "isoboot" | "iso" => Some(a2::BootMode::Isoboot),
        "customboot" => Some(a2::BootMode::Customboot),
        "" => b.one_time_netboot.then_some(a2::BootMode::Netboot),
        other => {
            warnings.push(format!(
                "spec.bootOptions.bootMode: {other:?} is not one of {}; it has no effect",
                a1::BOOT_MODES.join(", ")
            ));
            None
        }
    };
    a2::BootOptions {
        toggle_allow_netboot: b.toggle_allow_netboot,
        iso_url: non_empty(&b.iso_url),
        boot_mode,
        customboot_config: b.customboot_config.as_ref().map(|c| a2::CustombootConfig {
            preparing_actions: actions_up(&c.preparing_actions, "preparingActions", warnings),
            post_actions: actions_up(&c.post_actions, "postActions", warnings),
        }),
    }
}

fn actions_up(
    actions: &[a1::BmcAction],
    list: &str,
    warnings: &mut Vec<String>,
) -> Vec<bmc::Action> {
    actions
        .iter()
        .enumerate()
        .map(|(i, a)| {
            action_up(a).unwrap_or_else(|why| {
                warnings.push(format!(
                    "spec.bootOptions.custombootConfig.{list}[{i}]: {why}"
                ));
                // An action naming no operation: admission refuses it, the controller never
                // runs it; the original stays in the conversion annotation.
                bmc::Action::default()
            })
        })
        .collect()
}

/// One customboot action up. A one-time `bootDevice` is the same operation as
/// `oneTimeBootDeviceAction`; a persistent one, one without a device, an action naming several
/// operations and unknown (newer) actions have no v1alpha2 form.
fn action_up(a: &a1::BmcAction) -> Result<bmc::Action, &'static str> {
    if !a.extra.is_empty() {
        return Err(
            "this BMC action is not supported (power, one-time boot device and virtual media are)",
        );
    }
    let boot_device = match &a.boot_device {
        None => None,
        Some(d) if d.persistent => {
            return Err("a persistent bootDevice is not supported: use a one-time boot device");
        }
        Some(a1::BootDeviceConfig {
            device: Some(device),
            efi_boot,
            extra,
            ..
        }) if extra.is_empty() => Some(bmc::OneTimeBootDeviceAction {
            devices: vec![*device],
            efi_boot: *efi_boot,
        }),
        Some(_) => return Err("bootDevice needs a device (and no other fields)"),
    };
    if boot_device.is_some() && a.one_time_boot_device_action.is_some() {
        return Err("set either bootDevice or oneTimeBootDeviceAction, not both");
    }
    Ok(bmc::Action {
        power_action: a.power_action,
        one_time_boot_device_action: a.one_time_boot_device_action.clone().or(boot_device),
        virtual_media_action: a.virtual_media_action.clone(),
    })
}

fn boot_down(b: &a2::BootOptions) -> a1::BootOpts {
    let actions = |v: &[bmc::Action]| -> Vec<a1::BmcAction> {
        v.iter()
            .map(|a| a1::BmcAction {
                power_action: a.power_action,
                one_time_boot_device_action: a.one_time_boot_device_action.clone(),
                virtual_media_action: a.virtual_media_action.clone(),
                ..Default::default()
            })
            .collect()
    };
    a1::BootOpts {
        toggle_allow_netboot: b.toggle_allow_netboot,
        boot_mode: b
            .boot_mode
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
        iso_url: b.iso_url.clone().unwrap_or_default(),
        customboot_config: b.customboot_config.as_ref().map(|c| a1::CustombootConfig {
            preparing_actions: actions(&c.preparing_actions),
            post_actions: actions(&c.post_actions),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn boot_status_up(s: &a1::BootOptionsStatus) -> a2::BootOptionsStatus {
    let allow = s.allow_netboot.as_ref();
    a2::BootOptionsStatus {
        allow_netboot: a2::AllowNetbootStatus {
            toggled_true: allow.is_some_and(|a| a.toggled_true),
            toggled_false: allow.is_some_and(|a| a.toggled_false),
        },
        jobs: s
            .jobs
            .iter()
            .map(|(name, j)| {
                let job = a2::BootJobStatus {
                    uid: non_empty(&j.uid),
                    complete: j.complete,
                    existing_job_deleted: j.existing_job_deleted,
                };
                (name.clone(), job)
            })
            .collect(),
    }
}

fn boot_status_down(s: &a2::BootOptionsStatus) -> Option<a1::BootOptionsStatus> {
    if s.is_empty() {
        return None;
    }
    let allow = &s.allow_netboot;
    Some(a1::BootOptionsStatus {
        allow_netboot: (!allow.is_empty()).then(|| a1::AllowNetbootStatus {
            toggled_true: allow.toggled_true,
            toggled_false: allow.toggled_false,
            ..Default::default()
        }),
        jobs: s
            .jobs
            .iter()
            .map(|(name, j)| {
                let job = a1::JobStatus {
                    uid: j.uid.clone().unwrap_or_default(),
                    complete: j.complete,
                    existing_job_deleted: j.existing_job_deleted,
                    ..Default::default()
                };
                (name.clone(), job)
            })
            .collect(),
        ..Default::default()
    })
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
        boot_options: s
            .boot_options
            .as_ref()
            .map(boot_status_up)
            .unwrap_or_default(),
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
        boot_options: boot_status_down(&s.boot_options),
        ..Default::default()
    }
}

fn by(field: &'static str) -> impl Fn(&Value) -> Option<String> {
    move |v| str_field(v, field).map(str::to_string)
}

impl Mapping for WorkflowMapping {
    type V1 = a1::Workflow;
    type V2 = a2::Workflow;

    fn up(v1: &a1::Workflow, warnings: &mut Vec<String>) -> a2::Workflow {
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
                boot_options: s.boot_options.as_ref().map(|b| boot_up(b, warnings)),
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
                boot_options: s.boot_options.as_ref().map(boot_down),
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
