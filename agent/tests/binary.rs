//! The `tink-agent` binary: flags, logging of action output, graceful stop on SIGTERM.
#![forbid(unsafe_code)]

mod common;

use std::process::Stdio;

use common::*;
use tink_bus::proto::Workflow;
use tink_testkit::docker::{TestImage, engine_or_skip};
use tink_testkit::nats::NatsServer;
use tokio::io::AsyncBufReadExt as _;

#[tokio::test]
async fn binary_runs_a_workflow_logs_output_and_stops_on_sigterm() -> TestResult {
    let Some(docker) = engine_or_skip().await? else {
        return Ok(());
    };
    TestImage::busybox(IMAGE).ensure(&docker).await?;
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let js = jetstream(&nats.url()).await?;
    let work = tempfile::tempdir()?;
    let agent_id = "02:00:00:00:03:01";

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-agent"))
        .args(["--agent-id", agent_id, "--server"])
        .arg(format!("127.0.0.1:1,{}", server.addr))
        .arg("--work-dir")
        .arg(work.path())
        .args(["--privileged", "false", "--admin-addr", "127.0.0.1:0"])
        .args(["--backoff-max-seconds", "1"])
        // The test replica serves plaintext HTTP/2.
        .arg("--insecure")
        .env("RUST_LOG", "info")
        .env("TINK_LOG_FORMAT", "text")
        .env("NO_COLOR", "1")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("TINK_AGENT_SERVERS")
        .env_remove("TINK_AGENT_TLS_CA")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (lines_tx, mut lines) = tokio::sync::mpsc::channel::<String>(1024);
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            // Keep draining so the pipe never fills, even when the test stopped reading.
            let _ = lines_tx.try_send(line);
        }
    });

    // The first address refuses connections; the agent moves on to the real server.
    wait_presence(&js, agent_id, "server-a").await?;
    let wf = Workflow {
        workflow_id: "default/bin".into(),
        actions: vec![script("a1", "echo hello-from-action")],
        ..Default::default()
    };
    dispatch(&js, agent_id, &start_command(wf)).await?;
    let events = events_until(&js, "default/bin", terminal("a1")).await?;
    assert_eq!(summary(&events), ["Started:a1", "Succeeded:a1"]);
    within("the action's output in the agent's log", async {
        while let Some(line) = lines.recv().await {
            if line.contains("[default/bin/step-a1] hello-from-action") {
                return true;
            }
        }
        false
    })
    .await?
    .then_some(())
    .ok_or("the agent's log ended without the action's output")?;

    let pid = child.id().ok_or("the agent already exited")?;
    let status = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await?;
    assert!(status.success());
    let exit = within("the agent to exit", child.wait()).await??;
    assert!(exit.success(), "{exit}");
    server.stop().await?;
    Ok(())
}

/// Runs the agent binary with `args` (no server, no Docker engine needed: it must stop before
/// using either) and returns its exit status and standard error.
async fn refused(
    args: &[&str],
    cmdline: &str,
) -> Result<(std::process::ExitStatus, String), BoxError> {
    let work = tempfile::tempdir()?;
    let path = work.path().join("cmdline");
    std::fs::write(&path, cmdline)?;
    let out = within(
        "the agent to refuse to start",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-agent"))
            .arg("--kernel-cmdline")
            .arg(&path)
            .args([
                "--agent-id",
                "02:00:00:00:03:02",
                "--admin-addr",
                "127.0.0.1:0",
            ])
            .args(args)
            .arg("--work-dir")
            .arg(work.path())
            // An unreachable engine: a started agent would wait for it, not exit.
            .env("DOCKER_HOST", "tcp://127.0.0.1:1")
            .env("NO_COLOR", "1")
            .env_remove("TINK_AGENT_SERVERS")
            .env_remove("TINK_AGENT_TLS_CA")
            .env_remove("TINK_AGENT_INSECURE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    Ok((
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn plaintext_needs_insecure_or_tinkerbell_tls_false() -> TestResult {
    // Servers from the flags, nothing about TLS: refused, naming the ways out.
    let (status, err) = refused(&["--server", "127.0.0.1:42113"], "").await?;
    assert!(!status.success());
    for needle in [
        "TLS is required",
        "--tls-ca (TINK_AGENT_TLS_CA)",
        "tinkerbell_tls=true",
        "--insecure (TINK_AGENT_INSECURE)",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    // The command line's servers without tinkerbell_tls: refused too.
    let (status, err) = refused(&[], "grpc_authority=127.0.0.1:42113\n").await?;
    assert!(!status.success());
    assert!(err.contains("TLS is required"), "{err}");
    // tinkerbell_tls=false goes with the command line's servers, not with --server.
    let (status, err) = refused(
        &["--server", "127.0.0.1:42113"],
        "grpc_authority=127.0.0.1:42113 tinkerbell_tls=false\n",
    )
    .await?;
    assert!(!status.success());
    assert!(
        err.contains("applies only to its grpc_authority= servers, not to --server"),
        "{err}"
    );
    // --insecure and --tls-ca contradict each other.
    let (status, err) = refused(
        &[
            "--server",
            "127.0.0.1:42113",
            "--insecure",
            "--tls-ca",
            "/nonexistent",
        ],
        "",
    )
    .await?;
    assert!(!status.success());
    assert!(err.contains("cannot be used with"), "{err}");
    // With TLS on, an http:// address would be plaintext: refused.
    let pki = tempfile::tempdir()?;
    let ca = pki.path().join("ca.pem");
    std::fs::write(&ca, "not used: the address is refused first")?;
    let ca = ca.to_str().ok_or("temp path")?;
    let (status, err) =
        refused(&["--server", "http://127.0.0.1:42113", "--tls-ca", ca], "").await?;
    assert!(!status.success());
    assert!(
        err.contains(
            "server http://127.0.0.1:42113: an http:// address is plaintext but TLS is on"
        ),
        "{err}"
    );
    Ok(())
}
