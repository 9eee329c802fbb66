//! The TinkerbellCluster reconciler: provisioned (v1beta2 `initialization.provisioned`, and
//! `ready` for v1beta1 readers) once owned by a Cluster and given a control plane endpoint
//! host; `failureDomains` from the namespace's Hardware labels. Tinkerbell creates no cloud
//! resources for a cluster, so there is nothing to delete and no finalizer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tink_api::capi::DEFAULT_FAILURE_DOMAIN_LABEL;
use tink_api::capi::selection::failure_domains;
use tink_api::capi::v1beta1::{FailureDomain, Initialization, TinkerbellCluster, conditions as c};
use tracing::{Instrument as _, info, warn};

use super::{Context, Error, core, kube_err, set_condition};

/// Reconciles one TinkerbellCluster.
pub(crate) async fn reconcile(
    tc: Arc<TinkerbellCluster>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let span = tracing::info_span!(
        "capi_cluster",
        cluster = %format!("{}/{}", tc.namespace().unwrap_or_default(), tc.name_any())
    );
    let r = reconcile_inner(&tc, &ctx).instrument(span).await;
    if r.is_err() {
        ctx.metrics.error("capi");
    }
    r
}

/// What to do after an error: try again soon.
pub(crate) fn error_policy(tc: Arc<TinkerbellCluster>, e: &Error, _ctx: Arc<Context>) -> Action {
    warn!(cluster = %tc.name_any(), error = %e, "TinkerbellCluster reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile_inner(tc: &TinkerbellCluster, ctx: &Context) -> Result<Action, Error> {
    let ns = tc.namespace().unwrap_or_default();
    let name = tc.name_any();
    let api: Api<TinkerbellCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let mut status = tc.status.clone().unwrap_or_default();
    let generation = tc.metadata.generation;
    let cluster = match core::owner(tc, "Cluster") {
        Some(owner) => {
            let ar = core::resource(&ctx.config.core_version, "Cluster");
            Api::<kube::api::DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &ar)
                .get_opt(&owner)
                .await
                .map_err(kube_err("reading the Cluster"))?
        }
        None => None,
    };
    let label = tc
        .spec
        .failure_domain_label
        .clone()
        .unwrap_or_else(|| DEFAULT_FAILURE_DOMAIN_LABEL.to_string());
    let hardware = ctx.hardware.state();
    let empty = BTreeMap::new();
    let labels = hardware
        .iter()
        .filter(|h| h.namespace().as_deref() == Some(ns.as_str()))
        .map(|h| h.metadata.labels.as_ref().unwrap_or(&empty));
    let domains = failure_domains(labels, &label);
    match &cluster {
        Some(cl) if core::paused(cl, tc) => {
            set_condition(
                &mut status.conditions,
                c::PAUSED,
                true,
                c::PAUSED_REASON,
                "Cluster.spec.paused or the cluster.x-k8s.io/paused annotation is set",
                generation,
            );
        }
        Some(_) => {
            set_condition(
                &mut status.conditions,
                c::PAUSED,
                false,
                c::NOT_PAUSED,
                "",
                generation,
            );
            status.failure_domains = domains
                .into_iter()
                .map(|name| FailureDomain {
                    name,
                    control_plane: true,
                })
                .collect();
            let host = tc
                .spec
                .control_plane_endpoint
                .as_ref()
                .map(|e| e.host.as_str())
                .unwrap_or("");
            if host.is_empty() {
                set_condition(
                    &mut status.conditions,
                    c::READY,
                    false,
                    c::NO_ENDPOINT,
                    "spec.controlPlaneEndpoint.host is not set",
                    generation,
                );
            } else {
                if !status.ready {
                    info!(cluster = %name, "TinkerbellCluster provisioned");
                }
                status.initialization = Some(Initialization {
                    provisioned: Some(true),
                });
                status.ready = true;
                set_condition(
                    &mut status.conditions,
                    c::READY,
                    true,
                    c::PROVISIONED_REASON,
                    "",
                    generation,
                );
            }
        }
        None => {
            set_condition(
                &mut status.conditions,
                c::READY,
                false,
                c::WAITING_FOR_CLUSTER_OWNER,
                "no Cluster owns this TinkerbellCluster yet",
                generation,
            );
        }
    }
    status.observed_generation = generation;
    if Some(&status) != tc.status.as_ref() {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .map_err(kube_err("writing the TinkerbellCluster status"))?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}
