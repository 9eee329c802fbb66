//! Controller benchmark: the whole path in one process (kube-lite with the generated CRDs, a
//! real nats-server, the real tink-server, the controller) with simulated agents over gRPC.
//!
//! `cargo bench -p tink-controller --bench controller-bench -- [--workflows N] [--agents A]
//! [--rate R] [--no-kube-events]`
//!
//! Reports, for three-action workflows created at R per second spread over A agents:
//! - Kubernetes API writes per workflow by kind (status, finalizer metadata, Events), the
//!   creation not counted;
//! - dispatch latency: from the create call to the agent receiving StartWorkflow;
//! - event-to-status latency: from the last event's PublishEvent answer (stored in JetStream)
//!   to a watch seeing the Workflow `Succeeded` (includes the watch delivery), plus the
//!   controller's own histogram (event stored -> status written) as bucket upper bounds;
//! - end-to-end throughput.
//!
//! With `--inventories N` it measures instead what issue 30 asks: N machines (Hardware created
//! first), each a simulated agent that opens its stream (taking its session token) and reports
//! its inventory (the fixture machine's, with its own serial) through tink-server, all at once;
//! reported when every `ReportInventory` was answered (stored in JetStream), stored when every
//! Hardware's status carries it, and the Kubernetes API writes per machine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Template, Workflow, WorkflowState};
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;
use tink_proto::workflow::v2::{
    Event, GetWorkflowsRequest, PublishEventRequest, event, get_workflows_response,
};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

const NS: &str = "bench";

#[derive(Debug)]
struct Args {
    workflows: usize,
    agents: usize,
    rate: f64,
    kube_events: bool,
    inventories: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        workflows: 1000,
        agents: 1000,
        rate: 200.0,
        kube_events: true,
        inventories: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match a.as_str() {
            "--workflows" => args.workflows = value("--workflows")?.parse()?,
            "--agents" => args.agents = value("--agents")?.parse()?,
            "--rate" => args.rate = value("--rate")?.parse()?,
            "--no-kube-events" => args.kube_events = false,
            "--inventories" => args.inventories = value("--inventories")?.parse()?,
            // cargo bench passes --bench
            "--bench" => {}
            "--help" | "-h" => {
                println!(
                    "controller-bench [--workflows N] [--agents A] [--rate PER_SECOND] [--no-kube-events] | --inventories N"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    args.agents = args.agents.max(1);
    Ok(args)
}

#[derive(Default)]
struct Times {
    created: HashMap<String, Instant>,
    dispatched: HashMap<String, Instant>,
    last_event: HashMap<String, Instant>,
    succeeded: HashMap<String, Instant>,
}

type Shared = Arc<Mutex<Times>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Times> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

fn mac(i: usize) -> String {
    let b = i.to_be_bytes();
    format!("02:00:{:02x}:{:02x}:{:02x}:{:02x}", b[4], b[5], b[6], b[7])
}

fn percentiles(mut v: Vec<Duration>) -> String {
    if v.is_empty() {
        return "no samples".into();
    }
    v.sort();
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples)",
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3,
        v.len()
    )
}

async fn apply_crds(client: &kube::Client) -> anyhow::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in std::fs::read_dir(dir)? {
        let text = std::fs::read_to_string(entry?.path())?;
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)?;
        api.create(&PostParams::default(), &crd).await?;
    }
    Ok(())
}

/// One simulated agent: runs every workflow it gets, publishing Started/Succeeded per action.
async fn agent(
    channel: Channel,
    id: String,
    times: Shared,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut client = WorkflowServiceClient::new(channel);
    let mut stream = client
        .get_workflows(GetWorkflowsRequest {
            agent_id: id.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            m = stream.next() => m,
        };
        let Some(msg) = msg else { return Ok(()) };
        let Some(get_workflows_response::Cmd::StartWorkflow(start)) = msg?.cmd else {
            continue;
        };
        let Some(wf) = start.workflow else { continue };
        let name = wf
            .workflow_id
            .split('/')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        lock(&times).dispatched.insert(name.clone(), Instant::now());
        for a in &wf.actions {
            for e in [
                event::Event::ActionStarted(event::ActionStarted {
                    action_id: a.id.clone(),
                }),
                event::Event::ActionSucceeded(event::ActionSucceeded {
                    action_id: a.id.clone(),
                }),
            ] {
                let ev = Event {
                    workflow_id: wf.workflow_id.clone(),
                    agent_id: id.clone(),
                    event_id: uuid::Uuid::new_v4().to_string(),
                    event: Some(e),
                    ..Default::default()
                };
                client
                    .publish_event(PublishEventRequest { event: Some(ev) })
                    .await?;
            }
        }
        lock(&times).last_event.insert(name, Instant::now());
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    eprintln!("starting the stack ({args:?})");
    let kube = kube_lite::Server::start(kube_lite::Config::default()).await?;
    let client = kube.client()?;
    apply_crds(&client).await?;
    for ns in [NS, "tink-system"] {
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        let _ = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await;
    }
    let nats = tink_testkit::nats::NatsServer::start().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server_addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let server_health = tink_runtime::Health::new();
    tokio::spawn(tink_server::serve(
        {
            // The simulated agents present no session token.
            let mut c = tink_server::ServerConfig::new(nats.url(), "server-0");
            c.allow_unauthenticated_agents = true;
            // The simulated agents connect as soon as their Hardware exists, from one address.
            c.admit_unknown_agents = true;
            c.stream_opens_per_peer = 0;
            c.agent_calls_per_second = 0;
            c
        },
        listener,
        server_health.clone(),
        tink_server::Metrics::default(),
        stop.clone(),
    ));

    let mut config = tink_controller::ControllerConfig::new(nats.url(), "bench-controller");
    config.namespace = Some(NS.into());
    config.kube_events = args.kube_events;
    let health = tink_runtime::Health::new();
    let metrics = tink_controller::Metrics::default();
    let controller = tokio::spawn(tink_controller::run(
        config,
        client.clone(),
        health.clone(),
        metrics.clone(),
        stop.clone(),
    ));
    while !(health.is_ready() && server_health.is_ready() && metrics.leader.get() == 1) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    if args.inventories > 0 {
        inventories(&args, &client, server_addr, &metrics).await?;
        stop.cancel();
        let _ = controller.await;
        kube.shutdown().await;
        return Ok(());
    }

    let templates: Api<Template> = Api::namespaced(client.clone(), NS);
    let t: Template = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "three", "namespace": NS},
        "spec": {"actions": [
            {"name": "stream", "image": "quay.io/tinkerbell/actions/image2disk", "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}"}},
            {"name": "partition", "image": "busybox", "args": ["{{ formatPartition (index .Hardware.Disks 0) 1 }}"]},
            {"name": "kexec", "image": "quay.io/tinkerbell/actions/kexec"},
        ]},
    }))?;
    templates.create(&PostParams::default(), &t).await?;
    let hardware: Api<Hardware> = Api::namespaced(client.clone(), NS);
    let times: Shared = Arc::default();
    let channel = Channel::from_shared(format!("http://{server_addr}"))?
        .connect()
        .await?;
    eprintln!(
        "creating {} Hardware and connecting their agents",
        args.agents
    );
    let mut agents = tokio::task::JoinSet::new();
    for i in 0..args.agents {
        let hw: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": format!("m{i}"), "namespace": NS},
            "spec": {"networkInterfaces": {mac(i): {}}, "storageDevices": ["/dev/sda"]},
        }))?;
        hardware.create(&PostParams::default(), &hw).await?;
        agents.spawn(agent(channel.clone(), mac(i), times.clone(), stop.clone()));
    }
    // Let the presence entries reach the controller.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Watch for Succeeded.
    let workflows: Api<Workflow> = Api::namespaced(client.clone(), NS);
    {
        let times = times.clone();
        let workflows = workflows.clone();
        tokio::spawn(async move {
            let stream = watcher(workflows, watcher::Config::default()).applied_objects();
            futures::pin_mut!(stream);
            while let Some(Ok(w)) = stream.next().await {
                if w.status.as_ref().map(|s| s.state) == Some(WorkflowState::Succeeded) {
                    lock(&times)
                        .succeeded
                        .entry(w.name_any())
                        .or_insert_with(Instant::now);
                }
            }
        });
    }

    let before = (
        metrics.writes("status"),
        metrics.writes("finalizer"),
        metrics.writes("event"),
    );
    eprintln!("creating {} Workflows at {}/s", args.workflows, args.rate);
    let began = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / args.rate.max(0.001));
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..args.workflows {
        let due = began + gap.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let name = format!("wf{i}");
        let wf: Workflow = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"hardwareRef": {"name": format!("m{}", i % args.agents)}, "templateRef": {"name": "three"}},
        }))?;
        let permit = limit.clone().acquire_owned().await?;
        let (workflows, times) = (workflows.clone(), times.clone());
        creates.spawn(async move {
            lock(&times).created.insert(name, Instant::now());
            let r = workflows.create(&PostParams::default(), &wf).await;
            drop(permit);
            r.map(|_| ())
        });
    }
    while let Some(r) = creates.join_next().await {
        r??;
    }
    let created_in = began.elapsed();
    eprintln!(
        "created in {:.1} s; waiting for every Workflow to succeed",
        created_in.as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done = lock(&times).succeeded.len();
        if done >= args.workflows {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("only {done} of {} Workflows succeeded", args.workflows);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let total = began.elapsed();
    // Finalizer removals and Events trail the Succeeded write a little.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n = args.workflows as f64;
    let status = (metrics.writes("status") - before.0) as f64 / n;
    let finalizer = (metrics.writes("finalizer") - before.1) as f64 / n;
    let events = (metrics.writes("event") - before.2) as f64 / n;

    let (dispatch, e2s) = {
        let t = lock(&times);
        let dispatch: Vec<Duration> = t
            .dispatched
            .iter()
            .filter_map(|(k, d)| Some(d.duration_since(*t.created.get(k)?)))
            .collect();
        let e2s: Vec<Duration> = t
            .succeeded
            .iter()
            .filter_map(|(k, s)| Some(s.saturating_duration_since(*t.last_event.get(k)?)))
            .collect();
        (dispatch, e2s)
    };
    println!(
        "controller-bench: {} three-action workflows, {} agents, created at {}/s (achieved {:.0}/s)",
        args.workflows,
        args.agents,
        args.rate,
        n / created_in.as_secs_f64()
    );
    println!(
        "  end to end: all succeeded after {:.2} s = {:.0} workflows/s",
        total.as_secs_f64(),
        n / total.as_secs_f64()
    );
    println!(
        "  Kubernetes API writes per workflow: {:.2} status + {:.2} finalizer = {:.2} Workflow writes; {:.2} Event writes{}",
        status,
        finalizer,
        status + finalizer,
        events,
        if args.kube_events {
            ""
        } else {
            " (Events disabled)"
        }
    );
    println!(
        "  dispatch latency (create call -> agent has StartWorkflow): {}",
        percentiles(dispatch)
    );
    println!(
        "  event-to-status latency (last event stored -> watch sees Succeeded): {}",
        percentiles(e2s)
    );
    let mut text = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("e2s", "", metrics.event_to_status_seconds.clone());
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    println!(
        "  controller histogram (event stored -> status written): {}",
        histogram_quantiles(&text)
    );
    stop.cancel();
    let _ = controller.await;
    agents.abort_all();
    kube.shutdown().await;
    Ok(())
}

/// Reports answered UNAVAILABLE and sent again.
static RETRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One simulated machine's agent: opens its stream (the session token comes with it; refused
/// opens are retried as the agent does), waits at `start` until every agent is connected,
/// reports `inventory` (retrying UNAVAILABLE as the agent does), and holds the stream until
/// `stop` (its session lives as long). Returns the report's latency.
async fn report_inventory(
    channel: Channel,
    id: String,
    inventory: String,
    start: Arc<tokio::sync::Barrier>,
    stop: CancellationToken,
) -> anyhow::Result<Duration> {
    let mut client = WorkflowServiceClient::new(channel);
    let mut pause = Duration::from_millis(500);
    let response = loop {
        match client
            .get_workflows(GetWorkflowsRequest {
                agent_id: id.clone(),
                ..Default::default()
            })
            .await
        {
            Ok(r) => break r,
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                ) =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(s) => return Err(s.into()),
        }
    };
    let token = response
        .metadata()
        .get(tink_server::auth::TOKEN_HEADER)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("{id}: no session token"))?;
    let stream = response.into_inner();
    start.wait().await;
    let began = Instant::now();
    let mut pause = Duration::from_millis(500);
    let mut retries = 0u32;
    loop {
        let mut request = tonic::Request::new(tink_proto::workflow::v2::ReportInventoryRequest {
            agent_id: id.clone(),
            inventory: inventory.clone(),
            request_id: String::new(),
        });
        request
            .metadata_mut()
            .insert(tink_server::auth::TOKEN_HEADER, token.clone());
        match client.report_inventory(request).await {
            Ok(_) => break,
            Err(s) if s.code() == tonic::Code::Unavailable && retries < 20 => {
                retries += 1;
                RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(s) => return Err(s.into()),
        }
    }
    let took = began.elapsed();
    tokio::spawn(async move {
        stop.cancelled().await;
        drop(stream);
    });
    Ok(took)
}

/// The `--inventories N` run (see the module documentation).
async fn inventories(
    args: &Args,
    client: &kube::Client,
    server_addr: std::net::SocketAddr,
    metrics: &tink_controller::Metrics,
) -> anyhow::Result<()> {
    let n = args.inventories;
    let hardware: Api<Hardware> = Api::namespaced(client.clone(), NS);
    eprintln!("creating {n} Hardware");
    let began = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..n {
        let hw: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": format!("m{i}"), "namespace": NS},
            "spec": {"networkInterfaces": {mac(i): {}}},
        }))?;
        let (permit, hardware) = (limit.clone().acquire_owned().await?, hardware.clone());
        creates.spawn(async move {
            let r = hardware.create(&PostParams::default(), &hw).await;
            drop(permit);
            r.map(|_| ())
        });
    }
    while let Some(r) = creates.join_next().await {
        r??;
    }
    eprintln!("created in {:.1} s", began.elapsed().as_secs_f64());
    // Let the controller's cache hold them all (an inventory for a Hardware it has not seen yet
    // would be dropped).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/inventory/tests/fixtures/machine-a");
    let base = tink_inventory::collect(&fixture);
    // One HTTP/2 connection per 100 machines, as separate machines would have.
    let mut channels = Vec::new();
    for _ in 0..n.div_ceil(100) {
        channels.push(
            Channel::from_shared(format!("http://{server_addr}"))?
                .connect()
                .await?,
        );
    }
    let stop = CancellationToken::new();
    let before = metrics.writes("hardware_status");
    let written_before = metrics.inventory_count("written");
    eprintln!("{n} agents connect, then report their inventory at once");
    let start = Arc::new(tokio::sync::Barrier::new(n + 1));
    let mut reports = tokio::task::JoinSet::new();
    for i in 0..n {
        let mut inventory = base.clone();
        if let Some(system) = inventory.system.as_mut() {
            system.serial = Some(format!("BENCH-{i:06}"));
        }
        let json = String::from_utf8(inventory.to_json()?)?;
        reports.spawn(report_inventory(
            channels[i / 100].clone(),
            mac(i),
            json,
            start.clone(),
            stop.clone(),
        ));
    }
    let connecting = Instant::now();
    start.wait().await;
    eprintln!(
        "all {n} connected in {:.1} s; reporting",
        connecting.elapsed().as_secs_f64()
    );
    let began = Instant::now();
    let mut answers = Vec::with_capacity(n);
    while let Some(r) = reports.join_next().await {
        answers.push(r??);
    }
    let reported = began.elapsed();
    let deadline = Instant::now() + Duration::from_secs(600);
    while metrics.inventory_count("written") - written_before < n as u64 {
        if Instant::now() > deadline {
            anyhow::bail!(
                "only {} of {n} inventories written",
                metrics.inventory_count("written") - written_before
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored = began.elapsed();
    // Every Hardware carries its own serial (read back, not counted).
    let list = hardware.list(&Default::default()).await?;
    let with_serial = list
        .items
        .iter()
        .filter(|h| {
            h.status
                .as_ref()
                .and_then(|s| s.attributes.as_ref()?.in_band.as_ref())
                .and_then(|b| b.pointer("/product/serialNumber"))
                .and_then(|v| v.as_str())
                .is_some_and(|s| s.starts_with("BENCH-"))
        })
        .count();
    stop.cancel();
    println!("controller-bench --inventories: {n} machines reporting their inventory at once");
    println!(
        "  all answered (stored in JetStream) after {:.2} s; report latency (retries included) {}; {} reports retried after UNAVAILABLE",
        reported.as_secs_f64(),
        percentiles(answers),
        RETRIES.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!(
        "  all stored on their Hardware after {:.2} s = {:.0} inventories/s; {with_serial} of {n} read back with their own serial",
        stored.as_secs_f64(),
        n as f64 / stored.as_secs_f64()
    );
    println!(
        "  Kubernetes API writes per machine: {:.2} (status patches; the Hardware creation not counted)",
        (metrics.writes("hardware_status") - before) as f64 / n as f64
    );
    Ok(())
}

/// p50 and p99 upper bounds from an OpenMetrics histogram's cumulative buckets.
fn histogram_quantiles(text: &str) -> String {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines().filter(|l| l.contains("_bucket{")) {
        let le = line
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| {
                if v == "+Inf" {
                    Some(f64::INFINITY)
                } else {
                    v.parse().ok()
                }
            });
        let count = line.split_whitespace().nth(1).and_then(|v| v.parse().ok());
        if let (Some(le), Some(count)) = (le, count) {
            buckets.push((le, count));
        }
    }
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    if total == 0.0 {
        return "no samples".into();
    }
    let q = |q: f64| {
        buckets
            .iter()
            .find(|(_, c)| *c >= total * q)
            .map(|(le, _)| *le)
            .unwrap_or(f64::INFINITY)
    };
    format!(
        "p50 <= {:.1} ms, p99 <= {:.1} ms ({} events)",
        q(0.5) * 1e3,
        q(0.99) * 1e3,
        total
    )
}
