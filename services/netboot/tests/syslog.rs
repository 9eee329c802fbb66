//! The syslog receiver against the real parts: the service in this process on loopback,
//! kube-lite as the API server, and a real nats-server running deploy/nats/nats.yaml's users
//! and permissions (netboot publishes as `tink-netboot`, the lines are read back as
//! `tink-admin` and `tink-console`). Datagrams are sent from UDP sockets bound to the
//! 127.0.0.x address a Hardware owns (`dhcp.ip`).

#[path = "../../hegel/tests/common/mod.rs"]
mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::{Env, NS, within};
use serde_json::json;
use tink_bus::{SyslogLine, SyslogRead};
use tink_netboot::NetbootConfig;
use tink_netboot::syslog::{SyslogConfig, SyslogNats};
use tink_testkit::nats::{NatsServer, deploy_credentials};
use tokio_util::sync::CancellationToken;

struct Running {
    syslog: SocketAddr,
    metrics: tink_netboot::Metrics,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_netboot::Error>>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        let r = within("netboot to stop", self.task).await;
        assert!(matches!(r, Ok(Ok(()))), "{r:?}");
    }
}

fn auth(user: &str) -> tink_bus::NatsAuth {
    let (user, password) = deploy_credentials(user);
    tink_bus::NatsAuth {
        user: Some(user),
        password: Some(password),
        ..Default::default()
    }
}

async fn start(env: &Env, nats: &NatsServer, edit: impl FnOnce(&mut SyslogConfig)) -> Running {
    let mut config = NetbootConfig::new(
        "127.0.0.1".parse().expect("ip"),
        "http://127.0.0.1:50061/ipxe/script/auto.ipxe".into(),
        env.dir.path().to_path_buf(),
    );
    config.dhcp = None;
    config.tftp = None;
    config.http = None;
    let mut syslog = SyslogConfig::new(
        "127.0.0.1:0".parse().expect("addr"),
        SyslogNats {
            url: nats.url(),
            auth: auth("tink-netboot"),
        },
    );
    edit(&mut syslog);
    config.syslog = Some(syslog);
    let bound = tink_netboot::bind(&config).await.expect("bind");
    let addr = bound.syslog_addr().expect("syslog socket");
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
        syslog: addr,
        metrics,
        shutdown,
        task,
    }
}

fn sender(ip: &str) -> UdpSocket {
    UdpSocket::bind((ip, 0)).expect("bind the sending socket")
}

async fn js_as(nats: &NatsServer, user: &str) -> async_nats::jetstream::Context {
    let client = tink_bus::connect(&nats.url(), &auth(user), async_nats::ConnectOptions::new)
        .await
        .expect("connect");
    async_nats::jetstream::new(client)
}

async fn lines(js: &async_nats::jetstream::Context, name: &str) -> Vec<SyslogLine> {
    let mut out = Vec::new();
    let read = SyslogRead::default();
    tink_bus::read_syslog(js, NS, name, read, |l| {
        out.push(l);
        std::future::ready(true)
    })
    .await
    .expect("read");
    out
}

/// Polls until `name` has at least `n` lines stored.
async fn wait_lines(js: &async_nats::jetstream::Context, name: &str, n: usize) -> Vec<SyslogLine> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let l = lines(js, name).await;
        if l.len() >= n || Instant::now() > deadline {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_count(metrics: &tink_netboot::Metrics, result: &'static str, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = metrics.syslog_count(result);
        if c >= n || Instant::now() > deadline {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_are_attributed_bounded_and_read_back() {
    let env = Env::new().await;
    let nats = NatsServer::start_deploy().await.expect("nats-server");
    env.create_hardware(
        "m1",
        json!({"networkInterfaces": {"52:54:00:bb:00:01": {"dhcp": {"ip": "127.0.0.21"}}}}),
    )
    .await;
    env.create_hardware(
        "m2",
        json!({"networkInterfaces": {"52:54:00:bb:00:02": {"dhcp": {"ip": "127.0.0.22"}}}}),
    )
    .await;
    let running = start(&env, &nats, |c| c.limits.lines_per_machine = 50).await;
    let admin = js_as(&nats, "tink-admin").await;

    let m1 = sender("127.0.0.21");
    let datagrams: [&[u8]; 4] = [
        b"<6>Nov 27 13:00:00 kernel: [    0.000000] Linux version 6.1.0-27-amd64\n",
        b"<165>1 2026-11-27T13:00:01.003Z osie-m1 tink-osie 42 boot [meta seq=\"1\"] \xEF\xBB\xBFnetwork: eth0 up",
        b"<3>Nov 27 13:00:02 kernel: Kernel command line: worker_id=m1 tink_agent_secret=s3cr3t console=ttyS0",
        b"<999>not a priority",
    ];
    for d in datagrams {
        m1.send_to(d, running.syslog).expect("send");
    }
    let got = wait_lines(&admin, "m1", 3).await;
    assert_eq!(got.len(), 3, "{got:#?}");
    assert_eq!(got[0].app.as_deref(), Some("kernel"));
    assert_eq!(got[0].severity, 6);
    assert_eq!(
        got[0].message,
        "[    0.000000] Linux version 6.1.0-27-amd64"
    );
    assert_eq!(got[0].source, "127.0.0.21");
    assert_eq!(got[1].app.as_deref(), Some("tink-osie"));
    assert_eq!(got[1].hostname.as_deref(), Some("osie-m1"));
    assert_eq!(got[1].procid.as_deref(), Some("42"));
    assert_eq!((got[1].facility, got[1].severity), (20, 5));
    assert_eq!(got[1].message, "network: eth0 up");
    assert_eq!(
        got[2].message,
        "Kernel command line: worker_id=m1 tink_agent_secret=(hidden) console=ttyS0"
    );
    assert_eq!(wait_count(&running.metrics, "malformed", 1).await, 1);
    assert_eq!(running.metrics.syslog_count("accepted"), 3);
    // m2 has none of m1's lines.
    assert!(lines(&admin, "m2").await.is_empty());

    // An address no Hardware owns: counted and dropped, nothing stored anywhere.
    let stranger = sender("127.0.0.29");
    for _ in 0..5 {
        stranger
            .send_to(b"<13>Nov 27 13:00:00 intruder: hello", running.syslog)
            .expect("send");
    }
    assert_eq!(wait_count(&running.metrics, "unknown_source", 5).await, 5);
    let stream = admin
        .get_stream(tink_bus::SYSLOG_STREAM)
        .await
        .expect("stream");
    let info = stream.get_info().await.expect("info");
    assert_eq!(info.state.messages, 3, "only m1's lines are stored");

    // The per-machine ring: m2 sends 80 lines, the last 50 are kept.
    let m2 = sender("127.0.0.22");
    for i in 0..80 {
        let line = format!("<14>1 - - app - - - line {i}");
        m2.send_to(line.as_bytes(), running.syslog).expect("send");
        // Loopback UDP drops what the receiver has not read when its buffer is full.
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(wait_count(&running.metrics, "accepted", 83).await, 83);
    let deadline = Instant::now() + Duration::from_secs(10);
    let kept = loop {
        let kept = lines(&admin, "m2").await;
        if kept.last().is_some_and(|l| l.message == "line 79") || Instant::now() > deadline {
            break kept;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(kept.len(), 50);
    assert_eq!(kept[0].message, "line 30");
    assert_eq!(kept[49].message, "line 79");

    // The console's NATS user reads them too; `last` gives the newest.
    let console = js_as(&nats, "tink-console").await;
    let mut last = Vec::new();
    tink_bus::read_syslog(
        &console,
        NS,
        "m2",
        SyslogRead {
            last: Some(3),
            follow: false,
        },
        |l| {
            last.push(l.message);
            std::future::ready(true)
        },
    )
    .await
    .expect("console reads");
    assert_eq!(last, ["line 77", "line 78", "line 79"]);

    // Following: a new line arrives while reading.
    let follower = {
        let admin = admin.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            tink_bus::read_syslog(
                &admin,
                NS,
                "m1",
                SyslogRead {
                    last: Some(1),
                    follow: true,
                },
                |l| {
                    seen.push(l.message);
                    std::future::ready(seen.len() < 2)
                },
            )
            .await
            .expect("follow");
            seen
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    m1.send_to(
        b"<14>Nov 27 13:00:05 tink-osie: starting tink-agent",
        running.syslog,
    )
    .expect("send");
    let seen = within("the followed line", follower).await.expect("join");
    assert_eq!(seen[1], "starting tink-agent");

    running.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_is_rate_limited_and_counted() {
    let env = Env::new().await;
    let nats = NatsServer::start_deploy().await.expect("nats-server");
    env.create_hardware(
        "flood",
        json!({"networkInterfaces": {"52:54:00:bb:00:03": {"dhcp": {"ip": "127.0.0.23"}}}}),
    )
    .await;
    env.create_hardware(
        "quiet",
        json!({"networkInterfaces": {"52:54:00:bb:00:04": {"dhcp": {"ip": "127.0.0.24"}}}}),
    )
    .await;
    let running = start(&env, &nats, |c| {
        c.rate.rate = 20.0;
        c.rate.burst = 100.0;
    })
    .await;
    let admin = js_as(&nats, "tink-admin").await;
    let flood = sender("127.0.0.23");
    let started = Instant::now();
    let mut sent = 0u64;
    for i in 0..5000 {
        let line = format!("<14>Nov 27 13:00:00 flood[1]: line {i}");
        if flood.send_to(line.as_bytes(), running.syslog).is_ok() {
            sent += 1;
        }
        if i % 250 == 249 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // The other machine is not starved by the flood.
    let quiet = sender("127.0.0.24");
    quiet
        .send_to(
            b"<14>Nov 27 13:00:00 tink-osie: still heard",
            running.syslog,
        )
        .expect("send");
    let heard = wait_lines(&admin, "quiet", 1).await;
    assert_eq!(heard.len(), 1);
    assert_eq!(heard[0].message, "still heard");

    let limited = running.metrics.syslog_count("rate_limited");
    let accepted_flood = lines(&admin, "flood").await.len() as f64;
    let allowed = 100.0 + 20.0 * (elapsed + 1.0);
    assert!(
        accepted_flood <= allowed,
        "{accepted_flood} lines stored from the flood in {elapsed:.2}s, at most {allowed} allowed"
    );
    assert!(
        accepted_flood >= 100.0,
        "the burst passes: {accepted_flood}"
    );
    // Every datagram the socket took is counted one way or the other (loopback may drop some
    // before the receiver reads them).
    assert!(
        limited as f64 >= sent as f64 * 0.5 && limited <= sent,
        "{limited} of {sent} counted as rate_limited"
    );
    running.stop().await;
    env.stop().await;
}
