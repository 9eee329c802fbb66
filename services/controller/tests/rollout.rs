//! Rollouts (WorkflowSets) end to end: kube-lite with the generated CRDs, real NATS, the real
//! tink-server, the controller in process, and agents simulated over the server's gRPC API.
//!
//! The concurrency limit is checked from a watch of the set's Workflows: the watch delivers
//! every write in resourceVersion order, so the count of unfinished Workflows after each event
//! is the count the API server held at that point.

mod common;

/// The auditing proxy and RBAC evaluator of tinkctl's end-to-end test (shared, not copied).
#[allow(dead_code)]
#[path = "../../../cli/tinkctl/tests/common/mod.rs"]
mod rbac;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use futures::StreamExt as _;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tink_api::v1alpha2::{
    ConditionStatus, Hardware, WORKFLOW_SET_LABEL, Workflow, WorkflowSet, WorkflowSetConditionType,
    WorkflowSetState, WorkflowState,
};
use tokio::sync::{Notify, watch};

fn mac(i: usize) -> String {
    format!("aa:bb:cc:00:{:02x}:{:02x}", i / 256, i % 256)
}

/// `n` approved Hardware labelled `rack=<rack>`, named `<rack>-mNN`; their MACs.
async fn rack(stack: &Stack, rack: &str, n: usize, first: usize) -> Vec<String> {
    let api: Api<Hardware> = Api::namespaced(stack.client.clone(), NS);
    let mut macs = Vec::new();
    for i in 0..n {
        let m = mac(first + i);
        let hw: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": format!("{rack}-m{i:02}"), "namespace": NS, "labels": {"rack": rack}},
            "spec": {
                "networkInterfaces": {&m: {"dhcp": {"ip": "10.0.0.2", "netmask": "255.255.255.0"}}},
                "storageDevices": ["/dev/sda"],
            },
        }))
        .expect("hardware");
        api.create(&PostParams::default(), &hw)
            .await
            .expect("create hardware");
        macs.push(m);
    }
    macs
}

fn sets(stack: &Stack) -> Api<WorkflowSet> {
    Api::namespaced(stack.client.clone(), NS)
}

async fn create_set(stack: &Stack, name: &str, rack: &str, extra: serde_json::Value) {
    let mut spec = json!({
        "hardwareSelector": {"matchLabels": {"rack": rack}},
        "templateRef": {"name": "install"},
        "templateData": {"image_server": "10.0.0.1:8080"},
        "maxConcurrent": 5,
    });
    if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    let set: WorkflowSet = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .expect("workflow set");
    sets(stack)
        .create(&PostParams::default(), &set)
        .await
        .expect("create workflow set");
}

async fn wait_set(
    stack: &Stack,
    name: &str,
    what: &str,
    done: impl Fn(&WorkflowSet) -> bool,
) -> WorkflowSet {
    let api = sets(stack);
    within(&format!("{name}: {what}"), async {
        loop {
            if let Ok(Some(s)) = api.get_opt(name).await
                && done(&s)
            {
                return s;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
}

fn state(s: &WorkflowSet) -> Option<WorkflowSetState> {
    s.status.as_ref().map(|s| s.state)
}

fn counts(s: &WorkflowSet) -> (i32, i32, i32, i32) {
    let st = s.status.clone().unwrap_or_default();
    (st.pending, st.running, st.succeeded, st.failed)
}

async fn set_workflows(stack: &Stack, set: &str) -> Vec<Workflow> {
    stack
        .workflows()
        .list(&ListParams::default().labels(&format!("{WORKFLOW_SET_LABEL}={set}")))
        .await
        .expect("list workflows")
        .items
}

/// Watches the set's Workflows and records the most unfinished at any point.
///
/// With backoff: once the API server is gone, a bare watcher's reconnects fail at once
/// (loopback refuses synchronously), so the task never yielded, could not be aborted, and the
/// runtime's shutdown waited for it for ever (a CI run hung here).
struct Observer {
    max: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    fn start(stack: &Stack, set: &str) -> Observer {
        let api = stack.workflows();
        let config = watcher::Config::default().labels(&format!("{WORKFLOW_SET_LABEL}={set}"));
        let (tx, rx) = watch::channel(0usize);
        let task = tokio::spawn(async move {
            let mut states: BTreeMap<String, WorkflowState> = BTreeMap::new();
            let mut stream = watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) => {
                        states.insert(w.name_any(), state_of(&w));
                    }
                    Ok(watcher::Event::Delete(w)) => {
                        states.remove(&w.name_any());
                    }
                    _ => continue,
                }
                let unfinished = states.values().filter(|s| !s.is_terminal()).count();
                tx.send_if_modified(|max| {
                    let more = unfinished > *max;
                    if more {
                        *max = unfinished;
                    }
                    more
                });
            }
        });
        Observer { max: rx, task }
    }

    fn max(&self) -> usize {
        *self.max.borrow()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How a simulated agent answers a StartWorkflow.
#[derive(Clone, Copy)]
enum Behaviour {
    Succeed,
    Fail,
}

/// Simulated agents, each running every Workflow it gets (after `gate` opens, when given).
fn run_agents(
    agents: Vec<Agent>,
    behaviour: Behaviour,
    gate: Option<Arc<Notify>>,
    started: Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    agents
        .into_iter()
        .map(|mut agent| {
            let (gate, started) = (gate.clone(), started.clone());
            tokio::spawn(async move {
                while let Some(cmd) = agent.next_command_forever().await {
                    let Command::Start {
                        workflow_id,
                        actions,
                        ..
                    } = cmd
                    else {
                        continue;
                    };
                    let actions: Vec<String> = actions.into_iter().map(|a| a.id).collect();
                    agent.received(&workflow_id).await;
                    agent.started(&workflow_id, &actions[0]).await;
                    started.fetch_add(1, Ordering::SeqCst);
                    if let Some(g) = &gate {
                        g.notified().await;
                    }
                    match behaviour {
                        Behaviour::Succeed => {
                            agent.succeeded(&workflow_id, &actions[0]).await;
                            agent.run_all(&workflow_id, &actions[1..]).await;
                        }
                        Behaviour::Fail => {
                            agent
                                .failed(&workflow_id, &actions[0], "DiskError", "no disk")
                                .await
                        }
                    }
                }
            })
        })
        .collect()
}

async fn connect_all(stack: &Stack, macs: &[String]) -> Vec<Agent> {
    let mut agents = Vec::new();
    for m in macs {
        agents.push(stack.agent(m).await);
    }
    agents
}

async fn set_event(stack: &Stack, set: &str, reason: &str) -> KubeEvent {
    let api: Api<KubeEvent> = Api::namespaced(stack.client.clone(), NS);
    within(&format!("an Event {reason} for {set}"), async {
        loop {
            let list = api.list(&ListParams::default()).await.expect("list events");
            if let Some(e) = list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("WorkflowSet")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(set)
            }) {
                return e;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_machines_five_at_a_time_all_succeed() {
    let stack = Stack::start().await;
    let _controller = stack.leader("c0").await;
    stack.create_template("install", three_actions()).await;
    let macs = rack(&stack, "r1", 30, 0).await;
    // A machine of another rack is not selected.
    rack(&stack, "r2", 1, 100).await;
    let agents = connect_all(&stack, &macs).await;
    let observer = Observer::start(&stack, "rack1");
    let started = Arc::new(AtomicUsize::new(0));
    let _agents = run_agents(agents, Behaviour::Succeed, None, started.clone());

    create_set(&stack, "rack1", "r1", json!({"maxConcurrent": 5})).await;
    let done = wait_set(&stack, "rack1", "Completed", |s| {
        state(s) == Some(WorkflowSetState::Completed)
    })
    .await;
    assert_eq!(counts(&done), (0, 0, 30, 0));
    let status = done.status.expect("status");
    assert_eq!(status.total, 30);
    assert_eq!(status.observed_generation, done.metadata.generation);
    let completed = status
        .condition(WorkflowSetConditionType::Completed)
        .expect("Completed condition");
    assert_eq!(completed.status, ConditionStatus::True);

    let wfs = set_workflows(&stack, "rack1").await;
    assert_eq!(wfs.len(), 30);
    for w in &wfs {
        assert_eq!(state_of(w), WorkflowState::Succeeded);
        let owner = &w.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("WorkflowSet", "rack1")
        );
        assert!(w.spec.hardware_ref.name.starts_with("r1-"));
        assert_eq!(w.name_any(), format!("rack1-{}", w.spec.hardware_ref.name));
    }
    assert_eq!(started.load(Ordering::SeqCst), 30);
    let max = observer.max();
    assert!(
        max <= 5,
        "{max} Workflows of the set were unfinished at once"
    );
    assert_eq!(max, 5, "the rollout used its concurrency");
    set_event(&stack, "rack1", "RolloutStarted").await;
    set_event(&stack, "rack1", "RolloutCompleted").await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_halt_the_rollout_at_the_budget() {
    let stack = Stack::start().await;
    let _controller = stack.leader("c0").await;
    stack.create_template("install", three_actions()).await;
    let macs = rack(&stack, "r1", 30, 0).await;
    let agents = connect_all(&stack, &macs).await;
    let observer = Observer::start(&stack, "rack1");
    let started = Arc::new(AtomicUsize::new(0));
    let _agents = run_agents(agents, Behaviour::Fail, None, started.clone());

    create_set(
        &stack,
        "rack1",
        "r1",
        json!({"maxConcurrent": 5, "maxFailures": 3}),
    )
    .await;
    let halted = wait_set(&stack, "rack1", "Halted", |s| {
        state(s) == Some(WorkflowSetState::Halted)
    })
    .await;
    let created_at_halt = set_workflows(&stack, "rack1").await.len();
    assert!(counts(&halted).3 >= 3);
    let cond = halted
        .status
        .as_ref()
        .and_then(|s| s.condition(WorkflowSetConditionType::Halted).cloned())
        .expect("Halted condition");
    assert_eq!(cond.status, ConditionStatus::True);
    assert_eq!(cond.reason.as_deref(), Some("FailureBudgetSpent"));
    assert!(
        cond.message
            .as_deref()
            .is_some_and(|m| m.contains("spec.maxFailures")),
        "{cond:?}"
    );

    // Those in flight finish (and fail); nothing new starts after the halt.
    let settled = wait_set(&stack, "rack1", "Halted with nothing running", |s| {
        state(s) == Some(WorkflowSetState::Halted) && counts(s).1 == 0
    })
    .await;
    let wfs = set_workflows(&stack, "rack1").await;
    assert_eq!(
        wfs.len(),
        created_at_halt,
        "no Workflow created after the halt"
    );
    assert!(wfs.iter().all(|w| state_of(w) == WorkflowState::Failed));
    let (pending, running, succeeded, failed) = counts(&settled);
    assert_eq!((running, succeeded), (0, 0));
    assert_eq!(usize::try_from(failed).ok(), Some(wfs.len()));
    assert_eq!(usize::try_from(pending).ok(), Some(30 - wfs.len()));
    assert!(observer.max() <= 5);
    set_event(&stack, "rack1", "RolloutHalted").await;

    // Raising the budget continues the rollout.
    sets(&stack)
        .patch(
            "rack1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxFailures": 100}})),
        )
        .await
        .expect("raise the budget");
    wait_set(&stack, "rack1", "more Workflows", |s| counts(s).0 < pending).await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_creations_and_resume_continues() {
    let stack = Stack::start().await;
    let _controller = stack.leader("c0").await;
    stack.create_template("install", three_actions()).await;
    let macs = rack(&stack, "r1", 4, 0).await;
    let agents = connect_all(&stack, &macs).await;
    let gate = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let _agents = run_agents(
        agents,
        Behaviour::Succeed,
        Some(gate.clone()),
        started.clone(),
    );

    // Created paused: nothing.
    create_set(
        &stack,
        "rack1",
        "r1",
        json!({"maxConcurrent": 2, "paused": true}),
    )
    .await;
    let paused = wait_set(&stack, "rack1", "Paused", |s| {
        state(s) == Some(WorkflowSetState::Paused)
    })
    .await;
    assert_eq!(counts(&paused), (4, 0, 0, 0));
    assert!(set_workflows(&stack, "rack1").await.is_empty());

    // Resumed: two start; paused again while they run: they finish, nothing new.
    let spec = |paused: bool| Patch::Merge(json!({"spec": {"paused": paused}}));
    sets(&stack)
        .patch("rack1", &PatchParams::default(), &spec(false))
        .await
        .expect("resume");
    within("two machines to start", async {
        while started.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    set_event(&stack, "rack1", "RolloutResumed").await;
    sets(&stack)
        .patch("rack1", &PatchParams::default(), &spec(true))
        .await
        .expect("pause");
    wait_set(&stack, "rack1", "Paused while running", |s| {
        state(s) == Some(WorkflowSetState::Paused)
    })
    .await;
    // Release the running machines.
    while started.load(Ordering::SeqCst) > 0
        && set_workflows(&stack, "rack1")
            .await
            .iter()
            .any(|w| !state_of(w).is_terminal())
    {
        gate.notify_waiters();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let settled = wait_set(&stack, "rack1", "Paused, two succeeded", |s| {
        counts(s) == (2, 0, 2, 0) && state(s) == Some(WorkflowSetState::Paused)
    })
    .await;
    assert_eq!(
        settled
            .status
            .as_ref()
            .and_then(|s| s.condition(WorkflowSetConditionType::Paused))
            .map(|c| c.status),
        Some(ConditionStatus::True)
    );
    assert_eq!(set_workflows(&stack, "rack1").await.len(), 2);
    assert_eq!(started.load(Ordering::SeqCst), 2);

    // Resumed: the rest run.
    sets(&stack)
        .patch("rack1", &PatchParams::default(), &spec(false))
        .await
        .expect("resume");
    within("the rest to run", async {
        loop {
            gate.notify_waiters();
            if let Ok(s) = sets(&stack).get("rack1").await
                && state(&s) == Some(WorkflowSetState::Completed)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let done = sets(&stack).get("rack1").await.expect("get");
    assert_eq!(counts(&done), (0, 0, 4, 0));
    set_event(&stack, "rack1", "RolloutPaused").await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_set_cancels_its_running_workflows() {
    let stack = Stack::start().await;
    // The controller runs as tink-controller behind an auditing proxy: every call it makes for
    // the rollout must be allowed by deploy/rbac.
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    stack
        .kube
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig");
    let audit = rbac::Audit::default();
    let url = rbac::start_proxy(kubeconfig, audit.clone()).await;
    let mut kc = kube::Config::new(url.parse().expect("proxy url"));
    kc.auth_info.token = Some("tink-controller".to_string().into());
    let proxied = kube::Client::try_from(kc).expect("client");
    let controller = stack
        .controller_with_client(stack.config("c0"), proxied)
        .await;
    controller.wait_leading().await;
    stack.create_template("install", three_actions()).await;
    let macs = rack(&stack, "r1", 5, 0).await;
    let mut agents = connect_all(&stack, &macs).await;
    create_set(&stack, "rack1", "r1", json!({"maxConcurrent": 3})).await;

    // Three machines get a Workflow and start it; the other two wait.
    let mut running = Vec::new();
    for agent in agents.iter_mut().take(3) {
        let (id, actions) = agent.next_start().await;
        agent.received(&id).await;
        agent.started(&id, &actions[0]).await;
        running.push(id);
    }
    wait_set(&stack, "rack1", "three running", |s| {
        counts(s) == (2, 3, 0, 0)
    })
    .await;
    for w in set_workflows(&stack, "rack1").await {
        stack
            .wait_state(&w.name_any(), WorkflowState::Running)
            .await;
    }

    sets(&stack)
        .delete("rack1", &DeleteParams::default())
        .await
        .expect("delete the set");
    // Each running machine is told to stop, confirms, and its Workflow goes.
    for (agent, id) in agents.iter_mut().zip(&running) {
        match agent.next_command().await {
            Command::Stop { workflow_id, .. } => assert_eq!(&workflow_id, id),
            other => panic!("expected a stop, got {other:?}"),
        }
        agent.canceled(id, None).await;
    }
    within("the set and its Workflows to be gone", async {
        loop {
            let gone = sets(&stack).get_opt("rack1").await.ok().flatten().is_none();
            if gone && set_workflows(&stack, "rack1").await.is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    // The two machines that were waiting never got anything.
    for agent in agents.iter_mut().skip(3) {
        assert!(
            agent
                .try_command(std::time::Duration::from_millis(500))
                .await
                .is_none(),
            "a machine of the deleted set got a command"
        );
    }
    controller.stop().await;
    let calls = audit.calls();
    let ours: Vec<_> = calls
        .iter()
        .filter(|c| c.user == "tink-controller")
        .collect();
    for (verb, resource, subresource) in [
        ("create", "workflows", ""),
        ("delete", "workflows", ""),
        ("list", "workflows", ""),
        ("patch", "workflowsets", ""),
        ("patch", "workflowsets", "status"),
    ] {
        assert!(
            ours.iter()
                .any(|c| c.verb == verb && c.resource == resource && c.subresource == subresource),
            "expected the controller to {verb} {resource} {subresource}: {ours:#?}"
        );
    }
    let docs = deploy_rbac();
    let denied: Vec<_> = ours
        .iter()
        .filter(|c| !rbac::allowed(&docs, &c.user, "tink-system", c))
        .collect();
    assert!(
        denied.is_empty(),
        "calls deploy/rbac does not allow: {denied:#?}"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unapproved_machines_get_no_workflow() {
    let stack = Stack::start().await;
    let _controller = stack.leader("c0").await;
    stack.create_template("install", three_actions()).await;
    rack(&stack, "r1", 2, 0).await;
    let api: Api<Hardware> = Api::namespaced(stack.client.clone(), NS);
    api.patch(
        "r1-m01",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"discovery": {"approved": false}}})),
    )
    .await
    .expect("unapprove");
    create_set(&stack, "rack1", "r1", json!({})).await;
    let s = wait_set(&stack, "rack1", "one running, one unapproved", |s| {
        s.status
            .as_ref()
            .is_some_and(|st| st.running == 1 && st.unapproved == 1)
    })
    .await;
    assert_eq!(s.status.expect("status").total, 1);
    let wfs = set_workflows(&stack, "rack1").await;
    assert_eq!(wfs.len(), 1);
    assert_eq!(wfs[0].spec.hardware_ref.name, "r1-m00");
    // Approved: it joins.
    api.patch(
        "r1-m01",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"discovery": {"approved": true}}})),
    )
    .await
    .expect("approve");
    wait_set(&stack, "rack1", "two running", |s| counts(s).1 == 2).await;
    stack.stop().await;
}

/// The controller's RBAC documents in deploy/rbac.
fn deploy_rbac() -> Vec<serde_json::Value> {
    use serde::Deserialize as _;
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rbac");
    let mut docs = Vec::new();
    for file in ["controller.yaml", "capi.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).expect("deploy/rbac");
        for d in serde_yaml::Deserializer::from_str(&text) {
            docs.push(serde_json::Value::deserialize(d).expect("yaml"));
        }
    }
    docs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_does_not_overshoot() {
    let stack = Stack::start().await;
    let first = stack.leader("c0").await;
    stack.create_template("install", three_actions()).await;
    let macs = rack(&stack, "r1", 10, 0).await;
    let agents = connect_all(&stack, &macs).await;
    let observer = Observer::start(&stack, "rack1");
    let gate = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let _agents = run_agents(
        agents,
        Behaviour::Succeed,
        Some(gate.clone()),
        started.clone(),
    );
    create_set(&stack, "rack1", "r1", json!({"maxConcurrent": 3})).await;
    within("three machines to start", async {
        while started.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    // The leader dies mid-rollout; a new one starts with empty caches and takes over.
    first.kill().await;
    let _second = stack.leader("c1").await;
    within("the rollout to complete under the new leader", async {
        loop {
            gate.notify_waiters();
            if let Ok(s) = sets(&stack).get("rack1").await
                && state(&s) == Some(WorkflowSetState::Completed)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let done = sets(&stack).get("rack1").await.expect("get");
    assert_eq!(counts(&done), (0, 0, 10, 0));
    assert_eq!(set_workflows(&stack, "rack1").await.len(), 10);
    let max = observer.max();
    assert!(
        max <= 3,
        "{max} Workflows of the set were unfinished at once"
    );
    stack.stop().await;
}

/// A machine relabelled out of a set's selector leaves it, and one relabelled in joins it: a
/// Hardware change wakes the sets that select it now or did before, not only the former.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_relabelled_in_and_out_are_counted() {
    let stack = Stack::start().await;
    let _controller = stack.leader("c0").await;
    stack.create_template("install", three_actions()).await;
    rack(&stack, "r1", 3, 0).await;
    rack(&stack, "r2", 1, 100).await;
    create_set(&stack, "rack1", "r1", json!({"paused": true})).await;
    wait_set(&stack, "rack1", "3 machines", |s| {
        s.status.as_ref().is_some_and(|st| st.total == 3)
    })
    .await;

    let hardware: Api<Hardware> = Api::namespaced(stack.client.clone(), NS);
    let relabel = |name: &'static str, rack: &'static str| {
        let hardware = hardware.clone();
        async move {
            hardware
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"rack": rack}}})),
                )
                .await
                .expect("relabel");
        }
    };
    relabel("r1-m00", "r2").await;
    wait_set(&stack, "rack1", "2 machines after one left", |s| {
        s.status.as_ref().is_some_and(|st| st.total == 2)
    })
    .await;
    relabel("r2-m00", "r1").await;
    let set = wait_set(&stack, "rack1", "3 machines after one joined", |s| {
        s.status.as_ref().is_some_and(|st| st.total == 3)
    })
    .await;
    assert_eq!(counts(&set), (3, 0, 0, 0));
    assert!(set_workflows(&stack, "rack1").await.is_empty(), "paused");
    stack.stop().await;
}
