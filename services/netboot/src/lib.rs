//! Netboot: the DHCPv4 server (reservations, or proxyDHCP beside another server), a read-only
//! TFTP server and an HTTP file server that together bring a machine from its PXE firmware to
//! iPXE and on to Hegel's iPXE script (DESIGN.md section 4).
//!
//! DHCP answers from the shared watch-fed Hardware index ([`index`], on
//! [`tink_hardware_index`], the one Hegel reads too): a MAC is looked up in memory, never in
//! the API server. See services/netboot/README.md.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> anyhow::Result<()> {
//! use tink_netboot::{NetbootConfig, dhcp::DhcpMode};
//! let mut config = NetbootConfig::new(
//!     "10.99.0.1".parse()?,
//!     "http://10.99.0.1:50061/ipxe/script/auto.ipxe".into(),
//!     "/usr/lib/ipxe".into(),
//! );
//! config.dhcp.as_mut().unwrap().interface = Some("eth1".into());
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! let bound = tink_netboot::bind(&config).await?;
//! bound
//!     .run(config, client, tink_runtime::Health::new(), Default::default(), Default::default(), shutdown)
//!     .await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod dhcp;
pub mod fetch;
pub mod files;
pub mod hot;
pub mod http;
pub mod index;
pub mod iso;
pub mod machine;
mod metrics;
pub mod osie;
pub mod server;
pub mod syslog;
pub mod tftp;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use tink_runtime::Health;
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

pub use metrics::{IndexMetrics, Metrics};

use crate::dhcp::{BootFiles, DEFAULT_LEASE_SECONDS, DhcpConfig, DhcpMode};
use crate::files::Root;
use crate::index::Index;
use crate::iso::{IsoConfig, IsoSource};
use crate::tftp::TftpConfig;

/// The DHCP server's settings.
#[derive(Clone, Debug)]
pub struct DhcpServerConfig {
    /// The DHCP listener (`0.0.0.0:67`).
    pub listen: SocketAddr,
    /// The network device the DHCP sockets are bound to (SO_BINDTODEVICE).
    pub interface: Option<String>,
    /// In proxy mode, also answer PXE boot server requests on this address (`0.0.0.0:4011`).
    pub pxe_listen: Option<SocketAddr>,
    /// The packet logic's settings.
    pub responder: DhcpConfig,
}

/// How the service runs; `None` turns a part off.
#[derive(Clone, Debug)]
pub struct NetbootConfig {
    /// DHCP.
    pub dhcp: Option<DhcpServerConfig>,
    /// TFTP listener and settings.
    pub tftp: Option<(SocketAddr, TftpConfig)>,
    /// HTTP listener.
    pub http: Option<SocketAddr>,
    /// How much of the served files HTTP keeps in memory ([`hot`]).
    pub http_cache: http::HotConfig,
    /// The folder TFTP and HTTP serve.
    pub files_dir: PathBuf,
    /// Only Hardware of this namespace (all when `None`).
    pub namespace: Option<String>,
    /// The ISO route's source ISO and kernel parameter values (`None`: `/iso/...` answers 404).
    pub iso: Option<IsoConfig>,
    /// The syslog receiver (`None`: off).
    pub syslog: Option<syslog::SyslogConfig>,
    /// Versioned OSIE releases served under `/osie/` (`None`: off).
    pub osie: Option<osie::OsieConfig>,
}

impl NetbootConfig {
    /// Reservation mode on `0.0.0.0:67`, TFTP on `0.0.0.0:69`, HTTP on `0.0.0.0:8080`.
    pub fn new(server_ip: Ipv4Addr, ipxe_script_url: String, files_dir: PathBuf) -> Self {
        Self {
            dhcp: Some(DhcpServerConfig {
                listen: SocketAddr::from(([0, 0, 0, 0], dhcp::SERVER_PORT)),
                interface: None,
                pxe_listen: None,
                responder: DhcpConfig {
                    mode: DhcpMode::Reservation,
                    server_ip,
                    ipxe_script_url,
                    http_base_url: Some(format!("http://{server_ip}:8080")),
                    boot_files: BootFiles::default(),
                    default_lease_seconds: DEFAULT_LEASE_SECONDS,
                    discovery: false,
                },
            }),
            tftp: Some((SocketAddr::from(([0, 0, 0, 0], 69)), TftpConfig::default())),
            http: Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
            http_cache: http::HotConfig::default(),
            files_dir,
            namespace: None,
            iso: None,
            syslog: None,
            osie: None,
        }
    }
}

/// Errors that stop the service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be set up (the message says which and what to do).
    #[error("{0}")]
    Bind(String),
    /// The files folder is missing.
    #[error("{0}")]
    Files(std::io::Error),
    /// A server failed.
    #[error("{what}: {source}")]
    Serve {
        /// Which server.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A background task stopped on its own.
    #[error("{0}")]
    Stopped(String),
    /// The source ISO cannot be served.
    #[error("{0}")]
    Iso(#[from] iso::IsoError),
    /// The OSIE releases folder (or the cache of `--osie-url`) cannot be used.
    #[error("{0}")]
    Osie(std::io::Error),
}

/// Every listener, bound.
pub struct Bound {
    dhcp: Vec<UdpSocket>,
    tftp: Option<UdpSocket>,
    http: Option<TcpListener>,
    root: Option<Root>,
    iso: Option<Arc<IsoSource>>,
    syslog: Option<UdpSocket>,
}

impl Bound {
    /// The DHCP sockets' addresses (67, then 4011 in proxy mode).
    pub fn dhcp_addrs(&self) -> Vec<SocketAddr> {
        self.dhcp
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }

    /// The TFTP socket's address.
    pub fn tftp_addr(&self) -> Option<SocketAddr> {
        self.tftp.as_ref().and_then(|s| s.local_addr().ok())
    }

    /// The HTTP listener's address.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|s| s.local_addr().ok())
    }

    /// The syslog socket's address.
    pub fn syslog_addr(&self) -> Option<SocketAddr> {
        self.syslog.as_ref().and_then(|s| s.local_addr().ok())
    }
}

fn bind_error(what: &str, addr: SocketAddr, e: &std::io::Error) -> Error {
    let hint = match e.kind() {
        std::io::ErrorKind::PermissionDenied if addr.port() < 1024 => format!(
            " (port {} is privileged: run as root or grant CAP_NET_BIND_SERVICE, e.g. the \
             container capability NET_BIND_SERVICE)",
            addr.port()
        ),
        std::io::ErrorKind::AddrInUse if what == "syslog" => {
            " (another process listens there: a syslog daemon such as rsyslog receiving UDP on \
             this host?)"
                .to_string()
        }
        std::io::ErrorKind::AddrInUse => {
            " (another process listens there: a DHCP/TFTP server already running on this host?)"
                .to_string()
        }
        std::io::ErrorKind::AddrNotAvailable => {
            " (the address is not on any interface of this host)".to_string()
        }
        _ => String::new(),
    };
    Error::Bind(format!("cannot listen for {what} on {addr}: {e}{hint}"))
}

/// Binds every enabled listener (so start-up errors come before anything runs).
pub async fn bind(config: &NetbootConfig) -> Result<Bound, Error> {
    let mut dhcp = Vec::new();
    if let Some(d) = &config.dhcp {
        let mut addrs = vec![d.listen];
        if d.responder.mode == DhcpMode::Proxy
            && let Some(p) = d.pxe_listen
        {
            addrs.push(p);
        }
        for addr in addrs {
            let socket =
                server::udp_socket(addr, d.interface.as_deref(), true).map_err(|e| match e {
                    server::SocketError::Device(e) => Error::Bind(format!(
                        "cannot bind the DHCP socket to interface {:?}: {e} (needs the \
                         interface to exist and, on older kernels, CAP_NET_RAW)",
                        d.interface.as_deref().unwrap_or_default()
                    )),
                    server::SocketError::Bind(e) => bind_error("DHCP", addr, &e),
                })?;
            dhcp.push(socket);
        }
    }
    let tftp = match &config.tftp {
        Some((addr, _)) => Some(server::udp_socket(*addr, None, false).map_err(|e| match e {
            server::SocketError::Device(e) | server::SocketError::Bind(e) => {
                bind_error("TFTP", *addr, &e)
            }
        })?),
        None => None,
    };
    let http = match config.http {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|e| bind_error("HTTP", addr, &e))?,
        ),
        None => None,
    };
    let syslog = match &config.syslog {
        Some(c) => Some(syslog::bind(c.listen).map_err(|e| bind_error("syslog", c.listen, &e))?),
        None => None,
    };
    let root = if tftp.is_some() || http.is_some() {
        Some(Root::new(&config.files_dir).map_err(Error::Files)?)
    } else {
        None
    };
    // The releases folder must be usable now; the URL's cache folder is made if missing.
    if let (Some(o), Some(_)) = (&config.osie, &root) {
        if let osie::OsieSource::Url(f) = &o.source {
            tokio::fs::create_dir_all(&f.cache).await.map_err(|e| {
                Error::Osie(std::io::Error::new(
                    e.kind(),
                    format!("--osie-cache {}: {e}", f.cache.display()),
                ))
            })?;
        }
        osie::Releases::open(o.dir(), Metrics::default())
            .await
            .map_err(Error::Osie)?;
    }
    // The ISO is scanned for its placeholder now: a missing file or marker stops the start.
    let iso = match (&config.iso, &http) {
        (Some(c), Some(_)) => {
            let c = c.clone();
            let source = tokio::task::spawn_blocking(move || IsoSource::load(&c))
                .await
                .map_err(|e| Error::Stopped(format!("loading the ISO: {e}")))??;
            Some(Arc::new(source))
        }
        _ => None,
    };
    Ok(Bound {
        dhcp,
        tftp,
        http,
        root,
        iso,
        syslog,
    })
}

impl Bound {
    /// Runs until `shutdown`: feeds the Hardware index (ready once Hardware and OSIEs are
    /// listed) and serves DHCP, TFTP, HTTP and syslog. Any part ending on its own ends the service.
    pub async fn run(
        self,
        config: NetbootConfig,
        client: kube::Client,
        health: Health,
        metrics: Metrics,
        index_metrics: IndexMetrics,
        shutdown: CancellationToken,
    ) -> Result<(), Error> {
        health.set_ready(false);
        let (osies, osie_writer) = kube::runtime::reflector::store();
        let index = Arc::new(Index::new(osies));
        // Every part is critical: any ending stops the group (and the service).
        let set = tink_runtime::TaskGroup::<Error>::new(health.clone(), &shutdown);
        let tasks = set.token().clone();
        let mut root = self.root;
        // With OSIE releases, ready means the index is synced and the configured release is
        // verified: the feed reports to its own flag, combined here.
        let index_health = match (&config.osie, root.take()) {
            (Some(oc), Some(r)) => {
                let releases = Arc::new(
                    osie::Releases::open(oc.dir(), metrics.clone())
                        .await
                        .map_err(Error::Osie)?,
                );
                root = Some(r.with_osie(releases.clone()));
                let osie_ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
                {
                    let (oc, metrics, ready, tasks) = (
                        oc.clone(),
                        metrics.clone(),
                        osie_ready.clone(),
                        tasks.clone(),
                    );
                    set.spawn_critical("OSIE release", async move {
                        osie::keep(oc, releases, metrics, ready, tasks).await;
                        Ok(())
                    });
                }
                let index_health = Health::new();
                {
                    let (index_health, health, tasks) =
                        (index_health.clone(), health.clone(), tasks.clone());
                    set.spawn_critical("readiness", async move {
                        loop {
                            health.set_ready(
                                index_health.is_ready()
                                    && osie_ready.load(std::sync::atomic::Ordering::SeqCst),
                            );
                            tokio::select! {
                                () = tasks.cancelled() => return Ok(()),
                                () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                            }
                        }
                    });
                }
                index_health
            }
            (_, r) => {
                root = r;
                health.clone()
            }
        };
        {
            let (index, tasks, health) = (index.clone(), tasks.clone(), index_health);
            let namespace = config.namespace.clone();
            set.spawn_critical("Hardware index feed", async move {
                crate::index::feed(
                    client,
                    namespace,
                    index,
                    osie_writer,
                    index_metrics,
                    health,
                    tasks,
                )
                .await
                .map_err(|e| Error::Stopped(e.to_string()))
            });
        }
        if let Some(d) = &config.dhcp {
            let responder = Arc::new(dhcp::Responder::new(d.responder.clone()));
            for socket in self.dhcp {
                let (index, metrics, tasks, responder) = (
                    index.clone(),
                    metrics.clone(),
                    tasks.clone(),
                    responder.clone(),
                );
                set.spawn_critical("DHCP server", async move {
                    server::serve_dhcp(socket, responder, index, metrics, tasks)
                        .await
                        .map_err(|source| Error::Serve {
                            what: "DHCP",
                            source,
                        })
                });
            }
        }
        if let (Some(socket), Some(root), Some((_, tc))) = (self.tftp, &root, &config.tftp) {
            let (root, tc, metrics, tasks) =
                (root.clone(), tc.clone(), metrics.clone(), tasks.clone());
            set.spawn_critical("TFTP server", async move {
                tftp::serve(socket, root, tc, metrics, tasks)
                    .await
                    .map_err(|source| Error::Serve {
                        what: "TFTP",
                        source,
                    })
            });
        }
        if let (Some(listener), Some(root)) = (self.http, &root) {
            let (root, metrics, tasks) = (root.clone(), metrics.clone(), tasks.clone());
            let hot = config.http_cache.clone();
            let iso = config.iso.as_ref().map(|c| http::IsoRoute {
                source: self.iso.clone(),
                index: index.clone(),
                kernel: Arc::new(c.kernel.clone()),
            });
            set.spawn_critical("HTTP server", async move {
                http::serve_with(listener, root, metrics, iso, hot, tasks)
                    .await
                    .map_err(|source| Error::Serve {
                        what: "HTTP",
                        source,
                    })
            });
        }
        if let (Some(socket), Some(sc)) = (self.syslog, &config.syslog) {
            let (sc, index, metrics, tasks) =
                (sc.clone(), index.clone(), metrics.clone(), tasks.clone());
            set.spawn_critical("syslog receiver", async move {
                syslog::serve(socket, sc, index, metrics, tasks)
                    .await
                    .map_err(|e| Error::Stopped(e.to_string()))
            });
        }
        // The first task to end before shutdown ends them all.
        set.wait()
            .await
            .map_err(|failure| failure.into_error(Error::Stopped))
    }
}
