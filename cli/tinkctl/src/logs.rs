//! `tinkctl workflow logs NAME`: the output of a Workflow's actions, from the logs stream.
//!
//! The Workflow (read with the Kubernetes API) gives the current dispatch id (the protocol's
//! `workflow_id`) and the action ids and names; the lines are read from NATS JetStream
//! (`tink.logs.<dispatch token>.<action token>`, stream `TINK_LOGS`) with an ephemeral ordered
//! consumer, so tinkctl needs NATS access (`--nats-url`/`NATS_URL` and the usual NATS credential
//! flags, like `tinkctl agent reset`); its NATS user needs read access to the `TINK_LOGS` stream
//! only. Lines a resent batch stored twice are shown once (by their per-action sequence).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use clap::Args;
use futures::StreamExt as _;
use kube::api::Api;
use tink_api::v1alpha2::Workflow;
use tink_bus::proto::log_line::Stream;

use crate::kubeconfig::KubeArgs;

/// Arguments of `tinkctl workflow logs`.
#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    /// The Workflow's name.
    pub name: String,
    /// The Workflow's namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Only this action's output (its name, or its id).
    #[arg(long)]
    pub action: Option<String>,
    /// Keep printing new lines until the Workflow ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Only lines stored within this long before now (`30s`, `5m`, `2h`, `1h30m`).
    #[arg(long, value_parser = parse_since)]
    pub since: Option<Duration>,
    /// Prefix each line with the time the agent read it (RFC 3339).
    #[arg(long)]
    pub timestamps: bool,
    /// NATS server URL(s), comma separated.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// NATS credentials file (JWT and NKey seed, as `nsc` writes it).
    #[arg(long, env = "NATS_CREDS")]
    pub nats_creds: Option<std::path::PathBuf>,
    /// NATS user (with --nats-password).
    #[arg(long, env = "NATS_USER", requires = "nats_password")]
    pub nats_user: Option<String>,
    /// NATS password.
    #[arg(
        long,
        env = "NATS_PASSWORD",
        requires = "nats_user",
        hide_env_values = true
    )]
    pub nats_password: Option<String>,
    /// CA certificate (PEM) of the NATS servers; turns TLS on.
    #[arg(long, env = "NATS_TLS_CA")]
    pub nats_tls_ca: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub kube: KubeArgs,
}

impl LogsArgs {
    fn nats_auth(&self) -> tink_bus::NatsAuth {
        tink_bus::NatsAuth {
            credentials_file: self.nats_creds.clone(),
            user: self.nats_user.clone(),
            password: self.nats_password.clone(),
            tls_ca: self.nats_tls_ca.clone(),
            ..Default::default()
        }
    }
}

/// Parses `--since`: a duration such as `90s`, `5m`, `2h` or `1h30m`.
pub fn parse_since(text: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = text.trim().parse().map_err(|e| {
        format!("--since {text:?}: expected a duration like 30s, 5m or 1h30m ({e})")
    })?;
    Duration::try_from(d).map_err(|_| format!("--since {text:?}: must not be negative"))
}

/// Runs `tinkctl workflow logs`.
pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let client = args.kube.client().await?;
    let api: Api<Workflow> = Api::namespaced(client, &args.namespace);
    let wf = wait_for_dispatch(&api, &args).await?;
    let Some(wf) = wf else {
        eprintln!(
            "workflow {}/{} has not been dispatched to an agent yet: no output",
            args.namespace, args.name
        );
        return Ok(());
    };
    let nats = tink_bus::connect(&args.nats_url, &args.nats_auth(), || {
        async_nats::ConnectOptions::new().name("tinkctl workflow logs")
    })
    .await
    .with_context(|| format!("cannot connect to NATS at {}", args.nats_url))?;
    let js = async_nats::jetstream::new(nats);
    let mut out = std::io::stdout().lock();
    let ended = || {
        let api = api.clone();
        let name = args.name.clone();
        async move {
            api.get(&name)
                .await
                .ok()
                .and_then(|w| w.status)
                .is_none_or(|s| s.state.is_terminal())
        }
    };
    print_logs(&js, &wf, &args, &mut out, ended).await
}

/// Reads the Workflow; with `--follow`, waits until it has a dispatch id.
async fn wait_for_dispatch(
    api: &Api<Workflow>,
    args: &LogsArgs,
) -> anyhow::Result<Option<Workflow>> {
    loop {
        let wf = api
            .get(&args.name)
            .await
            .with_context(|| format!("cannot read workflow {}/{}", args.namespace, args.name))?;
        let status = wf.status.as_ref();
        if status.and_then(|s| s.dispatch_id.as_ref()).is_some() {
            return Ok(Some(wf));
        }
        if !args.follow || status.is_some_and(|s| s.state.is_terminal()) {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Prints the Workflow's stored lines, then (with `--follow`) new ones until `ended` says the
/// Workflow ended and no line came for a moment.
pub async fn print_logs<W, F, Fut>(
    js: &async_nats::jetstream::Context,
    wf: &Workflow,
    args: &LogsArgs,
    out: &mut W,
    ended: F,
) -> anyhow::Result<()>
where
    W: std::io::Write,
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let status = wf.status.as_ref().context("the workflow has no status")?;
    let dispatch = status
        .dispatch_id
        .as_deref()
        .context("the workflow has not been dispatched")?;
    let names: HashMap<&str, &str> = status
        .actions
        .iter()
        .map(|a| (a.id.as_str(), a.rendered.name.as_str()))
        .collect();
    let filter = match &args.action {
        Some(wanted) => {
            let id = status
                .actions
                .iter()
                .find(|a| a.rendered.name == *wanted || a.id == *wanted)
                .map(|a| a.id.as_str())
                .with_context(|| {
                    format!(
                        "--action {wanted:?}: the workflow has no such action (it has {})",
                        status
                            .actions
                            .iter()
                            .map(|a| a.rendered.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
            tink_bus::logs_subject(dispatch, id)?
        }
        None => tink_bus::logs_workflow_filter(dispatch)?,
    };
    let deliver_policy = match args.since {
        Some(since) => DeliverPolicy::ByStartTime {
            start_time: SystemTime::now()
                .checked_sub(since)
                .unwrap_or(SystemTime::UNIX_EPOCH)
                .into(),
        },
        None => DeliverPolicy::All,
    };
    let stream = js
        .get_stream(tink_bus::LOGS_STREAM)
        .await
        .with_context(|| {
            format!(
                "cannot open the {} stream (is this the stack's NATS?)",
                tink_bus::LOGS_STREAM
            )
        })?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: filter,
            deliver_policy,
            ..Default::default()
        })
        .await
        .context("cannot read the logs stream")?;
    let mut pending = consumer.cached_info().num_pending;
    let mut messages = consumer
        .messages()
        .await
        .context("cannot read the logs stream")?;
    let mut seen = tink_bus::LogDeduplicator::default();
    let quiet = Duration::from_secs(2);
    loop {
        if pending == 0 && (!args.follow || ended().await) {
            // Caught up (and, following, the workflow ended): a last moment for lines in flight.
            if !args.follow {
                break;
            }
            match tokio::time::timeout(quiet, messages.next()).await {
                Err(_) | Ok(None) => break,
                Ok(Some(message)) => {
                    let message = message.context("reading the logs stream")?;
                    show(&message.payload, &names, &mut seen, args.timestamps, out)?;
                    continue;
                }
            }
        }
        let next = if pending > 0 {
            messages.next().await
        } else {
            match tokio::time::timeout(quiet, messages.next()).await {
                Ok(next) => next,
                Err(_) => continue,
            }
        };
        let Some(message) = next else { break };
        let message = message.context("reading the logs stream")?;
        pending = message.info().map_or(0, |i| i.pending);
        show(&message.payload, &names, &mut seen, args.timestamps, out)?;
    }
    out.flush()?;
    Ok(())
}

/// The last output line of each action of one Workflow, kept up to date by a background task.
#[derive(Debug, Clone, Default)]
pub struct LastLines(std::sync::Arc<std::sync::Mutex<HashMap<String, String>>>);

impl LastLines {
    /// A copy of the current lines (action id -> line).
    pub fn snapshot(&self) -> HashMap<String, String> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    fn set(&self, action_id: String, text: String) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(action_id, text);
        }
    }
}

/// Starts following the last output lines of workflow `name` (once it has a dispatch id);
/// `None`, with a warning on stderr, when NATS cannot be reached (the watch goes on without).
pub async fn last_lines(nats_url: &str, api: Api<Workflow>, name: String) -> Option<LastLines> {
    let client = match async_nats::connect(nats_url).await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("not showing action output: cannot connect to NATS at {nats_url}: {e}");
            return None;
        }
    };
    let js = async_nats::jetstream::new(client);
    let last = LastLines::default();
    let out = last.clone();
    tokio::spawn(async move {
        let dispatch = loop {
            if let Ok(wf) = api.get(&name).await
                && let Some(id) = wf.status.and_then(|s| s.dispatch_id)
            {
                break id;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let Ok(filter) = tink_bus::logs_workflow_filter(&dispatch) else {
            return;
        };
        let Ok(stream) = js.get_stream(tink_bus::LOGS_STREAM).await else {
            return;
        };
        let Ok(consumer) = stream
            .create_consumer(OrderedConfig {
                filter_subject: filter,
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
        else {
            return;
        };
        let Ok(mut messages) = consumer.messages().await else {
            return;
        };
        while let Some(Ok(message)) = messages.next().await {
            if let Ok(batch) = tink_bus::decode_log_batch(&message.payload)
                && let Some(line) = batch.lines.last()
            {
                out.set(batch.action_id.clone(), line.text.clone());
            }
        }
    });
    Some(last)
}

fn show<W: std::io::Write>(
    payload: &[u8],
    names: &HashMap<&str, &str>,
    seen: &mut tink_bus::LogDeduplicator,
    timestamps: bool,
    out: &mut W,
) -> anyhow::Result<()> {
    let batch = match tink_bus::decode_log_batch(payload) {
        Ok(batch) => batch,
        Err(e) => {
            eprintln!("skipping a malformed log batch: {e}");
            return Ok(());
        }
    };
    let name = names
        .get(batch.action_id.as_str())
        .copied()
        .unwrap_or(batch.action_id.as_str());
    for line in &batch.lines {
        if !seen.is_new(&batch.workflow_id, &batch.action_id, line.sequence) {
            continue;
        }
        let stream = match Stream::try_from(line.stream) {
            Ok(Stream::Stderr) => " (stderr)",
            _ => "",
        };
        if timestamps {
            let at = line
                .time
                .as_ref()
                .and_then(|t| jiff::Timestamp::new(t.seconds, t.nanos).ok())
                .map(|t| t.to_string())
                .unwrap_or_default();
            writeln!(out, "{at} [{name}]{stream} {}", line.text)?;
        } else {
            writeln!(out, "[{name}]{stream} {}", line.text)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_friendly_durations() {
        assert_eq!(parse_since("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_since("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_since("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_since("soon").unwrap_err().contains("--since"));
    }
}
