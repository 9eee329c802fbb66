//! Action output to the servers: each action's stdout and stderr lines, limited per action,
//! buffered in a bounded queue and sent in batches (`PublishLogs`) by a task of their own, so a
//! chatty action never slows the action or the events.
//!
//! - **Limits per action.** At most [`LogConfig::lines_per_second`] lines a second (a token
//!   bucket holding one second's worth) and [`LogConfig::max_bytes_per_action`] bytes of text.
//!   Lines over a limit are dropped and counted; a marker line (stream `STREAM_AGENT`,
//!   `[tink-agent] N lines dropped: ...`) takes their place before the next line sent and at the
//!   action's end.
//! - **Buffer.** Lines wait in one queue of at most [`LogConfig::buffer_bytes`] bytes until a
//!   server confirmed them; a line that does not fit is dropped (and marked) instead of waiting.
//! - **Sequences and resends.** Every line sent gets the next sequence number of its action
//!   (from 1, no gaps). A batch is retried unchanged, across servers, until one confirms it, so
//!   the server de-duplicates a batch it stored before it failed and no line is lost or shown
//!   twice. A server that refuses a batch as malformed (`INVALID_ARGUMENT`), for a workflow this
//!   agent does not own (`PERMISSION_DENIED`, after a few tries) or does not know `PublishLogs`
//!   (`UNIMPLEMENTED`) makes the agent drop that batch.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tink_proto::workflow::v2::{LogBatch, LogLine, log_line};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tracing::{debug, warn};

use crate::client::ServerPool;
use crate::config::{AgentConfig, Backoff};

/// Limits and batching of action output sent to the servers.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// Send action output at all.
    pub enabled: bool,
    /// Lines per second each action may send (bursts up to one second's worth).
    pub lines_per_second: u32,
    /// Bytes of text each action may send in all.
    pub max_bytes_per_action: u64,
    /// Bytes of lines waiting for a server's confirmation, for all actions.
    pub buffer_bytes: usize,
    /// The most lines in one batch.
    pub batch_lines: usize,
    /// The most text bytes in one batch.
    pub batch_bytes: usize,
    /// How long a line may wait for more lines to fill its batch.
    pub flush_interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            lines_per_second: 1000,
            max_bytes_per_action: 10 << 20,
            buffer_bytes: 8 << 20,
            batch_lines: 1000,
            batch_bytes: 256 << 10,
            flush_interval: Duration::from_millis(1000),
        }
    }
}

/// Metrics of the log shipping.
#[derive(Debug, Clone, Default)]
pub struct LogMetrics {
    /// Lines (and markers) a server confirmed.
    pub lines_sent: Counter,
    /// Lines dropped: over a limit, buffer full, refused by a server, or left at shutdown.
    pub lines_dropped: Counter,
    /// Failed `PublishLogs` attempts (each retried).
    pub publish_failures: Counter,
    /// Bytes of lines waiting to be sent.
    pub buffered_bytes: Gauge,
}

impl LogMetrics {
    /// Registers the metrics under the `tink_agent_logs` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tink_agent_logs");
        r.register(
            "lines_sent",
            "Action output lines confirmed by a server",
            self.lines_sent.clone(),
        );
        r.register(
            "lines_dropped",
            "Action output lines dropped (limits, full buffer, refused, shutdown)",
            self.lines_dropped.clone(),
        );
        r.register(
            "publish_failures",
            "Failed PublishLogs attempts (retried)",
            self.publish_failures.clone(),
        );
        r.register(
            "buffered_bytes",
            "Bytes of action output waiting to be sent",
            self.buffered_bytes.clone(),
        );
    }
}

#[derive(Debug)]
struct Pending {
    workflow_id: Arc<str>,
    action_id: Arc<str>,
    line: LogLine,
    /// Lines dropped just before this one (a marker's count).
    dropped_before: u64,
}

#[derive(Debug, Default)]
struct Queue {
    lines: VecDeque<Pending>,
    bytes: usize,
}

#[derive(Debug)]
struct Inner {
    config: LogConfig,
    metrics: LogMetrics,
    queue: Mutex<Queue>,
    notify: Notify,
    /// An action ended: send what is queued now rather than after the flush interval.
    flush: Notify,
    closed: AtomicBool,
}

/// Where the runner puts action output; the shipper ([`ship`]) takes it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LogSink {
    inner: Arc<Inner>,
}

impl LogSink {
    /// An empty sink.
    pub fn new(config: LogConfig, metrics: LogMetrics) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                metrics,
                queue: Mutex::new(Queue::default()),
                notify: Notify::new(),
                flush: Notify::new(),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// Whether output is sent at all ([`LogConfig::enabled`]).
    pub fn enabled(&self) -> bool {
        self.inner.config.enabled
    }

    /// Its metrics.
    pub fn metrics(&self) -> &LogMetrics {
        &self.inner.metrics
    }

    /// The output of one action.
    pub fn action(&self, workflow_id: &str, action_id: &str) -> ActionLog {
        let rate = f64::from(self.inner.config.lines_per_second.max(1));
        ActionLog {
            sink: self.clone(),
            workflow_id: Arc::from(workflow_id),
            action_id: Arc::from(action_id),
            sequence: 0,
            bytes: 0,
            over_bytes: false,
            dropped: 0,
            why: "",
            tokens: rate,
            refilled: Instant::now(),
        }
    }

    /// No more lines will come: the shipper ends once the queue is empty.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.notify.notify_one();
    }

    /// Lines waiting to be sent.
    pub fn queued(&self) -> usize {
        self.lock().lines.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.inner.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a line unless the buffer is full (`force`: markers always fit).
    fn enqueue(&self, pending: Pending, force: bool) -> bool {
        let size = pending.line.text.len() + 32;
        {
            let mut queue = self.lock();
            if !force && queue.bytes + size > self.inner.config.buffer_bytes {
                return false;
            }
            queue.bytes += size;
            queue.lines.push_back(pending);
            self.inner.metrics.buffered_bytes.set(queue.bytes as i64);
        }
        self.inner.notify.notify_one();
        true
    }
}

/// One action's output: applies the action's limits and numbers its lines.
#[derive(Debug)]
pub struct ActionLog {
    sink: LogSink,
    workflow_id: Arc<str>,
    action_id: Arc<str>,
    sequence: u64,
    bytes: u64,
    over_bytes: bool,
    dropped: u64,
    why: &'static str,
    tokens: f64,
    refilled: Instant,
}

impl ActionLog {
    /// A line the action wrote (without its newline).
    pub fn push(&mut self, stream: log_line::Stream, text: &str) {
        let inner = self.sink.inner.clone();
        let config = &inner.config;
        if self.over_bytes {
            self.drop_line("past the action's log limit");
            return;
        }
        let rate = f64::from(config.lines_per_second.max(1));
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.refilled).as_secs_f64() * rate).min(rate);
        self.refilled = now;
        if self.tokens < 1.0 {
            self.drop_line("more lines a second than the agent's --log-lines-per-second");
            return;
        }
        if self.bytes + text.len() as u64 > config.max_bytes_per_action {
            self.over_bytes = true;
            self.flush_marker();
            let limit = config.max_bytes_per_action;
            self.marker(&format!(
                "[tink-agent] this action's output reached the log limit of {limit} bytes (--log-max-bytes-per-action); later lines are not sent"
            ));
            self.drop_line("past the action's log limit");
            return;
        }
        self.flush_marker();
        let line = self.line(stream, text);
        if self.sink.enqueue(
            Pending {
                workflow_id: self.workflow_id.clone(),
                action_id: self.action_id.clone(),
                line,
                dropped_before: 0,
            },
            false,
        ) {
            self.tokens -= 1.0;
            self.bytes += text.len() as u64;
        } else {
            // Not sent: its sequence number is given to the marker that replaces it.
            self.sequence -= 1;
            self.drop_line("the agent's log buffer was full (servers unreachable or slow)");
        }
    }

    /// The action ended: a last marker for lines dropped since the previous one, and its lines
    /// are sent at once (an operator reading the logs of a finished action sees all of them).
    pub fn finish(mut self) {
        self.flush_marker();
        self.sink.inner.flush.notify_one();
    }

    fn line(&mut self, stream: log_line::Stream, text: &str) -> LogLine {
        self.sequence += 1;
        LogLine {
            sequence: self.sequence,
            time: Some(prost_types::Timestamp::from(SystemTime::now())),
            stream: stream as i32,
            text: text.to_owned(),
        }
    }

    fn drop_line(&mut self, why: &'static str) {
        self.dropped += 1;
        self.why = why;
        self.sink.inner.metrics.lines_dropped.inc();
    }

    fn flush_marker(&mut self) {
        if self.dropped == 0 {
            return;
        }
        let text = format!("[tink-agent] {} lines dropped: {}", self.dropped, self.why);
        self.marker(&text);
    }

    fn marker(&mut self, text: &str) {
        let dropped = std::mem::take(&mut self.dropped);
        let line = self.line(log_line::Stream::Agent, text);
        self.sink.enqueue(
            Pending {
                workflow_id: self.workflow_id.clone(),
                action_id: self.action_id.clone(),
                line,
                dropped_before: dropped,
            },
            true,
        );
    }
}

/// How many times a batch refused with `PERMISSION_DENIED` or `UNAUTHENTICATED` is tried (the
/// session may be renewing) before it is dropped.
const DENIED_TRIES: u32 = 5;

/// Sends the sink's lines in batches until the sink is closed and empty, or `abandon` fires
/// (what is left is counted as dropped).
pub async fn ship(
    pool: ServerPool,
    config: Arc<AgentConfig>,
    sink: LogSink,
    abandon: CancellationToken,
) {
    let inner = sink.inner.clone();
    let settings = &inner.config;
    let mut backoff = Backoff::new(config.backoff_initial, config.backoff_max);
    loop {
        // Wait for a line (or the end).
        loop {
            let notified = inner.notify.notified();
            if sink.queued() > 0 {
                break;
            }
            if inner.closed.load(Ordering::SeqCst) || abandon.is_cancelled() {
                return;
            }
            tokio::select! {
                () = abandon.cancelled() => {}
                () = notified => {}
            }
        }
        // Let a batch fill, unless it is full already or the agent is stopping.
        if sink.queued() < settings.batch_lines && !inner.closed.load(Ordering::SeqCst) {
            tokio::select! {
                () = abandon.cancelled() => {}
                () = tokio::time::sleep(settings.flush_interval) => {}
                () = inner.flush.notified() => {}
            }
        }
        if abandon.is_cancelled() {
            break;
        }
        let (mut batch, count, bytes) = next_batch(&sink);
        batch.agent_id.clone_from(&config.agent_id);
        if count == 0 {
            continue;
        }
        let mut index = pool.preferred_index();
        let mut denied = 0;
        let done = loop {
            let (address, mut client) = pool.get(index);
            let mut request = tonic::Request::new(batch.clone());
            request.set_timeout(config.request_timeout);
            pool.authenticate(&mut request);
            let result = tokio::select! {
                () = abandon.cancelled() => break false,
                r = tokio::time::timeout(config.request_timeout, client.publish_logs(request)) => r,
            };
            match result {
                Ok(Ok(_)) => {
                    inner.metrics.lines_sent.inc_by(count as u64);
                    backoff.reset();
                    break true;
                }
                Ok(Err(status))
                    if matches!(status.code(), Code::InvalidArgument | Code::Unimplemented) =>
                {
                    warn!(server = address, code = ?status.code(), message = status.message(), lines = count, "the server refused a log batch; dropping it");
                    inner.metrics.lines_dropped.inc_by(count as u64);
                    break true;
                }
                Ok(Err(status))
                    if matches!(
                        status.code(),
                        Code::PermissionDenied | Code::Unauthenticated
                    ) =>
                {
                    denied += 1;
                    if denied >= DENIED_TRIES {
                        warn!(
                            server = address,
                            message = status.message(),
                            lines = count,
                            "log batch refused; dropping it"
                        );
                        inner.metrics.lines_dropped.inc_by(count as u64);
                        break true;
                    }
                    debug!(
                        server = address,
                        message = status.message(),
                        "log batch refused; retrying"
                    );
                }
                Ok(Err(status)) => {
                    debug!(server = address, code = ?status.code(), message = status.message(), "publishing a log batch failed; retrying");
                }
                Err(_) => debug!(
                    server = address,
                    "publishing a log batch timed out; retrying"
                ),
            }
            inner.metrics.publish_failures.inc();
            index = index.wrapping_add(1);
            let delay = backoff.next_delay();
            tokio::select! {
                () = abandon.cancelled() => break false,
                () = tokio::time::sleep(delay) => {}
            }
        };
        if !done {
            break;
        }
        // Confirmed (or refused): the batch's lines leave the queue.
        let mut queue = sink.lock();
        for _ in 0..count {
            queue.lines.pop_front();
        }
        queue.bytes = queue.bytes.saturating_sub(bytes);
        inner.metrics.buffered_bytes.set(queue.bytes as i64);
    }
    let mut queue = sink.lock();
    let left = queue.lines.len();
    if left > 0 {
        warn!(lines = left, "stopping with unsent action output");
        inner.metrics.lines_dropped.inc_by(left as u64);
    }
    queue.lines.clear();
    queue.bytes = 0;
    inner.metrics.buffered_bytes.set(0);
}

/// The next batch from the front of the queue (the lines stay there until confirmed): lines of
/// one action, within the batch limits. Returns it, its line count and its queue bytes.
fn next_batch(sink: &LogSink) -> (LogBatch, usize, usize) {
    let settings = &sink.inner.config;
    let queue = sink.lock();
    let mut batch = LogBatch::default();
    let (mut count, mut bytes, mut text) = (0, 0, 0);
    for pending in &queue.lines {
        if count == 0 {
            batch.workflow_id = pending.workflow_id.to_string();
            batch.action_id = pending.action_id.to_string();
        } else if *pending.workflow_id != *batch.workflow_id
            || *pending.action_id != *batch.action_id
            || count >= settings.batch_lines.clamp(1, tink_bus_limits::MAX_LINES)
            || text + pending.line.text.len() > settings.batch_bytes.min(tink_bus_limits::MAX_BYTES)
        {
            break;
        }
        count += 1;
        text += pending.line.text.len();
        bytes += pending.line.text.len() + 32;
        batch.dropped_lines += pending.dropped_before;
        batch.lines.push(pending.line.clone());
    }
    (batch, count, bytes)
}

/// The server's batch limits (tink-bus's `MAX_BATCH_LINES` and `MAX_BATCH_BYTES`).
mod tink_bus_limits {
    pub const MAX_LINES: usize = 4096;
    pub const MAX_BYTES: usize = 512 * 1024;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(sink: &LogSink) -> Vec<(u64, String)> {
        sink.lock()
            .lines
            .iter()
            .map(|p| (p.line.sequence, p.line.text.clone()))
            .collect()
    }

    #[test]
    fn lines_over_the_byte_limit_are_dropped_with_a_marker() {
        let sink = LogSink::new(
            LogConfig {
                max_bytes_per_action: 10,
                ..LogConfig::default()
            },
            LogMetrics::default(),
        );
        let mut log = sink.action("w", "a");
        for i in 0..5 {
            log.push(log_line::Stream::Stdout, &format!("l{i}"));
        }
        log.push(log_line::Stream::Stdout, "0123456789");
        log.push(log_line::Stream::Stdout, "x");
        log.finish();
        let lines = texts(&sink);
        let seqs: Vec<u64> = lines.iter().map(|l| l.0).collect();
        assert_eq!(seqs, (1..=7).collect::<Vec<_>>(), "{lines:?}");
        assert_eq!(lines[4].1, "l4");
        assert!(lines[5].1.contains("log limit of 10 bytes"), "{lines:?}");
        assert!(lines[6].1.contains("2 lines dropped"), "{lines:?}");
        assert_eq!(sink.metrics().lines_dropped.get(), 2);
    }

    #[test]
    fn the_rate_limit_drops_and_marks() {
        let sink = LogSink::new(
            LogConfig {
                lines_per_second: 3,
                ..LogConfig::default()
            },
            LogMetrics::default(),
        );
        let mut log = sink.action("w", "a");
        for i in 0..10 {
            log.push(log_line::Stream::Stderr, &format!("l{i}"));
        }
        log.finish();
        let lines = texts(&sink);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[3].1.contains("7 lines dropped"), "{lines:?}");
        let (batch, count, _) = next_batch(&sink);
        assert_eq!(count, 4);
        assert_eq!(batch.dropped_lines, 7);
    }

    #[test]
    fn a_full_buffer_drops_without_gaps() {
        let sink = LogSink::new(
            LogConfig {
                buffer_bytes: 300,
                ..LogConfig::default()
            },
            LogMetrics::default(),
        );
        let mut log = sink.action("w", "a");
        for _ in 0..10 {
            log.push(log_line::Stream::Stdout, "0123456789");
        }
        sink.lock().lines.clear();
        sink.lock().bytes = 0;
        log.push(log_line::Stream::Stdout, "after");
        let lines = texts(&sink);
        assert!(
            lines[0]
                .1
                .contains("lines dropped: the agent's log buffer was full"),
            "{lines:?}"
        );
        assert_eq!(lines[1].1, "after");
        assert_eq!(lines[1].0, lines[0].0 + 1);
    }

    #[test]
    fn batches_hold_one_action() {
        let sink = LogSink::new(LogConfig::default(), LogMetrics::default());
        let mut a = sink.action("w", "a");
        a.push(log_line::Stream::Stdout, "1");
        a.push(log_line::Stream::Stdout, "2");
        let mut b = sink.action("w", "b");
        b.push(log_line::Stream::Stdout, "3");
        let (batch, count, _) = next_batch(&sink);
        assert_eq!((batch.action_id.as_str(), count), ("a", 2));
    }
}

/// The agent's log flags (flattened into its command line).
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Send action output to the servers (`tinkctl workflow logs`).
    #[arg(long = "send-logs", env = "TINK_AGENT_SEND_LOGS", default_value_t = true, action = clap::ArgAction::Set)]
    pub send_logs: bool,
    /// Lines per second each action may send; more are dropped with a marker line.
    #[arg(long, env = "TINK_AGENT_LOG_LINES_PER_SECOND", default_value_t = 1000)]
    pub log_lines_per_second: u32,
    /// Bytes of output each action may send in all; later lines are dropped with a marker.
    #[arg(long, env = "TINK_AGENT_LOG_MAX_BYTES_PER_ACTION", default_value_t = 10 << 20)]
    pub log_max_bytes_per_action: u64,
    /// Bytes of output kept while no server confirms them (across server failures).
    #[arg(long, env = "TINK_AGENT_LOG_BUFFER_BYTES", default_value_t = 8 << 20)]
    pub log_buffer_bytes: usize,
    /// Milliseconds a line may wait for more lines to fill its batch. Each batch is one call to
    /// a server: at 1,000 agents a 200 ms flush costs the servers 5,000 calls/s, 1 s 1,000
    /// (BENCHMARKS.md, "Server: action output").
    #[arg(
        long,
        env = "TINK_AGENT_LOG_FLUSH_MILLISECONDS",
        default_value_t = 1000
    )]
    pub log_flush_milliseconds: u64,
}

impl LogArgs {
    /// The configuration these flags describe.
    pub fn config(&self) -> LogConfig {
        LogConfig {
            enabled: self.send_logs,
            lines_per_second: self.log_lines_per_second.max(1),
            max_bytes_per_action: self.log_max_bytes_per_action,
            buffer_bytes: self.log_buffer_bytes.max(64 << 10),
            flush_interval: Duration::from_millis(self.log_flush_milliseconds.clamp(1, 60_000)),
            ..LogConfig::default()
        }
    }
}
