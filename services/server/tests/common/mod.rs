//! Test helpers: real NATS (testkit), server replicas in-process or as processes, a simulated
//! agent over real gRPC.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt as _;
use tink_bus::proto::workflow_service_client::WorkflowServiceClient;
use tink_bus::proto::{
    Event, GetWorkflowsRequest, GetWorkflowsResponse, PublishEventRequest, Workflow, event,
    get_workflows_response, workflow,
};
use tink_server::{Metrics, ServerConfig};
use tokio::io::AsyncBufReadExt as _;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Upper bound for anything a test waits for; only there so a broken build fails instead of
/// hanging. Never an assertion about speed.
pub const DEADLINE: Duration = Duration::from_secs(30);

pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(DEADLINE, future).await {
        Ok(output) => output,
        Err(_) => panic!("gave up waiting for {what}"),
    }
}

/// Test-friendly bus settings: short heartbeats and ack wait so takeovers and redeliveries
/// happen within a test.
pub fn bus_config() -> tink_bus::BusConfig {
    tink_bus::BusConfig {
        presence_ttl: Duration::from_secs(3),
        presence_heartbeat: Duration::from_millis(500),
        dispatch_recheck: Duration::from_secs(10),
        ..Default::default()
    }
}

/// An in-process replica on 127.0.0.1:0.
pub struct Replica {
    pub addr: SocketAddr,
    pub shutdown: CancellationToken,
    pub health: tink_runtime::Health,
    pub metrics: Metrics,
    task: tokio::task::JoinHandle<Result<(), tink_server::ServerError>>,
}

impl Replica {
    pub async fn start(nats_url: &str, replica_id: &str) -> Replica {
        Replica::start_with(nats_url, replica_id, None).await
    }

    pub async fn start_with(
        nats_url: &str,
        replica_id: &str,
        tls: Option<tink_server::TlsConfig>,
    ) -> Replica {
        let mut config = ServerConfig::new(nats_url, replica_id);
        config.bus = bus_config();
        config.tls = tls;
        // These tests are about delivery; identity has its own tests.
        config.allow_unauthenticated_agents = true;
        Replica::start_config(config).await
    }

    /// Starts a replica with `config`, admitting agent ids that no Hardware names (no controller
    /// runs here to publish the admitted ids; `start_config_strict` keeps admission on).
    pub async fn start_config(mut config: ServerConfig) -> Replica {
        config.admit_unknown_agents = true;
        Replica::start_config_strict(config).await
    }

    /// Starts a replica with `config` as it is. On an anonymous NATS the streams and buckets
    /// are created first, as the controller would (the servers only verify them); with NATS
    /// users, the test creates them as tink-controller.
    pub async fn start_config_strict(config: ServerConfig) -> Replica {
        if config.nats_auth == tink_bus::NatsAuth::default() {
            create_streams(&config.nats_url, &config.bus).await;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let health = tink_runtime::Health::new();
        let metrics = Metrics::default();
        let task = tokio::spawn(tink_server::serve(
            config,
            listener,
            health.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        let replica = Replica {
            addr,
            shutdown,
            health,
            metrics,
            task,
        };
        within("the replica to become ready", async {
            while !replica.health.is_ready() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        replica
    }

    pub async fn client(&self) -> WorkflowServiceClient<Channel> {
        client(self.addr).await
    }

    /// Graceful shutdown; returns the serve result.
    pub async fn stop(self) -> Result<(), tink_server::ServerError> {
        self.shutdown.cancel();
        within("the replica to stop", self.task)
            .await
            .expect("serve task did not panic")
    }
}

pub async fn client(addr: SocketAddr) -> WorkflowServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connects");
    WorkflowServiceClient::new(channel)
}

/// A replica running as a real `tink-server` process, for "a replica is killed".
pub struct ProcessReplica {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    child: tokio::process::Child,
}

impl ProcessReplica {
    pub async fn start(nats_url: &str, replica_id: &str) -> ProcessReplica {
        let bus = tink_bus::BusConfig {
            presence_ttl: Duration::from_secs(3),
            presence_heartbeat: Duration::from_secs(1),
            ..Default::default()
        };
        create_streams(nats_url, &bus).await;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-server"))
            .args(["--listen", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
            .args(["--nats-url", nats_url, "--replica-id", replica_id])
            .args(["--presence-ttl-seconds", "3"])
            .args([
                "--insecure",
                "--allow-unauthenticated-agents",
                "--admit-unknown-agents",
            ])
            .env("RUST_LOG", "info")
            .env("TINK_LOG_FORMAT", "text")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("tink-server starts");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(64);
        for output in [
            Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(stderr),
        ] {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(output).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    // Keep draining after the address was found so the pipe never fills.
                    let _ = tx.try_send(line);
                }
            });
        }
        let (addr, admin) = within("tink-server to log its addresses", async {
            let (mut addr, mut admin) = (None, None);
            loop {
                let line = strip_ansi(&rx.recv().await.expect("tink-server exited early"));
                let found = line
                    .split("addr=")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|a| a.parse::<SocketAddr>().ok());
                if line.contains("serving WorkflowService") {
                    addr = found;
                } else if line.contains("admin endpoint listening") {
                    admin = found;
                }
                if let (Some(addr), Some(admin)) = (addr, admin) {
                    return (addr, admin);
                }
            }
        })
        .await;
        ProcessReplica { addr, admin, child }
    }

    /// SIGKILL: no cleanup at all, like a crashed pod.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("killed");
    }
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// What the controller does before the servers can start: creates (or updates) the streams and
/// buckets on an anonymous NATS.
pub async fn create_streams(nats_url: &str, bus: &tink_bus::BusConfig) -> tink_bus::Bus {
    let js = jetstream(nats_url).await;
    tink_bus::ensure_streams(&js, bus)
        .await
        .expect("the streams and buckets are created")
}

pub async fn jetstream(nats_url: &str) -> jetstream::Context {
    let client = async_nats::connect(nats_url).await.expect("nats connects");
    jetstream::new(client)
}

pub fn start_command(workflow_id: &str) -> GetWorkflowsResponse {
    GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StartWorkflow(
            get_workflows_response::StartWorkflow {
                workflow: Some(Workflow {
                    workflow_id: workflow_id.into(),
                    actions: vec![workflow::Action {
                        id: "a1".into(),
                        name: "one".into(),
                        image: "busybox".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
        )),
        ..Default::default()
    }
}

/// Publishes a StartWorkflow for `workflow_id` to `agent_id` (as the controller would).
pub async fn dispatch(js: &jetstream::Context, agent_id: &str, workflow_id: &str) {
    tink_bus::publish_command(
        js,
        agent_id,
        &start_command(workflow_id),
        &format!("{workflow_id}.start"),
        &opentelemetry::Context::new(),
    )
    .await
    .expect("command stored");
}

pub type Commands = tonic::Streaming<GetWorkflowsResponse>;

/// Dispatches `workflow_id` to `agent_id` and receives it on a stream without credentials, as
/// an agent of the seed protocol would: the replica records the dispatch's target, so the
/// agent's events and output about it are accepted (from that agent only). Keep the returned
/// stream open while they are sent.
pub async fn receive_dispatch(
    js: &jetstream::Context,
    client: &mut WorkflowServiceClient<Channel>,
    agent_id: &str,
    workflow_id: &str,
) -> Commands {
    dispatch(js, agent_id, workflow_id).await;
    let mut commands = connect_agent(client, agent_id).await;
    assert_eq!(next_workflow(&mut commands).await, workflow_id);
    commands
}

/// Opens the agent's command stream.
pub async fn connect_agent(
    client: &mut WorkflowServiceClient<Channel>,
    agent_id: &str,
) -> Commands {
    client
        .get_workflows(GetWorkflowsRequest {
            agent_id: agent_id.into(),
            ..Default::default()
        })
        .await
        .expect("stream opens")
        .into_inner()
}

/// The workflow id of the next command on the stream.
pub async fn next_workflow(commands: &mut Commands) -> String {
    let command = within("a command", commands.message())
        .await
        .expect("stream ok")
        .expect("a command, not the end of the stream");
    tink_bus::command_workflow_id(&command)
        .expect("a workflow id")
        .to_string()
}

/// The workflow id of the next command, confirmed the way an agent does: its receipt is
/// published at once (the server acknowledges the command only then).
pub async fn receive(
    client: &mut WorkflowServiceClient<Channel>,
    commands: &mut Commands,
) -> String {
    let command = within("a command", commands.message())
        .await
        .expect("stream ok")
        .expect("a command, not the end of the stream");
    let workflow_id = tink_bus::command_workflow_id(&command)
        .expect("a workflow id")
        .to_string();
    let stop = matches!(
        command.cmd,
        Some(get_workflows_response::Cmd::StopWorkflow(_))
    );
    client
        .publish_event(receipt(&workflow_id, stop))
        .await
        .expect("receipt stored");
    workflow_id
}

/// A `WorkflowReceived` receipt.
pub fn receipt(workflow_id: &str, stop: bool) -> PublishEventRequest {
    use event::workflow_received::Command;
    let mut received = event::WorkflowReceived::default();
    received.set_command(if stop { Command::Stop } else { Command::Start });
    PublishEventRequest {
        event: Some(Event {
            workflow_id: workflow_id.into(),
            event_id: uuid::Uuid::new_v4().to_string(),
            agent_id: "aa:bb:cc:dd:ee:ff".into(),
            event: Some(event::Event::WorkflowReceived(received)),
            ..Default::default()
        }),
    }
}

/// The status the stream ends with.
pub async fn end_status(commands: &mut Commands) -> tonic::Status {
    match within("the stream to end", commands.message()).await {
        Ok(Some(command)) => panic!("expected the stream to end, got {command:?}"),
        Ok(None) => panic!("the stream ended without a status"),
        Err(status) => status,
    }
}

pub fn action_started(workflow_id: &str, action_id: &str, event_id: &str) -> PublishEventRequest {
    PublishEventRequest {
        event: Some(Event {
            workflow_id: workflow_id.into(),
            event_id: event_id.into(),
            agent_id: "aa:bb:cc:dd:ee:ff".into(),
            event: Some(event::Event::ActionStarted(event::ActionStarted {
                action_id: action_id.into(),
            })),
            ..Default::default()
        }),
    }
}

/// Stores an event as a replica would have (no checks): a past agent's, or one stored by an
/// older replica.
pub async fn store_event(js: &jetstream::Context, request: PublishEventRequest) {
    let event = request.event.expect("an event");
    tink_bus::publish_event(js, &event, &opentelemetry::Context::new())
        .await
        .expect("event stored");
}

/// All events stored for a workflow, decoded, with their headers.
pub async fn stored_events(
    js: &jetstream::Context,
    workflow_id: &str,
) -> Vec<(Event, async_nats::HeaderMap)> {
    let stream = js
        .get_stream(tink_bus::EVENTS_STREAM)
        .await
        .expect("events stream");
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: tink_bus::events_subject(workflow_id).expect("subject"),
            ..Default::default()
        })
        .await
        .expect("ordered consumer");
    let pending = consumer.cached_info().num_pending;
    let mut messages = consumer.messages().await.expect("messages");
    let mut out = Vec::new();
    for _ in 0..pending {
        let message = within("a stored event", messages.next())
            .await
            .expect("a message")
            .expect("no error");
        let event = tink_bus::decode_event(&message.payload).expect("valid event");
        out.push((event, message.headers.clone().unwrap_or_default()));
    }
    out
}

/// The presence entry of an agent, if any.
pub async fn presence(js: &jetstream::Context, agent_id: &str) -> Option<tink_bus::Presence> {
    let kv = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("bucket");
    let value = kv
        .get(tink_bus::agent_token(agent_id).expect("token"))
        .await
        .expect("kv get")?;
    Some(tink_bus::Presence::from_bytes(&value).expect("valid presence"))
}

/// Waits until `check` holds, polling; for state that settles asynchronously.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(what, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A plain HTTP/1.0 GET on loopback: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
        .await
        .expect("request sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// A test CA and a server certificate it signed for `localhost` and 127.0.0.1: (CA PEM,
/// certificate PEM, key PEM), made with the `openssl` command.
pub fn test_certificates() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    std::fs::write(
        path("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext file");
    let run = |args: Vec<std::ffi::OsString>| {
        let status = std::process::Command::new("openssl")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("the `openssl` command runs (apt-get install openssl)");
        assert!(status.success(), "openssl failed");
    };
    let os = |items: &[&str]| {
        items
            .iter()
            .map(std::ffi::OsString::from)
            .collect::<Vec<_>>()
    };
    let mut ca = os(&["req", "-x509", "-days", "1", "-subj", "/CN=tink-test-ca"]);
    ca.extend(os(&ec));
    ca.extend([
        "-keyout".into(),
        path("ca.key").into(),
        "-out".into(),
        path("ca.pem").into(),
    ]);
    run(ca);
    let mut csr = os(&["req", "-subj", "/CN=localhost"]);
    csr.extend(os(&ec));
    csr.extend([
        "-keyout".into(),
        path("key.pem").into(),
        "-out".into(),
        path("leaf.csr").into(),
    ]);
    run(csr);
    let mut sign = os(&["x509", "-req", "-days", "1", "-CAcreateserial"]);
    sign.extend([
        "-in".into(),
        path("leaf.csr").into(),
        "-CA".into(),
        path("ca.pem").into(),
        "-CAkey".into(),
        path("ca.key").into(),
        "-extfile".into(),
        path("ext.cnf").into(),
        "-out".into(),
        path("cert.pem").into(),
    ]);
    run(sign);
    let read = |name: &str| std::fs::read(path(name)).expect("pem");
    (read("ca.pem"), read("cert.pem"), read("key.pem"))
}
