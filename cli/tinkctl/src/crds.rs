//! `tinkctl crds`: the generated CRD manifests.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use tink_api::ConversionWebhook;

/// Arguments of `tinkctl crds`.
#[derive(Args, Debug, Clone)]
pub struct CrdsArgs {
    /// Write one `<plural>.<group>.yaml` file per CRD into this directory (created if
    /// missing) instead of printing a multi-document YAML stream to stdout.
    #[arg(long, env = "TINKCTL_CRDS_OUT")]
    pub out: Option<PathBuf>,

    /// Namespace of the conversion webhook Service.
    #[arg(long, env = "TINK_WEBHOOK_NAMESPACE", default_value = "tink-system")]
    pub webhook_namespace: String,

    /// Name of the conversion webhook Service.
    #[arg(long, env = "TINK_WEBHOOK_SERVICE", default_value = "tink-webhook")]
    pub webhook_service: String,

    /// URL path of the conversion endpoint.
    #[arg(long, env = "TINK_WEBHOOK_PATH", default_value = "/convert")]
    pub webhook_path: String,

    /// Port of the conversion webhook Service.
    #[arg(long, env = "TINK_WEBHOOK_PORT", default_value_t = 443)]
    pub webhook_port: i32,

    /// PEM CA bundle to inject as the conversion webhook's caBundle.
    #[arg(long, env = "TINK_WEBHOOK_CA")]
    pub webhook_ca: Option<PathBuf>,

    /// Apply them to the cluster (server-side apply) instead of printing them, waiting up to
    /// `--wait-seconds` for the API server to answer (a compose or init job).
    #[arg(long)]
    pub apply: bool,

    /// With --apply: how long to wait for the API server.
    #[arg(long, default_value_t = 60)]
    pub wait_seconds: u64,

    #[command(flatten)]
    pub kube: crate::kubeconfig::KubeArgs,
}

impl CrdsArgs {
    fn webhook(&self) -> anyhow::Result<ConversionWebhook> {
        let ca_bundle = match &self.webhook_ca {
            Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
            None => None,
        };
        Ok(ConversionWebhook {
            namespace: self.webhook_namespace.clone(),
            name: self.webhook_service.clone(),
            path: self.webhook_path.clone(),
            port: self.webhook_port,
            ca_bundle,
        })
    }
}

/// Applies the CRDs (and the webhook's namespace) once the API server answers.
async fn apply(args: &CrdsArgs, yaml: &str, stdout: &mut impl Write) -> anyhow::Result<()> {
    let client = args.kube.client().await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.wait_seconds);
    while let Err(e) = client.apiserver_version().await {
        if std::time::Instant::now() > deadline {
            return Err(anyhow::Error::new(e).context("the API server does not answer"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let ns = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {}\n---\n",
        args.webhook_namespace
    );
    let objects = crate::apply::documents(&format!("{ns}{yaml}"))?;
    for applied in crate::apply::apply_all(&client, &objects).await? {
        writeln!(stdout, "applied {applied}")?;
    }
    Ok(())
}

/// Prints the CRDs to `stdout`, writes them into `--out`, or applies them (`--apply`).
pub fn run(args: &CrdsArgs, stdout: &mut impl Write) -> anyhow::Result<()> {
    let files = tink_api::render_crds(&args.webhook()?)?;
    if args.apply {
        let yaml: Vec<&str> = files.iter().map(|(_, y)| y.as_str()).collect();
        let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
        return rt.block_on(apply(args, &yaml.join("---\n"), stdout));
    }
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in &files {
                let path = dir.join(name);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
                writeln!(stdout, "wrote {}", path.display())?;
            }
        }
        None => {
            for (i, (_, yaml)) in files.iter().enumerate() {
                if i > 0 {
                    writeln!(stdout, "---")?;
                }
                stdout.write_all(yaml.as_bytes())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: CrdsArgs,
    }

    #[test]
    fn writes_one_file_per_crd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = Wrapper::parse_from([
            "crds",
            "--out",
            &dir.path().display().to_string(),
            "--webhook-port",
            "9443",
        ]);
        let mut out = Vec::new();
        run(&w.args, &mut out).expect("run");
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "hardware.tinkerbell.org.yaml",
                "jobs.bmc.tinkerbell.org.yaml",
                "machines.bmc.tinkerbell.org.yaml",
                "osies.tinkerbell.org.yaml",
                "tasks.bmc.tinkerbell.org.yaml",
                "templates.tinkerbell.org.yaml",
                "tinkerbellclusters.infrastructure.cluster.x-k8s.io.yaml",
                "tinkerbellmachines.infrastructure.cluster.x-k8s.io.yaml",
                "tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io.yaml",
                "workflowrulesets.tinkerbell.org.yaml",
                "workflows.tinkerbell.org.yaml",
                "workflowsets.tinkerbell.org.yaml"
            ]
        );
        let wf = std::fs::read_to_string(dir.path().join("workflows.tinkerbell.org.yaml"))
            .expect("read");
        assert!(wf.contains("port: 9443"));
    }

    #[test]
    fn prints_a_yaml_stream() {
        let w = Wrapper::parse_from(["crds"]);
        let mut out = Vec::new();
        run(&w.args, &mut out).expect("run");
        let text = String::from_utf8(out).expect("utf8");
        // tinkerbell.org's six (with WorkflowRuleSet and WorkflowSet), the Cluster API
        // provider's three and Rufio's three (bmc.tinkerbell.org).
        assert_eq!(text.matches("kind: CustomResourceDefinition").count(), 12);
        assert_eq!(text.matches("\n---\n").count(), 11);
    }
}
