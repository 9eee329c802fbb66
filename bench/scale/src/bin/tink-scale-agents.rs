//! `tink-scale-agents`: the load side of the at-scale benchmark, in a process of its own so its
//! CPU can be measured apart from the stack's.
//!
//! - `agents`: N simulated machines, each with its own HTTP/2 connection and `GetWorkflows`
//!   stream to one of the servers (round robin). A machine runs every workflow it is sent with
//!   an instant action runtime, as the real agent reports it: a `WorkflowReceived` receipt, then
//!   `ActionStarted` and `ActionSucceeded` per action, each confirmed before the next. It prints
//!   `ready N` once every stream is open, then one `W <workflow> <start received ns> <last event
//!   confirmed ns>` line per workflow; it stops when stdin closes.
//! - `events`: C connections publish events through the servers, each again on confirmation.
//! - `publish`: the bare JetStream publisher: C tasks doing the same acknowledged publishes
//!   (same subjects, headers and stream) straight to NATS, over as many NATS connections as
//!   there are servers.
//!
//! `events` and `publish` print `ready`, wait for a `go` line on stdin, run for the given
//! seconds, print one JSON line ([`LoadResult`]) and wait for stdin to close.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use futures::StreamExt as _;
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;
use tink_proto::workflow::v2::{
    Event, GetWorkflowsRequest, PublishEventRequest, event, get_workflows_response,
};
use tink_scale_bench::{AgentRecord, LoadResult, event, mac, now_ns, quantile};
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

/// mimalloc instead of glibc malloc: allocation is a large share of a request's cost here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about = "Simulated agents and event load generators for tink-scale")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulated machines running workflows with an instant action runtime.
    Agents {
        /// The servers' gRPC addresses (host:port), comma separated; agent i uses i mod count.
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<String>,
        /// How many machines (agent ids `mac(first)` .. `mac(first+N-1)`).
        #[arg(long, default_value_t = 1000)]
        agents: usize,
        /// The first machine's index (several processes share a fleet: one process holds at
        /// most its open files limit of connections).
        #[arg(long, default_value_t = 0)]
        first: usize,
        /// Connections being opened at once.
        #[arg(long, default_value_t = 256)]
        connect_concurrency: usize,
        /// Source addresses (e.g. 127.0.1.1,127.0.1.2), comma separated; machine i connects
        /// from address (i / servers) mod count. Each address has its own ephemeral ports.
        /// Default: the kernel's choice.
        #[arg(long, value_delimiter = ',')]
        source_addresses: Vec<std::net::IpAddr>,
        /// HTTP/2 keepalive ping interval in seconds, as the real agent sends them (its
        /// default is 30 s); 0 sends none.
        #[arg(long, default_value_t = 30)]
        keepalive_seconds: u64,
    },
    /// Events published through the servers as fast as they are confirmed.
    Events {
        /// The servers' gRPC addresses (host:port), comma separated.
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<String>,
        /// Connections, each with one publish in flight.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Seconds to measure.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// The bare JetStream publisher: the servers' acknowledged publishes, straight to NATS.
    Publish {
        /// The NATS URL.
        #[arg(long)]
        nats_url: String,
        /// NATS connections (as many as the servers have).
        #[arg(long, default_value_t = 1)]
        nats_connections: usize,
        /// Publishers, each with one publish in flight.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Seconds to measure.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tink_scale_bench::raise_open_files();
    match args.command {
        Command::Agents {
            servers,
            agents,
            first,
            connect_concurrency,
            source_addresses,
            keepalive_seconds,
        } => {
            let fleet = Fleet {
                servers,
                agents,
                first,
                sources: source_addresses,
                keepalive: (keepalive_seconds > 0).then(|| Duration::from_secs(keepalive_seconds)),
            };
            run_agents(fleet, connect_concurrency.max(1)).await
        }
        Command::Events {
            servers,
            connections,
            seconds,
        } => run_events(servers, connections.max(1), seconds).await,
        Command::Publish {
            nats_url,
            nats_connections,
            connections,
            seconds,
        } => {
            run_publish(
                nats_url,
                nats_connections.max(1),
                connections.max(1),
                seconds,
            )
            .await
        }
    }
}

/// Which machines this process simulates, and how they connect.
struct Fleet {
    servers: Vec<String>,
    agents: usize,
    first: usize,
    sources: Vec<std::net::IpAddr>,
    keepalive: Option<Duration>,
}

impl Fleet {
    /// Machine `i`'s server and source address: servers round robin, and each server's
    /// machines spread over the source addresses.
    fn route(&self, i: usize) -> (String, Option<std::net::IpAddr>) {
        let n = self.servers.len().max(1);
        let source = (!self.sources.is_empty()).then(|| self.sources[(i / n) % self.sources.len()]);
        (self.servers[i % n].clone(), source)
    }
}

async fn connect(
    addr: &str,
    source: Option<std::net::IpAddr>,
    keepalive: Option<Duration>,
) -> anyhow::Result<Channel> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .local_address(source);
    if let Some(every) = keepalive {
        // As the real agent (agent/src/client.rs): pings while the stream is open.
        endpoint = endpoint
            .http2_keep_alive_interval(every)
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
    }
    endpoint.connect().await.with_context(|| match source {
        Some(s) => format!("connecting to {addr} from {s}"),
        None => format!("connecting to {addr}"),
    })
}

/// Lines for stdout, written by one task (bounded: a slow reader slows the agents down).
type Out = mpsc::Sender<String>;

/// Writes the lines to stdout on a thread of its own (tokio's stdout is not in this build's
/// features, and a blocked pipe must not block the runtime).
fn write_stdout(mut rx: mpsc::Receiver<String>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        while let Some(line) = rx.blocking_recv() {
            if out.write_all(line.as_bytes()).is_err() {
                return;
            }
            while let Ok(line) = rx.try_recv() {
                if out.write_all(line.as_bytes()).is_err() {
                    return;
                }
            }
            if out.flush().is_err() {
                return;
            }
        }
        let _ = out.flush();
    })
}

/// Resolves when stdin reaches its end (or says `go`, with `go` true); read on a thread of
/// its own.
async fn stdin_line(go: bool) {
    let (tx, mut rx) = mpsc::channel::<String>(16);
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        if go && line.trim() == "go" {
            return;
        }
    }
}

#[derive(Default)]
struct AgentCounters {
    workflows: AtomicU64,
    events: AtomicU64,
    retries: AtomicU64,
    reconnects: AtomicU64,
}

async fn run_agents(fleet: Fleet, connect_concurrency: usize) -> anyhow::Result<()> {
    let agents = fleet.agents;
    let (tx, rx) = mpsc::channel::<String>(4096);
    let writer = write_stdout(rx);
    let counters = Arc::new(AgentCounters::default());
    let limit = Arc::new(tokio::sync::Semaphore::new(connect_concurrency));
    let (opened_tx, mut opened_rx) = mpsc::channel::<anyhow::Result<()>>(1024);
    let mut tasks = tokio::task::JoinSet::new();
    for i in fleet.first..fleet.first + agents {
        let (addr, source) = fleet.route(i);
        let keepalive = fleet.keepalive;
        let (tx, counters, limit, opened) = (
            tx.clone(),
            counters.clone(),
            limit.clone(),
            opened_tx.clone(),
        );
        tasks.spawn(async move {
            let id = mac(i);
            let first = async {
                let _permit = limit.acquire().await?;
                let channel = connect(&addr, source, keepalive).await?;
                let mut client = WorkflowServiceClient::new(channel);
                // A machine is admitted once the controller has published its Hardware's ids:
                // retry a refusal for a while, as the real agent does.
                let deadline = Instant::now() + Duration::from_secs(120);
                let stream = loop {
                    match open_stream(&mut client, &id).await {
                        Ok(s) => break s,
                        Err(e) if Instant::now() < deadline => {
                            let _ = e;
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        Err(e) => return Err(e),
                    }
                };
                anyhow::Ok((client, stream))
            }
            .await;
            let (client, stream) = match first {
                Ok(v) => {
                    let _ = opened.send(Ok(())).await;
                    v
                }
                Err(e) => {
                    let _ = opened.send(Err(e)).await;
                    return;
                }
            };
            drop(opened);
            agent(client, stream, id, tx, counters).await;
        });
    }
    drop(opened_tx);
    let began = Instant::now();
    for n in 0..agents {
        match opened_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e.context(format!("agent {n} could not connect"))),
            None => anyhow::bail!("agents stopped before they connected"),
        }
    }
    eprintln!(
        "tink-scale-agents: {agents} streams open in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    tx.send(format!("ready {agents}\n")).await?;
    stdin_line(false).await;
    tasks.abort_all();
    drop(tx);
    while tasks.join_next().await.is_some() {}
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    eprintln!(
        "tink-scale-agents: {} workflows, {} events, {} retried publishes, {} reconnects",
        counters.workflows.load(Ordering::Relaxed),
        counters.events.load(Ordering::Relaxed),
        counters.retries.load(Ordering::Relaxed),
        counters.reconnects.load(Ordering::Relaxed),
    );
    Ok(())
}

type Commands = tonic::Streaming<tink_proto::workflow::v2::GetWorkflowsResponse>;

async fn open_stream(
    client: &mut WorkflowServiceClient<Channel>,
    id: &str,
) -> anyhow::Result<Commands> {
    Ok(client
        .get_workflows(GetWorkflowsRequest {
            agent_id: id.to_string(),
            ..Default::default()
        })
        .await?
        .into_inner())
}

/// One machine: runs every StartWorkflow it gets; reopens its stream when it ends.
async fn agent(
    mut client: WorkflowServiceClient<Channel>,
    mut stream: Commands,
    id: String,
    out: Out,
    counters: Arc<AgentCounters>,
) {
    loop {
        let msg = match stream.next().await {
            Some(Ok(m)) => m,
            Some(Err(_)) | None => {
                counters.reconnects.fetch_add(1, Ordering::Relaxed);
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if let Ok(s) = open_stream(&mut client, &id).await {
                        stream = s;
                        break;
                    }
                }
                continue;
            }
        };
        let Some(get_workflows_response::Cmd::StartWorkflow(start)) = msg.cmd else {
            continue;
        };
        let Some(wf) = start.workflow else { continue };
        let dispatched_ns = now_ns();
        let mut kinds = vec![event::Event::WorkflowReceived({
            let mut r = event::WorkflowReceived::default();
            r.set_command(event::workflow_received::Command::Start);
            r
        })];
        for a in &wf.actions {
            kinds.push(event::Event::ActionStarted(event::ActionStarted {
                action_id: a.id.clone(),
            }));
            kinds.push(event::Event::ActionSucceeded(event::ActionSucceeded {
                action_id: a.id.clone(),
            }));
        }
        for kind in kinds {
            let ev = event(&wf.workflow_id, &id, kind);
            publish(&mut client, ev, &counters).await;
        }
        counters.workflows.fetch_add(1, Ordering::Relaxed);
        let record = AgentRecord {
            workflow_id: wf.workflow_id.clone(),
            dispatched_ns,
            last_event_ns: now_ns(),
        };
        if out.send(record.line()).await.is_err() {
            return;
        }
    }
}

/// Publishes until confirmed, retrying with the same event id as the real agent does.
async fn publish(client: &mut WorkflowServiceClient<Channel>, ev: Event, c: &AgentCounters) {
    let mut delay = Duration::from_millis(50);
    loop {
        let req = PublishEventRequest {
            event: Some(ev.clone()),
        };
        match client.publish_event(req).await {
            Ok(_) => {
                c.events.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                eprintln!("tink-scale-agents: event refused: {status}");
                return;
            }
            Err(_) => {
                c.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Confirmed publishes and their latencies, shared by the load tasks.
struct Load {
    stop_at: Instant,
    latencies: std::sync::Mutex<Vec<Duration>>,
    errors: AtomicU64,
}

impl Load {
    fn result(&self, seconds: f64) -> LoadResult {
        let mut l = self.latencies.lock().map(|l| l.clone()).unwrap_or_default();
        l.sort();
        LoadResult {
            events: l.len() as u64,
            errors: self.errors.load(Ordering::Relaxed),
            seconds,
            p50_ms: tink_scale_bench::ms(quantile(&l, 0.5)),
            p99_ms: tink_scale_bench::ms(quantile(&l, 0.99)),
        }
    }

    fn record(&self, local: Vec<Duration>) {
        if let Ok(mut l) = self.latencies.lock() {
            l.extend(local);
        }
    }
}

async fn ready_then_go() {
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ready");
        let _ = out.flush();
    }
    stdin_line(true).await;
}

async fn run_events(servers: Vec<String>, connections: usize, seconds: u64) -> anyhow::Result<()> {
    let mut clients = Vec::with_capacity(connections);
    for i in 0..connections {
        clients.push(WorkflowServiceClient::new(
            connect(&servers[i % servers.len()], None, None).await?,
        ));
    }
    ready_then_go().await;
    let began = Instant::now();
    let load = Arc::new(Load {
        stop_at: began + Duration::from_secs(seconds),
        latencies: Default::default(),
        errors: AtomicU64::new(0),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (i, mut client) in clients.into_iter().enumerate() {
        let load = load.clone();
        tasks.spawn(async move {
            let mut local = Vec::new();
            let template = tink_scale_bench::load_event(i);
            while Instant::now() < load.stop_at {
                let mut ev = template.clone();
                ev.event_id = uuid::Uuid::new_v4().to_string();
                let t = Instant::now();
                match client
                    .publish_event(PublishEventRequest { event: Some(ev) })
                    .await
                {
                    Ok(_) => local.push(t.elapsed()),
                    Err(_) => {
                        load.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            load.record(local);
        });
    }
    while tasks.join_next().await.is_some() {}
    finish(&load, began).await
}

async fn finish(load: &Load, began: Instant) -> anyhow::Result<()> {
    let result = load.result(began.elapsed().as_secs_f64());
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string(&result)?)?;
        out.flush()?;
    }
    stdin_line(false).await;
    Ok(())
}

async fn run_publish(
    url: String,
    nats_connections: usize,
    connections: usize,
    seconds: u64,
) -> anyhow::Result<()> {
    let mut contexts = Vec::with_capacity(nats_connections);
    for _ in 0..nats_connections {
        // A comma-separated list names the nodes of a cluster.
        let servers: Vec<&str> = url.split(',').map(str::trim).collect();
        let client = async_nats::connect(servers.as_slice())
            .await
            .with_context(|| format!("connecting to {url}"))?;
        contexts.push(async_nats::jetstream::new(client));
    }
    ready_then_go().await;
    let began = Instant::now();
    let load = Arc::new(Load {
        stop_at: began + Duration::from_secs(seconds),
        latencies: Default::default(),
        errors: AtomicU64::new(0),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..connections {
        let (load, js) = (load.clone(), contexts[i % contexts.len()].clone());
        tasks.spawn(async move {
            let mut local = Vec::new();
            let template = tink_scale_bench::load_event(i);
            while Instant::now() < load.stop_at {
                let mut ev = template.clone();
                ev.event_id = uuid::Uuid::new_v4().to_string();
                let t = Instant::now();
                // What the server does per PublishEvent: validate, encode, the
                // de-duplication header, publish and wait for JetStream's acknowledgement.
                match tink_bus::publish_event_with_headers(&js, &ev, async_nats::HeaderMap::new())
                    .await
                {
                    Ok(_) => local.push(t.elapsed()),
                    Err(_) => {
                        load.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            load.record(local);
        });
    }
    while tasks.join_next().await.is_some() {}
    finish(&load, began).await
}
