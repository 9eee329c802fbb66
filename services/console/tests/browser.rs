//! The console in a real browser (headless Chromium driven by chromedriver over WebDriver)
//! against the real controller and tink-server, with the controller tests' simulated agent
//! (gRPC, as the real agent talks): log in, watch the demo machine's tile turn from
//! provisioning to succeeded while its workflow runs, open the workflow page and count one
//! timeline bar per action, cancel a running workflow from its page and see it reach
//! Canceled, and see a user without rights refused with 403. Every page's screenshot goes to
//! target/console-screenshots/.

mod common;
#[path = "../../controller/tests/common/mod.rs"]
mod controller_common;
mod webdriver;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use controller_common::{Agent, Command};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Template, Workflow};
use tink_testkit::nats::NatsServer;
use tokio_util::sync::CancellationToken;
use webdriver::Browser;

const MAC: &str = "52:54:00:12:34:56";

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

async fn create_workflow(admin: &kube::Client, name: &str) {
    create_workflow_on(admin, name, "demo").await
}

async fn create_workflow_on(admin: &kube::Client, name: &str, hw: &str) {
    let wf: Workflow = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": name, "namespace": "a"},
        "spec": {"hardwareRef": {"name": hw}, "templateRef": {"name": "ubuntu"},
                 "templateData": {"image_server": "10.0.0.1:8080"}},
    }))
    .expect("workflow");
    Api::<Workflow>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &wf)
        .await
        .expect("create workflow");
}

fn tile_is(class: &str) -> String {
    format!(
        "var t = document.getElementById('m/a/demo'); return !!t && t.classList.contains('{class}');"
    )
}

fn state_is(state: &str) -> String {
    format!(
        "var s = document.getElementById('wf-state'); return !!s && s.textContent.trim() === '{state}';"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_watch_run_and_cancel_workflows_in_a_browser() {
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    // The real tink-server and controller on a real NATS with deploy/'s users (each service
    // its own), whose presence bucket the console watches.
    let nats = NatsServer::start_deploy().await.expect("nats-server");
    let auth = |user: &str| {
        let (user, password) = tink_testkit::nats::deploy_credentials(user);
        tink_bus::NatsAuth {
            user: Some(user),
            password: Some(password),
            ..Default::default()
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let server_addr = listener.local_addr().expect("addr");
    let stack = stack_with(Some((nats.url(), auth("tink-console"))), Some(server_addr)).await;
    let admin = stack.admin.clone();
    let console = format!("http://{}", stack.console);
    let shots = screenshots();

    let bus = controller_common::bus_config();
    let stop = CancellationToken::new();
    let mut server = tink_server::ServerConfig::new(nats.url(), "server-0");
    server.bus = bus.clone();
    // The agents connect right after their Hardware is created (admission has its own tests).
    server.admit_unknown_agents = true;
    server.nats_auth = auth("tink-server");
    // ReadLogs checks the caller's token with kube-lite.
    server.kube = Some(tink_server::KubeClient(admin.clone()));
    let server_health = tink_runtime::Health::new();
    tokio::spawn(tink_server::serve(
        server,
        listener,
        server_health.clone(),
        tink_server::Metrics::default(),
        stop.clone(),
    ));
    let mut c = tink_controller::ControllerConfig::new(nats.url(), "controller-0");
    c.bus = bus;
    c.nats_auth = auth("tink-controller");
    c.namespace = Some("a".into());
    c.events_ack_wait = Duration::from_secs(2);
    c.lease = tink_controller::LeaseConfig {
        namespace: "tink-system".into(),
        name: "tink-controller".into(),
        duration: Duration::from_secs(3),
        renew_period: Duration::from_millis(500),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    };
    let controller_health = tink_runtime::Health::new();
    tokio::spawn(tink_controller::run(
        c,
        admin.clone(),
        controller_health.clone(),
        tink_controller::Metrics::default(),
        stop.clone(),
    ));
    within("the controller to be ready", async {
        while !controller_health.is_ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // The server verifies the streams the controller created, then turns ready.
    within("the server to be ready", async {
        while !server_health.is_ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // The demo machine, its template, its agent.
    let hw: Hardware = hardware("a", "demo", MAC, "10.0.0.2", json!({"rack": "r1"}));
    let mut hw = hw;
    hw.spec.storage_devices = vec!["/dev/nvme0n1".into()];
    Api::<Hardware>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &hw)
        .await
        .expect("hardware");
    let t: Template = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
        "metadata": {"name": "ubuntu", "namespace": "a"},
        "spec": {"actions": controller_common::three_actions()},
    }))
    .expect("template");
    Api::<Template>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &t)
        .await
        .expect("template");
    let mut agent = Agent::connect(server_addr, MAC).await;

    // A rack around it: idle machines, two waiting for their agents, one whose disk is full.
    for i in 1..=11 {
        let name = format!("node-{i:02}");
        let mut hw = hardware(
            "a",
            &name,
            &format!("52:54:00:00:00:{i:02x}"),
            &format!("10.0.0.{}", 10 + i),
            json!({"rack": "r1"}),
        );
        hw.spec.storage_devices = vec!["/dev/nvme0n1".into()];
        Api::<Hardware>::namespaced(admin.clone(), "a")
            .create(&PostParams::default(), &hw)
            .await
            .expect("hardware");
    }
    for (wf, hw) in [
        ("node-03-install", "node-03"),
        ("node-07-install", "node-07"),
    ] {
        create_workflow_on(&admin, wf, hw).await;
    }
    let mut failing = Agent::connect(server_addr, "52:54:00:00:00:05").await;
    create_workflow_on(&admin, "node-05-install", "node-05").await;
    let (fid, factions) = failing.next_start().await;
    failing.started(&fid, &factions[0]).await;
    failing.succeeded(&fid, &factions[0]).await;
    failing.started(&fid, &factions[1]).await;
    failing
        .failed(
            &fid,
            &factions[1],
            "DiskFull",
            "no space left on /dev/nvme0n1",
        )
        .await;

    // Log in through the form.
    let browser = Browser::start().await;
    browser.goto(&console).await;
    browser
        .wait_for(
            "the login form",
            "return !!document.getElementById('token');",
        )
        .await;
    browser.screenshot(&shots.join("login.png")).await;
    browser.type_into("#token", "alice-token").await;
    browser.click("#login").await;
    browser
        .wait_for(
            "the machines page",
            "return !!document.getElementById('tiles');",
        )
        .await;
    browser
        .wait_for("the live stream", "var s = document.getElementById('live-status'); return !!s && s.textContent === 'live';")
        .await;
    assert!(
        browser.eval(&tile_is("idle")).await == true,
        "no workflow yet"
    );
    browser
        .wait_for(
            "the demo machine's agent to show connected",
            "var t = document.getElementById('m/a/demo'); return !!t && t.querySelector('.agent').textContent === 'agent connected';",
        )
        .await;
    assert_eq!(
        browser
            .eval(
                "return document.getElementById('m/a/node-01').querySelector('.agent').textContent"
            )
            .await,
        "agent offline"
    );

    // The tile turns provisioning, then succeeded, live, while the agent runs the workflow.
    create_workflow(&admin, "demo-install").await;
    let (id, actions) = agent.next_start().await;
    browser
        .wait_for("the tile to show provisioning", &tile_is("provisioning"))
        .await;
    for (i, a) in actions.iter().enumerate() {
        agent.started(&id, a).await;
        if i == 1 {
            browser
                .wait_for("the tile to show Running", "var t = document.getElementById('m/a/demo'); return !!t && t.dataset.state === 'Running';")
                .await;
            browser
                .screenshot(&shots.join("machines-provisioning.png"))
                .await;
        }
        // Long enough for the timeline to show proportions.
        tokio::time::sleep(Duration::from_millis(300 + 500 * i as u64)).await;
        agent.succeeded(&id, a).await;
    }
    browser
        .wait_for("the tile to show succeeded", &tile_is("succeeded"))
        .await;
    browser
        .wait_for(
            "the legend to count it",
            "return document.querySelector('[data-count=succeeded]').textContent === '1';",
        )
        .await;
    assert_eq!(browser.count("#tiles .tile.failed").await, 1, "node-05");
    browser.screenshot(&shots.join("machines.png")).await;

    // The tile leads to the machine's page, which links its latest workflow's page: one bar
    // per action, each succeeded.
    browser.click("a[id='m/a/demo']").await;
    browser
        .wait_for(
            "the machine page",
            "return !!document.getElementById('latest-workflow');",
        )
        .await;
    browser.click("#latest-workflow").await;
    browser
        .wait_for("the workflow page", &state_is("Succeeded"))
        .await;
    assert_eq!(browser.count("svg.timeline g.bar").await, actions.len());
    assert_eq!(
        browser.count("svg.timeline g.bar.succeeded").await,
        actions.len()
    );
    browser.screenshot(&shots.join("workflow.png")).await;

    // The failed workflow: the reason on the failed bar.
    browser
        .goto(&format!("{console}/workflows/a/node-05-install"))
        .await;
    browser
        .wait_for("the failed workflow", &state_is("Failed"))
        .await;
    let label = browser
        .eval("return document.querySelector('svg.timeline g.bar.failed text.label').textContent")
        .await;
    assert!(
        label
            .as_str()
            .unwrap_or("")
            .contains("DiskFull: no space left"),
        "{label}"
    );
    browser.screenshot(&shots.join("workflow-failed.png")).await;

    // The action output (stored as the servers store it, with their NATS user), read from
    // tink-server with alice's own token.
    let js = async_nats::jetstream::new(
        tink_bus::connect(
            &nats.url(),
            &auth("tink-server"),
            async_nats::ConnectOptions::new,
        )
        .await
        .expect("nats client"),
    );
    for (n, a) in actions.iter().enumerate() {
        let batch = tink_bus::proto::LogBatch {
            workflow_id: id.clone(),
            action_id: a.clone(),
            agent_id: MAC.into(),
            lines: (1..=2)
                .map(|s| tink_bus::proto::LogLine {
                    sequence: s,
                    text: format!("action {n} says <hello> {s}"),
                    ..Default::default()
                })
                .collect(),
            dropped_lines: 0,
        };
        tink_bus::publish_log_batch(&js, &batch)
            .await
            .expect("log batch stored");
    }
    browser
        .goto(&format!("{console}/workflows/a/demo-install"))
        .await;
    browser.click("#logs-link").await;
    browser
        .wait_for(
            "the action output",
            &format!(
                "return document.querySelectorAll('#logs tbody tr').length === {};",
                2 * actions.len()
            ),
        )
        .await;
    let first = browser
        .eval("return document.querySelector('#logs tbody tr pre').textContent")
        .await;
    assert_eq!(first, "action 0 says <hello> 1");
    assert_eq!(
        get(stack.console, "/workflows/a/demo-install/logs", "bob-token")
            .await
            .status,
        403
    );
    browser.screenshot(&shots.join("logs.png")).await;

    // The workflows list, a template with its preview, the search.
    browser.goto(&format!("{console}/workflows")).await;
    assert_eq!(browser.count("tr[id='w/a/demo-install']").await, 1);
    browser.screenshot(&shots.join("workflows.png")).await;
    browser
        .goto(&format!("{console}/templates/a/ubuntu?hardware=demo"))
        .await;
    browser
        .wait_for(
            "the rendered preview",
            &format!(
                "return document.querySelectorAll('#preview tbody tr').length === {};",
                actions.len()
            ),
        )
        .await;
    browser.screenshot(&shots.join("template.png")).await;
    browser
        .goto(&format!("{console}/search?q=52-54-00-12-34-56"))
        .await;
    assert_eq!(browser.count("table.list tbody tr").await, 1);
    browser.screenshot(&shots.join("search.png")).await;

    // Cancel a running workflow from its page: Cancelling, the agent is told to stop, Canceled.
    create_workflow(&admin, "demo-reinstall").await;
    let (id, actions) = agent.next_start().await;
    agent.started(&id, &actions[0]).await;
    browser
        .goto(&format!("{console}/workflows/a/demo-reinstall"))
        .await;
    browser
        .wait_for("the workflow to run", &state_is("Running"))
        .await;
    assert_eq!(browser.count("svg.timeline g.bar").await, actions.len());
    assert_eq!(browser.count("svg.timeline g.bar.running").await, 1);
    browser
        .screenshot(&shots.join("workflow-running.png"))
        .await;
    browser.click("#cancel").await;
    let stopped = controller_common::within("the StopWorkflow command", async {
        loop {
            match agent.next_command().await {
                Command::Stop { workflow_id, .. } if workflow_id == id => return workflow_id,
                _ => continue,
            }
        }
    })
    .await;
    agent.canceled(&stopped, Some(&actions[0])).await;
    browser
        .wait_for("the workflow to be canceled", &state_is("Canceled"))
        .await;
    browser
        .screenshot(&shots.join("workflow-canceled.png"))
        .await;

    // bob may see nothing: 403 on a workflow page.
    browser.goto(&format!("{console}/login")).await;
    browser.type_into("#token", "bob-token").await;
    browser.click("#login").await;
    // The form's POST sets the session cookie; navigating before its answer arrives aborts it
    // and leaves alice's session in place. bob lands on the machines page, which refuses him.
    browser
        .wait_for(
            "bob's session",
            "var e = document.getElementById('error'); return !!e && e.textContent.indexOf('user \"bob\"') >= 0;",
        )
        .await;
    browser
        .goto(&format!("{console}/workflows/a/demo-install"))
        .await;
    browser
        .wait_for("the refusal", "return document.querySelector('h1') && document.querySelector('h1').textContent === '403';")
        .await;
    let text = browser
        .eval("return document.getElementById('error').textContent")
        .await;
    assert!(text.as_str().unwrap_or("").contains("may not"), "{text}");
    browser.screenshot(&shots.join("forbidden.png")).await;
    assert_eq!(
        get(stack.console, "/workflows/a/demo-install", "bob-token")
            .await
            .status,
        403
    );

    browser.close().await;
    stop.cancel();
    stack.stop().await.expect("the console stops cleanly");
}
