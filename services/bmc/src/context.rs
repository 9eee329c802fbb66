//! What every reconcile shares: the client, the caches, the BMC limits, the Event recorder,
//! the metrics; and the two steps every kind takes: from a connection to its providers (its
//! Secrets read with the namespace and type checks), and a BMC operation tried on each
//! provider in order.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::core::v1::{ObjectReference, Secret as KubeSecret, SecretReference};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tink_api::bmc::{Connection, Job, Machine, PowerState, Task};
use tink_bmc::credentials::{CredentialError, basic_auth, hmac_key, secret_key};
use tink_bmc::{Bmc, Limits, Resolved};
use tokio::sync::mpsc;
use tracing::warn;

use crate::config::{BmcConfig, CONTROLLER_NAME};
use crate::metrics::Metrics;

/// Shared by every reconcile of one leadership term.
pub(crate) struct Ctx {
    pub client: Client,
    pub config: BmcConfig,
    pub limits: Limits,
    /// Events to publish: a bounded queue one task empties ([`publish_events`]), so no
    /// reconcile waits for the API server to record an Event.
    events: mpsc::Sender<(ObjectReference, Event)>,
    pub metrics: Metrics,
    pub machines: Store<Machine>,
    pub jobs: Store<Job>,
    pub tasks: Store<Task>,
    /// Power actions this process sent, by Task uid: a Task whose action was sent by an earlier
    /// process (or whose sending was interrupted) is judged by its status and annotation.
    pub sent: Mutex<HashMap<String, Instant>>,
}

/// Events waiting to be published, at most.
const EVENT_QUEUE: usize = 4096;

/// The receiving end of the Event queue and the recorder that publishes it.
pub(crate) struct EventQueue {
    queue: mpsc::Receiver<(ObjectReference, Event)>,
    recorder: Recorder,
}

impl EventQueue {
    /// Publishes queued Events until the queue closes (every [`Ctx`] dropped) or `term` ends;
    /// a failed publish is logged, never retried (an Event is a notice, not state).
    pub async fn publish_events(mut self, term: tokio_util::sync::CancellationToken) {
        loop {
            let next = tokio::select! {
                _ = term.cancelled() => return,
                next = self.queue.recv() => next,
            };
            let Some((regarding, event)) = next else {
                return;
            };
            if let Err(e) = self.recorder.publish(&event, &regarding).await {
                warn!(error = %e, reason = %event.reason, "cannot publish an Event");
            }
        }
    }
}

/// Why a connection could not be turned into providers. Never holds a secret value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("{field}: {source}")]
    Reference {
        field: String,
        source: CredentialError,
    },
    #[error("{field}: Secret {namespace}/{name} not found")]
    NotFound {
        field: String,
        namespace: String,
        name: String,
    },
    #[error("{field}: cannot read Secret {namespace}/{name}: {source}")]
    Read {
        field: String,
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error(transparent)]
    Provider(#[from] tink_bmc::Error),
}

impl Ctx {
    pub fn new(
        client: Client,
        config: BmcConfig,
        metrics: Metrics,
        machines: Store<Machine>,
        jobs: Store<Job>,
        tasks: Store<Task>,
    ) -> (Self, EventQueue) {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: CONTROLLER_NAME.into(),
                instance: Some(config.replica_id.clone()),
            },
        );
        let (events, queue) = mpsc::channel(EVENT_QUEUE);
        let ctx = Self {
            limits: Limits::new(config.max_calls_per_bmc, config.max_calls),
            client,
            config,
            events,
            metrics,
            machines,
            jobs,
            tasks,
            sent: Mutex::new(HashMap::new()),
        };
        (ctx, EventQueue { queue, recorder })
    }

    /// Queues an Event about `regarding` (dropped, and counted, when the queue is full).
    pub fn event(&self, regarding: &ObjectReference, warning: bool, reason: &str, note: &str) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(truncate(note, 1000)),
            action: reason.into(),
            secondary: None,
        };
        if self.events.try_send((regarding.clone(), event)).is_err() {
            self.metrics.events_dropped.inc();
            warn!(reason, "the Event queue is full; an Event is dropped");
        }
    }

    async fn secret(
        &self,
        namespace: &str,
        field: &str,
        r: &SecretReference,
    ) -> Result<KubeSecret, ConnectError> {
        let (ns, name) = secret_key(namespace, r).map_err(|source| ConnectError::Reference {
            field: field.into(),
            source,
        })?;
        let api: Api<KubeSecret> = Api::namespaced(self.client.clone(), &ns);
        match api.get_opt(&name).await {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Err(ConnectError::NotFound {
                field: field.into(),
                namespace: ns,
                name,
            }),
            Err(source) => Err(ConnectError::Read {
                field: field.into(),
                namespace: ns,
                name,
                source,
            }),
        }
    }

    /// The providers of `connection` (of an object in `namespace`), in the order they are
    /// tried, with the credentials of its Secrets (which must be in `namespace`).
    pub async fn providers(
        &self,
        namespace: &str,
        connection: &Connection,
    ) -> Result<Vec<Box<dyn Bmc>>, ConnectError> {
        let mut resolved = Resolved {
            ca_pem: self.config.ca_pem.clone(),
            ..Resolved::default()
        };
        let auth = &connection.auth_secret_ref;
        if auth.name.as_deref().is_some_and(|n| !n.is_empty()) {
            let field = "spec.connection.authSecretRef";
            let secret = self.secret(namespace, field, auth).await?;
            resolved.credentials =
                Some(
                    basic_auth(&secret).map_err(|source| ConnectError::Reference {
                        field: field.into(),
                        source,
                    })?,
                );
        }
        let hmac = connection
            .provider_options
            .as_ref()
            .and_then(|o| o.rpc.as_ref())
            .and_then(|r| r.hmac.as_ref());
        if let Some(hmac) = hmac {
            let mut keys = BTreeMap::new();
            for (algorithm, refs) in &hmac.secrets {
                let mut values = Vec::new();
                for (i, r) in refs.iter().enumerate() {
                    let field = format!(
                        "spec.connection.providerOptions.rpc.hmac.secrets.{algorithm}[{i}]"
                    );
                    let secret = self.secret(namespace, &field, r).await?;
                    values.push(hmac_key(&secret).map_err(|source| ConnectError::Reference {
                        field: field.clone(),
                        source,
                    })?);
                }
                keys.insert(algorithm.clone(), values);
            }
            resolved.hmac = keys;
        }
        Ok(tink_bmc::providers(
            connection,
            resolved,
            &self.config.policy,
            &self.limits,
        )?)
    }

    /// Runs `op` on each provider in order until one succeeds: its index and answer, or every
    /// provider's error joined. Counted in the metrics as `name`.
    pub async fn first_answer<'p, T, F, Fut>(
        &self,
        providers: &'p [Box<dyn Bmc>],
        name: &'static str,
        mut op: F,
    ) -> Result<(usize, T), String>
    where
        F: FnMut(&'p dyn Bmc) -> Fut,
        Fut: Future<Output = Result<T, tink_bmc::Error>>,
    {
        let mut errors = Vec::new();
        for (i, p) in providers.iter().enumerate() {
            let start = Instant::now();
            self.metrics
                .calls_in_flight
                .set(i64::try_from(self.limits.in_flight()).unwrap_or(i64::MAX));
            let r = op(p.as_ref()).await;
            self.metrics
                .op(name, "", r.is_ok(), start.elapsed().as_secs_f64());
            match r {
                Ok(v) => return Ok((i, v)),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            return Err("no provider is configured".into());
        }
        Err(errors.join("; "))
    }

    /// The power state, from the first provider that answers.
    pub async fn power_state(
        &self,
        providers: &[Box<dyn Bmc>],
    ) -> Result<(usize, PowerState), String> {
        self.first_answer(providers, "power_state", |p| p.power_state())
            .await
    }

    /// Whether this process sent the power action of Task `uid`.
    pub fn sent_here(&self, uid: &str) -> bool {
        self.sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(uid)
    }

    /// Remembers that this process sent the power action of Task `uid`; forgets entries older
    /// than an hour (the Task finished long ago).
    pub fn mark_sent(&self, uid: &str) {
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.retain(|_, at| at.elapsed().as_secs() < 3600);
        sent.insert(uid.to_string(), Instant::now());
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
