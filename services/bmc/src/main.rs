//! tink-bmc-controller: Rufio's Machines, Jobs and Tasks over Redfish, IPMI and an RPC webhook.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

/// The BMC controller: reads each Machine's power state on a period, runs Jobs' power, boot
/// device and virtual media tasks against the Machines' BMCs, one Job at a time per Machine.
/// One replica acts at a time (a Lease).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Serve only this namespace's Machines, Jobs and Tasks (default: all namespaces).
    #[arg(long, env = "TINK_NAMESPACE")]
    namespace: Option<String>,
    /// This replica's name in the Lease, Events and logs; defaults to the host name (the pod).
    #[arg(long, env = "TINK_REPLICA_ID")]
    replica_id: Option<String>,
    /// Namespace of the leader election Lease.
    #[arg(long, env = "TINK_LEASE_NAMESPACE", default_value = "tink-system")]
    lease_namespace: String,
    /// Name of the leader election Lease.
    #[arg(long, env = "TINK_LEASE_NAME", default_value = tink_bmc_controller::CONTROLLER_NAME)]
    lease_name: String,
    /// Seconds a leader's Lease is valid without renewal.
    #[arg(long, env = "TINK_LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
    /// Seconds between reads of each Machine's power state (each period varies by ±20%).
    #[arg(long, env = "TINK_BMC_POWER_POLL_SECONDS", default_value_t = 60)]
    power_poll_seconds: u64,
    /// Seconds a power task waits for the BMC to report the target state.
    #[arg(long, env = "TINK_BMC_POWER_WAIT_SECONDS", default_value_t = 120)]
    power_wait_seconds: u64,
    /// Seconds one BMC call attempt may take (connection and TLS included).
    #[arg(long, env = "TINK_BMC_CALL_TIMEOUT_SECONDS", default_value_t = 10)]
    call_timeout_seconds: u64,
    /// BMC calls at once, in all.
    #[arg(long, env = "TINK_BMC_MAX_CALLS", default_value_t = 256)]
    max_calls: usize,
    /// BMC calls at once to one BMC.
    #[arg(long, env = "TINK_BMC_MAX_CALLS_PER_BMC", default_value_t = 2)]
    max_calls_per_bmc: usize,
    /// The networks BMCs may be reached in, comma separated (`10.20.0.0/16,fd00:bmc::/48`):
    /// every connection goes only to an address of the BMC's host inside one of them, checked
    /// when it is made (a name that resolves elsewhere is refused). Empty: any network.
    #[arg(long, env = "TINK_BMC_ALLOWED_NETWORKS", default_value = "")]
    allowed_networks: String,
    /// PEM file of CA certificates trusted for BMC certificates, besides the system roots.
    #[arg(long, env = "TINK_BMC_CA_FILE")]
    bmc_ca_file: Option<PathBuf>,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("tink-bmc-controller", &args.telemetry)?;
    let replica_id = tink_runtime::replica_id(args.replica_id, "tink-bmc-controller");
    tracing::info!(replica = %replica_id, "tink-bmc-controller starting");

    let ca_pem = match &args.bmc_ca_file {
        Some(path) => Some(std::fs::read(path).with_context(|| {
            format!("--bmc-ca-file {}: cannot read the CA file", path.display())
        })?),
        None => None,
    };
    let duration = Duration::from_secs(args.lease_duration_seconds.max(3));
    let mut config = tink_bmc_controller::BmcConfig {
        namespace: args.namespace.filter(|n| !n.is_empty()),
        replica_id,
        power_poll: Duration::from_secs(args.power_poll_seconds.max(1)),
        power_wait: Duration::from_secs(args.power_wait_seconds.max(1)),
        max_calls: args.max_calls.max(1),
        max_calls_per_bmc: args.max_calls_per_bmc.max(1),
        ca_pem,
        ..Default::default()
    };
    config.lease = tink_lease::LeaseConfig {
        namespace: args.lease_namespace,
        name: args.lease_name,
        duration,
        renew_period: duration / 5,
        renew_deadline: duration * 7 / 10,
        retry_period: duration / 5,
    };
    config.policy.timeout = Duration::from_secs(args.call_timeout_seconds.max(1));
    config.policy.allowed_networks = tink_bmc::net::parse_networks(&args.allowed_networks)
        .map_err(|e| anyhow::anyhow!("--allowed-networks: {e}"))?;
    if config.policy.allowed_networks.is_empty() {
        tracing::warn!(
            "--allowed-networks is empty: a Machine's editor can make this controller connect to any address it can reach (docs/bmc.md)"
        );
    }

    let client = kube::Client::try_default()
        .await
        .context("cannot configure the Kubernetes client (KUBECONFIG or in-cluster)")?;
    let mut service = tink_runtime::Service::new(&args.admin);
    let metrics = tink_bmc_controller::Metrics::register(service.registry());
    service
        .run(|health, shutdown| tink_bmc_controller::run(config, client, health, metrics, shutdown))
        .await?;
    Ok(())
}
