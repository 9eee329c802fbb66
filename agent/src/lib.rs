//! The Tinkerbell agent: holds a command stream to a server, runs one workflow at a time, each
//! action as a Docker container, and reports every step as an event the server must confirm.
//!
//! ```text
//!  servers (round robin) --GetWorkflows--> command_stream --mpsc--> Executor --> DockerRunner
//!          ^                                                           |
//!          +------------PublishEvent (retried until OK)---- publisher <-+ (ordered outbox)
//! ```
//!
//! The command stream reconnects on its own (capped exponential back-off, next server after each
//! failure) while the executor keeps running the current workflow; events queue in order and
//! are retried until a server confirms JetStream stored them.
#![forbid(unsafe_code)]

pub mod client;
pub mod cmdline;
pub mod config;
pub mod convert;
pub mod executor;
pub mod inventory;
pub mod logs;
pub mod metrics;
pub mod reason;
pub mod runtime;
pub mod spec;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use client::{ClientError, ServerPool};
pub use config::{AgentConfig, ClientTls, ServerAddress};
pub use executor::Executor;
pub use logs::{LogConfig, LogMetrics, LogSink};
pub use metrics::Metrics;
pub use runtime::{DockerRunner, RegistryConfig, RunnerConfig};

/// Commands buffered between the stream and the executor.
const COMMAND_QUEUE: usize = 16;
/// Events buffered before the executor waits for the publisher.
const EVENT_QUEUE: usize = 1024;

/// Runs the agent until `shutdown`: then the running workflow is stopped, queued events (then
/// queued action output) get `flush_timeout` to reach a server, and the function returns.
pub async fn run(
    config: AgentConfig,
    runner: DockerRunner,
    health: tink_runtime::Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), ClientError> {
    let logs = LogSink::new(LogConfig::default(), LogMetrics::default());
    run_with_logs(config, logs, runner, health, metrics, shutdown).await
}

/// Like [`run`], sending action output through `logs` (its limits, batching and metrics; see
/// [`logs`]) unless its configuration disables it.
pub async fn run_with_logs(
    config: AgentConfig,
    logs: LogSink,
    runner: DockerRunner,
    health: tink_runtime::Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), ClientError> {
    let runner = if logs.enabled() {
        runner.with_logs(logs.clone())
    } else {
        runner
    };
    let pool = ServerPool::new(&config)?;
    let config = Arc::new(config);
    info!(instance = %config.instance_id, "agent process instance");
    match runner.remove_leftovers().await {
        Ok(0) => {}
        Ok(n) => info!(removed = n, "removed containers left by a previous run"),
        Err(e) => warn!(error = %e, "cannot list containers left by a previous run"),
    }
    let (commands_tx, commands_rx) = mpsc::channel(COMMAND_QUEUE);
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let abandon = CancellationToken::new();
    let publisher = tokio::spawn(client::publisher(
        pool.clone(),
        config.clone(),
        events_rx,
        metrics.clone(),
        abandon.clone(),
    ));
    let abandon_logs = CancellationToken::new();
    let shipper = tokio::spawn(logs::ship(
        pool.clone(),
        config.clone(),
        logs.clone(),
        abandon_logs.clone(),
    ));
    let inventory = tokio::spawn(inventory::serve(
        pool.clone(),
        config.clone(),
        pool.connected(),
        shutdown.clone(),
    ));
    // The stream stays open until the last events are flushed: it holds the agent's session,
    // and a server accepts events only within one.
    let stream_stop = CancellationToken::new();
    let stream = tokio::spawn(client::command_stream(
        pool,
        config.clone(),
        commands_tx,
        health.clone(),
        metrics.clone(),
        stream_stop.clone(),
    ));
    info!(agent_id = %config.agent_id, servers = ?config.servers.iter().map(ToString::to_string).collect::<Vec<_>>(), "agent started");
    Executor::new(config.agent_id.clone(), runner, events_tx, metrics)
        .configured(&config)
        .run(commands_rx, shutdown.clone())
        .await;
    // The executor returns on shutdown (or if the stream task died): flush the events while
    // the session is open, then close the stream.
    shutdown.cancel();
    health.set_ready(false);
    let deadline = tokio::time::Instant::now() + config.flush_timeout;
    let flush = tokio::time::timeout_at(deadline, publisher);
    tokio::pin!(flush);
    if (&mut flush).await.is_err() {
        warn!("queued events were not all published before the flush timeout");
        abandon.cancel();
    }
    // Then the action output still queued, within what is left of the same time.
    logs.close();
    let flush = tokio::time::timeout_at(deadline, shipper);
    tokio::pin!(flush);
    if (&mut flush).await.is_err() {
        warn!("queued action output was not all sent before the flush timeout");
        abandon_logs.cancel();
    }
    inventory.abort();
    stream_stop.cancel();
    if let Err(e) = stream.await {
        warn!(error = %e, "the command stream task failed");
    }
    info!("agent stopped");
    Ok(())
}
