//! `spec.bootOptions` against the real parts: kube-lite with every CRD, NATS, a tink-server, the
//! workflow controller, the BMC controller (services/bmc) and sushy-tools' Redfish emulator
//! (fake driver, TLS, checked credentials). The agent is the test's scripted agent.
//!
//! - netboot: netboot is allowed on the Hardware and the emulator's machine is On with a Pxe
//!   boot override before the Workflow is dispatched; after success the Hardware's netboot is
//!   off;
//! - a BMC that refuses the credentials fails the Workflow with the provider's reason, and no
//!   agent ever receives it;
//! - a Hardware without a BMC fails a Workflow that asks for one (`NoBMC`).

#[path = "common/bmc.rs"]
mod bmc;
mod common;

use std::time::Duration;

use bmc::*;
use common::*;
use kube::api::PostParams;
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tink_api::bmc::{Job, JobConditionType, PowerState};
use tink_api::v1alpha2::{ConditionStatus, ConditionType, Hardware, Workflow, WorkflowState};
use tink_bmc::Bmc as _;
use tink_testkit::bmc::{BMC_PASSWORD, Sushy};

const MAC: &str = "52:54:00:be:00:01";

/// A Hardware whose only interface starts with netboot disabled (as the previous Workflow's
/// after-success step leaves it), linked to BMC Machine `bmc`.
async fn hardware(stack: &Stack, name: &str, bmc: Option<&str>) {
    let mut spec = json!({
        "networkInterfaces": {MAC: {"dhcp": {"ip": "10.0.0.2", "netmask": "255.255.255.0"},
                                     "disableNetboot": true}},
        "storageDevices": ["/dev/nvme0n1"],
    });
    if let Some(bmc) = bmc {
        spec["bmcRef"] = json!({"name": bmc});
    }
    let hw: Hardware = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .expect("hardware");
    Api::<Hardware>::namespaced(stack.client.clone(), NS)
        .create(&PostParams::default(), &hw)
        .await
        .expect("create hardware");
}

async fn netboot_disabled(stack: &Stack, name: &str) -> bool {
    let hw = Api::<Hardware>::namespaced(stack.client.clone(), NS)
        .get(name)
        .await
        .expect("hardware");
    hw.spec.network_interfaces[MAC].disable_netboot
}

fn condition(w: &Workflow, t: ConditionType) -> Option<(ConditionStatus, String, String)> {
    w.status.as_ref()?.condition(t).map(|c| {
        (
            c.status,
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        )
    })
}

/// The parts every BMC-booted test runs: sushy-tools, the stack, a Secret with `password` for
/// Machine `m1` (sushy's), Hardware `hw1` linked to it, Template `tpl`, the BMC controller and a
/// leading workflow controller.
struct Rig {
    sushy: Sushy,
    stack: Stack,
    bmc: BmcController,
    controller: Controller,
}

impl Rig {
    async fn start(password: &str) -> Rig {
        let sushy = Sushy::start().await.expect("sushy-emulator");
        let stack = Stack::start().await;
        bmc_secret(&stack, "bmc-creds", password).await;
        bmc_machine(&stack, "m1", &sushy.host(), "bmc-creds").await;
        hardware(&stack, "hw1", Some("m1")).await;
        stack.create_template("tpl", three_actions()).await;
        let bmc = BmcController::start(&stack, sushy.cert_pem());
        let controller = stack.leader("c0").await;
        Rig {
            sushy,
            stack,
            bmc,
            controller,
        }
    }

    async fn stop(self) {
        self.controller.stop().await;
        self.bmc.stop().await;
        self.stack.stop().await;
        drop(self.sushy);
    }
}

#[tokio::test]
async fn netboot_powers_the_machine_on_with_pxe_before_dispatch_and_turns_netboot_off_after_success()
 {
    let rig = Rig::start(BMC_PASSWORD).await;
    let (stack, sushy) = (&rig.stack, &rig.sushy);
    // The machine's agent is connected (it sits in an OSIE): still nothing is dispatched
    // before the BMC Job booted the machine.
    let mut agent = stack.agent(MAC).await;
    let emulator = redfish(sushy);
    assert_eq!(
        emulator.power_state().await.expect("power"),
        PowerState::Off
    );

    stack
        .create_workflow(
            "wf",
            "hw1",
            "tpl",
            json!({"bootOptions": {"toggleAllowNetboot": true, "bootMode": "netboot"}}),
        )
        .await;

    let (workflow_id, actions) =
        within("the StartWorkflow after the boot Job", agent.next_start()).await;
    // At dispatch the Job had completed: the emulator's machine is On and boots PXE once, and
    // netboot is allowed on the Hardware.
    let (target, _mode) = emulator.boot_override().await.expect("boot override");
    assert_eq!(target, "Pxe");
    assert_eq!(emulator.power_state().await.expect("power"), PowerState::On);
    assert!(!netboot_disabled(stack, "hw1").await);
    let w = stack.workflows().get("wf").await.expect("wf");
    let status = w.status.clone().expect("status");
    assert_eq!(status.state, WorkflowState::Scheduled);
    let job = &status.boot_options.jobs["netboot-wf"];
    assert!(job.complete && job.uid.is_some(), "{job:?}");
    assert!(status.boot_options.allow_netboot.toggled_true);
    let (s, reason, message) = condition(&w, ConditionType::BootPrepared).expect("BootPrepared");
    assert_eq!(
        (s, reason.as_str()),
        (ConditionStatus::True, "BootJobCompleted")
    );
    assert!(
        message.contains("power off, boot pxe, power on"),
        "{message}"
    );
    let jobs: Api<Job> = Api::namespaced(stack.client.clone(), NS);
    let j = jobs.get("netboot-wf").await.expect("the Job");
    assert_eq!(j.owner_references()[0].uid, w.uid().expect("uid"));
    assert_eq!(j.spec.machine_ref.name, "m1");
    assert!(j.status.as_ref().is_some_and(|s| s.has_condition(
        JobConditionType::Completed,
        tink_api::bmc::ConditionStatus::True
    )));

    agent.run_all(&workflow_id, &actions).await;
    stack.wait_state("wf", WorkflowState::Succeeded).await;
    // After success: netboot off, so the machine's next boot reaches its disk.
    let w = stack
        .wait_for("wf", "netboot disallowed after success", |w| {
            w.status
                .as_ref()
                .is_some_and(|s| s.boot_options.allow_netboot.toggled_false)
        })
        .await;
    assert!(netboot_disabled(stack, "hw1").await);
    let (s, reason, _) = condition(&w, ConditionType::NetbootAllowed).expect("NetbootAllowed");
    assert_eq!(
        (s, reason.as_str()),
        (ConditionStatus::False, "NetbootDisallowed")
    );
    assert_eq!(state_of(&w), WorkflowState::Succeeded);
    stack.wait_event("wf", "BootJobCompleted").await;
    stack.wait_event("wf", "NetbootDisallowed").await;

    rig.stop().await;
}

#[tokio::test]
async fn a_bmc_that_refuses_the_credentials_fails_the_workflow_before_any_dispatch() {
    let rig = Rig::start("not-the-password").await;
    let stack = &rig.stack;
    let mut agent = stack.agent(MAC).await;

    stack
        .create_workflow(
            "wf",
            "hw1",
            "tpl",
            json!({"bootOptions": {"bootMode": "netboot"}}),
        )
        .await;
    let w = stack.wait_state("wf", WorkflowState::Failed).await;
    let (_, reason, message) = condition(&w, ConditionType::Succeeded).expect("Succeeded");
    assert_eq!(reason, "BootJobFailed");
    assert!(message.contains("netboot-wf"), "{message}");
    // The provider's reason reaches the Workflow.
    assert!(
        message.contains("401")
            || message.to_lowercase().contains("unauthorized")
            || message.to_lowercase().contains("credentials"),
        "{message}"
    );
    let (s, reason, _) = condition(&w, ConditionType::BootPrepared).expect("BootPrepared");
    assert_eq!(
        (s, reason.as_str()),
        (ConditionStatus::False, "BootJobFailed")
    );
    assert!(
        agent.try_command(Duration::from_secs(2)).await.is_none(),
        "a Workflow whose machine did not boot is never dispatched"
    );
    stack.wait_event("wf", "BootJobFailed").await;

    rig.stop().await;
}

#[tokio::test]
async fn a_hardware_without_a_bmc_fails_a_workflow_that_needs_one() {
    let stack = Stack::start().await;
    hardware(&stack, "hw1", None).await;
    stack.create_template("tpl", three_actions()).await;
    let controller = stack.leader("c0").await;
    stack
        .create_workflow(
            "wf",
            "hw1",
            "tpl",
            json!({"bootOptions": {"toggleAllowNetboot": true, "bootMode": "netboot"}}),
        )
        .await;
    let w = stack.wait_state("wf", WorkflowState::Failed).await;
    let (_, reason, message) = condition(&w, ConditionType::Succeeded).expect("Succeeded");
    assert_eq!(reason, "NoBMC");
    assert!(message.contains("spec.bmcRef"), "{message}");
    // What was done before the failure is recorded with it.
    assert!(
        w.status
            .as_ref()
            .is_some_and(|s| s.boot_options.allow_netboot.toggled_true)
    );
    controller.stop().await;
    stack.stop().await;
}

/// Serves `body` for every request on loopback (sushy downloads the image it is given), and
/// counts the requests.
async fn serve_image(
    body: &'static [u8],
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(body).await;
            });
        }
    });
    (addr, count)
}

#[tokio::test]
async fn isoboot_inserts_the_iso_boots_the_cd_once_and_ejects_it_after_success() {
    let (images, downloads) = serve_image(b"an OSIE ISO").await;
    let iso_url = format!("http://{images}/iso/52-54-00-be-00-01/hook.iso");
    let rig = Rig::start(BMC_PASSWORD).await;
    let (stack, sushy) = (&rig.stack, &rig.sushy);
    let mut agent = stack.agent(MAC).await;
    let emulator = redfish(sushy);

    stack
        .create_workflow(
            "wf",
            "hw1",
            "tpl",
            json!({"bootOptions": {"bootMode": "isoboot", "isoURL": iso_url}}),
        )
        .await;
    let (workflow_id, actions) = within(
        "the StartWorkflow after the ISO boot Job",
        agent.next_start(),
    )
    .await;
    // Before dispatch: the ISO is inserted as a virtual CD, the CD boots once, the power is on.
    assert_eq!(
        emulator.media().await.expect("media"),
        (iso_url.clone(), true)
    );
    assert_eq!(emulator.boot_override().await.expect("override").0, "Cd");
    assert_eq!(emulator.power_state().await.expect("power"), PowerState::On);
    assert!(downloads.load(std::sync::atomic::Ordering::Relaxed) > 0);
    let w = stack.workflows().get("wf").await.expect("wf");
    assert!(
        w.status
            .as_ref()
            .is_some_and(|s| s.boot_options.jobs["iso-mount-wf"].complete)
    );

    agent.run_all(&workflow_id, &actions).await;
    stack.wait_state("wf", WorkflowState::Succeeded).await;
    // After success: ejected.
    let w = stack
        .wait_for("wf", "the ISO ejected after success", |w| {
            w.status.as_ref().is_some_and(|s| {
                s.boot_options
                    .jobs
                    .get("iso-eject-wf")
                    .is_some_and(|j| j.complete)
            })
        })
        .await;
    assert!(!emulator.media().await.expect("media").1, "ejected");
    let (s, reason, message) = condition(&w, ConditionType::BootFinished).expect("BootFinished");
    assert_eq!(
        (s, reason.as_str()),
        (ConditionStatus::True, "BootJobCompleted")
    );
    assert!(message.contains("virtual media eject"), "{message}");
    assert_eq!(state_of(&w), WorkflowState::Succeeded);

    rig.stop().await;
}

/// Someone else's Job under the step's name (an earlier Workflow of the same name left it) is
/// deleted, not followed; and a controller that takes over while the Workflow's own Job runs
/// follows that Job (same uid) instead of creating it again. The Job's completion is written as
/// the BMC controller writes it.
#[tokio::test]
async fn a_stale_job_of_the_same_name_is_replaced_and_a_new_leader_follows_the_running_one() {
    let stack = Stack::start().await;
    hardware(&stack, "hw1", Some("m1")).await;
    stack.create_template("tpl", three_actions()).await;
    let jobs: Api<Job> = Api::namespaced(stack.client.clone(), NS);
    let stale = tink_api::bmc::plan::Plan::power(tink_api::bmc::PowerAction::Cycle).job(NS, "m1");
    let mut stale = stale;
    stale.metadata.generate_name = None;
    stale.metadata.name = Some("netboot-wf".into());
    let stale = jobs
        .create(&PostParams::default(), &stale)
        .await
        .expect("the stale Job");
    let first = stack.leader("c0").await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow(
            "wf",
            "hw1",
            "tpl",
            json!({"bootOptions": {"bootMode": "netboot"}}),
        )
        .await;
    let w = stack
        .wait_for("wf", "its own netboot Job recorded", |w| {
            w.status
                .as_ref()
                .and_then(|s| s.boot_options.jobs.get("netboot-wf"))
                .is_some_and(|j| j.uid.is_some())
        })
        .await;
    let record = w.status.clone().expect("status").boot_options.jobs["netboot-wf"].clone();
    assert!(record.existing_job_deleted, "{record:?}");
    assert_ne!(record.uid, stale.uid(), "a new Job, not the stale one");
    let job = jobs.get("netboot-wf").await.expect("the Workflow's Job");
    assert_eq!(job.uid(), record.uid);
    assert_eq!(job.owner_references()[0].uid, w.uid().expect("uid"));
    assert_eq!(job.spec.tasks.len(), 3, "power off, PXE once, power on");

    // A new leader while the Job runs: it follows the same Job.
    first.kill().await;
    let second = stack.leader("c1").await;
    let done = json!({"status": {"conditions": [
        {"type": "Running", "status": "False"}, {"type": "Completed", "status": "True"}]}});
    jobs.patch_status(
        "netboot-wf",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&done),
    )
    .await
    .expect("the Job completes");
    within(
        "the StartWorkflow after the Job completed",
        agent.next_start(),
    )
    .await;
    let w = stack.workflows().get("wf").await.expect("wf");
    let after = w.status.expect("status").boot_options.jobs["netboot-wf"].clone();
    assert_eq!(
        after.uid, record.uid,
        "the running Job was followed, not created again"
    );
    assert!(after.complete);
    assert_eq!(jobs.get("netboot-wf").await.expect("job").uid(), record.uid);
    second.stop().await;
    stack.stop().await;
}
