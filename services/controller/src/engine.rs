//! One leadership term: the caches, the reconciler, the events consumer, the presence watch,
//! the Kubernetes Event publisher and the housekeeping, the term's critical tasks in one
//! [`TaskGroup`](tink_runtime::TaskGroup) ([`crate::tasks`]), all stopped together when the
//! term ends.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt as _;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};
use tink_api::v1alpha2::{Hardware, Template, Workflow, WorkflowState};
use tink_bus::StreamSetup;
use tink_hardware_index::{Applier, Index};
use tink_runtime::Health;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admitted::Admitted;
use crate::agent_reset::AgentResets;
use crate::agent_secrets::AgentSecrets;
use crate::config::{CONTROLLER_NAME, ControllerConfig};
use crate::error::Error;
use crate::keys::key_of;
use crate::metrics::Metrics;
use crate::recorder::{KubeEvents, Recorder};
use crate::tasks::{Spawner, Tasks, stopped};
use crate::term::Term;
use crate::{events, presence, reconcile};

/// How often housekeeping runs (state gauges, ledger sweep).
const HOUSEKEEPING: Duration = Duration::from_secs(2);

/// Creates (or updates) the streams and buckets the leader owns, retrying every second until
/// they are in place (`None`: `term` was cancelled first); each failed attempt is counted and
/// logged with `retrying`.
async fn ensure_streams(
    jetstream: &jetstream::Context,
    bus: &tink_bus::BusConfig,
    metrics: &Metrics,
    term: &CancellationToken,
    retrying: &'static str,
) -> Option<tink_bus::Bus> {
    tink_bus::wait_for_streams(
        jetstream,
        bus,
        StreamSetup::Ensure,
        Duration::from_secs(1),
        term.cancelled(),
        |e, _| {
            metrics.error("nats");
            warn!(error = %e, "{retrying}");
            std::future::ready(())
        },
    )
    .await
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the term until `term` is cancelled (returns `Ok`) or a part of it fails for good.
///
/// Its parts are critical tasks of one group whose token (a child of `term`) they all stop on:
/// one that ends, fails or panics while the term runs turns `health` not ready, stops the
/// others and is returned as the term's error. Dropping this future (a killed replica, a term
/// that did not drain within its budget) aborts them.
pub(crate) async fn lead(
    client: Client,
    config: ControllerConfig,
    metrics: Metrics,
    health: Health,
    jetstream: jetstream::Context,
    mut reconnects: tokio::sync::watch::Receiver<u64>,
    term: CancellationToken,
) -> Result<(), Error> {
    reconnects.borrow_and_update();
    // The only strong handle: the components get a weak [`Spawner`] (see crate::tasks).
    let group = Arc::new(Tasks::new(health.clone(), &term));
    let spawner = Spawner::new(&group);
    let term = group.token().clone();
    let retrying = "cannot set up the JetStream streams yet; retrying";
    let Some(bus) = ensure_streams(&jetstream, &config.bus, &metrics, &term, retrying).await else {
        return Ok(());
    };
    // The leader owns the streams and buckets: after a NATS reconnection it ensures them again
    // (the servers wait, not ready, until they exist).
    {
        let (jetstream, bus_config, metrics, term) = (
            jetstream.clone(),
            config.bus.clone(),
            metrics.clone(),
            term.clone(),
        );
        group.spawn_critical("NATS reconnection watch", async move {
            loop {
                tokio::select! {
                    _ = term.cancelled() => return Ok(()),
                    // The sender lives as long as the replica's run.
                    changed = reconnects.changed() => if changed.is_err() { return Ok(()) },
                }
                let retrying = "NATS reconnected but the streams cannot be set up yet; retrying";
                let ensured =
                    ensure_streams(&jetstream, &bus_config, &metrics, &term, retrying).await;
                if ensured.is_none() {
                    return Ok(());
                }
                info!("NATS reconnected; the streams and buckets are in place");
            }
        });
    }
    let ns = config.namespace.as_deref();
    let wc = watcher::Config::default();

    let (templates, tpl_writer) = reflector::store::<Template>();
    let tpl_stream = watcher(api::<Template>(&client, ns), wc.clone())
        .default_backoff()
        .reflect(tpl_writer)
        .applied_objects();
    let (hardware, hw_writer) = reflector::store::<Hardware>();
    // The shared Hardware index (by agent id), fed by the same watch before the store.
    let hw_index: Arc<Index<Hardware>> = Arc::new(Index::default());

    let (workflows, wf_writer) = reflector::store::<Workflow>();

    // The BMC Jobs of spec.bootOptions (only ours: they carry the Workflow label), when the
    // BMC API is served.
    let jobs = if crate::boot::jobs_served(&client).await {
        let (store, writer) = reflector::store::<tink_api::bmc::Job>();
        let stream = watcher(
            api::<tink_api::bmc::Job>(&client, ns),
            wc.clone().labels(crate::boot::WORKFLOW_LABEL),
        )
        .default_backoff()
        .reflect(writer)
        .applied_objects();
        Some((store, stream))
    } else {
        None
    };
    let (trigger_tx, trigger_rx) = mpsc::channel(config.trigger_queue.max(1));
    let (kube_events, event_rx) = KubeEvents::new(config.kube_events, metrics.clone(), 4096);
    let ctx = Arc::new(Term::new(
        client.clone(),
        config.clone(),
        metrics.clone(),
        workflows.clone(),
        templates.clone(),
        hardware.clone(),
        hw_index.clone(),
        bus.clone(),
        trigger_tx,
        kube_events.clone(),
        jobs.as_ref().map(|(store, _)| store.clone()),
    ));
    let resets = Arc::new(AgentResets::new(
        client.clone(),
        bus.clone(),
        metrics.clone(),
        kube_events.clone(),
        spawner.clone(),
    ));
    let secrets = Arc::new(AgentSecrets::new(
        client.clone(),
        config.clone(),
        metrics.clone(),
        bus.clone(),
        hardware.clone(),
        kube_events.clone(),
        spawner.clone(),
    ));
    let admitted = Arc::new(Admitted::new(
        metrics.clone(),
        bus.admitted_agents.clone(),
        hardware.clone(),
        spawner.clone(),
    ));

    let inventories = Arc::new(crate::inventory::Inventories::new(
        client.clone(),
        metrics.clone(),
        hw_index.clone(),
        hardware.clone(),
        config.discovery.clone(),
    ));

    let inventory_requests = Arc::new(crate::inventory_request::InventoryRequests::new(
        client.clone(),
        &bus,
        metrics.clone(),
        kube_events.clone(),
        spawner.clone(),
        hardware.clone(),
        term.clone(),
        config.inventory_request_resend,
    ));

    // WorkflowRuleSets (issue 31): Workflows created from inventory matches.
    let rules = crate::rules::start(
        client.clone(),
        ns,
        metrics.clone(),
        kube_events.clone(),
        hardware.clone(),
        &group,
        term.clone(),
    );

    let hw_stream = {
        let (secrets, admitted) = (secrets.clone(), admitted.clone());
        let mut applier = Applier::<Hardware>::default();
        watcher(api::<Hardware>(&client, ns), wc.clone())
            .default_backoff()
            .inspect(move |event| {
                // The index has every delivered Hardware before the store and the wake-ups do.
                if let Ok(event) = event {
                    applier.apply(&hw_index, event);
                }
                // The copy of a deleted Hardware's agent secret goes at once.
                if let Ok(watcher::Event::Delete(h)) = event {
                    secrets.forget(h);
                    admitted.forget(h);
                }
            })
            .reflect(hw_writer)
            .applied_objects()
    };

    // The controller's own Workflow watch. Every delivered Workflow is indexed by its Hardware
    // before the store has it, so the index never lacks a Workflow the store holds (a
    // completion looking for the next Pending Workflow of its machine finds it).
    let wf_stream = {
        let ctx = ctx.clone();
        watcher(api::<Workflow>(&client, ns), wc)
            .default_backoff()
            .inspect(move |event| match event {
                Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) => {
                    ctx.wake.index_workflow(w)
                }
                // A Workflow whose Hardware is never looked at again would stay indexed.
                Ok(watcher::Event::Delete(w)) => ctx.wake.unindex_workflow(w),
                _ => {}
            })
            .reflect(wf_writer)
            .applied_objects()
    };
    let controller = Controller::for_stream(wf_stream, workflows.clone())
        .with_config(controller::Config::default().concurrency(config.concurrency));

    let by_template = {
        let workflows = workflows.clone();
        move |t: Template| {
            waiting_for(&workflows, &t.namespace().unwrap_or_default(), |w| {
                w.spec.template_ref.name == t.name_any()
            })
        }
    };
    let by_hardware = {
        let (ctx, resets, secrets, admitted) = (
            ctx.clone(),
            resets.clone(),
            secrets.clone(),
            admitted.clone(),
        );
        let inventory_requests = inventory_requests.clone();
        move |h: Hardware| {
            resets.observe(&h);
            inventory_requests.observe(&h);
            rules.observe(&h);
            secrets.observe(&h);
            admitted.observe(&h);
            let namespace = h.namespace().unwrap_or_default();
            pending(ctx.wake.workflows_of_hardware(&namespace, &h.name_any()))
        }
    };
    let mut controller = controller
        .watches_stream(tpl_stream, by_template)
        .watches_stream(hw_stream, by_hardware);
    if let Some((_, job_stream)) = jobs {
        // A boot Job that changed wakes the Workflow owning it.
        controller = controller.watches_stream(job_stream, |job: tink_api::bmc::Job| {
            let namespace = job.namespace().unwrap_or_default();
            job.owner_references()
                .iter()
                .filter(|o| o.kind == "Workflow")
                .map(|o| ObjectRef::new(&o.name).within(&namespace))
                .collect::<Vec<_>>()
        });
    }
    let controller = controller
        .reconcile_on(tokio_stream::wrappers::ReceiverStream::new(trigger_rx))
        .graceful_shutdown_on(term.clone().cancelled_owned());

    {
        let ctx = ctx.clone();
        group.spawn_critical("reconciler", async move {
            controller
                .run(reconcile::reconcile, reconcile::error_policy, ctx)
                .for_each(|_| std::future::ready(()))
                .await;
            Ok(())
        });
    }
    let (bound_tx, bound_rx) = oneshot::channel();
    {
        let (ctx, term) = (ctx.clone(), term.clone());
        let stream = bus.events.clone();
        let spawner = spawner.clone();
        group.spawn_critical("events consumer", async move {
            events::run(ctx, stream, bound_tx, spawner, term).await;
            Ok(())
        });
    }
    {
        let (term, hardware) = (term.clone(), hardware.clone());
        let stream = bus.inventory.clone();
        group.spawn_critical("inventory consumer", async move {
            inventories.run(stream, hardware, term).await;
            Ok(())
        });
    }
    let (loaded_tx, loaded_rx) = oneshot::channel();
    {
        let (ctx, term) = (ctx.clone(), term.clone());
        let (bucket, replicas) = (bus.presence.clone(), bus.replicas.clone());
        group.spawn_critical("presence watch", async move {
            presence::run(
                &ctx.presence,
                &ctx.wake,
                &ctx.metrics,
                bucket,
                replicas,
                loaded_tx,
                term,
            )
            .await;
            Ok(())
        });
    }
    {
        let term = term.clone();
        let recorder = Recorder::new(client.clone(), CONTROLLER_NAME, &config.replica_id);
        let metrics = metrics.clone();
        group.spawn_critical("event publisher", async move {
            crate::recorder::publish_queued(recorder, event_rx, metrics, term).await;
            Ok(())
        });
    }
    {
        let ctx = ctx.clone();
        group.spawn_periodic("housekeeping", HOUSEKEEPING, move || {
            ctx.ledger.sweep();
            ctx.prune();
            count_states(&ctx);
            std::future::ready(Ok::<(), Infallible>(()))
        });
    }
    // The whole agent secrets bucket and every copy, reconciled with the Hardware cache.
    let sweep_period = config.agent_secrets_sweep.max(Duration::from_millis(100));
    {
        let secrets = secrets.clone();
        group.spawn_periodic("agent secrets sweep", sweep_period, move || {
            let secrets = secrets.clone();
            async move { secrets.sweep().await }
        });
    }
    {
        let term = term.clone();
        group.spawn_critical("agent secret exchanges watch", async move {
            secrets.follow_exchanges(term).await;
            Ok(())
        });
    }
    {
        let term = term.clone();
        let first = group.spawn_periodic("admitted agents sweep", sweep_period, move || {
            let (admitted, term) = (admitted.clone(), term.clone());
            async move { admitted.sweep(&term).await }
        });
        // The first at once (it waits for the Hardware cache), not a period later.
        first.activate();
    }
    if crate::capi::enabled(&client, &config.capi).await {
        crate::capi::start(
            client.clone(),
            config.capi.clone(),
            metrics.clone(),
            config.namespace.clone(),
            &group,
        );
    }
    // Rollouts (WorkflowSets), when their CRD is installed.
    if crate::rollout::served(&client).await {
        let (client, ns, metrics) = (client.clone(), config.namespace.clone(), metrics.clone());
        let (events, term) = (kube_events.clone(), term.clone());
        group.spawn_critical("rollout controller", async move {
            crate::rollout::run(client, ns, metrics, events, term).await;
            Ok(())
        });
    }
    if !config.resync_period.is_zero() {
        let ctx = ctx.clone();
        group.spawn_periodic("resync", config.resync_period, move || {
            resync(&ctx);
            std::future::ready(Ok::<(), Infallible>(()))
        });
    }

    // Ready once the caches are filled, the consumer is bound and presence is watched.
    let ready = async {
        workflows.wait_until_ready().await.ok()?;
        templates.wait_until_ready().await.ok()?;
        hardware.wait_until_ready().await.ok()?;
        bound_rx.await.ok()?;
        loaded_rx.await.ok()?;
        Some(())
    };
    // A part that stops early cancels the group's token, so this ends then too.
    tokio::select! {
        r = ready => if r.is_some() && !term.is_cancelled() {
            health.set_ready(true);
            info!("caches synced and events consumer bound; ready");
        },
        _ = term.cancelled() => {}
    }

    // Drain: the reconciler finishes its running reconciles, the others stop at once (a part
    // that stops while the term is being cancelled is shutting down, not failing).
    group.wait().await.map_err(stopped)
}

/// The Workflows of a namespace matching `is_ref` that still wait for their Template or
/// Hardware, or (for a Hardware) wait to be dispatched.
fn waiting_for(
    workflows: &Store<Workflow>,
    namespace: &str,
    is_ref: impl Fn(&Workflow) -> bool,
) -> Vec<ObjectRef<Workflow>> {
    pending(
        workflows
            .state()
            .into_iter()
            .filter(|w| w.namespace().as_deref() == Some(namespace) && is_ref(w)),
    )
}

/// The Pending ones of `workflows`, as references to reconcile.
fn pending(workflows: impl IntoIterator<Item = Arc<Workflow>>) -> Vec<ObjectRef<Workflow>> {
    workflows
        .into_iter()
        .filter(|w| {
            w.status.as_ref().map(|s| s.state).unwrap_or_default() == WorkflowState::Pending
        })
        .map(|w| {
            let k = key_of(&w);
            ObjectRef::new(&k.name).within(&k.namespace)
        })
        .collect()
}

/// The safety net: wakes every unfinished Workflow, so a lost wake-up (a Pending Workflow of an
/// idle machine nobody triggered) is caught within one period. Triggers go through the same
/// bounded queue; the reconciler counts the dispatches this causes.
fn resync(ctx: &Term) {
    let woken = ctx.wake.resync();
    tracing::debug!(woken, "resync");
}

fn count_states(ctx: &Term) {
    let mut counts: Vec<(WorkflowState, i64)> =
        WorkflowState::ALL.iter().map(|s| (*s, 0)).collect();
    for w in ctx.ledger.workflows().state() {
        let state = ctx
            .ledger
            .fresh(&w)
            .status
            .as_ref()
            .map(|s| s.state)
            .unwrap_or_default();
        if let Some(c) = counts.iter_mut().find(|(s, _)| *s == state) {
            c.1 += 1;
        }
    }
    ctx.metrics.set_states(&counts);
}
