//! Harness for the agent's end-to-end tests: real NATS (testkit), real server replicas (the
//! `tink_server` library on loopback), the real agent library and the real Docker engine. No
//! controller: commands are published on the dispatch subject and events read from JetStream.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use bollard::query_parameters::ListContainersOptionsBuilder;
use futures::StreamExt as _;
use tink_agent::{AgentConfig, DockerRunner, Metrics, RegistryConfig, RunnerConfig, ServerAddress};
use tink_bus::proto::{
    Event, GetWorkflowsResponse, Workflow, event, get_workflows_response, workflow,
};
use tink_testkit::docker::{TestImage, engine_or_skip};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Upper bound for anything a test waits for, only so a broken build fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub const IMAGE: &str = "tink-agent-test/busybox:1";

pub async fn within<F: Future>(what: &str, future: F) -> Result<F::Output, BoxError> {
    tokio::time::timeout(DEADLINE, future)
        .await
        .map_err(|_| format!("gave up waiting for {what}").into())
}

/// Test bus settings: short heartbeats and ack wait so takeovers and redeliveries happen fast.
pub fn bus_config() -> tink_bus::BusConfig {
    tink_bus::BusConfig {
        presence_ttl: Duration::from_secs(3),
        presence_heartbeat: Duration::from_millis(500),
        dispatch_recheck: Duration::from_secs(10),
        ..Default::default()
    }
}

/// An in-process server replica on 127.0.0.1:0.
pub struct Replica {
    pub addr: SocketAddr,
    pub shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_server::ServerError>>,
}

impl Replica {
    pub async fn start(nats_url: &str, replica_id: &str) -> Result<Replica, BoxError> {
        Replica::start_with(nats_url, replica_id, None).await
    }

    /// A replica serving TLS with `tls` (plain HTTP/2 when `None`).
    pub async fn start_with(
        nats_url: &str,
        replica_id: &str,
        tls: Option<tink_server::TlsConfig>,
    ) -> Result<Replica, BoxError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // The controller's part: the streams exist before a server can be ready (it only
        // verifies them).
        let js = async_nats::jetstream::new(async_nats::connect(nats_url).await?);
        tink_bus::ensure_streams(&js, &bus_config()).await?;
        let mut config = tink_server::ServerConfig::new(nats_url, replica_id);
        config.bus = bus_config();
        // No controller runs here to publish the admitted agent ids.
        config.admit_unknown_agents = true;
        config.keepalive_interval = Duration::from_secs(2);
        config.keepalive_timeout = Duration::from_secs(2);
        config.tls = tls;
        let shutdown = CancellationToken::new();
        let health = tink_runtime::Health::new();
        let task = tokio::spawn(tink_server::serve(
            config,
            listener,
            health.clone(),
            tink_server::Metrics::default(),
            shutdown.clone(),
        ));
        within("the replica to become ready", async {
            while !health.is_ready() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await?;
        Ok(Replica {
            addr,
            shutdown,
            task,
        })
    }

    pub async fn stop(self) -> Result<(), BoxError> {
        self.shutdown.cancel();
        within("the replica to stop", self.task).await???;
        Ok(())
    }
}

/// A TCP proxy in front of a replica. `kill` cuts every connection at once and refuses new
/// ones: what an agent sees when the server's process is killed.
pub struct Proxy {
    pub addr: SocketAddr,
    kill: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Result<Proxy, BoxError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let kill = CancellationToken::new();
        let stop = kill.clone();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    accepted = listener.accept() => {
                        let Ok((mut inbound, _)) = accepted else { continue };
                        connections.spawn(async move {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                }
            }
            // Dropping the listener and aborting the copies closes every socket now.
            connections.shutdown().await;
        });
        Ok(Proxy { addr, kill, task })
    }

    pub async fn kill(self) -> Result<(), BoxError> {
        self.kill.cancel();
        within("the proxy to die", self.task).await??;
        Ok(())
    }
}

/// A running in-process agent.
pub struct Agent {
    pub id: String,
    pub metrics: Metrics,
    pub health: tink_runtime::Health,
    pub runner: DockerRunner,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_agent::ClientError>>,
    _work: tempfile::TempDir,
}

impl Agent {
    /// Starts an agent against `servers` (tried in order). `None` when Docker tests are skipped.
    pub async fn start(id: &str, servers: &[SocketAddr]) -> Result<Option<Agent>, BoxError> {
        Agent::start_with(id, servers, None).await
    }

    /// Like [`Agent::start`], reading the machine's inventory under `inventory_root`.
    pub async fn start_with(
        id: &str,
        servers: &[SocketAddr],
        inventory_root: Option<std::path::PathBuf>,
    ) -> Result<Option<Agent>, BoxError> {
        let Some(docker) = engine_or_skip().await? else {
            return Ok(None);
        };
        TestImage::busybox(IMAGE).ensure(&docker).await?;
        let work = tempfile::tempdir()?;
        let runner = DockerRunner::connect(RunnerConfig {
            agent_id: id.to_owned(),
            docker_host: None,
            registry: RegistryConfig::default(),
            default_timeout: None,
            stop_grace: Duration::from_secs(1),
            work_dir: work.path().to_owned(),
            // Docker on the test machines runs inside a container that cannot grant all capabilities.
            privileged: false,
        })
        .await?;
        let addresses = servers
            .iter()
            .map(|a| a.to_string().parse::<ServerAddress>())
            .collect::<Result<Vec<_>, _>>()?;
        let mut config = AgentConfig::new(id, addresses);
        config.backoff_initial = Duration::from_millis(50);
        config.backoff_max = Duration::from_secs(1);
        config.request_timeout = Duration::from_secs(5);
        config.keepalive_interval = Duration::from_secs(2);
        config.inventory_root = inventory_root;
        let health = tink_runtime::Health::new();
        let metrics = Metrics::default();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(tink_agent::run(
            config,
            runner.clone(),
            health.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        Ok(Some(Agent {
            id: id.to_owned(),
            metrics,
            health,
            runner,
            shutdown,
            task,
            _work: work,
        }))
    }

    pub async fn stop(self) -> Result<(), BoxError> {
        self.shutdown.cancel();
        within("the agent to stop", self.task).await???;
        Ok(())
    }

    /// Containers this agent created that still exist.
    pub async fn containers(&self) -> Result<usize, BoxError> {
        let filters = HashMap::from([(
            "label".to_owned(),
            vec![format!("{}={}", tink_agent::runtime::LABEL_AGENT, self.id)],
        )]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        Ok(self
            .runner
            .docker()
            .list_containers(Some(options))
            .await?
            .len())
    }
}

pub async fn jetstream(nats_url: &str) -> Result<jetstream::Context, BoxError> {
    Ok(jetstream::new(async_nats::connect(nats_url).await?))
}

/// Waits until the agent's presence entry names `server`.
pub async fn wait_presence(
    js: &jetstream::Context,
    agent_id: &str,
    server: &str,
) -> Result<(), BoxError> {
    let kv = js.get_key_value(tink_bus::PRESENCE_BUCKET).await?;
    let key = tink_bus::agent_token(agent_id)?;
    within(
        &format!("agent {agent_id} to be connected to {server}"),
        async {
            loop {
                if let Ok(Some(value)) = kv.get(&key).await
                    && tink_bus::Presence::from_bytes(&value).is_ok_and(|p| p.server == server)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await
}

/// A shell-script action on the test image.
pub fn script(id: &str, script: &str) -> workflow::Action {
    workflow::Action {
        id: id.into(),
        name: format!("step-{id}"),
        image: IMAGE.into(),
        cmd: Some("/bin/sh".into()),
        args: vec!["-c".into(), script.into()],
        ..Default::default()
    }
}

/// The trace id of the `traceparent` every test command carries.
pub const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
/// The parent span id in that `traceparent`.
pub const PARENT_SPAN_ID: &str = "b7ad6b7169203331";

pub fn start_command(workflow: Workflow) -> GetWorkflowsResponse {
    GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StartWorkflow(
            get_workflows_response::StartWorkflow {
                workflow: Some(workflow),
            },
        )),
        trace_context: HashMap::from([(
            "traceparent".to_owned(),
            format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01"),
        )]),
    }
}

pub fn stop_command(workflow_id: &str) -> GetWorkflowsResponse {
    GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StopWorkflow(
            get_workflows_response::StopWorkflow {
                workflow_id: workflow_id.into(),
                reason: Some("Deleted".into()),
                message: Some("the Workflow was deleted".into()),
            },
        )),
        ..Default::default()
    }
}

/// Publishes a command on the agent's dispatch subject, as the controller does.
pub async fn dispatch(
    js: &jetstream::Context,
    agent_id: &str,
    command: &GetWorkflowsResponse,
) -> Result<(), BoxError> {
    let msg_id = uuid::Uuid::new_v4().to_string();
    tink_bus::publish_command(
        js,
        agent_id,
        command,
        &msg_id,
        &opentelemetry::Context::new(),
    )
    .await?;
    Ok(())
}

/// Every event stored for a workflow, in order.
pub async fn stored_events(
    js: &jetstream::Context,
    workflow_id: &str,
) -> Result<Vec<Event>, BoxError> {
    Ok(stored_messages(js, workflow_id)
        .await?
        .into_iter()
        .map(|(e, _)| e)
        .collect())
}

/// Every event stored for a workflow, in order, with its NATS headers.
pub async fn stored_messages(
    js: &jetstream::Context,
    workflow_id: &str,
) -> Result<Vec<(Event, async_nats::HeaderMap)>, BoxError> {
    let stream = js.get_stream(tink_bus::EVENTS_STREAM).await?;
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: tink_bus::events_subject(workflow_id)?,
            ..Default::default()
        })
        .await?;
    let pending = consumer.cached_info().num_pending;
    let mut messages = consumer.messages().await?;
    let mut out = Vec::new();
    for _ in 0..pending {
        let message = within("a stored event", messages.next())
            .await?
            .ok_or("the consumer ended")??;
        out.push((
            tink_bus::decode_event(&message.payload)?,
            message.headers.clone().unwrap_or_default(),
        ));
    }
    Ok(out)
}

/// Polls the stored events of a workflow until `done` holds for them (survives NATS restarts).
pub async fn events_until(
    js: &jetstream::Context,
    workflow_id: &str,
    done: impl Fn(&[Event]) -> bool,
) -> Result<Vec<Event>, BoxError> {
    let mut last = Vec::new();
    let found = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Ok(events) = stored_events(js, workflow_id).await {
                if done(&events) {
                    return events;
                }
                last = events;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    found.map_err(|_| {
        format!(
            "events of {workflow_id} never completed; last seen: {:?}",
            summary(&last)
        )
        .into()
    })
}

/// `"Started:a1"`, `"Succeeded:a1"`, `"Failed:a1:Reason"`, `"Rejected:Reason"`, `"Canceled:a1"`.
pub fn describe(event: &Event) -> String {
    match &event.event {
        Some(event::Event::ActionStarted(e)) => format!("Started:{}", e.action_id),
        Some(event::Event::ActionSucceeded(e)) => format!("Succeeded:{}", e.action_id),
        Some(event::Event::ActionFailed(e)) => format!(
            "Failed:{}:{}",
            e.action_id,
            e.failure_reason.as_deref().unwrap_or("")
        ),
        Some(event::Event::WorkflowRejected(e)) => {
            format!("Rejected:{}", e.failure_reason.as_deref().unwrap_or(""))
        }
        Some(event::Event::WorkflowCanceled(e)) => {
            format!("Canceled:{}", e.action_id.as_deref().unwrap_or(""))
        }
        Some(event::Event::WorkflowReceived(e)) => format!("Received:{:?}", e.command()),
        None => "None".to_owned(),
    }
}

/// The events, receipts left out (the receipt tests look at them; the others at progress).
pub fn summary(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| !matches!(e.event, Some(event::Event::WorkflowReceived(_))))
        .map(describe)
        .collect()
}

/// The events without the receipts.
pub fn progress(events: Vec<Event>) -> Vec<Event> {
    events
        .into_iter()
        .filter(|e| !matches!(e.event, Some(event::Event::WorkflowReceived(_))))
        .collect()
}

/// Every event, receipts included.
pub fn all_events(events: &[Event]) -> Vec<String> {
    events.iter().map(describe).collect()
}

/// Whether the last event ends the workflow (a failure, rejection, cancellation or the given
/// last action's success).
pub fn terminal(last_action: &str) -> impl Fn(&[Event]) -> bool {
    let last_action = last_action.to_owned();
    move |events: &[Event]| {
        events.iter().any(|e| match &e.event {
            Some(event::Event::ActionSucceeded(s)) => s.action_id == last_action,
            Some(
                event::Event::ActionFailed(_)
                | event::Event::WorkflowRejected(_)
                | event::Event::WorkflowCanceled(_),
            ) => true,
            _ => false,
        })
    }
}

/// A host directory mounted into actions to hold them until the test opens the gate.
pub struct Gate {
    dir: tempfile::TempDir,
}

impl Gate {
    pub fn new() -> Result<Gate, BoxError> {
        Ok(Gate {
            dir: tempfile::tempdir()?,
        })
    }

    pub fn volume(&self) -> String {
        format!("{}:/gate", self.dir.path().display())
    }

    /// A script that marks `name` as started and waits for the gate to open.
    pub fn script(name: &str) -> String {
        format!("touch /gate/{name}; while [ ! -e /gate/open ]; do sleep 0.05; done; echo passed")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub async fn wait_started(&self, name: &str) -> Result<(), BoxError> {
        let marker: PathBuf = self.dir.path().join(name);
        within(&format!("{name} to start"), async {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    pub fn open(&self) -> Result<(), BoxError> {
        std::fs::write(self.dir.path().join("open"), b"")?;
        Ok(())
    }
}
