//! The kit's latency and loss (crates/testkit/src/netdelay.rs) between two network namespaces
//! joined by a veth pair: TCP round trips take at least the delay while it holds, and lose it
//! once it is dropped; a share of UDP datagrams is lost, none with loss 0.
//!
//! Root only; `TINK_SKIP_NETNS_TESTS=1` skips it loudly.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::time::{Duration, Instant};

use tink_testkit::netdelay::Delay;

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces, `a` (10.78.B.1) and `b` (10.78.B.2), on a veth pair; removed on drop.
struct Pair {
    a: String,
    b: String,
    byte: u8,
}

impl Pair {
    fn new() -> Pair {
        let pid = std::process::id();
        let byte = (pid % 200) as u8 + 20;
        let (a, b) = (format!("tknd{pid}a"), format!("tknd{pid}b"));
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &a])
            .output();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &b])
            .output();
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        let (va, vb) = (format!("tkd{pid}a"), format!("tkd{pid}b"));
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &a]);
        ip(&["link", "set", &vb, "netns", &b]);
        for (ns, dev, host) in [(&a, &va, 1), (&b, &vb, 2)] {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("10.78.{byte}.{host}/24"),
                "dev",
                dev,
            ]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Pair { a, b, byte }
    }

    fn addr(&self, host: u8, port: u16) -> String {
        format!("10.78.{}.{host}:{port}", self.byte)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .output();
        }
    }
}

/// Runs `f` on a thread inside namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).expect("netns file");
    std::thread::spawn(move || {
        // SAFETY: this thread only, with an open namespace file.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
}

/// The mean of 10 one-byte TCP round trips from `a` to an echo in `b`.
fn mean_rtt(pair: &Pair, port: u16) -> Duration {
    let listen = pair.addr(2, port);
    let (tx, rx) = std::sync::mpsc::channel();
    let echo = in_ns(&pair.b, move || {
        let l = TcpListener::bind(&listen).expect("listen in b");
        tx.send(()).expect("ready");
        let (mut s, _) = l.accept().expect("accept");
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            if s.write_all(&b).is_err() {
                break;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("echo ready");
    let target = pair.addr(2, port);
    let client = in_ns(&pair.a, move || {
        let mut s =
            TcpStream::connect_timeout(&target.parse().expect("addr"), Duration::from_secs(10))
                .expect("connect a -> b");
        s.set_nodelay(true).expect("nodelay");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let began = Instant::now();
        let mut b = [7u8; 1];
        for _ in 0..10 {
            s.write_all(&b).expect("write");
            s.read_exact(&mut b).expect("echo");
        }
        began.elapsed() / 10
    });
    let rtt = client.join().expect("client");
    let _ = echo.join();
    rtt
}

fn skip() -> bool {
    if std::env::var("TINK_SKIP_NETNS_TESTS").as_deref() == Ok("1") {
        eprintln!("SKIPPED (TINK_SKIP_NETNS_TESTS=1): network namespaces");
        return true;
    }
    false
}

#[test]
fn latency_holds_while_the_delay_lives_and_loss_drops_a_share() {
    if skip() {
        return;
    }
    let pair = Pair::new();
    let before = mean_rtt(&pair, 7001);

    let delay = Delay::start(&pair.a, 7, Duration::from_millis(50), 0.0, 1).expect("delay starts");
    let delayed = mean_rtt(&pair, 7002);
    // a's packets wait 50 ms each way out of a: a round trip is at least 50 ms (a lower bound
    // the delay guarantees, not a speed figure).
    assert!(
        delayed >= Duration::from_millis(50),
        "round trip {delayed:?} with a 50 ms delay (before: {before:?})"
    );
    assert!(delay.passed() > 0 && delay.dropped() == 0, "{delay:?}");
    drop(delay);
    let after = mean_rtt(&pair, 7003);
    eprintln!("TCP round trip: {before:?} before, {delayed:?} with 50 ms, {after:?} after");
    assert!(
        after < Duration::from_millis(50),
        "round trip {after:?} after the delay was removed"
    );

    // 30% loss on 1,000 datagrams a -> b (the decisions are seeded: the count is the same each run).
    let delay = Delay::start(&pair.a, 7, Duration::from_millis(1), 0.3, 42).expect("loss starts");
    let listen = pair.addr(2, 7004);
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = in_ns(&pair.b, move || {
        let s = UdpSocket::bind(&listen).expect("udp in b");
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        tx.send(()).expect("ready");
        let mut n = 0;
        let mut buf = [0u8; 16];
        while s.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("receiver ready");
    let target = pair.addr(2, 7004);
    in_ns(&pair.a, move || {
        let s = UdpSocket::bind("0.0.0.0:0").expect("udp in a");
        for i in 0..1000u32 {
            s.send_to(&i.to_be_bytes(), &target).expect("send");
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
    .join()
    .expect("sender");
    let received: u32 = receiver.join().expect("receiver");
    eprintln!("30% loss: {received} of 1000 datagrams arrived; {delay:?}");
    assert!(
        (600..=800).contains(&received),
        "{received} of 1000 arrived with 30% loss"
    );
    assert_eq!(
        u64::from(received),
        delay.passed(),
        "every datagram passed arrived"
    );
}
