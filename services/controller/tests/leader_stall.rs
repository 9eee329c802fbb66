//! A leader whose connection to the API server stalls (requests hang, nothing errors) steps
//! down at its renew deadline, before a standby can take over: never two leaders.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy that forwards until `stalled` is set, then holds every byte (both ways) without
/// closing anything: what a half-dead network path looks like to the client.
async fn proxy(target: SocketAddr, stalled: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = TcpStream::connect(target).await else {
                continue;
            };
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            for (mut r, mut w) in [
                (
                    Box::new(ri) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                    Box::new(wo) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                ),
                (Box::new(ro), Box::new(wi)),
            ] {
                let stalled = stalled.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match r.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        while stalled.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        if w.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leader_steps_down_before_the_standby_leads() {
    let stack = Stack::start().await;
    let stalled = Arc::new(AtomicBool::new(false));
    let through = proxy(stack.kube.addr(), stalled.clone()).await;
    let stalled_client = {
        let config = kube::Config::new(format!("http://{through}").parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    };
    // The leader talks to the API server through the proxy; the standby directly.
    let a = stack
        .controller_with_client(stack.config("controller-a"), stalled_client)
        .await;
    a.wait_leading().await;
    let b = stack.controller(stack.config("controller-b")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b.is_leading());

    stalled.store(true, Ordering::SeqCst);
    let since = Instant::now();
    let mut a_stepped_down = None;
    within("the standby to lead", async {
        loop {
            let (la, lb) = (a.is_leading(), b.is_leading());
            assert!(
                !(la && lb),
                "two leaders {:?} after the stall",
                since.elapsed()
            );
            if !la && a_stepped_down.is_none() {
                a_stepped_down = Some(since.elapsed());
            }
            if lb {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let stepped_down = a_stepped_down.expect("the stalled leader stepped down");
    eprintln!(
        "stalled leader stepped down after {stepped_down:?}; the standby led after {:?}",
        since.elapsed()
    );
    b.stop().await;
    stalled.store(false, Ordering::SeqCst);
    a.kill().await;
    stack.stop().await;
}
