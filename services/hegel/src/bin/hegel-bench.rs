//! Hegel's benchmark: requests per second and p99 latency of `user-data` and
//! `meta-data/instance-id` with 10,000 Hardware loaded, measured with wrk side by side with
//! nginx serving the same bytes as static files.
//!
//! ```text
//! cargo run --release -p hegel --features bench --bin hegel-bench -- [--hardware 10000]
//!     [--seconds 10] [--connections 32] [--wrk-threads 1] [--server-threads 2]
//! ```
//!
//! Needs `wrk` and `nginx` (Debian packages) on the PATH or in /usr/sbin. The index is filled
//! in process (the same [`hegel::Index`] the watch feeds) and served by the same router and
//! server as the binary; the rate limit is off (wrk is one client address).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use serde_json::json;
use tink_api::v1alpha2::Hardware;

#[derive(Debug, Parser)]
struct Args {
    /// Hardware in the index.
    #[arg(long, default_value_t = 10_000)]
    hardware: u32,
    /// Seconds per wrk run.
    #[arg(long, default_value_t = 10)]
    seconds: u32,
    /// wrk connections.
    #[arg(long, default_value_t = 32)]
    connections: u32,
    /// wrk threads.
    #[arg(long, default_value_t = 1)]
    wrk_threads: u32,
    /// Tokio worker threads of Hegel, and nginx worker processes.
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
}

/// The user data served by both (a typical cloud-config, ~1.5 KiB).
fn user_data() -> String {
    let mut s = String::from("#cloud-config\nhostname: bench-0\nusers:\n");
    for i in 0..16 {
        s.push_str(&format!(
            "  - name: user{i}\n    ssh_authorized_keys: [\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{i:05} u{i}@bench\"]\n"
        ));
    }
    s
}

fn hardware(i: u32, ip: &str, user_data: Option<&str>) -> anyhow::Result<Hardware> {
    let mac = format!(
        "02:00:{:02x}:{:02x}:{:02x}:{:02x}",
        (i >> 24) & 0xff,
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    );
    let mut spec =
        json!({"networkInterfaces": {mac: {"dhcp": {"ip": ip, "hostname": format!("bench-{i}")}}}});
    if let Some(u) = user_data {
        spec["instance"] = json!({"userdata": u});
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": format!("bench-{i}"), "namespace": "bench", "uid": format!("uid-{i:08}")},
        "spec": spec,
    }))?)
}

struct Wrk {
    rps: f64,
    p99_ms: f64,
    non_2xx: u64,
}

fn ms(value: &str) -> Option<f64> {
    let (num, factor) = if let Some(v) = value.strip_suffix("us") {
        (v, 0.001)
    } else if let Some(v) = value.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = value.strip_suffix('s') {
        (v, 1000.0)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|n| n * factor)
}

fn wrk(args: &Args, url: &str) -> anyhow::Result<Wrk> {
    let out = Command::new("wrk")
        .arg(format!("-t{}", args.wrk_threads))
        .arg(format!("-c{}", args.connections))
        .arg(format!("-d{}s", args.seconds))
        .arg("--latency")
        .arg(url)
        .output()
        .context("running wrk (apt-get install wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    let rps = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no Requests/sec in wrk's output:\n{text}"))?;
    let p99_ms = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .and_then(|v| ms(v.trim()))
        .with_context(|| format!("no 99% latency in wrk's output:\n{text}"))?;
    let non_2xx = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Non-2xx or 3xx responses:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok(Wrk {
        rps,
        p99_ms,
        non_2xx,
    })
}

struct Nginx {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM to the master: it stops its workers (SIGKILL would orphan them).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> PathBuf {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    PathBuf::from("nginx")
}

fn start_nginx(dir: &Path, workers: usize, body: &str, instance_id: &str) -> anyhow::Result<Nginx> {
    let root = dir.join("root");
    for v in ["2009-04-04"] {
        std::fs::create_dir_all(root.join(v).join("meta-data"))?;
        std::fs::write(root.join(v).join("user-data"), body)?;
        std::fs::write(root.join(v).join("meta-data/instance-id"), instance_id)?;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes {workers};\npid {pid};\nerror_log {err} warn;\ndaemon off;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n\
               default_type application/octet-stream;\n\
               client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n  fastcgi_temp_path {tmp}/fastcgi;\n  uwsgi_temp_path {tmp}/uwsgi;\n  scgi_temp_path {tmp}/scgi;\n\
               server {{ listen {addr}; root {root}; }}\n}}\n",
            pid = dir.join("nginx.pid").display(),
            err = dir.join("error.log").display(),
            tmp = dir.display(),
            root = root.display(),
        ),
    )?;
    let child = Command::new(nginx_binary())
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting nginx (apt-get install nginx-light)")?;
    let nginx = Nginx { child, addr };
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(nginx);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "nginx did not start; see {}",
        dir.join("error.log").display()
    )
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let body = user_data();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.server_threads.max(1))
        .enable_all()
        .build()?;

    // The index: N Hardware on 10.x.y.z, plus the caller (127.0.0.1) among them.
    let (osies, _writer) = kube::runtime::reflector::store();
    let index = Arc::new(hegel::Index::new(osies));
    let started = std::time::Instant::now();
    for i in 1..args.hardware {
        let ip = format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
        index.upsert(&hardware(i, &ip, Some("#cloud-config\n"))?);
    }
    index.upsert(&hardware(0, "127.0.0.1", Some(&body))?);
    index.mark_synced();
    let loaded = started.elapsed();
    let instance_id = "uid-00000000";

    let state = hegel::AppState::new(
        index.clone(),
        hegel::Metrics::default(),
        hegel::TrustedProxies::default(),
        hegel::IpxeConfig::new("127.0.0.1:42113"),
        hegel::RateLimit {
            per_second: 0,
            burst: 0,
        },
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hegel_addr = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(hegel::http::serve(listener, state, shutdown.clone()));
        anyhow::Ok(addr)
    })?;

    let dir = tempfile::tempdir()?;
    let nginx = start_nginx(dir.path(), args.server_threads.max(1), &body, instance_id)?;

    // Both serve the same bytes.
    for path in ["/2009-04-04/user-data", "/2009-04-04/meta-data/instance-id"] {
        let h = fetch(hegel_addr, path)?;
        let n = fetch(nginx.addr, path)?;
        if h != n {
            bail!("hegel and nginx serve different bodies for {path}");
        }
    }

    println!(
        "hegel-bench: {} Hardware loaded in {:.0} ms; wrk -t{} -c{} -d{}s --latency; {} server threads / nginx workers; user-data {} bytes",
        args.hardware,
        loaded.as_secs_f64() * 1000.0,
        args.wrk_threads,
        args.connections,
        args.seconds,
        args.server_threads,
        body.len()
    );
    println!("| endpoint | hegel req/s | hegel p99 | nginx req/s | nginx p99 | hegel / nginx |");
    println!("|---|---|---|---|---|---|");
    for path in ["/2009-04-04/user-data", "/2009-04-04/meta-data/instance-id"] {
        let h = wrk(&args, &format!("http://{hegel_addr}{path}"))?;
        let n = wrk(&args, &format!("http://{}{path}", nginx.addr))?;
        if h.non_2xx > 0 || n.non_2xx > 0 {
            bail!(
                "non-2xx responses: hegel {}, nginx {}",
                h.non_2xx,
                n.non_2xx
            );
        }
        println!(
            "| `{path}` | {:.0} | {:.2} ms | {:.0} | {:.2} ms | {:.2} |",
            h.rps,
            h.p99_ms,
            n.rps,
            n.p99_ms,
            h.rps / n.rps
        );
    }
    shutdown.cancel();
    drop(nginx);
    Ok(())
}

/// One `GET` with `Connection: close`; the body.
fn fetch(addr: SocketAddr, path: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    if !raw.starts_with(b"HTTP/1.1 200") {
        bail!(
            "{addr}{path}: {}",
            String::from_utf8_lossy(&raw[..split.min(200)])
        );
    }
    Ok(raw[split + 4..].to_vec())
}
