//! hegel: EC2-style instance metadata and per-machine iPXE scripts.
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::{ArgAction, Parser};

/// mimalloc instead of glibc malloc: allocation is a large share of a request's cost here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hegel: answers each machine, known by its source IP, with its own metadata (the EC2 API
/// cloud-init crawls) and its iPXE boot script.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address of the HTTP listener.
    #[arg(long, env = "TINK_HEGEL_LISTEN", default_value = "0.0.0.0:50061")]
    listen: SocketAddr,
    /// Networks of proxies whose X-Forwarded-For is believed (comma separated CIDRs or
    /// addresses); from any other peer the header is ignored.
    #[arg(long, env = "TINK_HEGEL_TRUSTED_PROXIES", value_delimiter = ',')]
    trusted_proxies: Vec<hegel::Cidr>,
    /// Only serve Hardware of this namespace (default: all namespaces).
    #[arg(long, env = "TINK_NAMESPACE")]
    namespace: Option<String>,
    /// Where the controller keeps the copies of agent secrets (its own namespace): the only
    /// namespace whose Secrets Hegel reads (watched, for `tink_agent_secret=`).
    #[arg(long, env = "TINK_SYSTEM_NAMESPACE", default_value = "tink-system")]
    system_namespace: String,
    /// The tink-server address the OSIE's agent dials (`grpc_authority=` in the iPXE script).
    #[arg(long, env = "TINK_HEGEL_GRPC_AUTHORITY")]
    grpc_authority: String,
    /// Whether the agent uses TLS towards the server (`tinkerbell_tls=`).
    #[arg(long, env = "TINK_HEGEL_TINKERBELL_TLS", default_value_t = true, action = ArgAction::Set)]
    tinkerbell_tls: bool,
    /// Whether the agent skips verifying the server certificate (`tinkerbell_insecure_tls=`).
    #[arg(long, env = "TINK_HEGEL_TINKERBELL_INSECURE_TLS", default_value_t = false, action = ArgAction::Set)]
    tinkerbell_insecure_tls: bool,
    /// Where the OSIE sends syslog (`syslog_host=`): tink-netboot's syslog receiver, `HOST` or
    /// `HOST:PORT` (514 when left out; the OSIE runs busybox `syslogd -R` with it); left out
    /// when unset.
    #[arg(long, env = "TINK_HEGEL_SYSLOG_HOST")]
    syslog_host: Option<String>,
    /// `facility=` for Hardware without a migrated facility code; left out when unset.
    #[arg(long, env = "TINK_HEGEL_FACILITY")]
    facility: Option<String>,
    /// Kernel consoles, one `console=` each, in order: the flag repeated, or space separated
    /// (`tty0 ttyS1,115200`, the default, as Smee's).
    #[arg(long = "console", env = "TINK_HEGEL_CONSOLES", value_delimiter = ' ', default_values_t = ["tty0".to_string(), "ttyS1,115200".to_string()])]
    consoles: Vec<String>,
    /// Kernel parameters added after Smee's and before each Hardware's osie.kernelParams
    /// (space separated, or the flag repeated).
    #[arg(
        long = "extra-kernel-params",
        env = "TINK_HEGEL_EXTRA_KERNEL_PARAMS",
        value_delimiter = ' '
    )]
    extra_kernel_params: Vec<String>,
    /// Discovery: the OSIE a machine no Hardware names boots (asking for the script of its MAC,
    /// as tink-netboot --discovery tells it), to enroll. Off when unset.
    #[arg(long, env = "TINK_DISCOVERY_OSIE")]
    discovery_osie: Option<String>,
    /// The namespace of that OSIE (default: --namespace, else `default`).
    #[arg(long, env = "TINK_DISCOVERY_NAMESPACE")]
    discovery_namespace: Option<String>,
    /// Attempts after the first for the kernel, the initrd and the boot in the iPXE script.
    #[arg(long, env = "TINK_HEGEL_IPXE_RETRIES", default_value_t = 10)]
    ipxe_retries: u32,
    /// Seconds between those attempts.
    #[arg(long, env = "TINK_HEGEL_IPXE_RETRY_DELAY_SECONDS", default_value_t = 2)]
    ipxe_retry_delay_seconds: u32,
    /// Requests per second one client address may make on average; 0 turns the limit off.
    #[arg(long, env = "TINK_HEGEL_RATE_LIMIT_PER_SECOND", default_value_t = 20)]
    rate_limit_per_second: u32,
    /// Requests one client address may make at once.
    #[arg(long, env = "TINK_HEGEL_RATE_LIMIT_BURST", default_value_t = 100)]
    rate_limit_burst: u32,
    /// This replica's name in logs; defaults to the host name (the pod name).
    #[arg(long, env = "TINK_REPLICA_ID")]
    replica_id: Option<String>,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("hegel", &args.telemetry)?;
    let replica_id = tink_runtime::replica_id(args.replica_id, "hegel");
    tracing::info!(replica = %replica_id, "hegel starting");

    let mut ipxe = hegel::IpxeConfig::new(args.grpc_authority);
    ipxe.tinkerbell_tls = args.tinkerbell_tls;
    ipxe.tinkerbell_insecure_tls = args.tinkerbell_insecure_tls;
    ipxe.syslog_host = args.syslog_host.filter(|s| !s.trim().is_empty());
    if let Some(host) = &ipxe.syslog_host
        && !host.bytes().all(|b| b.is_ascii_graphic())
    {
        anyhow::bail!(
            "--syslog-host {host:?}: expected HOST or HOST:PORT (one kernel parameter: no spaces)"
        );
    }
    ipxe.facility = args.facility.filter(|s| !s.trim().is_empty());
    ipxe.console = args
        .consoles
        .into_iter()
        .filter(|c| !c.is_empty())
        .collect();
    ipxe.extra_kernel_params = args
        .extra_kernel_params
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    ipxe.discovery_osie = args.discovery_osie.filter(|o| !o.is_empty()).map(|osie| {
        let namespace = args
            .discovery_namespace
            .clone()
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| "default".into());
        (namespace, osie)
    });
    ipxe.retries = args.ipxe_retries;
    ipxe.retry_delay_seconds = args.ipxe_retry_delay_seconds;
    let mut config = hegel::HegelConfig::new(args.listen, ipxe);
    config.trusted_proxies = args.trusted_proxies;
    config.namespace = args.namespace;
    config.system_namespace = args.system_namespace;
    config.rate_limit = hegel::RateLimit {
        per_second: args.rate_limit_per_second,
        burst: args.rate_limit_burst,
    };

    let client = kube::Client::try_default()
        .await
        .context("cannot configure the Kubernetes client (KUBECONFIG or in-cluster)")?;

    let mut service = tink_runtime::Service::new(&args.admin);
    let metrics = hegel::Metrics::register(service.registry());
    service
        .run(|health, shutdown| hegel::run(config, client, health, metrics, shutdown))
        .await?;
    Ok(())
}
