//! The local image builder against the real Docker engine.
#![forbid(unsafe_code)]

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures::StreamExt;
use tink_testkit::docker::{DockerError, TestImage, engine_or_skip};

#[tokio::test]
async fn busybox_image_runs_its_default_command_and_is_cached() -> Result<(), DockerError> {
    let Some(docker) = engine_or_skip().await? else {
        return Ok(());
    };
    let image = TestImage::busybox("tink-testkit/selftest:1")
        .cmd([
            "sh",
            "-c",
            "echo hello from $GREETING; ls /usr/bin/env >/dev/null && exit 7",
        ])
        .env("GREETING", "busybox");
    let reference = image.ensure(&docker).await?;
    let first = docker.inspect_image(&reference).await?.id;
    // A second call with the same content reuses the image.
    image.ensure(&docker).await?;
    assert_eq!(docker.inspect_image(&reference).await?.id, first);

    let created = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(reference.clone()),
                ..Default::default()
            },
        )
        .await?;
    let run = async {
        docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await?;
        let mut wait = docker.wait_container(
            &created.id,
            Some(WaitContainerOptionsBuilder::default().build()),
        );
        let mut code = None;
        while let Some(item) = wait.next().await {
            match item {
                Ok(r) => code = Some(r.status_code),
                // bollard reports a non-zero exit as an error carrying the code.
                Err(bollard::errors::Error::DockerContainerWaitError { code: c, .. }) => {
                    code = Some(c)
                }
                Err(e) => return Err(DockerError::from(e)),
            }
        }
        let mut logs = docker.logs(
            &created.id,
            Some(LogsOptionsBuilder::default().stdout(true).build()),
        );
        let mut out = String::new();
        while let Some(chunk) = logs.next().await {
            out.push_str(&chunk?.to_string());
        }
        Ok((code, out))
    }
    .await;
    docker
        .remove_container(
            &created.id,
            Some(RemoveContainerOptionsBuilder::default().force(true).build()),
        )
        .await?;
    let (code, out) = run?;
    assert_eq!(code, Some(7));
    assert_eq!(out.trim(), "hello from busybox");

    // Changing the command rebuilds under the same tag.
    TestImage::busybox("tink-testkit/selftest:1")
        .cmd(["true"])
        .ensure(&docker)
        .await?;
    assert_ne!(docker.inspect_image(&reference).await?.id, first);
    Ok(())
}
