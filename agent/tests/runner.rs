//! The action runner against the real Docker engine.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::query_parameters::ListContainersOptionsBuilder;
use tink_agent::reason::FailureReason;
use tink_agent::runtime::{ActionOutcome, DockerRunner, LABEL_AGENT, RegistryConfig, RunnerConfig};
use tink_agent::spec::ActionSpec;
use tink_testkit::docker::{TestImage, engine_or_skip};
use tokio_util::sync::CancellationToken;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const IMAGE: &str = "tink-agent-test/busybox:1";

async fn runner(
    agent_id: &str,
    work: &tempfile::TempDir,
) -> Result<Option<DockerRunner>, Box<dyn std::error::Error>> {
    runner_with(agent_id, work, RegistryConfig::default()).await
}

async fn runner_with(
    agent_id: &str,
    work: &tempfile::TempDir,
    registry: RegistryConfig,
) -> Result<Option<DockerRunner>, Box<dyn std::error::Error>> {
    let Some(docker) = engine_or_skip().await? else {
        return Ok(None);
    };
    TestImage::busybox(IMAGE).ensure(&docker).await?;
    let runner = DockerRunner::connect(RunnerConfig {
        agent_id: agent_id.to_owned(),
        docker_host: None,
        registry,
        default_timeout: None,
        stop_grace: Duration::from_secs(1),
        work_dir: work.path().to_owned(),
        // The test machine runs Docker inside a container that cannot grant every capability.
        privileged: false,
    })
    .await?;
    Ok(Some(runner))
}

fn action(script: &str) -> ActionSpec {
    ActionSpec {
        id: "a1".into(),
        name: "script".into(),
        image: IMAGE.into(),
        cmd: Some("/bin/sh".into()),
        args: vec!["-c".into(), script.into()],
        env: BTreeMap::new(),
        volumes: Vec::new(),
        pid_mode: None,
        network_mode: None,
        timeout: None,
    }
}

async fn containers_of(
    runner: &DockerRunner,
    agent_id: &str,
) -> Result<usize, bollard::errors::Error> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![format!("{LABEL_AGENT}={agent_id}")],
    )]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    Ok(runner.docker().list_containers(Some(options)).await?.len())
}

#[tokio::test]
async fn success_env_and_volumes() -> TestResult {
    let work = tempfile::tempdir()?;
    let agent = "runner-success";
    let Some(runner) = runner(agent, &work).await? else {
        return Ok(());
    };
    let host = tempfile::tempdir()?;
    let volume = format!("tink-agent-test-{}", uuid::Uuid::new_v4().simple());
    let mut a = action(
        "test \"$A\" = action && test \"$B\" = template && echo data > /named/f && cat /named/f > /host/out && ! touch /ro/x",
    );
    a.env = tink_agent::spec::merge_env(
        &BTreeMap::from([
            ("A".into(), "template".into()),
            ("B".into(), "template".into()),
        ]),
        &BTreeMap::from([("A".into(), "action".into())]),
    )?;
    let ro = tempfile::tempdir()?;
    a.volumes = vec![
        format!("{volume}:/named").parse()?,
        format!("{}:/host", host.path().display()).parse()?,
        format!("{}:/ro:ro", ro.path().display()).parse()?,
    ];
    let outcome = runner
        .run("wf-success", &a, &CancellationToken::new())
        .await;
    assert_eq!(outcome, ActionOutcome::Succeeded);
    assert_eq!(std::fs::read_to_string(host.path().join("out"))?, "data\n");
    assert_eq!(containers_of(&runner, agent).await?, 0);
    runner
        .docker()
        .remove_volume(
            &volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn non_zero_exit_reports_code_and_output() -> TestResult {
    let work = tempfile::tempdir()?;
    let agent = "runner-exit";
    let Some(runner) = runner(agent, &work).await? else {
        return Ok(());
    };
    let outcome = runner
        .run(
            "wf-exit",
            &action("for i in 1 2 3 4 5; do echo line $i; done; echo oops >&2; exit 3"),
            &CancellationToken::new(),
        )
        .await;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert_eq!(f.reason, FailureReason::NonZeroExitCode, "{}", f.message);
    assert!(f.message.starts_with("exit code 3"), "{}", f.message);
    // stdout keeps its order; stderr is a separate pipe, so only its presence is checked.
    let stdout: Vec<&str> = f.message.lines().filter(|l| *l != "oops").collect();
    assert!(stdout.ends_with(&["line 4", "line 5"]), "{}", f.message);
    assert!(f.message.contains("oops"), "{}", f.message);
    assert_eq!(containers_of(&runner, agent).await?, 0);
    Ok(())
}

#[tokio::test]
async fn reason_files_override_the_failure() -> TestResult {
    let work = tempfile::tempdir()?;
    let agent = "runner-reason";
    let Some(runner) = runner(agent, &work).await? else {
        return Ok(());
    };
    let outcome = runner
        .run(
            "wf-reason",
            &action("echo DiskNotFound > $TINKERBELL_REASON_DIR/failure-reason; echo 'no disk /dev/sdz' > /tinkerbell/failure-message; exit 1"),
            &CancellationToken::new(),
        )
        .await;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert_eq!(f.reason.as_str(), "DiskNotFound");
    assert_eq!(f.message, "no disk /dev/sdz");
    // The per-action directory is gone with the container.
    assert_eq!(std::fs::read_dir(work.path())?.count(), 0);
    Ok(())
}

#[tokio::test]
async fn timeout_stops_the_container() -> TestResult {
    let work = tempfile::tempdir()?;
    let agent = "runner-timeout";
    let Some(runner) = runner(agent, &work).await? else {
        return Ok(());
    };
    let mut a = action("echo started; exec sleep 600");
    a.timeout = Some(Duration::from_secs(1));
    let outcome = runner
        .run("wf-timeout", &a, &CancellationToken::new())
        .await;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert_eq!(f.reason, FailureReason::Timeout);
    assert!(f.message.contains("timeout of 1s"), "{}", f.message);
    assert!(f.message.contains("started"), "{}", f.message);
    assert_eq!(containers_of(&runner, agent).await?, 0);
    Ok(())
}

#[tokio::test]
async fn cancel_stops_the_container() -> TestResult {
    let work = tempfile::tempdir()?;
    let agent = "runner-cancel";
    let Some(runner) = runner(agent, &work).await? else {
        return Ok(());
    };
    let host = tempfile::tempdir()?;
    let mut a = action("touch /host/started; exec sleep 600");
    a.volumes = vec![format!("{}:/host", host.path().display()).parse()?];
    let cancel = CancellationToken::new();
    let run = {
        let (runner, cancel, a) = (runner.clone(), cancel.clone(), a.clone());
        tokio::spawn(async move { runner.run("wf-cancel", &a, &cancel).await })
    };
    // Cancel once the container is really running.
    while !host.path().join("started").exists() {
        assert!(
            !run.is_finished(),
            "the action ended before it was canceled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(containers_of(&runner, agent).await?, 1);
    cancel.cancel();
    let outcome = run.await?;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert_eq!(f.reason, FailureReason::Canceled);
    assert_eq!(containers_of(&runner, agent).await?, 0);
    Ok(())
}

#[tokio::test]
async fn missing_image_fails_to_pull() -> TestResult {
    let work = tempfile::tempdir()?;
    let Some(runner) = runner("runner-pull", &work).await? else {
        return Ok(());
    };
    let mut a = action("true");
    a.image = "127.0.0.1:1/tink/not-there:1".into();
    let outcome = runner.run("wf-pull", &a, &CancellationToken::new()).await;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert_eq!(f.reason, FailureReason::ImagePullFailed);
    assert!(
        f.message.contains("127.0.0.1:1/tink/not-there:1"),
        "{}",
        f.message
    );
    Ok(())
}

#[tokio::test]
async fn bad_entrypoint_fails_to_start() -> TestResult {
    let work = tempfile::tempdir()?;
    let agent = "runner-start";
    let Some(runner) = runner(agent, &work).await? else {
        return Ok(());
    };
    let mut a = action("true");
    a.cmd = Some("/no/such/binary".into());
    let outcome = runner.run("wf-start", &a, &CancellationToken::new()).await;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert!(
        matches!(
            f.reason,
            FailureReason::ContainerStartFailed | FailureReason::ContainerCreateFailed
        ),
        "{f:?}"
    );
    assert_eq!(containers_of(&runner, agent).await?, 0);
    Ok(())
}

#[tokio::test]
async fn pulls_go_through_the_mirror_with_credentials() -> TestResult {
    let work = tempfile::tempdir()?;
    let registry = RegistryConfig {
        mirror: Some("127.0.0.1:1".into()),
        username: Some("user".into()),
        password: Some("secret".into()),
        server_address: Some("127.0.0.1:1".into()),
    };
    let Some(runner) = runner_with("runner-mirror", &work, registry).await? else {
        return Ok(());
    };
    let mut a = action("true");
    a.image = "tinkerbell/not-local:1".into();
    let outcome = runner.run("wf-mirror", &a, &CancellationToken::new()).await;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert_eq!(f.reason, FailureReason::ImagePullFailed);
    // The Docker Hub image was asked from the mirror, not from Docker Hub.
    assert!(
        f.message.contains("127.0.0.1:1/tinkerbell/not-local:1"),
        "{}",
        f.message
    );
    // A local image is used as is: the mirror is never asked.
    let outcome = runner
        .run("wf-mirror", &action("true"), &CancellationToken::new())
        .await;
    assert_eq!(outcome, ActionOutcome::Succeeded);
    Ok(())
}

#[tokio::test]
async fn without_cmd_the_image_default_command_runs() -> TestResult {
    let work = tempfile::tempdir()?;
    let agent = "runner-default-cmd";
    let Some(runner) = runner(agent, &work).await? else {
        return Ok(());
    };
    let image = TestImage::busybox("tink-agent-test/exit5:1")
        .cmd(["sh", "-c", "echo from-image; exit 5"])
        .ensure(runner.docker())
        .await?;
    let mut a = action("unused");
    a.image = image.clone();
    a.cmd = None;
    a.args = Vec::new();
    let outcome = runner
        .run("wf-default", &a, &CancellationToken::new())
        .await;
    let ActionOutcome::Failed(f) = outcome else {
        panic!("expected failure, got {outcome:?}")
    };
    assert!(
        f.message.starts_with("exit code 5") && f.message.contains("from-image"),
        "{}",
        f.message
    );
    // Arguments without cmd replace the image's command, as `docker run IMAGE ARGS...` does.
    a.args = vec!["sh".into(), "-c".into(), "exit 0".into()];
    let outcome = runner
        .run("wf-default", &a, &CancellationToken::new())
        .await;
    assert_eq!(outcome, ActionOutcome::Succeeded);
    assert_eq!(containers_of(&runner, agent).await?, 0);
    Ok(())
}
