//! `kube-lite-bench`: write throughput and watch fan-out of an in-process kube-lite, measured
//! through the real `kube` client over loopback HTTP.
//!
//! `cargo run --release -p kube-lite --bin kube-lite-bench -- [--writes N] [--concurrency C]
//! [--watchers W] [--events E] [--data-dir DIR]`
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[derive(Debug, Parser)]
#[command(name = "kube-lite-bench")]
struct Args {
    /// ConfigMaps to create (then patch once each).
    #[arg(long, default_value_t = 20_000)]
    writes: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Watchers for the fan-out run.
    #[arg(long, default_value_t = 20)]
    watchers: usize,
    /// Writes observed by every watcher in the fan-out run.
    #[arg(long, default_value_t = 2_000)]
    events: usize,
    /// Benchmark with persistence to this directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"bench": "yes"}}, "data": {"k": "v"}}),
    )
    .unwrap_or_default()
}

async fn run_writers<F, Fut>(n: usize, concurrency: usize, f: F) -> anyhow::Result<Duration>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let f = f.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                f(i).await?;
            }
        }));
    }
    for t in tasks {
        t.await.context("writer task")??;
    }
    Ok(start.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = kube_lite::Config {
        data_dir: args.data_dir.clone(),
        ..Default::default()
    };
    let server = kube_lite::Server::start(config)
        .await
        .context("starting kube-lite")?;
    let client = server.client()?;
    println!(
        "kube-lite-bench: {} writes, {} concurrent writers, {} watchers x {} events{}",
        args.writes,
        args.concurrency,
        args.watchers,
        args.events,
        if args.data_dir.is_some() {
            ", persistence on"
        } else {
            ", in memory"
        }
    );

    // 1. Creates.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = api.clone();
    let took = run_writers(args.writes, args.concurrency, move |i| {
        let a = a.clone();
        async move {
            a.create(&PostParams::default(), &cm(&format!("c{i}")))
                .await
                .context("create")?;
            Ok(())
        }
    })
    .await?;
    println!(
        "creates:       {:>8.0} writes/s ({} in {:.2?})",
        args.writes as f64 / took.as_secs_f64(),
        args.writes,
        took
    );

    // 2. Merge patches of existing objects.
    let a = api.clone();
    let took = run_writers(args.writes, args.concurrency, move |i| {
        let a = a.clone();
        async move {
            a.patch(
                &format!("c{i}"),
                &PatchParams::default(),
                &Patch::Merge(&json!({"data": {"k": "w"}})),
            )
            .await
            .context("patch")?;
            Ok(())
        }
    })
    .await?;
    println!(
        "merge patches: {:>8.0} writes/s ({} in {:.2?})",
        args.writes as f64 / took.as_secs_f64(),
        args.writes,
        took
    );

    // 3. Watch fan-out: W watchers each see every one of E writes.
    let fan: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let rv = fan
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let sent: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let fan = fan.clone();
        let rv = rv.clone();
        let sent = sent.clone();
        let want = args.events;
        watchers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(want);
            let mut stream = Box::pin(fan.watch(&WatchParams::default().timeout(290), &rv).await?);
            while lat.len() < want {
                match stream.try_next().await? {
                    Some(WatchEvent::Added(o)) => {
                        let now = Instant::now();
                        let name = o.metadata.name.unwrap_or_default();
                        let t0 = sent.lock().map(|m| m.get(&name).copied()).ok().flatten();
                        lat.push(
                            t0.map(|t| now.saturating_duration_since(t))
                                .unwrap_or_default(),
                        );
                    }
                    Some(_) => {}
                    None => anyhow::bail!("watch ended early"),
                }
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    // Let the watches connect before writing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = fan.clone();
    let s = sent.clone();
    let start = Instant::now();
    run_writers(args.events, args.concurrency, move |i| {
        let a = a.clone();
        let s = s.clone();
        async move {
            let name = format!("f{i}");
            if let Ok(mut m) = s.lock() {
                m.insert(name.clone(), Instant::now());
            }
            a.create(&PostParams::default(), &cm(&name))
                .await
                .context("fan-out create")?;
            Ok(())
        }
    })
    .await?;
    let mut all = Vec::new();
    for w in watchers {
        all.extend(w.await.context("watcher task")??);
    }
    let took = start.elapsed();
    all.sort();
    println!(
        "watch fan-out: {} watchers x {} events = {} deliveries in {:.2?} ({:.0} events/s delivered); write-to-watcher latency p50 {:.2?}, p99 {:.2?}",
        args.watchers,
        args.events,
        all.len(),
        took,
        all.len() as f64 / took.as_secs_f64(),
        percentile(&all, 0.50),
        percentile(&all, 0.99),
    );
    server.shutdown().await;
    Ok(())
}
