//! Presence entries are written once per stream and kept alive by their replica's heartbeat:
//! a leader must not take an old entry of a live agent for a dead one.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

const MAC: &str = "02:00:00:00:0e:01";

/// An agent connected long before the leader started (its entry older than the three TTLs
/// after which the leader deletes entries of dead replicas): the leader hears its replica's
/// heartbeat before judging it, keeps its entry and dispatches to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_old_entries_of_live_agents() {
    let stack = Stack::start().await;
    // A first leader admits the machine's agent (from its Hardware), then goes away.
    let first = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    first.stop().await;
    let ttl = stack.bus.presence_ttl;
    let js = stack.jetstream_as("tink-controller").await;
    let bucket = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("presence bucket");
    let key = tink_bus::agent_token(MAC).expect("token");
    let written = bucket
        .entry(&key)
        .await
        .expect("read")
        .expect("the agent's entry")
        .revision;
    // Older than the deletion bound by the time the leader starts.
    tokio::time::sleep(ttl * (tink_bus::STALE_PRESENCE_PURGE_AFTER_TTLS + 1)).await;

    let c = stack.leader("c1").await;
    // Two sweeps of the leader (the first comes one TTL after its watches start).
    tokio::time::sleep(ttl * 3).await;
    let entry = bucket
        .entry(&key)
        .await
        .expect("read")
        .expect("still there");
    assert_eq!(
        entry.revision, written,
        "the live agent's entry was rewritten or deleted"
    );
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, _) = agent.next_start().await;
    assert!(id.contains("wf1"), "{id}");
    agent.received(&id).await;
    c.stop().await;
    stack.stop().await;
}

/// An entry left by a replica that never beats (it died before this leader's term): offline one
/// TTL after the leader received it (its own timestamp, an hour old, is another host's clock and
/// is not compared with ours), and deleted by the leader once its view has been sound for the
/// deletion bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_deletes_entries_of_a_replica_that_stopped_beating() {
    let stack = Stack::start().await;
    let js = stack.jetstream_as("tink-server").await;
    let bucket = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("presence bucket");
    let key = tink_bus::agent_token(MAC).expect("token");
    let long_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
    let left = tink_bus::Presence {
        agent_id: MAC.into(),
        server: "server-gone".into(),
        session: "s-gone".into(),
        connected_since: long_ago,
        heartbeat: long_ago,
        replica_instance: "p-gone".into(),
        instance: "i-1".into(),
        token_sha256: String::new(),
        certificate: false,
    };
    bucket
        .put(&key, left.to_bytes())
        .await
        .expect("an entry of a dead replica");
    let c = stack.leader("c0").await;
    within("the leader to delete the dead replica's entry", async {
        while bucket.get(&key).await.expect("read").is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    c.stop().await;
    stack.stop().await;
}
