//! `tinkctl agent reset` ends an agent's session against a real NATS, and clears the record of
//! its exchanged boot secret.

use tink_testkit::nats::NatsServer;

#[tokio::test]
async fn agent_reset_deletes_the_session() {
    let nats = NatsServer::start().await.expect("nats");
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let bus = tink_bus::ensure_streams(&js, &tink_bus::BusConfig::default())
        .await
        .expect("streams");
    let agent = "aa:bb:cc:dd:ee:01";
    let key = tink_bus::agent_token(agent).expect("token");
    let now = jiff::Timestamp::now();
    let presence = tink_bus::Presence {
        agent_id: agent.into(),
        server: "server-0".into(),
        session: "s1".into(),
        connected_since: now,
        heartbeat: now,
        replica_instance: "p1".into(),
        instance: "i-1".into(),
        token_sha256: "00".repeat(32),
        certificate: false,
    };
    bus.presence
        .put(&key, presence.to_bytes())
        .await
        .expect("presence");
    // The agent exchanged its boot secret for that session (what a server records).
    bus.agent_secrets_used
        .put(&key, "11".repeat(32).into())
        .await
        .expect("exchange");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .args(["agent", "reset", agent, "--nats-url", &nats.url()])
        .output()
        .await
        .expect("tinkctl runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("session reset"), "{text}");
    let entry = bus.presence.get(&key).await.expect("read");
    assert!(entry.is_none(), "the session is still there");
    assert!(text.contains("exchanged once more"), "{text}");
    let exchanged = bus.agent_secrets_used.get(&key).await.expect("read");
    assert!(exchanged.is_none(), "the exchange is still recorded");
    // Again: nothing to reset, said so.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .args(["agent", "reset", agent, "--nats-url", &nats.url()])
        .output()
        .await
        .expect("tinkctl runs");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no live session"));
}
