//! TFTP `windowsize` (RFC 7440) against the real TFTP server on loopback, with a client written
//! here: a windowed transfer arrives intact (block numbers wrapping too), a withheld ACK brings
//! the window again after the timeout, an ACK inside the window resumes after it, and a
//! `windowsize` of 0, garbage or too large is refused, ignored or lowered as the docs say.

use std::net::SocketAddr;
use std::time::Duration;

use tink_netboot::files::Root;
use tink_netboot::tftp::{self, TftpConfig};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

/// Bytes that are not all alike, so an out-of-order or repeated block shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(7919) >> 3) as u8 ^ (i >> 9) as u8)
        .collect()
}

struct Server {
    addr: SocketAddr,
    metrics: tink_netboot::Metrics,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(files: &[(&str, &[u8])]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, bytes) in files {
            std::fs::write(dir.path().join(name), bytes).expect("write");
        }
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let addr = socket.local_addr().expect("addr");
        let config = TftpConfig {
            timeout: Duration::from_secs(1),
            retries: 2,
            // Tests leave stalled transfers behind; all come from 127.0.0.1.
            max_transfers_per_peer: 64,
            ..TftpConfig::default()
        };
        let metrics = tink_netboot::Metrics::default();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(tftp::serve(
            socket,
            Root::new(dir.path()).expect("root"),
            config,
            metrics.clone(),
            shutdown.clone(),
        ));
        Self {
            addr,
            metrics,
            shutdown,
            task,
            _dir: dir,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops in time")
            .expect("no panic")
            .expect("clean stop");
    }
}

fn rrq(file: &str, options: &[(&str, &str)]) -> Vec<u8> {
    let mut p = vec![0u8, 1];
    for part in [file, "octet"]
        .into_iter()
        .chain(options.iter().flat_map(|(k, v)| [*k, *v]))
    {
        p.extend_from_slice(part.as_bytes());
        p.push(0);
    }
    p
}

/// The options of an OACK packet.
fn oack_options(packet: &[u8]) -> Vec<(String, String)> {
    assert_eq!(&packet[..2], &[0, 6], "an OACK: {packet:?}");
    let fields: Vec<String> = packet[2..]
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8(f.to_vec()).expect("utf8"))
        .collect();
    fields
        .chunks(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect()
}

struct Client {
    socket: UdpSocket,
    tid: SocketAddr,
    buf: Vec<u8>,
}

impl Client {
    /// Sends the request; returns the client and the OACK's options.
    async fn request(
        server: SocketAddr,
        file: &str,
        options: &[(&str, &str)],
    ) -> (Self, Vec<(String, String)>) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        socket
            .send_to(&rrq(file, options), server)
            .await
            .expect("send");
        let mut buf = vec![0u8; 70_000];
        let (n, tid) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buf))
            .await
            .expect("an answer in time")
            .expect("recv");
        let oack = oack_options(&buf[..n]);
        (Self { socket, tid, buf }, oack)
    }

    async fn ack(&self, block: u16) {
        let [a, b] = block.to_be_bytes();
        self.socket
            .send_to(&[0, 4, a, b], self.tid)
            .await
            .expect("ack");
    }

    /// The next DATA packet: its block number and data; `None` if nothing came in `wait`.
    async fn data(&mut self, wait: Duration) -> Option<(u16, Vec<u8>)> {
        let (n, from) = tokio::time::timeout(wait, self.socket.recv_from(&mut self.buf))
            .await
            .ok()?
            .expect("recv");
        assert_eq!(from, self.tid, "from the transfer's own port");
        assert_eq!(
            &self.buf[..2],
            &[0, 3],
            "DATA: {:?}",
            &self.buf[..n.min(64)]
        );
        Some((
            u16::from_be_bytes([self.buf[2], self.buf[3]]),
            self.buf[4..n].to_vec(),
        ))
    }

    /// The next `count` blocks, which must be numbered from `first` on.
    async fn window(&mut self, first: u16, count: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..count {
            let (block, data) = self
                .data(Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("block {} of the window", i + 1));
            assert_eq!(block, first.wrapping_add(i as u16), "block order");
            out.push(data);
        }
        out
    }

    /// A whole RFC 7440 receiver: ACKs after each `window` blocks and after the last one.
    async fn receive_all(&mut self, blksize: usize, window: usize) -> Vec<u8> {
        let mut file = Vec::new();
        let mut expected: u16 = 1;
        let mut in_window = 0;
        loop {
            let (block, data) = self
                .data(Duration::from_secs(5))
                .await
                .expect("the next block");
            assert_eq!(block, expected, "blocks in order on loopback");
            let last = data.len() < blksize;
            file.extend_from_slice(&data);
            in_window += 1;
            if last || in_window == window {
                self.ack(block).await;
                in_window = 0;
            }
            if last {
                return file;
            }
            expected = expected.wrapping_add(1);
        }
    }
}

fn opt<'a>(oack: &'a [(String, String)], name: &str) -> Option<&'a str> {
    oack.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windowed_transfers_arrive_intact() {
    let boot = pattern(200_000 + 123);
    let exact = pattern(1468 * 32);
    // More than 65535 blocks of 8 bytes: the block number wraps inside windows.
    let wrap = pattern(65_536 * 8 + 100);
    let server = Server::start(&[
        ("boot.bin", &boot),
        ("exact.bin", &exact),
        ("wrap.bin", &wrap),
    ])
    .await;
    for (file, want, blksize, window) in [
        ("boot.bin", &boot, 1468usize, 16usize),
        ("boot.bin", &boot, 512, 7),
        // An exact multiple of the window's bytes: the last window is one empty block.
        ("exact.bin", &exact, 1468, 16),
        ("wrap.bin", &wrap, 8, 64),
    ] {
        let (bs, ws) = (blksize.to_string(), window.to_string());
        let (mut c, oack) = Client::request(
            server.addr,
            file,
            &[("blksize", &bs), ("windowsize", &ws), ("tsize", "0")],
        )
        .await;
        assert_eq!(opt(&oack, "windowsize"), Some(ws.as_str()), "{oack:?}");
        assert_eq!(opt(&oack, "tsize"), Some(want.len().to_string().as_str()));
        c.ack(0).await;
        let got = c.receive_all(blksize, window).await;
        assert!(
            &got == want,
            "{file} blksize {blksize} windowsize {window}: {} bytes, want {}",
            got.len(),
            want.len()
        );
    }
    // Counted when the server's transfer task ends, just after the last ACK.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while server.metrics.tftp_of("ok") < 4 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.metrics.tftp_of("ok"), 4);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withheld_ack_brings_the_window_again() {
    let boot = pattern(100_000);
    let server = Server::start(&[("boot.bin", &boot)]).await;
    let (mut c, oack) = Client::request(server.addr, "boot.bin", &[("windowsize", "4")]).await;
    assert_eq!(opt(&oack, "windowsize"), Some("4"));
    c.ack(0).await;
    let first = c.window(1, 4).await;
    // Nothing more until an ACK or the timeout (1 s).
    let t = std::time::Instant::now();
    let again = c.window(1, 4).await;
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "sent again after the timeout, not at once: {:?}",
        t.elapsed()
    );
    assert_eq!(first, again, "the same window again");
    for (i, block) in first.iter().enumerate() {
        assert_eq!(block.as_slice(), &boot[i * 512..(i + 1) * 512]);
    }
    // Acknowledged: the next window follows.
    c.ack(4).await;
    let next = c.window(5, 4).await;
    assert_eq!(next[0].as_slice(), &boot[4 * 512..5 * 512]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_window_ack_resumes_after_it() {
    let boot = pattern(100_000);
    let server = Server::start(&[("boot.bin", &boot)]).await;
    let (mut c, oack) = Client::request(
        server.addr,
        "boot.bin",
        &[("blksize", "1000"), ("windowsize", "8")],
    )
    .await;
    assert_eq!(opt(&oack, "windowsize"), Some("8"));
    c.ack(0).await;
    c.window(1, 8).await;
    // The client got blocks 1..=3 only: it acknowledges 3, the server goes on from 4.
    c.ack(3).await;
    let resent = c.window(4, 8).await;
    for (i, block) in resent.iter().enumerate() {
        let at = (3 + i) * 1000;
        assert_eq!(block.as_slice(), &boot[at..at + 1000], "block {}", 4 + i);
    }
    // An ACK of the block before the window (nothing new) sends the window again at once, but
    // only once per round: a duplicate of it is ignored.
    c.ack(3).await;
    let t = std::time::Instant::now();
    let again = c.window(4, 8).await;
    assert!(
        t.elapsed() < Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(again, resent);
    c.ack(3).await;
    let t = std::time::Instant::now();
    c.window(4, 8).await;
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "the duplicate waited for the timeout: {:?}",
        t.elapsed()
    );
    // The rest arrives intact from there.
    c.ack(11).await;
    let mut rest = Vec::new();
    let mut expected = 12u16;
    loop {
        let block = c.window(expected, 1).await.remove(0);
        let last = block.len() < 1000;
        rest.extend_from_slice(&block);
        if last {
            c.ack(expected).await;
            break;
        }
        if (expected - 11).is_multiple_of(8) {
            c.ack(expected).await;
        }
        expected += 1;
    }
    assert!(rest == boot[11_000..], "the rest of the file");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_large_windowsizes() {
    let boot = pattern(10_000);
    let server = Server::start(&[("boot.bin", &boot)]).await;
    // 0, garbage and out of range: left out of the OACK, one block at a time.
    for bad in ["0", "many", "-3", "65536", ""] {
        let (mut c, oack) = Client::request(
            server.addr,
            "boot.bin",
            &[("windowsize", bad), ("blksize", "1024")],
        )
        .await;
        assert_eq!(
            opt(&oack, "windowsize"),
            None,
            "windowsize {bad:?}: {oack:?}"
        );
        assert_eq!(opt(&oack, "blksize"), Some("1024"));
        c.ack(0).await;
        c.window(1, 1).await;
        assert!(
            c.data(Duration::from_millis(300)).await.is_none(),
            "windowsize {bad:?}: no second block before the ACK"
        );
        c.ack(1).await;
        c.window(2, 1).await;
    }
    // Larger than the server's maximum (64): lowered to it.
    let (_, oack) = Client::request(server.addr, "boot.bin", &[("windowsize", "65535")]).await;
    assert_eq!(opt(&oack, "windowsize"), Some("64"));
    // The largest blocks: lowered until the window holds 1 MiB.
    let (_, oack) = Client::request(
        server.addr,
        "boot.bin",
        &[("blksize", "65464"), ("windowsize", "64")],
    )
    .await;
    assert_eq!(opt(&oack, "windowsize"), Some("16"), "{oack:?}");
    server.stop().await;
}

/// Debian's `atftp` (0.8 speaks windowsize) fetches files through a window: byte-identical.
/// Skipped with a message where it is not installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atftp_fetches_through_a_window() {
    let has_atftp = std::process::Command::new("atftp")
        .arg("--version")
        .output()
        .is_ok();
    if !has_atftp {
        eprintln!("atftp is not installed (Debian `atftp`): the cross-check is skipped");
        return;
    }
    let boot = pattern(300_000 + 77);
    let exact = pattern(1468 * 16 * 3);
    let server = Server::start(&[("boot.bin", &boot), ("exact.bin", &exact)]).await;
    let out_dir = tempfile::tempdir().expect("tempdir");
    for (file, want, window) in [
        ("boot.bin", &boot, "16"),
        ("boot.bin", &boot, "4"),
        ("exact.bin", &exact, "16"),
    ] {
        let out = out_dir.path().join("out");
        let port = server.addr.port().to_string();
        let args: Vec<String> = [
            "-g",
            "-r",
            file,
            "-l",
            out.to_str().expect("utf8"),
            "--option",
            "blksize 1468",
            "--option",
            &format!("windowsize {window}"),
            "--trace",
            "127.0.0.1",
            &port,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = tokio::task::spawn_blocking(move || {
            std::process::Command::new("timeout")
                .arg("60")
                .arg("atftp")
                .args(&args)
                .output()
                .expect("atftp runs")
        })
        .await
        .expect("no panic");
        let log =
            String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
        assert!(
            r.status.success(),
            "atftp {file} windowsize {window}: {log}"
        );
        // `--trace`: "received OACK <windowsize: 16, blksize: 1468, >", one "sent ACK" line
        // per ACK.
        assert!(
            log.lines()
                .any(|l| l.starts_with("received OACK")
                    && l.contains(&format!("windowsize: {window},"))),
            "atftp got windowsize {window} in the OACK: {}",
            log.lines().take(6).collect::<Vec<_>>().join(" | ")
        );
        let blocks = want.len() / 1468 + 1;
        let acks = log.lines().filter(|l| l.starts_with("sent ACK")).count();
        let per_window: usize = window.parse().expect("number");
        assert!(
            acks <= blocks / per_window + 3,
            "one ACK per window: {acks} ACKs for {blocks} blocks at windowsize {window}"
        );
        assert!(
            &std::fs::read(&out).expect("read") == want,
            "atftp copy of {file} (windowsize {window}) differs"
        );
    }
    server.stop().await;
}
