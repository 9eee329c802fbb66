//! `tinkctl rollout status NAME [-n NS] [-w]`: where a WorkflowSet rollout stands.
//!
//! Without `-w` it prints one line (state and counts) and exits 0. With `-w` it follows the set
//! through a watch of that one object, printing a line each time the state or a count changes,
//! until the rollout is `Completed` (exit 0) or `Halted` (exit 1, with the Halted condition's
//! message), the set is deleted (exit 1) or `--timeout-seconds` pass (exit 1). A status the
//! controller has not computed for the current spec yet (`observedGeneration` behind) is shown
//! as waiting, never as done. A watch that breaks (API server restart, expired resourceVersion)
//! is resumed by kube-runtime's watcher with a relist, so no change is missed for good.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use tink_api::v1alpha2::{WorkflowSet, WorkflowSetConditionType, WorkflowSetState};

use crate::kubeconfig::KubeArgs;

/// `tinkctl rollout ...`.
#[derive(Subcommand, Debug)]
pub enum RolloutCommand {
    /// Print a WorkflowSet rollout's state and counts; with -w follow it until it completes
    /// (exit 0) or halts (exit 1).
    Status(StatusArgs),
}

/// Arguments of `tinkctl rollout status`.
#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// The WorkflowSet's name.
    pub name: String,
    /// The WorkflowSet's namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Follow the rollout until it completes or halts.
    #[arg(short, long)]
    pub watch: bool,
    /// With -w: give up after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout_seconds: u64,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Runs a `rollout` subcommand.
pub fn run(cmd: RolloutCommand) -> anyhow::Result<()> {
    let RolloutCommand::Status(args) = cmd;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let client = args.kube.client().await?;
        let api: Api<WorkflowSet> = Api::namespaced(client, &args.namespace);
        if !args.watch {
            let set = api
                .get_opt(&args.name)
                .await
                .with_context(|| format!("reading WorkflowSet {}/{}", args.namespace, args.name))?
                .with_context(|| {
                    format!("WorkflowSet {}/{} not found", args.namespace, args.name)
                })?;
            println!("{}", summary(&set));
            return Ok(());
        }
        let followed = tokio::time::timeout(
            Duration::from_secs(args.timeout_seconds),
            follow(&api, &args.name),
        )
        .await;
        match followed {
            Ok(result) => result,
            Err(_) => anyhow::bail!(
                "gave up after {} s: rollout {} has not finished",
                args.timeout_seconds,
                args.name
            ),
        }
    })
}

/// Follows the set until it is done; prints a line per change.
async fn follow(api: &Api<WorkflowSet>, name: &str) -> anyhow::Result<()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api.clone(), config).default_backoff().boxed();
    let mut last = String::new();
    let mut seen = false;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                // The watcher retries with back-off; say so once per error.
                eprintln!("watching WorkflowSet {name}: {e}; retrying");
                continue;
            }
        };
        let set = match event {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => s,
            watcher::Event::Delete(_) => anyhow::bail!("WorkflowSet {name} was deleted"),
            watcher::Event::Init => continue,
            watcher::Event::InitDone => {
                if !seen {
                    anyhow::bail!("WorkflowSet {name} not found");
                }
                continue;
            }
        };
        seen = true;
        let line = summary(&set);
        if line != last {
            println!("{line}");
            last = line;
        }
        match done(&set) {
            Some(WorkflowSetState::Completed) => return Ok(()),
            Some(WorkflowSetState::Halted) => anyhow::bail!(
                "rollout {name} halted: {}",
                halted_message(&set).unwrap_or("the failure budget is spent")
            ),
            _ => {}
        }
    }
    anyhow::bail!("the watch of WorkflowSet {name} ended")
}

/// Whether the status is current (computed for this generation of the spec).
fn current(set: &WorkflowSet) -> bool {
    let observed = set.status.as_ref().and_then(|s| s.observed_generation);
    set.status.is_some() && observed >= set.metadata.generation
}

/// The final state, when the rollout is done per a current status.
pub fn done(set: &WorkflowSet) -> Option<WorkflowSetState> {
    let state = set.status.as_ref()?.state;
    (current(set) && state.is_done()).then_some(state)
}

fn halted_message(set: &WorkflowSet) -> Option<&str> {
    set.status
        .as_ref()?
        .condition(WorkflowSetConditionType::Halted)?
        .message
        .as_deref()
}

/// One line: the state and the counts.
pub fn summary(set: &WorkflowSet) -> String {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let Some(s) = set.status.as_ref().filter(|_| current(set)) else {
        return format!("rollout {name}: waiting for the controller");
    };
    let mut line = format!(
        "rollout {name}: {} total {} pending {} running {} succeeded {} failed {}",
        s.state, s.total, s.pending, s.running, s.succeeded, s.failed
    );
    if s.unapproved > 0 {
        line.push_str(&format!(" (unapproved {})", s.unapproved));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use tink_api::v1alpha2::WorkflowSetStatus;

    fn set(generation: i64, status: Option<WorkflowSetStatus>) -> WorkflowSet {
        let mut s = WorkflowSet::new("rack1", Default::default());
        s.metadata.generation = Some(generation);
        s.status = status;
        s
    }

    #[test]
    fn lines_and_done() {
        assert_eq!(
            summary(&set(1, None)),
            "rollout rack1: waiting for the controller"
        );
        let status = WorkflowSetStatus {
            state: WorkflowSetState::Halted,
            total: 30,
            pending: 20,
            running: 5,
            succeeded: 2,
            failed: 3,
            unapproved: 1,
            observed_generation: Some(1),
            ..Default::default()
        };
        // Computed for an older spec: not done yet.
        assert_eq!(done(&set(2, Some(status.clone()))), None);
        assert_eq!(
            summary(&set(2, Some(status.clone()))),
            "rollout rack1: waiting for the controller"
        );
        let s = set(1, Some(status));
        assert_eq!(done(&s), Some(WorkflowSetState::Halted));
        assert_eq!(
            summary(&s),
            "rollout rack1: Halted total 30 pending 20 running 5 succeeded 2 failed 3 (unapproved 1)"
        );
    }
}
