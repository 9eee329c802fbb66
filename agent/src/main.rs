//! tink-agent: runs the workflows a Tinkerbell server sends to this machine.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser};
use tink_agent::config::Transport;
use tink_agent::{
    AgentConfig, ClientTls, DockerRunner, Metrics, RegistryConfig, RunnerConfig, ServerAddress,
};

/// The Tinkerbell agent: holds a command stream to a server and runs each workflow action as a
/// Docker container.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// This machine's id; defaults to the kernel command line's `worker_id` (else `hw_addr`),
    /// else the MAC address of the first non-loopback interface.
    #[arg(long, env = "TINK_AGENT_ID")]
    agent_id: Option<String>,
    /// Server replicas (`host:port` or `http(s)://host:port`), comma separated or repeated;
    /// tried round robin. Defaults to the kernel command line's `grpc_authority`.
    #[arg(long = "server", env = "TINK_AGENT_SERVERS", value_delimiter = ',')]
    servers: Vec<ServerAddress>,
    /// The kernel command line read for the values the flags and environment do not give
    /// (Smee's and Hegel's names: `worker_id`, `hw_addr`, `grpc_authority`, `tinkerbell_tls`,
    /// ...); a missing file counts as empty.
    #[arg(
        long,
        env = "TINK_AGENT_KERNEL_CMDLINE",
        default_value = "/proc/cmdline"
    )]
    kernel_cmdline: PathBuf,
    /// PEM CA bundle trusted when the kernel command line turns TLS on (`tinkerbell_tls=true`)
    /// and no `--tls-ca` is given: the system's roots.
    #[arg(
        long,
        env = "TINK_AGENT_SYSTEM_CA",
        default_value = "/etc/ssl/certs/ca-certificates.crt"
    )]
    system_ca: PathBuf,
    /// PEM CA bundle that signed the servers' certificates. TLS is the default: without it the
    /// agent starts only when the kernel command line gives `grpc_authority` with
    /// `tinkerbell_tls=true` (system roots) or `tinkerbell_tls=false`, or with --insecure.
    #[arg(long, env = "TINK_AGENT_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Talk plaintext gRPC to the servers (servers started with --insecure; development only:
    /// commands carry the actions' environment values and the session token).
    #[arg(long, env = "TINK_AGENT_INSECURE", conflicts_with = "tls_ca")]
    insecure: bool,
    /// PEM client certificate, for servers that require mutual TLS.
    #[arg(long, env = "TINK_AGENT_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// PEM client key.
    #[arg(long, env = "TINK_AGENT_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Name to verify in the servers' certificates, when it differs from the address.
    #[arg(long, env = "TINK_AGENT_TLS_DOMAIN", requires = "tls_ca")]
    tls_domain: Option<String>,
    /// The machine's boot secret, for Hardware that reference one
    /// (`tinkerbell.org/agent-secret`); Hegel's boot script passes it as `tink_agent_secret`.
    /// Single-use: the servers accept it to create the agent's session once.
    #[arg(
        long,
        env = "TINK_AGENT_SECRET",
        hide_env_values = true,
        conflicts_with = "agent_secret_file"
    )]
    agent_secret: Option<String>,
    /// A file holding the machine's pre-shared secret (instead of `--agent-secret`).
    #[arg(long, env = "TINK_AGENT_SECRET_FILE")]
    agent_secret_file: Option<PathBuf>,
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
    /// Where the machine's /proc and /sys are read for the hardware inventory reported at start.
    #[arg(long, env = "TINK_AGENT_INVENTORY_ROOT", default_value = "/")]
    inventory_root: std::path::PathBuf,
    /// Do not collect or report the hardware inventory.
    #[arg(long, env = "TINK_AGENT_NO_INVENTORY")]
    no_inventory: bool,
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

    let cmdline = match tink_agent::cmdline::KernelCmdline::read(&args.kernel_cmdline) {
        Ok(c) => c,
        Err(error) => {
            tracing::warn!(path = %args.kernel_cmdline.display(), %error, "cannot read the kernel command line; ignoring it");
            Default::default()
        }
    };
    let from_cmdline = cmdline.settings()?;
    let agent_id = match args.agent_id {
        Some(id) if !id.trim().is_empty() => id,
        _ => match &from_cmdline.agent_id {
            Some(id) => {
                tracing::info!(agent_id = %id, "agent id from the kernel command line");
                id.clone()
            }
            None => tink_agent::config::default_agent_id(Path::new("/sys/class/net")).context(
                "no --agent-id given, no worker_id or hw_addr on the kernel command line, and no non-loopback interface with a MAC address was found",
            )?,
        },
    };
    // One spelling of the id everywhere (the servers refuse any other): a worker_id of
    // `AA-BB-CC-00-00-01` is sent as `aa:bb:cc:00:00:01`.
    let agent_id = tink_api::AgentId::normalize(&agent_id)
        .with_context(|| format!("agent id {agent_id:?}"))?
        .into_string();
    // The kernel command line's TLS settings go with its servers: flags keep their meaning.
    let servers_from_cmdline = args.servers.is_empty();
    let servers = if servers_from_cmdline {
        if from_cmdline.servers.is_empty() {
            anyhow::bail!(
                "no --server (TINK_AGENT_SERVERS) given and no grpc_authority= on the kernel command line ({})",
                args.kernel_cmdline.display()
            );
        }
        tracing::info!(servers = ?from_cmdline.servers.iter().map(ToString::to_string).collect::<Vec<_>>(), tls = ?from_cmdline.tls, "servers from the kernel command line");
        from_cmdline.servers.clone()
    } else {
        args.servers
    };
    if let Some(host) = &from_cmdline.syslog_host {
        tracing::info!(syslog_host = %host, "syslog_host on the kernel command line is not used by tink-agent (logs go to standard error)");
    }
    let mut config = AgentConfig::new(agent_id.clone(), servers);
    config.backoff_max = Duration::from_secs(args.backoff_max_seconds.max(1));
    config.token_file = Some(args.work_dir.join("session-token"));
    config.inventory_root = (!args.no_inventory).then(|| args.inventory_root.clone());
    config.agent_secret = match (&args.agent_secret, &args.agent_secret_file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--agent-secret-file {}", path.display()))?,
        ),
        (None, None) => from_cmdline.agent_secret.clone(),
    };
    let split = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_owned).collect() };
    config.power_commands = tink_agent::config::PowerCommands {
        reboot: split(&args.reboot_command),
        kexec: split(&args.kexec_command),
        poweroff: split(&args.poweroff_command),
    };
    let transport = Transport::choose(
        args.tls_ca.is_some(),
        args.insecure,
        from_cmdline.tls,
        servers_from_cmdline,
    )?;
    config.tls = match transport {
        Transport::TlsWithCa => {
            let ca = args.tls_ca.as_deref().context("--tls-ca")?;
            Some(ClientTls {
                ca_pem: read(ca)?,
                identity: match (&args.tls_cert, &args.tls_key) {
                    (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
                    _ => None,
                },
                domain: args.tls_domain,
            })
        }
        Transport::TlsWithSystemRoots => Some(ClientTls {
            ca_pem: read(&args.system_ca).context(
                "tinkerbell_tls=true on the kernel command line and no --tls-ca: the system CA bundle is needed",
            )?,
            identity: None,
            domain: None,
        }),
        Transport::PlaintextByFlag => {
            tracing::warn!(
                "--insecure: plaintext gRPC to the servers; commands (with action env values) and the session token cross the network in the clear"
            );
            None
        }
        Transport::PlaintextByCmdline => {
            tracing::warn!(
                "tinkerbell_tls=false on the kernel command line: plaintext gRPC to its grpc_authority servers; commands (with action env values) and the session token cross the network in the clear"
            );
            None
        }
    };
    tink_agent::client::check_schemes(&config.servers, config.tls.is_some())?;
    if servers_from_cmdline && from_cmdline.insecure_tls == Some(true) {
        tracing::warn!(
            "tinkerbell_insecure_tls=true on the kernel command line: tink-agent always verifies the server certificate (give its CA with --tls-ca)"
        );
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

    let mut service = tink_runtime::Service::without_forced_exit(&args.admin);
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
                    () = service.shutdown().cancelled() => return Ok(()),
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    };
    let metrics = Metrics::register(service.registry());
    let log_metrics = tink_agent::LogMetrics::default();
    log_metrics.register(service.registry());
    let logs = tink_agent::LogSink::new(args.logs.config(), log_metrics);
    service
        .run(|health, shutdown| {
            tink_agent::run_with_logs(config, logs, runner, health, metrics, shutdown)
        })
        .await?;
    Ok(())
}
