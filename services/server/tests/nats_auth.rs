//! The server against a real nats-server that requires users, with subject permissions as
//! deploy/ gives each service: the right credentials work, wrong ones stop the service at start
//! with a clear message, and the server's user can neither publish dispatch commands nor write
//! the agent secrets bucket. The users and permissions are deploy/nats/nats.yaml's own.

mod common;

use std::time::Duration;

use common::*;
use tink_server::ServerConfig;
use tink_testkit::nats::NatsServer;

/// The `accounts` block of deploy/nats/nats.yaml, with test passwords for its variables.
fn deploy_accounts() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/nats/nats.yaml");
    let text = std::fs::read_to_string(path).expect("deploy/nats/nats.yaml");
    let start = text.find("    accounts {").expect("an accounts block");
    let mut depth = 0;
    let mut end = start;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = start + i + 1;
                    break;
                }
            }
            _ => {}
        }
    }
    text[start..end]
        .replace("$TINK_NATS_CONTROLLER_PASSWORD", "controller-secret")
        .replace("$TINK_NATS_SERVER_PASSWORD", "server-secret")
}

fn auth(user: &str, password: &str) -> tink_bus::NatsAuth {
    tink_bus::NatsAuth {
        user: Some(user.into()),
        password: Some(password.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn services_authenticate_and_keep_to_their_subjects() {
    let nats = NatsServer::start_with_config(&deploy_accounts())
        .await
        .expect("nats");
    // Wrong credentials: the server stops at start, saying why.
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.nats_auth = auth("tink-server", "wrong");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        tink_server::serve(
            config,
            listener,
            tink_runtime::Health::new(),
            tink_server::Metrics::default(),
            tokio_util::sync::CancellationToken::new(),
        ),
    )
    .await
    .expect("a refused login ends the server at start, not a retry loop");
    let message = result.expect_err("refused").to_string();
    assert!(
        message.contains("refused") && message.contains("credentials"),
        "{message}"
    );

    // The right ones: the server works (streams, bucket, presence).
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.bus = bus_config();
    config.nats_auth = auth("tink-server", "server-secret");
    config.allow_unauthenticated_agents = true;
    let replica = Replica::start_config(config).await;
    let mut client = replica.client().await;
    let _commands = connect_agent(&mut client, "aa:bb:cc:dd:ee:01").await;
    client
        .publish_event(action_started("ns/wf", "a1", "e1"))
        .await
        .expect("an event stored with the server's credentials");

    // The server's user cannot publish a dispatch command; the controller's can.
    let as_server = tink_bus::connect(&nats.url(), &auth("tink-server", "server-secret"), || {
        async_nats::ConnectOptions::new()
    })
    .await
    .expect("connects");
    let js = async_nats::jetstream::new(as_server);
    let denied = tokio::time::timeout(Duration::from_secs(5), async {
        tink_bus::publish_command(
            &js,
            "aa:bb:cc:dd:ee:01",
            &start_command("ns/forged"),
            "ns/forged.start",
            &opentelemetry::Context::new(),
        )
        .await
    })
    .await;
    assert!(
        !matches!(denied, Ok(Ok(_))),
        "the server's user stored a dispatch command"
    );
    // Nor write a machine's agent secret (which would let it admit an impostor).
    let denied = tokio::time::timeout(
        Duration::from_secs(5),
        js.publish("$KV.tink_agent_secrets.forged", "0".repeat(64).into()),
    )
    .await;
    let stored = match denied {
        Ok(Ok(ack)) => matches!(
            tokio::time::timeout(Duration::from_secs(5), ack).await,
            Ok(Ok(_))
        ),
        _ => false,
    };
    assert!(!stored, "the server's user wrote the agent secrets bucket");
    let as_controller = tink_bus::connect(
        &nats.url(),
        &auth("tink-controller", "controller-secret"),
        async_nats::ConnectOptions::new,
    )
    .await
    .expect("connects");
    tink_bus::publish_command(
        &async_nats::jetstream::new(as_controller),
        "aa:bb:cc:dd:ee:01",
        &start_command("ns/real"),
        "ns/real.start",
        &opentelemetry::Context::new(),
    )
    .await
    .expect("the controller publishes commands");
    replica.stop().await.expect("stops");
}
