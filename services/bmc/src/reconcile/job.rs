//! A Job: the one step [`crate::job::next_step`] names, applied. One Job at a time per Machine
//! ([`crate::job::runnable`]); each task a child Task with a deterministic name, so a Job
//! reconciled again (after a restart, or from a stale cache) finds the Task it created and
//! never creates a second one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource as _, ResourceExt as _};
use serde_json::json;
use tink_api::bmc::{ConditionStatus, Job, JobConditionType, JobStatus, Machine, Task, TaskStatus};
use tracing::info;

use crate::context::Ctx;
use crate::error::Error;
use crate::job::{Step, needs_start, next_step, runnable};

/// How often a Job waiting for another Job of its Machine looks again.
const QUEUED_RECHECK: Duration = Duration::from_secs(2);
/// How often a Job whose task runs looks at its Machine (a deleted Machine fails the Job).
const RUNNING_RECHECK: Duration = Duration::from_secs(5);

/// The Machine a Job names, from the cache, or (when the cache has none: it may lag) from the
/// API server.
async fn machine(ctx: &Ctx, namespace: &str, name: &str) -> Result<Option<Machine>, Error> {
    if let Some(m) = ctx.machines.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some((*m).clone()));
    }
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(api.get_opt(name).await?)
}

/// The statuses of the Tasks `job` owns, by name.
fn owned_tasks(tasks: &Store<Task>, job: &Job) -> BTreeMap<String, TaskStatus> {
    let uid = job.uid().unwrap_or_default();
    tasks
        .state()
        .iter()
        .filter(|t| t.owner_references().iter().any(|o| o.uid == uid))
        .map(|t| (t.name_any(), t.status.clone().unwrap_or_default()))
        .collect()
}

async fn set_status(ctx: &Ctx, job: &Job, status: &JobStatus) -> Result<(), Error> {
    let ns = job.namespace().ok_or(Error::Unnamed("Job"))?;
    Api::<Job>::namespaced(ctx.client.clone(), &ns)
        .patch_status(
            &job.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    Ok(())
}

async fn fail(ctx: &Ctx, job: &Job, message: &str) -> Result<Action, Error> {
    let mut status = job.status.clone().unwrap_or_default();
    status.set_condition(JobConditionType::Running, ConditionStatus::False, "");
    status.set_condition(JobConditionType::Failed, ConditionStatus::True, message);
    set_status(ctx, job, &status).await?;
    info!(job = %job.name_any(), message, "Job failed");
    ctx.event(&job.object_ref(&()), true, "Failed", message);
    Ok(Action::await_change())
}

pub(crate) async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let status = job.status.clone().unwrap_or_default();
    if status.is_finished() || job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = job.namespace().ok_or(Error::Unnamed("Job"))?;
    let target = &job.spec.machine_ref;
    if !target.namespace.is_empty() && target.namespace != ns {
        let message = format!(
            "spec.machineRef.namespace {:?}: a Job may only drive a Machine in its own namespace {ns:?}",
            target.namespace
        );
        return fail(&ctx, &job, &message).await;
    }
    // One Job at a time per Machine: the oldest unfinished one runs, the others wait.
    let same_machine: Vec<Job> = ctx
        .jobs
        .state()
        .iter()
        .filter(|j| {
            j.namespace().as_deref() == Some(ns.as_str()) && j.spec.machine_ref.name == target.name
        })
        .map(|j| (**j).clone())
        .collect();
    let first = runnable(&same_machine).first().map(|j| j.name_any());
    if first.as_ref().is_some_and(|f| *f != job.name_any()) {
        return Ok(Action::requeue(QUEUED_RECHECK));
    }
    let machine = machine(&ctx, &ns, &target.name).await?;
    let tasks = owned_tasks(&ctx.tasks, &job);
    let step = next_step(&job, machine.as_ref(), &tasks);
    let first_sight = !matches!(step, Step::Done | Step::Fail { .. }) && needs_start(&job);
    let mut status = status;
    if first_sight {
        status.set_condition(JobConditionType::Running, ConditionStatus::True, "");
        status.start_time = Some(Time(Timestamp::now()));
        set_status(&ctx, &job, &status).await?;
        ctx.event(
            &job.object_ref(&()),
            false,
            "Started",
            &format!(
                "{} task(s) for Machine {}",
                job.spec.tasks.len(),
                target.name
            ),
        );
        // Straight on to the first task, in the same pass.
    }
    match step {
        Step::Done => Ok(Action::await_change()),
        Step::CreateTask { index, name, spec } => {
            let mut task = Task::new(&name, *spec);
            task.metadata.namespace = Some(ns.clone());
            task.metadata.owner_references = Some(vec![OwnerReference {
                api_version: tink_api::bmc::API_VERSION.into(),
                kind: "Job".into(),
                name: job.name_any(),
                uid: job.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]);
            match Api::<Task>::namespaced(ctx.client.clone(), &ns)
                .create(&PostParams::default(), &task)
                .await
            {
                Ok(_) => {}
                // Created before (the cache had not seen it yet): the same name, nothing new.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            info!(job = %job.name_any(), task = %name, index, "task created");
            Ok(Action::requeue(RUNNING_RECHECK))
        }
        Step::Wait { .. } => Ok(Action::requeue(RUNNING_RECHECK)),
        Step::Complete => {
            status.set_condition(JobConditionType::Running, ConditionStatus::False, "");
            status.set_condition(JobConditionType::Completed, ConditionStatus::True, "");
            status.completion_time = Some(Time(Timestamp::now()));
            set_status(&ctx, &job, &status).await?;
            info!(job = %job.name_any(), "Job completed");
            ctx.event(
                &job.object_ref(&()),
                false,
                "Completed",
                "every task completed",
            );
            Ok(Action::await_change())
        }
        Step::Fail { message } => fail(&ctx, &job, &message).await,
    }
}
