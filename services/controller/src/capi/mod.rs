//! The Cluster API infrastructure provider (DESIGN.md section 5): a reconciler of
//! TinkerbellMachines ([`machine`]) and one of TinkerbellClusters ([`cluster`]), run by the
//! leader next to the Workflow reconciler.
//!
//! Cluster API's own kinds (Cluster, Machine) are read as dynamic objects ([`core`]): the
//! provider depends on a handful of their fields only, in the version given by
//! [`CapiConfig::core_version`].

pub mod cluster;
pub mod core;
pub mod machine;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};
use tink_api::capi::v1beta1::{TinkerbellCluster, TinkerbellMachine};
use tink_api::v1alpha2::{Hardware, Workflow};
use tracing::info;

use crate::metrics::Metrics;
use crate::tasks::Tasks;

/// Whether the provider runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CapiMode {
    /// Never.
    #[default]
    Off,
    /// Always (the watches of Cluster and Machine retry until Cluster API is installed).
    On,
    /// When the API server serves Cluster API's Machines (looked at each time a replica
    /// starts leading).
    Auto,
}

impl std::str::FromStr for CapiMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "auto" => Ok(Self::Auto),
            other => Err(format!("{other}: expected auto, on or off")),
        }
    }
}

/// Configuration of the provider.
#[derive(Clone, Debug)]
pub struct CapiConfig {
    /// Whether it runs. Default off in the library; the binary's `--capi` defaults to auto.
    pub mode: CapiMode,
    /// The version of `cluster.x-k8s.io` read (Cluster, Machine). Default `v1beta2`.
    pub core_version: String,
    /// How often a machine waiting for something nothing watches (a free Hardware elsewhere,
    /// a bootstrap Secret) is looked at again. Default 10 s.
    pub wait_period: Duration,
}

impl Default for CapiConfig {
    fn default() -> Self {
        Self {
            mode: CapiMode::Off,
            core_version: "v1beta2".into(),
            wait_period: Duration::from_secs(10),
        }
    }
}

/// A failure of a provider reconcile (retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes request failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
}

pub(crate) fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

/// Everything the provider's reconcilers share.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The configuration.
    pub config: CapiConfig,
    /// The controller's metrics (errors are counted under `capi`).
    pub(crate) metrics: Metrics,
    /// The Hardware cache (claims are made with the cached resourceVersion as a precondition,
    /// so a stale entry costs a conflict, never a double claim).
    pub(crate) hardware: reflector::Store<Hardware>,
}

/// Whether the provider should run in this term.
pub(crate) async fn enabled(client: &Client, config: &CapiConfig) -> bool {
    match config.mode {
        CapiMode::Off => false,
        CapiMode::On => true,
        CapiMode::Auto => {
            let gv = format!("{}/{}", core::GROUP, config.core_version);
            let served = client
                .list_api_group_resources(&gv)
                .await
                .map(|l| l.resources.iter().any(|r| r.name == "machines"))
                .unwrap_or(false);
            if !served {
                info!(group_version = %gv, "Cluster API is not installed; the infrastructure provider stays off");
            }
            served
        }
    }
}

/// Starts the provider's reconcilers as critical tasks of the term's `tasks`; they stop with it.
pub(crate) fn start(
    client: Client,
    config: CapiConfig,
    metrics: Metrics,
    namespace: Option<String>,
    tasks: &Tasks,
) {
    let term = tasks.token();
    let ns = namespace.as_deref();
    let wc = watcher::Config::default();
    let (hardware, hw_writer) = reflector::store::<Hardware>();
    let hw_stream = watcher(api::<Hardware>(&client, ns), wc.clone())
        .default_backoff()
        .reflect(hw_writer)
        .applied_objects();
    let ctx = Arc::new(Context {
        client: client.clone(),
        config: config.clone(),
        metrics,
        hardware,
    });

    // TinkerbellMachines: woken by their Workflows, their Machine, their Cluster and Hardware.
    let machines = Controller::new(api::<TinkerbellMachine>(&client, ns), wc.clone())
        .with_config(controller::Config::default().concurrency(16));
    let store = machines.store();
    let machine_ar = core::resource(&config.core_version, "Machine");
    let cluster_ar = core::resource(&config.core_version, "Cluster");
    let by_hardware = {
        let store = store.clone();
        move |h: Hardware| {
            let ns = h.namespace().unwrap_or_default();
            store
                .state()
                .into_iter()
                .filter(|m| m.namespace().as_deref() == Some(ns.as_str()))
                .filter(|m| m.spec.provider_id.is_none() || m.metadata.deletion_timestamp.is_some())
                .map(|m| ObjectRef::from_obj(&*m))
                .collect::<Vec<_>>()
        }
    };
    let by_cluster = {
        let store = store.clone();
        move |c: kube::api::DynamicObject| {
            let ns = c.namespace().unwrap_or_default();
            let name = c.name_any();
            store
                .state()
                .into_iter()
                .filter(|m| m.namespace().as_deref() == Some(ns.as_str()))
                .filter(|m| m.labels().get(tink_api::capi::HARDWARE_CLUSTER_LABEL) == Some(&name))
                .map(|m| ObjectRef::from_obj(&*m))
                .collect::<Vec<_>>()
        }
    };
    let machines = machines
        .owns(api::<Workflow>(&client, ns), wc.clone())
        .watches_stream(hw_stream, by_hardware)
        .watches_with(
            dyn_api(&client, ns, &machine_ar),
            machine_ar.clone(),
            wc.clone(),
            |m| core::infrastructure_ref(&m, "TinkerbellMachine"),
        )
        .watches_with(
            dyn_api(&client, ns, &cluster_ar),
            cluster_ar.clone(),
            wc.clone(),
            by_cluster,
        )
        .graceful_shutdown_on(term.clone().cancelled_owned());
    {
        let ctx = ctx.clone();
        tasks.spawn_critical("TinkerbellMachine reconciler", async move {
            machines
                .run(machine::reconcile, machine::error_policy, ctx)
                .for_each(|_| std::future::ready(()))
                .await;
            Ok(())
        });
    }

    // TinkerbellClusters: woken by their Cluster and by Hardware (failure domains).
    let clusters = Controller::new(api::<TinkerbellCluster>(&client, ns), wc.clone())
        .with_config(controller::Config::default().concurrency(4));
    let cstore = clusters.store();
    let hw_all = {
        let cstore = cstore.clone();
        move |h: Hardware| {
            let ns = h.namespace().unwrap_or_default();
            cstore
                .state()
                .into_iter()
                .filter(|c| c.namespace().as_deref() == Some(ns.as_str()))
                .map(|c| ObjectRef::from_obj(&*c))
                .collect::<Vec<_>>()
        }
    };
    let clusters = clusters
        .watches(api::<Hardware>(&client, ns), wc.clone(), hw_all)
        .watches_with(dyn_api(&client, ns, &cluster_ar), cluster_ar, wc, |c| {
            core::infrastructure_ref(&c, "TinkerbellCluster")
        })
        .graceful_shutdown_on(term.clone().cancelled_owned());
    tasks.spawn_critical("TinkerbellCluster reconciler", async move {
        clusters
            .run(cluster::reconcile, cluster::error_policy, ctx)
            .for_each(|_| std::future::ready(()))
            .await;
        Ok(())
    });
    info!("Cluster API infrastructure provider started");
}

pub(crate) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn dyn_api(
    client: &Client,
    namespace: Option<&str>,
    ar: &kube::api::ApiResource,
) -> Api<kube::api::DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Sets a condition (metav1 shape), keeping `lastTransitionTime` when the status is unchanged.
/// Returns whether anything changed.
pub(crate) fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> bool {
    let status = if status { "True" } else { "False" };
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed = c.status != status
                || c.reason != reason
                || c.message != message
                || c.observed_generation != generation;
            if c.status != status {
                c.last_transition_time = Time(jiff::Timestamp::now());
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.into(),
                status: status.into(),
                reason: reason.into(),
                message,
                observed_generation: generation,
                last_transition_time: Time(jiff::Timestamp::now()),
            });
            true
        }
    }
}

/// The condition of this type, if any.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}
