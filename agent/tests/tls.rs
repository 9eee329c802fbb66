//! Agent to server over TLS: the real `tink-agent` binary with `--tls-ca` against a server
//! replica serving a certificate from a test CA made with the `openssl` command. A workflow's
//! events arrive through the TLS connection; an agent trusting another CA is refused.
#![forbid(unsafe_code)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;
use tink_bus::proto::Workflow;
use tink_testkit::docker::{TestImage, engine_or_skip};
use tink_testkit::nats::NatsServer;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::mpsc;

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<(), BoxError> {
    let status = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| {
            format!("the `openssl` command does not run (apt-get install openssl): {e}")
        })?;
    if !status.success() {
        return Err(format!("openssl {args:?} failed: {status}").into());
    }
    Ok(())
}

const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// Makes a self-signed CA `<name>.pem` / `<name>.key` in `dir`; returns the certificate's path.
fn make_ca(dir: &Path, name: &str) -> Result<PathBuf, BoxError> {
    let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
    let subject = format!("/CN={name}");
    let mut args = vec!["req", "-x509", "-days", "1", "-subj", &subject];
    args.extend(EC);
    args.extend(["-keyout", &key, "-out", &cert]);
    openssl(dir, &args)?;
    Ok(dir.join(cert))
}

/// Makes a server certificate for `localhost` and `127.0.0.1` signed by the CA `ca`; returns
/// `(certificate PEM, key PEM)`.
fn make_server_cert(dir: &Path, ca: &str) -> Result<(Vec<u8>, Vec<u8>), BoxError> {
    std::fs::write(
        dir.join("server.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    let mut csr = vec!["req", "-subj", "/CN=localhost"];
    csr.extend(EC);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr)?;
    let (ca_cert, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "1",
            "-CAcreateserial",
            "-in",
            "server.csr",
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-extfile",
            "server.cnf",
            "-out",
            "server.pem",
        ],
    )?;
    Ok((
        std::fs::read(dir.join("server.pem"))?,
        std::fs::read(dir.join("server.key"))?,
    ))
}

/// The agent binary trusting `ca` for `server`, with its log lines on a channel.
struct AgentProcess {
    child: tokio::process::Child,
    lines: mpsc::Receiver<String>,
    _work: tempfile::TempDir,
}

impl AgentProcess {
    fn spawn(agent_id: &str, server: std::net::SocketAddr, ca: &Path) -> Result<Self, BoxError> {
        let work = tempfile::tempdir()?;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-agent"))
            .args(["--agent-id", agent_id, "--server"])
            .arg(server.to_string())
            .arg("--tls-ca")
            .arg(ca)
            .arg("--work-dir")
            .arg(work.path())
            .args(["--privileged", "false", "--admin-addr", "127.0.0.1:0"])
            .args(["--backoff-max-seconds", "1"])
            .env("RUST_LOG", "info")
            .env("TINK_LOG_FORMAT", "text")
            .env("NO_COLOR", "1")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("TINK_AGENT_SERVERS")
            .env_remove("TINK_AGENT_TLS_CERT")
            .env_remove("TINK_AGENT_TLS_KEY")
            .env_remove("TINK_AGENT_TLS_DOMAIN")
            .env_remove("TINK_AGENT_INSECURE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let (lines_tx, lines) = mpsc::channel::<String>(1024);
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                // Keep draining so the pipe never fills, even when the test stopped reading.
                let _ = lines_tx.try_send(line);
            }
        });
        Ok(AgentProcess {
            child,
            lines,
            _work: work,
        })
    }

    /// Waits for a log line containing `needle`.
    async fn log_line(&mut self, needle: &str) -> Result<String, BoxError> {
        within(&format!("a log line with {needle:?}"), async {
            while let Some(line) = self.lines.recv().await {
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        })
        .await?
        .ok_or_else(|| format!("the agent's log ended without {needle:?}").into())
    }

    /// SIGTERM, then waits for a clean exit.
    async fn stop(mut self) -> TestResult {
        let pid = self.child.id().ok_or("the agent already exited")?;
        let status = tokio::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await?;
        assert!(status.success());
        let exit = within("the agent to exit", self.child.wait()).await??;
        assert!(exit.success(), "{exit}");
        Ok(())
    }
}

#[tokio::test]
async fn agent_reaches_a_tls_server_with_its_ca_and_refuses_another_ca() -> TestResult {
    let Some(docker) = engine_or_skip().await? else {
        return Ok(());
    };
    TestImage::busybox(IMAGE).ensure(&docker).await?;
    let pki = tempfile::tempdir()?;
    let ca = make_ca(pki.path(), "tink-test-ca")?;
    let other_ca = make_ca(pki.path(), "other-ca")?;
    let (cert_pem, key_pem) = make_server_cert(pki.path(), "tink-test-ca")?;

    let nats = NatsServer::start().await?;
    let server = Replica::start_with(
        &nats.url(),
        "server-tls",
        Some(tink_server::TlsConfig {
            cert_pem,
            key_pem,
            client_ca_pem: None,
        }),
    )
    .await?;
    let js = jetstream(&nats.url()).await?;

    // Trusting the right CA: connected, and a workflow's events arrive through TLS.
    let agent_id = "02:00:00:00:04:01";
    let agent = AgentProcess::spawn(agent_id, server.addr, &ca)?;
    wait_presence(&js, agent_id, "server-tls").await?;
    let wf = Workflow {
        workflow_id: "default/over-tls".into(),
        actions: vec![script("a1", "echo one"), script("a2", "echo two")],
        ..Default::default()
    };
    dispatch(&js, agent_id, &start_command(wf)).await?;
    let events = events_until(&js, "default/over-tls", terminal("a2")).await?;
    assert_eq!(
        summary(&events),
        ["Started:a1", "Succeeded:a1", "Started:a2", "Succeeded:a2"]
    );
    assert!(events.iter().all(|e| e.agent_id == agent_id));
    agent.stop().await?;

    // Trusting another CA: the handshake fails, the stream never opens, no presence.
    let stranger_id = "02:00:00:00:04:02";
    let mut stranger = AgentProcess::spawn(stranger_id, server.addr, &other_ca)?;
    let line = stranger.log_line("cannot open the command stream").await?;
    assert!(line.contains("Unavailable"), "{line}");
    let kv = js.get_key_value(tink_bus::PRESENCE_BUCKET).await?;
    let key = tink_bus::agent_token(stranger_id)?;
    assert!(
        kv.get(&key).await?.is_none(),
        "an agent that does not trust the server's CA got connected"
    );
    // It keeps trying (and failing) rather than falling back to plain text or giving up.
    stranger.log_line("cannot open the command stream").await?;
    assert!(kv.get(&key).await?.is_none());
    stranger.stop().await?;

    server.stop().await?;
    Ok(())
}
