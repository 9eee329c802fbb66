//! `tink-scale`: the at-scale benchmark of issue 14.
//!
//! Starts the stack as in production, each part its own process from the release binaries:
//! `nats-server -js`, kube-lite (persistent, as `tinkctl dev up` runs it), the controller and
//! `--servers` tink-server replicas; then `tink-scale-agents` with `--agents` simulated
//! machines. Runs the `--steps` (`RATExCOUNT`: COUNT three-action workflows created at RATE per
//! second), one after the other on the same stack, and reports per step: throughput, latencies
//! (creation to Succeeded, dispatch, event to status) as p50/p99, CPU per workflow of every
//! process, Kubernetes API writes per workflow from kube-lite's `/metrics`, and resident memory.
//! A step is *sustained* when every workflow succeeded, the completion rate is at least 95% of
//! the offered rate and the end-to-end p99 stays under `--sustained-p99-ms`; the capacity is the
//! highest sustained rate. `--overload` then offers twice that. Finally the servers' event rate
//! is compared with a bare JetStream publisher's (same publishes, same nats-server).
//!
//! Exits non-zero when a workflow does not succeed or the harness fails.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, ResourceExt as _};
use kube_runtime::{WatchStreamExt as _, watcher};
use serde::Serialize;
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Template, Workflow, WorkflowState};
use tink_scale_bench::{AgentRecord, LoadResult, NAMESPACE, cpu_seconds, mac, ms, now_ns, rss_kib};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};

#[derive(Debug, Parser)]
#[command(about = "Issue 14: the stack as separate processes under simulated agents at scale")]
struct Args {
    /// tink-server replicas.
    #[arg(long, default_value_t = 2)]
    servers: usize,
    /// Simulated machines (one Hardware, one connection and one stream each).
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// Simulated machines per load generator process: a process holds at most its open files
    /// limit of connections (the hard limit cannot be raised here), so a large fleet is spread
    /// over several processes.
    #[arg(long, default_value_t = 16_000)]
    agents_per_process: usize,
    /// Connections (stream opens, each writing presence and reading the agent's queue) in progress at once,
    /// shared among the load generator processes.
    #[arg(long, default_value_t = 256)]
    connect_concurrency: usize,
    /// Source addresses the machines connect from: 127.0.1.1 .. 127.0.1.N (each has its own
    /// ephemeral ports, about 28,000); 0 leaves the choice to the kernel.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=250))]
    source_addresses: u8,
    /// The simulated machines' HTTP/2 keepalive ping interval (the real agent's default is
    /// 30 s); 0 sends none.
    #[arg(long, default_value_t = 30)]
    agent_keepalive_seconds: u64,
    /// Before the steps, measure the connected fleet at rest for this many seconds: CPU of
    /// every process and the NATS messages (0 skips).
    #[arg(long, default_value_t = 0)]
    idle_seconds: u64,
    /// Steps `RATExCOUNT`, comma separated: COUNT workflows created at RATE per second.
    #[arg(long, value_delimiter = ',', default_value = "200x2000")]
    steps: Vec<String>,
    /// After the steps, offer twice the capacity (the highest sustained step rate) for as many
    /// workflows as the largest step.
    #[arg(long)]
    overload: bool,
    /// A step is sustained only while the creation-to-Succeeded p99 stays under this.
    #[arg(long, default_value_t = 1000.0)]
    sustained_p99_ms: f64,
    /// Seconds of each event load run (through the servers, then the bare publisher); 0 skips.
    #[arg(long, default_value_t = 10)]
    events_seconds: u64,
    /// Connections (publishes in flight) of each event load run.
    #[arg(long, default_value_t = 64)]
    events_connections: usize,
    /// Directory of kube-lite, tink-controller, tink-server and tink-scale-agents (default:
    /// this program's directory, e.g. target/release).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The nats-server executable.
    #[arg(long, default_value = "nats-server")]
    nats_server: PathBuf,
    /// NATS nodes: 1, or 3 for a JetStream cluster on loopback (routes between the three,
    /// every stream and bucket replicated three ways, the services given all three URLs), as
    /// deploy/ runs it. Use a nats-server 2.10 (`--nats-server
    /// /opt/nats-server-2.10/bin/nats-server`, installed by scripts/install-deps.sh).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    nats_nodes: u8,
    /// GOMAXPROCS for each nats-server (default: Go's own, every core). With three nodes on a
    /// machine of two cores, each Go runtime otherwise runs two schedulers and they contend;
    /// on hosts of their own they would not. Reported with the figures.
    #[arg(long)]
    nats_gomaxprocs: Option<u16>,
    /// The CRD manifests (default: the repository's deploy/crds).
    #[arg(long)]
    crds: Option<PathBuf>,
    /// Where the processes keep their data and logs (default: a temporary directory, removed
    /// at the end).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// kube-lite keeps objects in memory only (default: persistent, as the dev stack runs it).
    #[arg(long)]
    kube_lite_in_memory: bool,
    /// Workflow create calls in flight at once.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// RUST_LOG of the services.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One of the stack's processes.
struct Proc {
    name: String,
    child: Child,
    pid: u32,
    /// The file with its stdout and stderr (`None`: they go to tink-scale's own).
    log: Option<PathBuf>,
}

impl Proc {
    /// The last lines of its log, for an error that ends the run (the work directory with the
    /// whole log is removed with it).
    fn log_tail(&self) -> String {
        const LINES: usize = 30;
        let Some(log) = &self.log else {
            return "its output is above".to_string();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
        format!("last lines of {}:\n{tail}", log.display())
    }

    fn cpu(&self) -> f64 {
        cpu_seconds(self.pid).unwrap_or(f64::NAN)
    }
    fn rss(&self) -> u64 {
        rss_kib(self.pid).unwrap_or(0)
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn spawn(
    name: &str,
    exe: &Path,
    args: &[String],
    envs: &[(&str, String)],
    logs: &Path,
) -> anyhow::Result<Proc> {
    let log_path = logs.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {name} ({})", exe.display()))?;
    let pid = child.id().context("no pid")?;
    Ok(Proc {
        name: name.to_string(),
        child,
        pid,
        log: Some(log_path),
    })
}

/// A plain HTTP/1.1 GET on loopback: (status, body).
async fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let fut = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut buf).await?;
        anyhow::Ok(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .context("HTTP timeout")??;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("malformed HTTP answer")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

async fn wait_ready(p: &mut Proc, addr: &str, path: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = p.child.try_wait()? {
            bail!(
                "{} exited ({status}) before it was ready; {}",
                p.name,
                p.log_tail()
            );
        }
        if let Ok((200, _)) = http_get(addr, path).await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} was not ready at http://{addr}{path} within 60 s; {}",
                p.name,
                p.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// kube-lite's `kube_lite_requests_total` counters.
type Requests = BTreeMap<(String, String, String, String), f64>;

async fn kube_requests(addr: &str) -> anyhow::Result<Requests> {
    let (status, body) = http_get(addr, "/metrics").await?;
    if status != 200 {
        bail!("kube-lite /metrics answered {status}");
    }
    let mut out = Requests::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("kube_lite_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        *out.entry((
            label("verb"),
            label("resource"),
            label("subresource"),
            label("code"),
        ))
        .or_default() += v;
    }
    Ok(out)
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// API writes between two snapshots by `resource[/subresource] verb` (every answer code).
fn write_delta(before: &Requests, after: &Requests) -> BTreeMap<String, f64> {
    let sum = |m: &Requests| {
        let mut out: BTreeMap<String, f64> = BTreeMap::new();
        for ((verb, res, sub, _code), v) in m {
            if !WRITE_VERBS.contains(&verb.as_str()) {
                continue;
            }
            let key = if sub.is_empty() {
                format!("{res} {verb}")
            } else {
                format!("{res}/{sub} {verb}")
            };
            *out.entry(key).or_default() += v;
        }
        out
    };
    let before = sum(before);
    sum(after)
        .into_iter()
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0.0);
            (k, d)
        })
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

#[derive(Default)]
struct Seen {
    created: HashMap<String, u64>,
    finished: HashMap<String, (u64, WorkflowState)>,
    agent: HashMap<String, AgentRecord>,
    create_errors: usize,
}

type Shared = Arc<Mutex<Seen>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Clone, Serialize)]
struct Latency {
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    samples: usize,
}

fn latency(mut v: Vec<Duration>) -> Latency {
    v.sort();
    Latency {
        p50_ms: ms(tink_scale_bench::quantile(&v, 0.5)),
        p99_ms: ms(tink_scale_bench::quantile(&v, 0.99)),
        max_ms: ms(v.last().copied()),
        samples: v.len(),
    }
}

#[derive(Debug, Clone, Serialize)]
struct StepReport {
    step: String,
    offered_per_s: f64,
    workflows: usize,
    /// Workflows in the store at the end of the step (every step's).
    cumulative_workflows: usize,
    created_per_s: f64,
    succeeded: usize,
    failed: usize,
    unfinished: usize,
    /// Succeeded workflows per second from the first creation to the last Succeeded.
    throughput_per_s: f64,
    end_to_end: Latency,
    dispatch: Latency,
    event_to_status: Latency,
    sustained: bool,
    /// API writes per workflow after its creation, by `resource[/subresource] verb`.
    api_writes_per_workflow: BTreeMap<String, f64>,
    api_writes_per_workflow_total: f64,
    /// CPU milliseconds per workflow, by process.
    cpu_ms_per_workflow: BTreeMap<String, f64>,
    /// The services' sum (nats, kube-lite, controller, servers), ms per workflow.
    stack_cpu_ms_per_workflow: f64,
    /// Every process's sum (with the agents and this harness), ms per workflow; `nproc` cores
    /// divided by it bounds the rate this machine could sustain if nothing else ran on it.
    all_cpu_ms_per_workflow: f64,
    /// Resident memory at the end of the step, KiB, by process.
    rss_kib: BTreeMap<String, u64>,
    loadavg: String,
}

#[derive(Debug, Clone, Serialize)]
struct EventsReport {
    through_servers: LoadResult,
    bare_publisher: LoadResult,
    servers_per_s: f64,
    bare_per_s: f64,
    ratio: f64,
    /// CPU microseconds per event by process, through the servers.
    cpu_us_per_event_servers: BTreeMap<String, f64>,
    /// CPU microseconds per event by process, bare publisher.
    cpu_us_per_event_bare: BTreeMap<String, f64>,
    loadavg: String,
}

#[derive(Debug, Clone, Serialize)]
struct Report {
    nproc: usize,
    nats_nodes: u8,
    /// `--nats-gomaxprocs`, when given.
    nats_gomaxprocs: Option<u16>,
    servers: usize,
    agents: usize,
    agents_connect_seconds: f64,
    server_rss_kib_per_agent: f64,
    idle: Option<IdleReport>,
    steps: Vec<StepReport>,
    capacity_per_s: Option<f64>,
    overload: Option<StepReport>,
    events: Option<EventsReport>,
    rss_kib_end: BTreeMap<String, u64>,
    loadavg_end: String,
}

struct Stack {
    procs: Vec<Proc>,
    kube_addr: String,
    nats_url: String,
    /// Every NATS node's monitoring address (host:port).
    nats_monitors: Vec<String>,
    grpc: Vec<String>,
    bins: PathBuf,
    logs: PathBuf,
}

impl Stack {
    fn cpu(&self) -> BTreeMap<String, f64> {
        let mut m: BTreeMap<String, f64> = self
            .procs
            .iter()
            .map(|p| (p.name.clone(), p.cpu()))
            .collect();
        // This process: the Workflow creates and the watch (what kubectl and a client cost).
        m.insert(
            "tink-scale".into(),
            cpu_seconds(std::process::id()).unwrap_or(f64::NAN),
        );
        m
    }
    fn rss(&self) -> BTreeMap<String, u64> {
        self.procs
            .iter()
            .map(|p| (p.name.clone(), p.rss()))
            .collect()
    }
    fn check_alive(&mut self) -> anyhow::Result<()> {
        for p in &mut self.procs {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "{} exited ({status}); see {}/{}.log",
                    p.name,
                    self.logs.display(),
                    p.name
                );
            }
        }
        Ok(())
    }
}

fn cpu_delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    per: f64,
    scale: f64,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (k.clone(), (d * scale / per * 100.0).round() / 100.0)
        })
        .collect()
}

async fn start_stack(args: &Args, dir: &Path) -> anyhow::Result<(Stack, kube::Client)> {
    let bins = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("no directory")?
            .to_path_buf(),
    };
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut procs = Vec::new();

    // One node, or a cluster: every node is started before any is awaited (a clustered
    // node is healthy only once JetStream's meta group has a leader).
    let nodes = usize::from(args.nats_nodes);
    let ports: Vec<(u16, u16, u16)> = (0..nodes)
        .map(|_| Ok((free_port()?, free_port()?, free_port()?)))
        .collect::<anyhow::Result<_>>()?;
    let nats_env: Vec<(&str, String)> = args
        .nats_gomaxprocs
        .map(|n| ("GOMAXPROCS", n.to_string()))
        .into_iter()
        .collect();
    let mut urls = Vec::new();
    let mut nats_procs = Vec::new();
    for (i, (port, mon, route)) in ports.iter().enumerate() {
        let name = if nodes == 1 {
            "nats".to_string()
        } else {
            format!("nats-{i}")
        };
        let mut node_args: Vec<String> = vec![
            "-js".into(),
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-m".into(),
            mon.to_string(),
            "-sd".into(),
            dir.join(&name).display().to_string(),
        ];
        if nodes > 1 {
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, _, r))| format!("nats://127.0.0.1:{r}"))
                .collect();
            node_args.extend([
                "-n".into(),
                name.clone(),
                "--cluster_name".into(),
                "tink".into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{route}"),
                "--routes".into(),
                routes.join(","),
            ]);
        }
        nats_procs.push((
            spawn(&name, &args.nats_server, &node_args, &nats_env, &logs)?,
            *mon,
        ));
        urls.push(format!("nats://127.0.0.1:{port}"));
    }
    let mut nats_monitors = Vec::new();
    for (mut p, mon) in nats_procs {
        wait_ready(&mut p, &format!("127.0.0.1:{mon}"), "/healthz").await?;
        nats_monitors.push(format!("127.0.0.1:{mon}"));
        procs.push(p);
    }
    let nats_url = urls.join(",");

    let api_port = free_port()?;
    let kube_addr = format!("127.0.0.1:{api_port}");
    let kubeconfig = dir.join("kubeconfig");
    let mut kl_args = vec![
        "--listen".into(),
        kube_addr.clone(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ];
    if !args.kube_lite_in_memory {
        kl_args.push("--data-dir".into());
        kl_args.push(dir.join("kube-lite").display().to_string());
    }
    let mut kl = spawn("kube-lite", &bins.join("kube-lite"), &kl_args, &[], &logs)?;
    wait_ready(&mut kl, &kube_addr, "/readyz").await?;
    procs.push(kl);

    let mut config = kube::Config::new(format!("http://{kube_addr}").parse()?);
    config.read_timeout = None;
    let client = kube::Client::try_from(config)?;
    let crds = args
        .crds
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds"));
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in std::fs::read_dir(&crds).with_context(|| format!("reading {}", crds.display()))? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        crd_api.create(&PostParams::default(), &crd).await?;
    }
    for ns in [NAMESPACE, "tink-system"] {
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await?;
    }

    let common = vec![
        ("NATS_URL", nats_url.clone()),
        ("TINK_NATS_STREAM_REPLICAS", nodes.to_string()),
        ("RUST_LOG", args.log_level.clone()),
        ("KUBECONFIG", kubeconfig.display().to_string()),
    ];
    // The controller first: its leader creates the streams and buckets, which the servers only
    // verify before they turn ready.
    let admin = format!("127.0.0.1:{}", free_port()?);
    let mut controller = spawn(
        "controller",
        &bins.join("tink-controller"),
        &[
            "--admin-addr".into(),
            admin.clone(),
            "--replica-id".into(),
            "controller-0".into(),
        ],
        &common,
        &logs,
    )?;
    wait_ready(&mut controller, &admin, "/readyz").await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = http_get(&admin, "/metrics").await?;
        if body.lines().any(|l| l.trim() == "tink_controller_leader 1") {
            break;
        }
        if Instant::now() > deadline {
            bail!("the controller did not become leader within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    procs.push(controller);
    let mut grpc = Vec::new();
    for i in 0..args.servers {
        let (port, admin) = (free_port()?, free_port()?);
        let name = format!("server-{i}");
        let mut p = spawn(
            &name,
            &bins.join("tink-server"),
            &[
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--admin-addr".into(),
                format!("127.0.0.1:{admin}"),
                "--replica-id".into(),
                name.clone(),
                // Plaintext, and the simulated agents present no session token (identity and
                // TLS have their own tests and benchmarks).
                "--insecure".into(),
                "--allow-unauthenticated-agents".into(),
                // Every simulated machine connects from 127.0.0.1 and publishes as fast as the
                // load asks: no per-peer or per-agent rate limits here.
                "--stream-opens-per-peer".into(),
                "0".into(),
                "--agent-calls-per-second".into(),
                "0".into(),
            ],
            &common,
            &logs,
        )?;
        wait_ready(&mut p, &format!("127.0.0.1:{admin}"), "/readyz").await?;
        procs.push(p);
        grpc.push(format!("127.0.0.1:{port}"));
    }
    Ok((
        Stack {
            procs,
            kube_addr,
            nats_url,
            nats_monitors,
            grpc,
            bins,
            logs,
        },
        client,
    ))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn parse_step(s: &str) -> anyhow::Result<(f64, usize)> {
    let (r, n) = s
        .split_once('x')
        .with_context(|| format!("step {s:?}: expected RATExCOUNT, e.g. 200x2000"))?;
    let rate: f64 = r.parse().with_context(|| format!("step {s:?}: rate"))?;
    let count: usize = n.parse().with_context(|| format!("step {s:?}: count"))?;
    if rate.is_nan() || rate <= 0.0 || count == 0 {
        bail!("step {s:?}: rate and count must be positive");
    }
    Ok((rate, count))
}

#[allow(clippy::too_many_arguments)]
async fn run_step(
    args: &Args,
    stack: &mut Stack,
    client: &kube::Client,
    seen: &Shared,
    label: &str,
    rate: f64,
    count: usize,
    first_index: usize,
) -> anyhow::Result<StepReport> {
    eprintln!("step {label}: {count} workflows at {rate}/s");
    let workflows: Api<Workflow> = Api::namespaced(client.clone(), NAMESPACE);
    let cpu_before = stack.cpu();
    let req_before = kube_requests(&stack.kube_addr).await?;
    let began = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / rate);
    let limit = Arc::new(tokio::sync::Semaphore::new(args.create_concurrency.max(1)));
    let mut creates = tokio::task::JoinSet::new();
    let names: Vec<String> = (0..count).map(|i| format!("{label}-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        tokio::time::sleep_until((began + gap.mul_f64(i as f64)).into()).await;
        let wf: Workflow = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"hardwareRef": {"name": format!("m{}", (first_index + i) % args.agents)}, "templateRef": {"name": "three"}},
        }))?;
        let permit = limit.clone().acquire_owned().await?;
        let (workflows, seen, name) = (workflows.clone(), seen.clone(), name.clone());
        creates.spawn(async move {
            lock(&seen).created.insert(name.clone(), now_ns());
            let r = workflows.create(&PostParams::default(), &wf).await;
            drop(permit);
            if let Err(e) = r {
                eprintln!("creating {name}: {e}");
                let mut s = lock(&seen);
                s.create_errors += 1;
                s.created.remove(&name);
            }
        });
        // Reap finished creates so the set stays small.
        while creates.try_join_next().is_some() {}
    }
    while creates.join_next().await.is_some() {}
    let created_in = began.elapsed().as_secs_f64();
    let timeout = Duration::from_secs_f64(count as f64 / rate * 2.0 + 120.0);
    loop {
        let (done, created) = {
            let s = lock(seen);
            let done = names.iter().filter(|n| s.finished.contains_key(*n)).count();
            let created = names.iter().filter(|n| s.created.contains_key(*n)).count();
            (done, created)
        };
        if done >= created {
            break;
        }
        if began.elapsed() > timeout {
            eprintln!("step {label}: only {done} of {created} workflows finished in {timeout:?}");
            break;
        }
        stack.check_alive()?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The agents' records, and trailing writes (Events, finalizers), follow shortly.
    let wait = Instant::now();
    while wait.elapsed() < Duration::from_secs(5) {
        let missing = {
            let s = lock(seen);
            names.iter().any(|n| {
                matches!(s.finished.get(n), Some((_, WorkflowState::Succeeded)))
                    && !s.agent.contains_key(n)
            })
        };
        if !missing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu_after = stack.cpu();
    let req_after = kube_requests(&stack.kube_addr).await?;

    let s = lock(seen);
    let (mut e2e, mut dispatch, mut e2s) = (Vec::new(), Vec::new(), Vec::new());
    let (mut succeeded, mut failed, mut unfinished) = (0, 0, 0);
    let (mut first_created, mut last_finished) = (u64::MAX, 0u64);
    let d = |a: u64, b: u64| Duration::from_nanos(b.saturating_sub(a));
    for n in &names {
        let Some(&created) = s.created.get(n) else {
            failed += 1;
            continue;
        };
        first_created = first_created.min(created);
        match s.finished.get(n) {
            Some(&(at, WorkflowState::Succeeded)) => {
                succeeded += 1;
                last_finished = last_finished.max(at);
                e2e.push(d(created, at));
                if let Some(r) = s.agent.get(n) {
                    dispatch.push(d(created, r.dispatched_ns));
                    e2s.push(d(r.last_event_ns, at));
                }
            }
            Some(_) => failed += 1,
            None => unfinished += 1,
        }
    }
    let cumulative = s.created.len();
    drop(s);
    let throughput = if last_finished > first_created {
        succeeded as f64 / d(first_created, last_finished).as_secs_f64()
    } else {
        0.0
    };
    let per = succeeded.max(1) as f64;
    let mut writes: BTreeMap<String, f64> = write_delta(&req_before, &req_after)
        .into_iter()
        .filter(|(k, _)| k != "workflows create")
        .map(|(k, v)| (k, (v / per * 100.0).round() / 100.0))
        .collect();
    writes.retain(|_, v| *v > 0.0);
    let writes_total = (writes.values().sum::<f64>() * 100.0).round() / 100.0;
    let e2e = latency(e2e);
    let cpu = cpu_delta(&cpu_before, &cpu_after, per, 1e3);
    let sustained = failed == 0
        && unfinished == 0
        && throughput >= 0.95 * rate
        && e2e.p99_ms.is_some_and(|p| p <= args.sustained_p99_ms);
    Ok(StepReport {
        step: label.to_string(),
        offered_per_s: rate,
        workflows: count,
        cumulative_workflows: cumulative,
        created_per_s: (count as f64 / created_in).round(),
        succeeded,
        failed,
        unfinished,
        throughput_per_s: throughput.round(),
        end_to_end: e2e,
        dispatch: latency(dispatch),
        event_to_status: latency(e2s),
        sustained,
        api_writes_per_workflow: writes,
        api_writes_per_workflow_total: writes_total,
        stack_cpu_ms_per_workflow: round2(
            cpu.iter()
                .filter(|(k, _)| is_service(k))
                .map(|(_, v)| v)
                .sum(),
        ),
        all_cpu_ms_per_workflow: round2(cpu.values().sum()),
        cpu_ms_per_workflow: cpu,
        rss_kib: stack.rss(),
        loadavg: tink_scale_bench::loadavg(),
    })
}

/// Starts a `tink-scale-agents` command with its stdin and stdout piped to this process (stderr
/// passed through), killed if dropped: the child, its pid, stdin and stdout.
fn spawn_piped(
    cmd: &mut Command,
) -> anyhow::Result<(Child, u32, ChildStdin, tokio::process::ChildStdout)> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("starting tink-scale-agents")?;
    let pid = child.id().context("no pid")?;
    let stdin = child.stdin.take().context("no stdin")?;
    let stdout = child.stdout.take().context("no stdout")?;
    Ok((child, pid, stdin, stdout))
}

/// Whether a process (by its name in [`Stack::cpu`]) is one of the services, not a load
/// generator (`agents-N`) or this harness.
fn is_service(name: &str) -> bool {
    !name.starts_with("agents") && name != "tink-scale"
}

/// Runs one event load generator (`events` or `publish`) and measures every process.
async fn load_run(
    stack: &Stack,
    args: &Args,
    mode: &str,
) -> anyhow::Result<(LoadResult, BTreeMap<String, f64>)> {
    let mut cmd = Command::new(stack.bins.join("tink-scale-agents"));
    cmd.arg(mode)
        .arg("--connections")
        .arg(args.events_connections.to_string())
        .arg("--seconds")
        .arg(args.events_seconds.to_string());
    if mode == "events" {
        cmd.arg("--servers").arg(stack.grpc.join(","));
    } else {
        cmd.arg("--nats-url")
            .arg(&stack.nats_url)
            .arg("--nats-connections")
            .arg(args.servers.to_string());
    }
    let (mut child, pid, mut stdin, stdout) = spawn_piped(&mut cmd)?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    match lines.next_line().await? {
        Some(l) if l.trim() == "ready" => {}
        other => bail!("{mode}: expected `ready`, got {other:?}"),
    }
    let cpu = |stack: &Stack| {
        let mut m = stack.cpu();
        m.insert(
            "load generator".into(),
            cpu_seconds(pid).unwrap_or(f64::NAN),
        );
        m
    };
    let before = cpu(stack);
    stdin.write_all(b"go\n").await?;
    let line = lines
        .next_line()
        .await?
        .with_context(|| format!("{mode}: no result"))?;
    let after = cpu(stack);
    let result: LoadResult =
        serde_json::from_str(&line).with_context(|| format!("{mode}: {line}"))?;
    drop(stdin);
    let _ = child.wait().await;
    let per = result.events.max(1) as f64;
    Ok((result, cpu_delta(&before, &after, per, 1e6)))
}

fn lat(l: &Latency) -> String {
    match (l.p50_ms, l.p99_ms) {
        (Some(a), Some(b)) => format!("{a:.1} / {b:.1}"),
        _ => "-".into(),
    }
}

fn print_steps(steps: &[&StepReport]) {
    println!(
        "| step | offered/s | done/s | workflows (total) | ok / failed / unfinished | end to end p50/p99 ms | dispatch p50/p99 ms | event to status p50/p99 ms | API writes/wf | sustained | load |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for s in steps {
        println!(
            "| {} | {} | {} | {} ({}) | {} / {} / {} | {} | {} | {} | {:.2} | {} | {} |",
            s.step,
            s.offered_per_s,
            s.throughput_per_s,
            s.workflows,
            s.cumulative_workflows,
            s.succeeded,
            s.failed,
            s.unfinished,
            lat(&s.end_to_end),
            lat(&s.dispatch),
            lat(&s.event_to_status),
            s.api_writes_per_workflow_total,
            if s.sustained { "yes" } else { "no" },
            s.loadavg
        );
    }
    println!();
    let names: Vec<String> = steps
        .first()
        .map(|s| s.cpu_ms_per_workflow.keys().cloned().collect())
        .unwrap_or_default();
    println!("CPU ms per workflow, and RSS MiB at the end of the step:");
    println!("| step | {} | services | all |", names.join(" | "));
    println!("|---|{}---|---|", "---|".repeat(names.len()));
    for s in steps {
        let cells: Vec<String> = names
            .iter()
            .map(|n| {
                format!(
                    "{:.2} ms, {:.0} MiB",
                    s.cpu_ms_per_workflow.get(n).copied().unwrap_or(f64::NAN),
                    s.rss_kib.get(n).copied().unwrap_or(0) as f64 / 1024.0
                )
            })
            .collect();
        println!(
            "| {} | {} | {:.2} ms | {:.2} ms |",
            s.step,
            cells.join(" | "),
            s.stack_cpu_ms_per_workflow,
            s.all_cpu_ms_per_workflow
        );
    }
    println!();
    println!("API writes per workflow after its creation:");
    for s in steps {
        let w: Vec<String> = s
            .api_writes_per_workflow
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        println!("  {}: {}", s.step, w.join(", "));
    }
    println!();
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Malformed steps fail before anything starts.
    steps_of(&args)?;
    check_limits(&args, tink_scale_bench::raise_open_files())?;
    let temp;
    let dir = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!(
        "tink-scale: {nproc} CPUs, {} NATS node(s), GOMAXPROCS for NATS {}, load {}, data in {}",
        args.nats_nodes,
        args.nats_gomaxprocs
            .map_or_else(|| "Go's default".to_string(), |n| n.to_string()),
        tink_scale_bench::loadavg(),
        dir.display()
    );
    let (mut stack, client) = start_stack(&args, &dir).await?;
    let result = run(&args, &mut stack, &client, nproc).await;
    if result.is_err() {
        eprintln!("logs: {}", stack.logs.display());
    }
    for p in &mut stack.procs {
        let _ = p.child.start_kill();
        let _ = p.child.wait().await;
    }
    if args.work_dir.is_none() && result.is_err() {
        // Keep the logs of a failed run.
        let keep = std::env::temp_dir().join(format!("tink-scale-logs-{}", std::process::id()));
        let _ = std::fs::rename(&stack.logs, &keep);
        eprintln!("logs kept in {}", keep.display());
    }
    result
}

async fn run(
    args: &Args,
    stack: &mut Stack,
    client: &kube::Client,
    nproc: usize,
) -> anyhow::Result<()> {
    let templates: Api<Template> = Api::namespaced(client.clone(), NAMESPACE);
    let t: Template = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "three", "namespace": NAMESPACE},
        "spec": {"actions": [
            {"name": "stream", "image": "quay.io/tinkerbell/actions/image2disk", "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}"}},
            {"name": "partition", "image": "busybox", "args": ["{{ formatPartition (index .Hardware.Disks 0) 1 }}"]},
            {"name": "kexec", "image": "quay.io/tinkerbell/actions/kexec"},
        ]},
    }))?;
    templates.create(&PostParams::default(), &t).await?;
    eprintln!("creating {} Hardware", args.agents);
    let hardware: Api<Hardware> = Api::namespaced(client.clone(), NAMESPACE);
    futures::stream::iter(0..args.agents)
        .map(|i| {
            let hardware = hardware.clone();
            async move {
                let hw: Hardware = tink_api::from_value(json!({
                    "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
                    "metadata": {"name": format!("m{i}"), "namespace": NAMESPACE},
                    "spec": {"networkInterfaces": {mac(i): {}}, "storageDevices": ["/dev/sda"]},
                }))?;
                hardware.create(&PostParams::default(), &hw).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;

    let server_rss_before: u64 = stack
        .procs
        .iter()
        .filter(|p| p.name.starts_with("server-"))
        .map(Proc::rss)
        .sum();
    let per_process = args.agents_per_process.max(1);
    let processes = args.agents.div_ceil(per_process).max(1);
    eprintln!(
        "connecting {} agents from {processes} processes",
        args.agents
    );
    let sources: Vec<String> = (1..=args.source_addresses)
        .map(|k| format!("127.0.1.{k}"))
        .collect();
    let connect_began = Instant::now();
    let seen: Shared = Arc::default();
    let mut agents_stdin: Vec<ChildStdin> = Vec::new();
    let mut ready = tokio::task::JoinSet::new();
    for k in 0..processes {
        let first = k * per_process;
        let count = per_process.min(args.agents - first);
        let mut cmd = Command::new(stack.bins.join("tink-scale-agents"));
        cmd.arg("agents")
            .arg("--servers")
            .arg(stack.grpc.join(","))
            .arg("--agents")
            .arg(count.to_string())
            .arg("--first")
            .arg(first.to_string())
            .arg("--keepalive-seconds")
            .arg(args.agent_keepalive_seconds.to_string())
            .arg("--connect-concurrency")
            .arg((args.connect_concurrency / processes).max(1).to_string());
        if !sources.is_empty() {
            cmd.arg("--source-addresses").arg(sources.join(","));
        }
        let (agents, pid, stdin, stdout) = spawn_piped(&mut cmd)?;
        agents_stdin.push(stdin);
        let seen = seen.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("ready") {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                } else if let Some(r) = AgentRecord::parse(&line) {
                    let name = r
                        .workflow_id
                        .split('/')
                        .nth(1)
                        .unwrap_or_default()
                        .to_string();
                    lock(&seen).agent.insert(name, r);
                }
            }
        });
        ready.spawn(async move {
            ready_rx
                .await
                .with_context(|| format!("agent simulator {k} stopped before its agents connected"))
        });
        stack.procs.push(Proc {
            name: format!("agents-{k}"),
            child: agents,
            pid,
            log: None,
        });
    }
    let all_ready = async {
        while let Some(r) = ready.join_next().await {
            r??;
        }
        anyhow::Ok(())
    };
    tokio::select! {
        r = all_ready => r?,
        _ = tokio::time::sleep(Duration::from_secs(1800)) => bail!("agents did not connect in 30 minutes"),
    }
    let agents_connect_seconds = connect_began.elapsed().as_secs_f64();
    // Presence entries reach the controller.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let server_rss_after: u64 = stack
        .procs
        .iter()
        .filter(|p| p.name.starts_with("server-"))
        .map(Proc::rss)
        .sum();
    let per_agent =
        (server_rss_after.saturating_sub(server_rss_before)) as f64 / args.agents.max(1) as f64;
    let idle = if args.idle_seconds > 0 {
        Some(measure_idle(stack, args).await?)
    } else {
        None
    };

    // Aborted when the steps are done. With a back-off: once kube-lite is stopped, a watcher
    // without one fails at once on every poll, never yields, and the runtime's shutdown waits
    // for that worker for ever (the CI short mode hung there).
    let _watch = {
        let seen = seen.clone();
        let api: Api<Workflow> = Api::namespaced(client.clone(), NAMESPACE);
        AbortOnDrop(tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            while let Some(item) = stream.next().await {
                let Ok(w) = item else { continue };
                let state = w.status.as_ref().map(|s| s.state);
                if let Some(
                    st @ (WorkflowState::Succeeded
                    | WorkflowState::Failed
                    | WorkflowState::Canceled),
                ) = state
                {
                    lock(&seen)
                        .finished
                        .entry(w.name_any())
                        .or_insert((now_ns(), st));
                }
            }
        }))
    };

    let mut reports = Vec::new();
    let mut index = 0;
    for (k, (rate, count)) in steps_of(args)?.into_iter().enumerate() {
        let r = run_step(
            args,
            stack,
            client,
            &seen,
            &format!("s{k}"),
            rate,
            count,
            index,
        )
        .await?;
        index += count;
        reports.push(r);
    }
    let capacity = reports
        .iter()
        .filter(|r| r.sustained)
        .map(|r| r.offered_per_s)
        .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.max(r))));
    let overload = match (args.overload, capacity) {
        (true, Some(c)) => {
            let count = reports.iter().map(|r| r.workflows).max().unwrap_or(1000);
            Some(
                run_step(
                    args,
                    stack,
                    client,
                    &seen,
                    "overload",
                    2.0 * c,
                    count,
                    index,
                )
                .await?,
            )
        }
        _ => None,
    };

    let events = if args.events_seconds > 0 {
        eprintln!("events: through the servers, then the bare JetStream publisher");
        let (through, cpu_s) = load_run(stack, args, "events").await?;
        let (bare, cpu_b) = load_run(stack, args, "publish").await?;
        let (a, b) = (
            through.events as f64 / through.seconds.max(1e-9),
            bare.events as f64 / bare.seconds.max(1e-9),
        );
        Some(EventsReport {
            through_servers: through,
            bare_publisher: bare,
            servers_per_s: a.round(),
            bare_per_s: b.round(),
            ratio: (a / b.max(1e-9) * 100.0).round() / 100.0,
            cpu_us_per_event_servers: cpu_s,
            cpu_us_per_event_bare: cpu_b,
            loadavg: tink_scale_bench::loadavg(),
        })
    } else {
        None
    };
    let report = Report {
        nproc,
        nats_nodes: args.nats_nodes,
        nats_gomaxprocs: args.nats_gomaxprocs,
        servers: args.servers,
        agents: args.agents,
        agents_connect_seconds: (agents_connect_seconds * 10.0).round() / 10.0,
        server_rss_kib_per_agent: (per_agent * 10.0).round() / 10.0,
        idle,
        steps: reports,
        capacity_per_s: capacity,
        overload,
        events,
        rss_kib_end: stack.rss(),
        loadavg_end: tink_scale_bench::loadavg(),
    };
    drop(agents_stdin);

    println!(
        "## tink-scale: {} agents, {} servers, {} CPUs; agents connected in {:.1} s; server RSS per connected agent {:.1} KiB",
        report.agents,
        report.servers,
        report.nproc,
        report.agents_connect_seconds,
        report.server_rss_kib_per_agent
    );
    if let Some(i) = &report.idle {
        println!(
            "at rest ({:.0} s): services {:.3} cores = {:.3} per 10,000 agents; load generator {:.3} cores (apart); NATS {}/s in, {}/s out; load {}",
            i.seconds,
            i.services_cores,
            i.services_cores_per_10k_agents,
            i.load_generator_cores,
            i.nats_msgs_in_per_s,
            i.nats_msgs_out_per_s,
            i.loadavg
        );
        println!("  cores by process: {:?}", i.cores);
    }
    println!();
    let mut all: Vec<&StepReport> = report.steps.iter().collect();
    all.extend(report.overload.iter());
    print_steps(&all);
    match report.capacity_per_s {
        Some(c) => println!("capacity (highest sustained offered rate): {c}/s"),
        None => println!("capacity: no step was sustained"),
    }
    if let (Some(o), Some(c)) = (&report.overload, report.capacity_per_s) {
        {
            println!(
                "overload: offered {}/s, completed {}/s = {:.0}% of capacity; {} of {} succeeded",
                o.offered_per_s,
                o.throughput_per_s,
                o.throughput_per_s / c * 100.0,
                o.succeeded,
                o.workflows
            );
        }
    }
    if let Some(e) = &report.events {
        println!(
            "events ({} connections, {} s each): through the servers {}/s (p50/p99 {:?}/{:?} ms), bare JetStream publisher {}/s (p50/p99 {:?}/{:?} ms): ratio {:.2}; load {}",
            args.events_connections,
            args.events_seconds,
            e.servers_per_s,
            e.through_servers.p50_ms,
            e.through_servers.p99_ms,
            e.bare_per_s,
            e.bare_publisher.p50_ms,
            e.bare_publisher.p99_ms,
            e.ratio,
            e.loadavg
        );
        println!(
            "  CPU us per event through the servers: {:?}",
            e.cpu_us_per_event_servers
        );
        println!(
            "  CPU us per event, bare publisher:      {:?}",
            e.cpu_us_per_event_bare
        );
    }
    println!(
        "RSS at the end (KiB): {:?}; load {}",
        report.rss_kib_end, report.loadavg_end
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let bad: usize = all.iter().map(|s| s.failed + s.unfinished).sum();
    if bad > 0 {
        bail!("{bad} workflows did not succeed");
    }
    Ok(())
}

/// Whether the fleet fits the open files limit (inherited by every process started here) and
/// the ephemeral ports of its source addresses; the error names the limit.
fn check_limits(args: &Args, files: u64) -> anyhow::Result<()> {
    let servers = args.servers.max(1);
    let per_server = args.agents.div_ceil(servers) as u64 + 500;
    if files < per_server {
        bail!(
            "the open files limit is {files}: each of {servers} servers would hold {} connections; \
             use more --servers (at most {} agents each) or raise the limit (ulimit -n)",
            args.agents.div_ceil(servers),
            files.saturating_sub(500)
        );
    }
    let per_process = args.agents_per_process.min(args.agents) as u64 + 200;
    if files < per_process {
        bail!(
            "the open files limit is {files}: lower --agents-per-process to at most {}",
            files.saturating_sub(200)
        );
    }
    // Each address (or, without them, each server's address) has about 28,000 ephemeral
    // ports (32768-60999).
    const PORTS: usize = 28_000;
    let per_address = if args.source_addresses == 0 {
        args.agents.div_ceil(servers)
    } else {
        args.agents.div_ceil(usize::from(args.source_addresses))
    };
    if per_address > PORTS {
        bail!(
            "{per_address} connections per source address exceed its ~{PORTS} ephemeral ports: \
             use --source-addresses {}",
            args.agents.div_ceil(PORTS)
        );
    }
    Ok(())
}

/// The connected fleet at rest: CPU of every process and NATS's message rate.
#[derive(Debug, Clone, Serialize)]
struct IdleReport {
    seconds: f64,
    /// Cores (CPU seconds per second) by process.
    cores: BTreeMap<String, f64>,
    /// The services' sum (NATS, kube-lite, controller, servers), without the load generators.
    services_cores: f64,
    /// The same per 10,000 connected agents.
    services_cores_per_10k_agents: f64,
    /// The simulated agents' processes together (the load generator).
    load_generator_cores: f64,
    /// Messages into and out of nats-server (all nodes), per second.
    nats_msgs_in_per_s: f64,
    nats_msgs_out_per_s: f64,
    loadavg: String,
}

/// in_msgs and out_msgs of every NATS node (its /varz).
async fn nats_msgs(stack: &Stack) -> anyhow::Result<(f64, f64)> {
    let (mut inn, mut out) = (0.0, 0.0);
    for mon in &stack.nats_monitors {
        let (status, body) = http_get(mon, "/varz").await?;
        if status != 200 {
            bail!("nats-server {mon}/varz answered {status}");
        }
        let v: serde_json::Value = serde_json::from_str(&body).context("parsing /varz")?;
        inn += v["in_msgs"].as_f64().context("/varz: no in_msgs")?;
        out += v["out_msgs"].as_f64().context("/varz: no out_msgs")?;
    }
    Ok((inn, out))
}

async fn measure_idle(stack: &Stack, args: &Args) -> anyhow::Result<IdleReport> {
    eprintln!(
        "at rest: {} agents connected, {} s",
        args.agents, args.idle_seconds
    );
    let (cpu0, msgs0, t0) = (stack.cpu(), nats_msgs(stack).await?, Instant::now());
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let (cpu1, msgs1) = (stack.cpu(), nats_msgs(stack).await?);
    let seconds = t0.elapsed().as_secs_f64();
    let cores: BTreeMap<String, f64> = cpu1
        .iter()
        .map(|(k, v)| {
            let before = cpu0.get(k).copied().unwrap_or(0.0);
            (
                k.clone(),
                ((v - before) / seconds * 1000.0).round() / 1000.0,
            )
        })
        .collect();
    let load_generator: f64 = cores
        .iter()
        .filter(|(k, _)| k.starts_with("agents"))
        .map(|(_, v)| v)
        .sum();
    let services: f64 = cores
        .iter()
        .filter(|(k, _)| is_service(k))
        .map(|(_, v)| v)
        .sum();
    Ok(IdleReport {
        seconds: (seconds * 10.0).round() / 10.0,
        services_cores: (services * 1000.0).round() / 1000.0,
        services_cores_per_10k_agents: (services * 10_000.0 / args.agents.max(1) as f64 * 1000.0)
            .round()
            / 1000.0,
        load_generator_cores: (load_generator * 1000.0).round() / 1000.0,
        cores,
        nats_msgs_in_per_s: ((msgs1.0 - msgs0.0) / seconds * 10.0).round() / 10.0,
        nats_msgs_out_per_s: ((msgs1.1 - msgs0.1) / seconds * 10.0).round() / 10.0,
        loadavg: tink_scale_bench::loadavg(),
    })
}

fn steps_of(args: &Args) -> anyhow::Result<Vec<(f64, usize)>> {
    args.steps.iter().map(|s| parse_step(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["tink-scale"].iter().chain(extra))
    }

    #[test]
    fn a_fleet_over_the_open_files_limit_is_refused_naming_it() {
        // 100,000 agents on 4 servers are 25,000 connections each: over a 20,000 limit.
        let a = args(&[
            "--agents",
            "100000",
            "--servers",
            "4",
            "--source-addresses",
            "8",
        ]);
        let e = check_limits(&a, 20_000).unwrap_err().to_string();
        assert!(e.contains("open files limit is 20000"), "{e}");
        assert!(e.contains("--servers"), "{e}");
        // Six servers fit, spread over load generator processes of 16,000.
        let a = args(&[
            "--agents",
            "100000",
            "--servers",
            "6",
            "--source-addresses",
            "8",
        ]);
        check_limits(&a, 20_000).unwrap();
        // One load generator process for the whole fleet does not.
        let a = args(&[
            "--agents",
            "100000",
            "--servers",
            "6",
            "--source-addresses",
            "8",
            "--agents-per-process",
            "100000",
        ]);
        let e = check_limits(&a, 20_000).unwrap_err().to_string();
        assert!(e.contains("--agents-per-process"), "{e}");
    }

    #[test]
    fn a_fleet_over_the_ephemeral_ports_asks_for_source_addresses() {
        let a = args(&["--agents", "60000", "--servers", "1"]);
        let e = check_limits(&a, 1_000_000).unwrap_err().to_string();
        assert!(e.contains("--source-addresses 3"), "{e}");
        let a = args(&[
            "--agents",
            "60000",
            "--servers",
            "1",
            "--source-addresses",
            "3",
        ]);
        check_limits(&a, 1_000_000).unwrap();
    }
}
