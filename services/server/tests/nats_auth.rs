//! Every service's NATS user against a real nats-server running deploy/nats/nats.yaml's own
//! `accounts` block (tink_testkit::nats::NatsServer::start_deploy): the right credentials work
//! and wrong ones stop the server at start with a clear message; a server started before the
//! controller created the streams waits, not ready; the server's user does everything the
//! server needs and none of what would let it command machines or destroy state (each forbidden
//! call is tried and shown to have had no effect); the controller, console and admin users
//! keep to their own lists too.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::*;
use futures::StreamExt as _;
use tink_bus::proto::{LogBatch, LogLine};
use tink_server::ServerConfig;
use tink_testkit::nats::{NatsServer, deploy_credentials};

const AGENT: &str = "aa:bb:cc:dd:ee:01";

/// How long a forbidden call may take to fail: nats-server drops a publish the user may not
/// make (it only reports the violation asynchronously), so the request times out.
const FORBIDDEN_TIMEOUT: Duration = Duration::from_secs(2);

fn auth(user: &str) -> tink_bus::NatsAuth {
    let (user, password) = deploy_credentials(user);
    tink_bus::NatsAuth {
        user: Some(user),
        password: Some(password),
        ..Default::default()
    }
}

async fn connect_as(nats: &NatsServer, user: &str) -> async_nats::Client {
    tink_bus::connect(&nats.url(), &auth(user), async_nats::ConnectOptions::new)
        .await
        .unwrap_or_else(|e| panic!("{user} connects: {e}"))
}

/// A JetStream context of `user` whose requests give up after [`FORBIDDEN_TIMEOUT`].
async fn impatient(nats: &NatsServer, user: &str) -> jetstream::Context {
    let mut js = jetstream::new(connect_as(nats, user).await);
    js.set_timeout(FORBIDDEN_TIMEOUT);
    js
}

/// `call` must not succeed (a permissions violation shows as an error or a timeout).
async fn refused<T, E: std::fmt::Debug>(what: &str, call: impl Future<Output = Result<T, E>>) {
    let outcome = tokio::time::timeout(FORBIDDEN_TIMEOUT * 3, call).await;
    assert!(
        !matches!(outcome, Ok(Ok(_))),
        "{what}: the call succeeded but the user may not make it"
    );
}

/// A JetStream publish that must not be stored: refused at once, or its ack never comes.
async fn not_stored(what: &str, js: &jetstream::Context, subject: String, payload: &'static str) {
    let stored = match tokio::time::timeout(
        FORBIDDEN_TIMEOUT,
        js.publish(subject, payload.as_bytes().into()),
    )
    .await
    {
        Ok(Ok(ack)) => matches!(
            tokio::time::timeout(FORBIDDEN_TIMEOUT * 2, ack).await,
            Ok(Ok(_))
        ),
        _ => false,
    };
    assert!(!stored, "{what}: stored, but the user may not publish it");
}

async fn messages(js: &jetstream::Context, stream: &str) -> u64 {
    js.get_stream(stream)
        .await
        .expect("stream")
        .info()
        .await
        .expect("stream info")
        .state
        .messages
}

fn log_batch(workflow_id: &str) -> LogBatch {
    LogBatch {
        workflow_id: workflow_id.into(),
        action_id: "a1".into(),
        lines: vec![LogLine {
            sequence: 1,
            text: "hello from the action".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The lines of `workflow_id` read back through the logs stream (what LogService and
/// `tinkctl workflow logs --nats-url` do).
async fn read_back(js: &jetstream::Context, workflow_id: &str) -> Result<Vec<String>, String> {
    let selection =
        tink_bus::LogSelection::new(workflow_id, [("a1".to_string(), "one".to_string())], None)
            .expect("selection");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = lines.clone();
    tink_bus::read_logs(
        js,
        &selection,
        tink_bus::ReadOptions::default(),
        || async { true },
        move |line| {
            out.lock().unwrap().push(line.line.text);
            async { true }
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let lines = lines.lock().unwrap().clone();
    Ok(lines)
}

#[tokio::test]
async fn services_authenticate_and_the_server_waits_for_the_controllers_streams() {
    let nats = NatsServer::start_deploy().await.expect("nats");
    // Wrong credentials: the server stops at start, saying why.
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.nats_auth = tink_bus::NatsAuth {
        password: Some("wrong".into()),
        ..auth("tink-server")
    };
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

    // The right ones, before the controller created anything: the server may not create the
    // streams, so it waits, not ready.
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.bus = bus_config();
    config.nats_auth = auth("tink-server");
    config.allow_unauthenticated_agents = true;
    let starting = tokio::spawn(Replica::start_config(config));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !starting.is_finished(),
        "the server became ready without the streams"
    );
    let controller = jetstream::new(connect_as(&nats, "tink-controller").await);
    for stream in [tink_bus::DISPATCH_STREAM, tink_bus::PRESENCE_STREAM] {
        assert!(
            controller.get_stream(stream).await.is_err(),
            "the server created {stream}"
        );
    }
    // The controller creates them: the server turns ready and serves an agent.
    tink_bus::ensure_streams(&controller, &bus_config())
        .await
        .expect("the controller creates the streams and buckets");
    let replica = within("the server to become ready", starting)
        .await
        .expect("started");
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    dispatch(&controller, AGENT, "ns/real").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/real");
    let mut event = action_started("ns/real", "a1", "e1");
    if let Some(e) = event.event.as_mut() {
        e.agent_id = AGENT.into();
    }
    client
        .publish_event(event)
        .await
        .expect("an event stored with the server's credentials");
    replica.stop().await.expect("stops");
}

#[test]
fn a_missing_stream_is_named_with_who_creates_it() {
    let e = tink_bus::BusError::Missing {
        what: "KV bucket",
        name: tink_bus::DISPATCH_TARGETS_BUCKET,
    };
    let text = e.to_string();
    assert!(
        text.contains("KV bucket tink_dispatch_targets does not exist")
            && text.contains("tink-controller"),
        "{text}"
    );
}

#[tokio::test]
async fn the_server_user_keeps_to_its_subjects() {
    let nats = NatsServer::start_deploy().await.expect("nats");
    let controller = jetstream::new(connect_as(&nats, "tink-controller").await);
    let owner = tink_bus::ensure_streams(&controller, &bus_config())
        .await
        .expect("the controller creates the streams and buckets");
    owner
        .events
        .create_consumer(tink_bus::events_consumer_config(Duration::from_secs(30)))
        .await
        .expect("the controller's events consumer");
    let secret_key = tink_bus::agent_token(AGENT).unwrap();
    owner
        .agent_secrets
        .put(&secret_key, "1".repeat(64).into())
        .await
        .expect("the controller writes a secret");
    owner
        .agent_secrets_used
        .put(&secret_key, "2".repeat(64).into())
        .await
        .expect("an exchanged secret (for the stream to hold a message)");
    dispatch(&controller, AGENT, "ns/wf").await;

    // Verify, never create: everything the server needs is there.
    let server_client = connect_as(&nats, "tink-server").await;
    let server = jetstream::new(server_client.clone());
    let bus = tink_bus::verify_streams(&server, &bus_config())
        .await
        .expect("the server verifies the streams");
    let forbidden = impatient(&nats, "tink-server").await;

    // Forbidden: a stream that republishes into the agents' command subjects.
    let forged = stream::Config {
        name: "FORGED".into(),
        subjects: vec!["forged.start".into()],
        republish: Some(stream::Republish {
            source: "forged.start".into(),
            destination: tink_bus::dispatch_subject(AGENT).unwrap(),
            headers_only: false,
        }),
        ..Default::default()
    };
    refused(
        "STREAM.CREATE republishing into tink.dispatch",
        forbidden.create_stream(forged),
    )
    .await;
    assert!(
        controller.get_stream("FORGED").await.is_err(),
        "the forged stream exists"
    );
    // Forbidden: updating, deleting or purging the dispatch stream and the secrets buckets.
    for (name, config) in [
        (
            tink_bus::DISPATCH_STREAM,
            tink_bus::dispatch_stream_config(&bus_config()),
        ),
        (
            tink_bus::AGENT_SECRETS_STREAM,
            tink_bus::agent_secrets_stream_config(&bus_config()),
        ),
        (
            tink_bus::AGENT_SECRETS_USED_STREAM,
            tink_bus::agent_secrets_used_stream_config(&bus_config()),
        ),
    ] {
        let before = messages(&controller, name).await;
        let mut changed = config.clone();
        changed.subjects.push("forged.update".into());
        refused(
            &format!("STREAM.UPDATE {name}"),
            forbidden.update_stream(changed),
        )
        .await;
        refused(&format!("STREAM.PURGE {name}"), async {
            match forbidden.get_stream(name).await {
                Ok(stream) => stream.purge().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
        refused(
            &format!("STREAM.DELETE {name}"),
            forbidden.delete_stream(name),
        )
        .await;
        let info = controller
            .get_stream(name)
            .await
            .unwrap_or_else(|e| panic!("{name} is gone: {e}"))
            .info()
            .await
            .expect("info")
            .clone();
        assert_eq!(info.config.subjects, config.subjects, "{name} was updated");
        assert_eq!(info.state.messages, before, "{name} was purged");
        assert!(before > 0, "{name} holds a message to lose");
    }
    // Forbidden: commanding a machine directly, and writing a machine's secret.
    let before = messages(&controller, tink_bus::DISPATCH_STREAM).await;
    not_stored(
        "a publish to tink.dispatch",
        &forbidden,
        tink_bus::dispatch_subject(AGENT).unwrap(),
        "forged",
    )
    .await;
    refused(
        "publish_command",
        tink_bus::publish_command(
            &forbidden,
            AGENT,
            &start_command("ns/forged"),
            "ns/forged.start",
            &opentelemetry::Context::new(),
        ),
    )
    .await;
    assert_eq!(
        messages(&controller, tink_bus::DISPATCH_STREAM).await,
        before,
        "a forged command was stored"
    );
    let secrets = forbidden
        .get_key_value(tink_bus::AGENT_SECRETS_BUCKET)
        .await
        .expect("the server opens the secrets bucket to read it");
    refused(
        "a put into the agent secrets bucket",
        secrets.put(&secret_key, "0".repeat(64).into()),
    )
    .await;
    not_stored(
        "a raw publish into the agent secrets bucket",
        &forbidden,
        format!("$KV.{}.forged", tink_bus::AGENT_SECRETS_BUCKET),
        "0",
    )
    .await;
    let entry = owner
        .agent_secrets
        .entry(&secret_key)
        .await
        .expect("entry")
        .expect("the secret is still there");
    assert_eq!(&entry.value[..], "1".repeat(64).as_bytes());
    assert!(
        owner
            .agent_secrets
            .entry("forged")
            .await
            .expect("entry")
            .is_none(),
        "a forged secret was stored"
    );
    // Forbidden: deleting the controller's events consumer.
    refused(
        "CONSUMER.DELETE of the controller's events consumer",
        forbidden.delete_consumer_from_stream(
            tink_bus::CONTROLLER_EVENTS_CONSUMER,
            tink_bus::EVENTS_STREAM,
        ),
    )
    .await;
    owner
        .events
        .consumer_info(tink_bus::CONTROLLER_EVENTS_CONSUMER)
        .await
        .expect("the controller's consumer is still there");

    // Forbidden: a consumer on the dispatch stream (the server reads commands without one).
    refused(
        "CONSUMER.CREATE on the dispatch stream",
        forbidden.create_consumer_on_stream(
            async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("forged".to_string()),
                filter_subject: tink_bus::dispatch_subject(AGENT).unwrap(),
                ..Default::default()
            },
            tink_bus::DISPATCH_STREAM,
        ),
    )
    .await;

    // Allowed: everything the server does for an agent. It hears each command published (the
    // wake-up of the agent's stream), reads the agent's queue from the stream and deletes a
    // command once delivered.
    let mut announced = server_client
        .subscribe(tink_bus::DISPATCH_ALL)
        .await
        .expect("subscribes to the command announcements");
    // A request on the same connection: NATS has the subscription once it answers (a flush
    // only writes it out).
    messages(&server, tink_bus::DISPATCH_STREAM).await;
    dispatch(&controller, AGENT, "ns/wf2").await;
    let announcement = within("the announcement", announced.next())
        .await
        .expect("an announcement");
    assert_eq!(
        announcement.subject.as_str(),
        tink_bus::dispatch_subject(AGENT).unwrap()
    );
    let mut from = 1;
    for expected in ["ns/wf", "ns/wf2"] {
        let command = tink_bus::next_command(&bus.dispatch, AGENT, from)
            .await
            .expect("the server reads the agent's queue")
            .expect("a command");
        let command_id = tink_bus::command_workflow_id(
            &tink_bus::decode_command(&command.payload).expect("decodes"),
        )
        .map(str::to_string);
        assert_eq!(command_id.as_deref(), Some(expected));
        assert!(
            tink_bus::command_queued(&bus.dispatch, command.sequence)
                .await
                .expect("reads it again by sequence")
        );
        assert!(
            tink_bus::delete_command(&bus.dispatch, command.sequence)
                .await
                .expect("the server deletes a delivered command")
        );
        from = command.sequence + 1;
    }
    assert_eq!(messages(&controller, tink_bus::DISPATCH_STREAM).await, 0);
    // Events: published, watched for (the receipt subscription) and looked up.
    let mut receipts = server_client
        .subscribe(tink_bus::events_subject("ns/wf").unwrap())
        .await
        .expect("subscribes to the dispatch's events");
    let event = action_started("ns/wf", "a1", "e1").event.unwrap();
    tink_bus::publish_event(&server, &event, &opentelemetry::Context::new())
        .await
        .expect("the server publishes an event");
    within("the receipt", receipts.next())
        .await
        .expect("a receipt");
    assert!(
        tink_bus::dispatch_received(&bus.events, "ns/wf")
            .await
            .expect("looks the event up"),
        "the event is stored"
    );
    // Action output: stored, and read back (LogService).
    tink_bus::publish_log_batch(&server, &log_batch("ns/wf"))
        .await
        .expect("the server publishes a log batch");
    assert_eq!(
        read_back(&server, "ns/wf").await.expect("reads logs"),
        vec!["hello from the action".to_string()]
    );
    // Presence (watched: a newer session's entry ends a stream), its replica heartbeat (written
    // and read back, as another replica reads it) and takeover notices.
    let token = tink_bus::agent_token(AGENT).unwrap();
    let mut presence_watch = bus
        .presence
        .watch_all()
        .await
        .expect("the server watches presence");
    let revision = bus
        .presence
        .put(&token, "{}".into())
        .await
        .expect("the server writes presence");
    bus.presence
        .update(&token, "{}".into(), revision)
        .await
        .expect("and updates it");
    assert!(
        bus.presence
            .entry(&token)
            .await
            .expect("reads it")
            .is_some(),
        "presence stored"
    );
    let seen = within("a presence change", presence_watch.next())
        .await
        .expect("a change")
        .expect("no error");
    assert_eq!(seen.key, token);
    let beat_key = tink_bus::replica_key("server-0");
    bus.replicas
        .put(&beat_key, "{}".into())
        .await
        .expect("the server writes its heartbeat");
    assert!(
        bus.replicas
            .entry(&beat_key)
            .await
            .expect("reads heartbeats")
            .is_some(),
        "heartbeat stored"
    );
    let mut takeovers = server_client
        .subscribe(tink_bus::TAKEOVER_ALL)
        .await
        .expect("subscribes to takeovers");
    server_client
        .publish(tink_bus::takeover_subject(AGENT).unwrap(), "s1".into())
        .await
        .expect("publishes a takeover");
    within("the takeover notice", takeovers.next())
        .await
        .expect("a notice");
    // Inventory requests: the controller sends them, the server hears them.
    let mut requests = server_client
        .subscribe(tink_bus::INVENTORY_REQUEST_ALL)
        .await
        .expect("subscribes to inventory requests");
    server_client.flush().await.expect("flush");
    // Core NATS, at most once (the controller itself sends a request again until answered):
    // sent again until one arrives.
    let controller_client = controller.client();
    let request = within("the inventory request", async {
        loop {
            controller_client
                .publish(
                    tink_bus::inventory_request_subject(AGENT).unwrap(),
                    "r1".into(),
                )
                .await
                .expect("the controller sends an inventory request");
            controller_client.flush().await.expect("flush");
            if let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(1), requests.next()).await
            {
                break m;
            }
        }
    })
    .await;
    assert_eq!(&request.payload[..], b"r1");
    // The agent secrets: read (watched), as the server mirrors them.
    let mut watch = bus
        .agent_secrets
        .watch_with_history(">")
        .await
        .expect("the server watches the secrets");
    let entry = within("a secret", watch.next())
        .await
        .expect("an entry")
        .expect("no error");
    assert_eq!(entry.key, secret_key);
    // The exchanged secrets: read, created and replaced with a compare-and-set (what a new
    // session with a boot secret does before it is answered).
    let exchanged = bus
        .agent_secrets_used
        .entry(&secret_key)
        .await
        .expect("the server reads an exchanged secret")
        .expect("stored");
    bus.agent_secrets_used
        .update(&secret_key, "3".repeat(64).into(), exchanged.revision)
        .await
        .expect("the server records the next exchange");
    bus.agent_secrets_used
        .create("another_agent", "4".repeat(64).into())
        .await
        .expect("the server records a first exchange");
    // The dispatch targets: written and read.
    bus.dispatch_targets
        .put(
            tink_bus::workflow_token("ns/wf").unwrap(),
            AGENT.as_bytes().to_vec().into(),
        )
        .await
        .expect("the server writes a dispatch target");
    let target = bus
        .dispatch_targets
        .entry(tink_bus::workflow_token("ns/wf").unwrap())
        .await
        .expect("reads it")
        .expect("stored");
    assert_eq!(&target.value[..], AGENT.as_bytes());
}

#[tokio::test]
async fn the_controller_console_and_admin_users_keep_to_theirs() {
    let nats = NatsServer::start_deploy().await.expect("nats");
    let controller = jetstream::new(connect_as(&nats, "tink-controller").await);
    let owner = tink_bus::ensure_streams(&controller, &bus_config())
        .await
        .expect("the controller creates the streams and buckets");
    let server = jetstream::new(connect_as(&nats, "tink-server").await);
    let token = tink_bus::agent_token(AGENT).unwrap();
    tink_bus::publish_log_batch(&server, &log_batch("ns/wf"))
        .await
        .expect("the server publishes a log batch");

    // The controller reads the exchanged boot secrets (it rotates a machine's secret once it
    // was exchanged) and removes those of machines gone; it watches them.
    let mut exchanges = owner
        .agent_secrets_used
        .watch(">")
        .await
        .expect("the controller watches the exchanged secrets");
    server
        .get_key_value(tink_bus::AGENT_SECRETS_USED_BUCKET)
        .await
        .expect("the server opens the exchanged secrets")
        .create(&token, "5".repeat(64).into())
        .await
        .expect("the server records an exchange");
    let seen = within("an exchange", exchanges.next())
        .await
        .expect("an entry")
        .expect("no error");
    assert_eq!(seen.key, token);
    assert!(
        owner
            .agent_secrets_used
            .entry(&token)
            .await
            .expect("the controller reads it")
            .is_some()
    );
    owner
        .agent_secrets_used
        .delete(&token)
        .await
        .expect("the controller removes it");

    // The controller publishes its verdicts as events, but never an agent's output.
    let forbidden = impatient(&nats, "tink-controller").await;
    let verdict = action_started("ns/wf", "a1", "verdict").event.unwrap();
    tink_bus::publish_event(&controller, &verdict, &opentelemetry::Context::new())
        .await
        .expect("the controller publishes a verdict");
    let before = messages(&controller, tink_bus::LOGS_STREAM).await;
    let mut forged = log_batch("ns/wf");
    forged.lines[0].sequence = 2;
    refused(
        "the controller publishing action output",
        tink_bus::publish_log_batch(&forbidden, &forged),
    )
    .await;
    assert_eq!(
        messages(&controller, tink_bus::LOGS_STREAM).await,
        before,
        "forged output was stored"
    );

    // The console watches presence, and does nothing else.
    server
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("presence")
        .put(&token, "{}".into())
        .await
        .expect("the server writes presence");
    let console = impatient(&nats, "tink-console").await;
    let presence = console
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("the console opens the presence bucket");
    let mut watch = presence
        .watch_with_history(">")
        .await
        .expect("and watches it");
    let entry = within("a presence entry", watch.next())
        .await
        .expect("an entry")
        .expect("no error");
    assert_eq!(entry.key, token);
    refused(
        "the console writing presence",
        presence.put("forged", "{}".into()),
    )
    .await;
    // ...and the replica heartbeats (which the server writes), read-only.
    server
        .get_key_value(tink_bus::REPLICAS_BUCKET)
        .await
        .expect("replicas")
        .put(&tink_bus::replica_key("server-0"), "{}".into())
        .await
        .expect("the server writes its heartbeat");
    let replicas = console
        .get_key_value(tink_bus::REPLICAS_BUCKET)
        .await
        .expect("the console opens the replicas bucket");
    let mut beats = replicas
        .watch_with_history(">")
        .await
        .expect("and watches it");
    let beat = within("a replica heartbeat", beats.next())
        .await
        .expect("a heartbeat")
        .expect("no error");
    assert_eq!(beat.key, tink_bus::replica_key("server-0"));
    refused(
        "the console writing a replica heartbeat",
        replicas.put("forged", "{}".into()),
    )
    .await;
    refused(
        "the console opening the secrets bucket",
        console.get_key_value(tink_bus::AGENT_SECRETS_BUCKET),
    )
    .await;
    refused(
        "the console opening the exchanged secrets bucket",
        console.get_key_value(tink_bus::AGENT_SECRETS_USED_BUCKET),
    )
    .await;
    refused(
        "the console reading action output",
        read_back(&console, "ns/wf"),
    )
    .await;
    not_stored(
        "the console publishing a command",
        &console,
        tink_bus::dispatch_subject(AGENT).unwrap(),
        "forged",
    )
    .await;
    assert!(
        owner
            .presence
            .entry("forged")
            .await
            .expect("entry")
            .is_none(),
        "the console wrote presence"
    );
    assert_eq!(
        messages(&controller, tink_bus::DISPATCH_STREAM).await,
        0,
        "the console stored a command"
    );

    // Nor read what is delivered to the servers (commands, secrets): each user's inbox is its
    // own.
    let console_client = connect_as(&nats, "tink-console").await;
    let mut sniffers = Vec::new();
    for inbox in [
        format!("{}.>", tink_bus::inbox_prefix("tink-server")),
        "_INBOX.>".to_string(),
    ] {
        sniffers.push(
            console_client
                .subscribe(inbox)
                .await
                .expect("a subscription is sent (and refused by the server)"),
        );
    }
    console_client.flush().await.expect("flush");
    tink_bus::verify_streams(&server, &bus_config())
        .await
        .expect("the server's requests are answered on its inbox");
    for mut sniffer in sniffers {
        assert!(
            tokio::time::timeout(FORBIDDEN_TIMEOUT, sniffer.next())
                .await
                .is_err_or_none(),
            "the console read a message delivered to the server"
        );
    }

    // The administrator (tinkctl) reads output and resets sessions, and nothing else.
    owner
        .presence
        .put(&token, "{}".into())
        .await
        .expect("presence (again: entries expire)");
    let admin = impatient(&nats, "tink-admin").await;
    assert_eq!(
        read_back(&admin, "ns/wf")
            .await
            .expect("the admin reads logs"),
        vec!["hello from the action".to_string()]
    );
    let presence = admin
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("the admin opens the presence bucket");
    assert!(presence.entry(&token).await.expect("reads").is_some());
    presence
        .purge(&token)
        .await
        .expect("the admin resets a session");
    owner
        .agent_secrets_used
        .put(&token, "6".repeat(64).into())
        .await
        .expect("an exchange");
    let exchanged = admin
        .get_key_value(tink_bus::AGENT_SECRETS_USED_BUCKET)
        .await
        .expect("the admin opens the exchanged secrets bucket");
    assert!(exchanged.entry(&token).await.expect("reads").is_some());
    exchanged
        .purge(&token)
        .await
        .expect("the admin clears an exchange (agent reset)");
    assert!(
        owner
            .agent_secrets_used
            .get(&token)
            .await
            .expect("get")
            .is_none()
    );
    refused(
        "the admin opening the secrets bucket",
        admin.get_key_value(tink_bus::AGENT_SECRETS_BUCKET),
    )
    .await;
    refused(
        "the admin deleting the dispatch stream",
        admin.delete_stream(tink_bus::DISPATCH_STREAM),
    )
    .await;
    not_stored(
        "the admin publishing a command",
        &admin,
        tink_bus::dispatch_subject(AGENT).unwrap(),
        "forged",
    )
    .await;
    controller
        .get_stream(tink_bus::DISPATCH_STREAM)
        .await
        .expect("the dispatch stream is still there");
    assert_eq!(
        messages(&controller, tink_bus::DISPATCH_STREAM).await,
        0,
        "the admin stored a command"
    );
}

/// A wait for a subscription's next message that saw none: it timed out, or the subscription
/// ended (the server refused it).
trait NothingReceived {
    fn is_err_or_none(&self) -> bool;
}

impl<T, E> NothingReceived for Result<Option<T>, E> {
    fn is_err_or_none(&self) -> bool {
        matches!(self, Err(_) | Ok(None))
    }
}
