//! SIGTERM ends tink-server within its grace period even when NATS is already gone and an agent
//! stream is open.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use tink_testkit::nats::NatsServer;

const GRACE: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_secs(8);

#[tokio::test]
async fn sigterm_ends_the_server_in_time_with_nats_gone() {
    let mut nats = NatsServer::start().await.expect("nats");
    // The controller's part: the streams exist before the server can be ready.
    create_streams(&nats.url(), &tink_bus::BusConfig::default()).await;
    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-server"))
        .args([
            "--listen",
            &listen.to_string(),
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .args(["--nats-url", &nats.url(), "--replica-id", "server-a"])
        .args(["--shutdown-grace-seconds", &GRACE.as_secs().to_string()])
        .arg("--insecure")
        // No controller here to publish the admitted agent ids.
        .arg("--admit-unknown-agents")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("tink-server starts");
    let mut agent = within("the server to accept an agent", async {
        loop {
            if let Ok(channel) = tonic::transport::Channel::from_shared(format!("http://{listen}"))
                .expect("uri")
                .connect()
                .await
            {
                let mut client =
                    tink_bus::proto::workflow_service_client::WorkflowServiceClient::new(channel);
                if let Ok(stream) = client
                    .get_workflows(tink_bus::proto::GetWorkflowsRequest {
                        agent_id: "aa:bb:cc:dd:ee:01".into(),
                        ..Default::default()
                    })
                    .await
                {
                    return stream.into_inner();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    nats.stop().await.expect("nats stops");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = child.id().expect("pid").to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs")
            .success()
    );
    let exited = tokio::time::timeout(GRACE + SLACK, child.wait()).await;
    exited
        .expect("tink-server still running long after its grace period")
        .expect("wait");
    // The agent's stream ended (with UNAVAILABLE or a broken connection).
    let _ = tokio::time::timeout(Duration::from_secs(5), agent.message()).await;
}
