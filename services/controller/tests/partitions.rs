//! The tink services across hosts under a seeded fault schedule (issue 32): a 3-node NATS
//! cluster (R3 streams), 2 controllers and 3 server replicas each in a service host of its own
//! (a network namespace on the cluster's bridge), kube-lite in the test process on the bridge
//! address, agents simulated in the test process over real gRPC to the servers' host addresses.
//!
//! The schedule is drawn from a seed (`TINK_FAULT_SEED`, random by default, always printed):
//! each round takes every fault kind once, in a shuffled order, with drawn waits and hold
//! times, healing after each:
//! - `kill-nats-leader`: SIGKILL the node leading the events stream; restarted at the heal;
//! - `partition-nats-minority`: one NATS node cut from the other two;
//! - `controller-leader-from-api`: the leading controller's host cut from the API server
//!   (the root namespace) but not from NATS;
//! - `controller-leader-from-nats`: the leading controller's host cut from NATS but not from
//!   the API server;
//! - `server-from-nats`: a server replica's host cut from NATS while its agents stay connected
//!   to it: they must be dropped and go to another replica, and their workflows finish;
//! - `latency`: 200 ms each way and 5% loss between one rack (a NATS node, a server replica and
//!   a controller) and the others;
//! - `agent-cut-short`: an agent cut from every server replica in the middle of an action, for
//!   less than the agent-lost limit: its workflow must still succeed;
//! - `agent-cut-long`: the same for longer than the limit: its workflow must fail with reason
//!   `AgentLost` (never a silent success, never a Workflow stuck in Running);
//! - `clock-jump`: the wall clock of one host's service (the leading controller, or a server
//!   replica) steps 90 s ahead, as a bad NTP step would, and back at the heal. CLOCK_REALTIME
//!   is not namespaced, so every service process runs under libfaketime (Debian's
//!   `libfaketime`, its monotonic clock left alone) reading an offset file the test writes.
//!
//! Workflows (three actions each) are created at a steady pace over the schedule so every fault
//! hits some in flight; the two agent cuts each get a workflow of their own on an agent of their
//! own (its connections leave from an address of its own, which the cut drops at every server
//! host). The run's history (tink-history) is checked as the chaos test's: every Workflow ends
//! as expected (Succeeded, or Failed/AgentLost after a long cut), no execution twice, no
//! acknowledged event lost, no overlapping terms.
//!
//! Size: `TINK_FAULT_ROUNDS` (default 1: eight faults), `TINK_FAULT_WORKFLOWS` (default 60),
//! `TINK_FAULT_AGENTS` (default 20). History: `TINK_FAULT_HISTORY` or the target's tmp
//! directory. scripts/fault-schedule.sh runs it.
//!
//! Root only (network namespaces); `TINK_SKIP_NETNS_TESTS=1` skips it loudly.

mod common;
#[path = "common/sim_agent.rs"]
mod sim_agent;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use serde_json::json;
use sim_agent::*;
use tink_api::v1alpha2::WorkflowState;
use tink_history::{Record, Recorder};
use tink_testkit::cluster::{NODES, NatsCluster};
use tokio_util::sync::CancellationToken;

const ROLE: &str = "TINK_PART_ROLE";
/// Where every server replica listens inside its host.
const SERVER_PORT: u16 = 50051;
/// How long each simulated action runs.
const ACTION_TIME: Duration = Duration::from_millis(800);
/// Upper bound for the workflows to finish once the schedule is over; only so a broken run
/// fails instead of hanging.
const DRAIN_DEADLINE: Duration = Duration::from_secs(240);
/// Upper bound for the agents of a replica cut from NATS to be present on another one.
const MOVE_DEADLINE: Duration = Duration::from_secs(90);
/// The controllers' agent-lost limit here (15 minutes by default).
const AGENT_LOST_AFTER: Duration = Duration::from_secs(20);
/// The servers' HTTP/2 keepalive interval and timeout here (30 s and 10 s by default): how soon
/// a replica notices an agent whose network went silent.
const SERVER_KEEPALIVE: Duration = Duration::from_secs(2);
/// How long a cut agent's action runs: long enough that a cut lands in its middle.
const CUT_ACTION_TIME: Duration = Duration::from_secs(4);
/// How long a short agent cut lasts: well under the agent-lost limit.
const SHORT_CUT: Duration = Duration::from_secs(6);
/// libfaketime, multithreaded flavour (scripts/install-deps.sh installs it).
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// How far a clock jumps: past the agent-lost limit and the Lease's duration.
const CLOCK_JUMP: &str = "+90s";

fn fault_bus() -> tink_bus::BusConfig {
    tink_bus::BusConfig {
        replicas: 3,
        receipt_timeout: Duration::from_secs(3),
        ..bus_config()
    }
}

/// In a child process: runs the role it was started for until killed. In the test run itself
/// it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is set"));
    let nats = var("TINK_PART_NATS");
    let id = var("TINK_PART_ID");
    match role.as_str() {
        "server" => {
            let listener = tokio::net::TcpListener::bind(("0.0.0.0", SERVER_PORT))
                .await
                .expect("bind");
            let mut config = tink_server::ServerConfig::new(nats, id);
            config.bus = fault_bus();
            config.nats_auth = nats_auth("tink-server");
            config.keepalive_interval = SERVER_KEEPALIVE;
            config.keepalive_timeout = SERVER_KEEPALIVE;
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
            let url = var("TINK_PART_KUBE").parse().expect("kube url");
            let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
            let mut c = tink_controller::ControllerConfig::new(&nats, &id);
            c.bus = fault_bus();
            c.nats_auth = nats_auth("tink-controller");
            c.namespace = Some(NS.into());
            c.events_ack_wait = Duration::from_secs(2);
            c.workflow.backoff_base = Duration::from_millis(300);
            c.workflow.backoff_max = Duration::from_secs(2);
            c.workflow.agent_lost_after = AGENT_LOST_AFTER;
            c.resync_period = Duration::from_secs(10);
            c.lease = tink_controller::LeaseConfig {
                namespace: "tink-system".into(),
                name: "tink-controller".into(),
                duration: Duration::from_secs(3),
                renew_period: Duration::from_millis(500),
                renew_deadline: Duration::from_secs(2),
                retry_period: Duration::from_millis(500),
            };
            tink_controller::run(
                c,
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

/// Spawns this test binary in `role` inside host `host`, its wall clock offset by what
/// `clock` holds (libfaketime; `+0` to begin with); SIGKILLed on drop.
fn spawn_role(
    cluster: &NatsCluster,
    host: usize,
    role: &str,
    id: &str,
    clock: &std::path::Path,
    env: &[(&str, String)],
) -> tokio::process::Child {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "{FAKETIME_LIB} is missing: run scripts/install-deps.sh (Debian's libfaketime)"
    );
    std::fs::write(clock, "+0\n").expect("the clock file");
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = cluster.command(host, exe).expect("a host");
    cmd.args([
        "--exact",
        "partitions_role",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env("TINK_PART_ID", id)
    // Only CLOCK_REALTIME moves (an NTP step); timers and Instants keep the true monotonic
    // clock. The file is read again at most every second.
    .env("LD_PRELOAD", FAKETIME_LIB)
    .env("FAKETIME_TIMESTAMP_FILE", clock)
    .env("FAKETIME_CACHE_DURATION", "1")
    .env("DONT_FAKE_MONOTONIC", "1")
    .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("the role starts")
}

/// xorshift64*: the schedule's only source of randomness, so a seed replays it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-ish in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    KillNatsLeader,
    PartitionNatsMinority,
    ControllerLeaderFromApi,
    ControllerLeaderFromNats,
    ServerFromNats,
    Latency,
    AgentCutShort,
    AgentCutLong,
    ClockJump,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::KillNatsLeader,
        Kind::PartitionNatsMinority,
        Kind::ControllerLeaderFromApi,
        Kind::ControllerLeaderFromNats,
        Kind::ServerFromNats,
        Kind::Latency,
        Kind::AgentCutShort,
        Kind::AgentCutLong,
        Kind::ClockJump,
    ];
    fn name(self) -> &'static str {
        match self {
            Kind::KillNatsLeader => "kill-nats-leader",
            Kind::PartitionNatsMinority => "partition-nats-minority",
            Kind::ControllerLeaderFromApi => "controller-leader-from-api",
            Kind::ControllerLeaderFromNats => "controller-leader-from-nats",
            Kind::ServerFromNats => "server-from-nats",
            Kind::Latency => "latency",
            Kind::AgentCutShort => "agent-cut-short",
            Kind::AgentCutLong => "agent-cut-long",
            Kind::ClockJump => "clock-jump",
        }
    }
}

/// One drawn step: wait, inject, hold, heal.
#[derive(Debug)]
struct Step {
    kind: Kind,
    wait: Duration,
    hold: Duration,
    /// Which node or server replica, where the kind picks one.
    pick: usize,
}

fn schedule(seed: u64, rounds: usize) -> Vec<Step> {
    // splitmix64 of the seed: neighbouring seeds give unrelated schedules (and never a zero
    // state, which xorshift keeps forever).
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    let mut rng = Rng((z ^ (z >> 31)) | 1);
    let mut steps = Vec::new();
    for _ in 0..rounds {
        let mut kinds = Kind::ALL;
        rng.shuffle(&mut kinds);
        for kind in kinds {
            steps.push(Step {
                kind,
                wait: Duration::from_millis(rng.range(1_000, 4_000)),
                hold: Duration::from_millis(rng.range(4_000, 10_000)),
                pick: rng.range(0, 2) as usize,
            });
        }
    }
    steps
}

#[test]
fn seeds_replay_and_differ() {
    let order = |seed| {
        schedule(seed, 2)
            .iter()
            .map(|s| (s.kind.name(), s.pick, s.wait, s.hold))
            .collect::<Vec<_>>()
    };
    assert_eq!(order(7), order(7), "a seed replays its schedule");
    let distinct: std::collections::HashSet<_> = (0..20).map(order).collect();
    assert_eq!(distinct.len(), 20, "neighbouring seeds differ");
    for s in schedule(1, 3).chunks(Kind::ALL.len()) {
        let mut kinds: Vec<_> = s.iter().map(|s| s.kind.name()).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(
            kinds.len(),
            Kind::ALL.len(),
            "each round has every kind once"
        );
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish() % 1_000_000_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_across_hosts_survive_a_seeded_fault_schedule() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let seed = std::env::var("TINK_FAULT_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(random_seed);
    let rounds = env_usize("TINK_FAULT_ROUNDS", 1);
    let workflows = env_usize("TINK_FAULT_WORKFLOWS", 60);
    let agents = env_usize("TINK_FAULT_AGENTS", 20);
    eprintln!(
        "partitions: TINK_FAULT_SEED={seed} TINK_FAULT_ROUNDS={rounds} TINK_FAULT_WORKFLOWS={workflows} TINK_FAULT_AGENTS={agents}"
    );
    let steps = schedule(seed, rounds);
    for s in &steps {
        eprintln!(
            "partitions: schedule {} pick={} wait={:?} hold={:?}",
            s.kind.name(),
            s.pick,
            s.wait,
            s.hold
        );
    }
    let Some(mut cluster) = NatsCluster::start_or_skip()
        .await
        .expect("NATS cluster starts")
    else {
        return;
    };
    // One URL per service, as deploy/'s Service gives one: the client learns the other nodes
    // from the server's INFO and reconnects to them. Spread over the nodes.
    let nats_urls = cluster.client_urls();

    // kube-lite on the bridge address, so every host reaches it.
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let kube = kube_lite::Server::start(kube_lite::Config {
        listen: SocketAddr::from((cluster.bridge_ip(), 0)),
        ..Default::default()
    })
    .await
    .expect("kube-lite starts");
    let client = kube.client().expect("client");
    apply_crds(&client).await;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    for ns in [NS, "tink-system"] {
        let obj: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
        namespaces
            .create(&PostParams::default(), &obj)
            .await
            .expect("namespace");
    }
    // The streams with 3 replicas, as the controller's user (JetStream's meta leader may still
    // be settling).
    let js = {
        let client = tink_bus::connect(
            &nats_urls[0],
            &nats_auth("tink-controller"),
            async_nats::ConnectOptions::new,
        )
        .await
        .expect("connects to the cluster");
        async_nats::jetstream::new(client)
    };
    let until = Instant::now() + Duration::from_secs(60);
    while let Err(e) = tink_bus::ensure_streams(&js, &fault_bus()).await {
        assert!(Instant::now() < until, "streams not created: {e}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let presence = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("the presence bucket");

    let history_path = std::env::var_os("TINK_FAULT_HISTORY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("partitions-history.jsonl")
        });
    let history = Arc::new(
        Recorder::create(
            &history_path,
            seed,
            "services/controller/tests/partitions.rs (a seeded schedule)",
        )
        .expect("the history file"),
    );
    eprintln!("partitions: history in {}", history_path.display());
    let (status_task, term_task) = record_api(client.clone(), history.clone());

    // The hosts and the services in them.
    let kube_url = kube.url();
    let mut children = Vec::new();
    // Each service's wall-clock offset, by its id.
    let clocks = tempfile::tempdir().expect("a directory for the clocks");
    let mut controller_hosts: HashMap<String, usize> = HashMap::new();
    for i in 0..2 {
        let id = format!("controller-{i}");
        let host = cluster.add_host(&id).await.expect("a host");
        children.push(spawn_role(
            &cluster,
            host,
            "controller",
            &id,
            &clocks.path().join(&id),
            &[
                ("TINK_PART_NATS", nats_urls[i % NODES].clone()),
                ("TINK_PART_KUBE", kube_url.clone()),
            ],
        ));
        controller_hosts.insert(id, host);
    }
    let mut server_hosts = Vec::new();
    let mut server_addrs = Vec::new();
    for i in 0..3 {
        let id = format!("server-{i}");
        let host = cluster.add_host(&id).await.expect("a host");
        children.push(spawn_role(
            &cluster,
            host,
            "server",
            &id,
            &clocks.path().join(&id),
            &[("TINK_PART_NATS", nats_urls[(i + 2) % NODES].clone())],
        ));
        server_hosts.push(host);
        server_addrs.push(SocketAddr::from((
            cluster.host_ip(host).expect("an address"),
            SERVER_PORT,
        )));
    }
    let servers = Servers::default();
    servers.set(server_addrs.clone());

    // The workload.
    let api = stack_workflows(&client);
    create_template(&client).await;
    let executions: Executions = Arc::default();
    let mut agent_tasks = Vec::new();
    for i in 0..agents {
        let mac = format!("aa:bb:cc:01:{:02x}:{:02x}", i / 256, i % 256);
        create_hardware(&client, &format!("m{i}"), &mac).await;
        let agent = SimAgent::new(mac, &servers, &executions, &history, ACTION_TIME);
        agent_tasks.push(tokio::spawn(agent.run()));
    }
    // The two agents the cuts are for (short, long), each on an address of its own.
    let mut victims = Vec::new();
    for k in 0..2u8 {
        let ip = cluster.client_ip(k).await.expect("a client address");
        let mac = format!("aa:bb:cc:02:00:{k:02x}");
        let hardware = format!("victim{k}");
        create_hardware(&client, &hardware, &mac).await;
        let agent = SimAgent {
            local: Some(ip.into()),
            ..SimAgent::new(mac, &servers, &executions, &history, CUT_ACTION_TIME)
        };
        let running = agent.running.clone();
        agent_tasks.push(tokio::spawn(agent.run()));
        victims.push((hardware, ip, running));
    }
    // What each Workflow must end as, where not Succeeded: name -> (state, reason).
    let mut expected: HashMap<String, (String, String)> = HashMap::new();
    let mut cut_workflows = 0usize;
    // Workflows at a steady pace over the schedule.
    let span: Duration = steps.iter().map(|s| s.wait + s.hold).sum();
    let creator = {
        let client = client.clone();
        let pace = span / workflows.max(1) as u32;
        tokio::spawn(async move {
            for j in 0..workflows {
                create_workflow(&client, &format!("wf{j:04}"), &format!("m{}", j % agents)).await;
                tokio::time::sleep(pace).await;
            }
        })
    };

    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), "tink-system");
    let holder = || async {
        leases
            .get_opt("tink-controller")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };
    let fault = |kind: &str, target: &str| {
        let at = history.now();
        eprintln!("FAULT kind={kind} target={target} at={at:.1} (schedule, seed {seed})");
        record(
            &history,
            Record::Fault {
                t: at,
                fault: kind.into(),
                target: target.into(),
            },
        );
    };

    // Wait for a leader before the first fault.
    let until = Instant::now() + Duration::from_secs(60);
    while holder().await.is_none() {
        assert!(Instant::now() < until, "no controller leads");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And for every agent to be connected (present), so the first faults hit a full fleet.
    let until = Instant::now() + Duration::from_secs(60);
    let fleet = agents + victims.len();
    loop {
        let n = present(&presence).await.len();
        if n == fleet {
            break;
        }
        assert!(
            Instant::now() < until,
            "only {n} of {fleet} agents connected"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let began = Instant::now();
    let mut done: Vec<String> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        tokio::time::sleep(step.wait).await;
        let mut killed = None;
        let mut moved_from: Option<(String, Vec<String>)> = None;
        let mut cut: Option<(String, bool)> = None;
        let mut jumped: Option<std::path::PathBuf> = None;
        let target = match step.kind {
            Kind::KillNatsLeader => {
                match cluster
                    .kill_stream_leader(tink_bus::EVENTS_STREAM)
                    .await
                    .expect("kill")
                {
                    Some(n) => {
                        killed = Some(n);
                        cluster.name(n).to_string()
                    }
                    None => {
                        let n = step.pick % NODES;
                        cluster.kill(n).await.expect("kill");
                        killed = Some(n);
                        cluster.name(n).to_string()
                    }
                }
            }
            Kind::PartitionNatsMinority => {
                let n = step.pick % NODES;
                let rest: Vec<usize> = (0..NODES).filter(|&m| m != n).collect();
                cluster.partition(&[n], &rest).await.expect("partition");
                cluster.name(n).to_string()
            }
            Kind::ControllerLeaderFromApi | Kind::ControllerLeaderFromNats => {
                let leader = holder().await.unwrap_or_else(|| "controller-0".into());
                let host = controller_hosts[&leader];
                if step.kind == Kind::ControllerLeaderFromApi {
                    cluster.cut_from_root(host).await.expect("cut");
                } else {
                    cluster
                        .partition(&[host], &[0, 1, 2])
                        .await
                        .expect("partition");
                }
                leader
            }
            Kind::ServerFromNats => {
                // A replica holding agents (the drawn one among those), so the cut tests a move.
                let now = present(&presence).await;
                let mut holding: Vec<usize> = (0..server_hosts.len())
                    .filter(|i| now.values().any(|s| *s == format!("server-{i}")))
                    .collect();
                if holding.is_empty() {
                    holding = (0..server_hosts.len()).collect();
                }
                let index = holding[step.pick % holding.len()];
                let replica = format!("server-{index}");
                let on_it: Vec<String> = now
                    .into_iter()
                    .filter(|(_, server)| *server == replica)
                    .map(|(agent, _)| agent)
                    .collect();
                eprintln!(
                    "partitions: {} agents on {replica} before it is cut from NATS: {on_it:?}",
                    on_it.len()
                );
                moved_from = Some((replica, on_it));
                cluster
                    .partition(&[server_hosts[index]], &[0, 1, 2])
                    .await
                    .expect("partition");
                format!("server-{index}")
            }
            Kind::Latency => {
                // Rack r: NATS node r, server replica r and controller r (where there is one).
                let r = step.pick % NODES;
                let mut rack = vec![r, server_hosts[r]];
                if let Some(&c) = controller_hosts.get(&format!("controller-{r}")) {
                    rack.push(c);
                }
                let rest: Vec<usize> = (0..NODES)
                    .chain(server_hosts.iter().copied())
                    .chain(controller_hosts.values().copied())
                    .filter(|m| !rack.contains(m))
                    .collect();
                cluster
                    .latency(
                        &rack,
                        &rest,
                        Duration::from_millis(200),
                        0.05,
                        seed.wrapping_add(i as u64),
                    )
                    .await
                    .expect("latency");
                format!("rack-{r}")
            }
            Kind::AgentCutShort | Kind::AgentCutLong => {
                let long = step.kind == Kind::AgentCutLong;
                let (hardware, ip, running) = &victims[usize::from(long)];
                let name = format!("cut-{}-{i:02}", if long { "long" } else { "short" });
                create_workflow(&client, &name, hardware).await;
                cut_workflows += 1;
                // In the middle of its actions: the agent is executing this workflow's dispatch
                // (its own view; the Workflow's status may lag behind the events by seconds
                // while a controller catches up, and once showed all three at once).
                let until = Instant::now() + Duration::from_secs(90);
                loop {
                    let now = running.lock().unwrap().clone();
                    if now.as_deref().map(workflow_name).as_deref() == Some(name.as_str()) {
                        break;
                    }
                    assert!(
                        Instant::now() < until,
                        "seed {seed}: the agent of {name} did not begin it within 90 s"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                cluster
                    .cut_address(&server_hosts, *ip)
                    .await
                    .expect("cut the agent");
                if long {
                    expected.insert(name.clone(), ("Failed".into(), "AgentLost".into()));
                }
                cut = Some((name, long));
                format!("{hardware}({ip})")
            }
            Kind::ClockJump => {
                // The leading controller, or a server replica, by the draw.
                let who = if step.pick == 0 {
                    holder().await.unwrap_or_else(|| "controller-0".into())
                } else {
                    format!("server-{}", step.pick % server_hosts.len())
                };
                let file = clocks.path().join(&who);
                std::fs::write(&file, format!("{CLOCK_JUMP}\n")).expect("the clock file");
                jumped = Some(file);
                // No kit line for this one (the kit does not know the clocks).
                eprintln!(
                    "FAULT kind=clock-jump target={who}:{CLOCK_JUMP} at={:.3}",
                    history.now()
                );
                format!("{who}:{CLOCK_JUMP}")
            }
        };
        fault(step.kind.name(), &target);
        let cut_at = Instant::now();
        match &cut {
            // Shorter than the limit, whatever the drawn hold.
            Some((_, false)) => tokio::time::sleep(SHORT_CUT).await,
            // Until the controller gives the agent up (bounded): the keepalives end its stream,
            // then the limit runs out.
            Some((name, true)) => {
                let until = Instant::now() + AGENT_LOST_AFTER + Duration::from_secs(60);
                loop {
                    let w = api.get(name).await.expect("the cut workflow");
                    if state_of(&w).is_terminal() {
                        eprintln!(
                            "partitions: {name} ended {:?}/{} {:.1} s into its agent's cut",
                            state_of(&w),
                            reason(&w).unwrap_or_default(),
                            cut_at.elapsed().as_secs_f64()
                        );
                        break;
                    }
                    assert!(
                        Instant::now() < until,
                        "seed {seed}: {name} still {:?} {:.0} s into a cut longer than the agent-lost limit ({AGENT_LOST_AFTER:?})",
                        state_of(&w),
                        cut_at.elapsed().as_secs_f64()
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            None => tokio::time::sleep(step.hold).await,
        }
        // A replica cut from NATS must drop its agents' streams (it can neither deliver their
        // commands nor store their events), and they must be present on another replica while
        // the cut lasts. Bounded, not timed: the cut is held until they are, or the run fails.
        if let Some((replica, agents_on_it)) = &moved_from {
            let until = Instant::now() + MOVE_DEADLINE;
            loop {
                let now = present(&presence).await;
                let stuck: Vec<&String> = agents_on_it
                    .iter()
                    .filter(|a| now.get(*a).is_none_or(|s| s == replica))
                    .collect();
                if stuck.is_empty() {
                    eprintln!(
                        "partitions: all {} agents of {replica} are on other replicas, {:.1} s after the cut",
                        agents_on_it.len(),
                        cut_at.elapsed().as_secs_f64()
                    );
                    break;
                }
                assert!(
                    Instant::now() < until,
                    "seed {seed}: agents still on {replica} (or nowhere) {MOVE_DEADLINE:?} after its cut from NATS: {stuck:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        cluster.heal().await.expect("heal");
        if let Some(file) = &jumped {
            // And back: a step backwards is a fault of its own.
            std::fs::write(file, "+0\n").expect("the clock file");
        }
        if let Some(n) = killed {
            cluster.restart(n).await.expect("restart");
        }
        fault("heal", "all");
        done.push(format!("{}({target})", step.kind.name()));
    }
    let schedule_time = began.elapsed();
    creator.await.expect("every workflow created");

    // Every Workflow ends.
    let unfinished = || async {
        let list = api.list(&Default::default()).await.expect("list");
        list.items
            .iter()
            .filter(|w| !state_of(w).is_terminal())
            .map(|w| format!("{}={:?}", kube::ResourceExt::name_any(w), state_of(w)))
            .collect::<Vec<_>>()
    };
    let until = Instant::now() + DRAIN_DEADLINE;
    loop {
        let left = unfinished().await;
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < until,
            "seed {seed}: workflows not finished {DRAIN_DEADLINE:?} after the schedule: {left:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let elapsed = began.elapsed();
    for t in &agent_tasks {
        t.abort();
    }

    let list = api.list(&Default::default()).await.expect("list");
    let mut states: HashMap<String, usize> = HashMap::new();
    for w in &list.items {
        *states
            .entry(format!(
                "{:?}/{}",
                state_of(w),
                reason(w).unwrap_or_default()
            ))
            .or_default() += 1;
        let name = kube::ResourceExt::name_any(w);
        let (state, reason) = match expected.get(&name) {
            Some((state, reason)) => (state.clone(), Some(reason.clone())),
            None => ("Succeeded".to_string(), None),
        };
        record(
            &history,
            Record::Expect {
                workflow: name,
                state,
                reason,
            },
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    status_task.abort();
    term_task.abort();
    history.flush().expect("the history is flushed");
    let file = std::fs::File::open(&history_path).expect("the history file");
    let records = tink_history::read(std::io::BufReader::new(file)).expect("the history reads");
    let report = tink_history::check(&records);
    let executions = executions.lock().unwrap().clone();
    let max = executions.values().copied().max().unwrap_or(0);
    eprintln!("partitions: seed {seed}: the history's verdict\n{report}");
    eprintln!(
        "partitions: seed {seed}: {workflows} workflows, {agents} agents; schedule {:.1} s, all done at {:.1} s; faults: {}; end states: {states:?}; {} dispatches executed, at most {max} each; history {}",
        schedule_time.as_secs_f64(),
        elapsed.as_secs_f64(),
        done.join(", "),
        executions.len(),
        history_path.display()
    );
    assert!(report.is_clean(), "seed {seed}: {report}");
    assert_eq!(
        report.workflows,
        list.items.len(),
        "a status of every Workflow"
    );
    assert_eq!(list.items.len(), workflows + cut_workflows);
    for w in &list.items {
        let name = kube::ResourceExt::name_any(w);
        match expected.get(&name) {
            Some((state, why)) => assert_eq!(
                (format!("{:?}", state_of(w)), reason(w).unwrap_or_default()),
                (state.clone(), why.clone()),
                "seed {seed}: {name}"
            ),
            None => assert_eq!(
                state_of(w),
                WorkflowState::Succeeded,
                "seed {seed}: {name}: {:?}",
                reason(w)
            ),
        }
    }
    assert!(max <= 1, "seed {seed}: a dispatch executed {max} times");
    for mut c in children {
        let _ = c.kill().await;
    }
    drop(kube);
    drop(cluster);
}

/// The agents present now (the presence bucket): agent id -> server replica. Empty when NATS
/// does not answer within a few seconds.
async fn present(kv: &async_nats::jetstream::kv::Store) -> HashMap<String, String> {
    use futures::StreamExt as _;
    let read = async {
        let mut out = HashMap::new();
        let mut keys = match kv.keys().await {
            Ok(keys) => keys,
            Err(e) => {
                eprintln!("partitions: cannot list presence: {e}");
                return out;
            }
        };
        let mut names = Vec::new();
        while let Some(key) = keys.next().await {
            match key {
                Ok(key) => names.push(key),
                Err(e) => eprintln!("partitions: cannot list presence: {e}"),
            }
        }
        for key in names {
            match kv.get(&key).await {
                Ok(Some(value)) => match serde_json::from_slice::<tink_bus::Presence>(&value) {
                    Ok(p) => {
                        out.insert(p.agent_id, p.server);
                    }
                    Err(e) => eprintln!("partitions: presence {key}: {e}"),
                },
                Ok(None) => {}
                Err(e) => eprintln!("partitions: presence {key}: {e}"),
            }
        }
        out
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| {
            eprintln!("partitions: presence not read within 10 s");
            HashMap::new()
        })
}

fn stack_workflows(client: &kube::Client) -> kube::Api<tink_api::v1alpha2::Workflow> {
    kube::Api::namespaced(client.clone(), NS)
}

async fn create_template(client: &kube::Client) {
    let t: tink_api::v1alpha2::Template = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "three", "namespace": NS},
        "spec": {"actions": [
            {"name": "one", "image": "busybox"},
            {"name": "two", "image": "busybox"},
            {"name": "three", "image": "busybox"},
        ]},
    }))
    .expect("template");
    kube::Api::<tink_api::v1alpha2::Template>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &t)
        .await
        .expect("create template");
}

async fn create_hardware(client: &kube::Client, name: &str, mac: &str) {
    let hw: tink_api::v1alpha2::Hardware = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "networkInterfaces": {mac: {"dhcp": {"ip": "10.0.0.2", "netmask": "255.255.255.0"}}},
            "storageDevices": ["/dev/nvme0n1"],
        },
    }))
    .expect("hardware");
    kube::Api::<tink_api::v1alpha2::Hardware>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &hw)
        .await
        .expect("create hardware");
}

async fn create_workflow(client: &kube::Client, name: &str, hardware: &str) {
    let wf: tink_api::v1alpha2::Workflow = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "hardwareRef": {"name": hardware},
            "templateRef": {"name": "three"},
            "templateData": {"image_server": "10.0.0.1:8080"},
        },
    }))
    .expect("workflow");
    stack_workflows(client)
        .create(&PostParams::default(), &wf)
        .await
        .expect("create workflow");
}
