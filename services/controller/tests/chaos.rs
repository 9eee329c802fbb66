//! Chaos: 200 three-action workflows on 50 simulated agents while server replicas and the
//! leading controller are SIGKILLed, all controllers stay down longer than every
//! de-duplication window, NATS restarts and one agent process is killed mid-workflow and
//! started again. Every Workflow must reach the right end state and no dispatch may be
//! executed twice (the agents count executions).
//!
//! Server replicas and controllers are real processes (this test binary re-executed with
//! `TINK_CHAOS_ROLE`, running `tink_server::serve` or `tink_controller::run`), so a kill is a
//! real SIGKILL: no cleanup, no released Lease, no handed-back commands. kube-lite, NATS and one
//! stable server replica run in the test process; the agents are simulated over real gRPC and
//! follow the agent's rules (receipt confirmed before any action, a dispatch run at most once
//! per process, events retried across servers until confirmed).
//!
//! `TINK_CHAOS_WORKFLOWS` / `TINK_CHAOS_AGENTS` change the size (defaults 200 and 50).
//!
//! The run keeps a history (tink-history's JSON lines: every StartWorkflow received and
//! executed, every event acknowledged, every status write from a watch, every Lease term, every
//! fault) in `TINK_CHAOS_HISTORY` or the target's tmp directory, and the checker's verdict on it
//! must be clean: no execution twice, no wrong end state, no acknowledged event lost, no
//! overlapping terms.

mod common;
#[path = "common/sim_agent.rs"]
mod sim_agent;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use sim_agent::*;
use tink_api::v1alpha2::WorkflowState;
use tink_history::{Record, Recorder};
use tokio_util::sync::CancellationToken;

const ROLE: &str = "TINK_CHAOS_ROLE";

/// How long each simulated action runs: long enough that every fault hits workflows in flight.
const ACTION_TIME: Duration = Duration::from_millis(800);

fn chaos_bus() -> tink_bus::BusConfig {
    tink_bus::BusConfig {
        receipt_timeout: Duration::from_secs(3),
        ..bus_config()
    }
}

/// In a child process: runs the role it was started for until killed. In the test run itself
/// it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is set"));
    let nats = var("TINK_CHAOS_NATS");
    let id = var("TINK_CHAOS_ID");
    match role.as_str() {
        "server" => {
            let listener = tokio::net::TcpListener::bind(var("TINK_CHAOS_LISTEN"))
                .await
                .expect("bind");
            let mut config = tink_server::ServerConfig::new(nats, id);
            config.bus = chaos_bus();
            config.nats_auth = nats_auth("tink-server");
            tink_server::serve(
                config,
                listener,
                tink_runtime::Health::new(),
                tink_server::Metrics::default(),
                CancellationToken::new(),
            )
            .await
            .expect("serves");
        }
        "controller" => {
            let url = var("TINK_CHAOS_KUBE").parse().expect("kube url");
            let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
            let mut config = controller_config(&nats, &id);
            config.bus = chaos_bus();
            tink_controller::run(
                config,
                client,
                tink_runtime::Health::new(),
                tink_controller::Metrics::default(),
                CancellationToken::new(),
            )
            .await
            .expect("runs");
        }
        other => panic!("unknown role {other}"),
    }
}

fn controller_config(nats: &str, id: &str) -> tink_controller::ControllerConfig {
    let mut c = tink_controller::ControllerConfig::new(nats, id);
    c.nats_auth = nats_auth("tink-controller");
    c.namespace = Some(NS.into());
    c.events_ack_wait = Duration::from_secs(2);
    c.workflow.backoff_base = Duration::from_millis(300);
    c.workflow.backoff_max = Duration::from_secs(2);
    c.resync_period = Duration::from_secs(10);
    c.lease = tink_controller::LeaseConfig {
        namespace: "tink-system".into(),
        name: "tink-controller".into(),
        duration: Duration::from_secs(3),
        renew_period: Duration::from_millis(500),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    };
    c
}

/// A child process in a role; SIGKILLed on drop.
struct Child {
    child: tokio::process::Child,
}

impl Child {
    fn spawn(role: &str, id: &str, env: &[(&str, String)]) -> Child {
        let exe = std::env::current_exe().expect("test binary");
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(["--exact", "chaos_role", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env("TINK_CHAOS_ID", id)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Child {
            child: cmd.spawn().expect("child starts"),
        }
    }

    async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_every_workflow_ends_right_and_no_dispatch_runs_twice() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let workflows = env_usize("TINK_CHAOS_WORKFLOWS", 200);
    let agents = env_usize("TINK_CHAOS_AGENTS", 50);
    let mut stack = Stack::start().await;
    let nats = stack.nats.url();
    let kube = stack.kube.url();
    let began = Instant::now();
    let history_path = std::env::var_os("TINK_CHAOS_HISTORY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("chaos-history.jsonl")
        });
    let history = Arc::new(
        Recorder::create(
            &history_path,
            0,
            "services/controller/tests/chaos.rs (a fixed schedule)",
        )
        .expect("the history file"),
    );
    eprintln!("chaos: history in {}", history_path.display());
    let (status_task, term_task) = record_api(stack.client.clone(), history.clone());
    let fault = |kind: &str, target: &str, what: String| {
        let at = history.now();
        eprintln!("FAULT kind={kind} target={target} at={at:.1} ({what})");
        record(
            &history,
            Record::Fault {
                t: at,
                fault: kind.into(),
                target: target.into(),
            },
        );
    };

    // Two killable server replicas beside the stack's own.
    let servers = Servers::default();
    let mut server_procs: Vec<(SocketAddr, Child)> = Vec::new();
    let mut server_n = 0;
    let spawn_server = |server_n: &mut usize| {
        *server_n += 1;
        let addr = free_addr();
        let child = Child::spawn(
            "server",
            &format!("server-{server_n}"),
            &[
                ("TINK_CHAOS_NATS", nats.clone()),
                ("TINK_CHAOS_LISTEN", addr.to_string()),
            ],
        );
        (addr, child)
    };
    for _ in 0..2 {
        server_procs.push(spawn_server(&mut server_n));
    }
    let publish_servers = |procs: &[(SocketAddr, Child)]| {
        let mut list = vec![stack.server_addr];
        list.extend(procs.iter().map(|(a, _)| *a));
        list
    };
    servers.set(publish_servers(&server_procs));

    let mut controller_n = 0;
    let spawn_controller = |controller_n: &mut usize| {
        *controller_n += 1;
        Child::spawn(
            "controller",
            &format!("controller-{controller_n}"),
            &[
                ("TINK_CHAOS_NATS", nats.clone()),
                ("TINK_CHAOS_KUBE", kube.clone()),
            ],
        )
    };
    let mut controllers: HashMap<String, Child> = HashMap::new();
    for _ in 0..2 {
        let c = spawn_controller(&mut controller_n);
        controllers.insert(format!("controller-{controller_n}"), c);
    }

    stack
        .create_template(
            "three",
            json!([
                {"name": "one", "image": "busybox"},
                {"name": "two", "image": "busybox"},
                {"name": "three", "image": "busybox"},
            ]),
        )
        .await;
    let executions: Executions = Arc::default();
    let mut agent_tasks = Vec::new();
    let mut running = Vec::new();
    for i in 0..agents {
        let mac = format!("aa:bb:cc:00:{:02x}:{:02x}", i / 256, i % 256);
        stack.create_hardware(&format!("m{i}"), &mac).await;
        let r = Arc::new(Mutex::new(None));
        running.push(r.clone());
        let agent = SimAgent {
            running: r,
            ..SimAgent::new(mac, &servers, &executions, &history, ACTION_TIME)
        };
        agent_tasks.push(tokio::spawn(agent.run()));
    }
    for j in 0..workflows {
        stack
            .create_workflow(
                &format!("wf{j:04}"),
                &format!("m{}", j % agents),
                "three",
                json!({}),
            )
            .await;
    }
    eprintln!(
        "chaos: created {workflows} workflows on {agents} agents; 2 controller processes, 3 server replicas"
    );

    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(stack.client.clone(), "tink-system");
    let holder = || async {
        leases
            .get_opt("tink-controller")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };

    let api = stack.workflows();
    let unfinished = || async {
        let list = api.list(&Default::default()).await.expect("list");
        list.items
            .iter()
            .filter(|w| !state_of(w).is_terminal())
            .count()
    };

    let mut killed_dispatch: Option<String> = None;
    let mut step = 0u32;
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut server_kills = 0;
    let (mut leader_kills, mut outages, mut nats_restarts, mut agent_restarts) = (0, 0, 0, 0);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        step += 1;
        // Every 3 s a server replica is SIGKILLed and replaced.
        if step.is_multiple_of(3) && step <= 24 {
            let (addr, child) = server_procs.remove(0);
            child.kill().await;
            server_kills += 1;
            fault(
                "kill-server",
                &addr.to_string(),
                format!("SIGKILL server replica at {addr}"),
            );
            server_procs.push(spawn_server(&mut server_n));
            servers.set(publish_servers(&server_procs));
        }
        // An agent process dies mid-workflow and starts again (a new instance).
        let busy = (0..agents).find(|i| running[*i].lock().unwrap().is_some());
        if step >= 4 && agent_restarts == 0 && busy.is_some() {
            let victim = busy.unwrap_or(0);
            let dispatch = running[victim].lock().unwrap().clone();
            agent_tasks[victim].abort();
            killed_dispatch = dispatch.clone();
            agent_restarts += 1;
            fault(
                "restart-agent",
                &format!("m{victim}"),
                format!("killed agent m{victim} while running {dispatch:?}; started it again"),
            );
            let mac = format!("aa:bb:cc:00:{:02x}:{:02x}", victim / 256, victim % 256);
            let agent = SimAgent {
                running: running[victim].clone(),
                ..SimAgent::new(mac, &servers, &executions, &history, ACTION_TIME)
            };
            *running[victim].lock().unwrap() = None;
            agent_tasks[victim] = tokio::spawn(agent.run());
        }
        // The leader is SIGKILLed; the standby takes over.
        if step == 6 {
            if let Some(leader) = holder().await
                && let Some(child) = controllers.remove(&leader)
            {
                child.kill().await;
                leader_kills += 1;
                let what = format!(
                    "SIGKILL the leader {leader}; {} workflows unfinished",
                    unfinished().await
                );
                fault("kill-controller-leader", &leader, what);
            }
            let c = spawn_controller(&mut controller_n);
            controllers.insert(format!("controller-{controller_n}"), c);
        }
        // Every controller down for longer than the duplicate window (3 s) and the Lease.
        if step == 10 {
            for (_, child) in controllers.drain() {
                child.kill().await;
            }
            outages += 1;
            let what = format!(
                "SIGKILL every controller (outage of 7 s); {} workflows unfinished",
                unfinished().await
            );
            fault("kill-controllers", "all", what);
        }
        if step == 13 {
            stack.nats.restart().await.expect("nats restarts");
            nats_restarts += 1;
            fault("restart-nats", "nats", "NATS restarted".into());
        }
        if step == 17 {
            for _ in 0..2 {
                let c = spawn_controller(&mut controller_n);
                controllers.insert(format!("controller-{controller_n}"), c);
            }
            eprintln!("chaos: two controllers started again");
        }
        if step > 24 && unfinished().await == 0 {
            break;
        }
        if Instant::now() > deadline {
            let list = api.list(&Default::default()).await.expect("list");
            let stuck: Vec<String> = list
                .items
                .iter()
                .filter(|w| !state_of(w).is_terminal())
                .map(|w| format!("{}={:?}", kube::ResourceExt::name_any(w), state_of(w)))
                .collect();
            panic!("workflows not finished by the deadline: {stuck:?}");
        }
    }
    let elapsed = began.elapsed();
    for t in &agent_tasks {
        t.abort();
    }

    // The verdicts.
    let list = api.list(&Default::default()).await.expect("list");
    let killed_name = killed_dispatch
        .as_deref()
        .and_then(|d| tink_workflow::DispatchId::parse(d).ok())
        .map(|d| d.key().name.clone());
    let mut states: HashMap<String, usize> = HashMap::new();
    for w in &list.items {
        let name = kube::ResourceExt::name_any(w);
        let state = state_of(w);
        *states
            .entry(format!("{state:?}/{}", reason(w).unwrap_or_default()))
            .or_default() += 1;
        if Some(&name) == killed_name.as_ref() {
            assert!(
                state == WorkflowState::Succeeded
                    || (state == WorkflowState::Failed
                        && reason(w).as_deref() == Some("AgentRestarted")),
                "{name} (its agent was killed): {state:?} {:?}",
                reason(w)
            );
        } else {
            assert_eq!(
                state,
                WorkflowState::Succeeded,
                "{name}: {:?} {:?}",
                reason(w),
                w.status.as_ref().map(|s| &s.conditions)
            );
        }
    }
    // The history's verdict: every Workflow but the killed agent's must have Succeeded (that
    // one may also end AgentRestarted: whether its events beat the new instance is a race).
    for w in &list.items {
        let name = kube::ResourceExt::name_any(w);
        if Some(&name) != killed_name.as_ref() {
            record(
                &history,
                Record::Expect {
                    workflow: name,
                    state: "Succeeded".into(),
                    reason: None,
                },
            );
        }
    }
    // The watch has delivered every write by now (nothing is unfinished, and the last writes
    // are seconds old): stop recording and check.
    tokio::time::sleep(Duration::from_secs(1)).await;
    status_task.abort();
    term_task.abort();
    history.flush().expect("the history is flushed");
    let file = std::fs::File::open(&history_path).expect("the history file");
    let records = tink_history::read(std::io::BufReader::new(file)).expect("the history reads");
    let report = tink_history::check(&records);
    eprintln!("chaos: the history's verdict\n{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(
        report.workflows,
        list.items.len(),
        "a status of every Workflow"
    );
    assert!(report.faults >= 10, "{report}");
    let executions = executions.lock().unwrap().clone();
    let twice: Vec<_> = executions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "dispatches executed more than once: {twice:?}"
    );
    let max = executions.values().copied().max().unwrap_or(0);
    eprintln!(
        "chaos: {workflows} workflows, {agents} agents, {:.1} s; faults: {server_kills} server SIGKILLs, {leader_kills} leader SIGKILL, {outages} controller outage of 7 s, {nats_restarts} NATS restart, {agent_restarts} agent restart; end states: {states:?}; executions: {} dispatches, at most {max} per dispatch",
        elapsed.as_secs_f64(),
        executions.len()
    );
    for (_, c) in controllers.drain() {
        c.kill().await;
    }
    for (_, c) in server_procs.drain(..) {
        c.kill().await;
    }
    stack.stop().await;
}
