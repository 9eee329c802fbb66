//! The executor against the real Docker engine, with the publisher played by the test: every
//! receipt is confirmed before an action runs, a dispatch runs at most once per process, the
//! power contract acts only after the workflow's success is confirmed, and an endless output
//! line is cut.
#![forbid(unsafe_code)]

use std::time::Duration;

use tink_agent::client::Outgoing;
use tink_agent::config::PowerCommands;
use tink_agent::runtime::{DockerRunner, RegistryConfig, RunnerConfig};
use tink_agent::{AgentConfig, Executor, Metrics};
use tink_proto::workflow::v2::{
    GetWorkflowsResponse, Workflow, event, get_workflows_response, workflow,
};
use tink_testkit::docker::{TestImage, engine_or_skip};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const IMAGE: &str = "tink-agent-test/busybox:1";

struct Harness {
    commands: mpsc::Sender<GetWorkflowsResponse>,
    outbox: mpsc::Receiver<Outgoing>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
}

async fn harness(power: PowerCommands) -> Result<Option<Harness>, Box<dyn std::error::Error>> {
    let Some(docker) = engine_or_skip().await? else {
        return Ok(None);
    };
    TestImage::busybox(IMAGE).ensure(&docker).await?;
    let dir = tempfile::tempdir()?;
    let runner = DockerRunner::connect(RunnerConfig {
        agent_id: "02:00:00:00:0e:01".into(),
        docker_host: None,
        registry: RegistryConfig::default(),
        default_timeout: None,
        stop_grace: Duration::from_secs(1),
        work_dir: dir.path().join("work"),
        privileged: false,
    })
    .await?;
    let mut config = AgentConfig::new("02:00:00:00:0e:01", Vec::new());
    config.power_commands = power;
    let (commands, commands_rx) = mpsc::channel(16);
    let (outbox_tx, outbox) = mpsc::channel(64);
    let shutdown = CancellationToken::new();
    let executor = Executor::new(
        config.agent_id.clone(),
        runner,
        outbox_tx,
        Metrics::default(),
    )
    .configured(&config);
    let task = tokio::spawn(executor.run(commands_rx, shutdown.clone()));
    Ok(Some(Harness {
        commands,
        outbox,
        shutdown,
        task,
        dir,
    }))
}

fn start(id: &str, actions: Vec<workflow::Action>) -> GetWorkflowsResponse {
    GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StartWorkflow(
            get_workflows_response::StartWorkflow {
                workflow: Some(Workflow {
                    workflow_id: id.into(),
                    actions,
                    ..Default::default()
                }),
            },
        )),
        ..Default::default()
    }
}

fn script(id: &str, script: &str, volume: &str) -> workflow::Action {
    workflow::Action {
        id: id.into(),
        name: id.into(),
        image: IMAGE.into(),
        cmd: Some("/bin/sh".into()),
        args: vec!["-c".into(), script.into()],
        volumes: vec![format!("{volume}:/shared")],
        ..Default::default()
    }
}

fn describe(e: &tink_proto::workflow::v2::Event) -> String {
    match &e.event {
        Some(event::Event::WorkflowReceived(_)) => "Received".into(),
        Some(event::Event::ActionStarted(a)) => format!("Started:{}", a.action_id),
        Some(event::Event::ActionSucceeded(a)) => format!("Succeeded:{}", a.action_id),
        Some(event::Event::ActionFailed(a)) => format!(
            "Failed:{}:{}",
            a.action_id,
            a.failure_reason.as_deref().unwrap_or("")
        ),
        Some(event::Event::WorkflowRejected(r)) => {
            format!("Rejected:{}", r.failure_reason.as_deref().unwrap_or(""))
        }
        other => format!("{other:?}"),
    }
}

impl Harness {
    /// The next event; confirmed (as a server would) unless `confirm` is false.
    async fn next(&mut self, confirm: bool) -> Option<Outgoing> {
        let mut o = tokio::time::timeout(Duration::from_secs(60), self.outbox.recv())
            .await
            .ok()??;
        if confirm && let Some(c) = o.confirmed.take() {
            let _ = c.send(());
        }
        Some(o)
    }

    /// Events until one matching `last`, each confirmed.
    async fn until(&mut self, last: &str) -> Vec<String> {
        let mut seen = Vec::new();
        while let Some(o) = self.next(true).await {
            let d = describe(&o.event);
            seen.push(d.clone());
            if d == last {
                break;
            }
        }
        seen
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

#[tokio::test]
async fn no_action_before_the_receipt_is_confirmed_and_never_twice() -> TestResult {
    let Some(mut h) = harness(PowerCommands::default()).await? else {
        return Ok(());
    };
    let shared = h.dir.path().join("shared");
    std::fs::create_dir_all(&shared)?;
    let volume = shared.display().to_string();
    let id = "ns/wf/uid/1";
    let runs = || {
        std::fs::read_to_string(shared.join("runs"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    h.commands
        .send(start(
            id,
            vec![script("a1", "echo run >> /shared/runs", &volume)],
        ))
        .await?;
    // The receipt comes first and is held unconfirmed: nothing runs.
    let receipt = h.next(false).await.ok_or("a receipt")?;
    assert_eq!(describe(&receipt.event), "Received");
    assert_eq!(
        receipt.event.agent_instance.len(),
        36,
        "events carry the instance id"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(runs(), 0, "an action ran before its receipt was confirmed");
    assert!(
        h.outbox.try_recv().is_err(),
        "events before the receipt was confirmed"
    );
    // Confirmed: the workflow runs.
    if let Some(c) = receipt.confirmed {
        let _ = c.send(());
    }
    assert_eq!(
        h.until("Succeeded:a1").await,
        ["Started:a1", "Succeeded:a1"]
    );
    assert_eq!(runs(), 1);
    // The same dispatch delivered again (a restarted server lost the acknowledgement): a
    // receipt and AlreadyRun, and nothing runs.
    h.commands
        .send(start(
            id,
            vec![script("a1", "echo run >> /shared/runs", &volume)],
        ))
        .await?;
    assert_eq!(
        h.until("Rejected:AlreadyRun").await,
        ["Received", "Rejected:AlreadyRun"]
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs(), 1, "a dispatch ran twice");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_power_contract_acts_only_after_a_stored_success() -> TestResult {
    let marker_dir = tempfile::tempdir()?;
    let marker = marker_dir.path().join("rebooted");
    let power = PowerCommands {
        reboot: vec!["touch".into(), marker.display().to_string()],
        ..PowerCommands::default()
    };
    let Some(mut h) = harness(power).await? else {
        return Ok(());
    };
    let volume = h.dir.path().join("v").display().to_string();
    std::fs::create_dir_all(&volume)?;
    // A failing workflow whose first action asked for a reboot: no reboot.
    h.commands
        .send(start(
            "ns/fails/uid/1",
            vec![
                script("a1", "echo reboot > /tinkerbell/power", &volume),
                script("a2", "exit 3", &volume),
            ],
        ))
        .await?;
    h.until("Failed:a2:NonZeroExitCode").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !marker.exists(),
        "a failed workflow power-cycled the machine"
    );

    // The last action asks for a reboot: it happens only once its success is confirmed.
    h.commands
        .send(start(
            "ns/reboots/uid/1",
            vec![
                script("a1", "true", &volume),
                script("a2", "echo reboot > /tinkerbell/power", &volume),
            ],
        ))
        .await?;
    let mut last = None;
    while let Some(o) = h.next(true).await {
        if describe(&o.event) == "Started:a2" {
            // Hold the last event (ActionSucceeded of a2) unconfirmed.
            let succeeded = h.next(false).await.ok_or("a2's success")?;
            assert_eq!(describe(&succeeded.event), "Succeeded:a2");
            last = Some(succeeded);
            break;
        }
    }
    let last = last.ok_or("the last event")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!marker.exists(), "rebooted before the success was stored");
    if let Some(c) = last.confirmed {
        let _ = c.send(());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !marker.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(marker.exists(), "the reboot command never ran");
    h.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_endless_output_line_is_cut() -> TestResult {
    let Some(mut h) = harness(PowerCommands::default()).await? else {
        return Ok(());
    };
    let volume = h.dir.path().join("v").display().to_string();
    std::fs::create_dir_all(&volume)?;
    // 1 MiB without a newline, then a failure so the message shows the output's tail.
    h.commands
        .send(start(
            "ns/chatty/uid/1",
            vec![script(
                "a1",
                "head -c 1048576 /dev/zero | tr '\\000' x; exit 1",
                &volume,
            )],
        ))
        .await?;
    let mut message = String::new();
    while let Some(o) = h.next(true).await {
        if let Some(event::Event::ActionFailed(f)) = &o.event.event {
            message = f.failure_message.clone().unwrap_or_default();
            break;
        }
    }
    assert!(
        message.contains("[line cut at 16384 bytes]"),
        "{}",
        &message[..message.len().min(300)]
    );
    assert!(message.len() < 64 * 1024, "{} bytes", message.len());
    h.stop().await;
    Ok(())
}
