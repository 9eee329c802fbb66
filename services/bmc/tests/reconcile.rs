//! The BMC controller against real peers: kube-lite as the API server, sushy-tools (Redfish over
//! TLS with checked credentials) and OpenIPMI's ipmi_sim (IPMI over lanplus, with ipmitool).

mod common;

use common::*;
use k8s_openapi::api::core::v1::SecretReference;
use kube::ResourceExt as _;
use tink_api::bmc::{
    Action, BootDevice, ConditionStatus, Machine, MachineRef, OneTimeBootDeviceAction, PowerAction,
    PowerState, TaskConditionType,
};
use tink_testkit::bmc::{BMC_PASSWORD, BMC_USER, IpmiSim, SilentListener, Sushy};

fn pxe_once() -> Action {
    Action {
        one_time_boot_device_action: Some(OneTimeBootDeviceAction {
            devices: vec![BootDevice::Pxe],
            efi_boot: true,
        }),
        ..Action::default()
    }
}

#[tokio::test]
async fn redfish_power_state_is_polled_and_a_job_runs_its_tasks_in_order() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    let stack = Stack::start().await;
    stack.basic_auth(NS, "bmc", BMC_USER, BMC_PASSWORD).await;
    stack.machine("m1", redfish(&sushy.host(), "bmc")).await;
    let mut config = stack.config("r1");
    config.ca_pem = Some(sushy.cert_pem().to_vec());
    let controller = stack.start_controller(config);
    controller.wait_ready().await;

    // The poll finds the emulator's machine off and the BMC contactable.
    stack.machine_state("m1", PowerState::Off).await;

    stack
        .job(
            "pxe-boot",
            "m1",
            vec![pxe_once(), Action::power(PowerAction::Cycle)],
        )
        .await;
    let job = stack.finished_job(NS, "pxe-boot").await;
    assert!(is_completed(&job), "{:?}", job.status);
    let status = job.status.clone().expect("status");
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    // Each task a child Task named as Rufio names them, owned by the Job, completed in order.
    let t0 = stack.tasks().get("pxe-boot-task-0").await.expect("task 0");
    let t1 = stack.tasks().get("pxe-boot-task-1").await.expect("task 1");
    for t in [&t0, &t1] {
        let s = t.status.clone().expect("task status");
        assert!(s.has_condition(TaskConditionType::Completed, ConditionStatus::True));
        assert_eq!(t.owner_references()[0].uid, job.uid().expect("uid"));
    }
    assert!(
        t0.status.as_ref().and_then(|s| s.completion_time.clone())
            <= t1.status.as_ref().and_then(|s| s.start_time.clone()),
        "task 1 started after task 0 completed"
    );
    // A cycle of an off machine powers it on; the Machine shows it at once (not at the next
    // poll: the poll period is 2 s, the Job's own write comes first).
    stack.machine_state("m1", PowerState::On).await;
    let events = stack.events_of("pxe-boot").await;
    let reasons: Vec<&str> = events.iter().map(|(r, _)| r.as_str()).collect();
    assert!(
        reasons.contains(&"Started") && reasons.contains(&"Completed"),
        "{events:?}"
    );
    // The Event follows the status write.
    eventually("the Machine's PoweredOn Event", || async {
        stack
            .events_of("m1")
            .await
            .iter()
            .any(|(r, n)| r == "PoweredOn" && n.contains("off -> on"))
            .then_some(())
    })
    .await;

    // Power on again: read first, nothing sent, completed at once.
    stack
        .job("on-again", "m1", vec![Action::power(PowerAction::On)])
        .await;
    let job = stack.finished_job(NS, "on-again").await;
    assert!(is_completed(&job), "{:?}", job.status);
    let note = stack.events_of("on-again-task-0").await;
    assert!(
        note.iter().any(|(_, n)| n.contains("already on")),
        "{note:?}"
    );
    assert!(controller.metrics.ops_of("set_power", "cycle", "ok") == 1);
    assert_eq!(
        controller.metrics.ops_of("set_power", "on", "ok"),
        0,
        "no power on was sent"
    );

    // Off: the Task completes only once the BMC reports off.
    stack
        .job("off", "m1", vec![Action::power(PowerAction::Off)])
        .await;
    assert!(is_completed(&stack.finished_job(NS, "off").await));
    stack.machine_state("m1", PowerState::Off).await;
    controller.stop().await;
}

#[tokio::test]
async fn bad_credentials_unreachable_and_hung_bmcs_give_clear_conditions() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    let silent = SilentListener::start().await.expect("silent listener");
    let stack = Stack::start().await;
    stack
        .basic_auth(NS, "wrong", BMC_USER, "not-the-password")
        .await;
    stack.basic_auth(NS, "bmc", BMC_USER, BMC_PASSWORD).await;
    stack
        .basic_auth("other", "theirs", BMC_USER, BMC_PASSWORD)
        .await;
    stack
        .secret(NS, "opaque", None, BMC_USER, BMC_PASSWORD)
        .await;
    stack
        .machine("wrong-password", redfish(&sushy.host(), "wrong"))
        .await;
    stack
        .machine("hung", redfish(&silent.addr().to_string(), "bmc"))
        .await;
    // Nothing listens on port 1.
    stack
        .machine("refused", redfish("127.0.0.1:1", "bmc"))
        .await;
    let mut elsewhere = redfish(&sushy.host(), "theirs");
    elsewhere.auth_secret_ref = SecretReference {
        name: Some("theirs".into()),
        namespace: Some("other".into()),
    };
    stack.machine("other-namespace", elsewhere).await;
    stack
        .machine("opaque", redfish(&sushy.host(), "opaque"))
        .await;
    stack
        .machine("no-secret", redfish(&sushy.host(), "missing"))
        .await;
    let mut config = stack.config("r1");
    config.ca_pem = Some(sushy.cert_pem().to_vec());
    let controller = stack.start_controller(config);
    controller.wait_ready().await;

    let m = stack.unreachable("wrong-password").await;
    assert!(m.contains("credentials refused"), "{m}");
    assert!(!m.contains("not-the-password"), "the password leaked: {m}");
    let m = stack.unreachable("hung").await;
    assert!(m.contains("no answer within"), "{m}");
    let m = stack.unreachable("refused").await;
    assert!(m.contains("cannot connect"), "{m}");
    let m = stack.unreachable("other-namespace").await;
    assert!(m.contains("not in the Machine's namespace machines"), "{m}");
    let m = stack.unreachable("opaque").await;
    assert!(m.contains("kubernetes.io/basic-auth"), "{m}");
    let m = stack.unreachable("no-secret").await;
    assert!(
        m.contains("spec.connection.authSecretRef") && m.contains("not found"),
        "{m}"
    );
    let events = stack.events_of("wrong-password").await;
    assert!(events.iter().any(|(r, _)| r == "Unreachable"), "{events:?}");
    let state = stack
        .machines()
        .get("hung")
        .await
        .expect("machine")
        .status
        .and_then(|s| s.power);
    assert_eq!(state, Some(PowerState::Unknown));

    // A Job against a BMC that hangs fails with the provider's error; the reconciler is not hung:
    // the next Job on another Machine still runs.
    stack
        .job("hung-job", "hung", vec![Action::power(PowerAction::On)])
        .await;
    let job = stack.finished_job(NS, "hung-job").await;
    let why = failure(&job).expect("failed");
    assert!(why.contains("no answer within"), "{why}");
    stack
        .job(
            "wrong-job",
            "wrong-password",
            vec![Action::power(PowerAction::Off)],
        )
        .await;
    let why = failure(&stack.finished_job(NS, "wrong-job").await).expect("failed");
    assert!(why.contains("credentials refused"), "{why}");
    controller.stop().await;
}

#[tokio::test]
async fn jobs_for_one_machine_run_one_at_a_time_and_a_job_may_not_reach_another_namespace() {
    let sim = IpmiSim::start().await.expect("ipmi_sim");
    let stack = Stack::start().await;
    stack.basic_auth(NS, "bmc", BMC_USER, BMC_PASSWORD).await;
    stack.machine("m1", ipmi(sim.port(), "bmc")).await;
    let controller = stack.start_controller(stack.config("r1"));
    controller.wait_ready().await;
    stack.machine_state("m1", PowerState::Off).await;

    stack
        .job(
            "first",
            "m1",
            vec![
                Action::power(PowerAction::On),
                Action::power(PowerAction::Off),
            ],
        )
        .await;
    stack
        .job("second", "m1", vec![Action::power(PowerAction::On)])
        .await;
    let first = stack.finished_job(NS, "first").await;
    let second = stack.finished_job(NS, "second").await;
    assert!(is_completed(&first) && is_completed(&second));
    let done = first
        .status
        .and_then(|s| s.completion_time)
        .expect("completion");
    let began = second.status.and_then(|s| s.start_time).expect("start");
    assert!(
        began >= done,
        "the second Job began at {began:?}, before the first ended at {done:?}"
    );
    // The simulator saw the three changes, in order, each once.
    assert_eq!(
        sim.requests(),
        ["power=1", "power=0", "power=1"],
        "{:?}",
        sim.requests()
    );
    stack.machine_state("m1", PowerState::On).await;

    // A Job in another namespace naming this Machine: refused, nothing sent.
    let job = stack
        .job_in(
            "intruder",
            "reach-across",
            MachineRef {
                name: "m1".into(),
                namespace: NS.into(),
            },
            vec![Action::power(PowerAction::Off)],
        )
        .await;
    let job = stack.finished_job("intruder", &job.name_any()).await;
    let why = failure(&job).expect("failed");
    assert!(
        why.contains("may only drive a Machine in its own namespace"),
        "{why}"
    );
    // A Job whose Machine does not exist fails clearly.
    stack
        .job(
            "ghost",
            "no-such-machine",
            vec![Action::power(PowerAction::On)],
        )
        .await;
    let why = failure(&stack.finished_job(NS, "ghost").await).expect("failed");
    assert!(
        why.contains("Machine machines/no-such-machine not found"),
        "{why}"
    );
    assert_eq!(sim.requests().len(), 3, "{:?}", sim.requests());
    controller.stop().await;
}

#[tokio::test]
async fn a_job_whose_machine_is_deleted_mid_run_fails() {
    let silent = SilentListener::start().await.expect("silent listener");
    let stack = Stack::start().await;
    stack.basic_auth(NS, "bmc", BMC_USER, BMC_PASSWORD).await;
    // A BMC that never answers keeps the first task running for a while (3 s per attempt).
    stack
        .machine("doomed", redfish(&silent.addr().to_string(), "bmc"))
        .await;
    let controller = stack.start_controller(stack.config("r1"));
    controller.wait_ready().await;
    stack
        .job(
            "mid-run",
            "doomed",
            vec![
                Action::power(PowerAction::On),
                Action::power(PowerAction::Off),
            ],
        )
        .await;
    eventually("the first Task to exist", || {
        let api = stack.tasks();
        async move { api.get_opt("mid-run-task-0").await.ok().flatten() }
    })
    .await;
    stack
        .machines()
        .delete("doomed", &Default::default())
        .await
        .expect("delete Machine");
    let job = stack.finished_job(NS, "mid-run").await;
    let why = failure(&job).expect("failed");
    // Either the Job saw its Machine gone, or the running task's BMC call failed first.
    assert!(
        why.contains("Machine machines/doomed not found") || why.contains("no answer within"),
        "{why}"
    );
    assert!(
        stack
            .tasks()
            .get_opt("mid-run-task-1")
            .await
            .expect("get")
            .is_none()
    );
    controller.stop().await;
}

#[tokio::test]
async fn a_controller_killed_mid_job_never_repeats_a_power_action() {
    let sim = IpmiSim::start().await.expect("ipmi_sim");
    let stack = Stack::start().await;
    stack.basic_auth(NS, "bmc", BMC_USER, BMC_PASSWORD).await;
    stack.machine("m1", ipmi(sim.port(), "bmc")).await;

    // A Task whose sending a crashed controller began (startTime written) but never recorded
    // as accepted: a cycle is not repeated blindly.
    let interrupted = |name: &str, action: PowerAction| {
        let mut t = tink_api::bmc::Task::new(
            name,
            tink_api::bmc::TaskSpec {
                task: Action::power(action),
                connection: Some(ipmi(sim.port(), "bmc")),
            },
        );
        t.metadata.namespace = Some(NS.into());
        t
    };
    let tasks = stack.tasks();
    for (name, action) in [
        ("cycle-interrupted", PowerAction::Cycle),
        ("off-interrupted", PowerAction::Off),
    ] {
        tasks
            .create(&Default::default(), &interrupted(name, action))
            .await
            .expect("create Task");
        let started = serde_json::json!({ "status": { "startTime": "2026-01-01T00:00:00Z" } });
        tasks
            .patch_status(name, &Default::default(), &kube::api::Patch::Merge(started))
            .await
            .expect("startTime");
    }
    let controller = stack.start_controller(stack.config("r1"));
    controller.wait_ready().await;
    let task = eventually("the interrupted cycle to be judged", || {
        let api = stack.tasks();
        async move {
            let t = api.get("cycle-interrupted").await.ok()?;
            t.status.as_ref().filter(|s| !s.conditions.is_empty())?;
            Some(t)
        }
    })
    .await;
    let failed = task.status.expect("status").conditions;
    assert_eq!(failed[0].type_, TaskConditionType::Failed);
    assert!(
        failed[0].message.contains("not repeated blindly"),
        "{}",
        failed[0].message
    );
    // The off: idempotent, so the state was read again (off already) and it completed; nothing
    // was sent for either.
    let off = eventually("the interrupted off to complete", || {
        let api = stack.tasks();
        async move {
            let t = api.get("off-interrupted").await.ok()?;
            t.status.as_ref().filter(|s| !s.conditions.is_empty())?;
            Some(t)
        }
    })
    .await;
    assert!(
        off.status
            .expect("status")
            .has_condition(TaskConditionType::Completed, ConditionStatus::True)
    );
    assert!(sim.requests().is_empty(), "{:?}", sim.requests());

    // Now a real Job, and the controller killed right after the BMC accepted the cycle.
    stack
        .job(
            "cycle",
            "m1",
            vec![
                Action::power(PowerAction::On),
                Action::power(PowerAction::Cycle),
            ],
        )
        .await;
    eventually("the cycle to be accepted", || {
        let api = stack.tasks();
        async move {
            let t = api.get_opt("cycle-task-1").await.ok().flatten()?;
            t.annotations()
                .contains_key(tink_bmc_controller::task::SENT_ANNOTATION)
                .then_some(())
        }
    })
    .await;
    controller.kill();
    let second = stack.start_controller(stack.config("r2"));
    second.wait_ready().await;
    let job = stack.finished_job(NS, "cycle").await;
    assert!(is_completed(&job), "{:?}", job.status);
    // on, then one cycle (off, on): the second controller only waited for the target state.
    assert_eq!(
        sim.requests(),
        ["power=1", "power=0", "power=1"],
        "{:?}",
        sim.requests()
    );
    let m: Machine = stack.machine_state("m1", PowerState::On).await;
    assert_eq!(m.name_any(), "m1");
    second.stop().await;
}

#[tokio::test]
async fn a_machine_outside_the_allowed_networks_is_never_contacted() {
    let sim = IpmiSim::start().await.expect("ipmi_sim");
    let stack = Stack::start().await;
    stack.basic_auth(NS, "bmc", BMC_USER, BMC_PASSWORD).await;
    stack.machine("m1", ipmi(sim.port(), "bmc")).await;
    let mut config = stack.config("r1");
    config.policy.allowed_networks = tink_bmc::net::parse_networks("10.0.0.0/8").expect("nets");
    let controller = stack.start_controller(config);
    controller.wait_ready().await;
    let m = stack.unreachable("m1").await;
    assert!(m.contains("10.0.0.0/8") && m.contains("127.0.0.1"), "{m}");
    stack
        .job("j", "m1", vec![Action::power(PowerAction::On)])
        .await;
    let why = failure(&stack.finished_job(NS, "j").await).expect("failed");
    assert!(why.contains("10.0.0.0/8"), "{why}");
    assert!(sim.requests().is_empty(), "{:?}", sim.requests());
    controller.stop().await;
}
