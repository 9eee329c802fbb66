//! The cluster kit itself: a crashed run's leftovers are removed, the nodes form one JetStream
//! cluster, and isolation, partition, kill and restart do to the network what they say.
//! (crates/bus/tests/cluster.rs runs the bus's streams through the faults.)
//!
//! Root only (network namespaces); `TINK_SKIP_NETNS_TESTS=1` skips it loudly.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tink_testkit::cluster::NatsCluster;

async fn reachable(ip: Ipv4Addr, port: u16) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect((ip, port))
        )
        .await,
        Ok(Ok(_))
    )
}

/// Whether a node reaches `ip:port` from inside namespace `ns` (bash's /dev/tcp, bounded).
fn reachable_from(ns: &str, ip: Ipv4Addr, port: u16) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "timeout", "2", "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{ip}/{port}"))
        .status()
        .expect("runs ip netns exec")
        .success()
}

fn namespace_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_runs_leftovers_go_and_faults_cut_what_they_say() {
    // A crashed run's leftovers: a claim whose process is gone, with its namespace and bridge.
    // Subnet 251 is outside the range the kit picks from (1..=250), so no live run owns it.
    let dead_pid = {
        let mut child = Command::new("true").spawn().expect("spawns true");
        let pid = child.id();
        child.wait().expect("true exits");
        pid
    };
    let have_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if have_root {
        let made = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .status()
                .expect("runs ip")
                .success()
        };
        assert!(made(&["netns", "add", "tkc251-n0"]) || namespace_exists("tkc251-n0"));
        assert!(
            made(&["link", "add", "tkc251-br", "type", "bridge"])
                || Path::new("/sys/class/net/tkc251-br").exists()
        );
        // The claim comes last, as a crashed run's did. Written first, the other tests of this
        // binary (running at the same time) could sweep it before the network existed, leaving
        // a namespace that no claim names any more.
        std::fs::create_dir_all("/run/tink-testkit-cluster").expect("claims dir");
        std::fs::write("/run/tink-testkit-cluster/251", dead_pid.to_string()).expect("claim");
    }

    let Some(mut cluster) = NatsCluster::start_or_skip()
        .await
        .expect("NATS cluster starts")
    else {
        return;
    };
    assert!(
        !namespace_exists("tkc251-n0"),
        "the crashed run's namespace is gone"
    );
    assert!(
        !Path::new("/sys/class/net/tkc251-br").exists(),
        "the crashed run's bridge is gone"
    );
    assert!(!Path::new("/run/tink-testkit-cluster/251").exists());

    let ips: Vec<Ipv4Addr> = (0..cluster.len())
        .map(|n| cluster.ip(n).expect("an address"))
        .collect();
    let ns = |n: usize| {
        let [_, _, subnet, _] = ips[0].octets();
        format!("tkc{subnet}-n{n}")
    };
    for ip in &ips {
        assert!(reachable(*ip, 4222).await, "{ip} answers the test process");
    }
    // What a failing test prints of the cluster: every node's meta group view and log.
    let diagnosis = cluster.diagnose(5).await;
    for n in 0..cluster.len() {
        assert!(
            diagnosis.contains(&format!("--- {}", cluster.name(n))),
            "{diagnosis}"
        );
    }
    assert_eq!(
        diagnosis.matches("/jsz 200: ").count(),
        cluster.len(),
        "{diagnosis}"
    );
    assert!(diagnosis.contains("meta_cluster"), "{diagnosis}");
    assert!(
        reachable_from(&ns(0), ips[1], 6222),
        "routes reach each other"
    );

    // Isolation: nobody reaches the node, and it reaches nobody; heal undoes it.
    cluster.isolate(1).await.expect("isolate");
    assert!(
        !reachable(ips[1], 4222).await,
        "an isolated node is cut off"
    );
    assert!(!reachable_from(&ns(0), ips[1], 6222));
    assert!(!reachable_from(&ns(1), ips[2], 6222));
    cluster.heal().await.expect("heal");
    assert!(reachable(ips[1], 4222).await, "healed");
    assert!(reachable_from(&ns(1), ips[2], 6222));

    // A partition cuts the nodes apart both ways; clients still reach both sides.
    cluster.partition(&[0], &[1, 2]).await.expect("partition");
    assert!(!reachable_from(&ns(0), ips[1], 6222));
    assert!(!reachable_from(&ns(2), ips[0], 6222));
    assert!(
        reachable_from(&ns(1), ips[2], 6222),
        "the majority side is whole"
    );
    assert!(reachable(ips[0], 4222).await && reachable(ips[2], 4222).await);
    cluster.heal().await.expect("heal");
    assert!(reachable_from(&ns(0), ips[1], 6222));

    // Kill and restart.
    cluster.kill(2).await.expect("kill");
    assert!(!cluster.is_running(2));
    assert!(
        !reachable(ips[2], 4222).await,
        "a killed node does not answer"
    );
    cluster.restart(2).await.expect("restart");
    assert!(reachable(ips[2], 4222).await);
    cluster
        .wait_healthy(Duration::from_secs(60))
        .await
        .expect("the cluster is healthy again");

    // Drop removes everything.
    let claim = format!("/run/tink-testkit-cluster/{}", ips[0].octets()[2]);
    let names: Vec<String> = (0..cluster.len()).map(ns).collect();
    assert!(Path::new(&claim).exists());
    drop(cluster);
    for name in names {
        assert!(!namespace_exists(&name), "{name} removed on drop");
    }
    assert!(!Path::new(&claim).exists(), "the claim is released on drop");
}

/// Whether host `host` (its namespace) reaches `ip:port` within 2 s.
async fn host_reaches(cluster: &NatsCluster, host: usize, ip: Ipv4Addr, port: u16) -> bool {
    cluster
        .command(host, "timeout")
        .expect("a host")
        .args(["2", "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{ip}/{port}"))
        .kill_on_drop(true)
        .status()
        .await
        .expect("runs ip netns exec")
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_hosts_reach_nodes_and_root_until_cut_from_either() {
    let Some(mut cluster) = NatsCluster::start_or_skip()
        .await
        .expect("NATS cluster starts")
    else {
        return;
    };
    let a = cluster.add_host("svc-a").await.expect("host a");
    let b = cluster.add_host("svc-b").await.expect("host b");
    assert_eq!((a, b), (3, 4), "hosts follow the nodes");
    assert_eq!(cluster.host("svc-b"), Some(b));
    assert!(cluster.add_host("svc-a").await.is_err(), "a name once");
    let (a_ip, b_ip) = (cluster.host_ip(a).unwrap(), cluster.host_ip(b).unwrap());
    assert_ne!(a_ip, b_ip);
    // This cluster's subnet byte is the hosts' third address byte: host a is `tkcX-s0`.
    let ns_a = format!("tkc{}-s0", a_ip.octets()[2]);
    assert!(namespace_exists(&ns_a), "{ns_a} exists");
    // Something listening in the root namespace on the bridge address, and in host b.
    let root = tokio::net::TcpListener::bind((cluster.bridge_ip(), 0))
        .await
        .expect("binds the bridge address");
    let root_port = root.local_addr().unwrap().port();
    let accept = tokio::spawn(async move {
        loop {
            let _ = root.accept().await;
        }
    });
    let mut listener_b = cluster
        .command(b, "timeout")
        .unwrap()
        .args([
            "60",
            "/usr/bin/python3",
            "-m",
            "http.server",
            "--bind",
            "0.0.0.0",
            "7000",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("a listener in host b");
    let nats_ip = cluster.ip(0).unwrap();
    assert!(
        host_reaches(&cluster, a, nats_ip, 4222).await,
        "a host reaches a node"
    );
    assert!(
        host_reaches(&cluster, a, cluster.bridge_ip(), root_port).await,
        "and the root"
    );
    let mut up = false;
    for _ in 0..50 {
        if reachable(b_ip, 7000).await {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "the root reaches host b");

    // Cut from the root only: the nodes are still there.
    cluster.cut_from_root(a).await.expect("cut");
    assert!(!host_reaches(&cluster, a, cluster.bridge_ip(), root_port).await);
    assert!(host_reaches(&cluster, a, nats_ip, 4222).await);
    cluster.heal().await.expect("heal");
    assert!(host_reaches(&cluster, a, cluster.bridge_ip(), root_port).await);

    // Partitioned from the nodes: the root is still there, and host b is not cut.
    cluster
        .partition(&[a], &[0, 1, 2])
        .await
        .expect("partition");
    for n in 0..3 {
        assert!(
            !host_reaches(&cluster, a, cluster.ip(n).unwrap(), 4222).await,
            "node {n}"
        );
    }
    assert!(host_reaches(&cluster, a, cluster.bridge_ip(), root_port).await);
    assert!(host_reaches(&cluster, b, nats_ip, 4222).await);
    cluster.heal().await.expect("heal");
    assert!(host_reaches(&cluster, a, nats_ip, 4222).await);

    // Isolated: nothing either way.
    cluster.isolate(b).await.expect("isolate");
    assert!(!host_reaches(&cluster, b, nats_ip, 4222).await);
    assert!(!reachable(b_ip, 7000).await);
    cluster.heal().await.expect("heal");
    assert!(host_reaches(&cluster, b, nats_ip, 4222).await);

    let _ = listener_b.kill().await;
    accept.abort();
    drop(cluster);
    assert!(!namespace_exists(&ns_a), "{ns_a} goes with the cluster");
}

/// The mean round trip of 5 pings from host `host` to `ip`, in milliseconds.
async fn ping_ms(cluster: &NatsCluster, host: usize, ip: Ipv4Addr) -> f64 {
    let out = cluster
        .command(host, "ping")
        .expect("a host")
        .args(["-n", "-q", "-c", "5", "-i", "0.2", "-W", "3"])
        .arg(ip.to_string())
        .kill_on_drop(true)
        .output()
        .await
        .expect("runs ping");
    let text = String::from_utf8_lossy(&out.stdout);
    // "rtt min/avg/max/mdev = 0.041/0.052/0.070/0.010 ms"
    text.lines()
        .find_map(|l| l.split_once(" = ")?.1.split('/').nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no round trip in ping's output: {text}"))
}

/// Latency between two groups holds their packets both ways and leaves the rest alone; a
/// client address of the root namespace can be cut from chosen members alone; the heal ends
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_between_groups_and_a_cut_client_address() {
    let Some(mut cluster) = NatsCluster::start_or_skip()
        .await
        .expect("NATS cluster starts")
    else {
        return;
    };
    let a = cluster.add_host("rack-a").await.expect("host a");
    let b = cluster.add_host("rack-b").await.expect("host b");
    let b_ip = cluster.host_ip(b).unwrap();
    let node = cluster.ip(0).unwrap();
    let before = ping_ms(&cluster, a, b_ip).await;
    assert!(before < 50.0, "{before} ms before any latency");

    // 100 ms each way between host a and host b (not node 0).
    cluster
        .latency(&[a], &[b], Duration::from_millis(100), 0.0, 7)
        .await
        .expect("latency");
    let slow = ping_ms(&cluster, a, b_ip).await;
    assert!(
        (195.0..1000.0).contains(&slow),
        "{slow} ms between the groups with 100 ms each way"
    );
    let other = ping_ms(&cluster, a, node).await;
    assert!(other < 50.0, "{other} ms to a node outside the groups");
    cluster.heal().await.expect("heal");
    let after = ping_ms(&cluster, a, b_ip).await;
    assert!(after < 50.0, "{after} ms after the heal");

    // A client address, cut from node 0 only.
    let client = cluster.client_ip(3).await.expect("a client address");
    assert_eq!(
        cluster.client_ip(3).await.expect("again"),
        client,
        "idempotent"
    );
    let connect_from = |from: Ipv4Addr, to: Ipv4Addr| async move {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind((from, 0).into())
            .expect("binds the client address");
        matches!(
            tokio::time::timeout(Duration::from_secs(1), socket.connect((to, 4222).into())).await,
            Ok(Ok(_))
        )
    };
    assert!(
        connect_from(client, node).await,
        "the client reaches node 0"
    );
    assert!(
        connect_from(cluster.bridge_ip(), node).await,
        "the root's own address reaches node 0"
    );
    cluster.cut_address(&[0], client).await.expect("cut");
    assert!(!connect_from(client, node).await, "cut from node 0");
    assert!(
        connect_from(client, cluster.ip(1).unwrap()).await,
        "not from node 1"
    );
    assert!(
        connect_from(cluster.bridge_ip(), node).await,
        "the root's own address still reaches node 0"
    );
    cluster.heal().await.expect("heal");
    assert!(connect_from(client, node).await, "healed");
    assert!(
        cluster.client_ip(50).await.is_err(),
        "50 client addresses at most"
    );
}
