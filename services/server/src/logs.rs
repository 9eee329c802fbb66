//! `PublishLogs`: an agent's action output, stored in the logs stream ([`tink_bus::LOGS_STREAM`]).
//!
//! Authentication is [`Shared::authenticate_event`]'s, the same as `PublishEvent`'s. Then the
//! agent must own the workflow: the first event stored on the workflow's events subject (the
//! agent's receipt of the StartWorkflow, sent before any action runs) must name the same agent.
//! That is one JetStream read per agent and workflow, remembered in a bounded cache.
//!
//! Storing is done by [`LogStore`]: a thread of its own, with its own NATS connection, at a
//! lower CPU priority (`--logs-nice`), so when the machine is busy the kernel runs the events'
//! work first and action output waits (the agent buffers it, within its limits).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use tink_bus::BusError;
use tink_bus::proto::{LogAck, LogBatch};
use tonic::Status;
use tracing::{debug, warn};

use crate::session::{Auth, Shared};

/// The most (agent, workflow) ownership answers remembered.
const OWNERS_MAX: usize = 16_384;

/// State of the logs endpoint shared by the requests of one replica.
#[derive(Debug)]
pub(crate) struct Logs {
    /// (agent id, workflow id) pairs checked to be the agent's own workflow.
    owned: Mutex<HashMap<(String, String), Instant>>,
    /// Where batches are stored.
    store: LogStore,
}

impl Logs {
    /// Stores through `store`.
    pub(crate) fn new(store: LogStore) -> Self {
        Logs {
            owned: Mutex::default(),
            store,
        }
    }

    fn remembered(&self, agent: &str, workflow: &str) -> bool {
        let owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        owned.contains_key(&(agent.to_string(), workflow.to_string()))
    }

    fn remember(&self, agent: &str, workflow: &str) {
        let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        if owned.len() >= OWNERS_MAX {
            // Drop the older half: checks are cheap to repeat.
            let mut ages: Vec<Instant> = owned.values().copied().collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            owned.retain(|_, at| *at > cut);
        }
        owned.insert((agent.to_string(), workflow.to_string()), Instant::now());
    }
}

/// Handles one `PublishLogs` call.
pub(crate) async fn publish(
    shared: &Shared,
    logs: &Logs,
    auth: Auth,
    mut batch: LogBatch,
) -> Result<LogAck, Status> {
    let metrics = &shared.metrics;
    let lines = batch.lines.len() as u64;
    if auth.certificate.is_none() && batch.agent_id.is_empty() {
        metrics.error("invalid_logs");
        return Err(Status::invalid_argument(
            "batch.agent_id: must be set (the agent id of its GetWorkflows stream)",
        ));
    }
    // Recorded for the authenticated agent, whatever the body claims.
    batch.agent_id = shared.authenticate_event(&auth, &batch.agent_id).await?;
    if let Err(e) = tink_bus::validate_log_batch(&batch) {
        metrics.error("invalid_logs");
        metrics.log_lines_dropped.inc_by(lines);
        return Err(Status::invalid_argument(e.to_string()));
    }
    check_owner(shared, logs, &batch.agent_id, &batch.workflow_id).await?;
    let started = Instant::now();
    let (batch, stored) = logs.store.store(batch).await?;
    match stored {
        Ok(ack) => {
            metrics
                .publish_logs_seconds
                .observe(started.elapsed().as_secs_f64());
            metrics.log_lines_dropped.inc_by(batch.dropped_lines);
            if ack.duplicate {
                metrics.log_batches_duplicate.inc();
                debug!(sequence = ack.sequence, "duplicate log batch");
                return Ok(LogAck { stored_lines: 0 });
            }
            let bytes: usize = batch.lines.iter().map(|l| l.text.len()).sum();
            metrics.log_lines_received.inc_by(lines);
            metrics.log_bytes_stored.inc_by(bytes as u64);
            Ok(LogAck {
                stored_lines: lines,
            })
        }
        Err(BusError::Invalid(e)) => {
            metrics.error("invalid_logs");
            metrics.log_lines_dropped.inc_by(lines);
            Err(Status::invalid_argument(e.to_string()))
        }
        Err(BusError::Token(e)) => {
            metrics.error("invalid_logs");
            metrics.log_lines_dropped.inc_by(lines);
            Err(Status::invalid_argument(format!("batch: {e}")))
        }
        Err(e) => {
            metrics.error("publish_logs");
            warn!(error = %e, "log batch not stored");
            Err(Status::unavailable(format!(
                "log batch not stored, retry the same batch: {e}"
            )))
        }
    }
}

/// Refuses lines for a workflow whose first stored event is not this agent's.
async fn check_owner(
    shared: &Shared,
    logs: &Logs,
    agent: &str,
    workflow_id: &str,
) -> Result<(), Status> {
    if logs.remembered(agent, workflow_id) {
        return Ok(());
    }
    let subject = tink_bus::events_subject(workflow_id)
        .map_err(|e| Status::invalid_argument(format!("batch.workflow_id: {e}")))?;
    let first = shared
        .bus
        .events
        .get_first_raw_message_by_subject(&subject, 1)
        .await;
    let owner = match first {
        Ok(message) => match tink_bus::decode_event(&message.payload) {
            Ok(event) => event.agent_id,
            Err(e) => {
                warn!(%subject, error = %e, "the first event of a workflow does not decode");
                String::new()
            }
        },
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {
            shared.metrics.error("logs_not_owner");
            return Err(Status::permission_denied(format!(
                "batch.workflow_id: no event of workflow {workflow_id} is stored; an agent sends logs only for a workflow it received"
            )));
        }
        Err(e) => {
            shared.metrics.error("publish_logs");
            return Err(Status::unavailable(format!(
                "cannot read the workflow's events, retry the same batch: {e}"
            )));
        }
    };
    if !crate::identity::same_agent(&owner, agent) {
        shared.metrics.error("logs_not_owner");
        return Err(Status::permission_denied(format!(
            "batch.workflow_id: workflow {workflow_id} was received by agent {owner:?}, not {agent:?}"
        )));
    }
    logs.remember(agent, workflow_id);
    Ok(())
}

/// A batch to store, and where to answer.
type Job = (
    LogBatch,
    tokio::sync::oneshot::Sender<(LogBatch, Result<PublishAck, BusError>)>,
);

/// Batches waiting for the store thread, beyond those it is storing.
const QUEUE: usize = 256;

/// The thread that stores action output: its own single-threaded runtime and NATS connection,
/// at most `max_in_flight` publishes awaiting their acknowledgement at once, at nice `nice`.
/// It ends when the last [`LogStore`] handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct LogStore {
    jobs: tokio::sync::mpsc::Sender<Job>,
}

impl LogStore {
    /// Starts the thread and connects it to NATS with `connect`; returns once connected (or
    /// with the connection's error).
    pub(crate) async fn start<F, Fut, E>(
        connect: F,
        max_in_flight: usize,
        nice: i32,
    ) -> Result<LogStore, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<async_nats::Client, E>>,
        E: Send + 'static + From<std::io::Error>,
    {
        let (jobs, mut queue) = tokio::sync::mpsc::channel::<Job>(QUEUE);
        let (ready, connected) = tokio::sync::oneshot::channel::<Result<(), E>>();
        std::thread::Builder::new()
            .name("tink-logs".into())
            .spawn(move || {
                if nice != 0 {
                    // On Linux the nice value belongs to the thread: only this one is lowered.
                    if let Err(e) = rustix::process::setpriority_process(None, nice) {
                        warn!(error = %e, nice, "cannot lower the log store's CPU priority");
                    }
                }
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(E::from(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let client = match connect().await {
                        Ok(client) => client,
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    let jetstream = async_nats::jetstream::new(client.clone());
                    let in_flight =
                        std::sync::Arc::new(tokio::sync::Semaphore::new(max_in_flight.max(1)));
                    let mut tasks = tokio::task::JoinSet::new();
                    while let Some((batch, answer)) = queue.recv().await {
                        // Never closed: the semaphore lives as long as this loop.
                        let Ok(permit) = in_flight.clone().acquire_owned().await else {
                            break;
                        };
                        let jetstream = jetstream.clone();
                        tasks.spawn(async move {
                            let _permit = permit;
                            let result = tink_bus::publish_log_batch(&jetstream, &batch).await;
                            let _ = answer.send((batch, result));
                        });
                        while tasks.try_join_next().is_some() {}
                    }
                    // Every handle is gone (the server stopped): finish what was taken.
                    while tasks.join_next().await.is_some() {}
                    if let Err(e) = client.flush().await {
                        debug!(error = %e, "flushing the logs connection");
                    }
                });
            })
            .map_err(E::from)?;
        match connected.await {
            Ok(Ok(())) => Ok(LogStore { jobs }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(E::from(std::io::Error::other(
                "the log store thread ended before connecting",
            ))),
        }
    }

    /// Stores `batch` (waiting for a free slot), and gives it back with the result.
    async fn store(
        &self,
        batch: LogBatch,
    ) -> Result<(LogBatch, Result<PublishAck, BusError>), Status> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.jobs
            .send((batch, answer))
            .await
            .map_err(|_| Status::unavailable("the log store stopped; retry the same batch"))?;
        answered
            .await
            .map_err(|_| Status::unavailable("the log store stopped; retry the same batch"))
    }
}
