//! tink-controller: the only writer of Workflow status.
#![forbid(unsafe_code)]

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

/// mimalloc instead of glibc malloc: allocation is a large share of a request's cost here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The tinkerbell controller: prepares, dispatches, supervises and cancels Workflows.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    bus: tink_bus::BusArgs,
    /// This replica's identity in the Lease and in Events; defaults to the host name (the pod name).
    #[arg(long, env = "TINK_REPLICA_ID")]
    replica_id: Option<String>,
    /// Only watch this namespace (default: all namespaces).
    #[arg(long, env = "TINK_NAMESPACE")]
    namespace: Option<String>,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "TINK_LEASE_NAMESPACE", default_value = "tink-system")]
    lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, env = "TINK_LEASE_NAME", default_value = "tink-controller")]
    lease_name: String,
    /// Seconds a leader's claim is valid without renewal (a standby takes over after this).
    #[arg(long, env = "TINK_LEASE_DURATION_SECONDS", default_value_t = 10)]
    lease_duration_seconds: u64,
    /// Seconds a Workflow may stay Scheduled before it fails (ScheduledTimeout).
    #[arg(long, env = "TINK_SCHEDULED_TIMEOUT_SECONDS", default_value_t = 300)]
    scheduled_timeout_seconds: u64,
    /// Seconds a Workflow may stay Cancelling before it is forced to Canceled (CancelTimeout).
    #[arg(long, env = "TINK_CANCELLING_TIMEOUT_SECONDS", default_value_t = 120)]
    cancelling_timeout_seconds: u64,
    /// Milliseconds before the first re-dispatch after a rejection (doubles each time).
    #[arg(long, env = "TINK_BACKOFF_BASE_MS", default_value_t = 5000)]
    backoff_base_ms: u64,
    /// Longest wait between re-dispatches after rejections, in milliseconds.
    #[arg(long, env = "TINK_BACKOFF_MAX_MS", default_value_t = 300_000)]
    backoff_max_ms: u64,
    /// Seconds added to an action's timeout before the controller fails it (the agent enforces it first).
    #[arg(long, env = "TINK_ACTION_TIMEOUT_GRACE_SECONDS", default_value_t = 30)]
    action_timeout_grace_seconds: u64,
    /// Seconds the agent of a Workflow it confirmed may be disconnected before the Workflow fails
    /// with reason AgentLost.
    #[arg(long, env = "TINK_AGENT_LOST_AFTER_SECONDS", default_value_t = 900)]
    agent_lost_after_seconds: u64,
    /// Seconds between resyncs: every unfinished Workflow is looked at again (the safety net
    /// for a lost wake-up); 0 turns it off.
    #[arg(long, env = "TINK_RESYNC_SECONDS", default_value_t = 60)]
    resync_seconds: u64,
    /// The most Workflow triggers queued for the reconciler (a full queue drops them; the
    /// resync catches up).
    #[arg(long, env = "TINK_TRIGGER_QUEUE", default_value_t = 16384)]
    trigger_queue: usize,
    /// Seconds after which the controller forgets an agent it has not seen.
    #[arg(long, env = "TINK_FORGET_AFTER_SECONDS", default_value_t = 3600)]
    forget_after_seconds: u64,
    /// Seconds between reconciliations of the agent secrets bucket with every Hardware
    /// (rotated Secrets, removed annotations, deleted Hardware).
    #[arg(long, env = "TINK_AGENT_SECRETS_SWEEP_SECONDS", default_value_t = 30)]
    agent_secrets_sweep_seconds: u64,
    /// The controller's own namespace: it copies each valid agent secret (a Secret of type
    /// tinkerbell.org/agent-secret named by a Hardware) into it for Hegel, which may read
    /// Secrets only there.
    #[arg(long, env = "TINK_SYSTEM_NAMESPACE", default_value = "tink-system")]
    system_namespace: String,
    /// Seconds a BMC Job of a Workflow's spec.bootOptions may run before the Workflow fails
    /// with BootJobTimeout.
    #[arg(long, env = "TINK_BOOT_JOB_TIMEOUT_SECONDS", default_value_t = 900)]
    boot_job_timeout_seconds: u64,
    /// The Cluster API infrastructure provider (TinkerbellCluster, TinkerbellMachine): `auto`
    /// runs it when the API server serves Cluster API's Machines (checked when a replica starts
    /// leading; restart the controller after installing Cluster API), `on` always, `off` never.
    #[arg(long, env = "TINK_CAPI", default_value = "auto")]
    capi: tink_controller::capi::CapiMode,
    /// The version of Cluster API's core kinds (Cluster, Machine) the provider reads.
    #[arg(long, env = "TINK_CAPI_CORE_VERSION", default_value = "v1beta2")]
    capi_core_version: String,
    /// The most reconciles at once.
    #[arg(long, env = "TINK_CONTROLLER_CONCURRENCY", default_value_t = 64)]
    concurrency: u16,
    /// Do not publish Kubernetes Events for transitions.
    #[arg(long, env = "TINK_NO_KUBE_EVENTS")]
    no_kube_events: bool,
    /// Discovery: create a Hardware `discovery-<mac>` (not approved: no Workflow until a
    /// person with the verb `approve` on hardware approves it) for each machine that enrolls
    /// (servers started with --enrollment). Off by default.
    #[arg(long, env = "TINK_DISCOVERY")]
    discovery: bool,
    /// The namespace of discovered Hardware (default: --namespace, else `default`).
    #[arg(long, env = "TINK_DISCOVERY_NAMESPACE")]
    discovery_namespace: Option<String>,
    /// The most discovered Hardware waiting for approval; later enrollments are dropped (and
    /// counted) until some are approved or deleted.
    #[arg(long, env = "TINK_DISCOVERY_MAX", default_value_t = 100)]
    discovery_max: usize,
    /// The OSIE (name, in the discovery namespace) discovered machines boot.
    #[arg(long, env = "TINK_DISCOVERY_OSIE")]
    discovery_osie: Option<String>,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("tink-controller", &args.telemetry)?;

    let replica_id = tink_runtime::replica_id(args.replica_id, "tink-controller");
    let mut config = tink_controller::ControllerConfig::new(args.bus.nats_url.clone(), replica_id);
    config.discovery = tink_controller::inventory::DiscoveryConfig {
        enabled: args.discovery,
        namespace: args
            .discovery_namespace
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| "default".into()),
        max: args.discovery_max,
        osie: args.discovery_osie.filter(|o| !o.is_empty()),
    };
    if let (Some(ns), true) = (&args.namespace, args.discovery)
        && *ns != config.discovery.namespace
    {
        anyhow::bail!(
            "--discovery-namespace {} is outside --namespace {ns}: this controller would not see the Hardware it creates",
            config.discovery.namespace
        );
    }
    config.namespace = args.namespace;
    config.concurrency = args.concurrency.max(1);
    config.kube_events = !args.no_kube_events;
    config.bus = args.bus.bus_config();
    config.nats_auth = args.bus.nats_auth();
    config.workflow = tink_workflow::Config {
        scheduled_timeout: Duration::from_secs(args.scheduled_timeout_seconds),
        cancelling_timeout: Duration::from_secs(args.cancelling_timeout_seconds),
        backoff_base: Duration::from_millis(args.backoff_base_ms),
        backoff_max: Duration::from_millis(args.backoff_max_ms.max(args.backoff_base_ms)),
        action_timeout_grace: Duration::from_secs(args.action_timeout_grace_seconds),
        agent_lost_after: Duration::from_secs(args.agent_lost_after_seconds.max(1)),
    };
    config.resync_period = Duration::from_secs(args.resync_seconds);
    config.agent_secrets_sweep = Duration::from_secs(args.agent_secrets_sweep_seconds.max(1));
    config.system_namespace = args.system_namespace;
    config.trigger_queue = args.trigger_queue.max(1);
    config.boot_job_timeout = Duration::from_secs(args.boot_job_timeout_seconds.max(1));
    config.capi.mode = args.capi;
    config.capi.core_version = args.capi_core_version;
    config.forget_after = Duration::from_secs(args.forget_after_seconds.max(60));
    let duration = Duration::from_secs(args.lease_duration_seconds.max(3));
    config.lease = tink_controller::LeaseConfig {
        namespace: args.lease_namespace,
        name: args.lease_name,
        duration,
        renew_period: duration / 5,
        renew_deadline: duration * 7 / 10,
        retry_period: duration / 5,
    };

    let client = kube::Client::try_default()
        .await
        .context("cannot configure the Kubernetes client (KUBECONFIG or in-cluster)")?;

    let mut service = tink_runtime::Service::new(&args.admin);
    let metrics = tink_controller::Metrics::register(service.registry());
    service
        .run(|health, shutdown| tink_controller::run(config, client, health, metrics, shutdown))
        .await?;
    Ok(())
}
