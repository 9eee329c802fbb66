//! The console's benchmark (BENCHMARKS.md, "Console: issue 16"):
//! `cargo bench -p tink-console --bench console-bench [-- --renders 300 --clients 100 --rate 200 --seconds 20]`
//!
//! 1. The machines page with 10,000 Hardware and 10,000 Workflows: server time of the handler
//!    (session from the review cache, visibility, tiles, askama rendering), p50/p99/max.
//! 2. Live updates: `--clients` browsers' streams (`/live/machines` over HTTP on loopback)
//!    while `--rate` workflows change per second: the time from the watch delivering a change
//!    (before the fragment is rendered) to each client reading it, p50/p99/max.
//!
//! The caches are filled directly (no watches); the token and access reviews are answered by
//! kube-lite once and then come from the console's review cache, as in a steady state.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue};
use http_body_util::BodyExt as _;
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Workflow};
use tink_console::cache::Cache;
use tink_console::feed::Feed;
use tink_console::http::MachinesQuery;
use tink_console::live::Live;
use tokio_util::sync::CancellationToken;

const MACHINES: usize = 10_000;
const NS: &str = "bench";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn machine(i: usize) -> Hardware {
    tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": format!("m{i:05}"), "namespace": NS, "labels": {"rack": format!("r{}", i / 40)}},
        "spec": {"networkInterfaces": {format!("02:00:00:00:{:02x}:{:02x}", i / 256, i % 256):
            {"dhcp": {"ip": format!("10.1.{}.{}", i / 250, i % 250 + 1), "netmask": "255.255.0.0"}}}},
    }))
    .expect("hardware")
}

fn workflow(i: usize, state: &str, actions_done: usize) -> Workflow {
    let actions: Vec<_> = ["stream", "partition", "kexec"]
        .iter()
        .enumerate()
        .map(|(n, a)| {
            let s = if n < actions_done { "Succeeded" } else if n == actions_done && state == "Running" { "Running" } else { "Pending" };
            json!({"rendered": {"name": a, "image": "busybox"}, "id": a, "state": s, "startedAt": "2026-01-01T00:00:00Z"})
        })
        .collect();
    tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": format!("wf-{i:05}"), "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"hardwareRef": {"name": format!("m{i:05}")}, "templateRef": {"name": "ubuntu"}},
        "status": {"state": state, "startedAt": "2026-01-01T00:00:00Z", "actions": actions},
    }))
    .expect("workflow")
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let p = |q: f64| {
        v[((v.len() as f64 * q).ceil() as usize)
            .saturating_sub(1)
            .min(v.len() - 1)]
    };
    format!(
        "n={} p50={:.1}ms p99={:.1}ms max={:.1}ms",
        v.len(),
        p(0.50).as_secs_f64() * 1e3,
        p(0.99).as_secs_f64() * 1e3,
        v[v.len() - 1].as_secs_f64() * 1e3
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let renders = arg("--renders", 300) as usize;
    let clients = arg("--clients", 100) as usize;
    let rate = arg("--rate", 200);
    let seconds = arg("--seconds", 20);

    let kube = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let uri: http::Uri = kube.url().parse().expect("uri");
    let config = kube::Config::new(uri);
    let client = kube::Client::try_from(config.clone()).expect("client");

    let (cache, mut writers) = Cache::new(100);
    let states = ["Succeeded", "Running", "Failed", "Pending", "Scheduled"];
    Cache::fill(
        &mut writers,
        &cache,
        (0..MACHINES).map(machine).collect(),
        (0..MACHINES)
            .map(|i| workflow(i, states[i % states.len()], i % 3))
            .collect(),
    );
    let metrics = tink_console::Metrics::default();
    let live = Arc::new(Live::new(4096, metrics.clone()));
    let feed = Feed::new(cache.clone(), live.clone());
    let shutdown = CancellationToken::new();
    let state = tink_console::AppState::new(
        cache.clone(),
        live.clone(),
        tink_console::access::Access::new(client, Duration::from_secs(3600)),
        metrics,
        config,
        tink_console::HttpSettings {
            secure_cookies: false,
            sse_max_clients: clients + 10,
            // every simulated browser is the same user
            sse_max_clients_per_user: clients + 10,
            limits: tink_console::StreamLimits {
                keepalive: Duration::from_secs(15),
                max_age: Duration::from_secs(3600),
                recheck: Duration::from_secs(30),
            },
            logs: None,
        },
        shutdown.clone(),
    );

    // 1. The machines page.
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_static("Bearer kube-lite"),
    );
    let q = MachinesQuery::default();
    let first = state.machines_page(&headers, &q).await.expect("page");
    let size = first
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .len();
    let mut times = Vec::with_capacity(renders);
    for _ in 0..renders {
        let t = Instant::now();
        let page = state.machines_page(&headers, &q).await.expect("page");
        // The body is rendered inside the handler; collecting it only moves the bytes.
        let _ = page.into_body().collect().await;
        times.push(t.elapsed());
    }
    println!(
        "machines page, {MACHINES} Hardware + {MACHINES} Workflows ({} KiB): {}",
        size / 1024,
        percentiles(times)
    );

    // 2. Live updates over HTTP.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(tink_console::http::serve(
        listener,
        tink_console::router(state),
        shutdown.clone(),
    ));
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut readers = Vec::new();
    let connected = Arc::new(tokio::sync::Barrier::new(clients + 1));
    for _ in 0..clients {
        let (sent, latencies, connected) = (sent.clone(), latencies.clone(), connected.clone());
        readers.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let io = hyper_util::rt::TokioIo::new(stream);
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("handshake");
            tokio::spawn(conn);
            let req = http::Request::get("/live/machines")
                .header("host", addr.to_string())
                .header("authorization", "Bearer kube-lite")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .expect("request");
            let res = sender.send_request(req).await.expect("send");
            assert_eq!(res.status(), 200);
            let mut body = res.into_body();
            connected.wait().await;
            let mut buf = String::new();
            let mut mine = Vec::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let now = Instant::now();
                buf.push_str(&String::from_utf8_lossy(&data));
                while let Some(end) = buf.find("\n\n") {
                    let event: String = buf.drain(..end + 2).collect();
                    if let Some(start) = event.find("\"id\":\"m/") {
                        let rest = &event[start + 6..];
                        let id = &rest[..rest.find('"').unwrap_or(0)];
                        if let Some(t) = sent.lock().unwrap().get(id) {
                            mine.push(now.duration_since(*t));
                        }
                    }
                    if event.contains("event: resync") {
                        eprintln!("a client was told to resync (fell behind)");
                    }
                }
                if mine.len() as u64 >= rate * seconds {
                    break;
                }
            }
            latencies.lock().unwrap().extend(mine);
        }));
    }
    connected.wait().await;
    let total = (rate * seconds) as usize;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let started = Instant::now();
    for n in 0..total {
        tick.tick().await;
        let i = n % MACHINES;
        let w = workflow(i, "Running", (n / MACHINES) % 3);
        let id = tink_console::views::tile_id(NS, &format!("m{i:05}"));
        let t = Instant::now();
        sent.lock().unwrap().insert(id, t);
        feed.apply(cache.apply_workflow(&mut writers, &w));
    }
    let elapsed = started.elapsed();
    for r in readers {
        let _ = tokio::time::timeout(Duration::from_secs(30), r).await;
    }
    let latencies = std::mem::take(&mut *latencies.lock().unwrap());
    println!(
        "live updates, {clients} clients, {total} workflow changes in {:.1}s ({:.0}/s), {} deliveries (of {}): {}",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        latencies.len(),
        total * clients,
        percentiles(latencies)
    );
    shutdown.cancel();
}
