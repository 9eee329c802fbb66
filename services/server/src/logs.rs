//! `PublishLogs`: an agent's action output, stored in the logs stream ([`tink_bus::LOGS_STREAM`]).
//!
//! Authentication is [`Shared::authenticate_event`]'s, the same as `PublishEvent`'s. Then the
//! agent must own the workflow: the first event stored on the workflow's events subject (the
//! agent's receipt of the StartWorkflow, sent before any action runs) must name the same agent.
//! That is one JetStream read per agent and workflow, remembered in a bounded cache.
//!
//! Storing is done by [`LogStore`]: on a NATS connection of its own, so a large batch never sits
//! in front of an event in the same socket, with a bounded number of publishes in flight (more
//! calls wait, and the agent buffers its output within its limits).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use tink_bus::BusError;
use tink_bus::proto::{LogAck, LogBatch};
use tonic::Status;
use tracing::{debug, warn};

use crate::auth::Auth;
use crate::session::Shared;

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
    // Recorded for the authenticated agent (the dispatch's target), whatever the body claims.
    batch.agent_id = shared
        .authenticate_event(&auth, "batch.agent_id", &batch.agent_id, &batch.workflow_id)
        .await?
        .into_string();
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

/// Refuses lines for a workflow whose first stored event is not this agent's. (The agent is
/// already the dispatch's recorded target when there is a record, [`Shared::authenticate_event`];
/// this also holds for dispatches forwarded before targets were recorded.)
async fn check_owner(
    shared: &Shared,
    logs: &Logs,
    agent: &str,
    workflow_id: &str,
) -> Result<(), Status> {
    if logs.remembered(agent, workflow_id) {
        return Ok(());
    }
    // The dispatch's recorded target owns its output (an event another agent stored first
    // does not).
    if let Some(target) = shared.targets.lookup(workflow_id, false).await? {
        if target.agent_id != agent {
            shared.metrics.error("logs_not_owner");
            return Err(Status::permission_denied(format!(
                "batch.workflow_id: workflow {workflow_id} was dispatched to agent {}, not {agent:?}",
                target.agent_id
            )));
        }
        logs.remember(agent, workflow_id);
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
    if owner != agent {
        shared.metrics.error("logs_not_owner");
        return Err(Status::permission_denied(format!(
            "batch.workflow_id: workflow {workflow_id} was received by agent {owner:?}, not {agent:?}"
        )));
    }
    logs.remember(agent, workflow_id);
    Ok(())
}

/// Stores action output on a NATS connection of its own, with at most `max_in_flight`
/// publishes awaiting their acknowledgement at once; more calls wait their turn.
///
/// The publishes run in the calling request's task. A thread of its own at a lower CPU priority
/// was tried (2026-11-25/26, BENCHMARKS.md): the two thread hops per batch cost the server about
/// 70 µs of its ~230 µs per batch in context switches on this machine's virtual CPUs, more than
/// the priority ever gave back to the events.
#[derive(Debug, Clone)]
pub(crate) struct LogStore {
    jetstream: async_nats::jetstream::Context,
    in_flight: std::sync::Arc<tokio::sync::Semaphore>,
}

impl LogStore {
    /// Stores through `client` (the logs connection).
    pub(crate) fn new(client: async_nats::Client, max_in_flight: usize) -> Self {
        LogStore {
            jetstream: async_nats::jetstream::new(client),
            in_flight: std::sync::Arc::new(tokio::sync::Semaphore::new(max_in_flight.max(1))),
        }
    }

    /// Stores `batch` (waiting for a free slot), and gives it back with the result. A call
    /// abandoned mid-publish (the agent went away) is harmless: the agent sends the same batch
    /// again and the stream's duplicate window drops the second copy.
    async fn store(
        &self,
        batch: LogBatch,
    ) -> Result<(LogBatch, Result<PublishAck, BusError>), Status> {
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| Status::unavailable("the log store stopped; retry the same batch"))?;
        let result = tink_bus::publish_log_batch(&self.jetstream, &batch).await;
        Ok((batch, result))
    }
}
