//! Rollout benchmark (issue 31): a WorkflowSet over N simulated agents at maxConcurrent C keeps
//! C Workflows going. The whole path in one process, through the test stack of
//! services/controller/tests (kube-lite with the generated CRDs, a real nats-server with
//! deploy's users, the real tink-server, the controller), agents simulated over gRPC.
//!
//! `cargo bench -p tink-controller --bench rollout-bench -- [--agents N] [--max-concurrent C]
//! [--hold-ms H]`
//!
//! Each agent runs each of the Template's three actions for H/3 ms (default H = 3000). A watch
//! of the set's Workflows keeps the exact count of unfinished ones (Pending, Scheduled,
//! Running, Cancelling: what `maxConcurrent` bounds) and of those in state Running; the count
//! is sampled every 100 ms. Reported: the maximum at any watch event (must not exceed C), min
//! and mean of the samples while work remains (some machine still without a Workflow), the
//! time to the first C unfinished, and the total time to `Completed`.

// The test stack (its own `#![allow(dead_code)]` covers what the bench does not use).
#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Agent, Command, Stack, state_of};
use futures::StreamExt as _;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tink_api::v1alpha2::{
    Hardware, WORKFLOW_SET_LABEL, WorkflowSet, WorkflowSetState, WorkflowState,
};

const NS: &str = common::NS;

struct Args {
    agents: usize,
    max_concurrent: usize,
    hold: Duration,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        agents: 1000,
        max_concurrent: 200,
        hold: Duration::from_millis(3000),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<u64> {
            let v = it
                .next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))?;
            v.parse().map_err(|e| anyhow::anyhow!("{name} {v:?}: {e}"))
        };
        match a.as_str() {
            "--agents" => args.agents = usize::try_from(value("--agents")?)?,
            "--max-concurrent" => {
                args.max_concurrent = usize::try_from(value("--max-concurrent")?)?
            }
            "--hold-ms" => args.hold = Duration::from_millis(value("--hold-ms")?),
            // cargo bench passes --bench.
            "--bench" => {}
            other => anyhow::bail!(
                "unknown argument {other:?}; usage: rollout-bench [--agents N] [--max-concurrent C] [--hold-ms H]"
            ),
        }
    }
    Ok(args)
}

/// What the watch keeps.
#[derive(Default)]
struct Counts {
    states: BTreeMap<String, WorkflowState>,
    max_unfinished: usize,
}

impl Counts {
    fn unfinished(&self) -> usize {
        self.states.values().filter(|s| !s.is_terminal()).count()
    }
    fn running(&self) -> usize {
        self.states
            .values()
            .filter(|s| **s == WorkflowState::Running)
            .count()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let stack = Stack::start().await;
    let _controller = stack.leader("c0").await;
    stack
        .create_template("install", common::three_actions())
        .await;
    let hardware: Api<Hardware> = Api::namespaced(stack.client.clone(), NS);
    let macs: Vec<String> = (0..args.agents)
        .map(|i| {
            format!(
                "aa:bb:{:02x}:{:02x}:{:02x}:01",
                i / 65536,
                (i / 256) % 256,
                i % 256
            )
        })
        .collect();
    for (i, mac) in macs.iter().enumerate() {
        let hw: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": format!("m{i:05}"), "namespace": NS, "labels": {"rack": "bench"}},
            "spec": {
                "networkInterfaces": {mac: {"dhcp": {"ip": "10.0.0.2", "netmask": "255.255.255.0"}}},
                "storageDevices": ["/dev/sda"],
            },
        }))?;
        hardware.create(&PostParams::default(), &hw).await?;
    }
    eprintln!("{} Hardware created; connecting the agents", args.agents);
    let connect = Instant::now();
    let agents: Vec<Agent> = futures::stream::iter(macs.iter())
        .map(|m| stack.agent(m))
        .buffer_unordered(32)
        .collect()
        .await;
    eprintln!(
        "{} agents connected in {:.1} s",
        agents.len(),
        connect.elapsed().as_secs_f64()
    );
    let step = args.hold / 3;
    for mut agent in agents {
        tokio::spawn(async move {
            while let Some(cmd) = agent.next_command_forever().await {
                let Command::Start {
                    workflow_id,
                    actions,
                    ..
                } = cmd
                else {
                    continue;
                };
                agent.received(&workflow_id).await;
                for a in actions {
                    agent.started(&workflow_id, &a.id).await;
                    tokio::time::sleep(step).await;
                    agent.succeeded(&workflow_id, &a.id).await;
                }
            }
        });
    }

    // The watch of the set's Workflows.
    let counts = Arc::new(Mutex::new(Counts::default()));
    {
        let counts = counts.clone();
        let config = watcher::Config::default().labels(&format!("{WORKFLOW_SET_LABEL}=bench"));
        let api = stack.workflows();
        tokio::spawn(async move {
            let mut stream = watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
                match event {
                    Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) => {
                        c.states.insert(w.name_any(), state_of(&w));
                    }
                    Ok(watcher::Event::Delete(w)) => {
                        c.states.remove(&w.name_any());
                    }
                    _ => continue,
                }
                let u = c.unfinished();
                c.max_unfinished = c.max_unfinished.max(u);
            }
        });
    }

    let set: WorkflowSet = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
        "metadata": {"name": "bench", "namespace": NS},
        "spec": {"hardwareSelector": {"matchLabels": {"rack": "bench"}},
            "templateRef": {"name": "install"}, "maxConcurrent": args.max_concurrent,
            "templateData": {"image_server": "10.0.0.1:8080"}},
    }))?;
    let sets: Api<WorkflowSet> = Api::namespaced(stack.client.clone(), NS);
    let start = Instant::now();
    sets.create(&PostParams::default(), &set).await?;

    let mut samples: Vec<(usize, usize)> = Vec::new();
    // The same, from the first time C were unfinished on (the ramp-up left out).
    let mut filled: Vec<(usize, usize)> = Vec::new();
    let mut full_at: Option<Duration> = None;
    let mut timeline: Vec<String> = Vec::new();
    let mut ticks = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let done = loop {
        tick.tick().await;
        let (unfinished, running, created) = {
            let c = counts.lock().unwrap_or_else(|p| p.into_inner());
            (c.unfinished(), c.running(), c.states.len())
        };
        if full_at.is_none() && unfinished >= args.max_concurrent {
            full_at = Some(start.elapsed());
        }
        // While work remains: some machine still has no Workflow (from the first Workflow on).
        if created > 0 && created < args.agents {
            samples.push((unfinished, running));
            if full_at.is_some() {
                filled.push((unfinished, running));
            }
        }
        ticks += 1;
        if ticks % 10 == 1 {
            timeline.push(format!(
                "{:>6.1}s unfinished {unfinished:>4} running {running:>4} created {created:>5}",
                start.elapsed().as_secs_f64()
            ));
        }
        let s = sets.get("bench").await?;
        if ticks % 50 == 1 {
            let st = s.status.clone().unwrap_or_default();
            eprintln!(
                "{:>6.1}s set {} pending {} running {} succeeded {}; watch: unfinished {unfinished} created {created}",
                start.elapsed().as_secs_f64(),
                st.state,
                st.pending,
                st.running,
                st.succeeded
            );
        }
        if s.status.as_ref().map(|s| s.state) == Some(WorkflowSetState::Completed)
            && s.status.as_ref().map(|s| s.succeeded) == i32::try_from(args.agents).ok()
        {
            break start.elapsed();
        }
        if start.elapsed() > Duration::from_secs(1800) {
            anyhow::bail!("the rollout did not complete within 30 minutes");
        }
    };
    let wfs = stack
        .workflows()
        .list(&ListParams::default().labels(&format!("{WORKFLOW_SET_LABEL}=bench")))
        .await?;
    let succeeded = wfs
        .items
        .iter()
        .filter(|w| state_of(w) == WorkflowState::Succeeded)
        .count();
    let max = counts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .max_unfinished;
    let stats = |samples: &[(usize, usize)], pick: fn(&(usize, usize)) -> usize| {
        let min = samples.iter().map(pick).min().unwrap_or(0);
        let mean = if samples.is_empty() {
            0.0
        } else {
            samples.iter().map(pick).sum::<usize>() as f64 / samples.len() as f64
        };
        (min, mean)
    };
    for line in &timeline {
        println!("{line}");
    }
    println!(
        "rollout of {} agents at maxConcurrent {}, actions held {} ms in all:",
        args.agents,
        args.max_concurrent,
        args.hold.as_millis()
    );
    println!(
        "  total {:.1} s; first {} unfinished {}; {succeeded} Workflows Succeeded; max unfinished at any watch event {max}",
        done.as_secs_f64(),
        args.max_concurrent,
        match full_at {
            Some(t) => format!("after {:.2} s", t.as_secs_f64()),
            None => "never".into(),
        }
    );
    for (what, samples) in [
        ("from the first Workflow", &samples),
        ("after the first fill", &filled),
    ] {
        let (umin, umean) = stats(samples, |s| s.0);
        let (rmin, rmean) = stats(samples, |s| s.1);
        println!(
            "  while machines waited, {what} ({} samples at 100 ms): unfinished (what maxConcurrent bounds) min {umin} mean {umean:.1}; in state Running min {rmin} mean {rmean:.1}",
            samples.len()
        );
    }
    anyhow::ensure!(max <= args.max_concurrent, "maxConcurrent exceeded: {max}");
    stack.stop().await;
    Ok(())
}
