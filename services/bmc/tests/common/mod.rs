//! The test stack: kube-lite with the three bmc.tinkerbell.org CRDs, BMC controller replicas in
//! this process, and helpers to create Machines, Secrets and Jobs and wait for their status.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, SecretReference};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use tink_api::bmc::{
    Action, ConditionStatus, Connection, Job, JobConditionType, JobSpec, Machine,
    MachineConditionType, MachineRef, MachineSpec, PowerState, ProviderOptions, RedfishOptions,
    Task,
};
use tink_bmc_controller::{BmcConfig, Metrics};
use tokio_util::sync::CancellationToken;

pub const NS: &str = "machines";

/// Waits for `f` to return `Some`, polling; panics naming `what` after 60 s.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub struct Stack {
    pub server: kube_lite::RunningServer,
    pub client: Client,
}

impl Stack {
    pub async fn start() -> Self {
        let server = kube_lite::Server::start(kube_lite::Config::default())
            .await
            .expect("kube-lite");
        let client = server.client().expect("client");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for kind in ["machines", "jobs", "tasks"] {
            let text = std::fs::read_to_string(dir.join(format!("{kind}.bmc.tinkerbell.org.yaml")))
                .expect("CRD file");
            let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
            api.create(&PostParams::default(), &crd)
                .await
                .expect("create CRD");
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in [NS, "other", "intruder", "tink-system"] {
            let mut n = Namespace::default();
            n.metadata.name = Some(ns.into());
            namespaces
                .create(&PostParams::default(), &n)
                .await
                .expect("create Namespace");
        }
        Self { server, client }
    }

    pub fn config(&self, replica: &str) -> BmcConfig {
        let mut c = BmcConfig {
            replica_id: replica.into(),
            power_poll: Duration::from_secs(2),
            power_wait: Duration::from_secs(30),
            power_recheck: Duration::from_millis(300),
            ..BmcConfig::default()
        };
        c.policy.timeout = Duration::from_secs(3);
        c.policy.attempts = 2;
        c.policy.backoff = Duration::from_millis(100);
        c.lease.duration = Duration::from_secs(3);
        c.lease.renew_period = Duration::from_millis(500);
        c.lease.renew_deadline = Duration::from_secs(2);
        c.lease.retry_period = Duration::from_millis(300);
        c
    }

    pub fn start_controller(&self, config: BmcConfig) -> Controller {
        let shutdown = CancellationToken::new();
        let health = tink_runtime::Health::new();
        let metrics = Metrics::default();
        let task = tokio::spawn(tink_bmc_controller::run(
            config,
            self.client.clone(),
            health.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        Controller {
            shutdown,
            health,
            metrics,
            task: Some(task),
        }
    }

    pub async fn basic_auth(&self, ns: &str, name: &str, user: &str, password: &str) {
        self.secret(ns, name, Some("kubernetes.io/basic-auth"), user, password)
            .await;
    }

    pub async fn secret(
        &self,
        ns: &str,
        name: &str,
        type_: Option<&str>,
        user: &str,
        password: &str,
    ) {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some(ns.into());
        s.type_ = type_.map(str::to_string);
        s.data = Some(BTreeMap::from([
            ("username".to_string(), ByteString(user.as_bytes().to_vec())),
            (
                "password".to_string(),
                ByteString(password.as_bytes().to_vec()),
            ),
        ]));
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &s)
            .await
            .expect("create Secret");
    }

    pub async fn machine(&self, name: &str, connection: Connection) -> Machine {
        let mut m = Machine::new(name, MachineSpec { connection });
        m.metadata.namespace = Some(NS.into());
        Api::<Machine>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &m)
            .await
            .expect("create Machine")
    }

    pub async fn job(&self, name: &str, machine: &str, tasks: Vec<Action>) -> Job {
        self.job_in(
            NS,
            name,
            MachineRef {
                name: machine.into(),
                namespace: NS.into(),
            },
            tasks,
        )
        .await
    }

    pub async fn job_in(
        &self,
        ns: &str,
        name: &str,
        machine_ref: MachineRef,
        tasks: Vec<Action>,
    ) -> Job {
        let mut j = Job::new(name, JobSpec { machine_ref, tasks });
        j.metadata.namespace = Some(ns.into());
        Api::<Job>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &j)
            .await
            .expect("create Job")
    }

    pub fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub fn jobs(&self, ns: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn tasks(&self) -> Api<Task> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Waits until Job `name` finished; returns it.
    pub async fn finished_job(&self, ns: &str, name: &str) -> Job {
        let api = self.jobs(ns);
        eventually(&format!("Job {name} to finish"), || {
            let api = api.clone();
            async move {
                let j = api.get(name).await.ok()?;
                j.status.as_ref().filter(|s| s.is_finished())?;
                Some(j)
            }
        })
        .await
    }

    /// Waits until Machine `name` reports `state` and is contactable.
    pub async fn machine_state(&self, name: &str, state: PowerState) -> Machine {
        let api = self.machines();
        eventually(&format!("Machine {name} to be {state}"), || {
            let api = api.clone();
            async move {
                let m = api.get(name).await.ok()?;
                let s = m.status.clone()?;
                (s.power == Some(state)
                    && s.condition(MachineConditionType::Contactable)
                        .is_some_and(|c| c.status == ConditionStatus::True))
                .then_some(m)
            }
        })
        .await
    }

    /// Waits until Machine `name` is not contactable; returns the condition's message.
    pub async fn unreachable(&self, name: &str) -> String {
        let api = self.machines();
        eventually(&format!("Machine {name} to be uncontactable"), || {
            let api = api.clone();
            async move {
                let m = api.get(name).await.ok()?;
                let c = m
                    .status?
                    .condition(MachineConditionType::Contactable)?
                    .clone();
                (c.status == ConditionStatus::False).then_some(c.message)
            }
        })
        .await
    }

    /// Reasons and notes of the Events about `name`.
    pub async fn events_of(&self, name: &str) -> Vec<(String, String)> {
        let api: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), NS);
        api.list(&ListParams::default())
            .await
            .expect("list Events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }
}

pub fn is_completed(j: &Job) -> bool {
    j.status
        .as_ref()
        .is_some_and(|s| s.has_condition(JobConditionType::Completed, ConditionStatus::True))
}

pub fn failure(j: &Job) -> Option<String> {
    j.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == JobConditionType::Failed && c.status == ConditionStatus::True)
            .map(|c| c.message.clone())
    })
}

/// A Redfish connection to `host` with the credentials Secret `secret`.
pub fn redfish(host: &str, secret: &str) -> Connection {
    Connection {
        host: host.into(),
        auth_secret_ref: SecretReference {
            name: Some(secret.into()),
            namespace: Some(NS.into()),
        },
        provider_options: Some(ProviderOptions {
            preferred_order: vec!["gofish".into()],
            redfish: Some(RedfishOptions::default()),
            ..ProviderOptions::default()
        }),
        ..Connection::default()
    }
}

/// An IPMI connection (ipmitool lanplus) to `127.0.0.1:port`.
pub fn ipmi(port: u16, secret: &str) -> Connection {
    Connection {
        host: "127.0.0.1".into(),
        port: i32::from(port),
        auth_secret_ref: SecretReference {
            name: Some(secret.into()),
            namespace: None,
        },
        provider_options: Some(ProviderOptions {
            preferred_order: vec!["ipmitool".into()],
            ipmitool: Some(tink_api::bmc::IpmitoolOptions {
                port: Some(i32::from(port)),
                cipher_suite: String::new(),
            }),
            ..ProviderOptions::default()
        }),
        ..Connection::default()
    }
}

pub struct Controller {
    pub shutdown: CancellationToken,
    pub health: tink_runtime::Health,
    pub metrics: Metrics,
    task: Option<tokio::task::JoinHandle<Result<(), tink_bmc_controller::Error>>>,
}

impl Controller {
    pub async fn wait_ready(&self) {
        let health = self.health.clone();
        eventually("the BMC controller to be ready", || {
            let ready = health.is_ready();
            async move { ready.then_some(()) }
        })
        .await;
        while self.metrics.leader.get() != 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops it as SIGTERM would, and waits.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
        }
    }

    /// Kills it: the task is aborted mid-flight, nothing is released.
    pub fn kill(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
