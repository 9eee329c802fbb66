//! The action runner: one action, one Docker container, always removed afterwards.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, HostConfig, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, KillContainerOptions,
    ListContainersOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    StartContainerOptions, StopContainerOptionsBuilder, TagImageOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use crate::reason::{
    Failure, FailureReason, REASON_DIR, REASON_DIR_ENV, apply_action_files, read_action_files,
    truncate,
};
use crate::spec::{ActionSpec, VolumeSource, env_list};

/// Container label: the agent that created the container.
pub const LABEL_AGENT: &str = "org.tinkerbell.agent";
/// Container label: the workflow the action belongs to.
pub const LABEL_WORKFLOW: &str = "org.tinkerbell.workflow";
/// Container label: the action id.
pub const LABEL_ACTION: &str = "org.tinkerbell.action";

/// How many output lines a failure message keeps.
pub const TAIL_LINES: usize = 20;
const TAIL_LINE_BYTES: usize = 300;

/// Registry settings for pulls. `Debug` never shows the password.
#[derive(Clone, Default)]
pub struct RegistryConfig {
    /// A mirror (`host[:port]`) that Docker Hub images are pulled from instead.
    pub mirror: Option<String>,
    /// Registry user name.
    pub username: Option<String>,
    /// Registry password.
    pub password: Option<String>,
    /// The registry the credentials belong to (default: the image's).
    pub server_address: Option<String>,
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("mirror", &self.mirror)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("server_address", &self.server_address)
            .finish()
    }
}

/// Runner settings.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The agent id, put on every container as a label.
    pub agent_id: String,
    /// Docker socket (`unix:///var/run/docker.sock`, `tcp://...`); `None`: `DOCKER_HOST` or the default.
    pub docker_host: Option<String>,
    /// Pull settings.
    pub registry: RegistryConfig,
    /// The timeout of actions that have none; `None`: such actions may run forever.
    pub default_timeout: Option<Duration>,
    /// How long a stopped container gets between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// Where per-action reason directories are created (must be visible to the engine).
    pub work_dir: PathBuf,
    /// Run action containers privileged (provisioning actions need the machine's disks). Only
    /// environments that forbid it (nested containers in CI) turn it off.
    pub privileged: bool,
}

/// Errors setting up the runner.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The engine could not be reached.
    #[error("cannot reach the Docker engine at {host}: {source}")]
    Connect {
        /// The address tried.
        host: String,
        /// Why.
        source: BollardError,
    },
    /// The work directory cannot be created.
    #[error("cannot create the work directory {path}: {source}")]
    WorkDir {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// How an action ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    /// Exit code 0.
    Succeeded,
    /// Anything else, with reason and message.
    Failed(Failure),
}

/// What an action that succeeded may ask the agent to do to the machine once the whole
/// workflow succeeded and is stored (`/tinkerbell/power`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    /// `reboot`
    Reboot,
    /// `kexec` (the action loaded the kernel with `kexec -l`)
    Kexec,
    /// `poweroff`
    Poweroff,
}

impl PowerAction {
    /// Parses the first line of `/tinkerbell/power`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.lines().next()?.trim().to_ascii_lowercase().as_str() {
            "reboot" => Some(Self::Reboot),
            "kexec" => Some(Self::Kexec),
            "poweroff" => Some(Self::Poweroff),
            _ => None,
        }
    }
}

/// The end of one action: its outcome and, for a success, the power action it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRun {
    /// How it ended.
    pub outcome: ActionOutcome,
    /// `/tinkerbell/power`, read after a success.
    pub power: Option<PowerAction>,
}

/// The file of the power contract in the action's `/tinkerbell` directory.
pub const POWER_FILE: &str = "power";

/// The longest output line kept whole; a longer one (or output without newlines) is cut with a
/// marker, so a chatty action cannot grow the agent's memory.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Runs actions as containers on one Docker engine. Cheap to clone.
#[derive(Clone)]
pub struct DockerRunner {
    docker: Docker,
    config: Arc<RunnerConfig>,
    /// Where action output goes besides the agent's own log (see [`crate::logs`]).
    logs: Option<crate::logs::LogSink>,
}

impl std::fmt::Debug for DockerRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerRunner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DockerRunner {
    /// Connects to the engine, negotiates the API version and prepares the work directory.
    pub async fn connect(config: RunnerConfig) -> Result<Self, RunnerError> {
        let host = config
            .docker_host
            .clone()
            .unwrap_or_else(|| "the default socket".to_owned());
        let connect_err = |source| RunnerError::Connect {
            host: host.clone(),
            source,
        };
        let docker = match &config.docker_host {
            Some(addr) => Docker::connect_with_host(addr),
            None => Docker::connect_with_defaults(),
        }
        .map_err(connect_err)?;
        let docker = docker.negotiate_version().await.map_err(connect_err)?;
        tokio::fs::create_dir_all(&config.work_dir)
            .await
            .map_err(|source| RunnerError::WorkDir {
                path: config.work_dir.clone(),
                source,
            })?;
        Ok(Self {
            docker,
            config: Arc::new(config),
            logs: None,
        })
    }

    /// Sends every action's output lines to `sink` as well.
    pub fn with_logs(mut self, sink: crate::logs::LogSink) -> Self {
        self.logs = Some(sink);
        self
    }

    /// The underlying engine client.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Removes containers this agent left behind (after a crash): any container labelled with
    /// this agent's id. Returns how many were removed.
    pub async fn remove_leftovers(&self) -> Result<usize, BollardError> {
        let filters = HashMap::from([(
            "label".to_owned(),
            vec![format!("{LABEL_AGENT}={}", self.config.agent_id)],
        )]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self.docker.list_containers(Some(options)).await?;
        let mut removed = 0;
        for c in containers {
            if let Some(id) = c.id {
                warn!(container = %id, "removing a container left by a previous run of this agent");
                self.remove(&id).await;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Runs one action to its end. Never leaves the container behind. `cancel` stops it (the
    /// outcome is then `Failed` with reason `Canceled`).
    pub async fn run(
        &self,
        workflow_id: &str,
        action: &ActionSpec,
        cancel: &CancellationToken,
    ) -> ActionOutcome {
        self.run_action(workflow_id, action, cancel).await.outcome
    }

    /// Like [`DockerRunner::run`], also returning the power action a successful action asked
    /// for.
    pub async fn run_action(
        &self,
        workflow_id: &str,
        action: &ActionSpec,
        cancel: &CancellationToken,
    ) -> ActionRun {
        let span = tracing::info_span!("action.container", workflow_id, action_id = %action.id, action = %action.name, image = %action.image);
        self.run_inner(workflow_id, action, cancel)
            .instrument(span)
            .await
    }

    async fn run_inner(
        &self,
        workflow_id: &str,
        action: &ActionSpec,
        cancel: &CancellationToken,
    ) -> ActionRun {
        let ended = |outcome| ActionRun {
            outcome,
            power: None,
        };
        let prepared = tokio::select! {
            biased;
            () = cancel.cancelled() => return ended(canceled("the workflow was canceled before the action started")),
            p = self.prepare(workflow_id, action) => p,
        };
        let (container_id, reason_dir) = match prepared {
            Ok(p) => p,
            Err(failure) => return ended(ActionOutcome::Failed(failure)),
        };
        let outcome = self
            .execute(workflow_id, action, &container_id, &reason_dir, cancel)
            .await;
        let power = if outcome == ActionOutcome::Succeeded {
            read_power(&reason_dir).await
        } else {
            None
        };
        self.remove(&container_id).await;
        if let Err(e) = tokio::fs::remove_dir_all(&reason_dir).await {
            debug!(dir = %reason_dir.display(), error = %e, "cannot remove the reason directory");
        }
        ActionRun { outcome, power }
    }

    /// Image, volumes, reason directory, container. On error nothing is left behind.
    async fn prepare(
        &self,
        workflow_id: &str,
        action: &ActionSpec,
    ) -> Result<(String, PathBuf), Failure> {
        self.ensure_image(&action.image).await?;
        for v in &action.volumes {
            if let VolumeSource::Named(name) = &v.source {
                let request = VolumeCreateRequest {
                    name: Some(name.clone()),
                    ..Default::default()
                };
                // Creating an existing volume is a no-op for the engine.
                self.docker
                    .create_volume(request)
                    .await
                    .map_err(|e| Failure {
                        reason: FailureReason::ContainerCreateFailed,
                        message: format!("cannot create volume {name:?}: {e}"),
                    })?;
            }
        }
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let reason_dir = self.config.work_dir.join(&suffix);
        tokio::fs::create_dir_all(&reason_dir)
            .await
            .map_err(|e| Failure {
                reason: FailureReason::RuntimeError,
                message: format!(
                    "cannot create the reason directory {}: {e}",
                    reason_dir.display()
                ),
            })?;
        let body = self.container_body(workflow_id, action, &reason_dir);
        let name = container_name(workflow_id, &action.id, &suffix[..12]);
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        match self.docker.create_container(Some(options), body).await {
            Ok(created) => Ok((created.id, reason_dir)),
            Err(e) => {
                let _ = tokio::fs::remove_dir_all(&reason_dir).await;
                Err(Failure {
                    reason: FailureReason::ContainerCreateFailed,
                    message: format!(
                        "cannot create the container for image {}: {e}",
                        action.image
                    ),
                })
            }
        }
    }

    fn container_body(
        &self,
        workflow_id: &str,
        action: &ActionSpec,
        reason_dir: &std::path::Path,
    ) -> ContainerCreateBody {
        let mut env = env_list(&action.env);
        env.push(format!("{REASON_DIR_ENV}={REASON_DIR}"));
        let mut binds: Vec<String> = action.volumes.iter().map(ToString::to_string).collect();
        binds.push(format!("{}:{REASON_DIR}:rw", reason_dir.display()));
        let labels = HashMap::from([
            (LABEL_AGENT.to_owned(), self.config.agent_id.clone()),
            (LABEL_WORKFLOW.to_owned(), workflow_id.to_owned()),
            (LABEL_ACTION.to_owned(), action.id.clone()),
        ]);
        ContainerCreateBody {
            image: Some(action.image.clone()),
            entrypoint: action.cmd.as_ref().map(|c| vec![c.clone()]),
            cmd: (action.cmd.is_some() || !action.args.is_empty()).then(|| action.args.clone()),
            env: Some(env),
            labels: Some(labels),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            host_config: Some(HostConfig {
                binds: Some(binds),
                privileged: Some(self.config.privileged),
                network_mode: Some(
                    action
                        .network_mode
                        .clone()
                        .unwrap_or_else(|| "host".to_owned()),
                ),
                pid_mode: action.pid_mode.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Uses the local image if present, otherwise pulls it (through the mirror if configured).
    pub async fn ensure_image(&self, image: &str) -> Result<(), Failure> {
        if self.docker.inspect_image(image).await.is_ok() {
            return Ok(());
        }
        let registry = &self.config.registry;
        let mirrored = registry
            .mirror
            .as_deref()
            .and_then(|m| mirror_reference(image, m));
        let source = mirrored.as_deref().unwrap_or(image);
        info!(image, source, "pulling image");
        let credentials = registry.username.as_ref().map(|u| DockerCredentials {
            username: Some(u.clone()),
            password: registry.password.clone(),
            serveraddress: registry.server_address.clone(),
            ..Default::default()
        });
        let options = CreateImageOptionsBuilder::default()
            .from_image(source)
            .build();
        let mut pull = self.docker.create_image(Some(options), None, credentials);
        while let Some(step) = pull.next().await {
            if let Err(e) = step {
                return Err(Failure {
                    reason: FailureReason::ImagePullFailed,
                    message: format!("cannot pull image {source}: {e}"),
                });
            }
        }
        if mirrored.is_some() {
            let (repo, tag) = split_tag(image);
            let options = TagImageOptionsBuilder::default()
                .repo(repo)
                .tag(tag)
                .build();
            self.docker
                .tag_image(source, Some(options))
                .await
                .map_err(|e| Failure {
                    reason: FailureReason::ImagePullFailed,
                    message: format!("pulled {source} but cannot tag it as {image}: {e}"),
                })?;
        }
        Ok(())
    }

    async fn execute(
        &self,
        workflow_id: &str,
        action: &ActionSpec,
        id: &str,
        reason_dir: &std::path::Path,
        cancel: &CancellationToken,
    ) -> ActionOutcome {
        if let Err(e) = self
            .docker
            .start_container(id, None::<StartContainerOptions>)
            .await
        {
            return ActionOutcome::Failed(Failure {
                reason: FailureReason::ContainerStartFailed,
                message: format!("cannot start the container: {e}"),
            });
        }
        let tail = Arc::new(Mutex::new(OutputTail::new(TAIL_LINES)));
        let logs = tokio::spawn(
            stream_logs(
                self.docker.clone(),
                id.to_owned(),
                format!("{workflow_id}/{}", action.name),
                tail.clone(),
                self.logs
                    .as_ref()
                    .map(|s| s.action(workflow_id, &action.id)),
            )
            .in_current_span(),
        );
        let timeout = action.timeout.or(self.config.default_timeout);
        let expired = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let mut wait = self
            .docker
            .wait_container(id, Some(WaitContainerOptionsBuilder::default().build()));
        enum End {
            Exited(Result<i64, BollardError>),
            TimedOut,
            Canceled,
        }
        let end = tokio::select! {
            biased;
            () = cancel.cancelled() => End::Canceled,
            () = expired => End::TimedOut,
            item = wait.next() => End::Exited(match item {
                Some(Ok(r)) => Ok(r.status_code),
                Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
                Some(Err(e)) => Err(e),
                None => Err(BollardError::DockerStreamError { error: "the wait stream ended without a result".to_owned() }),
            }),
        };
        drop(wait);
        if matches!(end, End::TimedOut | End::Canceled) {
            self.stop(id).await;
        }
        // The log stream ends when the container stops; give it a moment to drain.
        let _ = tokio::time::timeout(Duration::from_secs(5), logs).await;
        let tail_text = tail.lock().map(|t| t.render()).unwrap_or_default();
        let with_output = |head: String| {
            if tail_text.is_empty() {
                head
            } else {
                format!("{head}; last output:\n{tail_text}")
            }
        };
        match end {
            End::Exited(Ok(0)) => ActionOutcome::Succeeded,
            End::Exited(Ok(code)) => {
                let default = Failure {
                    reason: FailureReason::NonZeroExitCode,
                    message: with_output(format!("exit code {code}")),
                };
                let (reason, message) = read_action_files(reason_dir).await;
                ActionOutcome::Failed(apply_action_files(
                    default,
                    reason.as_deref(),
                    message.as_deref(),
                ))
            }
            End::Exited(Err(e)) => ActionOutcome::Failed(Failure {
                reason: FailureReason::RuntimeError,
                message: with_output(format!("lost track of the container: {e}")),
            }),
            End::TimedOut => ActionOutcome::Failed(Failure {
                reason: FailureReason::Timeout,
                message: with_output(format!(
                    "the action exceeded its timeout of {} and was stopped",
                    timeout.map_or_else(|| "none".to_owned(), humanize)
                )),
            }),
            End::Canceled => {
                canceled("the workflow was canceled; the action's container was stopped")
            }
        }
    }

    async fn stop(&self, id: &str) {
        let grace = i32::try_from(self.config.stop_grace.as_secs()).unwrap_or(i32::MAX);
        let options = StopContainerOptionsBuilder::default().t(grace).build();
        if let Err(e) = self.docker.stop_container(id, Some(options)).await {
            warn!(container = id, error = %e, "stopping the container failed; killing it");
            if let Err(e) = self
                .docker
                .kill_container(id, None::<KillContainerOptions>)
                .await
            {
                warn!(container = id, error = %e, "killing the container failed");
            }
        }
    }

    async fn remove(&self, id: &str) {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(false)
            .build();
        if let Err(e) = self.docker.remove_container(id, Some(options)).await {
            warn!(container = id, error = %e, "cannot remove the action container");
        }
    }
}

/// Reads `/tinkerbell/power` (a regular file, first line; anything else is ignored with a log
/// line).
async fn read_power(dir: &std::path::Path) -> Option<PowerAction> {
    let path = dir.join(POWER_FILE);
    let meta = tokio::fs::symlink_metadata(&path).await.ok()?;
    if !meta.file_type().is_file() || meta.len() > 256 {
        warn!(path = %path.display(), "ignoring /tinkerbell/power: not a small regular file");
        return None;
    }
    let text = tokio::fs::read_to_string(&path).await.ok()?;
    let action = PowerAction::parse(&text);
    if action.is_none() && !text.trim().is_empty() {
        warn!(content = %text.trim(), "ignoring /tinkerbell/power: expected reboot, kexec or poweroff");
    }
    action
}

fn canceled(message: &str) -> ActionOutcome {
    ActionOutcome::Failed(Failure {
        reason: FailureReason::Canceled,
        message: message.to_owned(),
    })
}

async fn stream_logs(
    docker: Docker,
    id: String,
    prefix: String,
    tail: Arc<Mutex<OutputTail>>,
    mut shipped: Option<crate::logs::ActionLog>,
) {
    use bollard::container::LogOutput;
    use tink_proto::workflow::v2::log_line::Stream;
    let options = LogsOptionsBuilder::default()
        .follow(true)
        .stdout(true)
        .stderr(true)
        .build();
    let mut logs = docker.logs(&id, Some(options));
    // stdout and stderr are split into lines separately.
    let mut out = LineSplitter::default();
    let mut err = LineSplitter::default();
    {
        let mut emit = |stream: Stream, line: &str| {
            info!(target: "tink_agent::action_output", "[{prefix}] {line}");
            if let Ok(mut t) = tail.lock() {
                t.push(line);
            }
            if let Some(shipped) = shipped.as_mut() {
                shipped.push(stream, line);
            }
        };
        while let Some(chunk) = logs.next().await {
            match chunk {
                Ok(LogOutput::StdErr { message }) => {
                    err.feed(&message, &mut |line| emit(Stream::Stderr, line));
                }
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    out.feed(&message, &mut |line| emit(Stream::Stdout, line));
                }
                Ok(LogOutput::StdIn { .. }) => {}
                Err(e) => {
                    debug!(error = %e, "the container's log stream ended");
                    break;
                }
            }
        }
        out.end(&mut |line| emit(Stream::Stdout, line));
        err.end(&mut |line| emit(Stream::Stderr, line));
    }
    if let Some(shipped) = shipped {
        shipped.finish();
    }
}

/// Splits one output stream into lines, cutting those over [`MAX_LINE_BYTES`].
#[derive(Debug, Default)]
struct LineSplitter {
    partial: String,
    /// Inside an over-long line whose first part was already emitted: drop until its end.
    cut: bool,
}

impl LineSplitter {
    fn feed(&mut self, bytes: &[u8], emit: &mut dyn FnMut(&str)) {
        self.partial.push_str(&String::from_utf8_lossy(bytes));
        loop {
            if let Some(i) = self.partial.find('\n') {
                let line: String = self.partial.drain(..=i).collect();
                if !std::mem::take(&mut self.cut) {
                    emit(line.trim_end_matches(['\n', '\r']));
                }
            } else if self.partial.len() > MAX_LINE_BYTES {
                if !self.cut {
                    let mut end = MAX_LINE_BYTES;
                    while !self.partial.is_char_boundary(end) {
                        end -= 1;
                    }
                    emit(&format!(
                        "[line cut at {MAX_LINE_BYTES} bytes] {}",
                        &self.partial[..end]
                    ));
                    self.cut = true;
                }
                self.partial.clear();
            } else {
                break;
            }
        }
    }

    fn end(&mut self, emit: &mut dyn FnMut(&str)) {
        if !self.partial.is_empty() && !self.cut {
            emit(&self.partial);
        }
        self.partial.clear();
    }
}

/// The last lines of an action's output, each cut to a bounded length.
#[derive(Debug)]
pub struct OutputTail {
    lines: VecDeque<String>,
    max: usize,
}

impl OutputTail {
    /// Keeps the last `max` lines.
    pub fn new(max: usize) -> Self {
        Self {
            lines: VecDeque::with_capacity(max),
            max,
        }
    }

    /// Adds a line.
    pub fn push(&mut self, line: &str) {
        if self.max == 0 {
            return;
        }
        if self.lines.len() == self.max {
            self.lines.pop_front();
        }
        self.lines.push_back(truncate(line, TAIL_LINE_BYTES));
    }

    /// The lines joined by newlines.
    pub fn render(&self) -> String {
        self.lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A Docker container name for an action: `tink-<workflow>-<action>-<suffix>` with characters
/// Docker refuses replaced by `-`.
pub fn container_name(workflow_id: &str, action_id: &str, suffix: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .take(40)
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    format!(
        "tink-{}-{}-{}",
        clean(workflow_id),
        clean(action_id),
        clean(suffix)
    )
}

/// The reference to pull from `mirror` for a Docker Hub image, or `None` for an image that names
/// its own registry (`quay.io/x`, `localhost:5000/x`).
pub fn mirror_reference(image: &str, mirror: &str) -> Option<String> {
    let mirror = mirror
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    if mirror.is_empty() {
        return None;
    }
    let path = image
        .strip_prefix("docker.io/")
        .or_else(|| image.strip_prefix("index.docker.io/"))
        .unwrap_or(image);
    let first = path.split('/').next().unwrap_or("");
    let has_registry =
        path.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if has_registry {
        return None;
    }
    if path.contains('/') {
        Some(format!("{mirror}/{path}"))
    } else {
        Some(format!("{mirror}/library/{path}"))
    }
}

/// Splits `repo[:tag]` (a digest reference keeps its digest in the repo part, tag `latest`).
fn split_tag(image: &str) -> (&str, &str) {
    if image.contains('@') {
        return (image, "latest");
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(i) => (&image[..last_slash + i], &image[last_slash + i + 1..]),
        None => (image, "latest"),
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_passwords_stay_out_of_debug_output() {
        let config = RegistryConfig {
            username: Some("user".into()),
            password: Some("hunter2".into()),
            ..Default::default()
        };
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let mut t = OutputTail::new(3);
        for i in 0..10 {
            t.push(&format!("line {i}"));
        }
        assert_eq!(t.render(), "line 7\nline 8\nline 9");
        let mut t = OutputTail::new(2);
        t.push(&"x".repeat(10_000));
        assert!(t.render().len() <= TAIL_LINE_BYTES);
    }

    #[test]
    fn container_names_are_docker_safe() {
        assert_eq!(
            container_name("ns/wf 1", "act:2", "abc"),
            "tink-ns-wf-1-act-2-abc"
        );
    }

    #[test]
    fn mirrors_apply_to_docker_hub_images_only() {
        let m = "mirror.local:5000";
        assert_eq!(
            mirror_reference("alpine:3", m).as_deref(),
            Some("mirror.local:5000/library/alpine:3")
        );
        assert_eq!(mirror_reference("quay.io/tinkerbell/actions", m), None);
        assert_eq!(
            mirror_reference("tinkerbell/image2disk:v1", "https://mirror.local:5000/").as_deref(),
            Some("mirror.local:5000/tinkerbell/image2disk:v1")
        );
        assert_eq!(
            mirror_reference("docker.io/library/busybox", m).as_deref(),
            Some("mirror.local:5000/library/busybox")
        );
        assert_eq!(mirror_reference("localhost:5000/x", m), None);
        assert_eq!(mirror_reference("alpine", ""), None);
    }

    #[test]
    fn tags_split() {
        assert_eq!(split_tag("a/b:1"), ("a/b", "1"));
        assert_eq!(split_tag("host:5000/b"), ("host:5000/b", "latest"));
        assert_eq!(split_tag("b"), ("b", "latest"));
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(humanize(Duration::from_secs(2)), "2s");
        assert_eq!(humanize(Duration::from_millis(1500)), "1.500s");
    }
}
