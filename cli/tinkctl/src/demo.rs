//! `tinkctl demo`: builds the demo's action image in the local Docker engine, applies the sample
//! Hardware, OSIE, Template and Workflow (deploy/examples/demo.yaml) and follows the Workflow to
//! its end with the live display of `tinkctl workflow watch`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use clap::Args;
use futures::StreamExt;
use kube::api::{Api, DeleteParams};
use tink_api::v1alpha2::Workflow;

use crate::kubeconfig::KubeArgs;

/// The demo objects.
pub const DEMO_YAML: &str = include_str!("../../../deploy/examples/demo.yaml");
/// The MAC the demo Hardware carries (the development agent's id).
const DEMO_MAC: &str = "02:00:00:00:00:01";
/// The demo's namespace and Workflow.
const NAMESPACE: &str = "tink-demo";
const WORKFLOW: &str = "provision-machine-1";
/// The action image the demo Template uses.
pub const ACTION_IMAGE: &str = "tink-demo/actions:latest";
/// The action programs baked into the image (`/usr/local/bin/<name>`).
const ACTIONS: [(&str, &str); 4] = [
    (
        "stream-image",
        include_str!("../../../deploy/examples/demo-actions/stream-image"),
    ),
    (
        "write-disk",
        include_str!("../../../deploy/examples/demo-actions/write-disk"),
    ),
    (
        "verify",
        include_str!("../../../deploy/examples/demo-actions/verify"),
    ),
    (
        "configure",
        include_str!("../../../deploy/examples/demo-actions/configure"),
    ),
];

/// Arguments of `tinkctl demo`.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// The agent (MAC) the demo Hardware targets.
    #[arg(long, env = "TINK_DEV_AGENT_ID", default_value = DEMO_MAC)]
    pub agent_id: String,
    /// A statically linked busybox, the action image's only program besides the scripts.
    #[arg(long, env = "TINK_DEMO_BUSYBOX", default_value = "/bin/busybox")]
    pub busybox: PathBuf,
    /// Docker engine socket of the agent (default: DOCKER_HOST or the local socket).
    #[arg(long, env = "DOCKER_HOST")]
    pub docker_host: Option<String>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let docker = match &args.docker_host {
            Some(h) if h.starts_with("unix://") || h.starts_with('/') => {
                Docker::connect_with_unix(h, 120, bollard::API_DEFAULT_VERSION)
            }
            _ => Docker::connect_with_local_defaults(),
        }
        .context("connecting to the Docker engine")?;
        docker
            .ping()
            .await
            .context("the Docker engine does not answer (is it running? the agent runs the actions there)")?;
        println!("== action image {ACTION_IMAGE} (built locally from {})", args.busybox.display());
        build_action_image(&docker, &args.busybox).await?;

        let client = args.kube.client().await?;
        let workflows: Api<Workflow> = Api::namespaced(client.clone(), NAMESPACE);
        if workflows.get_opt(WORKFLOW).await?.is_some() {
            println!("== deleting the previous run {NAMESPACE}/{WORKFLOW}");
            workflows.delete(WORKFLOW, &DeleteParams::default()).await?;
            wait_gone(&workflows, WORKFLOW).await?;
        }
        let yaml = demo_yaml(&args.agent_id);
        let objects = crate::apply::documents(&yaml)?;
        for applied in crate::apply::apply_all(&client, &objects).await? {
            println!("applied {applied}");
        }
        println!("== following workflow {NAMESPACE}/{WORKFLOW}");
        let wf = crate::watch::follow(&workflows, WORKFLOW, Duration::from_secs(args.timeout_seconds)).await?;
        crate::watch::finish(&wf)?;
        if crate::watch::trace_id(&wf).is_none() {
            println!("(no trace id recorded on the Workflow: the controller writes it in the {} annotation when it first takes a Workflow)", crate::watch::TRACE_ID_ANNOTATION);
        }
        std::io::stdout().flush()?;
        Ok(())
    })
}

/// The demo objects with the Hardware's MAC set to `agent_id`.
pub fn demo_yaml(agent_id: &str) -> String {
    DEMO_YAML.replace(DEMO_MAC, &agent_id.to_lowercase())
}

async fn wait_gone(api: &Api<Workflow>, name: &str) -> anyhow::Result<()> {
    for _ in 0..300 {
        if api.get_opt(name).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "workflow {name} was not deleted within 30s (its finalizer stays until the controller ends it)"
    )
}

/// The label holding a digest of the image's content, so an unchanged image is not re-imported.
const CONTENT_LABEL: &str = "org.tinkerbell.demo.content";

/// Imports the action image (busybox with its applets, plus the action scripts) unless the
/// engine already has it with the same content.
async fn build_action_image(docker: &Docker, busybox: &Path) -> anyhow::Result<()> {
    let tar = action_rootfs(busybox)?;
    // FNV-1a: stable across Rust versions.
    let digest = tar.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let digest = format!("{digest:016x}");
    if let Ok(existing) = docker.inspect_image(ACTION_IMAGE).await {
        let labels = existing.config.and_then(|c| c.labels).unwrap_or_default();
        if labels.get(CONTENT_LABEL) == Some(&digest) {
            return Ok(());
        }
    }
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo("tink-demo/actions")
        .tag("latest")
        .changes(vec![
            format!("LABEL {CONTENT_LABEL}={digest}"),
            "ENV PATH=/usr/local/bin:/bin".to_string(),
            "CMD [\"/bin/sh\"]".to_string(),
        ])
        .build();
    let mut progress =
        docker.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
    while let Some(step) = progress.next().await {
        step.context("importing the action image")?;
    }
    Ok(())
}

/// The image's root file system as a tar archive.
fn action_rootfs(busybox: &Path) -> anyhow::Result<Vec<u8>> {
    let bin = std::fs::read(busybox).with_context(|| {
        format!(
            "reading {} (install Debian's busybox-static, or pass --busybox)",
            busybox.display()
        )
    })?;
    let list = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .with_context(|| format!("running {} --list", busybox.display()))?;
    if !list.status.success() {
        bail!("{} --list failed: is it busybox?", busybox.display());
    }
    let applets = String::from_utf8_lossy(&list.stdout).into_owned();
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = |path: &str, mode: u32| -> std::io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(mode);
        h.set_size(0);
        tar.append_data(&mut h, path, std::io::empty())
    };
    for d in [
        "bin",
        "usr",
        "usr/local",
        "usr/local/bin",
        "etc",
        "dev",
        "proc",
        "sys",
        "work",
    ] {
        dir(d, 0o755)?;
    }
    dir("tmp", 0o1777)?;
    let file = |tar: &mut tar::Builder<Vec<u8>>,
                path: &str,
                data: &[u8],
                mode: u32|
     -> std::io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        tar.append_data(&mut h, path, data)
    };
    file(&mut tar, "bin/busybox", &bin, 0o755)?;
    file(
        &mut tar,
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\n",
        0o644,
    )?;
    for (name, script) in ACTIONS {
        file(
            &mut tar,
            &format!("usr/local/bin/{name}"),
            script.as_bytes(),
            0o755,
        )?;
    }
    for applet in applets
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox")
    {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        tar.append_link(&mut h, format!("bin/{applet}"), "busybox")?;
    }
    Ok(tar.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_objects_target_the_given_agent() {
        let yaml = demo_yaml("02:AA:00:00:00:09");
        let docs = crate::apply::documents(&yaml).expect("demo yaml");
        let kinds: Vec<String> = docs
            .iter()
            .map(|d| d.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default())
            .collect();
        assert_eq!(
            kinds,
            ["Namespace", "OSIE", "Hardware", "Template", "Workflow"]
        );
        assert!(yaml.contains("\"02:aa:00:00:00:09\""));
        assert!(!yaml.contains(DEMO_MAC));
    }

    #[test]
    fn the_demo_template_renders_against_the_demo_hardware() {
        let docs = crate::apply::documents(DEMO_YAML).expect("demo yaml");
        let find = |kind: &str| {
            let d = docs
                .iter()
                .find(|d| d.types.as_ref().is_some_and(|t| t.kind == kind))
                .expect(kind);
            serde_json::to_value(d).expect("json")
        };
        let hw: tink_api::v1alpha2::Hardware =
            serde_json::from_value(find("Hardware")).expect("hardware");
        let t: tink_api::v1alpha2::Template =
            serde_json::from_value(find("Template")).expect("template");
        let wf: Workflow = serde_json::from_value(find("Workflow")).expect("workflow");
        let data = tink_render::template_data(&wf, &hw);
        let actions = tink_render::render_actions(&t.spec, &data).expect("render");
        assert_eq!(actions.len(), 4);
        assert_eq!(actions[0].args, ["http://images.example/debian-12.raw.gz"]);
        assert_eq!(
            actions[3].env.get("ROOT_PARTITION").map(String::as_str),
            Some("/dev/nvme0n1p1")
        );
        assert!(
            actions
                .iter()
                .all(|a| a.volumes == ["tink-demo-disk:/work"])
        );
        for a in &actions {
            let script = a
                .cmd
                .as_deref()
                .and_then(|c| c.strip_prefix("/usr/local/bin/"))
                .expect("cmd");
            assert!(
                ACTIONS.iter().any(|(n, _)| *n == script),
                "{script} is not in the image"
            );
        }
    }

    #[test]
    fn the_action_image_holds_busybox_and_the_scripts() {
        let busybox = Path::new("/bin/busybox");
        if !busybox.exists() {
            panic!("/bin/busybox missing: scripts/install-deps.sh installs busybox-static");
        }
        let tar = action_rootfs(busybox).expect("rootfs");
        let mut archive = tar::Archive::new(tar.as_slice());
        let names: Vec<String> = archive
            .entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .display()
                    .to_string()
            })
            .collect();
        for want in [
            "bin/busybox",
            "bin/sh",
            "bin/sha256sum",
            "bin/dd",
            "usr/local/bin/verify",
            "tmp",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
    }
}
