//! Rollouts: the leader's controller of `WorkflowSet`s, one Template rolled over the Hardware a
//! label selector picks, `maxConcurrent` machines at a time, halting at the failure budget.
//!
//! A reconcile of a set (kube-runtime never runs two of the same set at once; only the leader
//! runs any):
//! 1. deleted: deletes every Workflow of the set (the Workflow controller cancels the running
//!    ones on their machines: `StopWorkflow`, `Cancelling`, `Canceled`), then removes the set's
//!    finalizer. A leader that dies in between leaves the finalizer, and the next one deletes
//!    again (deleting a Workflow already being deleted is harmless).
//! 2. otherwise: adds the finalizer, then reads the selected Hardware from the cache and the
//!    set's Workflows **from the API server** (a list, not the watch cache), and [`plan`]s:
//!    the counts, the state, and which machines get a Workflow now.
//!
//! Why the list: the watch of Workflows lags behind this controller's own creates. Counting
//! from the cache, a reconcile right after a create (or a new leader whose cache is still
//! filling) would see fewer unfinished Workflows than exist and create too many. A list is a
//! consistent read of everything created before it, so `maxConcurrent` holds across restarts
//! and leader changes. It costs one list per reconcile; reconciles of a set queued meanwhile
//! are merged into one by kube-runtime.
//!
//! A Workflow is named `<set>-<hardware>` (shortened with a hash when longer than a name may
//! be), so creating it twice (a retried reconcile, a reconcile after a crash between the create
//! and the status write) is refused with 409 instead of running the machine twice; a 409 is
//! counted as an unfinished Workflow of the set. Each carries an ownerReference to the set
//! (garbage collection deletes it with the set even without this controller) and the label
//! [`WORKFLOW_SET_LABEL`].
//!
//! Only approved Hardware (`HardwareSpec::approved`) gets a Workflow. `paused` and a spent
//! failure budget (`Halted`) stop creations; Workflows already created run to their end.
//! Counts and conditions are written through the status subresource, and a Kubernetes Event
//! records each change of state (started, paused, resumed, halted, completed), after the status
//! write succeeded (a repeat after a failed write is counted in the first Event's series).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource as _, ResourceExt as _};
use tink_api::capi::selection::matches;
use tink_api::v1alpha2::{
    ConditionStatus, Hardware, WORKFLOW_SET_FINALIZER, WORKFLOW_SET_LABEL, Workflow, WorkflowSet,
    WorkflowSetCondition, WorkflowSetConditionType, WorkflowSetState, WorkflowSetStatus,
    WorkflowSpec, WorkflowState,
};
use tink_workflow::{EventReason, EventType, RolloutReason};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::recorder::KubeEvents;

/// The safety net: a set is looked at again this often even when nothing wakes it.
const RESYNC: Duration = Duration::from_secs(300);
/// Back-off after a failed reconcile.
const RETRY: Duration = Duration::from_secs(2);
/// Workflow creates of one reconcile in flight at once.
const CREATES_IN_FLIGHT: usize = 16;
/// The longest object name.
const MAX_NAME: usize = 253;

/// One machine as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The Hardware's name.
    pub name: String,
    /// Whether it may get Workflows.
    pub approved: bool,
}

/// One of the set's Workflows as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetWorkflow {
    /// The Hardware it runs on.
    pub hardware: String,
    /// Its state.
    pub state: WorkflowState,
}

/// What a reconcile should do and write.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The status counts and state (conditions are added by [`conditions`]).
    pub status: WorkflowSetStatus,
    /// The machines to create a Workflow for now, in name order.
    pub create: Vec<String>,
}

/// The pure middle of a reconcile: from the selected Hardware and the set's Workflows (read
/// from the API), the counts, the state and which machines get a Workflow now: machines
/// without one, approved, in name order, no more than keep the unfinished Workflows at
/// `max_concurrent`, none while `paused` or once `failed >= max_failures`.
pub fn plan(
    max_concurrent: i32,
    max_failures: i32,
    paused: bool,
    selected: &[Machine],
    workflows: &[SetWorkflow],
) -> Plan {
    let mut status = WorkflowSetStatus::default();
    let with_workflow: BTreeSet<&str> = workflows.iter().map(|w| w.hardware.as_str()).collect();
    for w in workflows {
        match w.state {
            WorkflowState::Succeeded => status.succeeded += 1,
            WorkflowState::Failed => status.failed += 1,
            WorkflowState::Canceled => {}
            _ => status.running += 1,
        }
    }
    let mut waiting: Vec<&str> = Vec::new();
    let mut names = BTreeSet::new();
    for m in selected {
        if !names.insert(m.name.as_str()) {
            continue;
        }
        if !m.approved {
            if !with_workflow.contains(m.name.as_str()) {
                status.unapproved += 1;
            }
            continue;
        }
        if !with_workflow.contains(m.name.as_str()) {
            waiting.push(m.name.as_str());
        }
    }
    waiting.sort_unstable();
    status.pending = count(waiting.len());
    // Machines with a Workflow (selected or not any more) plus approved ones waiting.
    status.total = count(with_workflow.len()) + status.pending;
    let halted = status.failed >= max_failures.max(1);
    let room = if paused || halted {
        0
    } else {
        usize::try_from(max_concurrent.max(1) - status.running).unwrap_or(0)
    };
    let create: Vec<String> = waiting.into_iter().take(room).map(str::to_string).collect();
    // What the status will say once those are created.
    status.pending -= count(create.len());
    status.running += count(create.len());
    status.state = if halted {
        WorkflowSetState::Halted
    } else if status.pending == 0 && status.running == 0 {
        WorkflowSetState::Completed
    } else if paused {
        WorkflowSetState::Paused
    } else {
        WorkflowSetState::Progressing
    };
    Plan { status, create }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The conditions of `status` (its state and counts filled in), carrying transition times over
/// from `previous`.
pub fn conditions(
    status: &mut WorkflowSetStatus,
    previous: Option<&WorkflowSetStatus>,
    max_failures: i32,
    now: &Time,
) {
    if let Some(p) = previous {
        status.conditions = p.conditions.clone();
    }
    let cond = |type_, on: bool, reason: &str, message: String| WorkflowSetCondition {
        type_,
        status: if on {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        last_transition_time: Some(now.clone()),
        reason: Some(reason.to_string()),
        message: Some(message),
    };
    let state = status.state;
    let paused = state == WorkflowSetState::Paused;
    status.set_condition(cond(
        WorkflowSetConditionType::Paused,
        paused,
        if paused { "Paused" } else { "NotPaused" },
        if paused {
            "spec.paused is true: no new Workflows are created".into()
        } else {
            String::new()
        },
    ));
    let halted = state == WorkflowSetState::Halted;
    status.set_condition(cond(
        WorkflowSetConditionType::Halted,
        halted,
        if halted {
            "FailureBudgetSpent"
        } else {
            "WithinFailureBudget"
        },
        format!(
            "{} of the set's Workflows failed; the rollout halts at {} (spec.maxFailures){}",
            status.failed,
            max_failures,
            if halted {
                ": no new Workflows are created, those running finish"
            } else {
                ""
            }
        ),
    ));
    let completed = state == WorkflowSetState::Completed;
    status.set_condition(cond(
        WorkflowSetConditionType::Completed,
        completed,
        if completed {
            "AllFinished"
        } else {
            "InProgress"
        },
        format!(
            "{} succeeded, {} failed, {} running, {} pending",
            status.succeeded, status.failed, status.running, status.pending
        ),
    ));
    for c in &mut status.conditions {
        if c.message.as_deref() == Some("") {
            c.message = None;
        }
    }
}

/// The Events a change of status calls for.
pub fn transitions(
    previous: Option<&WorkflowSetStatus>,
    next: &WorkflowSetStatus,
    created: usize,
) -> Vec<(EventType, RolloutReason, String)> {
    let mut out = Vec::new();
    let before = previous.map(|p| p.state);
    let started_before =
        previous.is_some_and(|p| p.running + p.succeeded + p.failed > 0) || created == 0;
    if !started_before {
        out.push((
            EventType::Normal,
            RolloutReason::RolloutStarted,
            format!(
                "created the first {created} Workflows; {} machines selected",
                next.total
            ),
        ));
    }
    if before == Some(next.state) {
        return out;
    }
    match next.state {
        WorkflowSetState::Paused => out.push((
            EventType::Normal,
            RolloutReason::RolloutPaused,
            format!(
                "paused with {} running and {} pending",
                next.running, next.pending
            ),
        )),
        WorkflowSetState::Halted => out.push((
            EventType::Warning,
            RolloutReason::RolloutHalted,
            format!(
                "{} Workflows failed, the failure budget: no new Workflows ({} running, {} pending)",
                next.failed, next.running, next.pending
            ),
        )),
        WorkflowSetState::Completed => out.push((
            EventType::Normal,
            RolloutReason::RolloutCompleted,
            format!(
                "{} machines: {} succeeded, {} failed",
                next.total, next.succeeded, next.failed
            ),
        )),
        WorkflowSetState::Progressing if before == Some(WorkflowSetState::Paused) => out.push((
            EventType::Normal,
            RolloutReason::RolloutResumed,
            format!("resumed with {} pending", next.pending),
        )),
        WorkflowSetState::Progressing => {}
    }
    out
}

/// The name of the set's Workflow for `hardware`: `<set>-<hardware>`, or, when that is longer
/// than a name may be, its first characters and 16 hex digits of its SHA-256.
pub fn workflow_name(set: &str, hardware: &str) -> String {
    let full = format!("{set}-{hardware}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, full.as_bytes());
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut head = MAX_NAME - hash.len() - 1;
    while !full.is_char_boundary(head) {
        head -= 1;
    }
    let head = full[..head].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// Why a reconcile of a set failed (it is retried after [`RETRY`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RolloutError {
    /// The Kubernetes API failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be built.
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
    /// The set has no namespace or uid (not from the API server).
    #[error("the WorkflowSet has no {0}")]
    Incomplete(&'static str),
}

/// What the reconciler of sets shares.
pub(crate) struct Ctx {
    client: Client,
    metrics: Metrics,
    kube_events: KubeEvents,
    hardware: Store<Hardware>,
    selections: Selections,
}

/// The Hardware names each set selected at its last reconcile: a Hardware change wakes the
/// sets whose selector matches it now and those that selected it before (it may have left
/// them), not every set of the namespace.
type Selections =
    Arc<std::sync::Mutex<std::collections::HashMap<ObjectRef<WorkflowSet>, BTreeSet<String>>>>;

fn lock_selections(
    s: &Selections,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<ObjectRef<WorkflowSet>, BTreeSet<String>>>
{
    // Whole-entry inserts and removes only: a poisoned lock still holds a consistent map.
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether the WorkflowSet kind is served (its CRD installed).
pub(crate) async fn served(client: &Client) -> bool {
    let gv = format!("{}/{}", WorkflowSet::group(&()), WorkflowSet::version(&()));
    let served = client
        .list_api_group_resources(&gv)
        .await
        .map(|l| l.resources.iter().any(|r| r.name == "workflowsets"))
        .unwrap_or(false);
    if !served {
        info!(group_version = %gv, "the WorkflowSet CRD is not installed: no rollouts");
    }
    served
}

/// Runs the controller of WorkflowSets in `namespace` (all when `None`) until `term` is
/// cancelled. A change of a Hardware wakes the sets that select it, or did at their last
/// reconcile (a machine approved or labelled joins a rollout; one relabelled leaves it). The Hardware the reconciles read is this controller's own cache,
/// filled by the same watch that wakes them: a wake-up never comes before the cache shows the
/// change (with the term's cache, fed by another watch, an approval could wake a reconcile
/// that still saw the machine unapproved, and nothing woke it again).
pub(crate) async fn run(
    client: Client,
    namespace: Option<String>,
    metrics: Metrics,
    kube_events: KubeEvents,
    term: CancellationToken,
) {
    let (sets, workflows, hardware_api): (Api<WorkflowSet>, Api<Workflow>, Api<Hardware>) =
        match namespace.as_deref() {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (
                Api::all(client.clone()),
                Api::all(client.clone()),
                Api::all(client.clone()),
            ),
        };
    let wc = watcher::Config::default();
    let controller = Controller::new(sets, wc.clone());
    let store = controller.store();
    let selections = Selections::default();
    let by_hardware = {
        let selections = selections.clone();
        move |h: Hardware| {
            let ns = h.namespace().unwrap_or_default();
            let name = h.name_any();
            let selected = lock_selections(&selections);
            store
                .state()
                .into_iter()
                .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
                .map(|s| (ObjectRef::from_obj(&*s), s))
                .filter(|(r, s)| {
                    matches(&s.spec.hardware_selector, h.labels())
                        || selected.get(r).is_some_and(|names| names.contains(&name))
                })
                .map(|(r, _)| r)
                .collect::<Vec<_>>()
        }
    };
    let (hardware, hardware_writer) = reflector::store();
    let hardware_changes = watcher(hardware_api, wc.clone())
        .default_backoff()
        .reflect(hardware_writer)
        .applied_objects();
    let ctx = Arc::new(Ctx {
        client,
        metrics,
        kube_events,
        hardware,
        selections,
    });
    controller
        .owns(workflows, wc.clone().labels(WORKFLOW_SET_LABEL))
        .watches_stream(hardware_changes, by_hardware)
        .graceful_shutdown_on(term.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
        .await;
}

fn error_policy(set: Arc<WorkflowSet>, e: &RolloutError, ctx: Arc<Ctx>) -> Action {
    ctx.metrics.error("workflow_set");
    warn!(workflow_set = %format!("{}/{}", set.namespace().unwrap_or_default(), set.name_any()), error = %e, "rollout reconcile failed; retrying");
    Action::requeue(RETRY)
}

async fn reconcile(set: Arc<WorkflowSet>, ctx: Arc<Ctx>) -> Result<Action, RolloutError> {
    let ns = set
        .namespace()
        .ok_or(RolloutError::Incomplete("namespace"))?;
    let uid = set.uid().ok_or(RolloutError::Incomplete("uid"))?;
    let name = set.name_any();
    let sets: Api<WorkflowSet> = Api::namespaced(ctx.client.clone(), &ns);
    let workflows: Api<Workflow> = Api::namespaced(ctx.client.clone(), &ns);
    let has_finalizer = set.finalizers().iter().any(|f| f == WORKFLOW_SET_FINALIZER);

    if set.metadata.deletion_timestamp.is_some() {
        lock_selections(&ctx.selections).remove(&ObjectRef::from_obj(&*set));
        if has_finalizer {
            delete_workflows(&ctx, &workflows, &name, &uid).await?;
            remove_finalizer(&ctx, &sets, &set).await?;
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        add_finalizer(&ctx, &sets, &set).await?;
    }

    // A Hardware cache still filling would make machines look unselected. Waited for briefly
    // and asked again later: the store's readiness wakes only one of several waiters
    // (kube-runtime's DelayedInit keeps one waker), so a long wait here could hang.
    match tokio::time::timeout(Duration::from_secs(1), ctx.hardware.wait_until_ready()).await {
        Ok(Ok(())) => {}
        _ => return Ok(Action::requeue(RETRY)),
    }
    let selected: Vec<Machine> = ctx
        .hardware
        .state()
        .iter()
        .filter(|h| h.namespace().as_deref() == Some(ns.as_str()))
        .filter(|h| matches(&set.spec.hardware_selector, h.labels()))
        .map(|h| Machine {
            name: h.name_any(),
            approved: h.spec.approved() && h.metadata.deletion_timestamp.is_none(),
        })
        .collect();
    lock_selections(&ctx.selections).insert(
        ObjectRef::from_obj(&*set),
        selected.iter().map(|m| m.name.clone()).collect(),
    );
    let existing = own_workflows(&workflows, &name, &uid).await?;
    let max_failures = set.spec.failure_budget();
    let plan = plan(
        set.spec.max_concurrent,
        max_failures,
        set.spec.paused,
        &selected,
        &existing,
    );

    // The creates run a few at a time: the plan already bounded how many there are, so their
    // order and overlap cannot exceed maxConcurrent. One that fails fails the reconcile after
    // the others finished (no status is written; the retry lists and counts what was created).
    let wfs = plan
        .create
        .iter()
        .map(|hardware| workflow_for(&set, &uid, hardware))
        .collect::<Result<Vec<_>, _>>()?;
    let outcomes: Vec<Result<bool, kube::Error>> = futures::stream::iter(wfs)
        .map(|wf| {
            let workflows = workflows.clone();
            ctx.metrics.write("workflow_set_create");
            async move {
                match workflows.create(&PostParams::default(), &wf).await {
                    Ok(_) => Ok(true),
                    // Created before (by a reconcile whose status write was lost, or by hand):
                    // it is one of the unfinished ones, whatever it is; the next reconcile
                    // reads it.
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        debug!(workflow = %wf.name_any(), "the rollout's Workflow exists already");
                        Ok(false)
                    }
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(CREATES_IN_FLIGHT)
        .collect()
        .await;
    let mut created = 0usize;
    for outcome in outcomes {
        if outcome? {
            created += 1;
        }
    }
    if created > 0 {
        info!(workflow_set = %format!("{ns}/{name}"), created, "rollout created Workflows");
    }

    let mut status = plan.status;
    status.observed_generation = set.metadata.generation;
    let now = Time(Timestamp::now());
    conditions(&mut status, set.status.as_ref(), max_failures, &now);
    if set.status.as_ref() != Some(&status) {
        ctx.metrics.write("workflow_set_status");
        sets.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await?;
        for (type_, reason, message) in transitions(set.status.as_ref(), &status, created) {
            ctx.kube_events
                .about(&*set, type_, EventReason::Rollout(reason), &message);
        }
    }
    Ok(Action::requeue(RESYNC))
}

/// The set's Workflows, read from the API server (not the cache: see the module docs): those
/// labelled with its name and owned by this set (a re-created set of the same name has another
/// uid).
async fn own_workflows(
    api: &Api<Workflow>,
    set: &str,
    uid: &str,
) -> Result<Vec<SetWorkflow>, RolloutError> {
    let list = api
        .list(&ListParams::default().labels(&format!("{WORKFLOW_SET_LABEL}={set}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|w| w.owner_references().iter().any(|o| o.uid == uid))
        .map(|w| SetWorkflow {
            hardware: w.spec.hardware_ref.name.clone(),
            state: w.status.as_ref().map(|s| s.state).unwrap_or_default(),
        })
        .collect())
}

/// The Workflow the set runs on `hardware`.
fn workflow_for(set: &WorkflowSet, uid: &str, hardware: &str) -> Result<Workflow, RolloutError> {
    let set_name = set.name_any();
    let mut wf = Workflow::new(
        &workflow_name(&set_name, hardware),
        WorkflowSpec {
            hardware_ref: tink_api::v1alpha2::LocalObjectReference::new(hardware),
            template_ref: set.spec.template_ref.clone(),
            template_data: set.spec.template_data.clone(),
            ..WorkflowSpec::default()
        },
    );
    wf.metadata.namespace = set.namespace();
    wf.metadata.labels = Some(BTreeMap::from([(WORKFLOW_SET_LABEL.to_string(), set_name)]));
    wf.metadata.owner_references = Some(vec![OwnerReference {
        api_version: WorkflowSet::api_version(&()).to_string(),
        kind: WorkflowSet::kind(&()).to_string(),
        name: set.name_any(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    Ok(wf)
}

/// Deletes every Workflow of the deleted set not already being deleted.
async fn delete_workflows(
    ctx: &Ctx,
    api: &Api<Workflow>,
    set: &str,
    uid: &str,
) -> Result<(), RolloutError> {
    let list = api
        .list(&ListParams::default().labels(&format!("{WORKFLOW_SET_LABEL}={set}")))
        .await?;
    for w in list.items {
        if w.metadata.deletion_timestamp.is_some()
            || !w.owner_references().iter().any(|o| o.uid == uid)
        {
            continue;
        }
        ctx.metrics.write("workflow_set_delete");
        match api.delete(&w.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    info!(workflow_set = %set, "rollout deleted: its Workflows are deleted (running ones are canceled)");
    Ok(())
}

async fn add_finalizer(
    ctx: &Ctx,
    api: &Api<WorkflowSet>,
    set: &WorkflowSet,
) -> Result<(), RolloutError> {
    let patch: json_patch::Patch = if set.metadata.finalizers.is_none() {
        serde_json::from_value(serde_json::json!([
            {"op": "add", "path": "/metadata/finalizers", "value": [WORKFLOW_SET_FINALIZER]},
        ]))?
    } else {
        serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": set.resource_version()},
            {"op": "add", "path": "/metadata/finalizers/-", "value": WORKFLOW_SET_FINALIZER},
        ]))?
    };
    ctx.metrics.write("workflow_set_finalizer");
    api.patch(
        &set.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await?;
    Ok(())
}

async fn remove_finalizer(
    ctx: &Ctx,
    api: &Api<WorkflowSet>,
    set: &WorkflowSet,
) -> Result<(), RolloutError> {
    let Some(i) = set
        .finalizers()
        .iter()
        .position(|f| f == WORKFLOW_SET_FINALIZER)
    else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": WORKFLOW_SET_FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
    ]))?;
    ctx.metrics.write("workflow_set_finalizer");
    match api
        .patch(
            &set.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machines(n: usize) -> Vec<Machine> {
        (0..n)
            .map(|i| Machine {
                name: format!("m{i:02}"),
                approved: true,
            })
            .collect()
    }

    fn wf(h: &str, state: WorkflowState) -> SetWorkflow {
        SetWorkflow {
            hardware: h.into(),
            state,
        }
    }

    #[test]
    fn creates_up_to_max_concurrent_in_name_order() {
        let p = plan(5, 1, false, &machines(30), &[]);
        assert_eq!(p.create, vec!["m00", "m01", "m02", "m03", "m04"]);
        assert_eq!(
            (p.status.total, p.status.pending, p.status.running),
            (30, 25, 5)
        );
        assert_eq!(p.status.state, WorkflowSetState::Progressing);
    }

    #[test]
    fn unfinished_workflows_use_up_the_room() {
        let wfs = vec![
            wf("m00", WorkflowState::Running),
            wf("m01", WorkflowState::Pending),
            wf("m02", WorkflowState::Cancelling),
            wf("m03", WorkflowState::Succeeded),
            wf("m04", WorkflowState::Scheduled),
        ];
        let p = plan(5, 1, false, &machines(10), &wfs);
        assert_eq!(p.create, vec!["m05"]);
        assert_eq!(p.status.running, 5);
        assert_eq!(p.status.succeeded, 1);
        // Already over the limit (maxConcurrent lowered): nothing, no underflow.
        let p = plan(2, 1, false, &machines(10), &wfs);
        assert!(p.create.is_empty());
        assert_eq!(p.status.running, 4);
    }

    #[test]
    fn paused_and_halted_create_nothing() {
        let p = plan(5, 1, true, &machines(3), &[]);
        assert!(p.create.is_empty());
        assert_eq!(p.status.state, WorkflowSetState::Paused);
        let wfs = vec![
            wf("m00", WorkflowState::Failed),
            wf("m01", WorkflowState::Failed),
            wf("m02", WorkflowState::Running),
        ];
        let p = plan(5, 2, false, &machines(10), &wfs);
        assert!(p.create.is_empty());
        assert_eq!(p.status.state, WorkflowSetState::Halted);
        // A raised budget continues.
        let p = plan(5, 3, false, &machines(10), &wfs);
        assert_eq!(p.create.len(), 4);
        assert_eq!(p.status.state, WorkflowSetState::Progressing);
    }

    #[test]
    fn unapproved_machines_wait_and_completion_needs_all_finished() {
        let mut ms = machines(3);
        ms[1].approved = false;
        let wfs = vec![
            wf("m00", WorkflowState::Succeeded),
            wf("m02", WorkflowState::Succeeded),
        ];
        let p = plan(5, 1, false, &ms, &wfs);
        assert!(p.create.is_empty());
        assert_eq!(p.status.unapproved, 1);
        assert_eq!(p.status.total, 2);
        assert_eq!(p.status.state, WorkflowSetState::Completed);
        // A machine that left the selector keeps its Workflow counted.
        let p = plan(5, 1, false, &ms[..1], &wfs);
        assert_eq!(p.status.total, 2);
    }

    #[test]
    fn events_follow_state_changes() {
        let first = plan(5, 1, false, &machines(10), &[]).status;
        let ev = transitions(None, &first, 5);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].1, RolloutReason::RolloutStarted);
        assert!(transitions(Some(&first), &first, 0).is_empty());
        let mut halted = first.clone();
        halted.state = WorkflowSetState::Halted;
        halted.failed = 1;
        let ev = transitions(Some(&first), &halted, 0);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].0, EventType::Warning);
        assert_eq!(ev[0].1, RolloutReason::RolloutHalted);
        let mut paused = first.clone();
        paused.state = WorkflowSetState::Paused;
        let ev = transitions(Some(&paused), &first, 1);
        assert_eq!(ev[0].1, RolloutReason::RolloutResumed);
    }

    #[test]
    fn conditions_say_why() {
        let wfs = vec![wf("m00", WorkflowState::Failed)];
        let mut s = plan(5, 1, false, &machines(3), &wfs).status;
        let now = Time(Timestamp::now());
        conditions(&mut s, None, 1, &now);
        let halted = s
            .condition(WorkflowSetConditionType::Halted)
            .expect("Halted");
        assert_eq!(halted.status, ConditionStatus::True);
        assert_eq!(halted.reason.as_deref(), Some("FailureBudgetSpent"));
        assert!(
            halted
                .message
                .as_deref()
                .is_some_and(|m| m.contains("spec.maxFailures"))
        );
        let paused = s
            .condition(WorkflowSetConditionType::Paused)
            .expect("Paused");
        assert_eq!(paused.status, ConditionStatus::False);
        assert_eq!(paused.message, None);
    }

    #[test]
    fn long_names_are_shortened_with_a_hash() {
        assert_eq!(workflow_name("rack1", "m1"), "rack1-m1");
        let long = "h".repeat(250);
        let a = workflow_name("rack1", &long);
        assert_eq!(a.len(), MAX_NAME);
        assert_ne!(a, workflow_name("rack2", &long));
        assert_eq!(a, workflow_name("rack1", &long));
    }
}
