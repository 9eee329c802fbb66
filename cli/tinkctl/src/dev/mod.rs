//! `tinkctl dev up|down|status`: the local development stack, every service its own process on
//! loopback: kube-lite (persistent), `nats-server -js`, the webhook (HTTPS with a generated
//! certificate), two controllers, two servers, Hegel, the web console and one agent on the
//! local Docker engine; tink-netboot's syslog receiver on a free loopback UDP port (the whole
//! netboot service with `--netboot-interface`), which Hegel's scripts name as `syslog_host`.
//!
//! Everything lives under the data directory:
//!
//! | path | what |
//! |---|---|
//! | `state.json` | the running components (pid, executable, readiness URL, log) for `down` and `status` |
//! | `env` | shell assignments: `KUBECONFIG`, `NATS_URL`, `TINK_SERVER`, `HEGEL_URL`, `TINK_CONSOLE_URL`, `TINK_DEV_AGENT_ID`, `TINK_SYSLOG_ADDR` (host:port of the syslog receiver) |
//! | `kubeconfig` | for kubectl and the services |
//! | `logs/<component>.log` | one log per component |
//! | `pki/` | the development CA and the webhook's serving certificate |
//! | `kube-lite/`, `nats/`, `agent/` | the components' data |

mod pki;
pub mod process;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use process::{Component, Started};

/// The agent id (a MAC) of the development agent; the demo Hardware targets it.
pub const DEV_AGENT_ID: &str = "02:00:00:00:00:01";

/// The token of the kubeconfig kube-lite writes, which its TokenReview knows as its admin: the
/// dev stack's console login.
pub const DEV_CONSOLE_TOKEN: &str = "kube-lite";

/// Exit status of a service binary that is not implemented in this build.
const NOT_IMPLEMENTED: i32 = 2;

/// `tinkctl dev ...`.
#[derive(Subcommand, Debug)]
pub enum DevCommand {
    /// Start the stack (fails when one is already running in the data directory).
    Up(UpArgs),
    /// Stop the stack (SIGTERM, then SIGKILL after the grace period); data stays.
    Down(DataDirArgs),
    /// Show each component's process and readiness.
    Status(DataDirArgs),
    /// Write a development CA and the webhook's serving certificate into a directory
    /// (`ca.crt`, `webhook.crt`, `webhook.key`; kept when present), as `dev up` does.
    Certs(CertsArgs),
    /// Write the NATS users and permissions of deploy/nats/nats.yaml (its `accounts` block, with
    /// the passwords read from `$TINK_NATS_<USER>_PASSWORD` by nats-server) into a
    /// configuration file for `nats-server -c`, as `dev up` and compose run NATS.
    NatsConfig(NatsConfigArgs),
}

/// Arguments of `tinkctl dev nats-config`.
#[derive(Args, Debug, Clone)]
pub struct NatsConfigArgs {
    /// The file to write.
    #[arg(long)]
    pub out: PathBuf,
}

/// deploy/nats/nats.yaml, built in: its `accounts` block is the NATS users and permissions the
/// development stack runs with, so it runs under production's permissions.
const DEPLOY_NATS_YAML: &str = include_str!("../../../../deploy/nats/nats.yaml");

/// The NATS users of deploy/nats/nats.yaml: (user, the variable nats-server reads its password
/// from). tinkctl itself connects as `tink-admin`.
pub const NATS_USERS: [(&str, &str); 5] = [
    ("tink-controller", "TINK_NATS_CONTROLLER_PASSWORD"),
    ("tink-server", "TINK_NATS_SERVER_PASSWORD"),
    ("tink-console", "TINK_NATS_CONSOLE_PASSWORD"),
    ("tink-netboot", "TINK_NATS_NETBOOT_PASSWORD"),
    ("tink-admin", "TINK_NATS_ADMIN_PASSWORD"),
];

/// The `accounts { ... }` block of deploy/nats/nats.yaml.
pub fn nats_accounts() -> anyhow::Result<&'static str> {
    let text = DEPLOY_NATS_YAML;
    let start = text
        .find("accounts {")
        .context("deploy/nats/nats.yaml has no accounts block")?;
    let mut depth = 0;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(&text[start..=start + i]);
                }
            }
            _ => {}
        }
    }
    bail!("deploy/nats/nats.yaml: the accounts block does not end")
}

/// A nats-server configuration file with deploy/'s users (passwords from the environment).
fn write_nats_config(path: &Path) -> anyhow::Result<()> {
    let text = format!(
        "# Written by tinkctl from deploy/nats/nats.yaml: every service's user and permissions.\n# nats-server reads the passwords from the environment: {}.\n{}\n",
        NATS_USERS.map(|(_, var)| var).join(", "),
        nats_accounts()?
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A random password (128 bits, hex, after a letter) for one NATS user of the development stack.
/// nats-server parses a `$VARIABLE`'s value as a configuration value: one starting with a digit
/// is read as a number and refused ("4e1f..." even as a float), so it starts with `p`.
fn random_password() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").context("opening /dev/urandom")?,
        &mut bytes,
    )
    .context("reading /dev/urandom")?;
    Ok(std::iter::once("p".to_string())
        .chain(bytes.iter().map(|b| format!("{b:02x}")))
        .collect())
}

/// Arguments of `tinkctl dev certs`.
#[derive(Args, Debug, Clone)]
pub struct CertsArgs {
    /// The directory.
    #[arg(long)]
    pub out: PathBuf,
}

/// The stack's data directory.
#[derive(Args, Debug, Clone)]
pub struct DataDirArgs {
    /// Where the stack keeps its state, logs, kubeconfig and data
    /// (default: $XDG_STATE_HOME/tinkctl/dev or ~/.local/state/tinkctl/dev).
    #[arg(long, env = "TINK_DEV_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DataDirArgs {
    fn resolve(&self) -> anyhow::Result<PathBuf> {
        if let Some(d) = &self.data_dir {
            return Ok(d.clone());
        }
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .context("neither XDG_STATE_HOME nor HOME is set: pass --data-dir")?;
        Ok(state.join("tinkctl/dev"))
    }
}

/// Arguments of `tinkctl dev up`.
#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DataDirArgs,
    /// Directory holding kube-lite, tink-webhook, tink-controller, tink-server, hegel and
    /// tink-agent (default: the directory of this tinkctl, e.g. target/debug).
    #[arg(long, env = "TINK_DEV_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// The nats-server executable.
    #[arg(long, env = "TINK_DEV_NATS_SERVER", default_value = "nats-server")]
    pub nats_server: PathBuf,
    /// Run actions privileged, as real provisioning actions need (some sandboxes, CI among
    /// them, cannot start privileged containers; the demo's actions do not need it).
    #[arg(long, env = "TINK_DEV_PRIVILEGED_ACTIONS")]
    pub privileged_actions: bool,
    /// Seconds each component may take to become ready.
    #[arg(long, default_value_t = 30)]
    pub ready_timeout_seconds: u64,
    /// The API server URL the services use instead of kube-lite's own (e.g. an auditing proxy
    /// in front of it, as the RBAC test does). Each service authenticates with its own token,
    /// its ServiceAccount's name in deploy/ (`tink-controller`, `tink-webhook`, `hegel`).
    #[arg(long, env = "TINK_DEV_SERVICES_API_SERVER")]
    pub services_api_server: Option<String>,
    /// The address machines reach the stack at (for example a bridge's address in a network
    /// namespace, as scripts/netboot-demo.sh uses): the servers and Hegel listen on it instead of
    /// loopback, and the servers' certificate names it. The data directory's certificates must
    /// have been made with it (use a new --data-dir when it changes).
    #[arg(long, env = "TINK_DEV_MACHINE_IP")]
    pub machine_ip: Option<std::net::Ipv4Addr>,
    /// Start the netboot service (tink-netboot: DHCP reservations, TFTP and HTTP) on this
    /// interface; needs --machine-ip, the interface's address, and root (ports 67 and 69).
    #[arg(long, env = "TINK_DEV_NETBOOT_INTERFACE", requires = "machine_ip")]
    pub netboot_interface: Option<String>,
    /// The folder the netboot service serves by TFTP and HTTP (iPXE binaries, OSIE kernel and
    /// initramfs, disk images); default D/netboot-files, filled with the iPXE binaries of
    /// /usr/lib/ipxe when they are missing.
    #[arg(long, env = "TINK_DEV_NETBOOT_FILES_DIR")]
    pub netboot_files_dir: Option<PathBuf>,
    /// Port of the netboot service's HTTP server on --machine-ip.
    #[arg(long, env = "TINK_DEV_NETBOOT_HTTP_PORT", default_value_t = 8080)]
    pub netboot_http_port: u16,
    /// Discovery: machines no Hardware names boot this OSIE (in the `default` namespace) and
    /// enroll; the controller creates a Hardware `discovery-<mac>` for each, approved before any
    /// Workflow. Turns on the servers' --enrollment, the controllers' --discovery, Hegel's
    /// discovery script, and (with --netboot-interface) proxy DHCP with discovery: addresses
    /// then come from the network's own DHCP server.
    #[arg(long, env = "TINK_DEV_DISCOVERY_OSIE")]
    pub discovery_osie: Option<String>,
    /// Do not start the local development agent (machines bring their own, as netbooted ones do).
    #[arg(long, env = "TINK_DEV_NO_AGENT")]
    pub no_agent: bool,
}

/// What `state.json` holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// Components in start order.
    pub components: Vec<Component>,
    /// Components that are not part of this build (their binary says "not implemented").
    #[serde(default)]
    pub missing: Vec<String>,
}

impl State {
    fn path(dir: &Path) -> PathBuf {
        dir.join("state.json")
    }

    /// Reads the state file (empty when absent).
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let p = Self::path(dir);
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .with_context(|| format!("{} is not a tinkctl state file", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    }

    fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let p = Self::path(dir);
        let tmp = dir.join("state.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))
    }

    fn running(&self) -> Vec<&Component> {
        self.components
            .iter()
            .filter(|c| process::is_alive(c.pid) && process::is_ours(c.pid, &c.exe))
            .collect()
    }
}

/// Runs a `dev` subcommand.
pub fn run(cmd: DevCommand) -> anyhow::Result<()> {
    match cmd {
        DevCommand::Up(args) => up(&args),
        DevCommand::Down(args) => down(&args.resolve()?),
        DevCommand::Certs(args) => {
            let pki = pki::write(&args.out, None)?;
            println!(
                "{}\n{}\n{}",
                pki.ca_cert.display(),
                pki.webhook_cert.display(),
                pki.webhook_key.display()
            );
            Ok(())
        }
        DevCommand::NatsConfig(args) => write_nats_config(&args.out),
        DevCommand::Status(args) => {
            let ok = status(&args.resolve()?, &mut std::io::stdout().lock())?;
            if ok {
                Ok(())
            } else {
                bail!("some components are not ready")
            }
        }
    }
}

fn find_nats(exe: &Path) -> anyhow::Result<PathBuf> {
    let found = if exe.components().count() > 1 {
        exe.is_file().then(|| exe.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(exe))
                .find(|p| p.is_file())
        })
    };
    found.with_context(|| {
        format!(
            "{} not found. Install NATS: `sudo apt-get install nats-server` on Debian or Ubuntu, \
             or a release binary from https://github.com/nats-io/nats-server/releases into your PATH \
             (or pass --nats-server PATH)",
            exe.display()
        )
    })
}

fn bin_dir(args: &UpArgs) -> anyhow::Result<PathBuf> {
    match &args.bin_dir {
        Some(d) => Ok(d.clone()),
        None => {
            let exe = std::env::current_exe().context("locating tinkctl")?;
            Ok(exe
                .parent()
                .context("tinkctl has no directory")?
                .to_path_buf())
        }
    }
}

/// Starts the stack.
fn up(args: &UpArgs) -> anyhow::Result<()> {
    let dir = args.dir.resolve()?;
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("creating {}", dir.display()))?;
    let dir = std::fs::canonicalize(&dir)?;
    let previous = State::load(&dir)?;
    if !previous.running().is_empty() {
        bail!(
            "a stack is already running in {} (tinkctl dev status --data-dir {0}; stop it with tinkctl dev down --data-dir {0})",
            dir.display()
        );
    }
    let nats = find_nats(&args.nats_server)?;
    let bins = bin_dir(args)?;
    let bin = |name: &str| -> anyhow::Result<PathBuf> {
        let p = bins.join(name);
        let p = std::fs::canonicalize(&p).with_context(|| {
            format!("{} not found: build the stack first (cargo build -p kube-lite -p tink-webhook -p tink-controller -p tink-bmc-controller -p tink-server -p hegel -p tink-console -p tink-agent -p tinkctl) or pass --bin-dir", p.display())
        })?;
        Ok(p)
    };
    let exes = Exes {
        // Required for DHCP and TFTP (--netboot-interface); otherwise it runs only the syslog
        // receiver, and a build without it runs the rest of the stack and says so.
        netboot: match args.netboot_interface {
            Some(_) => Some(bin("tink-netboot")?),
            None => bin("tink-netboot").ok(),
        },
        kube_lite: bin("kube-lite")?,
        webhook: bin("tink-webhook")?,
        controller: bin("tink-controller")?,
        server: bin("tink-server")?,
        hegel: bin("hegel")?,
        // Optional: a build without them runs the rest of the stack and says so.
        console: bin("tink-console").ok(),
        bmc: bin("tink-bmc-controller").ok(),
        agent: bin("tink-agent")?,
        nats,
    };
    let mut stack = Stack {
        dir: dir.clone(),
        state: State::default(),
        timeout: Duration::from_secs(args.ready_timeout_seconds),
        children: Vec::new(),
    };
    match stack.start(&exes, args) {
        Ok(env) => {
            stack.state.save(&dir)?;
            // The children keep running: tinkctl does not wait for them.
            drop(std::mem::take(&mut stack.children));
            print_summary(&dir, &env, &stack.state);
            Ok(())
        }
        Err(e) => {
            eprintln!("dev up failed; stopping what was started");
            for c in stack.state.components.iter().rev() {
                let _ = process::stop(c, Duration::from_secs(10));
            }
            for c in &mut stack.children {
                let _ = c.wait();
            }
            let _ = std::fs::remove_file(State::path(&dir));
            Err(e)
        }
    }
}

struct Exes {
    kube_lite: PathBuf,
    webhook: PathBuf,
    controller: PathBuf,
    server: PathBuf,
    hegel: PathBuf,
    console: Option<PathBuf>,
    bmc: Option<PathBuf>,
    agent: PathBuf,
    netboot: Option<PathBuf>,
    nats: PathBuf,
}

/// What `D/env` holds.
struct Env {
    kubeconfig: PathBuf,
    nats_url: String,
    /// The password of NATS user `tink-admin` (tinkctl's administrator mode).
    nats_admin_password: String,
    tink_server: String,
    hegel_url: String,
    /// The web console's URL, when it runs.
    console_url: Option<String>,
    /// The netboot service's HTTP URL, when it runs.
    netboot_url: Option<String>,
    /// The syslog receiver's `host:port`, when it runs.
    syslog_addr: Option<String>,
}

struct Stack {
    dir: PathBuf,
    state: State,
    timeout: Duration,
    children: Vec<std::process::Child>,
}

impl Stack {
    fn log(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    /// Starts one component and waits until it is ready. `Ok(false)`: its binary is not
    /// implemented in this build (exit status 2), recorded as missing.
    fn launch(
        &mut self,
        name: &str,
        exe: &Path,
        args: Vec<String>,
        env: &[(&str, String)],
        ready_url: String,
    ) -> anyhow::Result<bool> {
        let log = self.log(name);
        let mut child = process::spawn(exe, &args, env, &log)?;
        let component = Component {
            name: name.to_string(),
            pid: child.id() as i32,
            exe: exe.to_path_buf(),
            ready_url: ready_url.clone(),
            log: log.clone(),
        };
        self.state.components.push(component);
        self.state.save(&self.dir)?;
        let started = process::wait_ready(&mut child, name, &ready_url, self.timeout);
        match started {
            Ok(Started::Ready) => {
                println!("  {name:<14} ready    {ready_url}");
                self.children.push(child);
                Ok(true)
            }
            Ok(Started::Exited(Some(NOT_IMPLEMENTED))) => {
                self.state.components.pop();
                self.state.missing.push(name.to_string());
                self.state.save(&self.dir)?;
                println!(
                    "  {name:<14} skipped: not implemented in this build ({})",
                    process::tail(&log, 1)
                );
                Ok(false)
            }
            Ok(Started::Exited(code)) => bail!(
                "{name} exited (status {code:?}) before it was ready; last lines of {}:\n{}",
                log.display(),
                process::tail(&log, 20)
            ),
            Err(e) => {
                self.children.push(child);
                Err(e.context(format!(
                    "last lines of {}:\n{}",
                    log.display(),
                    process::tail(&log, 20)
                )))
            }
        }
    }

    fn start(&mut self, exes: &Exes, args: &UpArgs) -> anyhow::Result<Env> {
        let dir = self.dir.clone();
        let loopback = |p: u16| format!("127.0.0.1:{p}");
        // What machines dial: the servers and Hegel.
        let machine_ip = args
            .machine_ip
            .map_or_else(|| "127.0.0.1".to_string(), |ip| ip.to_string());
        let exposed = |p: u16| format!("{machine_ip}:{p}");
        let kubeconfig = dir.join("kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let pki = pki::write(&dir.join("pki"), args.machine_ip)?;

        let (nats_port, nats_mon) = (process::free_port()?, process::free_port()?);
        let nats_url = format!("nats://{}", loopback(nats_port));
        // deploy/'s NATS users and permissions, with a fresh password each per stack.
        let nats_conf = dir.join("nats.conf");
        write_nats_config(&nats_conf)?;
        let mut passwords = std::collections::HashMap::new();
        let mut nats_env = Vec::new();
        for (user, var) in NATS_USERS {
            let password = random_password()?;
            nats_env.push((var, password.clone()));
            passwords.insert(user, password);
        }
        let nats_user = |env: &[(&'static str, String)], user: &str| {
            let mut env = env.to_vec();
            env.push(("NATS_USER", user.to_string()));
            env.push(("NATS_PASSWORD", passwords[user].clone()));
            env
        };
        self.launch(
            "nats",
            &exes.nats,
            vec![
                "-c".into(),
                nats_conf.display().to_string(),
                "-js".into(),
                "-a".into(),
                "127.0.0.1".into(),
                "-p".into(),
                nats_port.to_string(),
                "-m".into(),
                nats_mon.to_string(),
                "-sd".into(),
                dir.join("nats").display().to_string(),
            ],
            &nats_env,
            format!("http://{}/healthz", loopback(nats_mon)),
        )?;

        let api_port = process::free_port()?;
        let webhook_port = process::free_port()?;
        self.launch(
            "kube-lite",
            &exes.kube_lite,
            vec![
                "--listen".into(),
                loopback(api_port),
                "--kubeconfig".into(),
                kubeconfig.display().to_string(),
                "--data-dir".into(),
                dir.join("kube-lite").display().to_string(),
                "--service".into(),
                format!(
                    "tink-system/tink-webhook=https://{}",
                    loopback(webhook_port)
                ),
            ],
            &[],
            format!("http://{}/readyz", loopback(api_port)),
        )?;
        for _ in 0..50 {
            if kubeconfig.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }

        let common: Vec<(&'static str, String)> = vec![
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("NATS_URL", nats_url.clone()),
            (
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ];

        let api_server = args
            .services_api_server
            .clone()
            .unwrap_or_else(|| format!("http://{}", loopback(api_port)));
        let identity = |sa: &str| -> anyhow::Result<Vec<(&'static str, String)>> {
            let path = service_kubeconfig(&dir, sa, &api_server)?;
            let mut env = common.clone();
            env.retain(|(k, _)| *k != "KUBECONFIG");
            env.push(("KUBECONFIG", path.display().to_string()));
            Ok(env)
        };
        let ca = std::fs::read(&pki.ca_cert)
            .with_context(|| format!("reading {}", pki.ca_cert.display()))?;
        let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
        // The CRDs first: the webhook's read caches list them before it turns ready.
        rt.block_on(apply_cluster_objects(&kubeconfig, &ca, false))?;
        let admin = process::free_port()?;
        let webhook = self.launch(
            "webhook",
            &exes.webhook,
            vec![
                "--listen".into(),
                loopback(webhook_port),
                "--tls-cert".into(),
                pki.webhook_cert.display().to_string(),
                "--tls-key".into(),
                pki.webhook_key.display().to_string(),
                "--admin-addr".into(),
                loopback(admin),
            ],
            &identity("tink-webhook")?,
            format!("http://{}/readyz", loopback(admin)),
        )?;

        if webhook {
            rt.block_on(apply_cluster_objects(&kubeconfig, &ca, true))?;
        }

        // The controllers first: the leader creates the streams and buckets, which the servers
        // only verify (their NATS user may not create one) before they turn ready.
        for i in 0..2 {
            let admin = process::free_port()?;
            // A standby is ready too once it can read the Lease.
            let mut controller_args: Vec<String> = vec![
                "--admin-addr".into(),
                loopback(admin),
                "--replica-id".into(),
                format!("controller-{i}"),
            ];
            if let Some(osie) = &args.discovery_osie {
                controller_args.extend([
                    "--discovery".into(),
                    "--discovery-osie".into(),
                    osie.clone(),
                ]);
            }
            self.launch(
                &format!("controller-{i}"),
                &exes.controller,
                controller_args,
                &nats_user(&identity("tink-controller")?, "tink-controller"),
                format!("http://{}/readyz", loopback(admin)),
            )?;
        }
        // The BMC controller (Rufio's Machines, Jobs, Tasks): one replica here; deploy/ runs two.
        match &exes.bmc {
            Some(exe) => {
                let admin = process::free_port()?;
                self.launch(
                    "bmc-controller",
                    exe,
                    vec![
                        "--admin-addr".into(),
                        loopback(admin),
                        "--replica-id".into(),
                        "bmc-controller-0".into(),
                    ],
                    &identity("tink-bmc-controller")?,
                    format!("http://{}/readyz", loopback(admin)),
                )?;
            }
            None => self.state.missing.push("bmc-controller".into()),
        }
        let mut grpc = Vec::new();
        for i in 0..2 {
            let (port, admin) = (process::free_port()?, process::free_port()?);
            let enrollment = args
                .discovery_osie
                .is_some()
                .then(|| "--enrollment".to_string());
            self.launch(
                &format!("server-{i}"),
                &exes.server,
                [
                    "--listen".into(),
                    exposed(port),
                    "--admin-addr".into(),
                    loopback(admin),
                    "--replica-id".into(),
                    format!("server-{i}"),
                    // TLS with the dev CA's loopback certificate (the webhook's: it names
                    // 127.0.0.1 and localhost); agents trust the dev CA.
                    "--tls-cert".into(),
                    pki.webhook_cert.display().to_string(),
                    "--tls-key".into(),
                    pki.webhook_key.display().to_string(),
                    // LogService.ReadLogs (`tinkctl workflow logs`) checks callers with kube-lite.
                    "--kubeconfig".into(),
                    service_kubeconfig(&dir, "tink-server", &api_server)?
                        .display()
                        .to_string(),
                ]
                .into_iter()
                .chain(enrollment)
                .collect(),
                &nats_user(&common, "tink-server"),
                format!("http://{}/readyz", loopback(admin)),
            )?;
            grpc.push(exposed(port));
        }
        let (hegel_port, admin) = (process::free_port()?, process::free_port()?);
        let hegel_url = format!("http://{}", exposed(hegel_port));
        // The syslog receiver (tink-netboot, started below) on an unprivileged UDP port where
        // machines reach it; Hegel's iPXE scripts name it (`syslog_host=HOST:PORT`).
        let syslog_addr = match &exes.netboot {
            Some(_) => Some(free_udp_addr(&machine_ip)?),
            None => None,
        };
        let mut hegel_args: Vec<String> = vec![
            "--listen".into(),
            exposed(hegel_port),
            "--grpc-authority".into(),
            grpc[0].clone(),
            "--admin-addr".into(),
            loopback(admin),
        ];
        if let Some(addr) = &syslog_addr {
            hegel_args.push("--syslog-host".into());
            hegel_args.push(addr.clone());
        }
        if let Some(osie) = &args.discovery_osie {
            hegel_args.push("--discovery-osie".into());
            hegel_args.push(osie.clone());
        }
        self.launch(
            "hegel",
            &exes.hegel,
            hegel_args,
            &identity("hegel")?,
            format!("http://{}/readyz", loopback(admin)),
        )?;
        // The web console, on loopback (plain HTTP, so its session cookie is not `Secure`).
        // Log in with the kubeconfig's token: kube-lite's TokenReview knows it as its admin.
        let console_url = match &exes.console {
            Some(exe) => {
                let (port, admin) = (process::free_port()?, process::free_port()?);
                let started = self.launch(
                    "console",
                    exe,
                    vec![
                        "--listen".into(),
                        loopback(port),
                        "--admin-addr".into(),
                        loopback(admin),
                        "--secure-cookies".into(),
                        "false".into(),
                        // Agent presence on the machine tiles.
                        "--nats-url".into(),
                        nats_url.clone(),
                        // Action output from the servers, read with the user's token over
                        // TLS with the dev CA (the console refuses plaintext without --insecure).
                        "--server-url".into(),
                        grpc.join(","),
                        "--server-tls-ca".into(),
                        pki.ca_cert.display().to_string(),
                    ],
                    &nats_user(&identity("tink-console")?, "tink-console"),
                    format!("http://{}/readyz", loopback(admin)),
                )?;
                started.then(|| format!("http://{}", loopback(port)))
            }
            None => {
                self.state.missing.push("console".into());
                None
            }
        };
        let netboot_url = match (&exes.netboot, &args.netboot_interface) {
            (Some(exe), Some(interface)) => {
                let files = match &args.netboot_files_dir {
                    Some(d) => d.clone(),
                    None => dir.join("netboot-files"),
                };
                fill_netboot_files(&files)?;
                let admin = process::free_port()?;
                let http = exposed(args.netboot_http_port);
                let mut netboot_args: Vec<String> = vec![
                    "--interface".into(),
                    interface.clone(),
                    "--server-ip".into(),
                    machine_ip.clone(),
                    "--ipxe-script-url".into(),
                    format!("{hegel_url}/ipxe/script/auto.ipxe"),
                    "--files-dir".into(),
                    files.display().to_string(),
                    "--http-listen".into(),
                    http.clone(),
                    "--admin-addr".into(),
                    loopback(admin),
                    // The ISO's kernel parameters are the iPXE script's: the same server
                    // Hegel's scripts name.
                    "--grpc-authority".into(),
                    grpc[0].clone(),
                ];
                if let Some(addr) = &syslog_addr {
                    netboot_args.extend(syslog_args(addr, &nats_url));
                }
                if args.discovery_osie.is_some() {
                    netboot_args.extend([
                        "--dhcp-mode".into(),
                        "proxy".into(),
                        "--discovery".into(),
                    ]);
                }
                // The OSIE ISO for BMC virtual media, when the files hold one
                // (`osie/build.sh --iso`): served at /iso/<mac>/hook.iso.
                let iso = files.join("osie.iso");
                if iso.is_file() {
                    netboot_args.push("--iso-source".into());
                    netboot_args.push(iso.display().to_string());
                }
                self.launch(
                    "netboot",
                    exe,
                    netboot_args,
                    &nats_user(&identity("tink-netboot")?, "tink-netboot"),
                    format!("http://{}/readyz", loopback(admin)),
                )?;
                Some(format!("http://{http}"))
            }
            // No machines' network: only the syslog receiver (DHCP, TFTP and HTTP off).
            (Some(exe), None) => {
                let admin = process::free_port()?;
                let mut netboot_args: Vec<String> = vec![
                    "--dhcp".into(),
                    "false".into(),
                    "--tftp".into(),
                    "false".into(),
                    "--http".into(),
                    "false".into(),
                    "--server-ip".into(),
                    machine_ip.clone(),
                    "--ipxe-script-url".into(),
                    format!("{hegel_url}/ipxe/script/auto.ipxe"),
                    "--admin-addr".into(),
                    loopback(admin),
                ];
                if let Some(addr) = &syslog_addr {
                    netboot_args.extend(syslog_args(addr, &nats_url));
                }
                self.launch(
                    "netboot-syslog",
                    exe,
                    netboot_args,
                    &nats_user(&identity("tink-netboot")?, "tink-netboot"),
                    format!("http://{}/readyz", loopback(admin)),
                )?;
                None
            }
            (None, _) => {
                self.state.missing.push("netboot-syslog".into());
                None
            }
        };
        if !args.no_agent {
            let admin = process::free_port()?;
            let work = dir.join("agent");
            std::fs::create_dir_all(&work)?;
            self.launch(
                "agent",
                &exes.agent,
                vec![
                    "--agent-id".into(),
                    DEV_AGENT_ID.into(),
                    "--server".into(),
                    grpc.join(","),
                    "--tls-ca".into(),
                    pki.ca_cert.display().to_string(),
                    "--admin-addr".into(),
                    loopback(admin),
                    "--work-dir".into(),
                    work.display().to_string(),
                    "--privileged".into(),
                    args.privileged_actions.to_string(),
                ],
                &common,
                // Alive, not ready: the servers admit the agent only once a Hardware names its
                // id (`tinkctl demo` applies one), and it connects then by itself.
                format!("http://{}/healthz", loopback(admin)),
            )?;
            println!(
                "  {:<14} connects once a Hardware names {DEV_AGENT_ID} (tinkctl demo applies one)",
                ""
            );
        }
        let env = Env {
            kubeconfig,
            nats_url,
            nats_admin_password: passwords["tink-admin"].clone(),
            tink_server: grpc.join(","),
            hegel_url,
            console_url,
            netboot_url,
            syslog_addr,
        };
        write_env(&dir, &env)?;
        Ok(env)
    }
}

/// The namespace the services run in (Lease, webhook Service).
const SYSTEM_NAMESPACE: &str = "tink-system";

/// Applies the system namespace and the CRDs (with the dev CA as the conversion webhook's
/// caBundle) or, with `webhook`, the webhook's ValidatingWebhookConfiguration.
async fn apply_cluster_objects(kubeconfig: &Path, ca: &[u8], webhook: bool) -> anyhow::Result<()> {
    let client = crate::kubeconfig::client_from(kubeconfig).await?;
    let hook = tink_api::ConversionWebhook {
        namespace: SYSTEM_NAMESPACE.into(),
        name: "tink-webhook".into(),
        path: "/convert".into(),
        port: 443,
        ca_bundle: Some(ca.to_vec()),
    };
    let yaml = if webhook {
        validating_webhook_configuration(ca)
    } else {
        let mut yaml =
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SYSTEM_NAMESPACE}\n");
        for (_, crd) in tink_api::render_crds(&hook)? {
            yaml.push_str("---\n");
            yaml.push_str(&crd);
        }
        yaml
    };
    let objects = crate::apply::documents(&yaml)?;
    crate::apply::apply_all(&client, &objects).await?;
    println!(
        "  applied {}",
        if webhook {
            "the ValidatingWebhookConfiguration"
        } else {
            "the CRDs (conversion caBundle: the development CA)"
        }
    );
    Ok(())
}

/// The admission webhook registration for every tinkerbell.org kind.
pub fn validating_webhook_configuration(ca: &[u8]) -> String {
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: tink-webhook
webhooks:
  - name: validate.tinkerbell.org
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 10
    clientConfig:
      caBundle: {bundle}
      service:
        namespace: {SYSTEM_NAMESPACE}
        name: tink-webhook
        path: /validate
        port: 443
    rules:
      - apiGroups: [tinkerbell.org]
        apiVersions: ["*"]
        operations: [CREATE, UPDATE]
        resources: ["*"]
        scope: "*"
      - apiGroups: [bmc.tinkerbell.org]
        apiVersions: [v1alpha1]
        operations: [CREATE, UPDATE]
        resources: [machines, jobs, tasks]
        scope: Namespaced
"#
    )
}

/// A kubeconfig for one service under `D/kubeconfig.d/`, authenticating with a token named after
/// its ServiceAccount (kube-lite accepts any token; a proxy in front of it can tell the
/// services apart by it).
fn service_kubeconfig(dir: &Path, service_account: &str, server: &str) -> anyhow::Result<PathBuf> {
    let d = dir.join("kubeconfig.d");
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    let path = d.join(format!("{service_account}.yaml"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dev\n  cluster:\n    server: {server}\ncontexts:\n- name: {service_account}\n  context:\n    cluster: dev\n    user: {service_account}\ncurrent-context: {service_account}\nusers:\n- name: {service_account}\n  user:\n    token: {service_account}\n"
    );
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn write_env(dir: &Path, env: &Env) -> anyhow::Result<()> {
    let mut text = format!(
        "# Written by `tinkctl dev up`; source it: . {}\nKUBECONFIG={}\nNATS_URL={}\nTINK_SERVER={}\nHEGEL_URL={}\nTINK_DEV_AGENT_ID={}\nTINK_AGENT_TLS_CA={}\nexport KUBECONFIG NATS_URL TINK_SERVER HEGEL_URL TINK_DEV_AGENT_ID TINK_AGENT_TLS_CA\n",
        dir.join("env").display(),
        shell_quote(&env.kubeconfig.display().to_string()),
        shell_quote(&env.nats_url),
        shell_quote(&env.tink_server),
        shell_quote(&env.hegel_url),
        shell_quote(DEV_AGENT_ID),
        shell_quote(&dir.join("pki").join("ca.crt").display().to_string()),
    );
    // tinkctl's administrator mode (`workflow logs --nats-url`, `agent reset`) as tink-admin.
    text.push_str(&format!(
        "NATS_USER=tink-admin\nNATS_PASSWORD={}\nexport NATS_USER NATS_PASSWORD\n",
        shell_quote(&env.nats_admin_password)
    ));
    if let Some(url) = &env.console_url {
        text.push_str(&format!(
            "TINK_CONSOLE_URL={}\nexport TINK_CONSOLE_URL\n",
            shell_quote(url)
        ));
    }
    if let Some(url) = &env.netboot_url {
        text.push_str(&format!(
            "TINK_NETBOOT_URL={}\nexport TINK_NETBOOT_URL\n",
            shell_quote(url)
        ));
    }
    if let Some(addr) = &env.syslog_addr {
        text.push_str(&format!(
            "TINK_SYSLOG_ADDR={}\nexport TINK_SYSLOG_ADDR\n",
            shell_quote(addr)
        ));
    }
    let p = dir.join("env");
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    // It holds a NATS password.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {}", p.display()))
}

fn print_summary(dir: &Path, env: &Env, state: &State) {
    println!(
        "\nThe development stack runs ({} processes); logs in {}",
        state.components.len(),
        dir.join("logs").display()
    );
    if !state.missing.is_empty() {
        println!("Not part of this build: {}", state.missing.join(", "));
    }
    println!("Use it:");
    println!(
        "  . {}                # KUBECONFIG, NATS_URL, TINK_SERVER, HEGEL_URL, TINK_DEV_AGENT_ID",
        dir.join("env").display()
    );
    println!(
        "  kubectl --kubeconfig {} get workflows -A",
        env.kubeconfig.display()
    );
    println!("  tinkctl demo --kubeconfig {}", env.kubeconfig.display());
    if let Some(url) = &env.console_url {
        println!(
            "Console: {url}  (log in with the kubeconfig's token: {})",
            DEV_CONSOLE_TOKEN
        );
    }
    println!("  tinkctl dev status --data-dir {}", dir.display());
    println!("  tinkctl dev down --data-dir {}", dir.display());
    if let Some(url) = &env.netboot_url {
        println!("Netboot: DHCP and TFTP on the machines' network, files at {url}/");
    }
    if let Some(addr) = &env.syslog_addr {
        println!(
            "Syslog: machines send to udp://{addr}; read with `tinkctl hardware logs NAME -f`"
        );
    }
}

/// A free UDP port on `ip` (the syslog receiver's), as `ip:port`.
fn free_udp_addr(ip: &str) -> anyhow::Result<String> {
    let socket = std::net::UdpSocket::bind((ip, 0))
        .with_context(|| format!("finding a free UDP port on {ip}"))?;
    Ok(socket.local_addr()?.to_string())
}

/// tink-netboot's flags for its syslog receiver on `addr`, publishing to `nats_url`.
fn syslog_args(addr: &str, nats_url: &str) -> [String; 4] {
    [
        "--syslog-addr".into(),
        addr.to_string(),
        "--nats-url".into(),
        nats_url.to_string(),
    ]
}

/// The iPXE binaries the netboot service hands to PXE clients that are not iPXE yet, copied
/// from Debian's `ipxe` package when the folder lacks them.
fn fill_netboot_files(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for name in ["undionly.kpxe", "ipxe.efi", "snponly.efi"] {
        let to = dir.join(name);
        let from = Path::new("/usr/lib/ipxe").join(name);
        if !to.exists() && from.exists() {
            std::fs::copy(&from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        }
    }
    Ok(())
}

/// Stops every recorded component, last started first.
fn down(dir: &Path) -> anyhow::Result<()> {
    let state = State::load(dir)?;
    if state.components.is_empty() {
        println!("no stack recorded in {}", dir.display());
        return Ok(());
    }
    for c in state.components.iter().rev() {
        match process::stop(c, Duration::from_secs(15))? {
            true => println!("  {:<14} killed after 15s", c.name),
            false => println!("  {:<14} stopped", c.name),
        }
    }
    std::fs::remove_file(State::path(dir))
        .with_context(|| format!("removing {}", State::path(dir).display()))?;
    println!("stopped; data kept in {}", dir.display());
    Ok(())
}

/// Prints one line per component; whether all are running and ready.
pub fn status(dir: &Path, out: &mut impl std::io::Write) -> anyhow::Result<bool> {
    let state = State::load(dir)?;
    if state.components.is_empty() {
        writeln!(out, "no stack recorded in {}", dir.display())?;
        return Ok(false);
    }
    let mut all = true;
    writeln!(
        out,
        "{:<14} {:<8} {:<10} PROBE",
        "COMPONENT", "PID", "STATE"
    )?;
    for c in &state.components {
        let alive = process::is_alive(c.pid) && process::is_ours(c.pid, &c.exe);
        let st = if !alive {
            "exited"
        } else {
            match process::http_status(&c.ready_url, Duration::from_secs(1)) {
                Ok(200) => "ready",
                Ok(_) => "not-ready",
                Err(_) => "no-answer",
            }
        };
        all &= st == "ready";
        writeln!(
            out,
            "{:<14} {:<8} {:<10} {}",
            c.name, c.pid, st, c.ready_url
        )?;
    }
    for m in &state.missing {
        writeln!(
            out,
            "{m:<14} {:<8} {:<10} not implemented in this build",
            "-", "-"
        )?;
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_are_shell_quoted() {
        assert_eq!(shell_quote("a b'c"), r"'a b'\''c'");
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Env {
            kubeconfig: dir.path().join("kube config"),
            nats_url: "nats://127.0.0.1:1".into(),
            nats_admin_password: "pw".into(),
            tink_server: "127.0.0.1:2,127.0.0.1:3".into(),
            hegel_url: "http://127.0.0.1:4".into(),
            console_url: Some("http://127.0.0.1:5".into()),
            netboot_url: Some("http://10.99.0.1:8080".into()),
            syslog_addr: Some("127.0.0.1:5514".into()),
        };
        write_env(dir.path(), &env).expect("env");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                ". '{}/env' && echo \"$KUBECONFIG|$TINK_SERVER|$TINK_DEV_AGENT_ID|$TINK_CONSOLE_URL|$TINK_NETBOOT_URL|$NATS_USER|$NATS_PASSWORD|$TINK_SYSLOG_ADDR\"",
                dir.path().display()
            ))
            .output()
            .expect("sh");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!(
                "{}|127.0.0.1:2,127.0.0.1:3|{DEV_AGENT_ID}|http://127.0.0.1:5|http://10.99.0.1:8080|tink-admin|pw|127.0.0.1:5514",
                dir.path().join("kube config").display()
            )
        );
    }

    #[test]
    fn the_nats_config_is_deploys_accounts_and_nats_server_accepts_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nats.conf");
        write_nats_config(&path).expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains(nats_accounts().expect("accounts")));
        for (user, var) in NATS_USERS {
            assert!(
                text.contains(&format!("user: {user}, password: ${var}")),
                "{user}: {text}"
            );
        }
        // With the passwords dev up generates (each run a fresh set: one starting with a digit
        // once made nats-server refuse the whole configuration).
        for _ in 0..8 {
            let mut check = std::process::Command::new("nats-server");
            check.args(["-c"]).arg(&path).arg("-t");
            for (_, var) in NATS_USERS {
                check.env(var, random_password().expect("password"));
            }
            let out = check
                .output()
                .expect("nats-server is installed (apt-get install nats-server)");
            assert!(
                out.status.success(),
                "nats-server -t: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn the_webhook_configuration_parses_and_carries_the_ca() {
        let yaml = validating_webhook_configuration(b"CA");
        let docs = crate::apply::documents(&yaml).expect("yaml");
        assert_eq!(docs.len(), 1);
        assert!(yaml.contains("caBundle: Q0E="));
    }

    #[test]
    fn status_without_a_stack_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut out = Vec::new();
        assert!(!status(dir.path(), &mut out).expect("status"));
        assert!(String::from_utf8_lossy(&out).starts_with("no stack recorded"));
    }
}

#[cfg(test)]
mod password_tests {
    /// nats-server refuses a `$VARIABLE` whose value starts with a digit; every generated
    /// password starts with a letter, whatever the random bytes.
    #[test]
    fn passwords_start_with_a_letter() {
        for _ in 0..64 {
            let p = super::random_password().expect("password");
            assert!(p.starts_with('p'), "{p}");
            assert_eq!(p.len(), 33);
            assert!(p[1..].bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
}
