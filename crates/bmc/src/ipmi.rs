//! The IPMI provider: `ipmitool -I lanplus`, as bmclib runs it.
//!
//! The password goes in `IPMITOOL_PASSWORD` (`-E`), never on the command line, where any
//! user of the host could read it from the process list; the child gets no other environment.
//! Cipher suite 3 is tried, then 17, unless the Machine names one. Each run is bounded by
//! [`Policy::timeout`] and killed when it runs over. ipmitool runs with `-v` so a refused
//! session ("RAKP 2 HMAC is invalid", "unauthorized name") can be told from a BMC that never
//! answered.
//!
//! The host is resolved here, before each run, and ipmitool is given the IP address that was
//! checked against [`Policy::allowed_networks`] (never the name, which it would resolve again).

use std::process::Stdio;

use tink_api::bmc::{BootDevice, PowerState};
use tokio::process::Command;

use crate::error::{Error, ErrorKind, shorten};
use crate::limit::{Limits, Policy, err};
use crate::net::resolve_allowed;
use crate::{Bmc, Credentials, PowerChange};

const NAME: &str = "ipmitool";

/// How to reach one IPMI BMC.
#[derive(Clone, Debug)]
pub struct IpmiConfig {
    /// `spec.connection.host` (an IP address or name, no scheme).
    pub host: String,
    /// `providerOptions.ipmitool.port` (623 when none).
    pub port: Option<i32>,
    /// The BMC's credentials.
    pub credentials: Credentials,
    /// `providerOptions.ipmitool.cipherSuite`; 3 then 17 when empty.
    pub cipher_suite: String,
    /// The ipmitool binary (`ipmitool` on the PATH when `None`).
    pub ipmitool: Option<std::path::PathBuf>,
}

/// An IPMI BMC driven through ipmitool.
#[derive(Debug)]
pub struct Ipmitool {
    config: IpmiConfig,
    port: u16,
    label: String,
    policy: Policy,
    limits: Limits,
}

/// The `chassis bootdev` name and the words `chassis bootparam get 5` prints for it.
fn bootdev(d: BootDevice) -> (&'static str, &'static str) {
    match d {
        BootDevice::Pxe => ("pxe", "force pxe"),
        BootDevice::Disk => ("disk", "hard-drive"),
        BootDevice::Bios => ("bios", "bios setup"),
        BootDevice::Cdrom => ("cdrom", "cd/dvd"),
        BootDevice::Safe => ("safe", "safe mode"),
    }
}

impl Ipmitool {
    /// A client for `config`; nothing runs until the first call.
    pub fn new(config: IpmiConfig, policy: Policy, limits: Limits) -> Result<Self, Error> {
        let host = config.host.trim();
        if host.is_empty() || host.contains("://") || host.contains('/') {
            return Err(err(
                NAME,
                &config.host,
                "configure",
                ErrorKind::Config("an IPMI host is an address or name, no scheme or path".into()),
            ));
        }
        let port = match config.port {
            Some(p) if p > 0 => u16::try_from(p).map_err(|_| {
                err(
                    NAME,
                    &config.host,
                    "configure",
                    ErrorKind::Config(format!("bad port {p}")),
                )
            })?,
            _ => 623,
        };
        Ok(Self {
            label: format!("{host}:{port}"),
            port,
            config,
            policy,
            limits,
        })
    }

    fn fail(&self, op: &str, kind: ErrorKind) -> Error {
        err(NAME, &self.label, op, kind)
    }

    /// One ipmitool run per cipher suite until one gets a session; the output on success.
    async fn run_once(&self, op: &str, args: &[&str]) -> Result<String, ErrorKind> {
        let _permit = self.limits.acquire(&self.label).await;
        let ip = self.checked_ip().await?;
        let ciphers: Vec<&str> = if self.config.cipher_suite.is_empty() {
            vec!["3", "17"]
        } else {
            vec![self.config.cipher_suite.as_str()]
        };
        // ipmitool's own wait per packet: most of our deadline, so it gives up first and says why
        let per_try = (self.policy.timeout.as_secs() / 2).max(1).to_string();
        let port = self.port.to_string();
        let bin = self
            .config
            .ipmitool
            .clone()
            .unwrap_or_else(|| "ipmitool".into());
        let mut last = ErrorKind::Local("no cipher suite tried".into());
        for cipher in ciphers {
            let mut cmd = Command::new(&bin);
            cmd.args(["-v", "-I", "lanplus", "-H", &ip, "-p", &port])
                .args(["-U", &self.config.credentials.username, "-E"])
                .args(["-N", &per_try, "-R", "1", "-C", cipher])
                .args(args)
                .env_clear()
                .env(
                    "IPMITOOL_PASSWORD",
                    self.config.credentials.password.expose(),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let child = cmd
                .spawn()
                .map_err(|e| ErrorKind::Local(format!("cannot run {}: {e}", bin.display())))?;
            let out =
                match tokio::time::timeout(self.policy.timeout, child.wait_with_output()).await {
                    Ok(Ok(o)) => o,
                    Ok(Err(e)) => return Err(ErrorKind::Local(format!("ipmitool: {e}"))),
                    // the child is killed on drop
                    Err(_) => return Err(ErrorKind::Timeout(self.policy.timeout)),
                };
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if out.status.success() {
                return Ok(text);
            }
            let this = classify(&text);
            tracing::debug!(host = %self.label, op, cipher, error = %this, "ipmitool failed");
            // A cipher suite the BMC does not offer says less than the failure of one it does
            // (a refused password with suite 3 stays the error when 17 is unsupported).
            if !matches!(this, ErrorKind::Unsupported(_)) || matches!(last, ErrorKind::Local(_)) {
                last = this;
            }
            if matches!(last, ErrorKind::Connect(_)) {
                break; // nobody answers: another cipher suite will not help
            }
        }
        Err(last)
    }

    /// The first of the host's addresses inside the allowed networks, as an IP literal.
    async fn checked_ip(&self) -> Result<String, ErrorKind> {
        let host = self.config.host.trim();
        // `[fd00::5]` as in a URL: the address inside
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let lookup = resolve_allowed(host, self.port, &self.policy.allowed_networks);
        let addrs = tokio::time::timeout(self.policy.timeout, lookup)
            .await
            .map_err(|_| ErrorKind::Timeout(self.policy.timeout))??;
        match addrs.first() {
            Some(a) => Ok(a.ip().to_string()),
            None => Err(ErrorKind::Connect(format!("{host} has no address"))),
        }
    }

    async fn run(&self, op: &str, args: &[&str], idempotent: bool) -> Result<String, Error> {
        self.policy
            .run(idempotent, || async {
                self.run_once(op, args).await.map_err(|k| self.fail(op, k))
            })
            .await
    }
}

/// What a failed ipmitool run's (verbose) output says went wrong.
fn classify(text: &str) -> ErrorKind {
    let lower = text.to_ascii_lowercase();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.to_ascii_lowercase().contains(needle))
            .map(|l| l.trim().to_string())
    };
    if let Some(l) = line("rakp 2 hmac is invalid")
        .or_else(|| line("unauthorized name"))
        .or_else(|| line("invalid session"))
        .or_else(|| line("insufficient privilege"))
    {
        return ErrorKind::Unauthorized(l);
    }
    if lower.contains("get auth capabilities error")
        || lower.contains("no response from remote controller")
    {
        return ErrorKind::Connect("no answer from the BMC (unreachable, or not IPMI)".into());
    }
    if let Some(l) = line("invalid authentication algorithm").or_else(|| line("cipher suite")) {
        return ErrorKind::Unsupported(l);
    }
    let useful: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("Loading IANA"))
        .collect();
    ErrorKind::Protocol(shorten(&useful.join("; "), 300))
}

#[async_trait::async_trait]
impl Bmc for Ipmitool {
    fn provider(&self) -> &'static str {
        NAME
    }

    async fn power_state(&self) -> Result<PowerState, Error> {
        let op = "power state";
        let out = self.run(op, &["chassis", "power", "status"], true).await?;
        if out.contains("Chassis Power is on") {
            Ok(PowerState::On)
        } else if out.contains("Chassis Power is off") {
            Ok(PowerState::Off)
        } else {
            Err(self.fail(op, ErrorKind::Protocol(shorten(&out, 200))))
        }
    }

    async fn set_power(&self, change: PowerChange) -> Result<(), Error> {
        let op = format!("power {}", change.as_str());
        let state = self.power_state().await.map_err(|mut e| {
            e.op = op.clone();
            e
        })?;
        let send = match (change, state) {
            (PowerChange::On, PowerState::On)
            | (PowerChange::Off | PowerChange::Soft, PowerState::Off) => {
                return Ok(());
            }
            // an off machine is powered on, not cycled or reset
            (PowerChange::Cycle | PowerChange::Reset, PowerState::Off) => PowerChange::On,
            (c, _) => c,
        };
        // `chassis power <on|off|soft|cycle|reset>` and the words ipmitool answers with
        let reply = match send {
            PowerChange::On => "Up/On",
            PowerChange::Off => "Down/Off",
            PowerChange::Soft => "Soft",
            PowerChange::Cycle => "Cycle",
            PowerChange::Reset => "Reset",
        };
        let out = self
            .run(
                &op,
                &["chassis", "power", send.as_str()],
                change.is_idempotent(),
            )
            .await?;
        if !out.contains(&format!("Chassis Power Control: {reply}")) {
            return Err(self.fail(&op, ErrorKind::Protocol(shorten(&out, 200))));
        }
        Ok(())
    }

    async fn set_boot_once(&self, device: BootDevice, efi_boot: bool) -> Result<(), Error> {
        let op = format!("boot once {device}");
        let (name, shown) = bootdev(device);
        let mut args = vec!["chassis", "bootdev", name];
        if efi_boot {
            args.push("options=efiboot");
        }
        let out = self.run(&op, &args, true).await?;
        if !out.contains(&format!("Set Boot Device to {name}")) {
            return Err(self.fail(&op, ErrorKind::Protocol(shorten(&out, 200))));
        }
        // Read it back, as for Redfish: a BMC may accept the flags and keep its own.
        let back = self
            .run(&op, &["chassis", "bootparam", "get", "5"], true)
            .await?;
        let selector = back
            .lines()
            .find(|l| l.contains("Boot Device Selector"))
            .map(|l| l.split_once(':').map_or(l, |(_, v)| v).trim().to_string())
            .unwrap_or_else(|| "no boot device selector".into());
        if !selector.to_ascii_lowercase().contains(shown) {
            return Err(self.fail(
                &op,
                ErrorKind::BootOverrideDropped {
                    wanted: name.into(),
                    reported: selector,
                },
            ));
        }
        Ok(())
    }

    async fn insert_media(&self, _url: &str) -> Result<(), Error> {
        Err(self.fail(
            "insert media",
            ErrorKind::Unsupported("IPMI has no virtual media".into()),
        ))
    }

    async fn eject_media(&self) -> Result<(), Error> {
        Err(self.fail(
            "eject media",
            ErrorKind::Unsupported("IPMI has no virtual media".into()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_silence_are_told_apart() {
        assert!(matches!(
            classify("Loading IANA PEN Registry...\n> RAKP 2 HMAC is invalid\nError: Unable to establish IPMI v2 / RMCP+ session"),
            ErrorKind::Unauthorized(m) if m.contains("HMAC")
        ));
        assert!(matches!(
            classify(
                "Get Auth Capabilities error\nError issuing Get Channel Authentication Capabilities request\nError: Unable to establish IPMI v2 / RMCP+ session"
            ),
            ErrorKind::Connect(_)
        ));
        assert!(matches!(
            classify("Set Chassis Power Control to Up/On failed: Invalid data field in request"),
            ErrorKind::Protocol(m) if m.contains("Invalid data field")
        ));
    }

    fn config(host: &str, ipmitool: Option<std::path::PathBuf>) -> IpmiConfig {
        IpmiConfig {
            host: host.into(),
            port: None,
            credentials: Credentials::new("admin", "s3cret-pw"),
            cipher_suite: String::new(),
            ipmitool,
        }
    }

    fn allowing(nets: &str) -> Policy {
        Policy {
            attempts: 1,
            allowed_networks: crate::net::parse_networks(nets).expect("networks"),
            ..Policy::default()
        }
    }

    /// A stand-in ipmitool that prints its arguments and fails, so the command line shows in
    /// the error.
    fn echo_ipmitool() -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "tink-bmc-ipmi-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("ipmitool");
        std::fs::write(&path, "#!/bin/sh\necho \"ARGS: $*\"\nexit 1\n").expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[tokio::test]
    async fn a_host_outside_the_allowed_networks_is_refused_before_ipmitool_runs() {
        // A binary that does not exist: had it been started, the error would say so.
        let missing = Some(std::path::PathBuf::from("/nonexistent/ipmitool"));
        for host in ["127.0.0.1", "localhost"] {
            let bmc = Ipmitool::new(
                config(host, missing.clone()),
                allowing("10.0.0.0/8"),
                Limits::default(),
            )
            .expect("config");
            let e = bmc.power_state().await.expect_err("refused");
            let ErrorKind::NotAllowed(m) = &e.kind else {
                panic!("{e}")
            };
            assert!(
                m.contains(host) && m.contains("127.0.0.1") && m.contains("10.0.0.0/8"),
                "{m}"
            );
        }
        // Allowed: ipmitool runs, with the checked address (not the name) after -H.
        let script = echo_ipmitool();
        let bmc = Ipmitool::new(
            config("localhost", Some(script.clone())),
            allowing("127.0.0.0/8"),
            Limits::default(),
        )
        .expect("config");
        let e = bmc.power_state().await.expect_err("the script fails");
        let text = e.to_string();
        assert!(
            text.contains("ARGS: -v -I lanplus -H 127.0.0.1 -p 623 -U admin -E"),
            "{text}"
        );
        assert!(!text.contains("s3cret-pw"), "{text}");
        if let Some(dir) = script.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn the_password_is_not_in_the_debug_output() {
        let i = Ipmitool::new(
            IpmiConfig {
                host: "10.0.0.1".into(),
                port: None,
                credentials: Credentials::new("admin", "s3cret-pw"),
                cipher_suite: String::new(),
                ipmitool: None,
            },
            Policy::default(),
            Limits::default(),
        )
        .expect("config");
        assert!(!format!("{i:?}").contains("s3cret-pw"));
        assert!(
            Ipmitool::new(
                IpmiConfig {
                    host: "https://10.0.0.1".into(),
                    port: None,
                    credentials: Credentials::new("a", "b"),
                    cipher_suite: String::new(),
                    ipmitool: None,
                },
                Policy::default(),
                Limits::default(),
            )
            .is_err()
        );
    }
}
