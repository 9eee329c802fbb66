//! `kube-lite`: a small Kubernetes-compatible API server for tests and the development stack.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// mimalloc instead of glibc malloc: allocation is a large share of a request's cost here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A small Kubernetes-compatible API server for tests and the local development stack.
#[derive(Debug, Parser)]
#[command(name = "kube-lite", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port); the bound address is printed.
    #[arg(long, env = "KUBE_LITE_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write a kubeconfig for kubectl and kube clients to this file.
    #[arg(long, env = "KUBE_LITE_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Keep objects in this directory across restarts (in memory without it).
    #[arg(long, env = "KUBE_LITE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Map a webhook Service to an address: `namespace/name=https://127.0.0.1:8443` (repeatable).
    #[arg(long = "service", value_name = "NS/NAME=URL")]
    services: Vec<String>,
    /// Static tokens for TokenReview (kube-apiserver's CSV: `token,user,uid,"group1,group2"`).
    /// Other components' TokenReviews use them, and AdmissionReviews name the user of a request
    /// whose bearer token is listed; kube-lite itself still allows every request.
    #[arg(long, env = "KUBE_LITE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Seconds an Event lives after its last write, as kube-apiserver's `--event-ttl`; 0 keeps
    /// Events forever.
    #[arg(long, env = "KUBE_LITE_EVENT_TTL_SECONDS", default_value_t = 3600)]
    event_ttl_seconds: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    // Installed before the address is printed, so a supervisor can stop us right away.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let mut config = kube_lite::Config {
        listen: args.listen,
        data_dir: args.data_dir,
        token_file: args.token_file,
        event_ttl: (args.event_ttl_seconds > 0)
            .then(|| std::time::Duration::from_secs(args.event_ttl_seconds)),
        ..Default::default()
    };
    for s in &args.services {
        let (k, v) = kube_lite::Config::parse_service(s)?;
        config.services.insert(k, v);
    }
    let server = kube_lite::Server::start(config)
        .await
        .context("starting kube-lite")?;
    if let Some(path) = &args.kubeconfig {
        server
            .write_kubeconfig(path)
            .context("writing the kubeconfig")?;
    }
    println!("{}", server.addr());
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    server.shutdown().await;
    Ok(())
}
