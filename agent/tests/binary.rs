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
        .env("RUST_LOG", "info")
        .env("TINK_LOG_FORMAT", "text")
        .env("NO_COLOR", "1")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("TINK_AGENT_SERVERS")
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
