//! The three reconcilers of one leadership term, over shared caches:
//! - Machines ([`machine`]): triggered by a spec change (not by their own status writes) and
//!   then on the poll period;
//! - Jobs ([`job`]): triggered by the Job and by the Tasks it owns;
//! - Tasks ([`task`]): the only code that sends a BMC an action.

pub(crate) mod job;
pub(crate) mod machine;
pub(crate) mod task;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt as _, predicates, watcher};
use kube::{Api, Client, Resource};
use tink_api::bmc::{Job, Machine, PowerState, Task};
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::BmcConfig;
use crate::context::Ctx;
use crate::error::Error;
use crate::metrics::{Metrics, PowerLabels};

/// Reconciles of one kind running at once (BMC calls are bounded separately by the limits).
const CONCURRENCY: u16 = 512;
/// How often the Machines gauge is refreshed.
const GAUGES: Duration = Duration::from_secs(5);

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn error_policy<K>(kind: &'static str) -> impl Fn(Arc<K>, &Error, Arc<Ctx>) -> Action {
    move |_obj, error, ctx| {
        ctx.metrics.reconciled(kind, false);
        warn!(kind, %error, "reconcile failed; retrying");
        Action::requeue(Duration::from_secs(2))
    }
}

fn gauges(metrics: &Metrics, machines: &Store<Machine>) {
    let (mut on, mut off, mut unknown, mut unreachable) = (0i64, 0i64, 0i64, 0i64);
    for m in machines.state() {
        let status = m.status.clone().unwrap_or_default();
        match status.power.unwrap_or_default() {
            PowerState::On => on += 1,
            PowerState::Off => off += 1,
            PowerState::Unknown => unknown += 1,
        }
        if status
            .condition(tink_api::bmc::MachineConditionType::Contactable)
            .is_some_and(|c| c.status == tink_api::bmc::ConditionStatus::False)
        {
            unreachable += 1;
        }
    }
    for (state, n) in [("on", on), ("off", off), ("unknown", unknown)] {
        metrics
            .machines
            .get_or_create(&PowerLabels { power_state: state })
            .set(n);
    }
    metrics.unreachable.set(unreachable);
}

/// Runs the reconcilers until `term` is cancelled; ready once every cache is filled.
pub(crate) async fn run(
    client: Client,
    config: BmcConfig,
    metrics: Metrics,
    health: Health,
    term: CancellationToken,
) -> Result<(), Error> {
    let ns = config.namespace.clone();
    let ns = ns.as_deref();
    let watch = watcher::Config::default();

    let (machines, machine_writer) = reflector::store();
    let machine_trigger = reflector::reflector(
        machine_writer,
        watcher(api::<Machine>(&client, ns), watch.clone()),
    )
    .default_backoff()
    .applied_objects()
    // a Machine's own status writes do not trigger a new look; its spec changes do
    .predicate_filter(predicates::generation, PredicateConfig::default());

    let (tasks, task_writer) = reflector::store();
    let task_changes = reflector::reflector(
        task_writer,
        watcher(api::<Task>(&client, ns), watch.clone()),
    )
    .default_backoff()
    .touched_objects();

    let config_c = controller::Config::default().concurrency(CONCURRENCY);
    let jobs_controller = Controller::new(api::<Job>(&client, ns), watch.clone())
        .with_config(config_c.clone())
        .owns_stream(task_changes);
    let jobs = jobs_controller.store();

    let (ctx, events) = Ctx::new(
        client.clone(),
        config,
        metrics.clone(),
        machines.clone(),
        jobs.clone(),
        tasks.clone(),
    );
    let ctx = Arc::new(ctx);
    let event_loop = events.publish_events(term.clone());

    let shutdown = || term.clone().cancelled_owned();
    let machine_loop = Controller::for_stream(machine_trigger, machines.clone())
        .with_config(config_c.clone())
        .graceful_shutdown_on(shutdown())
        .run(machine::reconcile, error_policy("machine"), ctx.clone())
        .for_each(|r| {
            if r.is_ok() {
                metrics.reconciled("machine", true);
            }
            std::future::ready(())
        });
    let job_loop = jobs_controller
        .graceful_shutdown_on(shutdown())
        .run(job::reconcile, error_policy("job"), ctx.clone())
        .for_each(|r| {
            if r.is_ok() {
                metrics.reconciled("job", true);
            }
            std::future::ready(())
        });
    let task_loop = Controller::new(api::<Task>(&client, ns), watch)
        .with_config(config_c)
        .graceful_shutdown_on(shutdown())
        .run(task::reconcile, error_policy("task"), ctx.clone())
        .for_each(|r| {
            if r.is_ok() {
                metrics.reconciled("task", true);
            }
            std::future::ready(())
        });
    let ready = {
        let (machines, jobs, tasks, health, term) = (
            machines.clone(),
            jobs.clone(),
            tasks.clone(),
            health.clone(),
            term.clone(),
        );
        async move {
            let synced = async {
                let _ = machines.wait_until_ready().await;
                let _ = jobs.wait_until_ready().await;
                let _ = tasks.wait_until_ready().await;
            };
            tokio::select! {
                _ = term.cancelled() => {}
                _ = synced => {
                    info!("caches synced; reconciling");
                    health.set_ready(true);
                }
            }
        }
    };
    let gauge_loop = {
        let (metrics, machines, term) = (metrics.clone(), machines.clone(), term.clone());
        async move {
            let mut tick = tokio::time::interval(GAUGES);
            loop {
                tokio::select! {
                    _ = term.cancelled() => return,
                    _ = tick.tick() => gauges(&metrics, &machines),
                }
            }
        }
    };
    tokio::join!(
        machine_loop,
        job_loop,
        task_loop,
        ready,
        gauge_loop,
        event_loop
    );
    health.set_ready(false);
    Ok(())
}
