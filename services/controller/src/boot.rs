//! `spec.bootOptions`: the controller boots the Hardware into the OSIE through its BMC before a
//! Workflow is dispatched, and gets it to boot its disk after the Workflow succeeded.
//!
//! Before dispatch ([`Phase::Prepare`]), once the Workflow is the next one of an idle machine:
//! netboot is allowed on the Hardware (`toggleAllowNetboot`), then the mode's BMC Job runs
//! (`netboot`: power off, one-time PXE, power on; `isoboot`: power off, eject, insert
//! `isoURL`, one-time CD-ROM, power on; `customboot`: `preparingActions`). Only when the Job
//! completed is the Workflow dispatched (its agent connects from the OSIE the Job booted). A
//! failed Job, one that does not finish within the limit, or a Hardware without `bmcRef` fails
//! the Workflow with the reason and the provider's message.
//!
//! After success ([`Phase::Finish`]): netboot is disallowed on the Hardware, so the machine's
//! next boot reaches its disk, then `isoboot` ejects the ISO and `customboot` runs
//! `postActions`. A failure there is a condition and a Warning Event; the Workflow stays
//! `Succeeded` (its actions did) and the step is not repeated.
//!
//! Every step is recorded in `status.bootOptions` and is idempotent, so a controller that dies
//! between the IO and the status write repeats it harmlessly: the netboot patch sets a value,
//! and a Job of the step's name that this Workflow owns (its owner reference carries the
//! Workflow's uid) is adopted rather than created again. A Job of that name left by another
//! object (an earlier Workflow of the same name) is deleted first, as Tinkerbell does.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource as _, ResourceExt as _};
use serde_json::json;
use tink_api::bmc::{
    self, Action, BootDevice, ConditionStatus as BmcStatus, Job, JobConditionType, JobSpec,
    MachineRef, OneTimeBootDeviceAction, PowerAction, VirtualMediaAction, VirtualMediaKind,
};
use tink_api::v1alpha2::{
    BootJobStatus, BootMode, BootOptions, BootOptionsStatus, ConditionSeverity, ConditionStatus,
    ConditionType, Hardware, Workflow, WorkflowStatus,
};
use tink_workflow::{BootCondition, BootReason, Input};
use tracing::info;

use crate::error::StepError;

/// The label every boot Job carries: the name of its Workflow (the owner reference has the
/// uid).
pub(crate) const WORKFLOW_LABEL: &str = "tinkerbell.org/workflow";

/// Whether the API server serves `job.bmc.tinkerbell.org` (checked when a term starts; without
/// it, Jobs are read from the API server, and creating one fails the Workflow).
pub(crate) async fn jobs_served(client: &Client) -> bool {
    let gv = format!("{}/{}", Job::group(&()), Job::version(&()));
    let served = client
        .list_api_group_resources(&gv)
        .await
        .map(|l| l.resources.iter().any(|r| r.name == "jobs"))
        .unwrap_or(false);
    if !served {
        info!(group_version = %gv, "the BMC API is not installed: Workflows with spec.bootOptions.bootMode fail with NoBMC");
    }
    served
}

/// Which boot steps: before dispatch, or after success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Prepare,
    Finish,
}

impl Phase {
    fn condition(self) -> ConditionType {
        match self {
            Self::Prepare => ConditionType::BootPrepared,
            Self::Finish => ConditionType::BootFinished,
        }
    }
}

/// The next step of a phase, decided from the spec and the record alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Allow (`true`) or disallow netboot on every interface of the Hardware.
    Netboot(bool),
    /// Run this BMC Job (create it, or follow the one recorded).
    Job { name: String, tasks: Vec<Action> },
}

/// The Job name of a step: `<kind>-<workflow name>`, as Tinkerbell names them, shortened with
/// a hash when it would exceed the 253 characters of an object name.
pub(crate) fn job_name(kind: &str, workflow: &str) -> String {
    let name = format!("{kind}-{workflow}");
    if name.len() <= 253 {
        return name;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = 253 - 17;
    let mut cut = keep;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = name[..cut].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// The steps of `phase` for `spec`, in order, with `efi` the boot mode of one-time boots.
fn steps(spec: &BootOptions, workflow: &str, phase: Phase, efi: bool) -> Vec<Step> {
    let mut out = Vec::new();
    if spec.toggle_allow_netboot {
        out.push(Step::Netboot(phase == Phase::Prepare));
    }
    let once = |device| Action {
        one_time_boot_device_action: Some(OneTimeBootDeviceAction {
            devices: vec![device],
            efi_boot: efi,
        }),
        ..Action::default()
    };
    let media = |url: &str| Action {
        virtual_media_action: Some(VirtualMediaAction {
            media_url: url.to_string(),
            kind: VirtualMediaKind::Cd,
        }),
        ..Action::default()
    };
    let job = |kind: &str, tasks: Vec<Action>| Step::Job {
        name: job_name(kind, workflow),
        tasks,
    };
    match (spec.boot_mode, phase) {
        (Some(BootMode::Netboot), Phase::Prepare) => out.push(job(
            "netboot",
            vec![
                Action::power(PowerAction::Off),
                once(BootDevice::Pxe),
                Action::power(PowerAction::On),
            ],
        )),
        (Some(BootMode::Isoboot), Phase::Prepare) => out.push(job(
            "iso-mount",
            vec![
                Action::power(PowerAction::Off),
                media(""),
                media(spec.iso_url.as_deref().unwrap_or_default()),
                once(BootDevice::Cdrom),
                Action::power(PowerAction::On),
            ],
        )),
        (Some(BootMode::Isoboot), Phase::Finish) => out.push(job("iso-eject", vec![media("")])),
        (Some(BootMode::Customboot), phase) => {
            let config = spec.customboot_config.clone().unwrap_or_default();
            let (kind, tasks) = match phase {
                Phase::Prepare => ("customboot-preparing", config.preparing_actions),
                Phase::Finish => ("customboot-post", config.post_actions),
            };
            if !tasks.is_empty() {
                out.push(job(kind, tasks));
            }
        }
        (Some(BootMode::Netboot), Phase::Finish) | (None, _) => {}
    }
    out
}

/// Whether `step` is recorded as done.
fn done(step: &Step, record: &BootOptionsStatus) -> bool {
    match step {
        Step::Netboot(true) => record.allow_netboot.toggled_true,
        Step::Netboot(false) => record.allow_netboot.toggled_false,
        Step::Job { name, .. } => record.jobs.get(name).is_some_and(|j| j.complete),
    }
}

/// The first step of `phase` not done yet (`None`: the phase is done). A phase whose
/// condition records a failure is done: a failed step is not repeated.
pub(crate) fn next_step(
    spec: &BootOptions,
    status: &WorkflowStatus,
    workflow: &str,
    phase: Phase,
    efi: bool,
) -> Option<Step> {
    let failed = status.condition(phase.condition()).is_some_and(|c| {
        c.status == ConditionStatus::False && c.severity == ConditionSeverity::Error
    });
    if failed {
        return None;
    }
    steps(spec, workflow, phase, efi)
        .into_iter()
        .find(|s| !done(s, &status.boot_options))
}

/// Whether the boot steps before dispatch are all done (no IO: the tasks' `efiBoot` does not
/// matter to that).
pub(crate) fn prepared(w: &Workflow, status: &WorkflowStatus) -> bool {
    w.spec
        .boot_options
        .as_ref()
        .is_none_or(|spec| next_step(spec, status, &w.name_any(), Phase::Prepare, false).is_none())
}

/// Whether the steps after success are all done.
pub(crate) fn finished(w: &Workflow, status: &WorkflowStatus) -> bool {
    w.spec
        .boot_options
        .as_ref()
        .is_none_or(|spec| next_step(spec, status, &w.name_any(), Phase::Finish, false).is_none())
}

/// Tinkerbell's rule for `efiBoot`: the machine boots UEFI when an interface of its v1alpha1
/// form says `dhcp.uefi` (v1alpha2 has no such field; the v1alpha1 one is kept through
/// conversion).
fn efi_boot(hw: &Hardware) -> bool {
    tink_api::conversion::hardware_to_v1alpha1(hw)
        .spec
        .interfaces
        .iter()
        .any(|i| i.dhcp.as_ref().is_some_and(|d| d.uefi))
}

/// What one look at the boot steps of a phase produced.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The inputs recording it, in order (empty: nothing new).
    pub inputs: Vec<Input>,
    /// Every step of the phase is done (after `input` is written).
    pub done: bool,
    /// Look again after this long at the latest (a Job runs; its watch usually comes first).
    pub wait: Option<Duration>,
}

/// How a recorded Job stands.
enum JobState {
    /// No Job of ours under that name (never created, or it vanished).
    Missing,
    /// Ours, still running, created at this time.
    Running(Option<Timestamp>),
    Completed,
    Failed(String),
}

/// The boot steps' IO: the Hardware patch and the BMC Jobs.
pub(crate) struct Boot {
    client: Client,
    /// The controller's Job watch (`None` when the BMC API was not served at the term's start:
    /// Jobs are then read from the API server).
    jobs: Option<Store<Job>>,
    timeout: Duration,
}

impl Boot {
    pub fn new(client: Client, jobs: Option<Store<Job>>, timeout: Duration) -> Self {
        Self {
            client,
            jobs,
            timeout,
        }
    }

    /// Takes the steps of `phase` that can be taken now, in order, and says what to record.
    /// Stops at a Job that runs (to be looked at again when it changes) and at a failure.
    pub async fn advance(
        &self,
        w: &Workflow,
        hw: &Hardware,
        status: &WorkflowStatus,
        phase: Phase,
        now: Timestamp,
    ) -> Result<Progress, StepError> {
        let Some(spec) = w.spec.boot_options.as_ref() else {
            return Ok(Progress {
                done: true,
                ..Progress::default()
            });
        };
        let name = w.name_any();
        let efi = efi_boot(hw);
        let mut record = status.boot_options.clone();
        let mut conditions: Vec<BootCondition> = Vec::new();
        let mut view = status.clone();
        let mut wait = None;
        let mut done = false;
        loop {
            view.boot_options = record.clone();
            let Some(step) = next_step(spec, &view, &name, phase, efi) else {
                done = true;
                break;
            };
            match step {
                Step::Netboot(allow) => {
                    self.toggle_netboot(hw, allow).await?;
                    let (reason, message) = if allow {
                        record.allow_netboot.toggled_true = true;
                        (
                            BootReason::NetbootAllowed,
                            format!("netboot allowed on Hardware {}", hw.name_any()),
                        )
                    } else {
                        record.allow_netboot.toggled_false = true;
                        (
                            BootReason::NetbootDisallowed,
                            format!(
                                "netboot disallowed on Hardware {}: its next boot reaches its disk",
                                hw.name_any()
                            ),
                        )
                    };
                    conditions.push(BootCondition {
                        type_: ConditionType::NetbootAllowed,
                        status: if allow {
                            ConditionStatus::True
                        } else {
                            ConditionStatus::False
                        },
                        severity: ConditionSeverity::Info,
                        reason,
                        message,
                    });
                }
                Step::Job { name: job, tasks } => {
                    let Some(machine) = hw.spec.bmc_ref.as_ref().map(|r| r.name.clone()) else {
                        let message = format!(
                            "Hardware {} has no spec.bmcRef: bootMode {} needs its BMC",
                            hw.name_any(),
                            spec.boot_mode.map(BootMode::as_str).unwrap_or_default()
                        );
                        return Ok(fail(phase, record, conditions, BootReason::NoBmc, message));
                    };
                    let recorded = record.jobs.get(&job).and_then(|j| j.uid.clone());
                    let state = match &recorded {
                        Some(uid) => self.job_state(w, &job, uid).await?,
                        None => JobState::Missing,
                    };
                    let summary = describe(&tasks);
                    match state {
                        JobState::Missing => {
                            let created = self.create_job(w, &job, &machine, hw, tasks).await;
                            let (uid, deleted) = match created {
                                Err(StepError::Kube(kube::Error::Api(e))) if e.code == 404 => {
                                    let message = format!(
                                        "cannot create BMC Job {job}: the API server does not serve {}/{} Jobs (install the BMC CRDs): {}",
                                        Job::group(&()),
                                        Job::version(&()),
                                        e.message
                                    );
                                    return Ok(fail(
                                        phase,
                                        record,
                                        conditions,
                                        BootReason::NoBmc,
                                        message,
                                    ));
                                }
                                other => other?,
                            };
                            record.jobs.insert(
                                job.clone(),
                                BootJobStatus {
                                    uid: Some(uid),
                                    complete: false,
                                    existing_job_deleted: deleted,
                                },
                            );
                            conditions.push(running(phase, &job, &machine, &summary));
                            wait = Some(Duration::from_secs(5));
                            break;
                        }
                        JobState::Running(created) => {
                            let elapsed = created
                                .map(|c| now.duration_since(c))
                                .and_then(|d| Duration::try_from(d).ok())
                                .unwrap_or_default();
                            if elapsed >= self.timeout {
                                let message = format!(
                                    "BMC Job {job} ({summary}) did not finish within {}s",
                                    self.timeout.as_secs()
                                );
                                return Ok(fail(
                                    phase,
                                    record,
                                    conditions,
                                    BootReason::BootJobTimeout,
                                    message,
                                ));
                            }
                            conditions.push(running(phase, &job, &machine, &summary));
                            let left = self.timeout - elapsed;
                            wait = Some(left.min(Duration::from_secs(5)));
                            break;
                        }
                        JobState::Completed => {
                            if let Some(j) = record.jobs.get_mut(&job) {
                                j.complete = true;
                            }
                            conditions.push(BootCondition {
                                type_: phase.condition(),
                                status: ConditionStatus::True,
                                severity: ConditionSeverity::Info,
                                reason: BootReason::BootJobCompleted,
                                message: format!("BMC Job {job} completed: {summary}"),
                            });
                        }
                        JobState::Failed(why) => {
                            let message = format!("BMC Job {job} ({summary}) failed: {why}");
                            return Ok(fail(
                                phase,
                                record,
                                conditions,
                                BootReason::BootJobFailed,
                                message,
                            ));
                        }
                    }
                }
            }
        }
        let mut inputs = Vec::new();
        if record != status.boot_options || !conditions.is_empty() {
            inputs.push(Input::Boot {
                record,
                conditions: dedup(conditions),
            });
        }
        Ok(Progress { inputs, done, wait })
    }

    /// Sets `disableNetboot` on every interface of the Hardware (a merge patch of that field
    /// only, so nothing else an operator changed meanwhile is touched).
    async fn toggle_netboot(&self, hw: &Hardware, allow: bool) -> Result<(), StepError> {
        let interfaces: BTreeMap<&str, serde_json::Value> = hw
            .spec
            .network_interfaces
            .keys()
            .map(|mac| (mac.as_str(), json!({"disableNetboot": !allow})))
            .collect();
        if interfaces.is_empty() {
            return Ok(());
        }
        let api: Api<Hardware> =
            Api::namespaced(self.client.clone(), &hw.namespace().unwrap_or_default());
        let patch = json!({"spec": {"networkInterfaces": interfaces}});
        api.patch(
            &hw.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        info!(hardware = %hw.name_any(), allow, "netboot toggled for bootOptions");
        Ok(())
    }

    fn jobs_api(&self, namespace: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The Job `name` if this Workflow owns it: from the watch, else from the API server (the
    /// watch may not have delivered a Job created a moment ago).
    async fn owned_job(&self, w: &Workflow, name: &str) -> Result<Option<Job>, StepError> {
        let namespace = w.namespace().unwrap_or_default();
        let uid = w.uid().unwrap_or_default();
        let cached = self
            .jobs
            .as_ref()
            .and_then(|s| s.get(&ObjectRef::new(name).within(&namespace)));
        let job = match cached {
            Some(j) if owned_by(&j, &uid) => Some((*j).clone()),
            _ => self.jobs_api(&namespace).get_opt(name).await?,
        };
        Ok(job.filter(|j| owned_by(j, &uid)))
    }

    async fn job_state(&self, w: &Workflow, name: &str, uid: &str) -> Result<JobState, StepError> {
        let Some(job) = self.owned_job(w, name).await? else {
            return Ok(JobState::Missing);
        };
        if job.uid().as_deref() != Some(uid) {
            // Another Job of ours under that name (the record was lost and it was created
            // again): follow that one.
            return Ok(JobState::Missing);
        }
        Ok(state_of(&job))
    }

    /// Creates the Job (adopting one this Workflow already owns; deleting one of that name
    /// owned by something else first). Returns its uid and whether an old one was deleted.
    async fn create_job(
        &self,
        w: &Workflow,
        name: &str,
        machine: &str,
        hw: &Hardware,
        tasks: Vec<Action>,
    ) -> Result<(String, bool), StepError> {
        let namespace = w.namespace().unwrap_or_default();
        let api = self.jobs_api(&namespace);
        let mut deleted = false;
        if let Some(existing) = api.get_opt(name).await? {
            if owned_by(&existing, &w.uid().unwrap_or_default()) {
                return Ok((existing.uid().unwrap_or_default(), false));
            }
            api.delete(name, &DeleteParams::background()).await?;
            deleted = true;
            info!(
                job = name,
                "deleted a BMC Job of the same name left by another object"
            );
        }
        let job = Job {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.clone()),
                labels: Some([(WORKFLOW_LABEL.to_string(), w.name_any())].into()),
                owner_references: Some(vec![owner_of(w)]),
                ..ObjectMeta::default()
            },
            spec: JobSpec {
                machine_ref: MachineRef {
                    name: machine.to_string(),
                    namespace: hw.namespace().unwrap_or_default(),
                },
                tasks,
            },
            status: None,
        };
        let created = api.create(&PostParams::default(), &job).await?;
        info!(job = name, machine, "created a BMC Job for bootOptions");
        Ok((created.uid().unwrap_or_default(), deleted))
    }
}

/// The owner reference of a boot Job: the Workflow (garbage collected with it).
fn owner_of(w: &Workflow) -> OwnerReference {
    OwnerReference {
        api_version: Workflow::api_version(&()).to_string(),
        kind: Workflow::kind(&()).to_string(),
        name: w.name_any(),
        uid: w.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn owned_by(job: &Job, workflow_uid: &str) -> bool {
    !workflow_uid.is_empty()
        && job
            .owner_references()
            .iter()
            .any(|o| o.uid == workflow_uid && o.kind == "Workflow")
}

fn state_of(job: &Job) -> JobState {
    let status = job.status.clone().unwrap_or_default();
    if status.has_condition(JobConditionType::Completed, BmcStatus::True) {
        return JobState::Completed;
    }
    if let Some(c) = status
        .conditions
        .iter()
        .find(|c| c.type_ == JobConditionType::Failed && c.status == BmcStatus::True)
    {
        let why = if c.message.is_empty() {
            "no message from the BMC controller".to_string()
        } else {
            c.message.clone()
        };
        return JobState::Failed(why);
    }
    JobState::Running(job.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn running(phase: Phase, job: &str, machine: &str, summary: &str) -> BootCondition {
    BootCondition {
        type_: phase.condition(),
        status: ConditionStatus::False,
        severity: ConditionSeverity::Info,
        reason: BootReason::BootJobRunning,
        message: format!("BMC Job {job} runs against Machine {machine}: {summary}"),
    }
}

/// A failure of `phase`: before dispatch it fails the Workflow; after success it is recorded.
fn fail(
    phase: Phase,
    record: BootOptionsStatus,
    mut conditions: Vec<BootCondition>,
    reason: BootReason,
    message: String,
) -> Progress {
    match phase {
        // What was done before the failure is recorded with it, in the same status write.
        Phase::Prepare => Progress {
            inputs: vec![
                Input::Boot {
                    record,
                    conditions: dedup(conditions),
                },
                Input::BootFailed { reason, message },
            ],
            done: false,
            wait: None,
        },
        Phase::Finish => {
            conditions.push(BootCondition {
                type_: ConditionType::BootFinished,
                status: ConditionStatus::False,
                severity: ConditionSeverity::Error,
                reason,
                message,
            });
            Progress {
                inputs: vec![Input::Boot {
                    record,
                    conditions: dedup(conditions),
                }],
                done: true,
                wait: None,
            }
        }
    }
}

/// The last condition of each type (a step that ran and completed in one look reports the
/// completion).
fn dedup(conditions: Vec<BootCondition>) -> Vec<BootCondition> {
    let mut out: Vec<BootCondition> = Vec::with_capacity(conditions.len());
    for c in conditions {
        match out.iter_mut().find(|o| o.type_ == c.type_) {
            Some(o) => *o = c,
            None => out.push(c),
        }
    }
    out
}

/// A short description of a Job's tasks: `power off, boot pxe (efi), power on`.
fn describe(tasks: &[Action]) -> String {
    tasks
        .iter()
        .map(bmc::plan::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> BootOptions {
        serde_json::from_value(v).expect("bootOptions")
    }

    fn names(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Netboot(a) => format!("netboot={a}"),
                Step::Job { name, tasks } => format!("{name}: {}", describe(tasks)),
            })
            .collect()
    }

    #[test]
    fn each_mode_has_tinkerbells_jobs() {
        let netboot = spec(json!({"toggleAllowNetboot": true, "bootMode": "netboot"}));
        assert_eq!(
            names(&steps(&netboot, "wf", Phase::Prepare, false)),
            ["netboot=true", "netboot-wf: power off, boot pxe, power on"]
        );
        assert_eq!(
            names(&steps(&netboot, "wf", Phase::Finish, true)),
            ["netboot=false"]
        );
        let iso = spec(json!({"bootMode": "isoboot", "isoURL": "http://10.0.0.1/iso/m/hook.iso"}));
        assert_eq!(
            names(&steps(&iso, "wf", Phase::Prepare, true)),
            [
                "iso-mount-wf: power off, virtual media eject, virtual media insert http://10.0.0.1/iso/m/hook.iso, boot cdrom (efi), power on"
            ]
        );
        assert_eq!(
            names(&steps(&iso, "wf", Phase::Finish, true)),
            ["iso-eject-wf: virtual media eject"]
        );
        let custom = spec(json!({"bootMode": "customboot", "custombootConfig": {
            "postActions": [{"powerAction": "reset"}]}}));
        assert!(steps(&custom, "wf", Phase::Prepare, false).is_empty());
        assert_eq!(
            names(&steps(&custom, "wf", Phase::Finish, false)),
            ["customboot-post-wf: power reset"]
        );
        assert!(steps(&spec(json!({})), "wf", Phase::Prepare, false).is_empty());
    }

    #[test]
    fn the_next_step_follows_the_record_and_stops_at_a_failure() {
        let s = spec(json!({"toggleAllowNetboot": true, "bootMode": "netboot"}));
        let mut status = WorkflowStatus::default();
        assert_eq!(
            next_step(&s, &status, "wf", Phase::Prepare, false),
            Some(Step::Netboot(true))
        );
        status.boot_options.allow_netboot.toggled_true = true;
        assert!(matches!(
            next_step(&s, &status, "wf", Phase::Prepare, false),
            Some(Step::Job { name, .. }) if name == "netboot-wf"
        ));
        // Created but not complete: still the Job's turn.
        status.boot_options.jobs.insert(
            "netboot-wf".into(),
            BootJobStatus {
                uid: Some("u".into()),
                ..BootJobStatus::default()
            },
        );
        assert!(next_step(&s, &status, "wf", Phase::Prepare, false).is_some());
        status
            .boot_options
            .jobs
            .get_mut("netboot-wf")
            .expect("job")
            .complete = true;
        assert_eq!(next_step(&s, &status, "wf", Phase::Prepare, false), None);
        assert_eq!(
            next_step(&s, &status, "wf", Phase::Finish, false),
            Some(Step::Netboot(false))
        );
        // A failed after-success step is not repeated.
        status.set_condition(
            tink_api::v1alpha2::Condition::new(
                ConditionType::BootFinished,
                ConditionStatus::False,
                ConditionSeverity::Error,
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
            )
            .with_reason("BootJobFailed", "x"),
        );
        assert_eq!(next_step(&s, &status, "wf", Phase::Finish, false), None);
    }

    #[test]
    fn job_names_stay_object_names() {
        assert_eq!(job_name("netboot", "wf-1"), "netboot-wf-1");
        let long = "a".repeat(253);
        let a = job_name("iso-mount", &long);
        let b = job_name("iso-eject", &long);
        assert!(a.len() <= 253 && b.len() <= 253, "{} {}", a.len(), b.len());
        assert_ne!(a, b);
        assert!(a.starts_with("iso-mount-aaa"));
    }
}
