//! One leadership term: the caches, the reconciler, the events consumer, the presence watch,
//! the Kubernetes Event publisher and the housekeeping, all stopped together when the term
//! ends.

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
use tokio::task::JoinSet;
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
use crate::term::Term;
use crate::{events, presence, reconcile};

/// How often housekeeping runs (state gauges, ledger sweep).
const HOUSEKEEPING: Duration = Duration::from_secs(2);

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
    let Some(bus) = tink_bus::wait_for_streams(
        &jetstream,
        &config.bus,
        StreamSetup::Ensure,
        Duration::from_secs(1),
        term.cancelled(),
        |e, _| {
            metrics.error("nats");
            warn!(error = %e, "cannot set up the JetStream streams yet; retrying");
            std::future::ready(())
        },
    )
    .await
    else {
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
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = term.cancelled() => return,
                    changed = reconnects.changed() => if changed.is_err() { return },
                }
                let ensured = tink_bus::wait_for_streams(
                    &jetstream,
                    &bus_config,
                    StreamSetup::Ensure,
                    Duration::from_secs(1),
                    term.cancelled(),
                    |e, _| {
                        metrics.error("nats");
                        warn!(error = %e, "NATS reconnected but the streams cannot be set up yet; retrying");
                        std::future::ready(())
                    },
                )
                .await;
                if ensured.is_none() {
                    return;
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
    ));
    let resets = Arc::new(AgentResets::new(
        client.clone(),
        bus.clone(),
        metrics.clone(),
        kube_events.clone(),
    ));
    let secrets = Arc::new(AgentSecrets::new(
        client.clone(),
        config.clone(),
        metrics.clone(),
        bus.clone(),
        hardware.clone(),
        kube_events,
    ));
    let admitted = Arc::new(Admitted::new(
        metrics.clone(),
        bus.admitted_agents.clone(),
        hardware.clone(),
        config.agent_secrets_sweep,
    ));

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
        move |h: Hardware| {
            resets.observe(&h);
            secrets.observe(&h);
            admitted.observe(&h);
            let namespace = h.namespace().unwrap_or_default();
            pending(ctx.wake.workflows_of_hardware(&namespace, &h.name_any()))
        }
    };
    let controller = controller
        .watches_stream(tpl_stream, by_template)
        .watches_stream(hw_stream, by_hardware)
        .reconcile_on(tokio_stream::wrappers::ReceiverStream::new(trigger_rx))
        .graceful_shutdown_on(term.clone().cancelled_owned());

    let mut tasks: JoinSet<&'static str> = JoinSet::new();
    {
        let ctx = ctx.clone();
        tasks.spawn(async move {
            controller
                .run(reconcile::reconcile, reconcile::error_policy, ctx)
                .for_each(|_| std::future::ready(()))
                .await;
            "reconciler"
        });
    }
    let (bound_tx, bound_rx) = oneshot::channel();
    {
        let (ctx, term) = (ctx.clone(), term.clone());
        let stream = bus.events.clone();
        tasks.spawn(async move {
            events::run(ctx, stream, bound_tx, term).await;
            "events consumer"
        });
    }
    let (loaded_tx, loaded_rx) = oneshot::channel();
    {
        let (ctx, term) = (ctx.clone(), term.clone());
        let bucket = bus.presence.clone();
        tasks.spawn(async move {
            presence::run(
                &ctx.presence,
                &ctx.wake,
                &ctx.metrics,
                bucket,
                loaded_tx,
                term,
            )
            .await;
            "presence watch"
        });
    }
    {
        let term = term.clone();
        let recorder = Recorder::new(client.clone(), CONTROLLER_NAME, &config.replica_id);
        let metrics = metrics.clone();
        tasks.spawn(async move {
            crate::recorder::publish_queued(recorder, event_rx, metrics, term).await;
            "event publisher"
        });
    }
    {
        let (ctx, term) = (ctx.clone(), term.clone());
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = term.cancelled() => break,
                    _ = tokio::time::sleep(HOUSEKEEPING) => {}
                }
                ctx.ledger.sweep();
                ctx.prune();
                count_states(&ctx);
            }
            "housekeeping"
        });
    }
    {
        let (secrets, term) = (secrets.clone(), term.clone());
        tasks.spawn(async move {
            secrets.sweep(term).await;
            "agent secrets sweep"
        });
    }
    {
        let term = term.clone();
        tasks.spawn(async move {
            secrets.follow_exchanges(term).await;
            "agent secret exchanges watch"
        });
    }
    {
        let term = term.clone();
        tasks.spawn(async move {
            admitted.sweep(term).await;
            "admitted agents sweep"
        });
    }
    if crate::capi::enabled(&client, &config.capi).await {
        crate::capi::start(
            client.clone(),
            config.capi.clone(),
            metrics.clone(),
            config.namespace.clone(),
            &mut tasks,
            &term,
        );
    }
    if !config.resync_period.is_zero() {
        let (ctx, term) = (ctx.clone(), term.clone());
        let period = config.resync_period;
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = term.cancelled() => break,
                    _ = tokio::time::sleep(period) => {}
                }
                resync(&ctx);
            }
            "resync"
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
    tokio::select! {
        r = ready => if r.is_some() {
            health.set_ready(true);
            info!("caches synced and events consumer bound; ready");
        },
        _ = term.cancelled() => {}
        done = tasks.join_next() => {
            let stopping = term.is_cancelled();
            term.cancel();
            while tasks.join_next().await.is_some() {}
            return if stopping { Ok(()) } else { Err(Error::Stopped(task_name(done))) };
        }
    }

    let result = tokio::select! {
        _ = term.cancelled() => Ok(()),
        // A part that stops while the term is being cancelled is shutting down, not failing.
        done = tasks.join_next() => if term.is_cancelled() {
            Ok(())
        } else {
            Err(Error::Stopped(task_name(done)))
        },
    };
    term.cancel();
    // Drain: the reconciler finishes its running reconciles, the others stop at once.
    while tasks.join_next().await.is_some() {}
    result
}

fn task_name(done: Option<Result<&'static str, tokio::task::JoinError>>) -> String {
    match done {
        Some(Ok(name)) => name.to_string(),
        Some(Err(e)) => format!("a task failed: {e}"),
        None => "no task".to_string(),
    }
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
