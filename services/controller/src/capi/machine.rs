//! The TinkerbellMachine reconciler, in the Cluster API contract's order:
//!
//! 1. a Machine owner (else wait), its Cluster, pause (`Cluster.spec.paused` or the paused
//!    annotation: nothing but the `Paused` condition is written), the finalizer;
//! 2. the Cluster's infrastructure provisioned, then `Machine.spec.bootstrap.dataSecretName`
//!    and its Secret's `value`;
//! 3. a Hardware claimed: the machine's uid in the Hardware's [`HARDWARE_CLAIM_LABEL`], written
//!    with the Hardware's resourceVersion as a precondition, so of two reconcilers (two
//!    replicas, or a stale cache) racing for one Hardware exactly one wins and the other gets
//!    a 409 and tries the next candidate. No ownerReference is put on the Hardware: the
//!    garbage collector would delete the inventory record with the machine;
//! 4. the bootstrap data in the Hardware's `spec.instance.userdata` (Hegel serves it);
//! 5. a Template and a Workflow named after the machine, owned by it; a Hardware with a BMC
//!    (`spec.bmcRef`) gets Workflows with `bootOptions` `{toggleAllowNetboot: true, bootMode:
//!    netboot}`, so the workflow controller powers it on into the OSIE (crate::boot);
//! 6. on `Succeeded`: `spec.providerID` (`tinkerbell://<namespace>/<hardware>`), addresses,
//!    `status.initialization.provisioned` and `status.ready`; on `Failed`: the `Provisioned`
//!    condition False with the Workflow's reason and message.
//!
//! Deletion: the Workflow and Template are deleted (and waited for, so nothing still runs on
//! the machine), the optional deprovision Template runs as a Workflow of its own, a Hardware
//! with a BMC is powered off (the `<machine>-poweroff` Job), the user data is cleared, the claim
//! removed, then the finalizer. A Hardware already deleted skips the
//! steps that need it: deletion always finishes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use tink_api::bmc::{
    ConditionStatus as BmcStatus, Job, JobConditionType, JobSpec, MachineRef, PowerAction,
};
use tink_api::capi::selection::{Candidate, FailureDomainFilter, rank};
use tink_api::capi::v1beta1::{
    Initialization, MachineAddress, TemplateOverride, TinkerbellCluster, TinkerbellMachine,
    TinkerbellMachineStatus, conditions as c,
};
use tink_api::capi::{
    DEFAULT_FAILURE_DOMAIN_LABEL, HARDWARE_CLAIM_ANNOTATION, HARDWARE_CLAIM_LABEL,
    HARDWARE_CLUSTER_LABEL, MACHINE_FINALIZER, provider_id,
};
use tink_api::v1alpha2::{
    BootMode, BootOptions, ConditionType, Hardware, LocalObjectReference, Template, TemplateSpec,
    Workflow, WorkflowState,
};
use tracing::{Instrument as _, debug, info, warn};

use super::{Context, Error, core, kube_err, set_condition};

/// The suffix of the deprovision Workflow and Template.
pub const DEPROVISION_SUFFIX: &str = "-deprovision";

/// Reconciles one TinkerbellMachine.
pub(crate) async fn reconcile(
    tm: Arc<TinkerbellMachine>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let ns = tm.namespace().unwrap_or_default();
    let span = tracing::info_span!("capi_machine", machine = %format!("{ns}/{}", tm.name_any()));
    let r = Machine::new(&ctx, &tm).run().instrument(span).await;
    if r.is_err() {
        ctx.metrics.error("capi");
    }
    r
}

/// What to do after an error: try again soon.
pub(crate) fn error_policy(tm: Arc<TinkerbellMachine>, e: &Error, _ctx: Arc<Context>) -> Action {
    warn!(machine = %tm.name_any(), error = %e, "TinkerbellMachine reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

struct Machine<'a> {
    ctx: &'a Context,
    tm: &'a TinkerbellMachine,
    ns: String,
    name: String,
    uid: String,
    /// The machine's resourceVersion as last read or written.
    rv: Option<String>,
    status: TinkerbellMachineStatus,
    /// The status as stored (what a write is compared with).
    written: Option<TinkerbellMachineStatus>,
}

/// The outcome of [`Machine::claim`].
enum Claim {
    /// The machine's Hardware.
    Got(Box<Hardware>),
    /// None free (the conditions say why).
    None,
    /// Another reconciler wrote first: look again at once.
    Retry,
}

impl<'a> Machine<'a> {
    fn new(ctx: &'a Context, tm: &'a TinkerbellMachine) -> Self {
        Self {
            ctx,
            tm,
            ns: tm.namespace().unwrap_or_default(),
            name: tm.name_any(),
            uid: tm.uid().unwrap_or_default(),
            rv: tm.resource_version(),
            status: tm.status.clone().unwrap_or_default(),
            written: tm.status.clone(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn dyn_api(&self, kind: &str) -> Api<DynamicObject> {
        let ar = core::resource(&self.ctx.config.core_version, kind);
        Api::namespaced_with(self.ctx.client.clone(), &self.ns, &ar)
    }

    fn cond(&mut self, type_: &str, ok: bool, reason: &str, message: impl Into<String>) {
        let generation = self.tm.metadata.generation;
        set_condition(
            &mut self.status.conditions,
            type_,
            ok,
            reason,
            message,
            generation,
        );
    }

    /// Writes the status when it changed.
    async fn write_status(&mut self) -> Result<(), Error> {
        self.status.observed_generation = self.tm.metadata.generation;
        if Some(&self.status) == self.written.as_ref() {
            return Ok(());
        }
        let patch = json!({"status": self.status});
        let tm = self
            .api::<TinkerbellMachine>()
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err("writing the TinkerbellMachine status"))?;
        self.rv = tm.resource_version();
        self.written = tm.status;
        Ok(())
    }

    /// Sets the waiting conditions, writes them and requeues.
    async fn wait(
        &mut self,
        reason: &str,
        message: String,
        after: Option<Duration>,
    ) -> Result<Action, Error> {
        debug!(reason, %message, "waiting");
        self.cond(c::HARDWARE_CLAIMED, false, reason, message.clone());
        self.cond(c::READY, false, reason, message);
        self.write_status().await?;
        Ok(match after {
            Some(d) => Action::requeue(d),
            None => Action::await_change(),
        })
    }

    async fn run(mut self) -> Result<Action, Error> {
        let Some(machine_name) = core::owner(self.tm, "Machine") else {
            if self.tm.metadata.deletion_timestamp.is_some() {
                return self.delete().await;
            }
            return self
                .wait(
                    c::WAITING_FOR_MACHINE,
                    "no Machine owns this TinkerbellMachine yet".into(),
                    None,
                )
                .await;
        };
        let machine = self
            .dyn_api("Machine")
            .get_opt(&machine_name)
            .await
            .map_err(kube_err("reading the Machine"))?;
        let cluster_name = machine
            .as_ref()
            .and_then(core::cluster_name)
            .or_else(|| self.tm.labels().get(HARDWARE_CLUSTER_LABEL).cloned());
        let cluster = match &cluster_name {
            Some(n) => self
                .dyn_api("Cluster")
                .get_opt(n)
                .await
                .map_err(kube_err("reading the Cluster"))?,
            None => None,
        };
        if let Some(cl) = &cluster {
            if core::paused(cl, self.tm) {
                info!("paused; left alone");
                self.cond(
                    c::PAUSED,
                    true,
                    c::PAUSED_REASON,
                    "Cluster.spec.paused or the cluster.x-k8s.io/paused annotation is set",
                );
                self.write_status().await?;
                return Ok(Action::await_change());
            }
            self.cond(c::PAUSED, false, c::NOT_PAUSED, "");
        }
        if self.tm.metadata.deletion_timestamp.is_some() {
            return self.delete().await;
        }
        let (Some(machine), Some(cluster)) = (machine, cluster) else {
            let wait = self.ctx.config.wait_period;
            return self
                .wait(
                    c::WAITING_FOR_MACHINE,
                    format!("Machine {machine_name} or its Cluster does not exist yet"),
                    Some(wait),
                )
                .await;
        };
        if !self.tm.finalizers().iter().any(|f| f == MACHINE_FINALIZER) {
            self.add_finalizer().await?;
        }
        if self
            .status
            .initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            == Some(true)
            && self.tm.spec.provider_id.is_some()
        {
            self.write_status().await?;
            return Ok(Action::await_change());
        }
        let wait = self.ctx.config.wait_period;
        if !core::infrastructure_provisioned(&cluster) {
            return self
                .wait(
                    c::WAITING_FOR_CLUSTER,
                    format!(
                        "Cluster {} infrastructure is not provisioned yet",
                        cluster.name_any()
                    ),
                    Some(wait),
                )
                .await;
        }
        let Some(secret_name) = core::data_secret_name(&machine) else {
            return self
                .wait(
                    c::WAITING_FOR_BOOTSTRAP,
                    "Machine.spec.bootstrap.dataSecretName is not set yet".into(),
                    Some(wait),
                )
                .await;
        };
        let userdata = match self.bootstrap_data(&secret_name).await? {
            Ok(d) => d,
            Err(why) => return self.wait(c::WAITING_FOR_BOOTSTRAP, why, Some(wait)).await,
        };

        let cluster_name = cluster.name_any();
        let hw = match self.claim(&machine, &cluster_name).await? {
            Claim::Got(hw) => *hw,
            Claim::None => return Ok(Action::requeue(wait)),
            Claim::Retry => return Ok(Action::requeue(Duration::from_millis(100))),
        };
        let hw_name = hw.name_any();
        self.status.hardware_ref = Some(LocalObjectReference::new(&hw_name));
        let domain_label = self.failure_domain_label(&cluster_name).await?;
        self.status.failure_domain = hw.labels().get(&domain_label).cloned();
        self.cond(
            c::HARDWARE_CLAIMED,
            true,
            c::CLAIMED,
            format!("Hardware {hw_name}"),
        );

        self.put_userdata(&hw, &userdata).await?;

        let template = match self
            .template_spec(&cluster_name, self.tm.spec.template_override.as_ref(), true)
            .await?
        {
            Ok(t) => t,
            Err(why) => {
                self.cond(c::PROVISIONED, false, c::TEMPLATE_INVALID, why.clone());
                self.cond(c::READY, false, c::TEMPLATE_INVALID, why);
                self.write_status().await?;
                return Ok(Action::requeue(wait));
            }
        };
        let wf = self
            .ensure_workflow(&self.name.clone(), &hw, template, &cluster_name)
            .await?;
        let state = wf.status.as_ref().map(|s| s.state).unwrap_or_default();
        match state {
            WorkflowState::Succeeded => {
                self.provisioned(&hw).await?;
                Ok(Action::await_change())
            }
            WorkflowState::Failed | WorkflowState::Canceled => {
                let why = workflow_failure(&wf);
                warn!(workflow = %wf.name_any(), %why, "the provisioning Workflow failed");
                self.cond(c::PROVISIONED, false, c::WORKFLOW_FAILED, why.clone());
                self.cond(c::READY, false, c::WORKFLOW_FAILED, why);
                self.write_status().await?;
                Ok(Action::await_change())
            }
            other => {
                let msg = format!("Workflow {} is {other}", wf.name_any());
                self.cond(c::PROVISIONED, false, c::WORKFLOW_RUNNING, msg.clone());
                self.cond(c::READY, false, c::WORKFLOW_RUNNING, msg);
                self.write_status().await?;
                Ok(Action::await_change())
            }
        }
    }

    async fn add_finalizer(&self) -> Result<(), Error> {
        // A JSON patch that tests the list it extends, so it never drops someone else's.
        let current = self
            .tm
            .metadata
            .finalizers
            .clone()
            .filter(|f| !f.is_empty());
        let mut next = current.clone().unwrap_or_default();
        next.push(MACHINE_FINALIZER.to_string());
        let ops = match current {
            Some(cur) => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": cur},
                {"op": "replace", "path": "/metadata/finalizers", "value": next},
            ]),
            None => json!([{"op": "add", "path": "/metadata/finalizers", "value": next}]),
        };
        let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|e| Error::Kube {
            what: "building the finalizer patch".into(),
            source: kube::Error::SerdeError(e),
        })?;
        self.api::<TinkerbellMachine>()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
            .map_err(kube_err("adding the finalizer"))?;
        Ok(())
    }

    async fn remove_finalizer(&self) -> Result<(), Error> {
        let Some(current) = self.tm.metadata.finalizers.clone() else {
            return Ok(());
        };
        let next: Vec<&String> = current.iter().filter(|f| *f != MACHINE_FINALIZER).collect();
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": next},
        ]);
        let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|e| Error::Kube {
            what: "building the finalizer patch".into(),
            source: kube::Error::SerdeError(e),
        })?;
        match self
            .api::<TinkerbellMachine>()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(kube_err("removing the finalizer")(e)),
        }
    }

    /// The bootstrap Secret's `value`; `Err` with a reason while it is not usable.
    async fn bootstrap_data(&self, name: &str) -> Result<Result<String, String>, Error> {
        let secret = self
            .api::<Secret>()
            .get_opt(name)
            .await
            .map_err(kube_err("reading the bootstrap Secret"))?;
        let Some(secret) = secret else {
            return Ok(Err(format!("bootstrap Secret {name} does not exist yet")));
        };
        let Some(value) = secret.data.as_ref().and_then(|d| d.get("value")) else {
            return Ok(Err(format!("bootstrap Secret {name} has no key `value`")));
        };
        Ok(String::from_utf8(value.0.clone())
            .map_err(|_| format!("bootstrap Secret {name}: `value` is not UTF-8 text")))
    }

    /// The Hardware claimed by this machine, claiming one if it has none.
    ///
    /// Two writes, each with a resourceVersion precondition, so two reconcilers of the same
    /// machine (a leader handover, or a split brain) cannot take two Hardware for it and two
    /// machines cannot take one Hardware:
    /// 1. the intent, `status.hardwareRef`, written with the TinkerbellMachine's
    ///    resourceVersion (only one reconciler's choice lands);
    /// 2. the claim, the machine's uid in the Hardware's label, written with the Hardware's
    ///    resourceVersion (only one machine's claim lands).
    ///
    /// A reconciler finding an intent follows it instead of choosing; one that lost a race
    /// looks again from the start (the Hardware it lost may have gone to this very machine).
    /// Should a machine still end up with two (a Hardware released by its machine in the
    /// instant between two reconcilers' reads), the one its Workflow names, else its intent,
    /// is kept and the other released.
    async fn claim(&mut self, machine: &DynamicObject, cluster: &str) -> Result<Claim, Error> {
        let api = self.api::<Hardware>();
        // The API server, not the cache, is asked: a claim made just before (by this replica or
        // a previous leader) may not be in the cache yet.
        let mut mine = api
            .list(&ListParams::default().labels(&format!("{HARDWARE_CLAIM_LABEL}={}", self.uid)))
            .await
            .map_err(kube_err("listing the claimed Hardware"))?
            .items;
        mine.sort_by_key(|h| h.name_any());
        let intent = self.status.hardware_ref.as_ref().map(|r| r.name.clone());
        if !mine.is_empty() {
            // Normally one. More only after two reconcilers of this machine raced (two
            // leaders): keep the one its Workflow runs on, else its recorded choice.
            let mut keep_name = intent.clone();
            if mine.len() > 1
                && let Some(wf) = self
                    .api::<Workflow>()
                    .get_opt(&self.name)
                    .await
                    .map_err(kube_err("reading the Workflow"))?
            {
                keep_name = Some(wf.spec.hardware_ref.name.clone());
            }
            let keep = mine
                .iter()
                .position(|h| Some(h.name_any()) == keep_name)
                .unwrap_or(0);
            let kept = mine.remove(keep);
            for extra in &mine {
                warn!(hardware = %extra.name_any(), "a second Hardware was claimed for this machine; releasing it");
                release(&api, extra).await?;
            }
            return Ok(Claim::Got(Box::new(kept)));
        }
        let machine_ref = format!("{}/{}", self.ns, self.name);
        if let Some(name) = intent {
            let current = api
                .get_opt(&name)
                .await
                .map_err(kube_err("reading the Hardware"))?;
            // Claimed for this machine since the list above (by another reconciler of it).
            if let Some(h) = current
                .as_ref()
                .filter(|h| h.labels().get(HARDWARE_CLAIM_LABEL) == Some(&self.uid))
            {
                return Ok(Claim::Got(Box::new(h.clone())));
            }
            if let Some(h) = current.filter(|h| tink_api::capi::selection::is_free(h.labels())) {
                return Ok(
                    match claim_hardware(&api, &h, &self.uid, &machine_ref, cluster).await? {
                        Some(h) => {
                            info!(hardware = %name, "Hardware claimed");
                            Claim::Got(Box::new(h))
                        }
                        None => Claim::Retry,
                    },
                );
            }
            // Gone, or another machine's. A Workflow already made for it names it: the
            // machine cannot move to another Hardware.
            let wf = self
                .api::<Workflow>()
                .get_opt(&self.name)
                .await
                .map_err(kube_err("reading the Workflow"))?;
            if wf.is_some() {
                let msg = format!("Hardware {name} claimed earlier is gone or no longer claimed");
                self.cond(c::HARDWARE_CLAIMED, false, c::HARDWARE_GONE, msg.clone());
                self.cond(c::READY, false, c::HARDWARE_GONE, msg);
                self.write_status().await?;
                return Ok(Claim::None);
            }
            self.write_intent(None).await?;
            return Ok(Claim::Retry);
        }
        let domain_label = self.failure_domain_label(cluster).await?;
        let domain = core::failure_domain(machine);
        let filter = domain.as_deref().map(|value| FailureDomainFilter {
            label: &domain_label,
            value,
        });
        let hardware: Vec<Arc<Hardware>> = self
            .ctx
            .hardware
            .state()
            .into_iter()
            .filter(|h| h.namespace().as_deref() == Some(self.ns.as_str()))
            .filter(|h| h.metadata.deletion_timestamp.is_none())
            .collect();
        let empty = BTreeMap::new();
        let candidates: Vec<Candidate> = hardware
            .iter()
            .map(|h| Candidate {
                name: h.metadata.name.as_deref().unwrap_or_default(),
                labels: h.metadata.labels.as_ref().unwrap_or(&empty),
            })
            .collect();
        let ranked = rank(
            &candidates,
            self.tm.spec.hardware_affinity.as_ref(),
            filter.as_ref(),
        );
        // The best candidate only: after a lost race the next reconcile starts over from the
        // list of this machine's claims, because the Hardware may have been taken by another
        // reconciler of this same machine (then it is this machine's, and taking a second one
        // would hold two).
        if let Some(name) = ranked.first().copied()
            && let Some(h) = hardware.iter().find(|h| h.name_any() == name)
        {
            if !self.write_intent(Some(name)).await? {
                // Another reconciler of this machine chose first: follow its choice.
                return Ok(Claim::Retry);
            }
            return Ok(
                match claim_hardware(&api, h, &self.uid, &machine_ref, cluster).await? {
                    Some(claimed) => {
                        info!(hardware = %name, "Hardware claimed");
                        Claim::Got(Box::new(claimed))
                    }
                    None => {
                        debug!(hardware = %name, "lost the race for this Hardware; looking again");
                        Claim::Retry
                    }
                },
            );
        }
        let msg = match &domain {
            Some(d) => format!(
                "no free Hardware matches the affinity in failure domain {domain_label}={d}"
            ),
            None => "no free Hardware matches the affinity".to_string(),
        };
        self.cond(c::HARDWARE_CLAIMED, false, c::NO_HARDWARE, msg.clone());
        self.cond(c::READY, false, c::NO_HARDWARE, msg);
        self.write_status().await?;
        Ok(Claim::None)
    }

    /// Writes `status.hardwareRef` with the machine's resourceVersion as a precondition;
    /// false when someone else wrote the machine since (a 409).
    async fn write_intent(&mut self, hardware: Option<&str>) -> Result<bool, Error> {
        let patch = json!({
            "metadata": {"resourceVersion": self.rv},
            "status": {"hardwareRef": hardware.map(|h| json!({"name": h}))},
        });
        match self
            .api::<TinkerbellMachine>()
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(tm) => {
                self.rv = tm.resource_version();
                self.status.hardware_ref = hardware.map(LocalObjectReference::new);
                self.written = tm.status;
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(kube_err("writing the TinkerbellMachine's Hardware choice")(
                e,
            )),
        }
    }

    async fn tinkerbell_cluster(&self, cluster: &str) -> Result<Option<TinkerbellCluster>, Error> {
        let cl = self
            .dyn_api("Cluster")
            .get_opt(cluster)
            .await
            .map_err(kube_err("reading the Cluster"))?;
        let Some(name) = cl.as_ref().and_then(|c| {
            core::infrastructure_ref::<TinkerbellCluster>(c, "TinkerbellCluster").map(|r| r.name)
        }) else {
            return Ok(None);
        };
        self.api::<TinkerbellCluster>()
            .get_opt(&name)
            .await
            .map_err(kube_err("reading the TinkerbellCluster"))
    }

    async fn failure_domain_label(&self, cluster: &str) -> Result<String, Error> {
        Ok(self
            .tinkerbell_cluster(cluster)
            .await?
            .and_then(|tc| tc.spec.failure_domain_label)
            .unwrap_or_else(|| DEFAULT_FAILURE_DOMAIN_LABEL.to_string()))
    }

    async fn put_userdata(&self, hw: &Hardware, userdata: &str) -> Result<(), Error> {
        let current = hw
            .spec
            .instance
            .as_ref()
            .and_then(|i| i.userdata.as_deref());
        if current == Some(userdata) {
            return Ok(());
        }
        // Precondition: still this machine's (the claim label is tested in the same write).
        let patch = json!({
            "metadata": {"resourceVersion": hw.resource_version()},
            "spec": {"instance": {"userdata": userdata}},
        });
        self.api::<Hardware>()
            .patch(
                &hw.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(kube_err("writing the Hardware's user data"))?;
        info!(hardware = %hw.name_any(), "bootstrap data written to the Hardware's user data");
        Ok(())
    }

    /// The Template spec to run: the override (the machine's, else the cluster's when
    /// `cluster_default`), else the default image-to-disk Template. `Err` with a reason when
    /// it cannot be made.
    async fn template_spec(
        &self,
        cluster: &str,
        own: Option<&TemplateOverride>,
        cluster_default: bool,
    ) -> Result<Result<TemplateSpec, String>, Error> {
        let cluster_override = if own.is_none() && cluster_default {
            self.tinkerbell_cluster(cluster)
                .await?
                .and_then(|tc| tc.spec.template_override)
        } else {
            None
        };
        let chosen = own.cloned().or(cluster_override);
        match chosen {
            Some(TemplateOverride {
                inline: Some(t), ..
            }) => Ok(Ok(t)),
            Some(TemplateOverride {
                template_ref: Some(r),
                ..
            }) => {
                match self
                    .api::<Template>()
                    .get_opt(&r.name)
                    .await
                    .map_err(kube_err("reading the override Template"))?
                {
                    Some(t) => Ok(Ok(t.spec)),
                    None => Ok(Err(format!("Template {} does not exist", r.name))),
                }
            }
            Some(_) => Ok(Err(
                "templateOverride sets neither inline nor templateRef".into()
            )),
            None if self.tm.spec.image_url.is_some() => Ok(Ok(default_template())),
            None => Ok(Err(
                "no templateOverride and no imageURL for the default Template".into(),
            )),
        }
    }

    fn owner_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: TinkerbellMachine::api_version(&()).into(),
            kind: TinkerbellMachine::kind(&()).into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// The Template and Workflow `name`, created when missing (owned by the machine). A
    /// Hardware with a BMC (`spec.bmcRef`) is booted through it: the Workflow asks for a
    /// netboot (power off, one-time PXE, power on before dispatch) and for netboot to be turned
    /// off after success, as CAPT does.
    async fn ensure_workflow(
        &self,
        name: &str,
        hw: &Hardware,
        template: TemplateSpec,
        cluster: &str,
    ) -> Result<Workflow, Error> {
        let hw_name = hw.name_any();
        let hardware = hw_name.as_str();
        let wfs = self.api::<Workflow>();
        if let Some(w) = wfs
            .get_opt(name)
            .await
            .map_err(kube_err("reading the Workflow"))?
        {
            return Ok(w);
        }
        let templates = self.api::<Template>();
        if templates
            .get_opt(name)
            .await
            .map_err(kube_err("reading the Template"))?
            .is_none()
        {
            let mut t = Template::new(name, template);
            t.metadata.namespace = Some(self.ns.clone());
            t.metadata.owner_references = Some(vec![self.owner_ref()]);
            t.metadata.labels = Some(BTreeMap::from([(
                HARDWARE_CLUSTER_LABEL.to_string(),
                cluster.to_string(),
            )]));
            match templates.create(&PostParams::default(), &t).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(kube_err("creating the Template")(e)),
            }
        }
        let mut data: BTreeMap<String, Value> = BTreeMap::new();
        if let Some(url) = &self.tm.spec.image_url {
            data.insert("image_url".into(), json!(url));
        }
        data.insert("hardware_name".into(), json!(hardware));
        data.insert("machine_name".into(), json!(self.name));
        data.insert("cluster_name".into(), json!(cluster));
        let mut w = Workflow::new(
            name,
            tink_api::v1alpha2::WorkflowSpec {
                hardware_ref: LocalObjectReference::new(hardware),
                template_ref: LocalObjectReference::new(name),
                template_data: data,
                timeout: None,
                boot_options: hw.spec.bmc_ref.is_some().then(|| BootOptions {
                    toggle_allow_netboot: true,
                    boot_mode: Some(BootMode::Netboot),
                    ..BootOptions::default()
                }),
            },
        );
        w.metadata.namespace = Some(self.ns.clone());
        w.metadata.owner_references = Some(vec![self.owner_ref()]);
        w.metadata.labels = Some(BTreeMap::from([(
            HARDWARE_CLUSTER_LABEL.to_string(),
            cluster.to_string(),
        )]));
        match wfs.create(&PostParams::default(), &w).await {
            Ok(w) => {
                info!(workflow = %name, hardware, "Workflow created");
                Ok(w)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => wfs
                .get(name)
                .await
                .map_err(kube_err("reading the Workflow")),
            Err(e) => Err(kube_err("creating the Workflow")(e)),
        }
    }

    async fn provisioned(&mut self, hw: &Hardware) -> Result<(), Error> {
        let id = provider_id(&self.ns, &hw.name_any());
        if self.tm.spec.provider_id.is_none() {
            let patch = json!({"spec": {"providerID": id}});
            self.api::<TinkerbellMachine>()
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err("setting the providerID"))?;
        }
        let mut addresses: Vec<MachineAddress> = hw
            .spec
            .ips()
            .map(|ip| MachineAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            })
            .collect();
        let hostnames = hw
            .spec
            .network_interfaces
            .values()
            .filter_map(|i| i.dhcp.as_ref()?.hostname.clone());
        for h in hostnames {
            addresses.push(MachineAddress {
                type_: "Hostname".into(),
                address: h,
            });
        }
        addresses.dedup();
        self.status.addresses = addresses;
        self.status.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        self.status.ready = true;
        self.cond(c::PROVISIONED, true, c::WORKFLOW_SUCCEEDED, "");
        self.cond(c::READY, true, c::PROVISIONED_REASON, "");
        self.write_status().await?;
        info!(provider_id = %id, "machine provisioned");
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Deletion

    async fn delete(mut self) -> Result<Action, Error> {
        if !self.tm.finalizers().iter().any(|f| f == MACHINE_FINALIZER) {
            return Ok(Action::await_change());
        }
        // 1. Nothing may still run on the machine: the provisioning Workflow goes first.
        if !self.gone(&self.name.clone()).await? {
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
        let hw = self
            .api::<Hardware>()
            .list(&ListParams::default().labels(&format!("{HARDWARE_CLAIM_LABEL}={}", self.uid)))
            .await
            .map_err(kube_err("listing the claimed Hardware"))?
            .items;
        // 2. The deprovision Workflow, when asked for and the Hardware still exists.
        if let (Some(over), Some(h)) = (self.tm.spec.deprovision_template.clone(), hw.first()) {
            let name = format!("{}{DEPROVISION_SUFFIX}", self.name);
            let cluster = h
                .labels()
                .get(HARDWARE_CLUSTER_LABEL)
                .cloned()
                .unwrap_or_default();
            let spec = match self.template_spec(&cluster, Some(&over), false).await? {
                Ok(s) => s,
                Err(why) => {
                    // A deprovision Template that cannot be made must not block deletion for
                    // ever, but the Hardware must not be reused unwiped either: it stays
                    // claimed (and the condition says why) until the Template exists.
                    self.cond(
                        c::READY,
                        false,
                        c::TEMPLATE_INVALID,
                        format!("deprovision: {why}"),
                    );
                    self.write_status().await?;
                    return Ok(Action::requeue(self.ctx.config.wait_period));
                }
            };
            let wf = self.ensure_workflow(&name, h, spec, &cluster).await?;
            match wf.status.as_ref().map(|s| s.state).unwrap_or_default() {
                WorkflowState::Succeeded => {
                    if !self.gone(&name).await? {
                        return Ok(Action::requeue(Duration::from_millis(500)));
                    }
                }
                WorkflowState::Failed | WorkflowState::Canceled => {
                    let why = workflow_failure(&wf);
                    warn!(%why, "the deprovision Workflow failed; retrying it");
                    self.cond(
                        c::READY,
                        false,
                        c::WORKFLOW_FAILED,
                        format!("deprovision: {why}"),
                    );
                    self.write_status().await?;
                    // Deleted so the next look runs it again.
                    self.gone(&name).await?;
                    return Ok(Action::requeue(self.ctx.config.wait_period));
                }
                _ => return Ok(Action::await_change()),
            }
        }
        // 3. A Hardware with a BMC is powered off (the `<machine>-poweroff` Job, as CAPT
        //    names it), so a removed node does not keep running its old system.
        for h in &hw {
            if let Some(wait) = self.power_off(h).await? {
                return Ok(wait);
            }
        }
        // 4. User data cleared and the claim released (only while it is still ours: the
        //    patch carries the resourceVersion of the read that found it claimed).
        for h in &hw {
            if !release(&self.api::<Hardware>(), h).await? {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
        }
        // 5. Done.
        self.remove_finalizer().await?;
        info!("TinkerbellMachine deleted");
        Ok(Action::await_change())
    }

    /// Powers `hw` off through its BMC when it has one: creates the `<machine>-poweroff` Job
    /// (owned by the machine) and waits for it. `Some(action)`: look again then. A failed Job
    /// is reported in the `Ready` condition and created again after the wait period; removing
    /// the Hardware's `bmcRef` lets the deletion go on without it.
    async fn power_off(&mut self, hw: &Hardware) -> Result<Option<Action>, Error> {
        let Some(bmc) = hw.spec.bmc_ref.as_ref() else {
            return Ok(None);
        };
        let name = format!("{}-poweroff", self.name);
        let jobs = self.api::<Job>();
        let existing = jobs
            .get_opt(&name)
            .await
            .map_err(kube_err("reading the power-off Job"))?
            .filter(|j| j.owner_references().iter().any(|o| o.uid == self.uid));
        let Some(job) = existing else {
            let mut job = Job::new(
                &name,
                JobSpec {
                    machine_ref: MachineRef {
                        name: bmc.name.clone(),
                        namespace: hw.namespace().unwrap_or_default(),
                    },
                    tasks: vec![tink_api::bmc::Action::power(PowerAction::Off)],
                },
            );
            job.metadata.namespace = Some(self.ns.clone());
            job.metadata.owner_references = Some(vec![self.owner_ref()]);
            match jobs.create(&PostParams::default(), &job).await {
                Ok(_) => info!(job = %name, machine = %bmc.name, "powering the Hardware off"),
                // A Job of that name owned by something else: it goes first.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    jobs.delete(&name, &DeleteParams::background())
                        .await
                        .map_err(kube_err("deleting a stale power-off Job"))?;
                }
                Err(e) => return Err(kube_err("creating the power-off Job")(e)),
            }
            return Ok(Some(Action::requeue(Duration::from_secs(1))));
        };
        let status = job.status.clone().unwrap_or_default();
        if status.has_condition(JobConditionType::Completed, BmcStatus::True) {
            return Ok(None);
        }
        if let Some(failed) = status
            .conditions
            .iter()
            .find(|c| c.type_ == JobConditionType::Failed && c.status == BmcStatus::True)
        {
            let why = format!(
                "powering Hardware {} off through BMC {} failed: {}",
                hw.name_any(),
                bmc.name,
                failed.message
            );
            warn!(%why, "retrying after the wait period");
            self.cond(c::READY, false, c::DELETING_POWER_OFF_FAILED, why);
            self.write_status().await?;
            jobs.delete(&name, &DeleteParams::background())
                .await
                .map_err(kube_err("deleting the failed power-off Job"))?;
            return Ok(Some(Action::requeue(self.ctx.config.wait_period)));
        }
        Ok(Some(Action::requeue(Duration::from_secs(1))))
    }

    /// Deletes the Workflow and the Template `name`; whether the Workflow is gone (its own
    /// finalizer keeps it while it is cancelled).
    async fn gone(&self, name: &str) -> Result<bool, Error> {
        let wfs = self.api::<Workflow>();
        let gone = match wfs.delete(name, &DeleteParams::background()).await {
            Err(kube::Error::Api(e)) if e.code == 404 => true,
            Err(e) => return Err(kube_err("deleting the Workflow")(e)),
            Ok(_) => wfs
                .get_opt(name)
                .await
                .map_err(kube_err("reading the Workflow"))?
                .is_none(),
        };
        if gone {
            match self
                .api::<Template>()
                .delete(name, &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(kube_err("deleting the Template")(e)),
            }
        }
        Ok(gone)
    }
}

/// Claims `hw` for the machine `uid`: one merge patch adding the claim labels, with `hw`'s
/// resourceVersion as a precondition. `Ok(None)` when someone else wrote the Hardware since
/// it was read (409) or it is gone (404): the caller tries another.
pub async fn claim_hardware(
    api: &Api<Hardware>,
    hw: &Hardware,
    uid: &str,
    machine: &str,
    cluster: &str,
) -> Result<Option<Hardware>, Error> {
    let Some(rv) = hw.resource_version() else {
        return Ok(None);
    };
    let patch = json!({
        "metadata": {
            "resourceVersion": rv,
            "labels": {HARDWARE_CLAIM_LABEL: uid, HARDWARE_CLUSTER_LABEL: cluster},
            "annotations": {HARDWARE_CLAIM_ANNOTATION: machine},
        },
    });
    match api
        .patch(
            &hw.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(h) => Ok(Some(h)),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(None),
        Err(e) => Err(kube_err("claiming the Hardware")(e)),
    }
}

/// Removes the claim and the user data from `hw`, unless it changed since it was read (then
/// the next reconcile looks again) or is gone.
async fn release(api: &Api<Hardware>, hw: &Hardware) -> Result<bool, Error> {
    let patch = json!({
        "metadata": {
            "resourceVersion": hw.resource_version(),
            "labels": {HARDWARE_CLAIM_LABEL: null, HARDWARE_CLUSTER_LABEL: null},
            "annotations": {HARDWARE_CLAIM_ANNOTATION: null},
        },
        "spec": {"instance": {"userdata": null}},
    });
    match api
        .patch(
            &hw.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            info!(hardware = %hw.name_any(), "Hardware released");
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(kube_err("releasing the Hardware")(e)),
    }
}

/// `reason: message` of a failed Workflow, from its `Succeeded` condition or failed action.
fn workflow_failure(wf: &Workflow) -> String {
    let Some(s) = wf.status.as_ref() else {
        return "the Workflow failed".into();
    };
    if let Some(cond) = s.condition(ConditionType::Succeeded) {
        let reason = cond.reason.as_deref().unwrap_or("Failed");
        return match cond.message.as_deref() {
            Some(m) => format!("{reason}: {m}"),
            None => reason.to_string(),
        };
    }
    match s
        .actions
        .iter()
        .find(|a| a.failure_reason.is_some() || a.failure_message.is_some())
    {
        Some(a) => format!(
            "{}: {}",
            a.failure_reason.as_deref().unwrap_or("ActionFailed"),
            a.failure_message.as_deref().unwrap_or_default()
        ),
        None => format!("the Workflow is {}", s.state),
    }
}

/// The default Template: stream `{{ .image_url }}` to the Hardware's first disk, then ask the
/// agent to reboot into it (the agent's power contract, `/tinkerbell/power`: the reboot happens
/// only once the Workflow's success is stored).
pub fn default_template() -> TemplateSpec {
    let yaml = r#"
actions:
  - name: stream-image
    image: quay.io/tinkerbell/actions/image2disk:latest
    timeout: 30m
    env:
      DEST_DISK: "{{ index .Hardware.Disks 0 }}"
      IMG_URL: "{{ .image_url }}"
      COMPRESSED: "true"
  - name: reboot
    image: busybox
    args: ["sh", "-c", "echo reboot > /tinkerbell/power"]
"#;
    // A constant that is tested to parse (`default_template_parses`).
    tink_api::from_yaml(yaml).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_template_parses() {
        let t = default_template();
        let names: Vec<&str> = t.actions.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["stream-image", "reboot"]);
        assert!(
            t.actions[1]
                .args
                .iter()
                .any(|a| a.contains("/tinkerbell/power"))
        );
    }
}
