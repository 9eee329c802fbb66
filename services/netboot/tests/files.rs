//! TFTP and HTTP against the real service (in this process, on loopback) with kube-lite as the
//! API server: curl fetches byte-identical files by both, traversal is refused, and the
//! metrics count it all.

#[path = "../../hegel/tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Env, within};
use tink_netboot::NetbootConfig;
use tokio_util::sync::CancellationToken;

struct Running {
    tftp: SocketAddr,
    http: SocketAddr,
    metrics: tink_netboot::Metrics,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_netboot::Error>>,
}

async fn start(env: &Env, dir: &Path) -> Running {
    start_with(env, dir, |_| {}).await
}

async fn start_with(
    env: &Env,
    dir: &Path,
    tweak: impl FnOnce(&mut tink_netboot::tftp::TftpConfig),
) -> Running {
    let mut config = NetbootConfig::new(
        "127.0.0.1".parse().expect("ip"),
        "http://127.0.0.1:50061/ipxe/script/auto.ipxe".into(),
        dir.to_path_buf(),
    );
    config.dhcp = None;
    if let Some((addr, tc)) = config.tftp.as_mut() {
        *addr = "127.0.0.1:0".parse().expect("addr");
        tc.timeout = Duration::from_secs(1);
        tc.retries = 2;
        tweak(tc);
    }
    config.http = Some("127.0.0.1:0".parse().expect("addr"));
    let bound = tink_netboot::bind(&config).await.expect("bind");
    let tftp = bound.tftp_addr().expect("tftp");
    let http = bound.http_addr().expect("http");
    let metrics = tink_netboot::Metrics::default();
    let health = tink_runtime::Health::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(bound.run(
        config,
        env.client.clone(),
        health.clone(),
        metrics.clone(),
        tink_netboot::IndexMetrics::default(),
        shutdown.clone(),
    ));
    within("netboot to become ready", async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    Running {
        tftp,
        http,
        metrics,
        shutdown,
        task,
    }
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "60"])
        .args(args)
        .output()
        .expect("curl runs")
}

/// Bytes that are not all alike, so an out-of-order or repeated block shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(7919) >> 3) as u8 ^ (i >> 9) as u8)
        .collect()
}

async fn raw_tftp(server: SocketAddr, packet: &[u8]) -> Vec<u8> {
    let s = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    s.send_to(packet, server).await.expect("send");
    let mut buf = vec![0u8; 2048];
    let (n, _) = within("a TFTP answer", s.recv_from(&mut buf))
        .await
        .expect("recv");
    buf.truncate(n);
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tftp_and_http_serve_the_folder_and_nothing_outside_it() {
    let env = Env::new().await;
    let outer = tempfile::tempdir().expect("tempdir");
    let root = outer.path().join("root");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    let boot = pattern(200_000 + 123);
    std::fs::write(root.join("undionly.kpxe"), &boot).expect("write");
    std::fs::write(root.join("sub/exact.bin"), pattern(1428 * 4)).expect("write");
    // More than 65535 blocks of 8 bytes: the block number wraps.
    let wrap = pattern(65_536 * 8 + 100);
    std::fs::write(root.join("wrap.bin"), &wrap).expect("write");
    std::fs::write(outer.path().join("secret"), b"secret").expect("write");
    std::os::unix::fs::symlink(outer.path().join("secret"), root.join("link")).expect("symlink");
    // The real iPXE binary too, where Debian's `ipxe` is installed.
    let real = Path::new("/usr/lib/ipxe/undionly.kpxe");
    let real_ipxe = std::fs::read(real).ok();
    match &real_ipxe {
        Some(bytes) => std::fs::write(root.join("real.kpxe"), bytes).expect("write"),
        None => eprintln!("{} is missing (Debian `ipxe`): not fetched", real.display()),
    }
    let svc = start(&env, &root).await;
    let out = outer.path().join("out");
    let out_s = out.to_str().expect("utf8");

    // TFTP: curl with the block size PXE ROMs use, with the default one, and with none of the
    // options; each copy byte-identical.
    for extra in [
        &["--tftp-blksize", "1428"][..],
        &[][..],
        &["--tftp-no-options"][..],
    ] {
        let url = format!("tftp://{}/undionly.kpxe", svc.tftp);
        let r = curl(&[extra, &[url.as_str(), "-o", out_s]].concat());
        assert!(
            r.status.success(),
            "curl {extra:?}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(
            std::fs::read(&out).expect("read") == boot,
            "TFTP copy differs ({extra:?})"
        );
    }
    if let Some(bytes) = &real_ipxe {
        let url = format!("tftp://{}/real.kpxe", svc.tftp);
        let r = curl(&["--tftp-blksize", "1428", &url, "-o", out_s]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        assert!(
            &std::fs::read(&out).expect("read") == bytes,
            "undionly.kpxe differs"
        );
    }
    // A file that is an exact multiple of the block size ends with an empty block.
    let r = curl(&[
        "--tftp-blksize",
        "1428",
        &format!("tftp://{}/sub/exact.bin", svc.tftp),
        "-o",
        out_s,
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&out).expect("read"), pattern(1428 * 4));
    let r = curl(&[
        "--tftp-blksize",
        "8",
        &format!("tftp://{}/wrap.bin", svc.tftp),
        "-o",
        out_s,
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(
        std::fs::read(&out).expect("read") == wrap,
        "block numbers wrapped wrongly"
    );

    // Traversal, absolute paths and symlinks out of the root: access violation (error 2).
    for name in ["../secret", "/etc/passwd", "link", "sub/../../secret"] {
        let mut rrq = vec![0, 1];
        rrq.extend_from_slice(name.as_bytes());
        rrq.extend_from_slice(b"\0octet\0");
        let answer = raw_tftp(svc.tftp, &rrq).await;
        assert_eq!(&answer[..4], &[0, 5, 0, 2], "{name}: {answer:?}");
    }
    let mut rrq = b"\0\x01missing.bin\0octet\0".to_vec();
    assert_eq!(&raw_tftp(svc.tftp, &rrq).await[..4], &[0, 5, 0, 1]);
    // Writes are refused.
    rrq[1] = 2;
    assert_eq!(&raw_tftp(svc.tftp, &rrq).await[..4], &[0, 5, 0, 2]);
    let r = curl(&[
        "--path-as-is",
        &format!("tftp://{}/../secret", svc.tftp),
        "-o",
        out_s,
    ]);
    assert!(!r.status.success(), "curl fetched ../secret");

    // HTTP: GET, HEAD with the length, a range, and the same refusals.
    let url = format!("http://{}/undionly.kpxe", svc.http);
    let r = curl(&["-f", &url, "-o", out_s]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(
        std::fs::read(&out).expect("read") == boot,
        "HTTP copy differs"
    );
    let r = curl(&["-f", "-I", &url]);
    let head = String::from_utf8_lossy(&r.stdout).to_lowercase();
    assert!(
        head.contains(&format!("content-length: {}", boot.len())),
        "{head}"
    );
    let r = curl(&["-f", "-r", "100-199", &url, "-o", out_s]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&out).expect("read"), &boot[100..200]);
    for (path, want) in [
        ("/../secret", "403"),
        ("/link", "403"),
        ("/missing", "404"),
        ("/sub/exact.bin", "200"),
    ] {
        let r = curl(&[
            "--path-as-is",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://{}{path}", svc.http),
        ]);
        assert_eq!(String::from_utf8_lossy(&r.stdout), want, "{path}");
    }

    // A client that stops acknowledging: the block is sent again after the timeout, then the
    // transfer is given up after the retries.
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    client
        .send_to(b"\0\x01undionly.kpxe\0octet\0timeout\x001\0", svc.tftp)
        .await
        .expect("send");
    let mut buf = vec![0u8; 2048];
    let (n, tid) = within("OACK", client.recv_from(&mut buf))
        .await
        .expect("recv");
    assert_eq!(&buf[..n], b"\0\x06timeout\x001\0");
    client.send_to(&[0, 4, 0, 0], tid).await.expect("ack 0");
    let (n, _) = within("block 1", client.recv_from(&mut buf))
        .await
        .expect("recv");
    assert_eq!((&buf[..4], n), (&[0u8, 3, 0, 1][..], 516));
    let first = buf[..n].to_vec();
    let t = std::time::Instant::now();
    let (n, _) = within("block 1 again", client.recv_from(&mut buf))
        .await
        .expect("recv");
    assert_eq!(&buf[..n], &first[..], "the same block again");
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    common::eventually("the transfer to time out", Duration::from_secs(10), || {
        let done = svc.metrics.tftp_of("timeout") == 1;
        async move { done.then_some(()) }
    })
    .await;

    assert_eq!(
        svc.metrics.tftp_of("ok"),
        5 + u64::from(real_ipxe.is_some())
    );
    assert!(svc.metrics.tftp_of("refused") >= 5);
    assert_eq!(svc.metrics.tftp_of("not_found"), 1);
    svc.shutdown.cancel();
    within("netboot to stop", svc.task)
        .await
        .expect("no panic")
        .expect("clean stop");
    env.stop().await;
}

/// A read request for `file` with `options` (name, value pairs).
fn rrq(file: &str, options: &[(&str, &str)]) -> Vec<u8> {
    let mut p = vec![0u8, 1];
    for part in std::iter::once(file)
        .chain(std::iter::once("octet"))
        .chain(options.iter().flat_map(|(k, v)| [*k, *v]))
    {
        p.extend_from_slice(part.as_bytes());
        p.push(0);
    }
    p
}

/// Stalling clients cannot lock TFTP out: a 255-second `timeout` option is not accepted, one
/// host holds at most its share of transfers while another host is still served, and a
/// transfer that a client keeps alive by acknowledging slowly ends at the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalling_clients_cannot_lock_tftp_out() {
    let env = Env::new().await;
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::write(root.path().join("undionly.kpxe"), pattern(600_000)).expect("write");
    let svc = start_with(&env, root.path(), |tc| {
        tc.max_transfers_per_peer = 3;
        tc.transfer_deadline = Duration::from_secs(2);
    })
    .await;
    let mut buf = vec![0u8; 2048];

    // timeout=255 is left out: no OACK, the first block comes at once.
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    client
        .send_to(&rrq("undionly.kpxe", &[("timeout", "255")]), svc.tftp)
        .await
        .expect("send");
    let (n, _) = within("block 1", client.recv_from(&mut buf))
        .await
        .expect("recv");
    assert_eq!(
        (&buf[..4], n),
        (&[0u8, 3, 0, 1][..], 516),
        "DATA, not an OACK of timeout 255"
    );

    // This host (127.0.0.1) now holds one transfer; two more stall too, and the next is refused.
    let mut stalled = vec![client];
    for _ in 0..2 {
        let c = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        c.send_to(&rrq("undionly.kpxe", &[]), svc.tftp)
            .await
            .expect("send");
        within("block 1", c.recv_from(&mut buf))
            .await
            .expect("recv");
        stalled.push(c);
    }
    let refused = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    refused
        .send_to(&rrq("undionly.kpxe", &[]), svc.tftp)
        .await
        .expect("send");
    let (n, _) = within("an answer", refused.recv_from(&mut buf))
        .await
        .expect("recv");
    assert_eq!(&buf[..2], &[0u8, 5], "an ERROR packet");
    assert!(
        String::from_utf8_lossy(&buf[4..n]).contains("too many transfers"),
        "{:?}",
        String::from_utf8_lossy(&buf[4..n])
    );
    // Another host is served meanwhile.
    let other = tokio::net::UdpSocket::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    other
        .send_to(&rrq("undionly.kpxe", &[]), svc.tftp)
        .await
        .expect("send");
    let (n, _) = within("block 1 for another host", other.recv_from(&mut buf))
        .await
        .expect("recv");
    assert_eq!((&buf[..4], n), (&[0u8, 3, 0, 1][..], 516));

    // A client that acknowledges each block just before the server's timeout keeps its
    // transfer alive block after block; the deadline ends it.
    let slow = tokio::net::UdpSocket::bind("127.0.0.3:0")
        .await
        .expect("bind 127.0.0.3");
    slow.send_to(&rrq("undionly.kpxe", &[]), svc.tftp)
        .await
        .expect("send");
    let started = std::time::Instant::now();
    let mut last_block = 0u16;
    loop {
        let got = tokio::time::timeout(Duration::from_secs(5), slow.recv_from(&mut buf)).await;
        let Ok(Ok((n, tid))) = got else { break };
        if n < 4 || buf[1] != 3 {
            break;
        }
        let block = u16::from_be_bytes([buf[2], buf[3]]);
        if block == last_block {
            continue;
        }
        last_block = block;
        tokio::time::sleep(Duration::from_millis(600)).await;
        slow.send_to(&[0, 4, buf[2], buf[3]], tid)
            .await
            .expect("ack");
    }
    assert!(last_block >= 2, "the slow client got several blocks");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "the transfer ended at its deadline, not with the file ({} blocks)",
        last_block
    );
    common::eventually(
        "the deadline to be counted",
        Duration::from_secs(10),
        || {
            let done = svc.metrics.tftp_of("deadline") >= 1;
            async move { done.then_some(()) }
        },
    )
    .await;
    assert!(svc.metrics.tftp_of("busy") >= 1);
    svc.shutdown.cancel();
    within("netboot to stop", svc.task)
        .await
        .expect("no panic")
        .expect("clean stop");
    env.stop().await;
}
