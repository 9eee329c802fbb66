//! NATS helpers: start a real `nats-server -js` on a free loopback port, stopped on drop.
//!
//! Each [`NatsServer`] is its own process with its own temporary JetStream store, listening on
//! `127.0.0.1` only. The port is chosen by nats-server itself (`-p -1`, read back from its ports
//! file), so parallel tests never race for a port. [`NatsServer::restart`] brings the server
//! back on the same port with the same store, which is how tests show that a NATS restart loses
//! no stored message.
//!
//! [`NatsServer::start_deploy`] runs the server with deploy/nats/nats.yaml's own `accounts`
//! block (every service's user and permissions) and test passwords, which
//! [`deploy_credentials`] hands out per user, so a stack started with it runs under the
//! permissions production has.
//!
//! ```no_run
//! # async fn example() -> Result<(), tink_testkit::nats::NatsError> {
//! let mut nats = tink_testkit::nats::NatsServer::start().await?;
//! let url = nats.url(); // nats://127.0.0.1:PORT
//! nats.restart().await?;
//! # let _ = url; Ok(()) }
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// The binary started; Debian package `nats-server`.
pub const NATS_SERVER_BIN: &str = "nats-server";

/// deploy/ (the Kubernetes manifests), whose nats.yaml holds the NATS users and permissions.
const DEPLOY_NATS_YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/nats/nats.yaml");

/// The NATS users deploy/nats/nats.yaml defines: one per service, and the administrator's.
pub const DEPLOY_USERS: [&str; 4] = [
    "tink-controller",
    "tink-server",
    "tink-console",
    "tink-admin",
];

/// The user and test password of `user` (one of [`DEPLOY_USERS`]) for a server started with
/// [`NatsServer::start_deploy`]: deploy/ reads user `tink-<name>`'s password from
/// `$TINK_NATS_<NAME>_PASSWORD`; the test password is `test-<name>-password`.
pub fn deploy_credentials(user: &str) -> (String, String) {
    let name = user.strip_prefix("tink-").unwrap_or(user);
    (user.to_string(), format!("test-{name}-password"))
}

/// The `accounts { ... }` block of deploy/nats/nats.yaml with every `$TINK_NATS_<NAME>_PASSWORD`
/// replaced by its test password (see [`deploy_credentials`]).
pub fn deploy_accounts() -> Result<String, NatsError> {
    let text = std::fs::read_to_string(DEPLOY_NATS_YAML)
        .map_err(|e| NatsError::Deploy(format!("cannot read {DEPLOY_NATS_YAML}: {e}")))?;
    let block = named_block(&text, "accounts {").ok_or_else(|| {
        NatsError::Deploy(format!(
            "{DEPLOY_NATS_YAML} has no complete `accounts {{ ... }}` block"
        ))
    })?;
    let mut out = String::with_capacity(block.len());
    let mut rest = block;
    while let Some(at) = rest.find("$TINK_NATS_") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "$TINK_NATS_".len()..];
        let end = after
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(after.len());
        let Some(name) = after[..end].strip_suffix("_PASSWORD") else {
            return Err(NatsError::Deploy(format!(
                "unknown variable $TINK_NATS_{}",
                &after[..end]
            )));
        };
        out.push_str(
            &deploy_credentials(&format!(
                "tink-{}",
                name.to_ascii_lowercase().replace('_', "-")
            ))
            .1,
        );
        rest = &after[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The text from `opening` (e.g. `accounts {`, `cluster {`) to its matching `}`.
pub(crate) fn named_block<'a>(text: &'a str, opening: &str) -> Option<&'a str> {
    let start = text.find(opening)?;
    let mut depth = 0;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + i + 1]);
                }
            }
            _ => {}
        }
    }
    None
}

/// How long a starting server may take to write its ports file and accept connections.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// Errors of the NATS helper.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The `nats-server` binary is not installed.
    #[error(
        "`{NATS_SERVER_BIN}` was not found on PATH; install it with `apt-get install nats-server`"
    )]
    BinaryMissing,
    /// The process could not be started.
    #[error("cannot start {NATS_SERVER_BIN}: {0}")]
    Spawn(#[source] io::Error),
    /// The temporary store directory could not be created.
    #[error("cannot create a temporary directory for nats-server: {0}")]
    TempDir(#[source] io::Error),
    /// The server exited before it was ready.
    #[error("{NATS_SERVER_BIN} exited during start-up ({status}); its log: {log}")]
    Exited {
        /// The exit status.
        status: std::process::ExitStatus,
        /// The server's log file.
        log: PathBuf,
    },
    /// The server did not become ready in time.
    #[error("{NATS_SERVER_BIN} was not ready within {START_DEADLINE:?}; its log: {log}")]
    NotReady {
        /// The server's log file.
        log: PathBuf,
    },
    /// deploy/nats/nats.yaml cannot be read or has no accounts block.
    #[error("deploy/nats/nats.yaml: {0}")]
    Deploy(String),
    /// Waiting for or killing the process failed.
    #[error("cannot stop {NATS_SERVER_BIN}: {0}")]
    Stop(#[source] io::Error),
}

/// A running `nats-server -js` process with a temporary store; killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    binary: PathBuf,
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// A configuration file given with `-c` (users, permissions, accounts).
    config: Option<PathBuf>,
}

impl NatsServer {
    /// Starts a server on a free loopback port with JetStream and a fresh temporary store, and
    /// waits until it accepts connections.
    pub async fn start() -> Result<Self, NatsError> {
        Self::start_binary(NATS_SERVER_BIN).await
    }

    /// Like [`start`](Self::start) with another `nats-server` binary (a path or a name on PATH).
    pub async fn start_binary(binary: impl Into<PathBuf>) -> Result<Self, NatsError> {
        let dir = tempfile::Builder::new()
            .prefix("tink-nats-")
            .tempdir()
            .map_err(NatsError::TempDir)?;
        let mut server = NatsServer {
            binary: binary.into(),
            child: None,
            port: 0,
            dir,
            config: None,
        };
        server.launch(None).await?;
        Ok(server)
    }

    /// Like [`start`](Self::start) with a nats-server configuration file holding `config`
    /// (users and their permissions, accounts, TLS); the flags for JetStream, the store, the
    /// address and the port still apply.
    pub async fn start_with_config(config: &str) -> Result<Self, NatsError> {
        let dir = tempfile::Builder::new()
            .prefix("tink-nats-")
            .tempdir()
            .map_err(NatsError::TempDir)?;
        let path = dir.path().join("nats.conf");
        std::fs::write(&path, config).map_err(NatsError::TempDir)?;
        let mut server = NatsServer {
            binary: NATS_SERVER_BIN.into(),
            child: None,
            port: 0,
            dir,
            config: Some(path),
        };
        server.launch(None).await?;
        Ok(server)
    }

    /// Like [`start`](Self::start) with deploy/nats/nats.yaml's `accounts` block: every
    /// service's user with its permissions, test passwords from [`deploy_credentials`]. No
    /// anonymous connection is accepted.
    pub async fn start_deploy() -> Result<Self, NatsError> {
        Self::start_with_config(&deploy_accounts()?).await
    }

    /// The client URL, `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The JetStream store directory (kept across [`restart`](Self::restart)).
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    /// Whether the process is running (not stopped by [`stop`](Self::stop)).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the process (SIGKILL, like a crash) and waits for it to exit. The store is kept, so
    /// [`restart`](Self::restart) can bring the same data back. Stopping twice is a no-op.
    pub async fn stop(&mut self) -> Result<(), NatsError> {
        if let Some(mut child) = self.child.take() {
            child.kill().await.map_err(NatsError::Stop)?;
        }
        Ok(())
    }

    /// Stops the server (if running) and starts it again on the same port with the same store.
    pub async fn restart(&mut self) -> Result<(), NatsError> {
        self.stop().await?;
        let port = self.port;
        self.launch(Some(port)).await
    }

    async fn launch(&mut self, port: Option<u16>) -> Result<(), NatsError> {
        let dir = self.dir.path().to_path_buf();
        let port_arg = port.map_or_else(|| "-1".to_string(), |p| p.to_string());
        let mut command = Command::new(&self.binary);
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let mut child = command
            .arg("-js")
            .arg("-sd")
            .arg(self.store_dir())
            .args(["-a", "127.0.0.1", "-p", &port_arg])
            .arg("--ports_file_dir")
            .arg(&dir)
            .arg("-l")
            .arg(self.log_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => NatsError::BinaryMissing,
                _ => NatsError::Spawn(e),
            })?;
        let pid = child.id().unwrap_or_default();
        let ports_file = dir.join(format!("{NATS_SERVER_BIN}_{pid}.ports"));
        let deadline = tokio::time::Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = child.try_wait().map_err(NatsError::Stop)? {
                return Err(NatsError::Exited {
                    status,
                    log: self.log_path(),
                });
            }
            if let Some(found) = read_client_port(&ports_file).await
                && tokio::net::TcpStream::connect(("127.0.0.1", found))
                    .await
                    .is_ok()
            {
                self.port = found;
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                // Best effort: the process is killed on drop anyway.
                let _ = child.kill().await;
                return Err(NatsError::NotReady {
                    log: self.log_path(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A restarted server writes a new ports file; remove this one so the next start reads
        // its own.
        let _ = tokio::fs::remove_file(&ports_file).await;
        self.child = Some(child);
        Ok(())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            // kill_on_drop also covers this; starting the kill here makes it immediate.
            let _ = child.start_kill();
        }
    }
}

/// Reads the client port from a nats-server ports file (`{"nats":["nats://127.0.0.1:PORT"]}`).
async fn read_client_port(path: &Path) -> Option<u16> {
    let text = tokio::fs::read_to_string(path).await.ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let url = value.get("nats")?.as_array()?.first()?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// Speaks the NATS text protocol just enough to see the server's INFO with JetStream on.
    async fn info_line(port: u16) -> String {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connects");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).await.expect("reads INFO");
        reader.get_mut().shutdown().await.ok();
        line
    }

    #[tokio::test]
    async fn starts_restarts_on_the_same_port_and_stops() {
        let mut nats = NatsServer::start().await.expect("nats-server starts");
        let port = nats.port();
        assert_eq!(nats.url(), format!("nats://127.0.0.1:{port}"));
        let info = info_line(port).await;
        assert!(info.starts_with("INFO "), "{info}");
        assert!(info.contains("\"jetstream\":true"), "{info}");

        nats.restart().await.expect("restarts");
        assert_eq!(nats.port(), port);
        assert!(info_line(port).await.starts_with("INFO "));
        assert!(nats.store_dir().join("jetstream").is_dir());

        nats.stop().await.expect("stops");
        assert!(!nats.is_running());
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_missing_binary_names_the_package_to_install() {
        let err = NatsServer::start_binary("/nonexistent/nats-server")
            .await
            .expect_err("no such binary");
        assert!(matches!(err, NatsError::BinaryMissing), "{err:?}");
        assert!(
            err.to_string().contains("apt-get install nats-server"),
            "{err}"
        );
    }

    #[test]
    fn deploy_accounts_have_every_user_with_its_test_password() {
        let accounts = deploy_accounts().expect("deploy accounts");
        assert!(accounts.starts_with("accounts {"), "{accounts}");
        assert!(!accounts.contains("$TINK_NATS_"), "{accounts}");
        for user in DEPLOY_USERS {
            let (user, password) = deploy_credentials(user);
            assert!(
                accounts.contains(&format!("user: {user}, password: {password}")),
                "{user}: {accounts}"
            );
        }
    }

    #[tokio::test]
    async fn deploy_accounts_refuse_anonymous_clients() {
        let nats = NatsServer::start_deploy()
            .await
            .expect("nats-server starts with deploy's accounts");
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", nats.port()))
            .await
            .expect("connects");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).await.expect("reads INFO");
        assert!(line.contains("\"auth_required\":true"), "{line}");
    }

    #[tokio::test]
    async fn two_servers_get_different_ports() {
        let a = NatsServer::start().await.expect("first starts");
        let b = NatsServer::start().await.expect("second starts");
        assert_ne!(a.port(), b.port());
        assert_ne!(a.store_dir(), b.store_dir());
    }
}
