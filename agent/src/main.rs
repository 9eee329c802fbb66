//! tink-agent: runs the workflows a Tinkerbell server sends to this machine.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser};
use tink_agent::{
    AgentConfig, ClientTls, DockerRunner, Metrics, RegistryConfig, RunnerConfig, ServerAddress,
};

/// The Tinkerbell agent: holds a command stream to a server and runs each workflow action as a
/// Docker container.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// This machine's id; defaults to the MAC address of the first non-loopback interface.
    #[arg(long, env = "TINK_AGENT_ID")]
    agent_id: Option<String>,
    /// Server replicas (`host:port` or `http(s)://host:port`), comma separated or repeated;
    /// tried round robin.
    #[arg(
        long = "server",
        env = "TINK_AGENT_SERVERS",
        value_delimiter = ',',
        required = true
    )]
    servers: Vec<ServerAddress>,
    /// PEM CA bundle that signed the servers' certificates; turns TLS on.
    #[arg(long, env = "TINK_AGENT_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate, for servers that require mutual TLS.
    #[arg(long, env = "TINK_AGENT_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// PEM client key.
    #[arg(long, env = "TINK_AGENT_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Name to verify in the servers' certificates, when it differs from the address.
    #[arg(long, env = "TINK_AGENT_TLS_DOMAIN", requires = "tls_ca")]
    tls_domain: Option<String>,
    /// Docker engine address (`unix:///var/run/docker.sock`, `tcp://host:2375`); default: the
    /// local socket.
    #[arg(long, env = "DOCKER_HOST")]
    docker_host: Option<String>,
    /// Registry mirror (`host[:port]`) Docker Hub images are pulled from.
    #[arg(long, env = "TINK_AGENT_REGISTRY_MIRROR")]
    registry_mirror: Option<String>,
    /// Registry user name for pulls.
    #[arg(long, env = "TINK_AGENT_REGISTRY_USERNAME")]
    registry_username: Option<String>,
    /// Registry password for pulls.
    #[arg(long, env = "TINK_AGENT_REGISTRY_PASSWORD", hide_env_values = true)]
    registry_password: Option<String>,
    /// The registry the credentials are for.
    #[arg(long, env = "TINK_AGENT_REGISTRY_SERVER")]
    registry_server: Option<String>,
    /// Directory for per-action reason directories (must be visible to the Docker engine).
    #[arg(
        long,
        env = "TINK_AGENT_WORK_DIR",
        default_value = "/var/lib/tink-agent"
    )]
    work_dir: PathBuf,
    /// Timeout of actions that set none, in seconds; unset: no limit.
    #[arg(long, env = "TINK_AGENT_DEFAULT_ACTION_TIMEOUT_SECONDS")]
    default_action_timeout_seconds: Option<u64>,
    /// Seconds a stopped action gets between SIGTERM and SIGKILL.
    #[arg(long, env = "TINK_AGENT_STOP_GRACE_SECONDS", default_value_t = 10)]
    stop_grace_seconds: u64,
    /// Command run for the power contract's `reboot` (split on whitespace, no shell).
    #[arg(long, env = "TINK_AGENT_REBOOT_COMMAND", default_value = "reboot -f")]
    reboot_command: String,
    /// Command run for the power contract's `kexec` (the action loaded the kernel).
    #[arg(long, env = "TINK_AGENT_KEXEC_COMMAND", default_value = "kexec -e")]
    kexec_command: String,
    /// Command run for the power contract's `poweroff`.
    #[arg(
        long,
        env = "TINK_AGENT_POWEROFF_COMMAND",
        default_value = "poweroff -f"
    )]
    poweroff_command: String,
    /// Run action containers privileged (provisioning needs the disks).
    #[arg(long, env = "TINK_AGENT_PRIVILEGED", default_value_t = true, action = ArgAction::Set)]
    privileged: bool,
    /// Longest pause between reconnection or publication attempts, in seconds.
    #[arg(long, env = "TINK_AGENT_BACKOFF_MAX_SECONDS", default_value_t = 5)]
    backoff_max_seconds: u64,
    #[command(flatten)]
    logs: tink_agent::logs::LogArgs,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("tink-agent", &args.telemetry)?;

    let agent_id = match args.agent_id {
        Some(id) if !id.trim().is_empty() => id,
        _ => tink_agent::config::default_agent_id(Path::new("/sys/class/net")).context(
            "no --agent-id given and no non-loopback interface with a MAC address was found",
        )?,
    };
    let mut config = AgentConfig::new(agent_id.clone(), args.servers);
    config.backoff_max = Duration::from_secs(args.backoff_max_seconds.max(1));
    config.token_file = Some(args.work_dir.join("session-token"));
    let split = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_owned).collect() };
    config.power_commands = tink_agent::config::PowerCommands {
        reboot: split(&args.reboot_command),
        kexec: split(&args.kexec_command),
        poweroff: split(&args.poweroff_command),
    };
    if let Some(ca) = &args.tls_ca {
        config.tls = Some(ClientTls {
            ca_pem: read(ca)?,
            identity: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
                _ => None,
            },
            domain: args.tls_domain,
        });
    }
    let runner_config = RunnerConfig {
        agent_id,
        docker_host: args.docker_host,
        registry: RegistryConfig {
            mirror: args.registry_mirror,
            username: args.registry_username,
            password: args.registry_password,
            server_address: args.registry_server,
        },
        default_timeout: args.default_action_timeout_seconds.map(Duration::from_secs),
        stop_grace: Duration::from_secs(args.stop_grace_seconds),
        work_dir: args.work_dir,
        privileged: args.privileged,
    };

    let shutdown = tink_runtime::shutdown_token();
    // In the OSIE the Docker engine may start after the agent: wait for it (with back-off).
    let mut backoff =
        tink_agent::config::Backoff::new(Duration::from_millis(200), config.backoff_max);
    let runner = loop {
        match DockerRunner::connect(runner_config.clone()).await {
            Ok(runner) => break runner,
            Err(e @ tink_agent::runtime::RunnerError::WorkDir { .. }) => return Err(e.into()),
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, ?delay, "the Docker engine is not reachable yet");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    };
    let health = tink_runtime::Health::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let log_metrics = tink_agent::LogMetrics::default();
    log_metrics.register(&mut registry);
    let logs = tink_agent::LogSink::new(args.logs.config(), log_metrics);
    let admin = tokio::net::TcpListener::bind(args.admin.admin_addr)
        .await
        .with_context(|| format!("cannot bind the admin endpoint {}", args.admin.admin_addr))?;
    let admin_task = tokio::spawn(tink_runtime::serve_admin(
        admin,
        health.clone(),
        Arc::new(registry),
        shutdown.clone(),
    ));
    let result =
        tink_agent::run_with_logs(config, logs, runner, health, metrics, shutdown.clone()).await;
    shutdown.cancel();
    admin_task.await.context("admin endpoint task")??;
    result?;
    Ok(())
}
