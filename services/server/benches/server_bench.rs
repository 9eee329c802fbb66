//! Server benchmarks with a real nats-server and the real `tink-server` binary (release build).
//!
//! ```text
//! cargo bench -p tink-server --bench server-bench -- streams 10000   # idle agent streams, RSS per stream
//! cargo bench -p tink-server --bench server-bench -- events 1000 10  # 1,000 agents publishing for 10 s
//! cargo bench -p tink-server --bench server-bench                    # both, with those defaults
//! ```
//!
//! Every simulated agent has its own HTTP/2 connection, as real machines do, so the streams
//! benchmark needs about `count + 100` file descriptors in this process and in the server:
//! check `ulimit -n` (the benchmark reads the limit and refuses to start below what it needs).

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tink_bus::proto::workflow_service_client::WorkflowServiceClient;
use tink_bus::proto::{Event, GetWorkflowsRequest, PublishEventRequest, event};
use tink_testkit::nats::NatsServer;
use tokio::io::AsyncBufReadExt as _;
use tonic::transport::{Channel, Endpoint};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let number = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i)
            .map(|s| s.parse().with_context(|| format!("`{s}` is not a number")))
            .transpose()
            .map(|n| n.unwrap_or(default))
    };
    match args.first().map(String::as_str) {
        Some("streams") => streams(number(1, 10_000)?, true).await,
        Some("connections") => streams(number(1, 10_000)?, false).await,
        Some("events") => events(number(1, 1_000)?, number(2, 10)?).await,
        None => {
            streams(10_000, true).await?;
            events(1_000, 10).await
        }
        Some(other) => bail!(
            "unknown benchmark `{other}`; use `streams [count]` or `events [agents] [seconds]`"
        ),
    }
}

/// A `tink-server` process.
struct ServerProcess {
    child: tokio::process::Child,
    addr: SocketAddr,
}

impl ServerProcess {
    async fn start(nats_url: &str) -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-server"))
            .args(["--listen", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
            .args(["--nats-url", nats_url, "--replica-id", "bench"])
            .env("RUST_LOG", "warn,tink_server=info")
            .env("TINK_LOG_FORMAT", "text")
            .env("NO_COLOR", "1")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting tink-server")?;
        // tink-telemetry logs to stderr.
        let stderr = child.stderr.take().context("stderr")?;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let addr = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                let line = strip_ansi(&line);
                if line.contains("serving WorkflowService")
                    && let Some(rest) = line.split("addr=").nth(1)
                {
                    let addr = rest.split_whitespace().next().unwrap_or_default();
                    return Ok::<_, anyhow::Error>(addr.parse::<SocketAddr>()?);
                }
            }
            bail!("tink-server exited before serving")
        })
        .await
        .context("tink-server did not start in time")??;
        // Keep draining its output (per-stream log lines) so the pipe never blocks it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ServerProcess { child, addr })
    }

    fn rss_kib(&self) -> anyhow::Result<u64> {
        let pid = self.child.id().context("server exited")?;
        rss_kib(&format!("/proc/{pid}/status"))
    }
}

fn rss_kib(path: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

fn open_files_limit() -> anyhow::Result<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits")?;
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .context("no open files limit")
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

async fn channel(addr: SocketAddr) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?)
}

/// `count` agents each open one GetWorkflows stream and stay idle; reports the server's
/// resident memory per stream. With `open_streams` false only the HTTP/2 connections are made
/// (the transport's share of the cost).
async fn streams(count: usize, open_streams: bool) -> anyhow::Result<()> {
    let need = count as u64 + 200;
    let limit = open_files_limit()?;
    if limit < need {
        bail!(
            "`ulimit -n` is {limit}; {count} streams need at least {need} (raise it, e.g. `ulimit -n {need}`)"
        );
    }
    let nats = NatsServer::start().await?;
    let server = ServerProcess::start(&nats.url()).await?;
    // Let the server settle, then take the baseline.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = server.rss_kib()?;

    let started = Instant::now();
    let opened = Arc::new(AtomicU64::new(0));
    let mut streams = Vec::with_capacity(count);
    // Connect in bounded batches so the accept queue and NATS are not flooded at once.
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..count {
        let addr = server.addr;
        let opened = opened.clone();
        pending.spawn(async move {
            let mut client = WorkflowServiceClient::new(channel(addr).await?);
            let stream = if open_streams {
                Some(
                    client
                        .get_workflows(GetWorkflowsRequest {
                            agent_id: format!("bench-agent-{i:06}"),
                        })
                        .await?
                        .into_inner(),
                )
            } else {
                None
            };
            opened.fetch_add(1, Ordering::Relaxed);
            Ok::<_, anyhow::Error>((client, stream))
        });
        if pending.len() >= 64
            && let Some(done) = pending.join_next().await
        {
            streams.push(done??);
        }
    }
    while let Some(done) = pending.join_next().await {
        streams.push(done??);
    }
    let connect_time = started.elapsed();
    // Idle for a while: heartbeats run, pull requests renew, allocations settle.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = server.rss_kib()?;
    let per_stream = (after.saturating_sub(before)) as f64 * 1024.0 / count as f64;

    let what = if open_streams {
        "streams"
    } else {
        "connections"
    };
    println!("## server-bench {what}");
    println!("idle agent {what}:{:>w$}{count}", "", w = 15 - what.len());
    println!(
        "time to open all:          {:.1} s ({:.0} streams/s)",
        connect_time.as_secs_f64(),
        count as f64 / connect_time.as_secs_f64()
    );
    println!("server RSS before:         {before} KiB");
    println!("server RSS with streams:   {after} KiB");
    println!(
        "RSS per {what}:{:>w$}{:.1} KiB (target <= 32 KiB per stream)",
        "",
        per_stream / 1024.0,
        w = 17 - what.len()
    );
    drop(streams);
    drop(server);
    Ok(())
}

/// `agents` agents publish events as fast as the server confirms them for `seconds`; reports
/// events per second and PublishEvent latency percentiles.
async fn events(agents: usize, seconds: usize) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let server = ServerProcess::start(&nats.url()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for agent in 0..agents {
        let mut client = WorkflowServiceClient::new(channel(server.addr).await?);
        let stop = stop.clone();
        let measuring = measuring.clone();
        tasks.spawn(async move {
            let mut latencies: Vec<u32> = Vec::with_capacity(4096);
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let request = PublishEventRequest {
                    event: Some(Event {
                        workflow_id: format!("bench/wf-{agent}"),
                        event_id: format!("{agent}-{n}"),
                        agent_id: format!("bench-agent-{agent:06}"),
                        event: Some(event::Event::ActionStarted(event::ActionStarted {
                            action_id: format!("action-{}", n % 8),
                        })),
                        ..Default::default()
                    }),
                };
                let t = Instant::now();
                client.publish_event(request).await?;
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                }
            }
            Ok::<_, anyhow::Error>(latencies)
        });
    }
    // Warm up, then measure.
    tokio::time::sleep(Duration::from_secs(2)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds as u64)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        let i = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        f64::from(latencies.get(i).copied().unwrap_or(0)) / 1000.0
    };
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await?);
    let mut stream = js.get_stream(tink_bus::EVENTS_STREAM).await?;
    let stored = stream.info().await?.state.messages;

    println!("## server-bench events");
    println!("agents (connections):      {agents}");
    println!("measured:                  {:.1} s", elapsed.as_secs_f64());
    println!("events confirmed:          {}", latencies.len());
    println!(
        "events/s:                  {:.0} (target >= 20000)",
        latencies.len() as f64 / elapsed.as_secs_f64()
    );
    println!("PublishEvent p50:          {:.2} ms", pct(0.50));
    println!(
        "PublishEvent p99:          {:.2} ms (target < 20 ms)",
        pct(0.99)
    );
    println!("PublishEvent max:          {:.2} ms", pct(1.0));
    println!("events stored in stream:   {stored} (incl. warm-up)");
    drop(server);
    Ok(())
}
