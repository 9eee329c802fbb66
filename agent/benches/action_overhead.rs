//! Agent overhead per action, side by side with `docker run --rm` of the same image and command.
//!
//! `cargo bench -p tink-agent --bench action_overhead [-- ITERATIONS]`
//!
//! Three ways to run the same action (`/bin/sh -c "<script>"` on a local busybox image, host
//! network, not privileged), each `ITERATIONS` times (default 20), one at a time:
//!
//! - `docker run --rm`: the Docker CLI, the baseline.
//! - `runner`: the agent's `DockerRunner::run` alone (image check, create, start, log stream,
//!   wait, remove).
//! - `agent`: the whole path through NATS, a server replica and the agent: per action, from the
//!   agent's `ActionStarted` to its `ActionSucceeded` (their `occurred_at`), in a workflow of
//!   `ITERATIONS` actions dispatched as the controller would.
//!
//! Two scripts: `true` (the fixed cost of a container) and `sleep 1` (overhead over a
//! container's own run time).
#![forbid(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use tink_agent::runtime::ActionOutcome;
use tink_agent::spec::ActionSpec;
use tink_bus::proto::{Workflow, event};
use tink_testkit::nats::NatsServer;
use tokio_util::sync::CancellationToken;

struct Stats {
    mean: Duration,
    p50: Duration,
    p95: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let n = samples.len().max(1);
    let total: Duration = samples.iter().sum();
    let at = |q: f64| {
        samples
            .get(((n as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or_default()
    };
    Stats {
        mean: total / n as u32,
        p50: at(0.5),
        p95: at(0.95),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn docker_cli(script: &str, n: usize) -> Result<Vec<Duration>, BoxError> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let status = tokio::process::Command::new("docker")
            .args([
                "run",
                "--rm",
                "--network",
                "host",
                "--entrypoint",
                "/bin/sh",
                IMAGE,
                "-c",
                script,
            ])
            .stdout(std::process::Stdio::null())
            .status()
            .await?;
        out.push(start.elapsed());
        if !status.success() {
            return Err(format!("docker run failed: {status}").into());
        }
    }
    Ok(out)
}

async fn runner_only(agent: &Agent, script: &str, n: usize) -> Result<Vec<Duration>, BoxError> {
    let spec = ActionSpec {
        id: "bench".into(),
        name: "bench".into(),
        image: IMAGE.into(),
        cmd: Some("/bin/sh".into()),
        args: vec!["-c".into(), script.into()],
        env: Default::default(),
        volumes: Vec::new(),
        pid_mode: None,
        network_mode: None,
        timeout: None,
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let outcome = agent
            .runner
            .run("bench/runner", &spec, &CancellationToken::new())
            .await;
        out.push(start.elapsed());
        if outcome != ActionOutcome::Succeeded {
            return Err(format!("action failed: {outcome:?}").into());
        }
    }
    Ok(out)
}

async fn through_agent(
    js: &async_nats::jetstream::Context,
    agent: &Agent,
    workflow_id: &str,
    script: &str,
    n: usize,
) -> Result<Vec<Duration>, BoxError> {
    let actions = (0..n)
        .map(|i| common::script(&format!("a{i}"), script))
        .collect();
    let wf = Workflow {
        workflow_id: workflow_id.into(),
        actions,
        ..Default::default()
    };
    dispatch(js, &agent.id, &start_command(wf)).await?;
    let last = format!("a{}", n - 1);
    let events = events_until(js, workflow_id, terminal(&last)).await?;
    let mut started = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(n);
    for e in &events {
        let at = e.occurred_at.ok_or("event without occurred_at")?;
        let at = Duration::new(at.seconds as u64, at.nanos as u32);
        match &e.event {
            Some(event::Event::ActionStarted(s)) => {
                started.insert(s.action_id.clone(), at);
            }
            Some(event::Event::ActionSucceeded(s)) => {
                let begin = started
                    .get(&s.action_id)
                    .ok_or("succeeded before started")?;
                out.push(at.saturating_sub(*begin));
            }
            _ => return Err(format!("unexpected event {}", describe(e)).into()),
        }
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(20)
        .max(1);
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "bench-server").await?;
    let Some(agent) = Agent::start("02:00:00:00:0b:01", &[server.addr]).await? else {
        return Err("Docker is required for this benchmark".into());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "bench-server").await?;

    // Warm up the engine and the image cache.
    docker_cli("true", 2).await?;
    runner_only(&agent, "true", 2).await?;

    println!("agent overhead per action, {n} iterations each, image {IMAGE}");
    println!(
        "{:<12} {:<22} {:>10} {:>10} {:>10} {:>16}",
        "script", "path", "mean", "p50", "p95", "mean vs docker"
    );
    for (i, script) in ["true", "sleep 1"].into_iter().enumerate() {
        let baseline = stats(docker_cli(script, n).await?);
        let runner = stats(runner_only(&agent, script, n).await?);
        let full = stats(through_agent(&js, &agent, &format!("bench/wf-{i}"), script, n).await?);
        for (name, s) in [
            ("docker run --rm", &baseline),
            ("runner (bollard)", &runner),
            ("agent (gRPC+NATS path)", &full),
        ] {
            let ratio = s.mean.as_secs_f64() / baseline.mean.as_secs_f64();
            println!(
                "{:<12} {:<22} {:>10} {:>10} {:>10} {:>15.2}x",
                script,
                name,
                ms(s.mean),
                ms(s.p50),
                ms(s.p95),
                ratio
            );
        }
    }
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}
