//! The test stack: kube-lite with the project's generated CRDs, a real NATS running deploy/'s
//! users and permissions (each service connects as its own user), a real tink-server in
//! process, controllers in process, and agents simulated over the server's gRPC API.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Template, Workflow, WorkflowState};
use tink_controller::{ControllerConfig, LeaseConfig, Metrics};
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;
use tink_proto::workflow::v2::{
    Event, GetWorkflowsRequest, GetWorkflowsResponse, PublishEventRequest, event,
    get_workflows_response,
};
use tink_testkit::nats::NatsServer;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Upper bound for anything a test waits for; only there so a broken build fails instead of
/// hanging. Never an assertion about speed.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(DEADLINE, future).await {
        Ok(output) => output,
        Err(_) => panic!("gave up waiting for {what}"),
    }
}

pub const NS: &str = "tink";

pub fn bus_config() -> tink_bus::BusConfig {
    tink_bus::BusConfig {
        presence_ttl: Duration::from_secs(3),
        presence_heartbeat: Duration::from_millis(500),
        dispatch_recheck: Duration::from_secs(10),
        receipt_timeout: Duration::from_secs(2),
        // Short, so tests can outlast it (a controller outage longer than the window).
        duplicate_window: Duration::from_secs(3),
        ..Default::default()
    }
}

/// The NATS credentials of `user` (deploy/nats/nats.yaml's users; test passwords).
pub fn nats_auth(user: &str) -> tink_bus::NatsAuth {
    let (user, password) = tink_testkit::nats::deploy_credentials(user);
    tink_bus::NatsAuth {
        user: Some(user),
        password: Some(password),
        ..Default::default()
    }
}

/// A JetStream context connected as `user` (`tink-controller`, `tink-server`, ...).
pub async fn jetstream_as(nats: &NatsServer, user: &str) -> async_nats::jetstream::Context {
    let client = tink_bus::connect(
        &nats.url(),
        &nats_auth(user),
        async_nats::ConnectOptions::new,
    )
    .await
    .unwrap_or_else(|e| panic!("{user} connects to NATS: {e}"));
    async_nats::jetstream::new(client)
}

/// kube-lite + CRDs + namespaces, NATS, one tink-server.
pub struct Stack {
    pub kube: kube_lite::RunningServer,
    pub client: kube::Client,
    pub nats: NatsServer,
    pub server_addr: SocketAddr,
    server_shutdown: CancellationToken,
    /// The stream settings of the server and of every controller [`Stack::config`] makes.
    pub bus: tink_bus::BusConfig,
}

impl Stack {
    pub async fn start() -> Stack {
        Stack::start_with(bus_config()).await
    }

    /// A stack whose server and controllers use `bus` (e.g. production timeouts for a test
    /// whose point is not timing).
    pub async fn start_with(bus: tink_bus::BusConfig) -> Stack {
        Stack::start_with_server(bus, false).await
    }

    /// A stack whose server admits agents without credentials
    /// (`--allow-unauthenticated-agents`) when `allow_unauthenticated`.
    pub async fn start_with_server(bus: tink_bus::BusConfig, allow_unauthenticated: bool) -> Stack {
        // What tink_telemetry::init installs in the binaries: W3C trace-context propagation.
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let kube = kube_lite::Server::start(kube_lite::Config::default())
            .await
            .expect("kube-lite starts");
        let client = kube.client().expect("client");
        apply_crds(&client).await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in [NS, "tink-system"] {
            let obj: Namespace =
                serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
            match namespaces.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("cannot create namespace {ns}: {e}"),
            }
        }
        let nats = NatsServer::start_deploy()
            .await
            .expect("nats-server starts with deploy's users");
        // What the controller (or an admin job) does before the servers can be ready: create
        // the streams and buckets (the server's user may only verify them).
        tink_bus::ensure_streams(&jetstream_as(&nats, "tink-controller").await, &bus)
            .await
            .expect("the controller's user creates the streams");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let server_addr = listener.local_addr().expect("addr");
        let server_shutdown = CancellationToken::new();
        start_server(
            &nats.url(),
            "server-0",
            &bus,
            listener,
            server_shutdown.clone(),
            |c| c.allow_unauthenticated_agents = allow_unauthenticated,
        )
        .await;
        Stack {
            kube,
            client,
            nats,
            server_addr,
            server_shutdown,
            bus,
        }
    }

    /// Another tink-server replica on the same NATS (stopped with the stack); its address.
    pub async fn add_server(&self, replica: &str, allow_unauthenticated: bool) -> SocketAddr {
        self.add_server_with(replica, |c| {
            c.allow_unauthenticated_agents = allow_unauthenticated;
        })
        .await
    }

    /// Another tink-server replica with the test configuration changed by `tweak`.
    pub async fn add_server_with(
        &self,
        replica: &str,
        tweak: impl FnOnce(&mut tink_server::ServerConfig),
    ) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        start_server(
            &self.nats.url(),
            replica,
            &self.bus,
            listener,
            self.server_shutdown.clone(),
            tweak,
        )
        .await;
        addr
    }

    /// A controller configuration for tests: long supervision timeouts (tests that exercise
    /// one shorten it), a short rejection back-off and a quick Lease.
    pub fn config(&self, replica: &str) -> ControllerConfig {
        let mut c = ControllerConfig::new(self.nats.url(), replica);
        c.bus = self.bus.clone();
        c.nats_auth = nats_auth("tink-controller");
        c.namespace = Some(NS.into());
        c.events_ack_wait = Duration::from_secs(2);
        c.workflow.backoff_base = Duration::from_millis(300);
        c.workflow.backoff_max = Duration::from_secs(2);
        c.lease = LeaseConfig {
            namespace: "tink-system".into(),
            name: "tink-controller".into(),
            duration: Duration::from_secs(3),
            renew_period: Duration::from_millis(500),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(500),
        };
        c
    }

    pub async fn controller(&self, config: ControllerConfig) -> Controller {
        self.controller_with_client(config, self.client.clone())
            .await
    }

    /// A controller that reaches the API server through `client` (e.g. through a proxy).
    pub async fn controller_with_client(
        &self,
        config: ControllerConfig,
        client: kube::Client,
    ) -> Controller {
        let shutdown = CancellationToken::new();
        let health = tink_runtime::Health::new();
        let metrics = Metrics::default();
        let task = tokio::spawn(tink_controller::run(
            config,
            client,
            health.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        Controller {
            shutdown,
            health,
            metrics,
            task,
        }
    }

    /// A controller with the test configuration, waited for until it leads and is ready.
    pub async fn leader(&self, replica: &str) -> Controller {
        let c = self.controller(self.config(replica)).await;
        c.wait_leading().await;
        c
    }

    pub async fn agent(&self, agent_id: &str) -> Agent {
        Agent::connect(self.server_addr, agent_id).await
    }

    /// An agent process with an instance id (as the real agent sends), which it also puts on
    /// every event.
    pub async fn agent_instance(&self, agent_id: &str, instance: &str) -> Agent {
        Agent::connect_instance(self.server_addr, agent_id, instance).await
    }

    /// A new process of an agent on the same machine: like the real agent, it presents the
    /// session token the previous process kept in its work directory.
    pub async fn agent_restarted(&self, previous: Agent, instance: &str) -> Agent {
        let (id, token) = (previous.id.clone(), previous.token.clone());
        drop(previous);
        Agent::connect_with(self.server_addr, &id, instance, token).await
    }

    /// A JetStream context connected as `user`.
    pub async fn jetstream_as(&self, user: &str) -> async_nats::jetstream::Context {
        jetstream_as(&self.nats, user).await
    }

    pub fn workflows(&self) -> Api<Workflow> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create_hardware(&self, name: &str, mac: &str) {
        let hw: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "networkInterfaces": {mac: {"dhcp": {"ip": "10.0.0.2", "netmask": "255.255.255.0"}}},
                "storageDevices": ["/dev/nvme0n1"],
            },
        }))
        .expect("hardware");
        Api::<Hardware>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &hw)
            .await
            .expect("create hardware");
    }

    /// A Template whose actions are named `names`, each with a rendered env var.
    pub async fn create_template(&self, name: &str, actions: serde_json::Value) {
        let t: Template = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"actions": actions},
        }))
        .expect("template");
        Api::<Template>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &t)
            .await
            .expect("create template");
    }

    pub async fn create_workflow(
        &self,
        name: &str,
        hardware: &str,
        template: &str,
        extra: serde_json::Value,
    ) {
        let mut spec = json!({
            "hardwareRef": {"name": hardware},
            "templateRef": {"name": template},
            "templateData": {"image_server": "10.0.0.1:8080"},
        });
        if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        let wf: Workflow = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }))
        .expect("workflow");
        self.workflows()
            .create(&PostParams::default(), &wf)
            .await
            .expect("create workflow");
    }

    pub async fn delete_workflow(&self, name: &str) {
        self.workflows()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete workflow");
    }

    /// Waits until the Workflow satisfies `done`, returning it.
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&Workflow) -> bool,
    ) -> Workflow {
        let api = self.workflows();
        within(&format!("{name}: {what}"), async {
            loop {
                if let Ok(Some(w)) = api.get_opt(name).await
                    && done(&w)
                {
                    return w;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    pub async fn wait_state(&self, name: &str, state: WorkflowState) -> Workflow {
        self.wait_for(name, state.as_str(), |w| state_of(w) == state)
            .await
    }

    /// Waits until the Workflow is gone (deleted and its finalizer removed).
    pub async fn wait_gone(&self, name: &str) {
        let api = self.workflows();
        within(&format!("{name} to be gone"), async {
            while api.get_opt(name).await.ok().flatten().is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    /// Waits until a Kubernetes Event with this reason exists for the Workflow.
    pub async fn wait_event(&self, workflow: &str, reason: &str) -> KubeEvent {
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), NS);
        within(&format!("an Event {reason} for {workflow}"), async {
            loop {
                let list = api.list(&ListParams::default()).await.expect("list events");
                if let Some(e) = list.items.into_iter().find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(workflow)
                }) {
                    return e;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    pub async fn stop(self) {
        self.server_shutdown.cancel();
        self.kube.shutdown().await;
    }

    /// Stops the API server only (the rest of the stack keeps running).
    pub async fn kube_shutdown(&mut self) {
        let kube = std::mem::replace(
            &mut self.kube,
            kube_lite::Server::start(kube_lite::Config::default())
                .await
                .expect("a placeholder kube-lite"),
        );
        kube.shutdown().await;
    }
}

/// Starts one tink-server replica on `listener` and waits until it is ready.
async fn start_server(
    nats_url: &str,
    replica: &str,
    bus: &tink_bus::BusConfig,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
    tweak: impl FnOnce(&mut tink_server::ServerConfig),
) {
    let mut config = tink_server::ServerConfig::new(nats_url, replica);
    config.bus = bus.clone();
    tweak(&mut config);
    config.nats_auth = nats_auth("tink-server");
    let health = tink_runtime::Health::new();
    tokio::spawn(tink_server::serve(
        config,
        listener,
        health.clone(),
        tink_server::Metrics::default(),
        shutdown,
    ));
    within("tink-server to become ready", async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

pub fn state_of(w: &Workflow) -> WorkflowState {
    w.status.as_ref().map(|s| s.state).unwrap_or_default()
}

pub async fn apply_crds(client: &kube::Client) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/crds exists (generated by tinkctl crds)")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("read CRD");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
        api.create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }
}

/// A controller replica running in this process.
pub struct Controller {
    pub shutdown: CancellationToken,
    pub health: tink_runtime::Health,
    pub metrics: Metrics,
    task: tokio::task::JoinHandle<Result<(), tink_controller::Error>>,
}

impl Controller {
    pub async fn wait_leading(&self) {
        within("the controller to lead and be ready", async {
            while !(self.health.is_ready() && self.metrics.leader.get() == 1) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }

    pub fn is_leading(&self) -> bool {
        self.metrics.leader.get() == 1
    }

    /// Dies without any cleanup (the task and everything it spawned is dropped mid-flight,
    /// the Lease is not released), like a killed pod.
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Graceful shutdown.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let result = within("the controller to stop", self.task).await;
        result.expect("no panic").expect("clean shutdown");
    }
}

/// An agent simulated over the server's real gRPC API.
pub struct Agent {
    pub id: String,
    pub instance: String,
    /// The session token events are published with.
    pub token: Option<String>,
    client: WorkflowServiceClient<Channel>,
    commands: tonic::Streaming<GetWorkflowsResponse>,
    /// An agent of the seeds/004 protocol alone: no token, no agent id or instance in its
    /// events (and the tests send it no receipts).
    seed: bool,
}

/// A command as the agent sees it.
#[derive(Debug, Clone)]
pub enum Command {
    Start {
        workflow_id: String,
        actions: Vec<tink_proto::workflow::v2::workflow::Action>,
        trace_context: std::collections::HashMap<String, String>,
    },
    Stop {
        workflow_id: String,
        reason: Option<String>,
    },
}

impl Agent {
    pub async fn connect(addr: SocketAddr, id: &str) -> Agent {
        Agent::connect_instance(addr, id, "").await
    }

    pub async fn connect_instance(addr: SocketAddr, id: &str, instance: &str) -> Agent {
        Agent::connect_with(addr, id, instance, None).await
    }

    /// Opens the stream presenting `token` (a restarted agent process keeps its session's).
    pub async fn connect_with(
        addr: SocketAddr,
        id: &str,
        instance: &str,
        token: Option<String>,
    ) -> Agent {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connects");
        let mut client = WorkflowServiceClient::new(channel);
        // A machine is admitted once the controller has published its Hardware's agent ids:
        // like the real agent, retry that refusal.
        let response = within(&format!("agent {id} to be admitted"), async {
            loop {
                let mut request = tonic::Request::new(GetWorkflowsRequest {
                    agent_id: id.to_string(),
                    instance_id: instance.to_string(),
                });
                if let Some(t) = &token {
                    request.metadata_mut().insert(
                        tink_server::auth::TOKEN_HEADER,
                        t.parse().expect("token metadata"),
                    );
                }
                match client.get_workflows(request).await {
                    Ok(response) => break response,
                    // Not admitted yet, or too many streams opened at once from this address:
                    // the real agent retries both after a pause.
                    Err(s)
                        if s.code() == tonic::Code::Unavailable
                            || s.code() == tonic::Code::ResourceExhausted
                            || (s.code() == tonic::Code::PermissionDenied
                                && s.message().contains("not admitted")) =>
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await
                    }
                    Err(s) => panic!("GetWorkflows: {s:?}"),
                }
            }
        })
        .await;
        // The session token the server issued (absent when it kept the session's token).
        let token = response
            .metadata()
            .get(tink_server::auth::TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or(token);
        Agent {
            id: id.to_string(),
            instance: instance.to_string(),
            token,
            client,
            commands: response.into_inner(),
            seed: false,
        }
    }

    /// An agent built from the seeds/004 protocol alone: its stream on `stream_addr` without
    /// credentials, its events to `events_addr` (another replica) without a token, an agent id
    /// or an instance.
    pub async fn seed(stream_addr: SocketAddr, events_addr: SocketAddr, id: &str) -> Agent {
        let mut agent = Agent::connect(stream_addr, id).await;
        let channel = Channel::from_shared(format!("http://{events_addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connects");
        agent.client = WorkflowServiceClient::new(channel);
        agent.token = None;
        agent.seed = true;
        agent
    }

    pub async fn next_command(&mut self) -> Command {
        let id = self.id.clone();
        within(&format!("a command for agent {id}"), async {
            loop {
                let msg = self
                    .commands
                    .next()
                    .await
                    .expect("the command stream stays open")
                    .expect("a command");
                match msg.cmd {
                    Some(get_workflows_response::Cmd::StartWorkflow(s)) => {
                        let w = s.workflow.expect("a workflow");
                        return Command::Start {
                            workflow_id: w.workflow_id,
                            actions: w.actions,
                            trace_context: msg.trace_context,
                        };
                    }
                    Some(get_workflows_response::Cmd::StopWorkflow(s)) => {
                        return Command::Stop {
                            workflow_id: s.workflow_id,
                            reason: s.reason,
                        };
                    }
                    Some(get_workflows_response::Cmd::RequestInventory(_)) | None => continue,
                }
            }
        })
        .await
    }

    /// The next `RequestInventory` on the stream (its request id), skipping anything else.
    pub async fn next_inventory_request(&mut self) -> String {
        within("an inventory request on the agent's stream", async {
            loop {
                let msg = self
                    .commands
                    .next()
                    .await
                    .expect("the command stream stays open")
                    .expect("a command");
                if let Some(get_workflows_response::Cmd::RequestInventory(r)) = msg.cmd {
                    return r.request_id;
                }
            }
        })
        .await
    }

    /// The next command, waiting as long as it takes; `None` when the stream ended.
    pub async fn next_command_forever(&mut self) -> Option<Command> {
        loop {
            let msg = self.commands.next().await?.ok()?;
            match msg.cmd {
                Some(get_workflows_response::Cmd::StartWorkflow(s)) => {
                    let w = s.workflow?;
                    return Some(Command::Start {
                        workflow_id: w.workflow_id,
                        actions: w.actions,
                        trace_context: msg.trace_context,
                    });
                }
                Some(get_workflows_response::Cmd::StopWorkflow(s)) => {
                    return Some(Command::Stop {
                        workflow_id: s.workflow_id,
                        reason: s.reason,
                    });
                }
                Some(get_workflows_response::Cmd::RequestInventory(_)) | None => continue,
            }
        }
    }

    /// The next command, which must be a StartWorkflow: (workflow id, action ids).
    pub async fn next_start(&mut self) -> (String, Vec<String>) {
        match self.next_command().await {
            Command::Start {
                workflow_id,
                actions,
                ..
            } => (workflow_id, actions.into_iter().map(|a| a.id).collect()),
            other => panic!("expected StartWorkflow, got {other:?}"),
        }
    }

    /// Whether a command arrives within `wait` (for "nothing else is sent" checks after the
    /// outcome is already known).
    pub async fn try_command(&mut self, wait: Duration) -> Option<Command> {
        tokio::time::timeout(wait, self.next_command()).await.ok()
    }

    pub async fn publish(&mut self, workflow_id: &str, e: event::Event) {
        let (agent_id, agent_instance) = if self.seed {
            (String::new(), String::new())
        } else {
            (self.id.clone(), self.instance.clone())
        };
        let event = Event {
            workflow_id: workflow_id.to_string(),
            agent_id,
            agent_instance,
            event_id: uuid::Uuid::new_v4().to_string(),
            event: Some(e),
            ..Default::default()
        };
        let mut request = tonic::Request::new(PublishEventRequest { event: Some(event) });
        if let Some(token) = &self.token {
            request.metadata_mut().insert(
                tink_server::auth::TOKEN_HEADER,
                token.parse().expect("ascii token"),
            );
        }
        self.client
            .publish_event(request)
            .await
            .expect("PublishEvent");
    }

    /// The delivery receipt of a start.
    pub async fn received(&mut self, workflow_id: &str) {
        let mut r = event::WorkflowReceived::default();
        r.set_command(event::workflow_received::Command::Start);
        self.publish(workflow_id, event::Event::WorkflowReceived(r))
            .await
    }

    pub async fn started(&mut self, workflow_id: &str, action: &str) {
        self.publish(
            workflow_id,
            event::Event::ActionStarted(event::ActionStarted {
                action_id: action.into(),
            }),
        )
        .await
    }

    pub async fn succeeded(&mut self, workflow_id: &str, action: &str) {
        self.publish(
            workflow_id,
            event::Event::ActionSucceeded(event::ActionSucceeded {
                action_id: action.into(),
            }),
        )
        .await
    }

    pub async fn failed(&mut self, workflow_id: &str, action: &str, reason: &str, message: &str) {
        self.publish(
            workflow_id,
            event::Event::ActionFailed(event::ActionFailed {
                action_id: action.into(),
                failure_reason: Some(reason.into()),
                failure_message: Some(message.into()),
            }),
        )
        .await
    }

    pub async fn rejected(&mut self, workflow_id: &str) {
        self.publish(
            workflow_id,
            event::Event::WorkflowRejected(event::WorkflowRejected {
                failure_reason: Some("Busy".into()),
                failure_message: "already running a workflow".into(),
            }),
        )
        .await
    }

    pub async fn canceled(&mut self, workflow_id: &str, action: Option<&str>) {
        self.publish(
            workflow_id,
            event::Event::WorkflowCanceled(event::WorkflowCanceled {
                action_id: action.map(str::to_string),
                reason: Some("Canceled".into()),
                message: Some("stopped on request".into()),
            }),
        )
        .await
    }

    /// Runs every action to success.
    pub async fn run_all(&mut self, workflow_id: &str, actions: &[String]) {
        for a in actions {
            self.started(workflow_id, a).await;
            self.succeeded(workflow_id, a).await;
        }
    }
}

/// Three busybox actions with templated env.
pub fn three_actions() -> serde_json::Value {
    json!([
        {"name": "stream", "image": "busybox", "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}", "URL": "http://{{ .image_server }}/img"}},
        {"name": "partition", "image": "busybox", "args": ["{{ formatPartition (index .Hardware.Disks 0) 1 }}"]},
        {"name": "reboot", "image": "busybox"},
    ])
}

pub fn names(list: &[Workflow]) -> Vec<String> {
    list.iter().map(|w| w.name_any()).collect()
}
