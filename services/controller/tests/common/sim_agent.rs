//! A simulated agent over real gRPC that follows the agent's rules (receipt confirmed before
//! any action, a dispatch run at most once per process, events retried across server replicas
//! until confirmed), recording what it does in a tink-history run; and the recorder of the API
//! side of that history (Workflow status writes, Lease terms). Shared by the chaos and the
//! partition tests.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tink_api::v1alpha2::{ConditionType, Workflow};
use tink_bus::proto::workflow_service_client::WorkflowServiceClient;
use tink_bus::proto::{
    Event, GetWorkflowsRequest, GetWorkflowsResponse, PublishEventRequest, event,
    get_workflows_response,
};
use tink_history::{EventKind, Record, Recorder};
use tonic::transport::Channel;

/// The server replicas agents may use.
#[derive(Clone, Default)]
pub struct Servers(pub Arc<Mutex<Vec<SocketAddr>>>);

impl Servers {
    pub fn pick(&self, n: usize) -> SocketAddr {
        let list = self.0.lock().unwrap();
        list[n % list.len()]
    }
    pub fn set(&self, list: Vec<SocketAddr>) {
        *self.0.lock().unwrap() = list;
    }
}

/// Executions per dispatch id, over every agent process.
pub type Executions = Arc<Mutex<HashMap<String, u32>>>;

/// A simulated agent process.
pub struct SimAgent {
    pub mac: String,
    pub instance: String,
    pub servers: Servers,
    pub executions: Executions,
    /// The dispatch it is running now.
    pub running: Arc<Mutex<Option<String>>>,
    pub action_time: Duration,
    /// The session token the server issued to this process's stream.
    pub token: Arc<Mutex<Option<String>>>,
    /// The run's history.
    pub history: Arc<Recorder>,
    /// A command stream opened while a workflow runs (its session had ended, so events were
    /// refused); the command loop takes it over. The real agent's stream task is independent
    /// of its executor and reconnects on its own; this keeps the simulation honest about it.
    pub parked: Arc<Mutex<Option<tonic::Streaming<GetWorkflowsResponse>>>>,
    /// The address its connections leave from (an agent host of its own that a test can cut
    /// off alone); the system's choice when `None`.
    pub local: Option<std::net::IpAddr>,
}

impl SimAgent {
    /// A new agent process (a fresh instance id) with no session yet, its connections leaving
    /// from the system's choice of address.
    pub fn new(
        mac: String,
        servers: &Servers,
        executions: &Executions,
        history: &Arc<Recorder>,
        action_time: Duration,
    ) -> Self {
        SimAgent {
            mac,
            instance: uuid::Uuid::new_v4().to_string(),
            servers: servers.clone(),
            executions: executions.clone(),
            running: Arc::new(Mutex::new(None)),
            action_time,
            token: Arc::default(),
            history: history.clone(),
            parked: Arc::default(),
            local: None,
        }
    }

    pub async fn connect(&self, n: usize) -> Option<WorkflowServiceClient<Channel>> {
        let addr = self.servers.pick(n);
        // HTTP/2 keepalives as the real agent sends them: a stream whose server went silent
        // (a cut network) ends, and the agent opens another.
        let channel = Channel::from_shared(format!("http://{addr}"))
            .ok()?
            .connect_timeout(Duration::from_secs(1))
            .http2_keep_alive_interval(Duration::from_secs(2))
            .keep_alive_timeout(Duration::from_secs(2))
            .keep_alive_while_idle(true)
            .local_address(self.local);
        let channel = tokio::time::timeout(Duration::from_secs(2), channel.connect())
            .await
            .ok()?
            .ok()?;
        Some(WorkflowServiceClient::new(channel))
    }

    /// Publishes until a server confirms it (the same event id on every try).
    pub async fn publish(&self, workflow_id: &str, kind: event::Event, n: &mut usize) {
        let (history_kind, action) = match &kind {
            event::Event::WorkflowReceived(_) => (EventKind::WorkflowReceived, None),
            event::Event::WorkflowRejected(_) => (EventKind::WorkflowRejected, None),
            event::Event::WorkflowCanceled(_) => (EventKind::WorkflowCanceled, None),
            event::Event::ActionStarted(a) => (EventKind::ActionStarted, Some(a.action_id.clone())),
            event::Event::ActionSucceeded(a) => {
                (EventKind::ActionSucceeded, Some(a.action_id.clone()))
            }
            event::Event::ActionFailed(a) => (EventKind::ActionFailed, Some(a.action_id.clone())),
        };
        let event = Event {
            workflow_id: workflow_id.into(),
            agent_id: self.mac.clone(),
            agent_instance: self.instance.clone(),
            event_id: uuid::Uuid::new_v4().to_string(),
            event: Some(kind),
            ..Default::default()
        };
        loop {
            if let Some(mut client) = self.connect(*n).await {
                let mut request = tonic::Request::new(PublishEventRequest {
                    event: Some(event.clone()),
                });
                if let Some(token) = self.token.lock().unwrap().clone() {
                    request.metadata_mut().insert(
                        tink_server::auth::TOKEN_HEADER,
                        token.parse().expect("ascii"),
                    );
                }
                match tokio::time::timeout(Duration::from_secs(3), client.publish_event(request))
                    .await
                {
                    Ok(Ok(_)) => {
                        record(
                            &self.history,
                            Record::EventAcked {
                                t: self.history.now(),
                                agent: self.mac.clone(),
                                workflow: workflow_name(workflow_id),
                                dispatch: workflow_id.to_string(),
                                event_id: event.event_id.clone(),
                                event: history_kind,
                                action: action.clone(),
                            },
                        );
                        return;
                    }
                    Ok(Err(status)) if status.code() == tonic::Code::InvalidArgument => {
                        panic!("the server refused an event: {status:?}")
                    }
                    // The session ended (its replica died and its presence expired): a new
                    // stream gets a new token, as the real agent's stream task would.
                    Ok(Err(status)) if status.code() == tonic::Code::PermissionDenied => {
                        if let Some(stream) = self.open_stream(*n).await {
                            *self.parked.lock().unwrap() = Some(stream);
                        }
                    }
                    _ => {}
                }
            }
            *n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Opens a command stream (presenting the session token, keeping a newly issued one).
    pub async fn open_stream(&self, n: usize) -> Option<tonic::Streaming<GetWorkflowsResponse>> {
        let mut client = self.connect(n).await?;
        let mut request = tonic::Request::new(GetWorkflowsRequest {
            agent_id: self.mac.clone(),
            instance_id: self.instance.clone(),
        });
        if let Some(token) = self.token.lock().unwrap().clone() {
            request.metadata_mut().insert(
                tink_server::auth::TOKEN_HEADER,
                token.parse().expect("ascii"),
            );
        }
        let response = tokio::time::timeout(Duration::from_secs(3), client.get_workflows(request))
            .await
            .ok()?
            .ok()?;
        if let Some(issued) = response
            .metadata()
            .get(tink_server::auth::TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            *self.token.lock().unwrap() = Some(issued.to_string());
        }
        Some(response.into_inner())
    }

    pub async fn receipt(&self, workflow_id: &str, stop: bool, n: &mut usize) {
        let mut r = event::WorkflowReceived::default();
        r.set_command(if stop {
            event::workflow_received::Command::Stop
        } else {
            event::workflow_received::Command::Start
        });
        self.publish(workflow_id, event::Event::WorkflowReceived(r), n)
            .await;
    }

    pub async fn run(self) {
        let mut seen: HashSet<String> = HashSet::new();
        let mut n = self.mac.bytes().map(usize::from).sum::<usize>();
        loop {
            n += 1;
            let parked = self.parked.lock().unwrap().take();
            let mut commands = match parked {
                Some(stream) => stream,
                None => match self.open_stream(n).await {
                    Some(stream) => stream,
                    None => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            while let Ok(Some(command)) = commands.message().await {
                match command.cmd {
                    Some(get_workflows_response::Cmd::StartWorkflow(start)) => {
                        let Some(w) = start.workflow else { continue };
                        let id = w.workflow_id.clone();
                        record(
                            &self.history,
                            Record::StartReceived {
                                t: self.history.now(),
                                agent: self.mac.clone(),
                                instance: self.instance.clone(),
                                workflow: workflow_name(&id),
                                dispatch: id.clone(),
                            },
                        );
                        self.receipt(&id, false, &mut n).await;
                        if !seen.insert(id.clone()) {
                            let rejected = event::WorkflowRejected {
                                failure_reason: Some("AlreadyRun".into()),
                                failure_message: "this dispatch already ran here".into(),
                            };
                            self.publish(&id, event::Event::WorkflowRejected(rejected), &mut n)
                                .await;
                            continue;
                        }
                        *self.running.lock().unwrap() = Some(id.clone());
                        record(
                            &self.history,
                            Record::Executed {
                                t: self.history.now(),
                                agent: self.mac.clone(),
                                instance: self.instance.clone(),
                                workflow: workflow_name(&id),
                                dispatch: id.clone(),
                            },
                        );
                        *self
                            .executions
                            .lock()
                            .unwrap()
                            .entry(id.clone())
                            .or_default() += 1;
                        for a in &w.actions {
                            let started = event::ActionStarted {
                                action_id: a.id.clone(),
                            };
                            self.publish(&id, event::Event::ActionStarted(started), &mut n)
                                .await;
                            tokio::time::sleep(self.action_time).await;
                            let done = event::ActionSucceeded {
                                action_id: a.id.clone(),
                            };
                            self.publish(&id, event::Event::ActionSucceeded(done), &mut n)
                                .await;
                        }
                        *self.running.lock().unwrap() = None;
                    }
                    Some(get_workflows_response::Cmd::StopWorkflow(stop)) => {
                        self.receipt(&stop.workflow_id, true, &mut n).await;
                        let canceled = event::WorkflowCanceled {
                            action_id: None,
                            reason: Some("Canceled".into()),
                            message: None,
                        };
                        self.publish(
                            &stop.workflow_id,
                            event::Event::WorkflowCanceled(canceled),
                            &mut n,
                        )
                        .await;
                    }
                    Some(get_workflows_response::Cmd::RequestInventory(_)) | None => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

pub fn record(history: &Recorder, r: Record) {
    history.record(&r).expect("the history is written");
}

/// The Workflow a dispatch id names.
pub fn workflow_name(dispatch: &str) -> String {
    tink_workflow::DispatchId::parse(dispatch)
        .map(|d| d.key().name.clone())
        .unwrap_or_else(|_| dispatch.to_string())
}

/// Records every status write of the Workflows (a watch delivers each, in order) and every
/// Lease term, until aborted.
pub fn record_api(
    client: kube::Client,
    history: Arc<Recorder>,
) -> (tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let workflows: kube::Api<Workflow> = kube::Api::namespaced(client.clone(), crate::common::NS);
    let h = history.clone();
    let statuses = tokio::spawn(async move {
        let mut stream = watcher(workflows, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            let (Ok(watcher::Event::Apply(w)) | Ok(watcher::Event::InitApply(w))) = event else {
                continue;
            };
            let Some(status) = w.status.as_ref() else {
                continue;
            };
            record(
                &h,
                Record::Status {
                    t: h.now(),
                    workflow: kube::ResourceExt::name_any(&w),
                    resource_version: kube::ResourceExt::resource_version(&w).unwrap_or_default(),
                    state: format!("{:?}", status.state),
                    reason: reason(&w),
                    message: succeeded_message(&w),
                    dispatch: status.dispatch_id.clone(),
                    actions: status
                        .actions
                        .iter()
                        .map(|a| (a.id.clone(), format!("{:?}", a.state)))
                        .collect(),
                },
            );
        }
    });
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client, "tink-system");
    let terms = tokio::spawn(async move {
        let config = watcher::Config::default().fields("metadata.name=tink-controller");
        let mut stream = watcher(leases, config).default_backoff().boxed();
        // The open term: holder, acquireTime, latest renewTime (seconds since the epoch, in
        // the holder's clock: informative only, the checker orders terms by `t`).
        let mut open: Option<(String, f64, f64)> = None;
        let secs = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime| {
            t.0.as_millisecond() as f64 / 1000.0
        };
        while let Some(event) = stream.next().await {
            let (Ok(watcher::Event::Apply(l)) | Ok(watcher::Event::InitApply(l))) = event else {
                continue;
            };
            let Some(spec) = l.spec else { continue };
            let (Some(holder), Some(acquired)) = (spec.holder_identity, spec.acquire_time) else {
                continue;
            };
            let renewed = spec
                .renew_time
                .as_ref()
                .map(secs)
                .unwrap_or(secs(&acquired));
            let acquired = secs(&acquired);
            match &mut open {
                Some((h, a, r)) if *h == holder && *a == acquired => *r = renewed,
                _ => open = Some((holder, acquired, renewed)),
            }
            if let Some((holder, acquired, last_renew)) = &open {
                // The term so far, written again on each renewal (a run that stops early still
                // has it): the checker keeps a term's latest renewal.
                record(
                    &history,
                    Record::Term {
                        t: history.now(),
                        holder: holder.clone(),
                        acquired: *acquired,
                        last_renew: *last_renew,
                    },
                );
            }
        }
    });
    (statuses, terms)
}

pub fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The Workflow's Succeeded condition, once it has one.
fn succeeded(w: &Workflow) -> Option<&tink_api::v1alpha2::Condition> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Succeeded)
}

/// The Succeeded condition's message (a verdict's explanation).
pub fn succeeded_message(w: &Workflow) -> Option<String> {
    succeeded(w)?.message.clone()
}

pub fn reason(w: &Workflow) -> Option<String> {
    succeeded(w)?.reason.clone()
}
