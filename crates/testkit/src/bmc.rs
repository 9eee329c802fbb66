//! BMC emulators for tests: a real `sushy-emulator` (Redfish, PyPI `sushy-tools`, fake driver)
//! with TLS and an auth file, and a real `ipmi_sim` (IPMI, Debian `openipmi`), each on loopback
//! with a fresh state folder, stopped on drop. Plus two bad peers: a listener that accepts and
//! never answers, and a port nobody listens on.
//!
//! scripts/install-deps.sh installs both emulators (sushy-tools in a venv under
//! `/opt/sushy-tools`). When one is missing, `start` fails with [`BmcEmuError::NotInstalled`]
//! naming the package: tests fail rather than skip.
//!
//! sushy's fake driver applies power changes 1 to 11 seconds after they are asked for (as real
//! hardware does): poll for the state, do not sleep.
//!
//! ipmi_sim's chassis is a small shell program ([`IpmiSim`] writes it) that keeps the power
//! and boot device in files of the state folder, so IPMI power control and boot flags are
//! really stored and read back through the simulator.

use std::net::{SocketAddr, TcpListener as StdTcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// Where scripts/install-deps.sh puts sushy-tools' venv.
pub const SUSHY_VENV: &str = "/opt/sushy-tools";

/// The test user of both emulators.
pub const BMC_USER: &str = "admin";
/// The test user's password.
pub const BMC_PASSWORD: &str = "t0p-Secret";

/// An emulator did not start.
#[derive(Debug, thiserror::Error)]
pub enum BmcEmuError {
    /// A program is not installed.
    #[error("{program} not found: install {package} (scripts/install-deps.sh does)")]
    NotInstalled {
        /// The program looked for.
        program: String,
        /// Where it comes from.
        package: &'static str,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The emulator did not come up.
    #[error("{what} did not come up within {timeout:?}; its log:\n{log}")]
    NotReady {
        /// Which emulator.
        what: &'static str,
        /// How long we waited.
        timeout: Duration,
        /// Its output.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BmcEmuError {
    let what = what.into();
    move |source| BmcEmuError::Io { what, source }
}

/// `program` on the PATH.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A TCP port free right now on 127.0.0.1.
pub fn free_tcp_port() -> Result<u16, BmcEmuError> {
    let l = StdTcpListener::bind("127.0.0.1:0").map_err(io("bind a free port"))?;
    Ok(l.local_addr().map_err(io("local addr"))?.port())
}

fn free_udp_port() -> Result<u16, BmcEmuError> {
    let s = UdpSocket::bind("127.0.0.1:0").map_err(io("bind a free UDP port"))?;
    Ok(s.local_addr().map_err(io("local addr"))?.port())
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

async fn run(
    program: &Path,
    args: &[&str],
    cwd: &Path,
) -> Result<std::process::Output, BmcEmuError> {
    Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(io(format!("run {}", program.display())))
}

/// A test CA and a serving certificate for 127.0.0.1 it signed, made with openssl in `dir`:
/// `(ca.pem, cert.pem, key.pem)`. A Machine trusts the CA; the BMC serves the leaf.
pub async fn test_certificates(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf), BmcEmuError> {
    let openssl = which("openssl").ok_or(BmcEmuError::NotInstalled {
        program: "openssl".into(),
        package: "Debian openssl",
    })?;
    let ext = dir.join("leaf.ext");
    std::fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .map_err(io("write leaf.ext"))?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let steps: [Vec<&str>; 3] = [
        [
            &["req", "-x509"][..],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=tink test BMC CA",
            ][..],
        ]
        .concat(),
        [
            &["req"][..],
            &ec[..],
            &[
                "-keyout",
                "key.pem",
                "-out",
                "leaf.csr",
                "-subj",
                "/CN=127.0.0.1",
            ][..],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "cert.pem",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
        ],
    ];
    for args in steps {
        let out = run(&openssl, &args, dir).await?;
        if !out.status.success() {
            return Err(BmcEmuError::Io {
                what: format!(
                    "openssl {}: {}",
                    args[0],
                    String::from_utf8_lossy(&out.stderr)
                ),
                source: std::io::Error::other("openssl failed"),
            });
        }
    }
    Ok((
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    ))
}

/// A running `sushy-emulator --fake` with TLS and basic auth (user [`BMC_USER`], password
/// [`BMC_PASSWORD`]) on `127.0.0.1`, its state in a fresh folder. Killed on drop.
pub struct Sushy {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    cert_pem: Vec<u8>,
}

impl Sushy {
    /// The emulator binary: the venv's, else one on the PATH.
    pub fn binary() -> Result<PathBuf, BmcEmuError> {
        let venv = Path::new(SUSHY_VENV).join("bin/sushy-emulator");
        if venv.is_file() {
            return Ok(venv);
        }
        which("sushy-emulator").ok_or(BmcEmuError::NotInstalled {
            program: "sushy-emulator".into(),
            package: "PyPI sushy-tools",
        })
    }

    /// Starts one with sushy's default system, listening on 127.0.0.1, and waits until it
    /// accepts connections.
    pub async fn start() -> Result<Self, BmcEmuError> {
        SushyBuilder::default().start().await
    }

    /// A configured start: the systems, the listen address, where its state lives.
    pub fn builder() -> SushyBuilder {
        SushyBuilder::default()
    }
}

/// How to start a [`Sushy`]: [`Sushy::start`]'s defaults unless set.
#[derive(Clone, Debug, Default)]
pub struct SushyBuilder {
    systems: Vec<String>,
    listen: Option<String>,
    state_parent: Option<PathBuf>,
}

impl SushyBuilder {
    /// Fake systems, each named and identified (`Id`, UUID) by its name, powered off; sushy's
    /// one default system when none is given.
    pub fn systems(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.systems = names.into_iter().map(Into::into).collect();
        self
    }

    /// The address it listens on (`0.0.0.0`: every address of this machine, so one emulator
    /// can stand behind many BMC addresses 127.X.Y.Z); 127.0.0.1 by default.
    pub fn listen(mut self, address: impl Into<String>) -> Self {
        self.listen = Some(address.into());
        self
    }

    /// The folder its state folder (certificates, auth file, its SQLite state) is made in:
    /// `/dev/shm` keeps the fake driver's SQLite off the disk; the temporary folder by default.
    pub fn state_in(mut self, parent: impl Into<PathBuf>) -> Self {
        self.state_parent = Some(parent.into());
        self
    }

    /// Starts it (its open-files limit raised to the hard limit, as a busy BMC emulator needs
    /// one per connection and per SQLite open) and waits until it accepts connections.
    pub async fn start(self) -> Result<Sushy, BmcEmuError> {
        let bin = Sushy::binary()?;
        let python = bin.with_file_name("python3");
        let python = if python.is_file() {
            python
        } else {
            which("python3").ok_or(BmcEmuError::NotInstalled {
                program: "python3".into(),
                package: "Debian python3",
            })?
        };
        let mut dir = tempfile::Builder::new();
        dir.prefix("sushy-");
        let dir = match &self.state_parent {
            Some(parent) => dir.tempdir_in(parent),
            None => dir.tempdir(),
        }
        .map_err(io("tempdir"))?;
        let (ca, cert, key) = test_certificates(dir.path()).await?;
        // sushy-tools accepts only bcrypt entries in its Apache-style auth file.
        let hash = run(
            &python,
            &[
                "-c",
                "import bcrypt,sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(4)).decode())",
                BMC_PASSWORD,
            ],
            dir.path(),
        )
        .await?;
        if !hash.status.success() {
            return Err(BmcEmuError::Io {
                what: format!("bcrypt: {}", String::from_utf8_lossy(&hash.stderr)),
                source: std::io::Error::other("python bcrypt failed"),
            });
        }
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(
            &htpasswd,
            format!(
                "{BMC_USER}:{}\n",
                String::from_utf8_lossy(&hash.stdout).trim()
            ),
        )
        .map_err(io("write htpasswd"))?;
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).map_err(io("state dir"))?;
        let conf = dir.path().join("emulator.conf");
        let mut config = format!(
            "SUSHY_EMULATOR_AUTH_FILE = {:?}\nSUSHY_EMULATOR_STATE_DIR = {:?}\n",
            htpasswd.display().to_string(),
            state.display().to_string()
        );
        if !self.systems.is_empty() {
            let fake: Vec<String> = self
                .systems
                .iter()
                .map(|name| {
                    format!(
                        "{{'uuid': {name:?}, 'name': {name:?}, 'power_state': 'Off', 'external_notifier': False, 'nics': []}}"
                    )
                })
                .collect();
            config.push_str(&format!(
                "SUSHY_EMULATOR_FAKE_SYSTEMS = [{}]\n",
                fake.join(",\n")
            ));
        }
        std::fs::write(&conf, config).map_err(io("write emulator.conf"))?;
        let cert_pem = std::fs::read(&ca).map_err(io("read CA"))?;
        let log = dir.path().join("emulator.log");
        let port = free_tcp_port()?;
        let logf = std::fs::File::create(&log).map_err(io("log file"))?;
        let errf = logf.try_clone().map_err(io("log file"))?;
        let port_s = port.to_string();
        let listen = self.listen.as_deref().unwrap_or("127.0.0.1");
        // sh raises the soft open-files limit to the hard one, then becomes the emulator.
        let child = Command::new("sh")
            .args([
                "-c",
                "ulimit -n \"$(ulimit -Hn)\" 2>/dev/null; exec \"$0\" \"$@\"",
            ])
            .arg(&bin)
            .args(["--config"])
            .arg(&conf)
            .args(["--fake", "-i", listen, "-p", &port_s, "--ssl-certificate"])
            .arg(&cert)
            .arg("--ssl-key")
            .arg(&key)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(logf)
            .stderr(errf)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(format!("start {}", bin.display())))?;
        let mut s = Sushy {
            child,
            dir,
            port,
            cert_pem,
        };
        let timeout = Duration::from_secs(30);
        if s.wait_ready(timeout).await {
            return Ok(s);
        }
        let _ = s.child.kill().await;
        Err(BmcEmuError::NotReady {
            what: "sushy-emulator",
            timeout,
            log: read_log(&log),
        })
    }
}

impl Sushy {
    async fn wait_ready(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// `127.0.0.1:PORT`: a Machine host without a scheme (https, as bmclib reads it).
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The CA (PEM) that signed the emulator's certificate, to trust as the Machine's CA.
    pub fn cert_pem(&self) -> &[u8] {
        &self.cert_pem
    }

    /// The emulator's output so far.
    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("emulator.log"))
    }
}

/// The chassis of [`IpmiSim`]: `get power boot` prints `power:0`/`boot:none`; `set power "1"`
/// stores; a soft shutdown (`set shutdown "1"`) powers off, as the OS would.
const CHASSIS: &str = r#"#!/bin/sh
dir=$(dirname "$0")
op=$1; shift
case "$op" in
get)
  for k in "$@"; do
    v=$(cat "$dir/$k" 2>/dev/null)
    if [ -z "$v" ]; then if [ "$k" = boot ]; then v=none; else v=0; fi; fi
    echo "$k:$v"
  done ;;
set)
  while [ $# -ge 2 ]; do
    k=$1; v=$2; shift 2
    echo "$k=$v" >> "$dir/requests"
    case "$k" in
      shutdown) printf 0 > "$dir/power" ;;
      *) printf '%s' "$v" > "$dir/$k" ;;
    esac
  done ;;
esac
"#;

/// A running `ipmi_sim` on `127.0.0.1` (a free UDP port), user [`BMC_USER`] with password
/// [`BMC_PASSWORD`] (admin), its state and chassis in a fresh folder. Killed on drop.
pub struct IpmiSim {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl IpmiSim {
    /// Starts one and waits until ipmitool gets an answer from it.
    pub async fn start() -> Result<Self, BmcEmuError> {
        let sim = which("ipmi_sim").ok_or(BmcEmuError::NotInstalled {
            program: "ipmi_sim".into(),
            package: "Debian openipmi",
        })?;
        let ipmitool = which("ipmitool").ok_or(BmcEmuError::NotInstalled {
            program: "ipmitool".into(),
            package: "Debian ipmitool",
        })?;
        let dir = tempfile::Builder::new()
            .prefix("ipmisim-")
            .tempdir()
            .map_err(io("tempdir"))?;
        let chassis = dir.path().join("chassis");
        std::fs::create_dir_all(&chassis).map_err(io("chassis dir"))?;
        let prog = chassis.join("chassis.sh");
        std::fs::write(&prog, CHASSIS).map_err(io("write chassis.sh"))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755))
                .map_err(io("chmod chassis.sh"))?;
        }
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).map_err(io("state dir"))?;
        let port = free_udp_port()?;
        let lan = format!(
            r#"name "tinkbmc"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "{}"
  user 2 true "{BMC_USER}" "{BMC_PASSWORD}" admin 10 md5
"#,
            prog.display()
        );
        std::fs::write(dir.path().join("lan.conf"), lan).map_err(io("write lan.conf"))?;
        std::fs::write(
            dir.path().join("sim.emu"),
            "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nmc_enable 0x20\n",
        )
        .map_err(io("write sim.emu"))?;
        let log = dir.path().join("sim.log");
        let logf = std::fs::File::create(&log).map_err(io("log file"))?;
        let errf = logf.try_clone().map_err(io("log file"))?;
        let child = Command::new(&sim)
            .args(["-c", "lan.conf", "-f", "sim.emu", "-s"])
            .arg(&state)
            .arg("-n")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(logf)
            .stderr(errf)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(format!("start {}", sim.display())))?;
        let mut s = Self { child, dir, port };
        let timeout = Duration::from_secs(15);
        let start = Instant::now();
        let port_s = port.to_string();
        while start.elapsed() < timeout {
            if let Ok(Some(_)) = s.child.try_wait() {
                break;
            }
            let out = Command::new(&ipmitool)
                .args([
                    "-I",
                    "lanplus",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &port_s,
                    "-U",
                    BMC_USER,
                    "-E",
                ])
                .args([
                    "-N", "1", "-R", "1", "-C", "3", "chassis", "power", "status",
                ])
                .env("IPMITOOL_PASSWORD", BMC_PASSWORD)
                .stdin(Stdio::null())
                .output()
                .await
                .map_err(io("run ipmitool"))?;
            if out.status.success() {
                return Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = s.child.kill().await;
        Err(BmcEmuError::NotReady {
            what: "ipmi_sim",
            timeout,
            log: read_log(&log),
        })
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The UDP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the chassis holds for `key` (`power`: `0`/`1`; `boot`: `none`, `pxe`, ...).
    pub fn chassis(&self, key: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join("chassis").join(key)).ok()
    }

    /// Every chassis change the simulator asked for, in order (`power=1`, `boot=pxe`, ...).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("chassis/requests"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The simulator's output so far.
    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("sim.log"))
    }
}

/// A TCP listener on loopback that accepts connections and never answers: a BMC hung
/// mid-response. Connections are held until it is dropped.
pub struct SilentListener {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SilentListener {
    /// Binds `127.0.0.1:0` and starts accepting.
    pub async fn start() -> Result<Self, BmcEmuError> {
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io("bind silent listener"))?;
        let addr = l.local_addr().map_err(io("local addr"))?;
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        Ok(Self { addr, task })
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SilentListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
