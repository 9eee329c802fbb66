//! tink-netboot: DHCP, TFTP and HTTP for netbooting machines into iPXE, and a syslog receiver
//! for their boot logs.
#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser};
use tink_netboot::dhcp::{BootFiles, DhcpConfig, DhcpMode};
use tink_netboot::tftp::TftpConfig;
use tink_netboot::{DhcpServerConfig, NetbootConfig};

/// mimalloc instead of glibc malloc: allocation is a large share of a request's cost here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Netboot: answers the DHCP requests of the machines in the Hardware index (their reserved
/// address, or proxyDHCP beside another server) with iPXE boot information, and serves the
/// iPXE binaries by TFTP and HTTP.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// `reservation`: lease each known MAC its Hardware's address; `proxy`: another DHCP
    /// server leases, this one only adds boot information for PXE clients.
    #[arg(long, env = "TINK_NETBOOT_DHCP_MODE", value_enum, default_value_t = DhcpMode::Reservation)]
    dhcp_mode: DhcpMode,
    /// Discovery (with `--dhcp-mode proxy` only): PXE firmware and iPXE of MACs no Hardware
    /// owns get the boot information too, iPXE the script of its MAC from Hegel (its discovery
    /// OSIE), so unknown machines boot the OSIE and enroll. Off by default.
    #[arg(long, env = "TINK_NETBOOT_DISCOVERY")]
    discovery: bool,
    /// Address of the DHCP listener.
    #[arg(long, env = "TINK_NETBOOT_DHCP_LISTEN", default_value = "0.0.0.0:67")]
    dhcp_listen: SocketAddr,
    /// Network device the DHCP sockets are bound to (broadcast replies leave by it); without
    /// it, requests from every interface are answered and broadcasts follow the routing table.
    #[arg(long, env = "TINK_NETBOOT_INTERFACE")]
    interface: Option<String>,
    /// In proxy mode, also answer PXE boot server requests on port 4011 of the DHCP address.
    #[arg(long, env = "TINK_NETBOOT_PXE_PORT", default_value_t = true, action = ArgAction::Set)]
    pxe_port: bool,
    /// This server's IPv4 address as machines reach it: DHCP server identifier, next-server
    /// (TFTP) and the default HTTP boot URL.
    #[arg(long, env = "TINK_NETBOOT_SERVER_IP")]
    server_ip: Ipv4Addr,
    /// The iPXE script URL handed to iPXE clients (Hegel's
    /// `http://HEGEL:50061/ipxe/script/auto.ipxe`).
    #[arg(long, env = "TINK_NETBOOT_IPXE_SCRIPT_URL")]
    ipxe_script_url: String,
    /// Base URL for UEFI HTTP boot clients (`{url}/ipxe.efi`); default
    /// `http://SERVER_IP:HTTP_PORT`.
    #[arg(long, env = "TINK_NETBOOT_HTTP_BOOT_URL")]
    http_boot_url: Option<String>,
    /// Lease time in seconds for Hardware without a `dhcp.leaseTime`.
    #[arg(long, env = "TINK_NETBOOT_LEASE_TIME_SECONDS", default_value_t = tink_netboot::dhcp::DEFAULT_LEASE_SECONDS)]
    lease_time_seconds: u32,
    /// Boot file for x86 BIOS PXE (architecture 0).
    #[arg(
        long,
        env = "TINK_NETBOOT_BOOT_FILE_BIOS",
        default_value = "undionly.kpxe"
    )]
    boot_file_bios: String,
    /// Boot file for x86/x86-64 UEFI (architectures 6, 7, 9).
    #[arg(
        long,
        env = "TINK_NETBOOT_BOOT_FILE_EFI_X86_64",
        default_value = "ipxe.efi"
    )]
    boot_file_efi_x86_64: String,
    /// Boot file for arm UEFI (architectures 10, 11).
    #[arg(
        long,
        env = "TINK_NETBOOT_BOOT_FILE_EFI_ARM64",
        default_value = "snp.efi"
    )]
    boot_file_efi_arm64: String,
    /// Address of the TFTP listener.
    #[arg(long, env = "TINK_NETBOOT_TFTP_LISTEN", default_value = "0.0.0.0:69")]
    tftp_listen: SocketAddr,
    /// Seconds TFTP waits for an ACK before sending a block again (when the client asks for
    /// no `timeout` option).
    #[arg(long, env = "TINK_NETBOOT_TFTP_TIMEOUT_SECONDS", default_value_t = 2)]
    tftp_timeout_seconds: u64,
    /// Times TFTP sends a block again before giving the transfer up.
    #[arg(long, env = "TINK_NETBOOT_TFTP_RETRIES", default_value_t = 5)]
    tftp_retries: u32,
    /// The longest `timeout` option (seconds) TFTP accepts from a client; longer ones are
    /// ignored.
    #[arg(
        long,
        env = "TINK_NETBOOT_TFTP_MAX_TIMEOUT_SECONDS",
        default_value_t = 5
    )]
    tftp_max_timeout_seconds: u64,
    /// TFTP transfers in progress at once, in all.
    #[arg(long, env = "TINK_NETBOOT_TFTP_MAX_TRANSFERS", default_value_t = 256)]
    tftp_max_transfers: usize,
    /// TFTP transfers one host may have in progress at once.
    #[arg(
        long,
        env = "TINK_NETBOOT_TFTP_MAX_TRANSFERS_PER_HOST",
        default_value_t = 4
    )]
    tftp_max_transfers_per_host: usize,
    /// Seconds one TFTP transfer may take before it is abandoned.
    #[arg(
        long,
        env = "TINK_NETBOOT_TFTP_TRANSFER_DEADLINE_SECONDS",
        default_value_t = 300
    )]
    tftp_transfer_deadline_seconds: u64,
    /// The largest TFTP `windowsize` (RFC 7440) granted to a client (a larger request gets
    /// this; also lowered until the window holds at most 1 MiB of data).
    #[arg(
        long,
        env = "TINK_NETBOOT_TFTP_MAX_WINDOWSIZE",
        default_value_t = 64,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    tftp_max_windowsize: u16,
    /// Address of the HTTP file server.
    #[arg(long, env = "TINK_NETBOOT_HTTP_LISTEN", default_value = "0.0.0.0:8080")]
    http_listen: SocketAddr,
    /// MiB of the served files HTTP keeps in memory (the OSIE kernel and initramfs every
    /// booting machine fetches), least recently used out first; a file larger than half of
    /// it is streamed from disk. 0: off.
    #[arg(long, env = "TINK_NETBOOT_HTTP_CACHE_MIB", default_value_t = 256)]
    http_cache_mib: u64,
    /// Folder served by TFTP and HTTP (the iPXE binaries; the Debian `ipxe` package's by
    /// default).
    #[arg(long, env = "TINK_NETBOOT_FILES_DIR", default_value = "/usr/lib/ipxe")]
    files_dir: PathBuf,
    /// Serve DHCP.
    #[arg(long, env = "TINK_NETBOOT_DHCP", default_value_t = true, action = ArgAction::Set)]
    dhcp: bool,
    /// Serve TFTP.
    #[arg(long, env = "TINK_NETBOOT_TFTP", default_value_t = true, action = ArgAction::Set)]
    tftp: bool,
    /// Serve HTTP.
    #[arg(long, env = "TINK_NETBOOT_HTTP", default_value_t = true, action = ArgAction::Set)]
    http: bool,
    /// Only serve Hardware of this namespace (default: all namespaces).
    #[arg(long, env = "TINK_NAMESPACE")]
    namespace: Option<String>,
    /// This replica's name in logs; defaults to the host name (the pod name).
    #[arg(long, env = "TINK_REPLICA_ID")]
    replica_id: Option<String>,
    #[command(flatten)]
    iso: IsoArgs,
    #[command(flatten)]
    syslog: SyslogArgs,
    #[command(flatten)]
    osie: OsieArgs,
    #[command(flatten)]
    admin: tink_runtime::AdminArgs,
    #[command(flatten)]
    telemetry: tink_telemetry::TelemetryArgs,
}

/// ISO boot: `/iso/<mac>/<name>.iso` serves the source ISO with the machine's kernel parameters
/// in its placeholder. The parameters are the iPXE script's (the same function makes them): give
/// these flags the values of Hegel's flags of the same names.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "ISO boot")]
struct IsoArgs {
    /// The OSIE ISO to serve (`osie/build.sh --iso` makes one); unset, `/iso/...` answers 404.
    #[arg(long, env = "TINK_NETBOOT_ISO_SOURCE")]
    iso_source: Option<PathBuf>,
    /// The marker that starts the kernel parameter placeholder in the ISO (it must occur once).
    #[arg(long, env = "TINK_NETBOOT_ISO_PLACEHOLDER_MARKER", default_value = tink_netboot::iso::DEFAULT_MARKER)]
    iso_placeholder_marker: String,
    /// `grpc_authority=`: the tink-server address the agent dials (required with --iso-source).
    #[arg(long, env = "TINK_NETBOOT_GRPC_AUTHORITY")]
    grpc_authority: Option<String>,
    /// `tinkerbell_tls=`.
    #[arg(long, env = "TINK_NETBOOT_TINKERBELL_TLS", default_value_t = true, action = ArgAction::Set)]
    tinkerbell_tls: bool,
    /// `tinkerbell_insecure_tls=`.
    #[arg(long, env = "TINK_NETBOOT_TINKERBELL_INSECURE_TLS", default_value_t = false, action = ArgAction::Set)]
    tinkerbell_insecure_tls: bool,
    /// `syslog_host=`; left out when unset.
    #[arg(long, env = "TINK_NETBOOT_SYSLOG_HOST")]
    syslog_host: Option<String>,
    /// `facility=` for Hardware without a migrated facility code; left out when unset.
    #[arg(long, env = "TINK_NETBOOT_FACILITY")]
    facility: Option<String>,
    /// Kernel consoles, one `console=` each, in order (space separated, or the flag repeated).
    #[arg(long = "console", env = "TINK_NETBOOT_CONSOLES", value_delimiter = ' ', default_values_t = ["tty0".to_string(), "ttyS1,115200".to_string()])]
    consoles: Vec<String>,
    /// Parameters after the generated ones and before each Hardware's osie.kernelParams.
    #[arg(
        long = "extra-kernel-params",
        env = "TINK_NETBOOT_EXTRA_KERNEL_PARAMS",
        value_delimiter = ' '
    )]
    extra_kernel_params: Vec<String>,
}

/// The syslog receiver: machines' boot logs (RFC 3164 and 5424 over UDP), attributed to a
/// Hardware by source address and stored in NATS JetStream (stream TINK_SYSLOG), where
/// `tinkctl hardware logs` and the console read them.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Syslog")]
struct SyslogArgs {
    /// UDP address of the syslog receiver (deploy/ uses 0.0.0.0:514); empty or unset: off.
    /// Needs --nats-url.
    #[arg(long, env = "TINK_NETBOOT_SYSLOG_ADDR")]
    syslog_addr: Option<String>,
    /// NATS URL(s) the lines are published to (comma separated).
    #[arg(long, env = "TINK_NETBOOT_NATS_URL")]
    nats_url: Option<String>,
    /// NATS credentials file (JWT and NKey seed).
    #[arg(long, env = "NATS_CREDS")]
    nats_creds: Option<PathBuf>,
    /// NATS user (with --nats-password); deploy/'s is `tink-netboot`.
    #[arg(long, env = "NATS_USER", requires = "nats_password")]
    nats_user: Option<String>,
    /// NATS password.
    #[arg(
        long,
        env = "NATS_PASSWORD",
        requires = "nats_user",
        hide_env_values = true
    )]
    nats_password: Option<String>,
    /// CA certificate (PEM) of the NATS servers; turns TLS on.
    #[arg(long, env = "NATS_TLS_CA")]
    nats_tls_ca: Option<PathBuf>,
    /// Lines kept per machine (the stream's per-subject limit; the oldest go first).
    #[arg(
        long,
        env = "TINK_NETBOOT_SYSLOG_LINES_PER_MACHINE",
        default_value_t = 1000
    )]
    syslog_lines_per_machine: i64,
    /// Longest message text stored, in bytes (longer lines are cut, marked with `…`).
    #[arg(
        long,
        env = "TINK_NETBOOT_SYSLOG_MAX_LINE_BYTES",
        default_value_t = 1024
    )]
    syslog_max_line_bytes: usize,
    /// Size of the whole stream, in bytes (every machine's lines).
    #[arg(long, env = "TINK_NETBOOT_SYSLOG_MAX_BYTES", default_value_t = 256 << 20)]
    syslog_max_bytes: i64,
    /// How long a line is kept, in seconds.
    #[arg(long, env = "TINK_NETBOOT_SYSLOG_MAX_AGE_SECONDS", default_value_t = 7 * 24 * 3600)]
    syslog_max_age_seconds: u64,
    /// Replicas of the stream (3 on deploy/'s NATS cluster).
    #[arg(long, env = "TINK_NATS_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
    /// Lines a second one source address may send, sustained.
    #[arg(long, env = "TINK_NETBOOT_SYSLOG_RATE", default_value_t = 100.0)]
    syslog_rate: f64,
    /// Lines one source address may send at once (a kernel's boot log arrives in one burst).
    #[arg(long, env = "TINK_NETBOOT_SYSLOG_BURST", default_value_t = 2000.0)]
    syslog_burst: f64,
    /// Lines waiting to be published, at most (beyond: dropped and counted).
    #[arg(long, env = "TINK_NETBOOT_SYSLOG_QUEUE", default_value_t = 8192)]
    syslog_queue: usize,
}

/// Versioned OSIE releases (`tinkctl osie release` makes them), served at
/// `/osie/<version>/<file>` by HTTP and TFTP, every file checked against its release's
/// `SHA256SUMS` before it is first served.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "OSIE releases")]
struct OsieArgs {
    /// A folder of releases (`DIR/<version>/SHA256SUMS` and the files it lists).
    #[arg(long, env = "TINK_NETBOOT_OSIE_DIR", conflicts_with = "osie_url")]
    osie_dir: Option<PathBuf>,
    /// The base URL of releases: `URL/<version>/SHA256SUMS` and each file it lists are fetched
    /// once into --osie-cache (needs --osie-version and --osie-cache).
    #[arg(long, env = "TINK_NETBOOT_OSIE_URL", requires_all = ["osie_version", "osie_cache"])]
    osie_url: Option<String>,
    /// The release to fetch (with --osie-url), or that must be present and intact in
    /// --osie-dir before /readyz says ready.
    #[arg(long, env = "TINK_NETBOOT_OSIE_VERSION")]
    osie_version: Option<String>,
    /// Where fetched releases are kept (`<cache>/<version>/...`; created if missing).
    #[arg(long, env = "TINK_NETBOOT_OSIE_CACHE")]
    osie_cache: Option<PathBuf>,
    /// Extra trusted CA certificates (PEM) for an `https://` --osie-url, beside the system's.
    #[arg(long, env = "TINK_NETBOOT_OSIE_CA_CERT")]
    osie_ca_cert: Option<PathBuf>,
    /// Seconds a fetch may wait to connect, for an answer, or between two chunks of a body.
    #[arg(
        long,
        env = "TINK_NETBOOT_OSIE_FETCH_TIMEOUT_SECONDS",
        default_value_t = 30
    )]
    osie_fetch_timeout_seconds: u64,
    /// The longest pause, in seconds, between tries of a failed fetch or check (the pause
    /// starts at 1 s and doubles).
    #[arg(
        long,
        env = "TINK_NETBOOT_OSIE_RETRY_MAX_SECONDS",
        default_value_t = 300
    )]
    osie_retry_max_seconds: u64,
}

impl OsieArgs {
    fn config(self) -> anyhow::Result<Option<tink_netboot::osie::OsieConfig>> {
        use tink_netboot::osie::{FetchConfig, OsieConfig, OsieSource, check_version};
        let version = self.osie_version.filter(|v| !v.trim().is_empty());
        if let Some(v) = &version {
            check_version(v).map_err(|e| anyhow::anyhow!("--osie-version: {e}"))?;
        }
        let source = match (
            self.osie_dir,
            self.osie_url.filter(|u| !u.trim().is_empty()),
        ) {
            (Some(dir), None) => OsieSource::Dir {
                dir,
                required: version,
            },
            (None, Some(url)) => {
                let url = url.trim().to_string();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    anyhow::bail!("--osie-url {url:?}: only http:// and https:// URLs are fetched");
                }
                let Some(version) = version else {
                    anyhow::bail!("--osie-url needs --osie-version (the release to fetch)");
                };
                let Some(cache) = self.osie_cache else {
                    anyhow::bail!("--osie-url needs --osie-cache (where the release is kept)");
                };
                OsieSource::Url(FetchConfig {
                    url,
                    version,
                    cache,
                    ca_cert: self.osie_ca_cert,
                    timeout: Duration::from_secs(self.osie_fetch_timeout_seconds.max(1)),
                })
            }
            (Some(_), Some(_)) => {
                anyhow::bail!("--osie-dir and --osie-url: give one")
            }
            (None, None) => {
                if version.is_some() {
                    anyhow::bail!("--osie-version needs --osie-dir or --osie-url");
                }
                return Ok(None);
            }
        };
        Ok(Some(OsieConfig {
            source,
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(self.osie_retry_max_seconds.max(1)),
        }))
    }
}

impl SyslogArgs {
    fn config(self) -> anyhow::Result<Option<tink_netboot::syslog::SyslogConfig>> {
        let Some(addr) = self.syslog_addr.filter(|a| !a.trim().is_empty()) else {
            return Ok(None);
        };
        let listen: SocketAddr = addr.trim().parse().with_context(|| {
            format!("--syslog-addr {addr:?}: expected IP:PORT, e.g. 0.0.0.0:514")
        })?;
        let Some(url) = self.nats_url.filter(|u| !u.trim().is_empty()) else {
            anyhow::bail!(
                "--syslog-addr {listen} stores the lines in NATS JetStream: give --nats-url \
                 (TINK_NETBOOT_NATS_URL), or turn the receiver off with an empty --syslog-addr"
            );
        };
        if !(self.syslog_rate.is_finite() && self.syslog_rate > 0.0) {
            anyhow::bail!(
                "--syslog-rate {}: must be a positive number",
                self.syslog_rate
            );
        }
        if !(self.syslog_burst.is_finite() && self.syslog_burst >= 1.0) {
            anyhow::bail!("--syslog-burst {}: must be at least 1", self.syslog_burst);
        }
        let nats = tink_netboot::syslog::SyslogNats {
            url,
            auth: tink_bus::NatsAuth {
                credentials_file: self.nats_creds,
                user: self.nats_user,
                password: self.nats_password,
                tls_ca: self.nats_tls_ca,
                ..Default::default()
            },
        };
        let mut config = tink_netboot::syslog::SyslogConfig::new(listen, nats);
        config.limits = tink_bus::SyslogLimits {
            lines_per_machine: self.syslog_lines_per_machine.max(1),
            max_line_bytes: self.syslog_max_line_bytes.clamp(64, 64 * 1024),
            max_bytes: self.syslog_max_bytes.max(1 << 20),
            max_age: Duration::from_secs(self.syslog_max_age_seconds.max(60)),
            replicas: self.stream_replicas.max(1),
        };
        config.rate.rate = self.syslog_rate;
        config.rate.burst = self.syslog_burst;
        config.queue = self.syslog_queue.max(1);
        Ok(Some(config))
    }
}

impl IsoArgs {
    fn config(self) -> anyhow::Result<Option<tink_netboot::iso::IsoConfig>> {
        let Some(source) = self.iso_source.filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(None);
        };
        let Some(authority) = self.grpc_authority.filter(|a| !a.trim().is_empty()) else {
            anyhow::bail!(
                "--iso-source needs --grpc-authority (TINK_NETBOOT_GRPC_AUTHORITY): the \
                 tink-server address the agent dials, as Hegel's --grpc-authority"
            );
        };
        let mut kernel = hegel::IpxeConfig::new(authority);
        kernel.tinkerbell_tls = self.tinkerbell_tls;
        kernel.tinkerbell_insecure_tls = self.tinkerbell_insecure_tls;
        kernel.syslog_host = self.syslog_host.filter(|s| !s.trim().is_empty());
        kernel.facility = self.facility.filter(|s| !s.trim().is_empty());
        kernel.console = self
            .consoles
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect();
        kernel.extra_kernel_params = self
            .extra_kernel_params
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        let mut config = tink_netboot::iso::IsoConfig::new(source, kernel);
        config.marker = self.iso_placeholder_marker;
        Ok(Some(config))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = tink_telemetry::init("tink-netboot", &args.telemetry)?;
    let replica_id = tink_runtime::replica_id(args.replica_id, "tink-netboot");
    tracing::info!(replica = %replica_id, "tink-netboot starting");
    if args.discovery && args.dhcp_mode != DhcpMode::Proxy {
        anyhow::bail!(
            "--discovery needs --dhcp-mode proxy: unknown machines take their address from the site's DHCP server, this one adds only boot information"
        );
    }

    let http_boot_url = args
        .http_boot_url
        .filter(|u| !u.trim().is_empty())
        .or_else(|| {
            args.http
                .then(|| format!("http://{}:{}", args.server_ip, args.http_listen.port()))
        });
    let config = NetbootConfig {
        dhcp: args.dhcp.then(|| DhcpServerConfig {
            listen: args.dhcp_listen,
            interface: args.interface.filter(|i| !i.is_empty()),
            pxe_listen: (args.pxe_port && args.dhcp_mode == DhcpMode::Proxy)
                .then(|| SocketAddr::new(args.dhcp_listen.ip(), tink_netboot::dhcp::PXE_PORT)),
            responder: DhcpConfig {
                mode: args.dhcp_mode,
                server_ip: args.server_ip,
                ipxe_script_url: args.ipxe_script_url,
                http_base_url: http_boot_url,
                boot_files: BootFiles {
                    bios: args.boot_file_bios,
                    efi_x86_64: args.boot_file_efi_x86_64,
                    efi_arm64: args.boot_file_efi_arm64,
                },
                default_lease_seconds: args.lease_time_seconds,
                discovery: args.discovery,
            },
        }),
        tftp: args.tftp.then(|| {
            (
                args.tftp_listen,
                TftpConfig {
                    timeout: Duration::from_secs(args.tftp_timeout_seconds.max(1)),
                    retries: args.tftp_retries,
                    max_transfers: args.tftp_max_transfers.max(1),
                    max_timeout: Duration::from_secs(args.tftp_max_timeout_seconds.max(1)),
                    max_transfers_per_peer: args.tftp_max_transfers_per_host.max(1),
                    transfer_deadline: Duration::from_secs(
                        args.tftp_transfer_deadline_seconds.max(1),
                    ),
                    max_windowsize: args.tftp_max_windowsize,
                },
            )
        }),
        http: args.http.then_some(args.http_listen),
        http_cache: tink_netboot::http::HotConfig::mib(args.http_cache_mib),
        files_dir: args.files_dir,
        namespace: args.namespace,
        iso: args.iso.config()?,
        syslog: args.syslog.config()?,
        osie: args.osie.config()?,
    };
    if config.osie.is_some() && config.http.is_none() && config.tftp.is_none() {
        anyhow::bail!("--osie-dir/--osie-url are served over HTTP and TFTP: turn one on");
    }
    if config.iso.is_some() && config.http.is_none() {
        anyhow::bail!("--iso-source is served over HTTP: it needs --http true");
    }
    if config.dhcp.is_none()
        && config.tftp.is_none()
        && config.http.is_none()
        && config.syslog.is_none()
    {
        anyhow::bail!("DHCP, TFTP, HTTP and syslog are all turned off: nothing to serve");
    }

    // Listeners first: a missing privilege or a busy port is reported before anything else.
    let bound = tink_netboot::bind(&config).await?;
    let client = kube::Client::try_default()
        .await
        .context("cannot configure the Kubernetes client (KUBECONFIG or in-cluster)")?;

    let mut service = tink_runtime::Service::new(&args.admin);
    let registry = service.registry();
    let metrics = tink_netboot::Metrics::register(registry);
    // The Hardware index's own metrics (indexed Hardware, watch errors), as Hegel's.
    let index_metrics =
        tink_netboot::IndexMetrics::register(registry.sub_registry_with_prefix("netboot"));
    service
        .run(|health, shutdown| bound.run(config, client, health, metrics, index_metrics, shutdown))
        .await?;
    Ok(())
}
