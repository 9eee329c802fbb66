//! Agent configuration: server addresses, TLS, back-off, and the default agent id.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// A server address: `host:port`, or a URL `http://host:port` / `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddress {
    /// `http` or `https`; `None` when given as `host:port` (TLS settings decide).
    pub scheme: Option<String>,
    /// `host:port`.
    pub authority: String,
}

/// Why a server address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server address {0:?}: expected host:port, http://host:port or https://host:port")]
pub struct AddressError(pub String);

impl FromStr for ServerAddress {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || AddressError(s.to_owned());
        let s = s.trim();
        let (scheme, rest) = match s.split_once("://") {
            Some((scheme @ ("http" | "https"), rest)) => (Some(scheme.to_owned()), rest),
            Some(_) => return Err(err()),
            None => (None, s),
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty()
            || authority.contains('/')
            || authority.contains(char::is_whitespace)
        {
            return Err(err());
        }
        // A port is required: agents should not guess the server's port.
        let (host, port) = authority.rsplit_once(':').ok_or_else(err)?;
        if host.is_empty() || host == "[" || port.parse::<u16>().is_err() {
            return Err(err());
        }
        Ok(Self {
            scheme,
            authority: authority.to_owned(),
        })
    }
}

impl ServerAddress {
    /// The URI to connect to, with `https` when TLS is on and no scheme was given.
    pub fn uri(&self, tls: bool) -> String {
        let scheme = self
            .scheme
            .as_deref()
            .unwrap_or(if tls { "https" } else { "http" });
        format!("{scheme}://{}", self.authority)
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scheme {
            Some(s) => write!(f, "{s}://{}", self.authority),
            None => f.write_str(&self.authority),
        }
    }
}

/// Client TLS material (PEM).
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    /// The CA that signed the servers' certificates.
    pub ca_pem: Vec<u8>,
    /// A client certificate and key, for servers that require mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to verify in the servers' certificates, when it differs from the address.
    pub domain: Option<String>,
}

/// How the agent reaches its servers, decided at start from its flags and the kernel command
/// line: TLS unless plaintext is asked for explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TLS trusting the CA of `--tls-ca`.
    TlsWithCa,
    /// TLS trusting the system's roots (`--system-ca`): the kernel command line says
    /// `tinkerbell_tls=true` for its `grpc_authority` and no `--tls-ca` is given.
    TlsWithSystemRoots,
    /// Plaintext HTTP/2 because of `--insecure` (`TINK_AGENT_INSECURE`).
    PlaintextByFlag,
    /// Plaintext HTTP/2 because the kernel command line says `tinkerbell_tls=false` for its
    /// `grpc_authority` (the boot script's explicit choice: Hegel's `--tinkerbell-tls false`).
    PlaintextByCmdline,
}

/// The agent was given no way to verify its servers and no explicit plaintext choice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TransportError {
    /// The kernel command line has `tinkerbell_tls=` but the servers come from the flags.
    pub cmdline_tls_ignored: bool,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "TLS is required: give the servers' CA with --tls-ca (TINK_AGENT_TLS_CA), or boot \
             with tinkerbell_tls=true next to grpc_authority= on the kernel command line (the \
             system's roots, --system-ca, are trusted then); --insecure (TINK_AGENT_INSECURE) \
             talks plaintext gRPC to servers started with --insecure (development only)",
        )?;
        if self.cmdline_tls_ignored {
            f.write_str(
                ". The kernel command line's tinkerbell_tls= applies only to its \
                 grpc_authority= servers, not to --server (TINK_AGENT_SERVERS)",
            )?;
        }
        Ok(())
    }
}

impl Transport {
    /// Decides the transport. `tls_ca`: `--tls-ca` is given; `insecure`: `--insecure` is given;
    /// `cmdline_tls`: the kernel command line's `tinkerbell_tls`; `servers_from_cmdline`: the
    /// servers are the command line's `grpc_authority` (its `tinkerbell_tls` counts only then).
    /// Flags win over the command line.
    pub fn choose(
        tls_ca: bool,
        insecure: bool,
        cmdline_tls: Option<bool>,
        servers_from_cmdline: bool,
    ) -> Result<Self, TransportError> {
        let cmdline = if servers_from_cmdline {
            cmdline_tls
        } else {
            None
        };
        match (tls_ca, insecure, cmdline) {
            (true, _, _) => Ok(Self::TlsWithCa),
            (false, true, _) => Ok(Self::PlaintextByFlag),
            (false, false, Some(true)) => Ok(Self::TlsWithSystemRoots),
            (false, false, Some(false)) => Ok(Self::PlaintextByCmdline),
            (false, false, None) => Err(TransportError {
                cmdline_tls_ignored: !servers_from_cmdline && cmdline_tls.is_some(),
            }),
        }
    }

    /// Whether the connections are TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, Self::TlsWithCa | Self::TlsWithSystemRoots)
    }
}

/// Everything the agent needs besides the container runtime.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// This machine's identity towards the servers.
    pub agent_id: String,
    /// Server replicas, tried in order, round robin.
    pub servers: Vec<ServerAddress>,
    /// TLS towards the servers; plain HTTP/2 when `None` (the binary sets `None` only on an
    /// explicit choice, see [`Transport`]).
    pub tls: Option<ClientTls>,
    /// First pause after a failed connection or publication.
    pub backoff_initial: Duration,
    /// Longest pause between attempts.
    pub backoff_max: Duration,
    /// Deadline of one `PublishEvent` call and of a connection attempt.
    pub request_timeout: Duration,
    /// HTTP/2 keepalive: detects a server that died without closing the connection (within
    /// this interval plus `request_timeout`). 30 s by default: an idle machine's pings are most
    /// of what a connected fleet costs the servers (at 10 s, 0.1 core per 10,000 agents;
    /// BENCHMARKS.md), and a replica that crashes closes its connections at once anyway.
    pub keepalive_interval: Duration,
    /// On shutdown, how long queued events may still be published.
    pub flush_timeout: Duration,
    /// A random id of this agent process, sent on every stream and event: a new value tells
    /// the controller the agent restarted.
    pub instance_id: String,
    /// Where the session token the servers issue is kept across restarts of the agent process
    /// (`None`: in memory only).
    pub token_file: Option<std::path::PathBuf>,
    /// The machine's boot secret (derived from `tinkerbell.org/agent-secret` on its Hardware;
    /// Hegel passes it as the `tink_agent_secret` boot parameter), presented on every call; the
    /// servers need it only to create a session, once (it is single-use). Only machines whose
    /// Hardware references one need it.
    pub agent_secret: Option<String>,
    /// The most dispatch ids remembered as run (a redelivered one is refused `AlreadyRun`).
    pub remembered_dispatches: usize,
    /// Commands for the power contract (`/tinkerbell/power`), split on whitespace, run without
    /// a shell once the workflow succeeded and every event was confirmed.
    pub power_commands: PowerCommands,
    /// Where the machine's `/proc` and `/sys` are read for its hardware inventory, reported
    /// once per start ([`crate::inventory`]); `None`: no inventory is reported.
    pub inventory_root: Option<std::path::PathBuf>,
}

/// The commands the agent runs for the power contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerCommands {
    /// For `reboot`. Default `reboot -f`.
    pub reboot: Vec<String>,
    /// For `kexec` (the action loaded the kernel with `kexec -l`). Default `kexec -e`.
    pub kexec: Vec<String>,
    /// For `poweroff`. Default `poweroff -f`.
    pub poweroff: Vec<String>,
}

impl Default for PowerCommands {
    fn default() -> Self {
        let split = |s: &str| s.split_whitespace().map(str::to_owned).collect();
        Self {
            reboot: split("reboot -f"),
            kexec: split("kexec -e"),
            poweroff: split("poweroff -f"),
        }
    }
}

impl AgentConfig {
    /// Defaults: 100 ms to 5 s back-off, 10 s requests, 30 s keepalive, 10 s flush.
    pub fn new(agent_id: impl Into<String>, servers: Vec<ServerAddress>) -> Self {
        Self {
            agent_id: agent_id.into(),
            servers,
            tls: None,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            flush_timeout: Duration::from_secs(10),
            instance_id: uuid::Uuid::new_v4().to_string(),
            token_file: None,
            agent_secret: None,
            remembered_dispatches: 4096,
            power_commands: PowerCommands::default(),
            inventory_root: None,
        }
    }
}

/// Capped exponential back-off with jitter (each pause is 80-100 % of the nominal one).
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `initial`, doubles up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.min(max);
        Self {
            initial,
            max,
            next: initial,
        }
    }

    /// The next pause.
    pub fn next_delay(&mut self) -> Duration {
        let nominal = self.next;
        self.next = (self.next * 2).min(self.max);
        // Jitter keeps a fleet of agents from reconnecting in lock step after a server restart.
        let fraction = (uuid::Uuid::new_v4().as_u128() % 1000) as f64 / 1000.0;
        nominal.mul_f64(0.8 + 0.2 * fraction)
    }

    /// After a success: the next pause is the initial one again.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// The default agent id: the MAC address of the first non-loopback network interface (lowest
/// interface index) with a real hardware address, read from `/sys/class/net`.
pub fn default_agent_id(sys_class_net: &Path) -> Option<String> {
    let entries = std::fs::read_dir(sys_class_net).ok()?;
    let mut candidates = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let read = |file: &str| {
            std::fs::read_to_string(dir.join(file))
                .ok()
                .map(|s| s.trim().to_owned())
        };
        candidates.push(Interface {
            name: entry.file_name().to_string_lossy().into_owned(),
            index: read("ifindex")
                .and_then(|s| s.parse().ok())
                .unwrap_or(u32::MAX),
            link_type: read("type").and_then(|s| s.parse().ok()).unwrap_or(0),
            address: read("address").unwrap_or_default(),
        });
    }
    pick_interface(candidates)
}

/// A network interface as `/sys/class/net` describes it.
#[derive(Debug, Clone)]
pub struct Interface {
    /// `eth0`.
    pub name: String,
    /// The kernel's interface index.
    pub index: u32,
    /// ARPHRD type: 1 is Ethernet, 772 loopback.
    pub link_type: u32,
    /// `aa:bb:cc:dd:ee:ff`.
    pub address: String,
}

/// The MAC (lower case) of the Ethernet interface with the lowest index, skipping loopback and
/// all-zero addresses.
pub fn pick_interface(mut interfaces: Vec<Interface>) -> Option<String> {
    interfaces.sort_by_key(|i| (i.index, i.name.clone()));
    interfaces
        .into_iter()
        .filter(|i| i.name != "lo" && i.link_type == 1)
        .map(|i| i.address.to_ascii_lowercase())
        .find(|a| is_mac(a) && a != "00:00:00:00:00:00")
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        let a: ServerAddress = "10.0.0.1:42113".parse().expect("valid");
        assert_eq!(a.uri(false), "http://10.0.0.1:42113");
        assert_eq!(a.uri(true), "https://10.0.0.1:42113");
        let a: ServerAddress = "https://tink.example:443/".parse().expect("valid");
        assert_eq!(a.uri(false), "https://tink.example:443");
        assert_eq!(a.to_string(), "https://tink.example:443");
        let a: ServerAddress = "[::1]:42113".parse().expect("valid");
        assert_eq!(a.uri(false), "http://[::1]:42113");
        for bad in [
            "",
            "host",
            "host:",
            ":1",
            "ftp://h:1",
            "h:1/x",
            "h:99999",
            "http://",
        ] {
            assert!(bad.parse::<ServerAddress>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tls_unless_plaintext_is_chosen_explicitly() {
        use Transport::*;
        // (--tls-ca, --insecure, tinkerbell_tls, servers from the command line) -> transport
        let cases = [
            ((true, false, None, false), Ok(TlsWithCa)),
            ((true, false, Some(false), true), Ok(TlsWithCa)),
            ((false, true, None, false), Ok(PlaintextByFlag)),
            ((false, true, Some(true), true), Ok(PlaintextByFlag)),
            ((false, false, Some(true), true), Ok(TlsWithSystemRoots)),
            ((false, false, Some(false), true), Ok(PlaintextByCmdline)),
            // Nothing said: refused.
            ((false, false, None, true), Err(false)),
            ((false, false, None, false), Err(false)),
            // The command line's tinkerbell_tls goes with its grpc_authority only.
            ((false, false, Some(false), false), Err(true)),
            ((false, false, Some(true), false), Err(true)),
        ];
        for ((ca, insecure, cmdline, from_cmdline), want) in cases {
            let got = Transport::choose(ca, insecure, cmdline, from_cmdline);
            let want = want.map_err(|ignored| TransportError {
                cmdline_tls_ignored: ignored,
            });
            assert_eq!(got, want, "{ca} {insecure} {cmdline:?} {from_cmdline}");
        }
        let e = Transport::choose(false, false, None, false).unwrap_err();
        let text = e.to_string();
        for flag in [
            "--tls-ca",
            "TINK_AGENT_TLS_CA",
            "--insecure",
            "TINK_AGENT_INSECURE",
            "tinkerbell_tls=true",
        ] {
            assert!(text.contains(flag), "{text}");
        }
        assert!(!text.contains("applies only"), "{text}");
        let e = Transport::choose(false, false, Some(false), false).unwrap_err();
        assert!(
            e.to_string()
                .contains("applies only to its grpc_authority="),
            "{e}"
        );
        assert!(TlsWithCa.is_tls() && TlsWithSystemRoots.is_tls());
        assert!(!PlaintextByFlag.is_tls() && !PlaintextByCmdline.is_tls());
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(700));
        let nominal = [100u64, 200, 400, 700, 700];
        for n in nominal {
            let d = b.next_delay();
            assert!(d <= Duration::from_millis(n), "{d:?} > {n}");
            assert!(d >= Duration::from_millis(n * 8 / 10), "{d:?} < 0.8*{n}");
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    fn iface(name: &str, index: u32, link_type: u32, address: &str) -> Interface {
        Interface {
            name: name.into(),
            index,
            link_type,
            address: address.into(),
        }
    }

    #[test]
    fn first_real_ethernet_interface_wins() {
        let picked = pick_interface(vec![
            iface("eth1", 3, 1, "AA:BB:CC:00:00:02"),
            iface("lo", 1, 772, "00:00:00:00:00:00"),
            iface("dummy", 2, 1, "00:00:00:00:00:00"),
            iface("eth0", 2, 1, "AA:BB:CC:00:00:01"),
            iface("wg0", 0, 65534, ""),
        ]);
        assert_eq!(picked.as_deref(), Some("aa:bb:cc:00:00:01"));
        assert_eq!(
            pick_interface(vec![iface("lo", 1, 772, "00:00:00:00:00:00")]),
            None
        );
    }

    #[test]
    fn reads_sys_class_net() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        for (name, index, kind, addr) in [
            ("lo", 1, 772, "00:00:00:00:00:00"),
            ("enp1s0", 2, 1, "52:54:00:12:34:56"),
        ] {
            let d = dir.path().join(name);
            std::fs::create_dir(&d)?;
            std::fs::write(d.join("ifindex"), format!("{index}\n"))?;
            std::fs::write(d.join("type"), format!("{kind}\n"))?;
            std::fs::write(d.join("address"), format!("{addr}\n"))?;
        }
        assert_eq!(
            default_agent_id(dir.path()).as_deref(),
            Some("52:54:00:12:34:56")
        );
        Ok(())
    }
}
