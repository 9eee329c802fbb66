//! A Task: its one action run against the BMC. A power change completes only when the BMC
//! reports the target state, is sent at most once (see [`crate::task`] for how a restarted
//! controller knows), and refreshes the Machine's `status.powerState` at once.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource as _, ResourceExt as _};
use serde_json::json;
use tink_api::bmc::{
    ActionKind, ConditionStatus, Machine, PowerAction, Task, TaskConditionType, TaskStatus,
};
use tink_bmc::{Bmc, PowerChange};
use tracing::{info, warn};

use crate::context::Ctx;
use crate::error::Error;
use crate::reconcile::machine;
use crate::task::{PowerPhase, SENT_ANNOTATION, finished, power_phase};

fn api(ctx: &Ctx, task: &Task) -> Result<Api<Task>, Error> {
    let ns = task.namespace().ok_or(Error::Unnamed("Task"))?;
    Ok(Api::namespaced(ctx.client.clone(), &ns))
}

async fn write_status(ctx: &Ctx, task: &Task, status: &TaskStatus) -> Result<(), Error> {
    api(ctx, task)?
        .patch_status(
            &task.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    Ok(())
}

fn status_of(task: &Task) -> TaskStatus {
    task.status.clone().unwrap_or_default()
}

/// Sets `startTime` (the write before anything is sent).
async fn start(ctx: &Ctx, task: &Task) -> Result<(), Error> {
    let mut status = status_of(task);
    if status.start_time.is_none() {
        status.start_time = Some(Time(Timestamp::now()));
        write_status(ctx, task, &status).await?;
    }
    Ok(())
}

async fn complete(ctx: &Ctx, task: &Task, note: &str) -> Result<Action, Error> {
    let mut status = status_of(task);
    let now = Time(Timestamp::now());
    status.start_time.get_or_insert(now.clone());
    status.completion_time = Some(now);
    status.set_condition(TaskConditionType::Completed, ConditionStatus::True, "");
    write_status(ctx, task, &status).await?;
    info!(task = %task.name_any(), note, "task completed");
    ctx.event(&task.object_ref(&()), false, "Completed", note);
    Ok(Action::await_change())
}

async fn fail(ctx: &Ctx, task: &Task, message: &str) -> Result<Action, Error> {
    let mut status = status_of(task);
    status.start_time.get_or_insert(Time(Timestamp::now()));
    status.set_condition(TaskConditionType::Failed, ConditionStatus::True, message);
    write_status(ctx, task, &status).await?;
    warn!(task = %task.name_any(), message, "task failed");
    ctx.event(&task.object_ref(&()), true, "Failed", message);
    Ok(Action::await_change())
}

/// The Machine of the Job that owns `task`, when there is one.
fn machine_of(ctx: &Ctx, task: &Task) -> Option<Arc<Machine>> {
    let ns = task.namespace()?;
    let owner = task
        .owner_references()
        .iter()
        .find(|o| o.kind == "Job" && o.controller == Some(true))?;
    let job = ctx.jobs.get(&ObjectRef::new(&owner.name).within(&ns))?;
    if job.uid().as_deref() != Some(owner.uid.as_str()) {
        return None;
    }
    ctx.machines
        .get(&ObjectRef::new(&job.spec.machine_ref.name).within(&ns))
}

/// Writes what a task saw of the power state into its Machine at once.
async fn refresh_machine(ctx: &Ctx, task: &Task, observed: &machine::Observation) {
    if let Some(m) = machine_of(ctx, task)
        && let Err(e) = machine::record(ctx, &m, observed).await
    {
        warn!(error = %e, machine = %m.name_any(), "cannot refresh the Machine's power state");
    }
}

fn since(at: Timestamp) -> Duration {
    let ms = Timestamp::now().as_millisecond() - at.as_millisecond();
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Sends `change` through `bmc` (the provider that just answered), then records that the BMC
/// accepted it.
async fn send(ctx: &Ctx, task: &Task, bmc: &dyn Bmc, change: PowerChange) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let sent = bmc.set_power(change).await;
    ctx.metrics.op(
        "set_power",
        change.as_str(),
        sent.is_ok(),
        started.elapsed().as_secs_f64(),
    );
    if let Err(e) = sent {
        let message = if change.is_idempotent() || e.kind.never_sent() {
            format!("power {}: {e}", change.as_str())
        } else {
            format!(
                "power {}: {e} (the request may have reached the BMC; it is not repeated)",
                change.as_str()
            )
        };
        return fail(ctx, task, &message).await;
    }
    let uid = task.uid().unwrap_or_default();
    ctx.mark_sent(&uid);
    info!(task = %task.name_any(), change = change.as_str(), "power action accepted by the BMC");
    let mark =
        json!({ "metadata": { "annotations": { SENT_ANNOTATION: Timestamp::now().to_string() } } });
    api(ctx, task)?
        .patch(
            &task.name_any(),
            &PatchParams::default(),
            &Patch::Merge(mark),
        )
        .await?;
    Ok(Action::requeue(ctx.config.power_recheck))
}

async fn power(
    ctx: &Ctx,
    task: &Task,
    providers: &[Box<dyn Bmc>],
    change: PowerChange,
) -> Result<Action, Error> {
    let target = change.target_state();
    let uid = task.uid().unwrap_or_default();
    let name = change.as_str();
    match power_phase(task, ctx.sent_here(&uid)) {
        PowerPhase::Finished => Ok(Action::await_change()),
        PowerPhase::Fresh => {
            let (index, state) = match ctx.power_state(providers).await {
                Ok(v) => v,
                Err(m) => {
                    return fail(
                        ctx,
                        task,
                        &format!("cannot read the power state before power {name}: {m}"),
                    )
                    .await;
                }
            };
            refresh_machine(ctx, task, &Ok(state)).await;
            if change.is_idempotent() && state == target {
                return complete(ctx, task, &format!("power {name}: already {state}")).await;
            }
            start(ctx, task).await?;
            send(ctx, task, providers[index].as_ref(), change).await
        }
        PowerPhase::Sent { at } => {
            let observed = ctx.power_state(providers).await.map(|(_, s)| s);
            if let Ok(state) = observed {
                refresh_machine(ctx, task, &Ok(state)).await;
                if state == target {
                    return complete(ctx, task, &format!("power {name}: the BMC reports {state}"))
                        .await;
                }
            }
            if since(at) >= ctx.config.power_wait {
                let seen = match observed {
                    Ok(s) => s.to_string(),
                    Err(e) => format!("no answer ({e})"),
                };
                let message = format!(
                    "power {name}: the BMC accepted it at {at} but reports {seen} after {}s, not {target}",
                    ctx.config.power_wait.as_secs()
                );
                return fail(ctx, task, &message).await;
            }
            Ok(Action::requeue(ctx.config.power_recheck))
        }
        PowerPhase::Interrupted { at } => {
            let observed = ctx.power_state(providers).await;
            if !change.is_idempotent() {
                let now = match &observed {
                    Ok((_, s)) => s.to_string(),
                    Err(e) => format!("unknown ({e})"),
                };
                let message = format!(
                    "interrupted: a controller stopped while sending power {name} (started {at}); whether the BMC received it is unknown and a {name} is not repeated blindly (power state now: {now}); create a new Job to try again"
                );
                return fail(ctx, task, &message).await;
            }
            match observed {
                Ok((_, state)) if state == target => {
                    refresh_machine(ctx, task, &Ok(state)).await;
                    complete(ctx, task, &format!("power {name}: the BMC reports {state}")).await
                }
                Ok((index, state)) => {
                    refresh_machine(ctx, task, &Ok(state)).await;
                    send(ctx, task, providers[index].as_ref(), change).await
                }
                Err(m) => {
                    fail(
                        ctx,
                        task,
                        &format!("cannot read the power state before power {name}: {m}"),
                    )
                    .await
                }
            }
        }
    }
}

pub(crate) async fn reconcile(task: Arc<Task>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if finished(&task) || task.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = task.namespace().ok_or(Error::Unnamed("Task"))?;
    let Some(connection) = task.spec.connection.as_ref() else {
        return fail(
            &ctx,
            &task,
            "spec.connection is missing: a Task needs the BMC's connection",
        )
        .await;
    };
    let providers = match ctx.providers(&ns, connection).await {
        Ok(p) => p,
        Err(e) => return fail(&ctx, &task, &e.to_string()).await,
    };
    let Some(kind) = task.spec.task.kind() else {
        return fail(&ctx, &task, "spec.task names no action").await;
    };
    match kind {
        ActionKind::Power(PowerAction::Status) => match ctx.power_state(&providers).await {
            Ok((_, state)) => {
                refresh_machine(&ctx, &task, &Ok(state)).await;
                complete(&ctx, &task, &format!("power state: {state}")).await
            }
            Err(m) => {
                refresh_machine(&ctx, &task, &Err(m.clone())).await;
                fail(&ctx, &task, &format!("power status: {m}")).await
            }
        },
        ActionKind::Power(action) => match PowerChange::from_action(action) {
            Some(change) => power(&ctx, &task, &providers, change).await,
            None => fail(&ctx, &task, &format!("unknown power action {action}")).await,
        },
        ActionKind::OneTimeBootDevice(boot) => {
            let Some(device) = boot.devices.first().copied() else {
                return fail(
                    &ctx,
                    &task,
                    "spec.task.oneTimeBootDeviceAction.device is empty",
                )
                .await;
            };
            start(&ctx, &task).await?;
            let efi = boot.efi_boot;
            match ctx
                .first_answer(&providers, "boot_once", |p| p.set_boot_once(device, efi))
                .await
            {
                Ok(_) => {
                    let mode = if efi { "UEFI" } else { "legacy" };
                    complete(&ctx, &task, &format!("next boot from {device} ({mode})")).await
                }
                Err(m) => fail(&ctx, &task, &format!("boot once {device}: {m}")).await,
            }
        }
        ActionKind::VirtualMedia(media) => {
            start(&ctx, &task).await?;
            let url = media.media_url.clone();
            if url.is_empty() {
                match ctx
                    .first_answer(&providers, "eject_media", |p| p.eject_media())
                    .await
                {
                    Ok(_) => complete(&ctx, &task, "virtual media ejected").await,
                    Err(m) => fail(&ctx, &task, &format!("eject virtual media: {m}")).await,
                }
            } else {
                let u = url.as_str();
                match ctx
                    .first_answer(&providers, "insert_media", |p| p.insert_media(u))
                    .await
                {
                    Ok(_) => complete(&ctx, &task, &format!("virtual media {url} inserted")).await,
                    Err(m) => fail(&ctx, &task, &format!("insert virtual media {url}: {m}")).await,
                }
            }
        }
    }
}
